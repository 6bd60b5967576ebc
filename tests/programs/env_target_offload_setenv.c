/* OMP_TARGET_OFFLOAD=DISABLED set by main itself (setenv): libomptarget 16 and 22.1
   read the policy when the program's image registers, before main, so the region
   still runs on the device; 19.1 reads it at the first construct, so it runs on the
   host -- while omp_get_num_devices() still counts 19.1's devices.
   feature: env-target-offload
   modes: exe
*/
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  setenv("OMP_TARGET_OFFLOAD", "DISABLED", 1);
  int initial = -1, a[2] = {1, 2};
#pragma omp target map(from : initial) map(tofrom : a)
  {
    initial = omp_is_initial_device();
    a[1] = 20;
  }
  printf("num_devices=%d initial_device=%d ran_on_host=%d a1=%d\n", omp_get_num_devices(),
         omp_get_initial_device(), initial, a[1]);
  return 0;
}
