/* where a device copy starts: an array section at its allocation (no padding), a
   partially mapped struct padded so its members keep their host alignment.
   feature: map-partial-struct, map-tofrom
*/
#include <stdint.h>
#include <stdio.h>
int main(void) {
  static char buf[64] __attribute__((aligned(16)));
  int m = -1, m2 = -1;
#pragma omp target map(tofrom : buf[3 : 10]) map(from : m)
  m = (int)((uintptr_t)&buf[3] % 16);
  struct { char c; int x; double d; } s;
#pragma omp target map(tofrom : s.x, s.d) map(from : m2)
  m2 = (int)((uintptr_t)&s.x % 16);
  printf("section_mod16=%d struct_member_mod16=%d host=%d,%d\n", m, m2,
         (int)((uintptr_t)&buf[3] % 16), (int)((uintptr_t)&s.x % 16));
  return 0;
}
