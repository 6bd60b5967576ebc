/* a few megabytes mapped to and from, in several regions.
   feature: map-tofrom
*/
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  size_t n = 1 << 20;
  double *a = malloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) a[i] = (double)(i % 1000);
  for (int r = 0; r < 3; r++) {
#pragma omp target teams distribute parallel for map(tofrom : a[0 : n])
    for (size_t i = 0; i < n; i++) a[i] = a[i] * 0.5 + 1;
  }
  double s = 0;
  for (size_t i = 0; i < n; i++) s += a[i];
  printf("sum=%.3f\n", s);
  free(a);
  return 0;
}
