/*
 * kernels.c - sample offload image for offload_shim (libosh_sample_kernels.so).
 *
 * An x86-64 shared object usable as a "device image" by the host plugins:
 *   - libosh_hostplugin.so (both ABIs) and the LLVM 16 x86_64 plugins resolve the kernels
 *     and the global by name (dlsym);
 *   - the LLVM 14 x86_64 plugin reads the `omp_offloading_entries` section instead, by
 *     order, so the records below are in the same order as the host entries callers use:
 *     vec_add, axpy, increment, scale_by_global, osh_scale.
 * Every kernel parameter is pointer-sized (host plugins call kernels with N pointer args).
 */
#include <stddef.h>
#include <stdint.h>

double osh_scale = 3.0;

void vec_add(const double *a, const double *b, double *c, long n) {
  for (long i = 0; i < n; i++) c[i] = a[i] + b[i];
}

void axpy(double *y, const double *x, const double *alpha, long n) {
  for (long i = 0; i < n; i++) y[i] += *alpha * x[i];
}

void increment(long *p, long n) {
  for (long i = 0; i < n; i++) p[i] += 1;
}

void scale_by_global(double *y, long n) {
  for (long i = 0; i < n; i++) y[i] *= osh_scale;
}

/* __tgt_offload_entry, 32 bytes on x86-64 */
struct osh_offload_entry {
  void *addr;
  const char *name;
  size_t size;
  int32_t flags;
  int32_t reserved;
};

/* Writable (relocated) section read by the LLVM 14 x86_64 plugin. One array => fixed order. */
__attribute__((section("omp_offloading_entries"), used, aligned(8)))
struct osh_offload_entry osh_offload_entries[] = {
    {(void *)&vec_add, "vec_add", 0, 0, 0},
    {(void *)&axpy, "axpy", 0, 0, 0},
    {(void *)&increment, "increment", 0, 0, 0},
    {(void *)&scale_by_global, "scale_by_global", 0, 0, 0},
    {(void *)&osh_scale, "osh_scale", sizeof(double), 0, 0},
};
