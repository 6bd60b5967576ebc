/* GCC conformance program with a deliberate mapping bug: the region writes an array that
 * is mapped to only (map(to:) where map(tofrom:) was meant), so the results stay on the
 * device.  libgomp's host fallback hides it (one memory); a device with its own memory
 * shows the host's old values.
 * osh-expect: bug
 * osh-host-device-line: squares: 0 1 2 3 */
#include <stdio.h>

int main(void)
{
  int sq[4] = {0, 1, 2, 3};
#pragma omp target map(to: sq)
  for (int i = 0; i < 4; i++)
    sq[i] = sq[i] * sq[i];
  printf("squares: %d %d %d %d\n", sq[0], sq[1], sq[2], sq[3]);
  return 0;
}
