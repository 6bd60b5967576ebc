/* requires unified_shared_memory: a struct's pointer member with a zero-length section
   (map(to: s) map(always, tofrom: s.p[1:0])) has no device copy to attach; the host's
   pointer keeps its value (libomptarget 16 writes the absent pointee's address minus
   the offset into it -- under unified shared memory the pointer's device copy is the
   host's own -- and 19.1 crashes there; 22.1 leaves it: docs/conformance.md "Fixed
   upstream", usm-attach-over-host-pointer).  Found by offload-shim fuzz (seed
   469565578).
   feature: fixed-upstream, requires-usm, map-ptr-and-obj, map-zero-length
   modes: exe
*/
#include <stdio.h>
#pragma omp requires unified_shared_memory
static unsigned a[4] = {1, 2, 3, 4};
int main(void) {
  struct { unsigned *p; int n; } s = {a, 4};
#pragma omp target map(to : s) map(always, tofrom : s.p[1 : 0])
  {
    for (int i = 1; i < 1; i++)
      s.p[i] = 0;
  }
  printf("pointer kept %d\n", s.p == a);
  printf("%u %u %u %u\n", s.p[0], s.p[1], s.p[2], s.p[3]);
  return 0;
}
