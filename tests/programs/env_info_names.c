/* LIBOMPTARGET_INFO traces of a program compiled with -g: variable names, source
   locations, the mapping table with declarations, declare-target globals in it.
   feature: env-info, declare-target-globals
   cflags: -g
   run: LIBOMPTARGET_INFO=-1
   run: LIBOMPTARGET_INFO=1
*/
#include <stdio.h>
#pragma omp declare target
int counter = 3;
#pragma omp end declare target
struct pair { int first; double second[4]; };
int main(void) {
  int vec[6] = {1, 2, 3, 4, 5, 6};
  struct pair pr = {1, {0.5, 1.5, 2.5, 3.5}};
#pragma omp target enter data map(to : vec[1 : 4], pr)
#pragma omp target map(alloc : vec[1 : 4]) map(tofrom : pr.second[1 : 2])
  {
    vec[2] += counter;
    pr.second[1] *= 2;
  }
#pragma omp target exit data map(from : vec[1 : 4]) map(release : pr)
  printf("vec2=%d second1=%.1f\n", vec[2], pr.second[1]);
  return 0;
}
