/* the same kernel construct again and again on a row an `enter data` made, with `omp_target_is_present` and `omp_get_mapped_ptr` on that row between the repeats (questions that drop no reference: the kernels still repeat).
   feature: kernel-present, api-is-present, api-get-mapped-ptr
   run: -
   run: OFFLOAD_SHIM_NO_REPEAT=1
*/
#include <omp.h>
#include <stdio.h>
static long x = 0;
int main(void) {
  int dev = omp_get_default_device(), present = 0, mapped = 0;
#pragma omp target enter data map(to: x)
  for (int it = 0; it < 200; it++) {
#pragma omp target map(tofrom: x)
    { x += 1; }
    present += omp_target_is_present(&x, dev);
  }
  for (int it = 0; it < 200; it++) {
#pragma omp target map(tofrom: x)
    { x += 2; }
    mapped += omp_get_mapped_ptr(&x, dev) != NULL;
  }
#pragma omp target exit data map(from: x)
  printf("x %ld present %d mapped %d\n", x, present, mapped);
  return 0;
}
