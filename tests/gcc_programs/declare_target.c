/* GCC conformance program: declare target functions called from regions and a declare
 * target variable moved with target update (the region code itself does not name it:
 * on offload_shim's host device the code that names it sees the host variable).
 * osh-expect: same */
#include <stdio.h>

#pragma omp declare target
static double poly(double x)
{
  return 3 * x * x + 2 * x + 1;
}
int table[8] = {1, 1, 2, 3, 5, 8, 13, 21};
#pragma omp end declare target

int main(void)
{
  enum { N = 10 };
  double out[N];
#pragma omp target map(from: out)
  for (int i = 0; i < N; i++)
    out[i] = poly(i);
  printf("poly: %g %g %g\n", out[0], out[1], out[9]);

  int copy[8];
#pragma omp target update to(table)
  for (int i = 0; i < 8; i++)
    copy[i] = -1;
#pragma omp target update from(table)
  for (int i = 0; i < 8; i++)
    copy[i] = table[i];
  printf("table: %d %d %d\n", copy[0], copy[5], copy[7]);
  table[7] = 99;
#pragma omp target update to(table[7:1])
#pragma omp target update from(table)
  printf("table[7]=%d\n", table[7]);
  return 0;
}
