/* map(always, to: t) of a struct whose pointer member is attached to a mapped pointee:
   the device struct keeps the device pointer, so the region's writes reach the
   pointee (libomptarget 16 and 19.1 leave the host pointer there and lose them, 22.1
   attaches again; docs/conformance.md "Fixed upstream",
   always-pointer-member-reattach).
   feature: fixed-upstream, map-always, map-ptr-and-obj
   modes: exe
*/
#include <stdio.h>
struct T { int n; int *p; };
int main(void) {
  int data[4] = {1, 2, 3, 4};
  struct T t = {4, data};
#pragma omp target enter data map(to : t, t.p[0 : 4])
#pragma omp target map(always, to : t)
  {
    for (int i = 0; i < t.n; i++)
      t.p[i] *= 10;
  }
#pragma omp target exit data map(from : t.p[0 : 4]) map(release : t)
  printf("%d %d %d %d\n", data[0], data[1], data[2], data[3]);
  return 0;
}
