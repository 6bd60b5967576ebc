/* nested target data regions: reference counts, copies only at the outermost ends.
   feature: target-data, map-tofrom, api-is-present
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int d = omp_get_default_device();
  int a[4] = {1, 1, 1, 1};
#pragma omp target data map(tofrom : a)
  {
#pragma omp target data map(tofrom : a)
    {
#pragma omp target
      for (int i = 0; i < 4; i++) a[i] += 1;
    }
    printf("inner end: host a0=%d present=%d\n", a[0], omp_target_is_present(a, d));
#pragma omp target
    for (int i = 0; i < 4; i++) a[i] *= 10;
  }
  printf("outer end: a=%d,%d present=%d\n", a[0], a[3], omp_target_is_present(a, d));
  return 0;
}
