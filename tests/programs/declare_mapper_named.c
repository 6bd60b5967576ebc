/* a named mapper used by enter/exit data and update, and mapping an array of structs.
   feature: declare-mapper, target-enter-data, target-exit-data, target-update
*/
#include <stdio.h>
#include <stdlib.h>
typedef struct { int len; double *data; double scale; } buf_t;
#pragma omp declare mapper(deep : buf_t b) map(tofrom : b, b.data[0 : b.len])
int main(void) {
  buf_t b = {4, malloc(4 * sizeof(double)), 3.0};
  for (int i = 0; i < 4; i++) b.data[i] = i;
#pragma omp target enter data map(mapper(deep), to : b)
#pragma omp target
  for (int i = 0; i < b.len; i++) b.data[i] *= b.scale;
#pragma omp target update from(mapper(deep) : b)
  printf("after update: %.0f %.0f %.0f %.0f\n", b.data[0], b.data[1], b.data[2], b.data[3]);
#pragma omp target exit data map(mapper(deep), release : b)
  free(b.data);
  return 0;
}
