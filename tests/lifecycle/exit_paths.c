/* How a program ends, with target regions around: argv[1] is
 *   region   exit(7) inside a target region
 *   region-loop  exit(7) inside the 10th run of a target region on a row that exists
 *            (offload_shim repeats it in C from the third run on)
 *   thread   exit(9) from another thread, after its own target region, while the main
 *            thread waits for it
 *   busy     exit(9) from another thread while the main thread is inside a kernel (racy
 *            under every runtime: the exit finalises libomp under the running kernel)
 *   busy-loop  the same while the kernel is the 20th run of a region on a row that exists
 *   atexit   a handler registered in main runs a target region at exit
 *   ctor     the same from a handler registered by a constructor (before main)
 *   quick    quick_exit(5) after a region (no exit handlers, stdio not flushed)
 *   abort    abort() after a region
 *   return   main returns 3 */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int twice_on_device(int x)
{
  int y = 0, dev = 0;
#pragma omp target map(from : y, dev)
  {
    y = 2 * x;
    dev = !omp_is_initial_device();
  }
  return dev ? y : -y;
}

static void at_exit_region(void) { printf("at exit: %d\n", twice_on_device(21)); }

static void ctor_handler(void) { printf("ctor handler: %d\n", twice_on_device(4)); }
static const char *mode = "";
__attribute__((constructor)) static void early(void)
{
  const char *m = getenv("EXIT_PATH_CTOR");
  if (m && *m)
    atexit(ctor_handler);
}

static volatile int *flag;
static void *exiter(void *unused)
{
  (void)unused;
  while (!*flag)
    usleep(1000);
  exit(9);
}

static void *offload_then_exit(void *unused)
{
  (void)unused;
  printf("thread: %d\n", twice_on_device(5));
  exit(9);
}

int main(int argc, char **argv)
{
  mode = argc > 1 ? argv[1] : "return";
  printf("before: %d\n", twice_on_device(1));
  if (!strcmp(mode, "region")) {
    int x = 0;
#pragma omp target map(tofrom : x)
    {
      if (!omp_is_initial_device())
        exit(7);
      x = 1;
    }
    printf("not reached %d\n", x);
  } else if (!strcmp(mode, "region-loop")) {
    long cnt = 0;
#pragma omp target data map(tofrom : cnt)
    for (int it = 0; it < 100; it++) {
#pragma omp target map(tofrom : cnt)
      {
        cnt += 1;
        if (cnt == 10 && !omp_is_initial_device())
          exit(7);
      }
    }
    printf("not reached %ld\n", cnt);
  } else if (!strcmp(mode, "busy-loop")) {
    flag = calloc(1, sizeof *flag);
    pthread_t th;
    pthread_create(&th, NULL, exiter, NULL);
    int *f = (int *)flag;
    long cnt = 0;
#pragma omp target data map(tofrom : cnt)
    for (int it = 0; it < 100; it++) {
#pragma omp target map(tofrom : cnt) is_device_ptr(f)
      {
        cnt += 1;
        if (cnt == 20) {
          double t0 = omp_get_wtime();
          *(volatile int *)f = 1;
          while (omp_get_wtime() - t0 < 20.0)
            ;
        }
      }
    }
    printf("not reached\n");
  } else if (!strcmp(mode, "thread")) {
    pthread_t th;
    pthread_create(&th, NULL, offload_then_exit, NULL);
    pthread_join(th, NULL);
    printf("not reached\n");
  } else if (!strcmp(mode, "busy")) {
    flag = calloc(1, sizeof *flag);
    pthread_t th;
    pthread_create(&th, NULL, exiter, NULL);
    int *f = (int *)flag;
    /* the host plugins run kernels on the host: the kernel sees this host flag */
#pragma omp target is_device_ptr(f)
    {
      double t0 = omp_get_wtime();
      *(volatile int *)f = 1;
      while (omp_get_wtime() - t0 < 20.0)
        ;
    }
    printf("not reached\n");
  } else if (!strcmp(mode, "atexit")) {
    atexit(at_exit_region);
  } else if (!strcmp(mode, "quick")) {
    quick_exit(5);
  } else if (!strcmp(mode, "abort")) {
    abort();
  }
  return 3;
}
