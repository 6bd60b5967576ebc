/* implicit maps: arrays tofrom, scalars firstprivate, structs tofrom.
   feature: map-implicit
*/
#include <stdio.h>
struct P { int x, y; };
int main(void) {
  int arr[10], scalar = 4;
  struct P p = {1, 2};
  for (int i = 0; i < 10; i++) arr[i] = i;
#pragma omp target
  {
    for (int i = 0; i < 10; i++) arr[i] += scalar;
    p.x += 100;
    scalar = 1000;
  }
  int s = 0;
  for (int i = 0; i < 10; i++) s += arr[i];
  printf("arr=%d scalar=%d p=%d,%d\n", s, scalar, p.x, p.y);
  return 0;
}
