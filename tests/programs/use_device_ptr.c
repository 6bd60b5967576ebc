/* use_device_ptr: inside target data the pointer is the device address, usable with
   is_device_ptr and omp_target_memcpy.
   feature: use-device-ptr, is-device-ptr, target-data
*/
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  int d = omp_get_default_device(), h = omp_get_initial_device();
  int *a = malloc(8 * sizeof(int));
  for (int i = 0; i < 8; i++) a[i] = i;
  int differs = -1, present = -1;
#pragma omp target data map(tofrom : a[0 : 8])
  {
    int *host = a;
#pragma omp target data use_device_ptr(a)
    {
      differs = a != host;
      present = omp_target_is_present(host, d);
#pragma omp target is_device_ptr(a)
      for (int i = 0; i < 8; i++) a[i] *= 2;
      int one = 100;
      omp_target_memcpy(a, &one, sizeof one, 0, 0, d, h);
    }
  }
  printf("differs=%d present=%d a0=%d a7=%d\n", differs, present, a[0], a[7]);
  free(a);
  return 0;
}
