/* declare target functions called from regions, and a static function.
   feature: declare-target-to
*/
#include <stdio.h>
#pragma omp declare target
static int square(int x) { return x * x; }
int sum_squares(const int *a, int n) {
  int s = 0;
  for (int i = 0; i < n; i++) s += square(a[i]);
  return s;
}
#pragma omp end declare target
int main(void) {
  int a[5] = {1, 2, 3, 4, 5}, r = 0;
#pragma omp target map(to : a) map(from : r)
  r = sum_squares(a, 5);
  printf("r=%d host=%d\n", r, sum_squares(a, 5));
  return 0;
}
