/* `target enter data` / `exit data` pairs and `target data` regions in loops
   (offload_shim repeats a pair in C once it ran twice on an unchanged table, keeping its
   rows' device memory between repeats): host changes between the enter and the exit
   that the exit's copy back overwrites (or not: `release`), two arrays in one pair, a
   pair nested in a `target data`, pairs interleaved with kernels, updates and queries
   on their rows (which take the rows back into the table), two pairs alternating, data
   entered twice (only the second exit frees it), `map(alloc:)` rows read before they
   are written (the memory manager gives back the block the previous exit freed), and a
   pair left open at the end of a loop.
   feature: enter-exit-data, memory-manager
   run: -
   run: OFFLOAD_SHIM_NO_REPEAT=1
*/
#include <omp.h>
#include <stdio.h>
#define N 64
static double a[N], b[N], c[N];
static long sum(const double *p) {
  long s = 0;
  for (int i = 0; i < N; i++) s += (long)p[i];
  return s;
}
int main(void) {
  int dev = omp_get_default_device();
  for (int i = 0; i < N; i++) { a[i] = i; b[i] = 2 * i; c[i] = 3 * i; }
  /* 1: a plain pair, the host changes overwritten by the copy back */
  for (int it = 0; it < 200; it++) {
#pragma omp target enter data map(to: a[0:N])
    a[it % N] += 1000.0;
#pragma omp target exit data map(from: a[0:N])
  }
  printf("1 %ld\n", sum(a));
  /* 2: release: the host changes stay */
  for (int it = 0; it < 100; it++) {
#pragma omp target enter data map(to: a[0:N])
    a[it % N] += 1.0;
#pragma omp target exit data map(release: a[0:N])
  }
  printf("2 %ld\n", sum(a));
  /* 3: two arrays, nested in a target data of a third */
#pragma omp target data map(tofrom: c[0:N])
  {
    for (int it = 0; it < 100; it++) {
#pragma omp target enter data map(to: a[0:N], b[0:N])
      a[0] = -1; b[0] = -1;
#pragma omp target exit data map(from: a[0:N], b[0:N])
    }
  }
  printf("3 %ld %ld %ld\n", sum(a), sum(b), sum(c));
  /* 4: a kernel between enter and exit */
  for (int it = 0; it < 60; it++) {
#pragma omp target enter data map(to: a[0:N])
#pragma omp target
    { a[1] += 1.0; }
#pragma omp target exit data map(from: a[0:N])
  }
  printf("4 %ld\n", sum(a));
  /* 5: an update and a query between enter and exit */
  long present = 0;
  for (int it = 0; it < 60; it++) {
#pragma omp target enter data map(to: b[0:N])
    b[2] = it;
    if (it % 2) {
#pragma omp target update to(b[0:N])
    }
    present += omp_target_is_present(&b[0], dev);
#pragma omp target exit data map(from: b[0:N])
  }
  printf("5 %ld %ld\n", sum(b), present);
  /* 6: two pairs alternating, and a query outside them */
  for (int it = 0; it < 100; it++) {
    if (it % 2) {
#pragma omp target enter data map(to: a[0:N])
      a[3] = it;
#pragma omp target exit data map(from: a[0:N])
    } else {
#pragma omp target enter data map(to: b[0:N])
      b[3] = it;
#pragma omp target exit data map(from: b[0:N])
    }
    present += omp_target_is_present(&a[0], dev) + omp_target_is_present(&b[0], dev);
  }
  printf("6 %ld %ld %ld\n", sum(a), sum(b), present);
  /* 7: entered twice: the first exit only drops a reference */
  for (int it = 0; it < 50; it++) {
#pragma omp target enter data map(to: c[0:N])
#pragma omp target enter data map(to: c[0:N])
    c[4] = it;
#pragma omp target exit data map(from: c[0:N])
    c[5] = it;
#pragma omp target exit data map(from: c[0:N])
  }
  printf("7 %ld\n", sum(c));
  /* 8: a target data region around host code, then a kernel reading what it left */
  for (int it = 0; it < 100; it++) {
#pragma omp target data map(tofrom: a[0:N])
    { a[6] = it; }
  }
  double first = 0;
#pragma omp target map(alloc: c[0:N]) map(from: first)
  { first = c[7]; }
  printf("8 %ld %.0f\n", sum(a), first);
  /* 9: the pair's last enter left open, then present to a kernel and exited later */
  for (int it = 0; it < 50; it++) {
#pragma omp target enter data map(to: b[0:N])
    if (it < 49) {
#pragma omp target exit data map(from: b[0:N])
    }
  }
#pragma omp target
  { b[8] = 77.0; }
  printf("9 %d\n", omp_target_is_present(&b[0], dev));
#pragma omp target exit data map(from: b[0:N])
  printf("9 %ld %d\n", sum(b), omp_target_is_present(&b[0], dev));
  return 0;
}
