/* compiled with -g: the fatal error and the info traces name the construct's source
   location and the variables.
   feature: diagnostics, fatal, env-info
   cflags: -g
   run: -
   run: LIBOMPTARGET_INFO=1
*/
#include <stdio.h>
int main(void) {
  int a[2] = {0};
#pragma omp target data map(present, to : a)
  a[0] = 1;
  return 0;
}
