/* GCC conformance program: target regions, enter/exit data and updates from four host
 * threads at once, each on its own array (one mapping table, one device lock).
 * osh-expect: same */
#include <omp.h>
#include <stdio.h>

int main(void)
{
  enum { T = 4, N = 128 };
  static long data[T][N];
  long sums[T];
#pragma omp parallel num_threads(T)
  {
    int t = omp_get_thread_num();
    long *d = data[t];
    for (int i = 0; i < N; i++)
      d[i] = t * 1000 + i;
#pragma omp target enter data map(to: d[0:N])
    for (int rep = 0; rep < 5; rep++) {
#pragma omp target map(d[0:N])
      for (int i = 0; i < N; i++)
        d[i] += rep;
    }
#pragma omp target update from(d[0:N])
    long s = 0;
    for (int i = 0; i < N; i++)
      s += d[i];
    sums[t] = s;
#pragma omp target exit data map(delete: d[0:N])
  }
  for (int t = 0; t < T; t++)
    printf("thread %d sum=%ld\n", t, sums[t]);
  return 0;
}
