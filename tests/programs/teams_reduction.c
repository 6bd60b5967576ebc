/* target teams distribute parallel for with a reduction, and num_teams/thread_limit.
   feature: kernel-teams, env-info
   run: -
   run: LIBOMPTARGET_INFO=16
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int n = 10000;
  long sum = 0;
  static double x[10000];
  for (int i = 0; i < n; i++) x[i] = i % 13;
#pragma omp target teams distribute parallel for reduction(+ : sum) map(to : x)
  for (int i = 0; i < n; i++) sum += (long)x[i];
  int teams = 0;
#pragma omp target teams num_teams(3) thread_limit(2) map(tofrom : teams)
  if (omp_get_team_num() == 0) teams = omp_get_num_teams();
  printf("sum=%ld teams=%d\n", sum, teams);
  return 0;
}
