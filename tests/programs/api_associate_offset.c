/* omp_target_associate_ptr with a device offset, and disassociate while a map still
   holds a reference.
   feature: api-associate-ptr
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int dev = omp_get_default_device(), h = omp_get_initial_device();
  double a[4] = {0}, init[8];
  for (int i = 0; i < 8; i++) init[i] = i;
  double *d = omp_target_alloc(sizeof init, dev);
  omp_target_memcpy(d, init, sizeof init, 0, 0, dev, h);
  int rc = omp_target_associate_ptr(a, d, sizeof a, 4 * sizeof(double), dev);
  double s = 0;
#pragma omp target map(to : a) map(from : s)
  s = a[0] + a[3];
#pragma omp target enter data map(to : a)
  int busy = omp_target_disassociate_ptr(a, dev);
#pragma omp target exit data map(release : a)
  int ok = omp_target_disassociate_ptr(a, dev);
  printf("rc=%d s=%.0f busy=%d ok=%d\n", rc, s, busy, ok);
  omp_target_free(d, dev);
  return 0;
}
