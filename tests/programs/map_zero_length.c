/* zero-length array sections: of mapped data -> the device address; of unmapped data
   -> the host value (OpenMP 5.1, libomptarget 16).
   feature: map-zero-length, unmapped-pointer
*/
#include <stdint.h>
#include <stdio.h>
int main(void) {
  int a[8] = {0}, b[8] = {0};
  int *pa = a, *pb = b;
  uintptr_t ha = (uintptr_t)pa, hb = (uintptr_t)pb;
  int mapped_changed = -1, unmapped_kept = -1, val = -1;
#pragma omp target enter data map(to : a)
#pragma omp target map(to : pa[0 : 0]) map(from : mapped_changed, val)
  {
    mapped_changed = (uintptr_t)pa != ha;
    val = pa[0] + 1;
  }
#pragma omp target map(to : pb[0 : 0]) map(from : unmapped_kept)
  unmapped_kept = (uintptr_t)pb == hb;
#pragma omp target exit data map(delete : a)
  printf("mapped_changed=%d val=%d unmapped_kept=%d\n", mapped_changed, val, unmapped_kept);
  return 0;
}
