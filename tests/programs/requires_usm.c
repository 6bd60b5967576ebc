/* requires unified_shared_memory: maps do not copy; regions see host addresses
   (LIBOMPTARGET_INFO=8: 19.1 and 22.1 say so for each map).
   feature: requires-usm
   run: -
   run: LIBOMPTARGET_INFO=8
*/
#include <stdio.h>
#include <stdlib.h>
#pragma omp requires unified_shared_memory
int main(void) {
  int *a = malloc(4 * sizeof(int)), data[4] = {1, 2, 3, 4};
  void *da = 0, *dd = 0;
#pragma omp target map(tofrom : a[:4]) map(from : da)
  da = a;
#pragma omp target map(from : dd)
  { dd = data; data[0] = 9; }
  int v = 0;
#pragma omp target enter data map(to : v)
  v = 5;
  int seen = 0;
#pragma omp target map(from : seen)
  seen = v;
#pragma omp target exit data map(release : v)
  printf("mapped=%s implicit=%s data0=%d seen=%d\n", da == a ? "same" : "copied",
         dd == data ? "same" : "copied", data[0], seen);
  free(a);
  return 0;
}
