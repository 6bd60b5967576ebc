/* omp_target_memcpy in every direction with offsets; host to host; device to device
   across devices; invalid devices.
   feature: api-target-memcpy
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int h = omp_get_initial_device();
  int src[8], dst[8] = {0}, mid[8] = {0};
  for (int i = 0; i < 8; i++) src[i] = i + 1;
  int *d0 = omp_target_alloc(sizeof src, 0), *d1 = omp_target_alloc(sizeof src, 1);
  int r1 = omp_target_memcpy(d0, src, sizeof src, 0, 0, 0, h);
  int r2 = omp_target_memcpy(d1, d0, 4 * sizeof(int), 2 * sizeof(int), 0, 1, 0);
  int r3 = omp_target_memcpy(dst, d1, sizeof src, 0, 0, h, 1);
  int r4 = omp_target_memcpy(mid, src, 3 * sizeof(int), sizeof(int), 0, h, h);
  int r5 = omp_target_memcpy(mid, src, sizeof(int), 0, 0, h, 42);
  printf("rc=%d %d %d %d %d\n", r1, r2, r3, r4, r5);
  printf("dst=%d %d %d %d mid=%d %d %d\n", dst[2], dst[3], dst[4], dst[5], mid[1], mid[2], mid[3]);
  omp_target_free(d0, 0);
  omp_target_free(d1, 1);
  return 0;
}
