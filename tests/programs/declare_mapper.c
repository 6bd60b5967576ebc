/* a user-defined mapper that maps the pointee of a struct member.
   feature: declare-mapper
*/
#include <stdio.h>
#include <stdlib.h>
typedef struct { int n; int *p; } vec_t;
#pragma omp declare mapper(vec_t v) map(v, v.p[0 : v.n])
int main(void) {
  vec_t v = {5, calloc(5, sizeof(int))};
#pragma omp target map(tofrom : v)
  for (int i = 0; i < v.n; ++i) v.p[i] = (i + 1) * (i + 1);
  int s = 0;
  for (int i = 0; i < v.n; i++) s += v.p[i];
  printf("sum=%d\n", s);
  free(v.p);
  return 0;
}
