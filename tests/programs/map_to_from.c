/* map(to), map(from) and map(tofrom) of arrays and scalars.
   feature: map-to, map-from, map-tofrom
*/
#include <stdio.h>
int main(void) {
  int in[16], out[16], both[16], s = 3;
  for (int i = 0; i < 16; i++) { in[i] = i; out[i] = -1; both[i] = 2 * i; }
#pragma omp target map(to : in, s) map(from : out) map(tofrom : both)
  for (int i = 0; i < 16; i++) { out[i] = in[i] * s; both[i] += in[i]; in[i] = 99; }
  int so = 0, sb = 0;
  for (int i = 0; i < 16; i++) { so += out[i]; sb += both[i]; }
  printf("out=%d both=%d in0=%d\n", so, sb, in[0]);
  return 0;
}
