/* map(alloc): no copy in either direction; the device copy is uninitialised storage.
   feature: map-alloc, target-enter-data, target-exit-data
*/
#include <stdio.h>
int main(void) {
  int a[8], r = 0;
  for (int i = 0; i < 8; i++) a[i] = 1;
#pragma omp target enter data map(alloc : a)
#pragma omp target map(alloc : a) map(from : r)
  {
    for (int i = 0; i < 8; i++) a[i] = 5;
    r = a[3];
  }
#pragma omp target exit data map(release : a)
  printf("r=%d host_a3=%d\n", r, a[3]);
  return 0;
}
