/* LLVM's allocation extensions: host, shared and device memory, and their frees.
   feature: api-llvm-alloc
*/
#include <omp.h>
#include <stdio.h>
void *llvm_omp_target_alloc_host(size_t, int);
void *llvm_omp_target_alloc_shared(size_t, int);
void *llvm_omp_target_alloc_device(size_t, int);
void llvm_omp_target_free_host(void *, int);
void llvm_omp_target_free_shared(void *, int);
void llvm_omp_target_free_device(void *, int);
int main(void) {
  int d = omp_get_default_device(), sum = 0;
  int *h = llvm_omp_target_alloc_host(3 * sizeof(int), d);
  int *s = llvm_omp_target_alloc_shared(3 * sizeof(int), d);
  int *v = llvm_omp_target_alloc_device(3 * sizeof(int), d);
  void *hi = llvm_omp_target_alloc_host(16, omp_get_initial_device());
  if (h) { h[0] = 1; h[1] = 2; h[2] = 3; }
  if (s) { s[0] = 10; s[1] = 20; s[2] = 30; }
#pragma omp target map(from : sum) is_device_ptr(h, s, v)
  {
    v[0] = 100;
    sum = h[0] + h[1] + h[2] + s[0] + s[1] + s[2] + v[0];
  }
  printf("host=%s shared=%s device=%s initial=%s sum=%d\n", h ? "ok" : "null", s ? "ok" : "null",
         v ? "ok" : "null", hi ? "ok" : "null", sum);
  llvm_omp_target_free_host(h, d);
  llvm_omp_target_free_shared(s, d);
  llvm_omp_target_free_device(v, d);
  llvm_omp_target_free_host(hi, omp_get_initial_device());
  return 0;
}
