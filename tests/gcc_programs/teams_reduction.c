/* GCC conformance program: target teams distribute parallel for with a reduction,
 * num_teams / thread_limit clauses, and the fresh OpenMP context of a region (level 0 and
 * the thread limit of the construct inside, whatever encloses it).
 * osh-expect: same */
#include <omp.h>
#include <stdio.h>

int main(void)
{
  enum { N = 1000 };
  static int a[N];
  for (int i = 0; i < N; i++)
    a[i] = i % 7;
  long sum = 0;
#pragma omp target teams distribute parallel for reduction(+: sum) map(to: a) \
    num_teams(4) thread_limit(8)
  for (int i = 0; i < N; i++)
    sum += a[i] * 2;
  printf("sum=%ld\n", sum);

  int level = -1, limit = -1, nthreads = -1;
#pragma omp parallel num_threads(2)
#pragma omp single
  {
#pragma omp target thread_limit(3) map(from: level, limit, nthreads)
    {
      level = omp_get_level();
      limit = omp_get_thread_limit();
#pragma omp parallel num_threads(8)
#pragma omp single
      nthreads = omp_get_num_threads() <= 3;
    }
  }
  printf("level=%d limit=%d nthreads_within_limit=%d\n", level, limit, nthreads);

  int teams = 0;
#pragma omp target teams distribute num_teams(3) reduction(+: teams) map(tofrom: teams)
  for (int i = 0; i < 30; i++)
    teams += 1;
  printf("iterations=%d\n", teams);
  return 0;
}
