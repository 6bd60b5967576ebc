/* argv[1] host threads offload at once, argv[2] rounds each: every thread maps its own
 * rows (enter data, kernel, update from, exit data) and writes its slice of a shared
 * array that the main thread mapped once; the runtime routines are called from every
 * thread meanwhile.  Deterministic results: checksums per thread and of the shared
 * array after the main thread's exit data. */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define N 64
#define MAXT 16
static long shared[MAXT * N];
static long sums[MAXT];
static int present[MAXT], ndev[MAXT];
static int rounds;

static void *worker(void *arg)
{
  int t = (int)(long)arg;
  long rows[N];
  long *sh = &shared[t * N];
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < N; i++)
      rows[i] = t * 1000 + r * 10 + i;
#pragma omp target enter data map(to : rows)
    present[t] += omp_target_is_present(rows, omp_get_default_device());
#pragma omp target map(alloc : rows) map(tofrom : sh[0 : N])
    for (int i = 0; i < N; i++) {
      rows[i] += i;
      sh[i] += rows[i];
    }
#pragma omp target update from(rows)
#pragma omp target exit data map(delete : rows)
    for (int i = 0; i < N; i++)
      sums[t] += rows[i];
    ndev[t] = omp_get_num_devices();
  }
  return NULL;
}

int main(int argc, char **argv)
{
  int nt = argc > 1 ? atoi(argv[1]) : 4;
  rounds = argc > 2 ? atoi(argv[2]) : 20;
  if (nt > MAXT)
    nt = MAXT;
#pragma omp target enter data map(to : shared)
  pthread_t th[MAXT];
  for (int t = 0; t < nt; t++)
    pthread_create(&th[t], NULL, worker, (void *)(long)t);
  for (int t = 0; t < nt; t++)
    pthread_join(th[t], NULL);
#pragma omp target exit data map(from : shared)
  long total = 0;
  for (int i = 0; i < MAXT * N; i++)
    total += shared[i];
  for (int t = 0; t < nt; t++)
    printf("thread %d sum %ld present %d devices %d\n", t, sums[t], present[t], ndev[t]);
  printf("shared %ld still mapped %d\n", total,
         omp_target_is_present(shared, omp_get_default_device()));
  return 0;
}
