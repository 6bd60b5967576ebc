/* GCC conformance program for OMP_TARGET_OFFLOAD=mandatory (run with it set): a region
 * on the default device runs (on the host when there is no device: device 0 is then the
 * initial device, which libgomp 12 accepts), then a region on a device number that does
 * not exist is fatal: "\nlibgomp: OMP_TARGET_OFFLOAD is set to MANDATORY, but device not
 * found\n", exit status 1 -- after stdout was flushed by exit().
 * osh-expect: mandatory */
#include <omp.h>
#include <stdio.h>

int main(void)
{
  int x = 1;
#pragma omp target map(tofrom: x)
  x += 41;
  printf("x=%d\n", x);
  int missing = omp_get_num_devices() + 4;
#pragma omp target device(missing) map(tofrom: x)
  x = -1;
  printf("not reached: x=%d\n", x);
  return 0;
}
