/* use_device_ptr and use_device_addr of data that is not mapped: libomptarget 16 and
   19.1 give NULL, 22.1 the original address (OpenMP 5.1's rule, llvm-project PR
   #174659); LIBOMPTARGET_INFO=1 shows the constructs' arguments.
   feature: use-device-ptr, use-device-addr, unmapped-pointer
   run: -
   run: LIBOMPTARGET_INFO=1
*/
#include <stdint.h>
#include <stdio.h>
int main(void) {
  int x = 3, y = 4, z[2] = {5, 6};
  int *p = &x, *orig = p;
  uintptr_t py = 0, pz = 0;
  int samep = -1, nullp = -1;
#pragma omp target data map(alloc : p[0:0]) use_device_ptr(p)
  {
    samep = p == orig;
    nullp = p == 0;
  }
#pragma omp target data map(to : x) use_device_addr(y, z)
  {
    py = (uintptr_t)&y;
    pz = (uintptr_t)&z[1];
  }
  printf("use_device_ptr: same=%d null=%d\n", samep, nullp);
  printf("use_device_addr scalar: same=%d null=%d\n", py == (uintptr_t)&y, py == 0);
  printf("use_device_addr array: same=%d\n", pz == (uintptr_t)&z[1]);
  return 0;
}
