/* requires unified_address: device pointers from omp_target_alloc used directly.
   feature: requires-unified-address, api-target-alloc, is-device-ptr
*/
#include <omp.h>
#include <stdio.h>
#pragma omp requires unified_address
int main(void) {
  int d = omp_get_default_device();
  int *p = omp_target_alloc(4 * sizeof(int), d);
  int ok = 0;
#pragma omp target is_device_ptr(p) map(from : ok)
  {
    for (int i = 0; i < 4; i++) p[i] = i * 7;
    ok = p[3] == 21;
  }
  int h[4];
  omp_target_memcpy(h, p, sizeof h, 0, 0, omp_get_initial_device(), d);
  printf("ok=%d h3=%d\n", ok, h[3]);
  omp_target_free(p, d);
  return 0;
}
