"""The C programs of ``offload-shim bench --workloads run`` (:mod:`.run_overhead`): one
OpenMP program per row, each taking its repetition count ``N`` as ``argv[1]``, timing its
own loop (``loop_ns``) and printing a result line that both runtimes must agree on.
Built with ``clang-16 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu``
(:data:`.run_overhead.CLANG_FLAGS`)."""

from __future__ import annotations

__all__ = ["SOURCES", "THREADS"]

_PRELUDE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static long long osh_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}
static long osh_count(int argc, char **argv, long dflt) {
  return argc > 1 ? atol(argv[1]) : dflt;
}
/* The loop runs in chunks of at most CHUNK iterations, each a call of a function that
 * is not inlined: the LLVM 16 x86_64 plugins' kernel launch (ffi_call) leaves the
 * caller's stack pointer lower each time, and a single loop of some 75,000 launches
 * overflows an 8 MiB stack, under the real libomptarget and offload-shim alike. */
#define CHUNK 10000
#define OSH_CHUNKED(n, work)                                                     \
  for (long done_ = 0; done_ < (n); done_ += CHUNK)                              \
    work((n) - done_ < CHUNK ? (n) - done_ : CHUNK)
#define OSH_WORK static __attribute__((noinline)) void
"""


def _maps_source(k: int) -> str:
    decl = "".join(f"static long a{i} = {i};\n" for i in range(k))
    maps = ", ".join(f"a{i}" for i in range(k))
    body = " ".join(f"a{i} += {i + 1};" for i in range(k))
    total = " + ".join(f"a{i}" for i in range(k))
    return _PRELUDE + decl + f"""
OSH_WORK work(long k) {{
  for (long it = 0; it < k; it++) {{
#pragma omp target map(tofrom: {maps})
    {{ {body} }}
  }}
}}
int main(int argc, char **argv) {{
  long n = osh_count(argc, argv, 1000);
  long long t0 = osh_now();
  OSH_CHUNKED(n, work);
  long long t1 = osh_now();
  printf("%ld\\n", {total});
  printf("loop_ns %lld\\n", t1 - t0);
  return 0;
}}
"""


SOURCES = {
    "startup": _PRELUDE + r"""
/* no target region; a declare-target variable gives the device image an entry, as
 * any program that offloads has (an image without entries is a corner of its own) */
#pragma omp declare target
int osh_unused = 0;
#pragma omp end declare target
int main(int argc, char **argv) {
  (void)argc; (void)argv;
  printf("0\n");
  printf("loop_ns 0\n");
  return 0;
}
""",
    "data-1": _PRELUDE + r"""
static long x = 0;
OSH_WORK work(long k) {
  for (long it = 0; it < k; it++) {
#pragma omp target map(tofrom: x)
    { x += 1; }
  }
}
int main(int argc, char **argv) {
  long n = osh_count(argc, argv, 1000);
  long long t0 = 0, t1 = 0;
#pragma omp target data map(tofrom: x)
  {
    t0 = osh_now();
    OSH_CHUNKED(n, work);
    t1 = osh_now();
  }
  printf("%ld\n", x);
  printf("loop_ns %lld\n", t1 - t0);
  return 0;
}
""",
    "enter-exit": _PRELUDE + r"""
static double b[64];
OSH_WORK work(long k) {
  for (long it = 0; it < k; it++) {
#pragma omp target enter data map(to: b[0:64])
    b[it % 64] += 1.0;     /* host change, overwritten by the exit copy */
#pragma omp target exit data map(from: b[0:64])
  }
}
int main(int argc, char **argv) {
  long n = osh_count(argc, argv, 1000);
  for (int i = 0; i < 64; i++) b[i] = i;
#pragma omp target map(tofrom: b[0:64])      /* once: the image has a kernel entry */
  { b[0] += 0.0; }
  long long t0 = osh_now();
  OSH_CHUNKED(n, work);
  long long t1 = osh_now();
  double s = 0;
  for (int i = 0; i < 64; i++) s += b[i];
  printf("%.1f\n", s);
  printf("loop_ns %lld\n", t1 - t0);
  return 0;
}
""",
    "update": _PRELUDE + r"""
static double b[64];
OSH_WORK work(long k) {
  for (long it = 0; it < k; it++) {
    b[it % 64] += 1.0;
#pragma omp target update to(b[0:64])
#pragma omp target update from(b[0:64])
  }
}
int main(int argc, char **argv) {
  long n = osh_count(argc, argv, 1000);
  for (int i = 0; i < 64; i++) b[i] = i;
  long long t0 = 0, t1 = 0;
#pragma omp target data map(tofrom: b[0:64])
  {
#pragma omp target                          /* once: the image has a kernel entry */
    { b[0] += 0.0; }
    t0 = osh_now();
    OSH_CHUNKED(n, work);
    t1 = osh_now();
  }
  double s = 0;
  for (int i = 0; i < 64; i++) s += b[i];
  printf("%.1f\n", s);
  printf("loop_ns %lld\n", t1 - t0);
  return 0;
}
""",
    "copy-64M": _PRELUDE + r"""
int main(int argc, char **argv) {
  long n = osh_count(argc, argv, 20);
  long m = 8L * 1024 * 1024;             /* doubles: 64 MiB */
  double *a = malloc(m * sizeof(double));
  if (!a) return 1;
  for (long i = 0; i < m; i++) a[i] = (double)(i & 1023);
  long long t0 = osh_now();
  for (long it = 0; it < n; it++) {
#pragma omp target map(tofrom: a[0:m])
    { a[it] += 1.0; a[m - 1 - it] += 2.0; }
  }
  long long t1 = osh_now();
  double s = 0;
  for (long i = 0; i < m; i += 4096) s += a[i];
  printf("%.1f %.1f\n", s, a[m - 1]);
  printf("loop_ns %lld\n", t1 - t0);
  free(a);
  return 0;
}
""",
}
for _k in (1, 4, 16, 64):
    SOURCES[f"maps-{_k}"] = _maps_source(_k)
SOURCES["nowait"] = _PRELUDE + r"""
static long x = 0;
OSH_WORK work(long k) {
  for (long it = 0; it < k; it++) {
#pragma omp target nowait map(tofrom: x)
    { x += 1; }
#pragma omp taskwait
  }
}
int main(int argc, char **argv) {
  long n = osh_count(argc, argv, 1000);
  long long t0 = osh_now();
  OSH_CHUNKED(n, work);
  long long t1 = osh_now();
  printf("%ld\n", x);
  printf("loop_ns %lld\n", t1 - t0);
  return 0;
}
"""
#: host threads of the ``threads-8`` row; each runs its share of the ``N`` regions
THREADS = 8
SOURCES[f"threads-{THREADS}"] = _PRELUDE + r"""
#include <omp.h>
#define T %d
static long xs[T][8];               /* a cache line per thread */
int main(int argc, char **argv) {
  long n = osh_count(argc, argv, 1000);
  long long t0 = osh_now();
#pragma omp parallel num_threads(T)
  {
    int t = omp_get_thread_num();
    long mine = n / T + (t < n %% T);
    long *x = &xs[t][0];
    for (long it = 0; it < mine; it++) {
#pragma omp target map(tofrom: x[0:1])
      { x[0] += 1; }
    }
  }
  long long t1 = osh_now();
  long s = 0;
  for (int t = 0; t < T; t++) s += xs[t][0];
  printf("%%ld\n", s);
  printf("loop_ns %%lld\n", t1 - t0);
  return 0;
}
""" % THREADS
