/* MEMBER_OF: members of one struct mapped in one construct share its device copy.
   feature: map-member-of, map-partial-struct
*/
#include <stdio.h>
struct S { int a; double b; char c; int d[4]; };
int main(void) {
  struct S s = {1, 2.5, 'x', {1, 2, 3, 4}};
#pragma omp target map(tofrom : s.a, s.b, s.d[1 : 2])
  {
    s.a += (int)s.b;
    s.d[1] *= 10;
    s.d[2] *= 10;
  }
  printf("a=%d b=%.1f c=%c d=%d,%d,%d,%d\n", s.a, s.b, s.c, s.d[0], s.d[1], s.d[2], s.d[3]);
  return 0;
}
