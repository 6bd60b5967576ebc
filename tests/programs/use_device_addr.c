/* use_device_addr on an array and a scalar.
   feature: use-device-addr, target-data
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int d = omp_get_default_device(), h = omp_get_initial_device();
  int arr[4] = {1, 2, 3, 4}, s = 7;
  int differs = -1;
#pragma omp target data map(tofrom : arr, s)
  {
    int *harr = arr;
#pragma omp target data use_device_addr(arr, s)
    {
      differs = (void *)&arr[0] != (void *)harr;
      int v = 40;
      omp_target_memcpy(&arr[1], &v, sizeof v, 0, 0, d, h);
      omp_target_memcpy(&s, &v, sizeof v, 0, 0, d, h);
    }
  }
  printf("differs=%d arr1=%d s=%d\n", differs, arr[1], s);
  return 0;
}
