/* a region maps a struct through a declare mapper that attaches its pointer member, in a
   loop: libomptarget 16 and 19.1 never remove the struct's row (the mapper's struct
   component takes no reference) nor its shadow pointer, so the next pass copies the
   struct again (its count is 1) over the attached device pointer and, the pointee's
   device address being the one the stale shadow pointer holds (the pointee kept mapped,
   or unmapped and mapped again in the same block), does not attach it again: the
   region writes through the host address (a map(to: m) region's writes reach the
   host array, a map(tofrom: m) region's are overwritten by the copy back).  22.1
   attaches again after the copy; docs/conformance.md "Fixed upstream",
   struct-copy-over-attached-pointer.  Found by the fuzz programs run in a loop
   (seeds 5001, 5006, 5010, 5011, 5016).
   feature: fixed-upstream, declare-mapper
   modes: exe
   run: -
   run: realloc
*/
#include <omp.h>
#include <stdio.h>
#include <string.h>
struct T { unsigned *p; int n; };
#pragma omp declare mapper(struct T v) map(tofrom: v, v.p[0:8])
static unsigned a[8];
int main(int argc, char **argv) {
  int realloc_ = argc > 1 && strcmp(argv[1], "realloc") == 0;
  for (int i = 0; i < 8; i++)
    a[i] = i;
  struct T m = {a, 8};
  unsigned *q = a;
  for (int rep = 0; rep < 2; rep++) {
    if (realloc_) {
#pragma omp target map(tofrom: m)
      for (int i = 0; i < 8; i++)
        m.p[i] = m.p[i] * 3u + 1u;
    } else {
#pragma omp target map(to: m)
      for (int i = 0; i < 8; i++)
        m.p[i] = m.p[i] * 3u + 1u;
#pragma omp target enter data map(to: q[0:8])
    }
    printf("pass %d: a[0]=%u a[7]=%u present=%d\n", rep, a[0], a[7],
           omp_target_is_present(a, omp_get_default_device()));
  }
  return 0;
}
