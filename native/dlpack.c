/* libosh_dlpack.so: the C ends of the DLPack capsules offload_shim exports
 * (offload_shim/core/array.py, bound in offload_shim/abi/dlpack.py).
 *
 * A consumer calls a DLPack tensor's deleter, and Python calls a capsule's destructor,
 * at moments when an exception may be pending: NumPy sets "Unsupported device in
 * DLTensor" and then drops the capsule it refused.  Python code must not run with an
 * exception set (the exception would be lost, and the export never ended), so these
 * deleters and the destructor are C: they take the GIL, save the error indicator, tell
 * Python that export KEY ended, and restore the indicator (the pattern of
 * dmlc/dlpack's Python specification and of numpy's
 * numpy/_core/src/multiarray/dlpack.c array_dlpack_capsule_deleter).
 *
 * The Python C API functions arrive as addresses through osh_dlpack_init (from
 * ctypes.pythonapi), so this library has no undefined symbols and loads anywhere.
 * Structures: dmlc/dlpack include/dlpack/dlpack.h, v1.0 (DLManagedTensorVersioned)
 * and v0.8 (DLManagedTensor).
 */
#include <stddef.h>
#include <stdint.h>

typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

typedef int (*gil_ensure_fn)(void);               /* PyGILState_Ensure */
typedef void (*gil_release_fn)(int);              /* PyGILState_Release */
typedef void (*err_fetch_fn)(void **, void **, void **);   /* PyErr_Fetch */
typedef void (*err_restore_fn)(void *, void *, void *);   /* PyErr_Restore */
typedef int (*capsule_is_valid_fn)(void *, const char *); /* PyCapsule_IsValid */
typedef void *(*capsule_pointer_fn)(void *, const char *); /* PyCapsule_GetPointer */
typedef void (*ended_fn)(uint64_t);               /* Python: export KEY ended */

static gil_ensure_fn gil_ensure;
static gil_release_fn gil_release;
static err_fetch_fn err_fetch;
static err_restore_fn err_restore;
static capsule_is_valid_fn capsule_is_valid;
static capsule_pointer_fn capsule_pointer;
static ended_fn ended;

/* Sets the Python C API functions and the Python callback; returns 0, or -1 when one
 * is NULL (nothing is set then). */
__attribute__((visibility("default")))
int osh_dlpack_init(void *ensure, void *release, void *fetch, void *restore,
                    void *is_valid, void *get_pointer, void *ended_cb)
{
  if (!ensure || !release || !fetch || !restore || !is_valid || !get_pointer || !ended_cb)
    return -1;
  gil_ensure = (gil_ensure_fn)ensure;
  gil_release = (gil_release_fn)release;
  err_fetch = (err_fetch_fn)fetch;
  err_restore = (err_restore_fn)restore;
  capsule_is_valid = (capsule_is_valid_fn)is_valid;
  capsule_pointer = (capsule_pointer_fn)get_pointer;
  ended = (ended_fn)ended_cb;
  return 0;
}

/* With the GIL held and the error indicator saved. */
static void end_export(void *manager_ctx)
{
  void *type, *value, *traceback;
  err_fetch(&type, &value, &traceback);
  ended((uint64_t)(uintptr_t)manager_ctx);
  err_restore(type, value, traceback);
}

__attribute__((visibility("default")))
void osh_dlpack_deleter(DLManagedTensor *self)
{
  if (!self || !ended)
    return;
  int g = gil_ensure();
  end_export(self->manager_ctx);
  gil_release(g);
}

__attribute__((visibility("default")))
void osh_dlpack_deleter_versioned(DLManagedTensorVersioned *self)
{
  if (!self || !ended)
    return;
  int g = gil_ensure();
  end_export(self->manager_ctx);
  gil_release(g);
}

/* The capsule's destructor (PyCapsule_Destructor).  A consumed capsule was renamed
 * "used_dltensor" / "used_dltensor_versioned" and its deleter is the consumer's to
 * call; a capsule that dies unconsumed ends its export here. */
__attribute__((visibility("default")))
void osh_dlpack_capsule_destructor(void *capsule)
{
  if (!capsule || !ended)
    return;
  int g = gil_ensure();
  void *type, *value, *traceback;
  err_fetch(&type, &value, &traceback);
  if (capsule_is_valid(capsule, "dltensor")) {
    DLManagedTensor *m = capsule_pointer(capsule, "dltensor");
    if (m)
      ended((uint64_t)(uintptr_t)m->manager_ctx);
  } else if (capsule_is_valid(capsule, "dltensor_versioned")) {
    DLManagedTensorVersioned *m = capsule_pointer(capsule, "dltensor_versioned");
    if (m)
      ended((uint64_t)(uintptr_t)m->manager_ctx);
  }
  err_restore(type, value, traceback);
  gil_release(g);
}
