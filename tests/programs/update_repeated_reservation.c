/* a `target update` remembered while its data was absent, repeated by another thread while a kernel construct maps that data: it must copy, as libomptarget 16's table holds the kernel's row then.
   feature: target-update, kernel-threads
   modes: exe
   run: -
   run: OFFLOAD_SHIM_NO_REPEAT=1
*/
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
static double x[8];
static volatile int flag;
static void *updater(void *p) {
  (void)p;
  for (long k = 0; k < 4000000000L && flag != 1; k++)
    ;
  x[0] = 5.0;
#pragma omp target update to(x[0:8])
  flag = 2;
  return 0;
}
int main(void) {
  /* x is absent: these copy nothing */
  for (int i = 0; i < 3; i++) {
#pragma omp target update to(x[0:8])
  }
  pthread_t t;
  pthread_create(&t, 0, updater, 0);
  uintptr_t fp = (uintptr_t)&flag;
  double seen = -1;
  /* x's row exists while this construct runs; the kernel (the x86_64 host plugin runs
     it in this process) lets the other thread update x meanwhile */
#pragma omp target map(tofrom: x[0:8]) map(from: seen) firstprivate(fp)
  {
    volatile int *f = (volatile int *)fp;
    *f = 1;
    for (long k = 0; k < 4000000000L && *f != 2; k++)
      ;
    seen = x[0];
  }
  pthread_join(t, 0);
  printf("seen %g\n", seen);
  return 0;
}
