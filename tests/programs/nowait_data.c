/* enter/exit/update data with nowait and depend; LIBOMPTARGET_INFO=1 names the
   nowait entry points (19.1, 22.1: "... with being_nowait_mapper").
   feature: nowait, depend, target-enter-data, target-exit-data, target-update
   run: -
   run: LIBOMPTARGET_INFO=1
*/
#include <stdio.h>
int main(void) {
  int v[4] = {1, 2, 3, 4};
#pragma omp target enter data map(to : v) nowait depend(out : v)
#pragma omp target nowait depend(inout : v)
  for (int i = 0; i < 4; i++) v[i] *= 5;
#pragma omp target update from(v) nowait depend(inout : v)
#pragma omp taskwait
  printf("%d %d %d %d\n", v[0], v[1], v[2], v[3]);
#pragma omp target exit data map(delete : v) nowait
#pragma omp taskwait
  return 0;
}
