/* GCC conformance program: target update to/from of array sections and of a scalar
 * while a target data region keeps them mapped.
 * osh-expect: same */
#include <stdio.h>

int main(void)
{
  enum { N = 40 };
  float v[N];
  int k = 7;
  for (int i = 0; i < N; i++)
    v[i] = (float)i;
#pragma omp target data map(tofrom: v) map(to: k)
  {
#pragma omp target
    for (int i = 0; i < N; i++)
      v[i] = v[i] * k;
#pragma omp target update from(v[10:5])
    printf("v[10]=%g v[14]=%g\n", v[10], v[14]);
    k = 2;
#pragma omp target update to(k)
    v[0] = 1000;
#pragma omp target update to(v[0:1])
#pragma omp target
    for (int i = 0; i < N; i++)
      v[i] = v[i] + k;
  }
  printf("v[0]=%g v[1]=%g v[10]=%g v[39]=%g\n", v[0], v[1], v[10], v[39]);
  return 0;
}
