/* omp_alloc with LLVM's llvm_omp_target_{host,shared,device}_mem_alloc allocators
   (libomp calls libomptarget's llvm_omp_target_alloc_*), next to the direct calls.
   feature: api-llvm-alloc, api-omp-alloc
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
  void *s = llvm_omp_target_alloc_shared(64, d), *v = llvm_omp_target_alloc_device(64, d);
  void *q = omp_alloc(64, llvm_omp_target_host_mem_alloc);
  void *qs = omp_alloc(64, llvm_omp_target_shared_mem_alloc);
  void *qd = omp_alloc(64, llvm_omp_target_device_mem_alloc);
  printf("omp_alloc shared=%s device=%s\n", qs ? "ok" : "null", qd ? "ok" : "null");
  omp_free(qs, llvm_omp_target_shared_mem_alloc);
  omp_free(qd, llvm_omp_target_device_mem_alloc);
  if (h) { h[0] = 1; h[1] = 2; h[2] = 3; }
#pragma omp target map(from : sum) is_device_ptr(h)
  sum = h ? h[0] + h[1] + h[2] : -1;
  printf("host=%s shared=%s device=%s omp_alloc(host_mem)=%s sum=%d\n", h ? "ok" : "null", s ? "ok" : "null",
         v ? "ok" : "null", q ? "ok" : "null", sum);
  llvm_omp_target_free_host(h, d); llvm_omp_target_free_shared(s, d); llvm_omp_target_free_device(v, d);
  omp_free(q, llvm_omp_target_host_mem_alloc);
  return 0;
}
