/* GCC conformance program: zero-length array sections (map(p[0:0]) of a pointer into a
 * block mapped by an enclosing data region gets the device address), sections with an
 * offset through a pointer, a pointer to a mapped array used in a region.
 * osh-expect: same */
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
  enum { N = 50 };
  int *buf = malloc(N * sizeof(int));
  for (int i = 0; i < N; i++)
    buf[i] = i;
  int *mid = buf + 20;
#pragma omp target data map(tofrom: buf[0:N])
  {
#pragma omp target map(mid[0:0])
    for (int i = 0; i < 10; i++)
      mid[i] = -mid[i];
#pragma omp target map(tofrom: buf[0:0])
    buf[0] = 777;
  }
  printf("buf[0]=%d buf[19]=%d buf[20]=%d buf[29]=%d buf[30]=%d\n", buf[0], buf[19], buf[20],
         buf[29], buf[30]);

  int empty_sum = 0;
  int n = 0;
#pragma omp target map(to: buf[0:n]) map(tofrom: empty_sum)
  empty_sum = 42;
  printf("empty section region: %d\n", empty_sum);
  free(buf);
  return 0;
}
