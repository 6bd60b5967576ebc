/* another thread's kernel construct runs with a row of its own (offload_shim keeps such
   rows out of its table while the construct runs, as a reservation, and tells the C
   side's repeats their ranges) while this thread's constructs look: an implicit map of
   a whole array, repeated in C, that found a row beyond the other thread's by implicit
   extension finds the other thread's row first, as libomptarget's table lookup does;
   a zero-length section whose pointer lies between that row's base and its begin finds
   it.  The two threads take turns through a flag that the kernels spin on.
   feature: kernel-threads, zero-length
   modes: exe
   run: -
   run: OFFLOAD_SHIM_NO_REPEAT=1
*/
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
static long x[16], y[16];
static long r[2];
static volatile int flag;
static void reader(void) {
#pragma omp target
  { r[0] = (x[2] == 555) ? 1 : 2; }
}
static void wait_for(int v) {
  while (flag != v)
    ;
}
#pragma omp declare target
/* (in a kernel) the row exists: the other thread's turn, until it hands it back */
static void hold(uintptr_t fp) {
  *(volatile int *)fp = 1;
  while (*(volatile int *)fp != 2)
    ;
}
#pragma omp end declare target
int main(void) {
  uintptr_t fp = (uintptr_t)&flag;
  /* 1: the reader's implicit map of x extends the row x[8:4]; the writer's row x[2:2]
     lies between &x[0] and that row */
#pragma omp target enter data map(to: x[8:4], r)
  for (int k = 0; k < 4; k++)
    reader();
  long got = -1;
  flag = 0;
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 0) {
#pragma omp target map(tofrom: x[2:2])
      { x[2] = 555; hold(fp); }
    } else {
      wait_for(1);
      reader();
#pragma omp target update from(r)
      got = r[0];
      flag = 2;
    }
  }
  printf("1 %ld\n", got);
#pragma omp target exit data map(release: x[8:4], r)
  /* 2: a zero-length section of &y[1] while the other thread's row y[4:4] (base &y[0])
     exists */
  long seen = -1;
  flag = 0;
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 0) {
#pragma omp target map(tofrom: y[4:4])
      { y[4] = 777; hold(fp); }
    } else {
      wait_for(1);
      long *p = &y[1];
      uintptr_t hp = (uintptr_t)p;
#pragma omp target map(tofrom: p[0:0]) map(from: seen)
      { seen = ((uintptr_t)p == hp) ? -2 : p[3]; }
      flag = 2;
    }
  }
  printf("2 %ld %ld\n", seen, y[4]);
  return 0;
}
