/* omp_get_mapped_ptr: NULL for unmapped data and invalid devices, the host pointer
   for the initial device, the device address for mapped data.
   feature: api-get-mapped-ptr
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int d = omp_get_default_device(), h = omp_get_initial_device();
  int a[4] = {1, 2, 3, 4}, b = 0;
#pragma omp target enter data map(to : a)
  int *pa = omp_get_mapped_ptr(a, d), *pa2 = omp_get_mapped_ptr(&a[2], d);
  int v = 0;
  omp_target_memcpy(&v, pa2, sizeof v, 0, 0, h, d);
  printf("mapped=%s diff=%ld value=%d unmapped=%s host=%s invalid=%s\n", pa ? "yes" : "no",
         (long)((char *)pa2 - (char *)pa), v, omp_get_mapped_ptr(&b, d) ? "yes" : "no",
         omp_get_mapped_ptr(&b, h) == &b ? "same" : "other",
         omp_get_mapped_ptr(a, 55) ? "yes" : "no");
#pragma omp target exit data map(delete : a)
  return 0;
}
