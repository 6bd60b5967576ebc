/* a member left out of a partially mapped struct lies in the alignment padding before
   the struct's device copy: it is not mapped (libomptarget 16 registers the padding as
   mapped host memory and loses the region's write: docs/conformance.md "Fixed
   upstream", partial-struct-padding).
   feature: fixed-upstream, map-partial-struct
   modes: exe
*/
#include <omp.h>
#include <stdio.h>
struct S { int a; int b; double c; int d; };
int main(void) {
  struct S s = {1, 2, 3.5, 4};
  /* s.b is at offset 4 of an 8-aligned struct: the combined entry is padded by 4 */
#pragma omp target enter data map(to : s.b, s.d)
  int present = omp_target_is_present(&s.a, omp_get_default_device());
  int saw_one = 0;
#pragma omp target map(tofrom : s.a) map(from : saw_one)
  {
    saw_one = s.a == 1;
    s.a = 100;
  }
#pragma omp target exit data map(from : s.b, s.d)
  printf("s.a present before: %d\n", present);
  printf("region read s.a == 1: %s\n", saw_one ? "yes" : "no");
  printf("host s.a=%d s.b=%d s.d=%d\n", s.a, s.b, s.d);
  return 0;
}
