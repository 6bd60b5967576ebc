/* OpenMP target regions exercised through offload_shim's interposer (issue 7).
 *
 * Build with offloading (device image for the x86-64 host plugins):
 *   clang-16 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -shared -fPIC -O1 \
 *            -Wl,-Bsymbolic omp_regions.c -o libomp_regions.so
 * and without (host only):
 *   clang-16 -fopenmp -shared -fPIC -O1 -Wl,-Bsymbolic omp_regions.c -o libomp_regions_host.so
 * Every exported osh_region_* function returns a checksum that must be equal in both
 * build under libomptarget 16 and under offload_shim.  Regions whose result does not
 * depend on host and device memory being separate (saxpy, tofrom, device_ptr, struct)
 * also equal the host-only build; data_update, enter_exit and global observe the
 * separate device copy on purpose (release without copy, update from/to).
 * osh_region_on_device() returns 1 when its region ran on a device.
 */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#define N 1000

#pragma omp declare target
double osh_omp_scale = 3.0;          /* a declare target global */
#pragma omp end declare target

static int64_t checksum_d(const double *a, int n)
{
  int64_t s = 0;
  for (int i = 0; i < n; i++)
    s = s * 31 + (int64_t)(a[i] * 8.0);
  return s;
}

/* map(to:) + map(from:) + scalars (firstprivate literals) */
int64_t osh_region_saxpy(void)
{
  double x[N], y[N];
  double alpha = 2.5;
  int n = N;
  for (int i = 0; i < N; i++) { x[i] = i; y[i] = 0; }
#pragma omp target map(to: x[0:n]) map(from: y[0:n])
  for (int i = 0; i < n; i++)
    y[i] = alpha * x[i] + 1.0;
  return checksum_d(y, N);
}

/* map(tofrom:) of an array and a scalar reduction variable */
int64_t osh_region_tofrom(void)
{
  double a[N];
  double sum = 0.0;
  for (int i = 0; i < N; i++) a[i] = i % 17;
#pragma omp target map(tofrom: a[0:N], sum)
  for (int i = 0; i < N; i++) {
    a[i] = a[i] * a[i];
    sum += a[i];
  }
  return checksum_d(a, N) ^ (int64_t)sum;
}

/* target data + target update + two regions inside the data region */
int64_t osh_region_data_update(void)
{
  double *a = malloc(N * sizeof(double));
  int64_t r = 0;
  for (int i = 0; i < N; i++) a[i] = 1.0;
#pragma omp target data map(tofrom: a[0:N])
  {
#pragma omp target
    for (int i = 0; i < N; i++) a[i] += 1.0;          /* device: 2 */
    for (int i = 0; i < N; i++) a[i] = 100.0;        /* host copy changed, device not */
#pragma omp target update from(a[0:N])              /* host: 2 again */
    r = (int64_t)a[0] * 1000 + (int64_t)a[N - 1];
    for (int i = 0; i < N; i++) a[i] = 5.0;
#pragma omp target update to(a[0:N])                /* device: 5 */
#pragma omp target
    for (int i = 0; i < N; i++) a[i] *= 2.0;          /* device: 10 */
  }                                                  /* from at exit: host 10 */
  r = r * 7 + checksum_d(a, N);
  free(a);
  return r;
}

/* target enter/exit data with alloc/to/release/delete/from */
int64_t osh_region_enter_exit(void)
{
  double *b = malloc(N * sizeof(double));
  for (int i = 0; i < N; i++) b[i] = i;
#pragma omp target enter data map(to: b[0:N])
#pragma omp target enter data map(alloc: b[0:N])    /* refcount 2 */
#pragma omp target
  for (int i = 0; i < N; i++) b[i] = -b[i];
#pragma omp target exit data map(release: b[0:N])   /* refcount 1, no copy */
  int64_t still = b[5] == 5.0;                      /* host untouched */
#pragma omp target exit data map(from: b[0:N])      /* refcount 0: copy back */
  int64_t r = checksum_d(b, N) * 3 + still;
  free(b);
  return r;
}

/* the declare target global: update to/from and use inside a region */
int64_t osh_region_global(void)
{
  double out[16];
  osh_omp_scale = 4.0;
#pragma omp target update to(osh_omp_scale)
#pragma omp target map(from: out[0:16])
  {
    for (int i = 0; i < 16; i++) out[i] = osh_omp_scale * i;
    osh_omp_scale = 0.5;
  }
  double seen = osh_omp_scale;                      /* still 4.0 on the host */
#pragma omp target update from(osh_omp_scale)
  int64_t r = checksum_d(out, 16) * 10 + (int64_t)(seen * 2) + (int64_t)(osh_omp_scale * 100);
  osh_omp_scale = 3.0;
#pragma omp target update to(osh_omp_scale)
  return r;
}

/* omp_target_alloc + is_device_ptr + omp_target_memcpy + omp_target_is_present */
int64_t osh_region_device_ptr(void)
{
  int dev = omp_get_default_device();
  int host = omp_get_initial_device();
  if (omp_get_num_devices() == 0)
    dev = host;
  double h[N];
  for (int i = 0; i < N; i++) h[i] = i * 0.25;
  double *d = omp_target_alloc(N * sizeof(double), dev);
  if (!d)
    return -1;
  omp_target_memcpy(d, h, N * sizeof(double), 0, 0, dev, host);
#pragma omp target is_device_ptr(d) device(dev)
  for (int i = 0; i < N; i++) d[i] = d[i] * 4.0 + 1.0;
  for (int i = 0; i < N; i++) h[i] = 0;
  omp_target_memcpy(h, d, N * sizeof(double), 0, 0, host, dev);
  int present_before = 0, present_in = 0;
  double probe[4];
  present_before = omp_target_is_present(probe, dev);
#pragma omp target data map(alloc: probe[0:4]) device(dev)
  present_in = omp_target_is_present(probe, dev);
  omp_target_free(d, dev);
  int64_t flags = (dev == host) ? 1 : (!present_before) + 2 * present_in;
  return checksum_d(h, N) * 4 + (dev == host ? 1 : flags == 3);
}

/* struct with a pointer member: map the struct and the pointee (member_of, ptr_and_obj) */
struct osh_vec { int n; double *data; double bias; };

int64_t osh_region_struct(void)
{
  struct osh_vec v;
  v.n = 64;
  v.bias = 0.5;
  v.data = malloc(64 * sizeof(double));
  for (int i = 0; i < 64; i++) v.data[i] = i;
#pragma omp target map(to: v) map(tofrom: v.data[0:64])
  for (int i = 0; i < v.n; i++) v.data[i] = v.data[i] * 2 + v.bias;
  int64_t r = checksum_d(v.data, 64) + (v.data != 0);
  free(v.data);
  return r;
}

/* where did the last region run?  1 = a device, 0 = the host */
int64_t osh_region_on_device(void)
{
  int on_dev = 0;
#pragma omp target map(from: on_dev)
  on_dev = !omp_is_initial_device();
  return on_dev;
}
