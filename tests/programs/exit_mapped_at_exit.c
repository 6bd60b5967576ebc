/* data still mapped when the program exits (no exit data): nothing is printed or
   copied back at exit.
   feature: exit-path, target-enter-data
*/
#include <stdio.h>
int g[64];
int main(void) {
  for (int i = 0; i < 64; i++) g[i] = i;
#pragma omp target enter data map(to : g)
#pragma omp target
  for (int i = 0; i < 64; i++) g[i] = 0;
  printf("g5=%d\n", g[5]);
  return 1;
}
