/* Entry points libomptarget 19.1 / 22.1 export besides the OpenMP routines:
   __tgt_rtl_init / __tgt_rtl_deinit (its runtime's user count; calls in pairs leave the
   runtime up for the constructs after them), ompt_libomptarget_connect (19.1: the OMPT
   connector of separately built plugins; nothing to connect here) and, 22.1,
   llvmLaunchKernel (CUDA/HIP on OpenMP): launched through __tgt_target_kernel, a host
   pointer that is no kernel fails as any construct does -- the runtime's lines and,
   offloading being mandatory with devices present, its fatal error; the host fallback
   (-1, nothing else) when offloading is disabled.
   feature: api-llvm-extensions, api-kernel-language
   clang: 19 22
   run: -
   run: launch
   run: OMP_TARGET_OFFLOAD=disabled launch
*/
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
void __tgt_rtl_init(void);
void __tgt_rtl_deinit(void);
#if __clang_major__ == 19
void ompt_libomptarget_connect(void *result);
#endif
#if __clang_major__ >= 22
typedef struct { unsigned x, y, z; } dim3;
unsigned llvmLaunchKernel(const void *func, dim3 grid, dim3 block, void *args,
                          size_t shmem, void *stream);
#endif

int main(int argc, char **argv) {
  int x = 1;
  __tgt_rtl_init();
#pragma omp target map(tofrom: x)
  x += 1;
  __tgt_rtl_init();
  __tgt_rtl_deinit();
  __tgt_rtl_deinit();
#pragma omp target map(tofrom: x)
  x += 1;
#if __clang_major__ == 19
  ompt_libomptarget_connect(NULL);
#endif
  printf("x=%d devices=%d\n", x, omp_get_num_devices());
  fflush(stdout);
#if __clang_major__ >= 22
  if (argc > 1 && !strcmp(argv[1], "launch")) {
    dim3 grid = {1, 1, 1};
    unsigned r = llvmLaunchKernel(&x, grid, grid, NULL, 0, NULL);
    printf("launch=%u\n", r);
  }
#else
  (void)argc; (void)argv;
#endif
  return 0;
}
