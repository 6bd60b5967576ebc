/* target update to/from inside a data region, and of array sections.
   feature: target-update, target-data
*/
#include <stdio.h>
int main(void) {
  int a[10];
  for (int i = 0; i < 10; i++) a[i] = i;
#pragma omp target data map(to : a)
  {
    for (int i = 0; i < 10; i++) a[i] = 100 + i;
#pragma omp target update to(a[2 : 3])
#pragma omp target
    for (int i = 0; i < 10; i++) a[i] += 1000;
#pragma omp target update from(a[0 : 5])
  }
  for (int i = 0; i < 10; i++) printf("%d ", a[i]);
  printf("\n");
  return 0;
}
