/* ompx_hold: a held mapping survives exit data delete until the region ends.
   feature: map-ompx-hold, api-is-present
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int d = omp_get_default_device();
  int x = 5;
#pragma omp target data map(ompx_hold, tofrom : x)
  {
#pragma omp target exit data map(delete : x)
    printf("held after delete: %d\n", omp_target_is_present(&x, d));
#pragma omp target
    x += 1;
  }
  printf("after region: present=%d x=%d\n", omp_target_is_present(&x, d), x);
  return 0;
}
