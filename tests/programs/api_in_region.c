/* omp_get_num_devices() from the threads of a parallel loop inside a target region.
   feature: kernel-parallel, api-in-region
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int seen[64] = {0};
#pragma omp target map(tofrom : seen)
#pragma omp parallel for num_threads(4)
  for (int i = 0; i < 64; i++)
    seen[i] = omp_get_num_devices();
  int n = 0;
  for (int i = 0; i < 64; i++)
    n += seen[i] == seen[0];
  printf("devices seen by %d iterations: %d\n", n, seen[0]);
  return 0;
}
