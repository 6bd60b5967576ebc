/* omp_target_alloc memory the program never frees, and data it leaves mapped: nothing
   is printed at exit (libomptarget frees both silently; offload_shim counts them in the
   report of `offload-shim run --report` only).
   feature: api-target-alloc, exit-path
   stderr: exact
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int dev = omp_get_default_device();
  int *p = omp_target_alloc(100 * sizeof(int), dev);
  int *q = omp_target_alloc(3000, dev);
#pragma omp target is_device_ptr(p)
  for (int i = 0; i < 100; i++) p[i] = i;
  int v = -1;
#pragma omp target is_device_ptr(p) map(from : v)
  v = p[42];
  static double kept[16];
#pragma omp target enter data map(to : kept)
  printf("v=%d q=%s\n", v, q ? "allocated" : "null");
  return 0;
}
