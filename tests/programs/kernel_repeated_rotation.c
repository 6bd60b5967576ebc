/* kernel constructs with rows of their own repeated while other blocks of their size
   are cached (offload_shim repeats them in C, taking the blocks in turn): the nextgen
   plugins' memory manager hands out the least recently freed block of a size, so a
   loop of one construct rotates through every cached block of its size, leaving its
   values in all of them; an allocation between two runs gets the next block in turn
   (omp_target_alloc), and a `map(from:)` region after the loop reads the values the
   loop's last runs left, block after block.  A loop of a construct with two rows of
   one size (one read before written) with an `enter data` / `exit data` pair of that
   size every fourth run: the pair's block joins the rotation.  Then host threads run
   one construct each on data of their own: the blocks pass from thread to thread.
   feature: map-from, memory-manager, target-alloc
   run: -
   run: OFFLOAD_SHIM_NO_REPEAT=1
*/
#include <omp.h>
#include <stdio.h>
#define T 4
static long a, b, c, d, y, z, t, m;
static long xs[T][8];               /* a cache line per thread */
/* reads its block before writing it */
__attribute__((noinline)) static long stale(void) {
#pragma omp target map(from: z)
  { z = z + 0; }
  return z;
}
int main(void) {
  int host = omp_get_initial_device();
  a = 1; b = 2; c = 3; d = 4;
  /* four blocks of 8 bytes cached (freed d, c, b, a: reverse argument order) */
#pragma omp target enter data map(to: a, b, c, d)
#pragma omp target exit data map(release: a, b, c, d)
  /* 1: one construct 40 times: its block is the least recently freed one each time */
  y = 0;
  for (int it = 0; it < 40; it++) {
#pragma omp target map(tofrom: y)
    { y = y * 2 % 1000003 + 1; }
    if (it == 25) {                 /* an allocation of the size takes the next block */
      long *p = omp_target_alloc(sizeof(long), 0), h = -1;
      omp_target_memcpy(&h, p, sizeof h, 0, 0, host, 0);
      printf("alloc %ld\n", h);
      omp_target_free(p, 0);
    }
  }
  printf("y %ld\n", y);
  printf("stale");
  for (int k = 0; k < 6; k++)
    printf(" %ld", stale());
  printf("\n");
  /* 2: two rows of one size, and a pair of that size now and then */
  y = 0;
  for (int it = 0; it < 40; it++) {
#pragma omp target map(tofrom: y) map(alloc: t)
    { y = (y * 3 + t) % 1000003; t = y + 1; }
    if (it % 4 == 0) {
      m = it;
#pragma omp target enter data map(to: m)
#pragma omp target exit data map(from: m)
    }
  }
  printf("y %ld\nstale", y);
  for (int k = 0; k < 7; k++)
    printf(" %ld", stale());
  printf("\n");
  /* 3: host threads, each its own data, the same construct */
#pragma omp parallel num_threads(T)
  {
    int t = omp_get_thread_num();
    for (int it = 0; it < 300; it++) {
#pragma omp target map(tofrom: xs[t][0:1])
      { xs[t][0] += t + 1; }
    }
  }
  long s = 0;
  for (int t = 0; t < T; t++)
    s += xs[t][0];
  printf("threads %ld\n", s);
  return 0;
}
