/* LIBOMPTARGET_NEXTGEN_PLUGINS chooses libomptarget 16's x86_64 plugin (classic or
   nextgen); the program behaves the same with either.
   feature: env-nextgen-plugins, device-numbering
   run: LIBOMPTARGET_NEXTGEN_PLUGINS=0
   run: LIBOMPTARGET_NEXTGEN_PLUGINS=1
   run: LIBOMPTARGET_NEXTGEN_PLUGINS=false
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int x = 0, a[100];
  for (int i = 0; i < 100; i++) a[i] = i;
#pragma omp target map(tofrom : x, a)
  {
    x++;
    for (int i = 0; i < 100; i++) a[i] += x;
  }
  printf("num_devices=%d x=%d a99=%d\n", omp_get_num_devices(), x, a[99]);
  return 0;
}
