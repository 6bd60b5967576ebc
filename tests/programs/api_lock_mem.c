/* llvm_omp_target_lock_mem / unlock_mem (host memory made device accessible) and
   llvm_omp_target_dynamic_shared_alloc on the host.
   feature: api-lock-mem
*/
#include <omp.h>
#include <stdio.h>
void *llvm_omp_target_lock_mem(void *, size_t, int);
void llvm_omp_target_unlock_mem(void *, int);
void *llvm_omp_target_dynamic_shared_alloc(void);
int main(void) {
  int d = omp_get_default_device();
  static int buf[256];
  void *locked = llvm_omp_target_lock_mem(buf, sizeof buf, d);
  printf("locked=%s same=%d dyn_shared=%s\n", locked ? "ok" : "null", locked == (void *)buf,
         llvm_omp_target_dynamic_shared_alloc() ? "ok" : "null");
  if (locked)
    llvm_omp_target_unlock_mem(buf, d);
  printf("unlocked\n");
  return 0;
}
