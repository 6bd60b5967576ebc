/* a program without target regions still has libomptarget 16's device list.
   feature: device-numbering, api-num-devices, api-initial-device
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  printf("num_devices=%d initial_device=%d\n", omp_get_num_devices(), omp_get_initial_device());
  return 0;
}
