/* GCC conformance program: map(to/from/tofrom/alloc) of arrays and scalars on target,
 * firstprivate scalars, array sections with an offset.
 * osh-expect: same */
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
  enum { N = 64 };
  double a[N], b[N], c[N];
  int *p = malloc(N * sizeof *p);
  for (int i = 0; i < N; i++) {
    a[i] = i;
    b[i] = 2.0 * i;
    c[i] = -1;
    p[i] = i;
  }
  double scale = 3.0, sum = 0;
  int n = N;
#pragma omp target map(to: a, b) map(from: c) map(tofrom: sum) firstprivate(scale)
  for (int i = 0; i < n; i++) {
    c[i] = a[i] * scale + b[i];
    sum += c[i];
  }
  printf("c[0]=%g c[63]=%g sum=%g\n", c[0], c[63], sum);

#pragma omp target map(tofrom: p[8:16])
  for (int i = 8; i < 24; i++)
    p[i] *= 10;
  long t = 0;
  for (int i = 0; i < N; i++)
    t += p[i];
  printf("p[7]=%d p[8]=%d p[23]=%d p[24]=%d total=%ld\n", p[7], p[8], p[23], p[24], t);

  int tmp[4];
#pragma omp target map(alloc: tmp) map(from: c[0:4])
  {
    for (int i = 0; i < 4; i++)
      tmp[i] = i * i;
    for (int i = 0; i < 4; i++)
      c[i] = tmp[3 - i];
  }
  printf("c=%g %g %g %g\n", c[0], c[1], c[2], c[3]);
  free(p);
  return 0;
}
