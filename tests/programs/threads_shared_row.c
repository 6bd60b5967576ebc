/* a row that another thread maps while the kernel construct that created it runs is
   one row: thread 0's region maps S tofrom and waits inside its kernel; thread 1 sees
   the kernel started, maps S with `enter data` (the region's device copy: no copy),
   lets the kernel finish and, once the region is over, takes S back with `exit data`.
   The region's end is not S's last reference, so it copies nothing back; the exit is,
   and brings what the kernel wrote.
   feature: kernel-threads, target-enter-data, target-exit-data
*/
#include <omp.h>
#include <stdio.h>
#pragma omp declare target
int osh_started, osh_go;
#pragma omp end declare target
static long S[4] = {10, 20, 30, 40};
int main(void) {
  long after_region[2] = {0, 0};
  int team = 0, saw_start = 0, region_done = 0;
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 0) {
      team = omp_get_num_threads();
#pragma omp target map(tofrom : S)
      {
        S[0] += 1;
        __atomic_store_n(&osh_started, 1, __ATOMIC_SEQ_CST);
        double t0 = omp_get_wtime();
        while (!__atomic_load_n(&osh_go, __ATOMIC_SEQ_CST) && omp_get_wtime() - t0 < 20.0)
          ;
        S[1] += 1;
      }
      after_region[0] = S[0];
      after_region[1] = S[1];
      __atomic_store_n(&region_done, 1, __ATOMIC_SEQ_CST);
    } else {
      double t0 = omp_get_wtime();
      while (!saw_start && omp_get_wtime() - t0 < 20.0) {
#pragma omp target update from(osh_started)
        saw_start = osh_started;
      }
#pragma omp target enter data map(to : S)
      osh_go = 1;
#pragma omp target update to(osh_go)
      while (!__atomic_load_n(&region_done, __ATOMIC_SEQ_CST) && omp_get_wtime() - t0 < 40.0)
        ;
#pragma omp target exit data map(from : S)
    }
  }
  printf("team of %d, kernel seen running: %d\n", team, saw_start);
  printf("after the region: %ld %ld\n", after_region[0], after_region[1]);
  printf("after exit data: %ld %ld, present %d\n", S[0], S[1], omp_target_is_present(S, 0));
  return 0;
}
