/* enter/exit data of array sections of a heap buffer; a region sees the sections.
   feature: target-enter-data, target-exit-data, map-tofrom
*/
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  int n = 1000;
  double *x = malloc(n * sizeof *x);
  for (int i = 0; i < n; i++) x[i] = i;
#pragma omp target enter data map(to : x[0 : n])
#pragma omp target
  for (int i = 0; i < n; i++) x[i] = 2 * x[i];
#pragma omp target exit data map(from : x[100 : 10])
  double s = 0;
  for (int i = 0; i < n; i++) s += x[i];
  printf("sum=%.0f x[105]=%.0f x[5]=%.0f\n", s, x[105], x[5]);
#pragma omp target exit data map(delete : x[0 : n])
  free(x);
  return 0;
}
