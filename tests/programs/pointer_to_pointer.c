/* a pointer member of a struct reached through a pointer (multi-level PTR_AND_OBJ).
   feature: map-ptr-and-obj
*/
#include <stdio.h>
#include <stdlib.h>
typedef struct { int n; int *data; } arr_t;
typedef struct { arr_t *arr; int scale; } holder_t;
int main(void) {
  arr_t a = {4, malloc(4 * sizeof(int))};
  holder_t h = {&a, 3};
  for (int i = 0; i < 4; i++) a.data[i] = i + 1;
  int *keep = a.data;
#pragma omp target data map(to : a) map(tofrom : a.data[0 : 4])
  {
#pragma omp target map(to : h.scale)
    for (int i = 0; i < 4; i++) a.data[i] *= h.scale;
  }
  printf("%d %d %d %d restored=%d\n", a.data[0], a.data[1], a.data[2], a.data[3], a.data == keep);
  free(a.data);
  return 0;
}
