/* libomptarget 22.1's OpenMP 6.0 interop entry points (llvm-project PR #143491; clang
   22 does not emit them yet, so the program calls them with 22.1's argument records):
   __tgt_interop_get gives omp_interop_none (no plugin offers a foreign runtime; nothing
   under a disabled policy), __tgt_interop_use60 / _release of it fail (-1),
   ompx_interop_add_completion_callback of it answers omp_irc_other (-6),
   __tgt_target_sync has no implicit interop object to synchronise; and the CUDA/HIP
   kernel-language launch configuration (__llvmPush/PopCallConfiguration): what was
   pushed comes back, to any thread (22.1 declares it threadprivate but is not built as
   OpenMP code, so there is one for the process).
   feature: api-interop60, api-kernel-language
   clang: 22
   run: -
   run: OMP_TARGET_OFFLOAD=disabled
*/
#include <omp.h>
#include <stdint.h>
#include <stdio.h>

typedef struct { uint32_t version, flags; int gtid; } interop_ctx_t;  /* 22.1 */
typedef struct { int32_t ndeps, ndeps_noalias; void *deplist, *noalias; } dep_pack_t;
void *__tgt_interop_get(void *loc, int32_t type, int64_t dev, int32_t nprefers,
                        void *prefers, interop_ctx_t *ctx, dep_pack_t *deps);
int __tgt_interop_use60(void *loc, void *interop, interop_ctx_t *ctx, dep_pack_t *deps);
int __tgt_interop_release(void *loc, void *interop, interop_ctx_t *ctx, dep_pack_t *deps);
int ompx_interop_add_completion_callback(void *interop, void (*cb)(void *, void *),
                                         void *data);
void __tgt_target_sync(void *loc, int gtid, void *task, void *event);
typedef struct { unsigned x, y, z; } dim3;
unsigned __llvmPushCallConfiguration(dim3 grid, dim3 block, size_t shmem, void *stream);
unsigned __llvmPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem, void *stream);

static void on_done(void *interop, void *data) { (void)interop; ++*(int *)data; }

int main(void) {
  int x = 0, called = 0;
  interop_ctx_t ctx = {0, 0, 0};
  void *target = __tgt_interop_get(NULL, 0, -1, 0, NULL, &ctx, NULL);
  void *sync = __tgt_interop_get(NULL, 1, omp_get_default_device(), 0, NULL, &ctx, NULL);
  printf("get target=%s targetsync=%s\n", target ? "set" : "none", sync ? "set" : "none");
  printf("use60=%d release=%d callback=%d called=%d\n",
         __tgt_interop_use60(NULL, target, &ctx, NULL),
         __tgt_interop_release(NULL, sync, &ctx, NULL),
         ompx_interop_add_completion_callback(target, on_done, &called), called);
  __tgt_target_sync(NULL, 0, NULL, NULL);
  printf("target sync done x=%d\n", x);

  dim3 g = {4, 2, 1}, b = {64, 1, 1}, g2 = {0, 0, 0}, b2 = {0, 0, 0};
  size_t shmem = 0;
  void *stream = NULL;
  unsigned p1 = __llvmPushCallConfiguration(g, b, 128, &x);
  unsigned p2 = __llvmPopCallConfiguration(&g2, &b2, &shmem, &stream);
  printf("push=%u pop=%u grid %u %u %u block %u %u %u shmem=%zu stream ok=%d\n", p1, p2,
         g2.x, g2.y, g2.z, b2.x, b2.y, b2.z, shmem, stream == &x);
  int other = -1;
#pragma omp parallel num_threads(2)
  if (omp_get_thread_num() == 1) {     /* the configuration the first thread pushed */
    dim3 g3 = {9, 9, 9}, b3 = {9, 9, 9};
    size_t s3 = 9;
    void *st3 = &s3;
    __llvmPopCallConfiguration(&g3, &b3, &s3, &st3);
    other = (int)(g3.x + b3.x + s3) + (st3 != NULL);
  }
  printf("other thread sees %d\n", other);
  return 0;
}
