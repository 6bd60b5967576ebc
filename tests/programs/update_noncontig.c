/* non-contiguous target update (strided and 2-D sections).
   feature: update-noncontig, target-update
*/
#include <stdio.h>
int main(void) {
  int a[12], m[4][5];
  for (int i = 0; i < 12; i++) a[i] = i;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 5; j++) m[i][j] = 10 * i + j;
#pragma omp target enter data map(to : a, m)
#pragma omp target
  {
    for (int i = 0; i < 12; i++) a[i] = -a[i];
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 5; j++) m[i][j] = -m[i][j];
  }
#pragma omp target update from(a[0 : 6 : 2])
#pragma omp target update from(m[1 : 2][1 : 3])
  for (int i = 0; i < 12; i++) printf("%d ", a[i]);
  printf("\n");
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < 5; j++) printf("%d ", m[i][j]);
    printf("\n");
  }
#pragma omp target exit data map(delete : a, m)
  return 0;
}
