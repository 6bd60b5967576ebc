/* omp_get_device_num, omp_get_initial_device, omp_target_is_present,
   omp_get_mapped_ptr and omp_target_alloc/free from the threads of a parallel loop
   inside a target region, while the region's own data and a target data region are
   mapped.
   feature: kernel-parallel, api-in-region
*/
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
int main(void) {
  int num[64], initial[64], here[64], there[64], away[64], mapped[64], alloc[64];
  int x = 7, y = 8;
  uintptr_t hx = (uintptr_t)&x, hy = (uintptr_t)&y, hn = (uintptr_t)num;
#pragma omp target data map(to : x)
#pragma omp target map(from : num, initial, here, there, away, mapped, alloc)
#pragma omp parallel for num_threads(4)
  for (int i = 0; i < 64; i++) {
    num[i] = omp_get_device_num();
    initial[i] = omp_get_initial_device();
    here[i] = omp_target_is_present((void *)hx, 0);
    there[i] = omp_target_is_present((void *)hn, 0);
    away[i] = omp_target_is_present((void *)hy, 0);
    mapped[i] = omp_get_mapped_ptr((void *)hx, 0) != NULL;
    void *p = omp_target_alloc(64, 0);
    alloc[i] = p != NULL;
    omp_target_free(p, 0);
  }
  int same = 0;
  for (int i = 0; i < 64; i++)
    same += num[i] == num[0] && initial[i] == initial[0] && here[i] == here[0] &&
            there[i] == there[0] && away[i] == away[0] && mapped[i] == mapped[0] &&
            alloc[i] == alloc[0];
  printf("iterations that agree: %d\n", same);
  printf("device_num %d initial %d present(x) %d present(region data) %d present(y) %d "
         "mapped(x) %d alloc %d\n", num[0], initial[0], here[0], there[0], away[0],
         mapped[0], alloc[0]);
  printf("after: present(x) %d\n", omp_target_is_present(&x, 0));
  return 0;
}
