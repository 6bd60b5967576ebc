/* device memory the repeats keep between their runs (an `enter data` / `exit data` pair,
   a kernel construct with rows of its own) goes back to the memory manager before any
   other use of it -- also the uses that are no construct of the cheap path:
   `omp_target_alloc` and `omp_target_free`, and the allocations of the general code (a
   kernel with `always`): each gets the block the nextgen plugins' memory manager would
   give it (the least recently freed of its size first), with what the loop left in it;
   a kernel construct once run with other arguments is no exception.
   feature: enter-exit-data, memory-manager, target-alloc
   run: -
   run: OFFLOAD_SHIM_NO_REPEAT=1
*/
#include <omp.h>
#include <stdio.h>
#define N 77
static float d[N], e[N];
/* one kernel construct, called with two argument sets */
__attribute__((noinline)) static void bump(long *p, int init) {
#pragma omp target map(from: p[0:1])
  { if (init) p[0] = 100; else p[0] = p[0] + 1; }
}
int main(void) {
  int host = omp_get_initial_device();
  /* 1: a pair loop, then omp_target_alloc of the same size */
  for (int it = 0; it < 60; it++) {
    d[0] = it;
#pragma omp target enter data map(to: d[0:N])
#pragma omp target exit data map(release: d[0:N])
  }
  float *p = omp_target_alloc(sizeof d, 0), h = -1;
  omp_target_memcpy(&h, p, sizeof h, 0, 0, host, 0);
  printf("1 %g\n", h);
  omp_target_free(p, 0);
  /* 2: the same loop, then a kernel the general code serves (`always`) */
  for (int it = 0; it < 60; it++) {
    d[0] = 100 + it;
#pragma omp target enter data map(to: d[0:N])
#pragma omp target exit data map(release: d[0:N])
  }
  float r = -1;
#pragma omp target map(alloc: e[0:N]) map(always, tofrom: r)
  { r = e[0]; }
  printf("2 %g\n", r);
  /* 3: omp_target_free of a block of the size in the middle of a pair loop: from then
     on the memory manager hands out the two blocks in turn */
  void *q = omp_target_alloc(sizeof d, 0);
  int same = 0;
  for (int it = 0; it < 60; it++) {
#pragma omp target enter data map(to: d[0:N])
    if (it >= 56)
      same += omp_get_mapped_ptr(d, 0) == q;
#pragma omp target exit data map(from: d[0:N])
    if (it == 30)
      omp_target_free(q, 0);
  }
  printf("3 %d\n", same);
  /* 4: a kernel construct with a row of its own repeated, then omp_target_alloc */
  for (int it = 0; it < 60; it++) {
    d[0] = 200 + it;
#pragma omp target map(to: d[0:N])
    { d[1] = d[0]; }
  }
  float g[2] = {-1, -1};
  p = omp_target_alloc(sizeof d, 0);
  omp_target_memcpy(g, p, sizeof g, 0, 0, host, 0);
  printf("4 %g %g\n", g[0], g[1]);
  omp_target_free(p, 0);
  /* 5: a construct run with two argument sets, then repeated with one while two
     blocks of its size are cached: the memory manager hands them out in turn */
  long a = 0, b = 0, c = 1000, w = 2000;
  bump(&a, 1);
  bump(&b, 1);
#pragma omp target enter data map(to: c, w)
#pragma omp target exit data map(release: c, w)
  printf("5");
  for (int it = 0; it < 12; it++) {
    bump(&a, 0);
    printf(" %ld", a);
  }
  printf("\n");
  return 0;
}
