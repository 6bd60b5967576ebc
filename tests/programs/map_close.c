/* close modifier: same results as a plain map on the host devices.
   feature: map-close
*/
#include <stdio.h>
int main(void) {
  double a[32];
  for (int i = 0; i < 32; i++) a[i] = i * 0.5;
#pragma omp target map(close, tofrom : a)
  for (int i = 0; i < 32; i++) a[i] *= 4;
#pragma omp target enter data map(close, to : a)
#pragma omp target
  for (int i = 0; i < 32; i++) a[i] += 1;
#pragma omp target exit data map(close, from : a)
  double s = 0;
  for (int i = 0; i < 32; i++) s += a[i];
  printf("sum=%.1f\n", s);
  return 0;
}
