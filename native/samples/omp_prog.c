/* An unmodified OpenMP offload program for `offload-shim run` (issue 7).
 *
 *   clang-16 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -O1 omp_prog.c -o omp_prog \
 *            -Wl,-rpath,/usr/lib/llvm-16/lib
 *   ./omp_prog                      # libomptarget.so.16 + its x86_64 plugin
 *   offload-shim run ./omp_prog     # the same program, offload_shim's Python runtime
 * Prints one line per construct and exits with status 3 (so the exit status is
 * checked too).  Semantics in the style of LLVM's libomptarget tests (mapping/,
 * offloading/): map to/from/tofrom/alloc, target data + update, enter/exit data with
 * reference counts, declare target globals, firstprivate scalars, is_device_ptr,
 * target regions from several host threads, teams distribute parallel for.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define N 256

#pragma omp declare target
int dev_counter = 5;
#pragma omp end declare target

int main(void)
{
  double a[N], b[N];
  for (int i = 0; i < N; i++) { a[i] = i; b[i] = 0; }

  int on_host = -1;
#pragma omp target map(from: on_host)
  on_host = omp_is_initial_device();
  printf("on_device %d\n", on_host == 0);

  double scale = 1.5;
#pragma omp target map(to: a) map(from: b)
  for (int i = 0; i < N; i++) b[i] = scale * a[i];
  printf("scaled %.1f %.1f\n", b[1], b[N - 1]);

  long sum = 0;
#pragma omp target teams distribute parallel for map(tofrom: sum) reduction(+: sum)
  for (int i = 0; i < N; i++) sum += i;
  printf("reduction %ld\n", sum);

  int *p = malloc(N * sizeof(int));
  for (int i = 0; i < N; i++) p[i] = 1;
#pragma omp target data map(tofrom: p[0:N])
  {
#pragma omp target
    for (int i = 0; i < N; i++) p[i] += 1;
    p[0] = 100;                                   /* host only */
#pragma omp target update from(p[0:1])
    printf("update_from %d\n", p[0]);
    p[1] = 7;
#pragma omp target update to(p[1:1])
#pragma omp target
    p[2] = p[1] * 2;
  }
  printf("data_region %d %d %d\n", p[0], p[1], p[2]);

#pragma omp target enter data map(to: p[0:N])
#pragma omp target enter data map(to: p[0:N])    /* refcount 2 */
  p[3] = -1;
#pragma omp target exit data map(from: p[0:N])   /* refcount 1: no copy back */
  printf("refcount_no_copy %d present %d\n", p[3],
         omp_target_is_present(p, omp_get_default_device()));
#pragma omp target
  p[3] = 33;
#pragma omp target exit data map(from: p[0:N])   /* last: copy back */
  printf("refcount_copy %d present %d\n", p[3],
         omp_target_is_present(p, omp_get_default_device()));

#pragma omp target
  dev_counter += 10;
  int host_counter = dev_counter;
#pragma omp target update from(dev_counter)
  printf("declare_target host_before %d after_update %d\n", host_counter, dev_counter);

  int dev = omp_get_default_device();
  int *d = omp_target_alloc(4 * sizeof(int), dev);
  int h[4] = {1, 2, 3, 4};
  omp_target_memcpy(d, h, sizeof h, 0, 0, dev, omp_get_initial_device());
#pragma omp target is_device_ptr(d)
  for (int i = 0; i < 4; i++) d[i] *= 10;
  omp_target_memcpy(h, d, sizeof h, 0, 0, omp_get_initial_device(), dev);
  omp_target_free(d, dev);
  printf("device_ptr %d %d %d %d\n", h[0], h[1], h[2], h[3]);

  int per_thread[4] = {0};
#pragma omp parallel for num_threads(4)
  for (int t = 0; t < 4; t++) {
    int v = t;
#pragma omp target map(tofrom: v)
    v = v * v + 1;
    per_thread[t] = v;
  }
  printf("threads %d %d %d %d\n", per_thread[0], per_thread[1], per_thread[2],
         per_thread[3]);
  printf("num_devices %d\n", omp_get_num_devices() > 0);
  free(p);
  fflush(stdout);
  return 3;
}
