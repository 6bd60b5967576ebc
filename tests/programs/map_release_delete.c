/* exit data release decrements, delete removes whatever the count.
   feature: map-release, map-delete, target-enter-data, target-exit-data, api-is-present
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int d = omp_get_default_device();
  int x[4] = {1, 2, 3, 4};
#pragma omp target enter data map(to : x)
#pragma omp target enter data map(to : x)
#pragma omp target enter data map(to : x)
  printf("after 3 enters: %d\n", omp_target_is_present(x, d));
#pragma omp target exit data map(release : x)
  printf("after release: %d\n", omp_target_is_present(x, d));
#pragma omp target exit data map(delete : x)
  printf("after delete: %d\n", omp_target_is_present(x, d));
#pragma omp target exit data map(release : x)
  printf("release of unmapped: %d\n", omp_target_is_present(x, d));
  return 0;
}
