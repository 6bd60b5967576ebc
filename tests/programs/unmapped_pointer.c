/* a pointer used in a region without any map keeps its host value; a pointer to data
   that is mapped is translated.
   feature: unmapped-pointer, map-implicit
*/
#include <stdint.h>
#include <stdio.h>
int main(void) {
  int x = 5, y[4] = {1, 2, 3, 4};
  int *p = &x, *q = y;
  uintptr_t hp = (uintptr_t)p, hq = (uintptr_t)q;
  int kept = -1, translated = -1, v = -1;
#pragma omp target map(from : kept)
  kept = (uintptr_t)p == hp;
#pragma omp target data map(tofrom : y)
  {
#pragma omp target map(from : translated, v)
    {
      translated = (uintptr_t)q != hq;
      v = q[2];
    }
  }
  printf("kept=%d translated=%d v=%d\n", kept, translated, v);
  return 0;
}
