/* GCC conformance library: offload regions in a shared library loaded by a Python host
 * (tests/gcc_programs/lib_host.py), or by offload-shim run-library.  Every function
 * returns a number that does not depend on where the regions run.
 * osh-expect: library */
#include <omp.h>
#include <stdint.h>

#pragma omp declare target
static int64_t twice(int64_t x) { return 2 * x; }
#pragma omp end declare target

int64_t lib_saxpy(void)
{
  enum { N = 256 };
  float x[N], y[N];
  for (int i = 0; i < N; i++) {
    x[i] = i;
    y[i] = 1;
  }
  float a = 2;
#pragma omp target map(to: x) map(tofrom: y)
  for (int i = 0; i < N; i++)
    y[i] = a * x[i] + y[i];
  int64_t s = 0;
  for (int i = 0; i < N; i++)
    s += (int64_t)y[i];
  return s;
}

int64_t lib_enter_exit(void)
{
  int64_t v[16];
  for (int i = 0; i < 16; i++)
    v[i] = i;
#pragma omp target enter data map(to: v)
#pragma omp target
  for (int i = 0; i < 16; i++)
    v[i] = twice(v[i]);
#pragma omp target exit data map(from: v)
  int64_t s = 0;
  for (int i = 0; i < 16; i++)
    s += v[i];
  return s;
}

int64_t lib_teams(void)
{
  int64_t s = 0;
#pragma omp target teams distribute parallel for reduction(+: s) map(tofrom: s)
  for (int i = 0; i < 1000; i++)
    s += i;
  return s;
}

/* the device list as this library sees it: omp_get_num_devices(), then the initial
 * device, as 100 * n + initial */
int64_t lib_devices(void)
{
  return 100 * (int64_t)omp_get_num_devices() + omp_get_initial_device();
}
