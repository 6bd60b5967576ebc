/* A pointer member mapped with its struct: clang 16-19 emit PTR_AND_OBJ | MEMBER_OF for
   s.p[0:8], clang 22 emits the section plus an ATTACH entry {&s.p, &s.p[0], 8}; either
   way the device copy of s.p must point at the device copy of buf.
   expect: before 1 attach 2 14 present 1 1 (the kernel wrote the device copy of buf) */
#include <omp.h>
#include <stdio.h>
struct S { int n; int *p; };
int main(void) {
  int buf[8];
  for (int i = 0; i < 8; i++) buf[i] = i;
  struct S s = {8, buf};
  int dev = omp_get_default_device();
#pragma omp target enter data map(to: s, s.p[0:8])
  int pres_s = omp_target_is_present(&s, dev), pres_b = omp_target_is_present(buf, dev);
#pragma omp target
  for (int i = 0; i < s.n; i++) s.p[i] *= 2;
  printf("before %d ", buf[1]);
#pragma omp target exit data map(from: s.p[0:8]) map(release: s)
  printf("attach %d %d present %d %d\n", buf[1], buf[7], pres_s, pres_b);
  return 0;
}
