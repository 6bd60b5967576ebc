/* a partially mapped struct whose first mapped member is not 16-aligned: members keep
   their alignment on the device (libomptarget pads the begin address).
   feature: map-partial-struct
*/
#include <stdint.h>
#include <stdio.h>
struct S { int a; int b; double *p; long long q; };
int main(void) {
  double buf[3] = {1, 2, 3};
  struct S s = {1, 2, buf, 7};
  int aligned = -1;
#pragma omp target map(tofrom : s.b, s.q) map(from : aligned)
  {
    aligned = ((uintptr_t)&s.q % 8) == 0;
    s.b += 40;
    s.q *= 6;
  }
  printf("aligned=%d b=%d q=%lld a=%d\n", aligned, s.b, s.q, s.a);
  return 0;
}
