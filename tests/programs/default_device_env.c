/* OMP_DEFAULT_DEVICE selects the device of constructs without device(); the initial
   device number runs on the host; an out-of-range number is a fatal error.
   feature: env-default-device, device-numbering, fatal
   run: OMP_DEFAULT_DEVICE=2
   run: OMP_DEFAULT_DEVICE=4
   run: OMP_DEFAULT_DEVICE=9
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int where = -1, x = 0;
  printf("default=%d\n", omp_get_default_device());
  fflush(stdout);
#pragma omp target map(from : where) map(tofrom : x)
  {
    where = omp_is_initial_device();
    x++;
  }
  printf("initial=%d x=%d\n", where, x);
  return 0;
}
