/* GCC conformance program with a deliberate reference-count bug: the array is entered
 * twice (reference count 2) but exited once with map(from:), which only drops the count
 * to 1, so nothing is copied back.  Hidden by the host fallback, shown by a device with
 * its own memory.
 * osh-expect: bug
 * osh-host-device-line: v[0]=1 v[7]=8 */
#include <stdio.h>

static void prepare(int *v, int n)
{
#pragma omp target enter data map(to: v[0:n])
}

int main(void)
{
  int v[8];
  for (int i = 0; i < 8; i++)
    v[i] = i + 1;
  prepare(v, 8);
#pragma omp target enter data map(to: v)
#pragma omp target
  for (int i = 0; i < 8; i++)
    v[i] *= 100;
#pragma omp target exit data map(from: v)
  printf("v[0]=%d v[7]=%d\n", v[0], v[7]);
  return 0;
}
