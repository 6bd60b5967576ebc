/* omp_target_memset (OpenMP 6.0; libomptarget 19.1 / 22.1 export it, clang 19 and 22
   declare it in omp.h; clang-16 cannot build this program) on memory from
   omp_target_alloc, read back with omp_target_memcpy and by a kernel.
   expect: memset 1010101 1010101 kernel 16843009 host 7 */
#include <omp.h>
#include <stdio.h>
int main(void) {
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  int *d = omp_target_alloc(8 * sizeof(int), dev);
  omp_target_memset(d, 0x01, 8 * sizeof(int), dev);
  int h[8] = {0};
  omp_target_memcpy(h, d, sizeof h, 0, 0, host, dev);
  int k = 0;
#pragma omp target is_device_ptr(d) map(from: k)
  k = d[3];
  int x[2] = {0, 0};
  omp_target_memset(x, 7, 1, host);
  printf("memset %x %x kernel %d host %d\n", h[0], h[7], k, x[0]);
  omp_target_free(d, dev);
  return 0;
}
