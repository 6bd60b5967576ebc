/* a pointer two arguments of one construct end (map(alloc: spp[0]) beside
   map(tofrom: spp[0][0]) with a default mapper): the row goes at its last argument, so
   the tofrom argument restores the host pointer (libomptarget 16 counts one data-end
   user per argument; shape of llvm-project's mapping/declare_mapper_nested_mappers).
   feature: declare-mapper, map-ptr-and-obj
*/
#include <stdio.h>
typedef struct { int a; double *b; } In;
#pragma omp declare mapper(in_m : In s) map(to : s.a) map(from : s.b[0 : 2])
typedef struct { int e; In f; } Out;
#pragma omp declare mapper(default : Out r) map(from : r.e) map(mapper(in_m), tofrom : r.f)
int main(void) {
  double x[2] = {1, 2};
  Out s = {1, {2, x}};
  Out *sp = &s;
  Out **spp = &sp;
#pragma omp target map(tofrom : spp[0][0]) map(alloc : spp[0])
  {
    spp[0][0].e = 3;
    spp[0][0].f.a = 4;
    spp[0][0].f.b[1] = 5;
  }
  printf("sp==&s %d\n", sp == &s);
  printf("e=%d f.a=%d f.b==x %d x[1]=%g\n", s.e, s.f.a, s.f.b == x, x[1]);
  return 0;
}
