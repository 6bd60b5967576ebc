/* An offload library with data directives only (its image has no kernel): a round trip
 * through enter/exit data, the presence checks in between. */
#include <omp.h>

int lib_data(int x)
{
  int a[4] = {x, x + 1, x + 2, x + 3};
  int dev = omp_get_default_device();
#pragma omp target enter data map(to : a)
  int present = omp_target_is_present(a, dev);
  for (int i = 0; i < 4; i++)
    a[i] = 0;
#pragma omp target exit data map(from : a)
  int gone = !omp_target_is_present(a, dev);
  return (a[0] + a[1] + a[2] + a[3]) * 10 + present * 2 + gone;
}
