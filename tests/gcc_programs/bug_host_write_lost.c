/* GCC conformance program with a deliberate mapping bug: an array mapped tofrom by an
 * enclosing data region is written on the host inside that region; at the end of the
 * region the device copy is copied back over the host's writes.  Hidden by the host
 * fallback, shown by a device with its own memory.
 * osh-expect: bug
 * osh-host-device-line: flags: 0 0 0 */
#include <stdio.h>

int main(void)
{
  int flags[3] = {0, 0, 0};
#pragma omp target data map(tofrom: flags)
  {
    flags[0] = flags[1] = flags[2] = 1;   /* host write, never sent to the device */
  }
  printf("flags: %d %d %d\n", flags[0], flags[1], flags[2]);
  return 0;
}
