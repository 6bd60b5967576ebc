/* the same kernel construct again and again from several threads: an `exit data` of another thread ends the row while the loop's kernels use it (the last of them copies it back); the same loop on data it maps itself each time while another thread maps that data with `enter data` and ends it; four threads repeat kernels on their own parts of an array while a fifth maps and unmaps another one.
   feature: kernel-present, kernel-threads
   run: -
   run: OFFLOAD_SHIM_NO_REPEAT=1
*/
#include <omp.h>
#include <stdio.h>
#define T 4
#define N 32
#define LOOPS 3000
static long x = 0;
static volatile int progress = 0;
static long a[T][N];
static long other[256];
int main(void) {
  /* thread 0 increments x on the device LOOPS times; thread 1 ends x's mapping after
   * some of them.  Whatever the interleaving, every increment reaches the host: those
   * made while the row existed come back with the last reference (the exit data's or
   * the last kernel construct's), those after it map x anew, to and from. */
#pragma omp target enter data map(to: x)
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 0) {
      for (int it = 0; it < LOOPS; it++) {
#pragma omp target map(tofrom: x)
        {
          x += 1;
          for (int spin = 0; spin < 3000; spin++)
            __asm__ volatile("");     /* a kernel that takes a while */
        }
        progress = it;
      }
    } else {
      while (progress < LOOPS / 10)
        ;
#pragma omp target exit data map(from: x)
    }
  }
  printf("x %ld\n", x);
  /* the same while x starts unmapped (thread 0's kernel constructs map it anew each
   * time) and thread 1 maps it with `enter data` in between, then ends that */
  x = 0;
  progress = 0;
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 0) {
      for (int it = 1; it <= LOOPS; it++) {
#pragma omp target map(tofrom: x)
        {
          x += 1;
          for (int spin = 0; spin < 3000; spin++)
            __asm__ volatile("");
        }
        progress = it;
      }
    } else {
      while (progress < LOOPS / 10)
        ;
#pragma omp target enter data map(to: x)
      while (progress < LOOPS / 2)
        ;
#pragma omp target exit data map(from: x)
    }
  }
  printf("x %ld\n", x);
  for (int t = 0; t < T; t++)
    for (int i = 0; i < N; i++) a[t][i] = t * 1000 + i;
  long sums[T] = {0};
#pragma omp target data map(tofrom: a[0:T][0:N])
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
#pragma omp target map(tofrom: mine[0:N])
          { mine[it % N] = mine[it % N] * 3 % 1000003; }
        }
      }
    }
  }
  for (int t = 0; t < T; t++) {
    long s = 0;
    for (int i = 0; i < N; i++) s += a[t][i];
    sums[t] = s;
    printf("%ld ", sums[t]);
  }
  printf("\n");
  return 0;
}
