/* a program whose only offload constructs are data directives (its device image has
   no kernel): mappings, presence and copies behave as usual.
   feature: target-enter-data, target-exit-data, target-update, api-is-present, image-no-kernel
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int d = omp_get_default_device();
  int v[3] = {1, 2, 3};
#pragma omp target enter data map(to : v)
  int p1 = omp_target_is_present(v, d);
  v[0] = 50;
#pragma omp target update from(v)
#pragma omp target exit data map(from : v)
  printf("num_devices=%d present=%d after=%d v0=%d\n", omp_get_num_devices(), p1,
         omp_target_is_present(v, d), v[0]);
  return 0;
}
