/* GCC conformance program: target data regions that fall back to the host (if(0)) nested
 * with ones on the device, enter data with always, and a region that finds some of its
 * list items present and maps the others.
 * osh-expect: same */
#include <stdio.h>

int main(void)
{
  int a[10], b[10], c[10];
  for (int i = 0; i < 10; i++) {
    a[i] = i;
    b[i] = 10 * i;
    c[i] = 0;
  }
  int yes = 1, no = 0;
#pragma omp target data map(tofrom: a) if(yes)
  {
#pragma omp target data map(tofrom: b) if(no)
    {
#pragma omp target data map(to: b) map(from: c)
      {
#pragma omp target
        for (int i = 0; i < 10; i++)
          c[i] = a[i] + b[i];
      }
#pragma omp target map(tofrom: a, c)
      for (int i = 0; i < 10; i++)
        a[i] = c[i] * 2;
    }
  }
  printf("a: %d %d %d  c: %d %d\n", a[0], a[1], a[9], c[1], c[9]);
#pragma omp target enter data map(always, to: a)
#pragma omp target map(a, b)
  for (int i = 0; i < 10; i++)
    a[i] += b[i];
#pragma omp target exit data map(from: a)
  printf("a: %d %d\n", a[0], a[9]);
  return 0;
}
