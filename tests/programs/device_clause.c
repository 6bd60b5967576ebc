/* device() clause: explicit devices, the initial device (host execution) and data on
   one device only.
   feature: device-numbering, api-is-present, api-initial-device
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int host = omp_get_initial_device();
  int on_host = -1, on_dev = -1, x = 1;
#pragma omp target device(host) map(from : on_host)
  on_host = omp_is_initial_device();
#pragma omp target device(1) map(from : on_dev)
  on_dev = omp_is_initial_device();
#pragma omp target enter data map(to : x) device(2)
  printf("host=%d dev=%d present2=%d present0=%d present_host=%d\n", on_host, on_dev,
         omp_target_is_present(&x, 2), omp_target_is_present(&x, 0),
         omp_target_is_present(&x, host));
#pragma omp target exit data map(delete : x) device(2)
  return 0;
}
