/* omp_target_memcpy_rect: a 2-D and a 3-D sub-volume, host->device->host; the
   query form (NULL dst and src) returns the maximum dimension count.
   feature: api-target-memcpy-rect
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int d = omp_get_default_device(), h = omp_get_initial_device();
  double m[5][6], back[5][6] = {{0}};
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 6; j++) m[i][j] = 10 * i + j;
  double *dm = omp_target_alloc(sizeof m, d);
  size_t vol[2] = {3, 4}, off_dst[2] = {1, 1}, off_src[2] = {2, 0}, dims[2] = {5, 6};
  size_t zero[2] = {0, 0}, full[2] = {5, 6};
  int r1 = omp_target_memcpy_rect(dm, m, sizeof(double), 2, full, zero, zero, dims, dims, d, h);
  int r2 = omp_target_memcpy_rect(back, dm, sizeof(double), 2, vol, off_dst, off_src, dims, dims, h, d);
  int maxdims = omp_target_memcpy_rect(NULL, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, d, h);
  printf("rc=%d %d maxdims=%d\n", r1, r2, maxdims);
  for (int i = 0; i < 5; i++) {
    for (int j = 0; j < 6; j++) printf("%2.0f ", back[i][j]);
    printf("\n");
  }
  int cube[2][3][4], cback[2][3][4] = {{{0}}};
  for (int i = 0; i < 24; i++) ((int *)cube)[i] = i;
  int *dc = omp_target_alloc(sizeof cube, d);
  size_t cd[3] = {2, 3, 4}, cz[3] = {0, 0, 0}, cv[3] = {1, 2, 2}, co[3] = {1, 1, 1};
  omp_target_memcpy_rect(dc, cube, sizeof(int), 3, cd, cz, cz, cd, cd, d, h);
  int r3 = omp_target_memcpy_rect(cback, dc, sizeof(int), 3, cv, co, co, cd, cd, h, d);
  printf("rc3=%d %d %d %d %d\n", r3, cback[1][1][1], cback[1][1][2], cback[1][2][1], cback[1][2][2]);
  omp_target_free(dm, d);
  omp_target_free(dc, d);
  return 0;
}
