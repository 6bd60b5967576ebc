/* omp_target_alloc / omp_target_free on devices and on the initial device; size 0;
   an invalid device number.
   feature: api-target-alloc
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int d = omp_get_default_device(), h = omp_get_initial_device();
  void *a = omp_target_alloc(128, d), *b = omp_target_alloc(128, h);
  void *z = omp_target_alloc(0, d), *bad = omp_target_alloc(16, omp_get_num_devices() + 3);
  printf("device=%s host=%s zero=%s invalid=%s\n", a ? "ok" : "null", b ? "ok" : "null",
         z ? "ok" : "null", bad ? "ok" : "null");
  omp_target_free(a, d);
  omp_target_free(b, h);
  omp_target_free(NULL, d);
  printf("freed\n");
  return 0;
}
