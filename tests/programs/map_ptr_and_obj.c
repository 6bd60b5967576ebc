/* a struct member pointer and its pointee (PTR_AND_OBJ): the device struct points to
   device memory, the host pointer is restored afterwards.
   feature: map-ptr-and-obj, map-member-of
   run: -
   run: LIBOMPTARGET_INFO=1
*/
#include <stdio.h>
#include <stdlib.h>
typedef struct { int n; double *v; } vec;
int main(void) {
  vec a = {6, malloc(6 * sizeof(double))};
  double *keep = a.v;
  for (int i = 0; i < 6; i++) a.v[i] = i;
#pragma omp target map(tofrom : a, a.v[0 : a.n])
  for (int i = 0; i < a.n; i++) a.v[i] = a.v[i] * a.v[i];
  double s = 0;
  for (int i = 0; i < 6; i++) s += a.v[i];
  printf("sum=%.0f pointer_restored=%d\n", s, a.v == keep);
  free(a.v);
  return 0;
}
