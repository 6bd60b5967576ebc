/* firstprivate and private variables, including arrays, and defaultmap.
   feature: kernel-private
   run: -
   run: LIBOMPTARGET_INFO=32
*/
#include <stdio.h>
int main(void) {
  int fp = 5, pv = 9, arr[4] = {1, 2, 3, 4}, out = 0;
#pragma omp target firstprivate(fp, arr) private(pv) map(from : out)
  {
    pv = fp * 2;
    arr[0] += fp;
    out = pv + arr[0];
    fp = 1000;
  }
  double d = 1.25;
  int r = 0;
#pragma omp target defaultmap(tofrom : scalar) map(from : r)
  {
    d *= 2;
    r = (int)(d * 100);
  }
  printf("out=%d fp=%d arr0=%d d=%.2f r=%d\n", out, fp, arr[0], d, r);
  return 0;
}
