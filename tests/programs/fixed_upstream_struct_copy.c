/* map(to: s.p[:n]) map(to: s) on one construct (llvm-project PR #70821's program): the
   copy of the struct must keep the attached device pointer in the device struct, so
   the region's write reaches the pointee (clang 16's order copies the struct after
   attaching: libomptarget 16 loses the write; docs/conformance.md "Fixed upstream",
   struct-copy-over-attached-pointer).
   feature: fixed-upstream, map-ptr-and-obj, map-member-of
   modes: exe
*/
#include <stdio.h>
#include <stdlib.h>
struct Descriptor { int *datum; long int x; int xi; long int arr[1][30]; };
int main(void) {
  struct Descriptor dat = {0};
  dat.datum = (int *)calloc(10, sizeof(int));
  int *host = dat.datum;
  dat.xi = 3;
  dat.arr[0][0] = 1;
#pragma omp target enter data map(to : dat.datum[ : 10]) map(to : dat)
#pragma omp target
  {
    dat.xi = 4;
    dat.datum[dat.arr[0][0]] = dat.xi;
  }
#pragma omp target exit data map(from : dat)
#pragma omp target exit data map(from : dat.datum[ : 10])
  printf("xi=%d pointer %s datum[1]=%d\n", dat.xi, dat.datum == host ? "host" : "NOT host",
         host[1]);
  free(host);
  return 0;
}
