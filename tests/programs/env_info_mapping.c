/* LIBOMPTARGET_INFO: the data-transfer (0x20), mapping (0x8) and kernel-argument (0x1)
   traces of libomptarget 16, with source names and locations (-g is not needed).
   feature: env-info
   run: LIBOMPTARGET_INFO=32
   run: LIBOMPTARGET_INFO=8
   run: LIBOMPTARGET_INFO=1
   run: LIBOMPTARGET_INFO=2
   run: LIBOMPTARGET_INFO=4
   run: LIBOMPTARGET_INFO=16
   run: LIBOMPTARGET_INFO=64
   run: LIBOMPTARGET_INFO=-1
*/
#include <stdio.h>
int main(void) {
  int a[4] = {1, 2, 3, 4}, s = 0;
#pragma omp target data map(tofrom : a)
  {
#pragma omp target map(tofrom : a) map(from : s)
    s = a[0] + a[3];
    a[1] = 7;
#pragma omp target update from(a[1 : 2])
  }
  printf("s=%d\n", s);
  return 0;
}
