/* use_device_ptr of a pointer whose data is not mapped: NULL under libomptarget 16 and
   19.1 (the return_param of a failed look-up), the host value under 22.1 (OpenMP 5.1,
   llvm-project PR #174659).
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
