/* GCC conformance program: structures: whole structures, members only (GOMP_MAP_STRUCT,
 * the elements of one structure counted once per construct), a pointer member with its
 * array section attached, a structure kept by enter data and its members used later.
 * osh-expect: same */
#include <stdio.h>
#include <stdlib.h>

struct vec {
  int n;
  double *data;
  double scale;
  int tag[4];
};

int main(void)
{
  struct vec v;
  v.n = 16;
  v.data = malloc(16 * sizeof(double));
  v.scale = 0.5;
  for (int i = 0; i < 16; i++)
    v.data[i] = i;
  for (int i = 0; i < 4; i++)
    v.tag[i] = i;

#pragma omp target map(tofrom: v) map(tofrom: v.data[0:v.n])
  for (int i = 0; i < v.n; i++)
    v.data[i] *= v.scale;
  printf("data[2]=%g data[15]=%g\n", v.data[2], v.data[15]);

#pragma omp target map(tofrom: v.scale, v.tag[1:2])
  {
    v.scale *= 4;
    v.tag[1] += 10;
    v.tag[2] += 20;
  }
  printf("scale=%g tag=%d %d %d %d\n", v.scale, v.tag[0], v.tag[1], v.tag[2], v.tag[3]);

#pragma omp target enter data map(to: v)
#pragma omp target enter data map(to: v.data[0:v.n])
#pragma omp target
  for (int i = 0; i < v.n; i++)
    v.data[i] += v.tag[1];
#pragma omp target exit data map(from: v.data[0:v.n])
#pragma omp target exit data map(release: v)
  printf("data[0]=%g data[15]=%g\n", v.data[0], v.data[15]);
  free(v.data);
  return 0;
}
