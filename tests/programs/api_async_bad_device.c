/* The asynchronous copy and fill routines (libomptarget 19.1 / 22.1) with a device
   number that is neither a device nor the initial device: the routine itself returns
   (the number is not looked at before the task), the task's blocking copy stops the
   program with the runtime's fatal error from the thread that runs it; the synchronous
   omp_target_memset does the same on the calling thread.  Nothing is printed between
   the call and the wait (the abort races with the main thread).
   feature: api-async-bad-device
   clang: 19 22
   run: memcpy-dst
   run: memcpy-src
   run: rect
   run: memset-async
   run: memset
   run: memset-host
*/
#include <omp.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "";
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  int n = omp_get_num_devices();
  int h[16] = {1, 2, 3};
  int *d = omp_target_alloc(sizeof h, dev);
  printf("devices=%d case=%s\n", n, what);
  fflush(stdout);
  if (!strcmp(what, "memcpy-dst")) {
    omp_target_memcpy_async(d, h, sizeof h, 0, 0, n + 3, host, 0, NULL);
  } else if (!strcmp(what, "memcpy-src")) {
    omp_target_memcpy_async(h, d, sizeof h, 0, 0, host, -1, 0, NULL);
  } else if (!strcmp(what, "rect")) {
    size_t vol[2] = {2, 2}, zero[2] = {0, 0}, dims[2] = {4, 4};
    omp_target_memcpy_rect_async(d, h, sizeof(int), 2, vol, zero, zero, dims, dims, dev,
                                 -7, 0, NULL);
  } else if (!strcmp(what, "memset-async")) {
    omp_target_memset_async(d, 1, sizeof h, n + 1, 0, NULL);
  } else if (!strcmp(what, "memset")) {
    omp_target_memset(d, 1, sizeof h, -3);
  } else if (!strcmp(what, "memset-host")) {
    /* the initial device is a valid number: memset on the host, then a bad one */
    void *p = omp_target_memset(h, 0, sizeof h, host);
    printf("host memset same=%d h0=%d\n", p == (void *)h, h[0]);
    fflush(stdout);
    omp_target_memset_async(h, 0, sizeof h, -1, 0, NULL);
  }
#pragma omp taskwait
  printf("not reached\n");
  return 0;
}
