/* GCC conformance program: the threads of a parallel loop inside a target region ask
 * the device API (omp_get_num_devices, omp_get_initial_device) while the region runs.
 * libgomp holds its device lock for mapping only, never across the region's function:
 * on the host device the region's function runs between the map and unmap callbacks,
 * with no lock of offload_shim held.
 * osh-expect: same */
#include <omp.h>
#include <stdio.h>

int main(void)
{
  enum { N = 64 };
  int same[N];
  omp_set_max_active_levels(2);
#pragma omp target map(from: same)
#pragma omp parallel for num_threads(4)
  for (int i = 0; i < N; i++)
    same[i] = omp_get_num_devices() == omp_get_initial_device();
  int s = 0;
  for (int i = 0; i < N; i++)
    s += same[i];
  printf("iterations where num_devices == initial_device: %d\n", s);
  return 0;
}
