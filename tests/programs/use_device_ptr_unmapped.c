/* use_device_ptr of a pointer whose data is not mapped: it keeps its host value
   (OpenMP 5.1 / libomptarget 16 return_param of a null mapping).
   feature: use-device-ptr, unmapped-pointer
*/
#include <stdio.h>
int main(void) {
  int x = 3;
  int *p = &x, *orig = p, same = -1;
#pragma omp target data map(alloc : p[0:0]) use_device_ptr(p)
  same = p == orig;
  printf("same=%d\n", same);
  return 0;
}
