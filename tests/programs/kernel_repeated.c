/* the same kernel construct again and again on rows that exist (offload_shim repeats it in C): scalars and sections inside `target data`, arguments cycling through four arrays, rows unmapped and mapped again between the repeats, a row mapped by `enter data` and ended by an `exit data` between them, a declare-target global; regions that map their data themselves (repeated with the device memory kept), more of them than the C side keeps.
   feature: kernel-present, map-to, map-from
   run: -
   run: OFFLOAD_SHIM_NO_REPEAT=1
*/
#include <stdio.h>
#define N 64
static long x = 0, y = 0;
static double a[4][N], b[N];
long g = 0;
#pragma omp declare target(g)
int main(void) {
  for (int i = 0; i < N; i++) {
    b[i] = i;
    for (int k = 0; k < 4; k++) a[k][i] = k + i;
  }
#pragma omp target data map(tofrom: x, b[0:N])
  {
    for (int it = 0; it < 300; it++) {
#pragma omp target map(tofrom: x)
      { x += 1; }
#pragma omp target map(to: b[0:N]) map(tofrom: x)
      { x += (long)b[it % N]; }
    }
  }
  printf("x %ld\n", x);
  /* four arrays in turn: four argument sets, each repeated */
#pragma omp target data map(tofrom: a[0:4][0:N])
  for (int it = 0; it < 400; it++) {
    double *p = a[it % 4];
#pragma omp target map(tofrom: p[0:N])
    for (int i = 0; i < N; i++) p[i] += 1.0;
  }
  double s = 0;
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < N; i++) s += a[k][i];
  printf("a %.1f\n", s);
  /* mapped, repeated, unmapped (the host copy comes back), changed, mapped again */
  for (int round = 0; round < 5; round++) {
#pragma omp target enter data map(to: y)
    for (int it = 0; it < 50; it++) {
#pragma omp target map(tofrom: y)
      { y += 2; }
    }
#pragma omp target exit data map(from: y)
    y *= 3;
  }
  printf("y %ld\n", y);
  /* a region that only touches the global (its row is the image's, never at zero) */
  for (int it = 0; it < 100; it++) {
#pragma omp target
    { g += it % 7; }
  }
#pragma omp target update from(g)
  printf("g %ld\n", g);
  /* a region whose row was mapped by the region before it in the loop (present after) */
  long z = 0;
  for (int it = 0; it < 100; it++) {
#pragma omp target enter data map(to: z)
#pragma omp target map(tofrom: z)
    { z += it; }
#pragma omp target exit data map(from: z)
  }
  printf("z %ld\n", z);
  /* 600 different sections, each mapped by its region three times in a row: more
   * constructs than the C side keeps (its oldest give their device memory back) */
  static long big[600 * 4];
  for (int k = 0; k < 600; k++)
    for (int rep = 0; rep < 3; rep++) {
      long *p = &big[k * 4];
#pragma omp target map(tofrom: p[0:4])
      { p[0] += 1; p[3] += 2; }
    }
  long t = 0;
  for (int i = 0; i < 600 * 4; i++) t += big[i];
  printf("big %ld\n", t);
  return 0;
}
