/* GCC conformance program: target data regions (nested, with target regions inside that
 * find the data already mapped: no copy back before the data region ends), target
 * update to/from inside, use_device_ptr.
 * osh-expect: same */
#include <stdio.h>

int main(void)
{
  enum { N = 32 };
  int a[N], b[N];
  for (int i = 0; i < N; i++) {
    a[i] = i;
    b[i] = 0;
  }
#pragma omp target data map(tofrom: a) map(alloc: b)
  {
#pragma omp target
    for (int i = 0; i < N; i++)
      b[i] = a[i] + 1;
#pragma omp target data map(tofrom: b)
    {
#pragma omp target
      for (int i = 0; i < N; i++)
        a[i] = b[i] * 2;
    }
#pragma omp target update from(a[0:4])
    printf("inside: a[0..3]=%d %d %d %d\n", a[0], a[1], a[2], a[3]);
    for (int i = 0; i < N; i++)
      a[i] = 100 + i;
#pragma omp target update to(a[0:N])
#pragma omp target
    for (int i = 0; i < N; i++)
      a[i] += b[i];
    int *ap = a;
#pragma omp target data use_device_ptr(ap)
    {
      /* ap is the device address of a here (the host address on the host) */
#pragma omp target is_device_ptr(ap)
      for (int i = 0; i < N; i++)
        ap[i] += 1000;
    }
  }
  long s = 0;
  for (int i = 0; i < N; i++)
    s += a[i];
  printf("after: a[0]=%d a[31]=%d sum=%ld\n", a[0], a[31], s);
  return 0;
}
