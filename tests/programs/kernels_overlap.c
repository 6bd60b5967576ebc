/* the kernels of two host threads run at the same time: each kernel raises its
   thread's flag (a declare-target global, one copy on the device) and waits, at most
   20 s, for the other thread's flag.  Kernels run one after the other would leave
   the first kernel waiting in vain.
   feature: kernel-threads
*/
#include <omp.h>
#include <stdio.h>
#pragma omp declare target
int osh_flag[2];
#pragma omp end declare target
int main(void) {
  int saw[2] = {0, 0}, team = 0;
#pragma omp parallel num_threads(2)
  {
    int t = omp_get_thread_num(), s = 0;
    if (t == 0)
      team = omp_get_num_threads();
#pragma omp target map(from : s)
    {
      __atomic_store_n(&osh_flag[t], 1, __ATOMIC_SEQ_CST);
      double t0 = omp_get_wtime();
      while (!__atomic_load_n(&osh_flag[1 - t], __ATOMIC_SEQ_CST) &&
             omp_get_wtime() - t0 < 20.0)
        ;
      s = __atomic_load_n(&osh_flag[1 - t], __ATOMIC_SEQ_CST);
    }
    saw[t] = s;
  }
  printf("team of %d: thread 0 saw thread 1's kernel running: %d, thread 1 saw "
         "thread 0's: %d\n", team, saw[0], saw[1]);
  return 0;
}
