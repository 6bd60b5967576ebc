/* omp_target_associate_ptr / disassociate_ptr: while associated, maps use the
   associated device memory and copy nothing new; errors for double association and
   disassociating what is not associated.
   feature: api-associate-ptr
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int x[4] = {5, 5, 5, 5}, y = 0, v[4] = {42, 43, 44, 45};
  int dev = omp_get_default_device(), h = omp_get_initial_device();
  int *d = omp_target_alloc(sizeof x, dev);
  omp_target_memcpy(d, v, sizeof v, 0, 0, dev, h);
  int rc1 = omp_target_associate_ptr(x, d, sizeof x, 0, dev);
  int rc1b = omp_target_associate_ptr(x, d, sizeof x, 0, dev);
  int pres = omp_target_is_present(x, dev);
#pragma omp target map(tofrom : x[0 : 4]) map(from : y)
  { y = x[1]; x[2] = 7; }
  int after_region = x[2];
#pragma omp target update from(x[2 : 1])
  int rc2 = omp_target_disassociate_ptr(x, dev);
  int rc3 = omp_target_disassociate_ptr(x, dev);
  printf("associate=%d again=%d present=%d y=%d after_region=%d updated=%d disassociate=%d again=%d present_after=%d\n",
         rc1, rc1b, pres, y, after_region, x[2], rc2, rc3, omp_target_is_present(x, dev));
  omp_target_free(d, dev);
  return 0;
}
