/* device numbering and the device query routines, on the host and in a region.
   feature: api-num-devices, api-initial-device, api-device-num, api-default-device,
   feature: device-numbering
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int nd = omp_get_num_devices();
  printf("num_devices=%d initial=%d device_num=%d default=%d is_initial=%d\n", nd,
         omp_get_initial_device(), omp_get_device_num(), omp_get_default_device(),
         omp_is_initial_device());
  for (int d = 0; d < nd; d++) {
    int num = -1, init = -1;
#pragma omp target device(d) map(from : num, init)
    {
      num = omp_get_device_num();
      init = omp_is_initial_device();
    }
    printf("device %d: device_num=%d is_initial=%d\n", d, num, init);
  }
  return 0;
}
