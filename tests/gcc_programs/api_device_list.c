/* GCC conformance program: the device list as the program sees it (printed, so the test
 * compares it with what offload_shim reports), including omp_get_device_num on the host
 * and omp_target_alloc on every number from -1 to the initial device.
 * osh-expect: device-list */
#include <omp.h>
#include <stdio.h>

int main(void)
{
  int n = omp_get_num_devices();
  printf("num_devices=%d\n", n);
  printf("initial_device=%d\n", omp_get_initial_device());
  printf("default_device=%d\n", omp_get_default_device());
  printf("device_num=%d\n", omp_get_device_num());
  for (int d = -1; d <= n; d++) {
    void *p = omp_target_alloc(64, d);
    printf("alloc(%d)=%s\n", d, p ? "ok" : "NULL");
    omp_target_free(p, d);
  }
  int on_host = -1;
#pragma omp target map(from: on_host)
  on_host = omp_is_initial_device();
  printf("is_initial_device in region=%d\n", on_host);
  return 0;
}
