/* repeated `target update` of each thread's own part of an array while another thread maps and unmaps a second array again and again.
   feature: target-update, kernel-threads
   run: -
   run: OFFLOAD_SHIM_NO_REPEAT=1
*/
#include <omp.h>
#include <stdio.h>
#define T 4
#define N 32
static long a[T][N];
static long other[256];
int main(void) {
  for (int t = 0; t < T; t++)
    for (int i = 0; i < N; i++) a[t][i] = t * 1000 + i;
  long sums[T] = {0};
#pragma omp target data map(to: a[0:T][0:N])
  {
#pragma omp parallel num_threads(T + 1)
    {
      int t = omp_get_thread_num();
      if (t == T) {
        for (int k = 0; k < 400; k++) {
#pragma omp target enter data map(to: other[0:256])
#pragma omp target exit data map(release: other[0:256])
        }
      } else {
        long *mine = &a[t][0];
        for (int it = 0; it < 400; it++) {
          mine[it % N] += 1;
#pragma omp target update to(mine[0:N])
#pragma omp target map(alloc: mine[0:N])
          { mine[it % N] *= 3; }
#pragma omp target update from(mine[0:N])
        }
        long s = 0;
        for (int i = 0; i < N; i++) s += mine[i] % 1000003;
        sums[t] = s;
      }
    }
  }
  for (int t = 0; t < T; t++) printf("%ld ", sums[t]);
  printf("\n");
  return 0;
}
