/* target regions from several host threads at once, each on its own part of an array.
   feature: kernel-threads
*/
#include <omp.h>
#include <stdio.h>
static int data[8][16];
int main(void) {
  int out[8] = {0};
  for (int t = 0; t < 8; t++)
    for (int i = 0; i < 16; i++) data[t][i] = t;
#pragma omp parallel for num_threads(4)
  for (int t = 0; t < 8; t++) {
    int s = 0;
#pragma omp target map(to : data[t][0 : 16]) map(tofrom : s)
    for (int i = 0; i < 16; i++) s += data[t][i];
    out[t] = s;
  }
  for (int t = 0; t < 8; t++) printf("%d ", out[t]);
  printf("\n");
  return 0;
}
