/* GCC conformance program: device(), if() and the default-device ICV: regions sent to the
 * initial device or with if(0) run on the host (with host memory), the others on the
 * default device, and omp_set_default_device moves later regions.
 * osh-expect: same */
#include <omp.h>
#include <stdio.h>

int main(void)
{
  int host = omp_get_initial_device(), dev = omp_get_default_device();
  int a[8];
  for (int i = 0; i < 8; i++)
    a[i] = i;
  int on_host = 0;
#pragma omp target device(host) map(tofrom: a)
  for (int i = 0; i < 8; i++)
    a[i] += 1;
  for (int i = 0; i < 8; i++)
    on_host += a[i];
  printf("device(initial): %d\n", on_host);

  int cond = 0;
#pragma omp target if(cond) map(tofrom: a)
  for (int i = 0; i < 8; i++)
    a[i] *= 2;
  printf("if(0): a[7]=%d\n", a[7]);

#pragma omp target device(dev) map(tofrom: a)
  for (int i = 0; i < 8; i++)
    a[i] -= 1;
  printf("device(default): a[0]=%d a[7]=%d\n", a[0], a[7]);

  omp_set_default_device(host);
#pragma omp target map(tofrom: a)
  for (int i = 0; i < 8; i++)
    a[i] += 100;
  omp_set_default_device(dev);
  printf("default=initial: a[0]=%d\n", a[0]);

#pragma omp target data map(tofrom: a) if(cond)
  {
#pragma omp target map(tofrom: a)
    for (int i = 0; i < 8; i++)
      a[i] += 1;
  }
  printf("data if(0): a[0]=%d\n", a[0]);
  return 0;
}
