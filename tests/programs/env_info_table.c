/* LIBOMPTARGET_INFO=4 (dump the mapping table when a construct fails) and a failure.
   feature: env-info, diagnostics, fatal
   run: LIBOMPTARGET_INFO=4
   run: LIBOMPTARGET_INFO=-1
*/
#include <stdio.h>
int main(void) {
  int a[4] = {0}, b = 0;
#pragma omp target enter data map(to : a)
#pragma omp target map(present, tofrom : b)
  b = a[0];
  printf("not reached\n");
  return 0;
}
