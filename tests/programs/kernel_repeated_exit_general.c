/* an `exit data` (`always, from` and `delete`: the general code; `release`) ends, from another thread, a row a kernel construct repeated in C holds while its kernel runs (the kernel waits for it): with `always` and `release` the row stays -- the running region's reference is not the exit's -- and the region's end copies back what the kernel wrote after the exit; `delete` removes it at once (libomptarget 16 decShouldRemove after a reset), nothing comes back, also after a `release` left the row to the kernel.  The region maps the row twice (`tofrom` first, `to` second): the first map drops the last reference (targetDataEnd runs in reverse order), so the row is copied back.
   feature: kernel-present, kernel-threads, map-always, map-delete, map-release
   run: -
   run: OFFLOAD_SHIM_NO_REPEAT=1
*/
#include <omp.h>
#include <stdio.h>
static long x = 0;
static volatile int started = 0, exited = 0, last = 0;

static const char *names[] = {"always", "delete", "release", "release+delete"};

static void phase(int mode) {
  unsigned long ps = (unsigned long)&started, pe = (unsigned long)&exited,
                pl = (unsigned long)&last;
  started = exited = last = 0;
  x = 0;
  long *p = &x, *q = &x;
#pragma omp target enter data map(to: x)
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 0) {
      /* the same construct ten times: the third and later are repeated in C */
      for (int it = 0; it < 10; it++) {
        if (it == 9)
          last = 1;
#pragma omp target map(tofrom: p[0:1]) map(to: q[0:1]) firstprivate(ps, pe, pl)
        {
          p[0] += 1;
          if (*(volatile int *)pl) {
            __atomic_store_n((int *)ps, 1, __ATOMIC_SEQ_CST);
            while (!__atomic_load_n((int *)pe, __ATOMIC_SEQ_CST))
              ;
            q[0] += 100;
          }
        }
      }
    } else {
      while (!__atomic_load_n(&started, __ATOMIC_SEQ_CST))
        ;
      if (mode == 0) {
#pragma omp target exit data map(always, from: x)
      } else if (mode == 1) {
#pragma omp target exit data map(delete: x)
      } else if (mode == 2) {
#pragma omp target exit data map(release: x)
      } else {
#pragma omp target exit data map(release: x)
#pragma omp target exit data map(delete: x)
      }
      printf("%s: after the exit: present %d x %ld\n", names[mode],
             omp_target_is_present(&x, omp_get_default_device()), x);
      __atomic_store_n(&exited, 1, __ATOMIC_SEQ_CST);
    }
  }
  printf("%s: x %ld present %d\n", names[mode], x,
         omp_target_is_present(&x, omp_get_default_device()));
}

int main(void) {
  phase(0);
  phase(1);
  phase(2);
  phase(3);
  return 0;
}
