/* present modifier on data that is mapped: no error.
   feature: map-present, update-present
*/
#include <stdio.h>
int main(void) {
  int a[4] = {1, 2, 3, 4};
#pragma omp target enter data map(to : a)
#pragma omp target map(present, tofrom : a)
  a[0] += 10;
#pragma omp target update from(present : a)
#pragma omp target data map(present, alloc : a)
  {
#pragma omp target
    a[1] += 20;
  }
#pragma omp target exit data map(present, from : a)
  printf("%d %d %d %d\n", a[0], a[1], a[2], a[3]);
  return 0;
}
