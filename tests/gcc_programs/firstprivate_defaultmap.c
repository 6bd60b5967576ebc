/* GCC conformance program: firstprivate scalars, arrays and structures (private copies
 * on the device, the host keeps its values), defaultmap(tofrom: scalar), nested
 * parallel loops inside the region.
 * osh-expect: same */
#include <stdio.h>

struct pt { double x, y; int id; };

int main(void)
{
  int n = 5;
  double f = 1.5;
  int arr[6] = {1, 2, 3, 4, 5, 6};
  struct pt p = {0.25, 0.75, 9};
  double out[6];
#pragma omp target firstprivate(n, f, arr, p) map(from: out)
  {
    for (int i = 0; i < 6; i++) {
      arr[i] *= n;
      out[i] = arr[i] * f + p.x + p.y + p.id;
    }
    n = -1;
    p.id = -1;
  }
  printf("out: %g %g %g | host n=%d arr[5]=%d p.id=%d\n", out[0], out[3], out[5], n, arr[5],
         p.id);

  int count = 0;
  double acc = 0;
#pragma omp target defaultmap(tofrom: scalar)
  {
#pragma omp parallel for reduction(+: acc) num_threads(4)
    for (int i = 1; i <= 100; i++)
      acc += 1.0 / i;
    count = 100;
  }
  printf("count=%d acc=%.6f\n", count, acc);
  return 0;
}
