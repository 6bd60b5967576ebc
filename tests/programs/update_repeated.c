/* the same `target update` again and again while the table changes under it: absent, mapped, unmapped, mapped again elsewhere; a kernel with a row of its own between them.
   feature: target-update, target-data, enter-exit-data
   run: -
   run: OFFLOAD_SHIM_NO_REPEAT=1
*/
#include <stdio.h>
static double a[64], b[64];
static long c[16];
int main(void) {
  for (int i = 0; i < 64; i++) { a[i] = i; b[i] = -i; }
  for (int i = 0; i < 16; i++) c[i] = 0;
  double s = 0;
  long ksum = 0;
#pragma omp target data map(tofrom: a[0:64])
  {
    for (int it = 0; it < 300; it++) {
      a[it % 64] += 1.0;
#pragma omp target update to(a[0:64])
#pragma omp target map(alloc: a[0:64])
      { a[it % 64] *= 2.0; }
#pragma omp target update from(a[it % 4 * 16 : 16])
      /* a kernel construct with a row of its own (kept out of the table while it
         runs): the updates around it still repeat */
      long k = it;
#pragma omp target map(tofrom: k)
      { k = k * 3 + 1; }
      ksum += k;
      /* b is absent for it < 50, present for 50 <= it < 150 and 200 <= it < 250 (a
         new row: its device copy starts from the host's) */
      b[it % 64] += 0.5;
#pragma omp target update to(b[0:64])
      if (it == 50 || it == 200) {
#pragma omp target enter data map(to: b[0:64])
      }
#pragma omp target map(alloc: b[0:64]) if(it >= 50 && it < 150 || it >= 200 && it < 250)
      { b[it % 64] += 100.0; }
#pragma omp target update from(b[0:64])
      if (it == 149 || it == 249) {
#pragma omp target exit data map(release: b[0:64])
      }
      /* a row under an update of a part of it */
      if (it % 100 == 10) {
#pragma omp target enter data map(to: c[0:16])
      }
      c[it % 16] += 1;
#pragma omp target update to(c[4:8])
#pragma omp target update from(c[0:4])
      if (it % 100 == 60) {
#pragma omp target exit data map(from: c[0:16])
      }
      if (it % 50 == 49) {
        s = 0;
        for (int i = 0; i < 64; i++) s += a[i] + b[i];
        long t = 0;
        for (int i = 0; i < 16; i++) t += c[i] * (i + 1);
        printf("%d %.1f %ld %ld\n", it, s, t, ksum);
      }
    }
  }
  s = 0;
  for (int i = 0; i < 64; i++) s += a[i] + b[i];
  printf("%.1f\n", s);
  return 0;
}
