/* omp_target_alloc memory used through is_device_ptr, copied with omp_target_memcpy.
   feature: is-device-ptr, api-target-alloc, api-target-memcpy
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int d = omp_get_default_device(), h = omp_get_initial_device();
  int n = 64, host[64];
  int *dp = omp_target_alloc(n * sizeof(int), d);
  for (int i = 0; i < n; i++) host[i] = i;
  int rc1 = omp_target_memcpy(dp, host, n * sizeof(int), 0, 0, d, h);
#pragma omp target is_device_ptr(dp)
  for (int i = 0; i < 64; i++) dp[i] += 1000;
  int rc2 = omp_target_memcpy(host, dp, 8 * sizeof(int), 0, 4 * sizeof(int), h, d);
  printf("rc=%d,%d host0=%d host7=%d host8=%d\n", rc1, rc2, host[0], host[7], host[8]);
  omp_target_free(dp, d);
  return 0;
}
