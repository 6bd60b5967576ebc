/* omp_target_is_present: mapped, inside a mapping, one past its end, unmapped, the
   initial device, an invalid device.
   feature: api-is-present
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int d = omp_get_default_device();
  int a[10], other = 0;
#pragma omp target enter data map(to : a[2 : 5])
  printf("begin=%d inside=%d end=%d before=%d other=%d host=%d invalid=%d\n",
         omp_target_is_present(&a[2], d), omp_target_is_present(&a[4], d),
         omp_target_is_present(&a[7], d), omp_target_is_present(&a[1], d),
         omp_target_is_present(&other, d), omp_target_is_present(&other, omp_get_initial_device()),
         omp_target_is_present(a, 77));
#pragma omp target exit data map(delete : a[2 : 5])
  return 0;
}
