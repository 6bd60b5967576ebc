/* GCC conformance program: declare target functions called from regions, a declare
 * target counter the regions change and the host fetches with target update from, a
 * declare target table moved with target update both ways and mapped by a region.
 * osh-expect: same */
#include <stdio.h>

#pragma omp declare target
static double poly(double x)
{
  return 3 * x * x + 2 * x + 1;
}
int table[8] = {1, 1, 2, 3, 5, 8, 13, 21};
int counter = 6;
static void count(void)
{
#pragma omp atomic update
  counter++;
}
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

#pragma omp target
#pragma omp parallel for num_threads(4)
  for (int i = 0; i < 40; i++)
    count();
#pragma omp target update from(counter)
  int sum = 0;
#pragma omp target map(tofrom: table, sum)
  for (int i = 0; i < 8; i++)
    sum += table[i];
  printf("counter=%d sum=%d\n", counter, sum);
  return 0;
}
