/* OMP_TARGET_OFFLOAD: disabled (host execution, 0 devices), mandatory, default.
   feature: env-target-offload, device-numbering
   run: OMP_TARGET_OFFLOAD=disabled
   run: OMP_TARGET_OFFLOAD=DISABLED
   run: OMP_TARGET_OFFLOAD=mandatory
   run: OMP_TARGET_OFFLOAD=default
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int initial = -1, a[3] = {1, 2, 3};
#pragma omp target map(from : initial) map(tofrom : a)
  {
    initial = omp_is_initial_device();
    a[1] = 20;
  }
#pragma omp target enter data map(to : a)
  printf("num_devices=%d initial_device=%d ran_on_host=%d a1=%d present=%d\n",
         omp_get_num_devices(), omp_get_initial_device(), initial, a[1],
         omp_target_is_present(a, omp_get_default_device()));
#pragma omp target exit data map(delete : a)
  return 0;
}
