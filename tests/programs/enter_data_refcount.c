/* enter data twice, from copies only when the last reference goes.
   feature: target-enter-data, target-exit-data, map-from
*/
#include <stdio.h>
int main(void) {
  int v = 1;
#pragma omp target enter data map(to : v)
#pragma omp target enter data map(to : v)
#pragma omp target
  v = 50;
#pragma omp target exit data map(from : v)
  printf("after first exit: %d\n", v);
#pragma omp target exit data map(from : v)
  printf("after second exit: %d\n", v);
  return 0;
}
