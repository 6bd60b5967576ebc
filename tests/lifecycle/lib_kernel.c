/* An offload library with a kernel: where it ran and a value computed there. */
#include <omp.h>

int lib_where(int x, int *twice)
{
  int dev = 0, y = 0;
#pragma omp target map(from : dev, y)
  {
    dev = !omp_is_initial_device();
    y = 2 * x;
  }
  *twice = y;
  return dev;
}
