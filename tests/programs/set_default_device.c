/* omp_set_default_device changes where constructs run and what is present where.
   feature: api-default-device, device-numbering, api-is-present
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int v = 1;
  omp_set_default_device(3);
#pragma omp target enter data map(to : v)
  printf("default=%d present3=%d present0=%d\n", omp_get_default_device(),
         omp_target_is_present(&v, 3), omp_target_is_present(&v, 0));
  omp_set_default_device(omp_get_initial_device());
  int host = -1;
#pragma omp target map(from : host)
  host = omp_is_initial_device();
  printf("on initial device: %d\n", host);
#pragma omp target exit data map(delete : v) device(3)
  return 0;
}
