/* mapping a larger section of data that is mapped smaller: libomptarget's explicit
   extension error and a fatal error.
   feature: diagnostics, fatal, map-tofrom
*/
#include <stdio.h>
int main(void) {
  int a[10] = {0};
  fprintf(stderr, "mapping a[2:3], then a[0:10]\n");
#pragma omp target enter data map(to : a[2 : 3])
#pragma omp target map(tofrom : a[0 : 10])
  a[0] = 1;
  printf("not reached %d\n", a[0]);
  return 0;
}
