/* `exit data map(release:)` beyond the program's `enter data` while two threads' kernel constructs repeated in C hold the row (each kernel waits for the releases; the second ends after the first): libomptarget 16 counts the running regions' references, so the second release drops the first region's (whose end is then the last: it copies back and removes the row, before the second kernel's write) and the third the last one (the row goes at once, nothing comes back).
   feature: kernel-present, kernel-threads, map-release
   run: 1
   run: 2
   run: 3
   run: OFFLOAD_SHIM_NO_REPEAT=1 2
*/
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
static long x = 0;
static volatile int go[2], done_exit = 0, ended0 = 0, last = 0;
int main(int argc, char **argv) {
  int nrel = argc > 1 ? atoi(argv[1]) : 2;
  unsigned long pg = (unsigned long)go, pe = (unsigned long)&done_exit,
                pd = (unsigned long)&ended0, pl = (unsigned long)&last;
#pragma omp target enter data map(to: x)
#pragma omp parallel num_threads(3)
  {
    int t = omp_get_thread_num();
    if (t < 2) {
      unsigned long me = t;
      for (int it = 0; it < 10; it++) {
#pragma omp barrier
        if (it == 9 && t == 0) last = 1;
#pragma omp barrier
#pragma omp target map(tofrom: x) firstprivate(pg, pe, pd, pl, me)
        {
          if (*(volatile int *)pl) {
            __atomic_store_n((int *)pg + me, 1, __ATOMIC_SEQ_CST);
            while (!__atomic_load_n((int *)pe, __ATOMIC_SEQ_CST));
            if (me == 1) {
              while (!__atomic_load_n((int *)pd, __ATOMIC_SEQ_CST));
              __atomic_fetch_add(&x, 1000, __ATOMIC_SEQ_CST);
            } else {
              __atomic_fetch_add(&x, 1, __ATOMIC_SEQ_CST);
            }
          } else {
            __atomic_fetch_add(&x, 1, __ATOMIC_SEQ_CST);
          }
        }
        if (it == 9 && t == 0) __atomic_store_n(&ended0, 1, __ATOMIC_SEQ_CST);
      }
    } else {
      for (int it = 0; it < 10; it++) {
#pragma omp barrier
#pragma omp barrier
      }
      while (!__atomic_load_n(&go[0], __ATOMIC_SEQ_CST) || !__atomic_load_n(&go[1], __ATOMIC_SEQ_CST));
      for (int r = 0; r < nrel; r++) {
#pragma omp target exit data map(release: x)
      }
      printf("after %d releases: present %d\n", nrel, omp_target_is_present(&x, 0));
      __atomic_store_n(&done_exit, 1, __ATOMIC_SEQ_CST);
    }
  }
  printf("x %ld present %d\n", x, omp_target_is_present(&x, 0));
  return 0;
}
