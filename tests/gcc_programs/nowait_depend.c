/* GCC conformance program: target nowait with depend clauses (a chain in/out over three
 * arrays), target update and enter/exit data with depend, taskwait.
 * osh-expect: same */
#include <stdio.h>

int main(void)
{
  enum { N = 256 };
  static double x[N], y[N], z[N];
  for (int i = 0; i < N; i++) {
    x[i] = i;
    y[i] = 0;
    z[i] = 0;
  }
#pragma omp parallel num_threads(4)
#pragma omp single
  {
#pragma omp target enter data map(to: x) map(alloc: y, z) depend(out: x) nowait
#pragma omp target nowait depend(in: x) depend(out: y)
    for (int i = 0; i < N; i++)
      y[i] = 2 * x[i];
#pragma omp target nowait depend(in: y) depend(out: z)
    for (int i = 0; i < N; i++)
      z[i] = y[i] + 1;
#pragma omp target nowait depend(inout: x) depend(in: z)
    for (int i = 0; i < N; i++)
      x[i] = z[i] * 10;
#pragma omp target update from(x, z) depend(inout: x, z) nowait
#pragma omp taskwait
    printf("x[1]=%g x[255]=%g z[3]=%g\n", x[1], x[255], z[3]);
#pragma omp target exit data map(from: y) map(release: x, z) depend(inout: y)
  }
  double s = 0;
  for (int i = 0; i < N; i++)
    s += y[i];
  printf("sum y=%g\n", s);
  return 0;
}
