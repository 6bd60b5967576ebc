/* `target enter data` / `exit data` pairs in loops on four host threads at once, each
   on its own array of one device, while a fifth thread maps, updates and unmaps an
   array of its own and asks whether the others' arrays are present (offload_shim
   repeats a pair in C while the table is back where it was; rows a repeat left out of
   the table are taken back in by any look-up of another thread).  Each thread's own
   results only are printed.
   feature: enter-exit-data, host-threads
   run: -
   run: OFFLOAD_SHIM_NO_REPEAT=1
*/
#include <omp.h>
#include <stdio.h>
#define N 32
#define T 4
static double a[T][N], other[N];
static long sums[T + 1];
int main(void) {
  for (int t = 0; t < T; t++)
    for (int i = 0; i < N; i++) a[t][i] = t * 100 + i;
#pragma omp parallel num_threads(T + 1)
  {
    int t = omp_get_thread_num();
    if (t < T) {
      double *p = a[t];
      for (int it = 0; it < 400; it++) {
#pragma omp target enter data map(to: p[0:N])
        p[it % N] += 1000.0;          /* overwritten by the copy back */
        if (it % 97 == 0) {
#pragma omp target map(tofrom: p[0:N])
          { p[0] += 1.0; }
        }
#pragma omp target exit data map(from: p[0:N])
      }
      long s = 0;
      for (int i = 0; i < N; i++) s += (long)p[i];
      sums[t] = s;
    } else {
      long seen = 0;
      for (int it = 0; it < 300; it++) {
#pragma omp target enter data map(to: other[0:N])
        other[1] = it;
#pragma omp target update to(other[0:N])
#pragma omp target
        { other[2] += other[1]; }
#pragma omp target exit data map(from: other[0:N])
        for (int u = 0; u < T; u++) seen += omp_target_is_present(a[u], 0);
      }
      (void)seen;
      long s = 0;
      for (int i = 0; i < N; i++) s += (long)other[i];
      sums[T] = s;
    }
  }
  for (int t = 0; t <= T; t++) printf("%d %ld\n", t, sums[t]);
  return 0;
}
