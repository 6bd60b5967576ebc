/* target update of data that is not mapped (no present): nothing happens.
   feature: target-update
*/
#include <stdio.h>
int main(void) {
  int v = 3;
#pragma omp target update to(v)
#pragma omp target update from(v)
  printf("v=%d\n", v);
  return 0;
}
