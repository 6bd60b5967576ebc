/* __tgt_print_device_info: the plugin's device information for a valid device.
   feature: api-print-device-info
*/
#include <stdint.h>
#include <stdio.h>
int __tgt_print_device_info(int64_t);
int main(void) {
  int x = 0;
#pragma omp target map(tofrom : x)
  x = 1;
  fflush(stdout);
  int rc = __tgt_print_device_info(0);
  fflush(stdout);
  printf("rc=%d x=%d\n", rc, x);
  return 0;
}
