/* a construct that maps through a declare mapper after plain constructs with the same
   map types ({TO}: a compiler merges equal constant map-type arrays, so both pass one
   array): the mapper still runs and maps the struct's section (offload_shim served it
   with the plain construct's cheap plan and mapped the struct alone).  Found by
   offload-shim fuzz (seed 719453320).
   feature: declare-mapper
   modes: exe
*/
#include <omp.h>
#include <stdio.h>
static unsigned a[8];
struct T { unsigned *p; int n; };
#pragma omp declare mapper(struct T v) map(tofrom : v, v.p[2 : 6])
int main(void) {
  struct T m = {a, 8};
  int dev = omp_get_default_device();
  for (int i = 0; i < 8; i++)
    a[i] = i;
#pragma omp target enter data map(to : a[2 : 6])
#pragma omp target exit data map(delete : a[2 : 6])
#pragma omp target data map(to : m)
  {
    printf("in data: %d\n", omp_target_is_present(&a[2], dev));
#pragma omp target update from(a[2 : 6])
  }
  printf("after: %d %u %u\n", omp_target_is_present(&a[2], dev), a[2], a[7]);
  return 0;
}
