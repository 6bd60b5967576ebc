/* LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD: small and large allocations, repeated; the
   results do not depend on the threshold.
   feature: env-mm-threshold
   run: LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD=0
   run: LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD=1024
   run: LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD=1048576
*/
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  long total = 0;
  for (int round = 0; round < 6; round++) {
    int n = 16 << (2 * round);
    int *a = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) a[i] = i % 7;
#pragma omp target map(tofrom : a[0 : n])
    for (int i = 0; i < n; i++) a[i] += 1;
    for (int i = 0; i < n; i++) total += a[i];
    free(a);
  }
  printf("total=%ld\n", total);
  return 0;
}
