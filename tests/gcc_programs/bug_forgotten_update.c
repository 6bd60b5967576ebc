/* GCC conformance program with a deliberate mapping bug: inside a target data region the
 * host changes the input and forgets "target update to", so the region computes on the
 * device's old copy.  Hidden by the host fallback, shown by a separate device memory.
 * osh-expect: bug
 * osh-host-device-line: total=45 */
#include <stdio.h>

int main(void)
{
  int in[10], total = 0;
  for (int i = 0; i < 10; i++)
    in[i] = i;
#pragma omp target data map(to: in)
  {
    for (int i = 0; i < 10; i++)
      in[i] = 100;               /* new input ... */
    /* ... but no "#pragma omp target update to(in)" */
#pragma omp target map(tofrom: total)
    for (int i = 0; i < 10; i++)
      total += in[i];
  }
  printf("total=%d\n", total);
  return 0;
}
