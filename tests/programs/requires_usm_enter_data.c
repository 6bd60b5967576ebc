/* requires unified_shared_memory with enter/exit data: the data stay in host memory,
   omp_target_is_present and omp_get_mapped_ptr of them, a kernel sees a host store made
   after the enter data, partial release.  The image's requires flag reaches the runtime
   through __tgt_register_requires (clang 16) or the image's requires entry (clang 19+,
   registered with the image: test_conformance_clang.py).
   feature: requires-usm
   run: -
*/
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#pragma omp requires unified_shared_memory
int main(void) {
  int d = omp_get_default_device();
  double *v = malloc(8 * sizeof(double));
  for (int i = 0; i < 8; i++)
    v[i] = i;
#pragma omp target enter data map(to : v[0 : 8])
  v[3] = 33;
  void *mp = omp_get_mapped_ptr(v, d);
  printf("present=%d mapped=%s\n", omp_target_is_present(v, d),
         mp == (void *)v ? "same" : mp ? "other" : "null");
#pragma omp target
  v[4] = v[3] + 1;
  printf("v4=%g\n", v[4]);
#pragma omp target map(tofrom : v[0 : 8])
  v[5] = v[4] * 2;
  printf("v5=%g\n", v[5]);
#pragma omp target exit data map(release : v[0 : 8])
  printf("present_after=%d\n", omp_target_is_present(v, d));
  free(v);
  return 0;
}
