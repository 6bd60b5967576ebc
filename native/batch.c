/* libosh_batch.so: one foreign call for a run of calls of one plugin entry point.
 *
 * The Python runtime copies the data of a construct with several calls of the same
 * plugin entry point (__tgt_rtl_data_submit / __tgt_rtl_data_retrieve, prototype
 * int32_t (int32_t ID, void *A, void *B, int64_t Size) in LLVM 14 and 16).  Through
 * ctypes each call costs a foreign-call round trip; osh_batch_call4 makes them all in
 * one.  Mechanism only: which calls, in which order and with which checks is decided
 * in Python (offload_shim/plugins/llvm.py, offload_shim/core/compiled.py).
 */
#include <stdint.h>

typedef int32_t (*osh_call4_fn)(int32_t, void *, void *, int64_t);

/* Calls fn(dev, ops[3i], ops[3i+1], (int64_t)ops[3i+2]) for i = 0..n-1 in order and
 * stops at the first that does not return 0, storing its return code in *rc.  Returns
 * the number of calls that returned 0. */
__attribute__((visibility("default")))
int64_t osh_batch_call4(void *fn, int32_t dev, int64_t n, const uint64_t *ops, int32_t *rc)
{
  osh_call4_fn f = (osh_call4_fn)fn;
  *rc = 0;
  for (int64_t i = 0; i < n; i++) {
    int32_t r = f(dev, (void *)(uintptr_t)ops[3 * i], (void *)(uintptr_t)ops[3 * i + 1],
                  (int64_t)ops[3 * i + 2]);
    if (r != 0) {
      *rc = r;
      return i;
    }
  }
  return n;
}
