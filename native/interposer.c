/* libosh_interposer.so: libomptarget's host entry points, forwarded to Python.
 *
 * Code built by clang-16 -fopenmp -fopenmp-targets=... calls __tgt_register_lib from a
 * constructor, __tgt_target_kernel / __tgt_target_data_*_mapper for every construct and
 * omp_target_* for the device memory API, all bound to version node VERS1.0 of
 * libomptarget.so.16.  Loaded RTLD_GLOBAL before such a library, this object provides
 * the same names under the same version node (interposer.map), so the library's
 * references bind here instead of to libomptarget.so.16 (which the dynamic linker still
 * maps as a DT_NEEDED dependency, but which then never sees a registration and so never
 * loads a plugin).
 *
 * Each entry point calls a function pointer of a table installed from Python with
 * osh_interposer_set_callbacks() (ctypes CFUNCTYPE callbacks; offload_shim/interpose.py).
 * Without a table the answers are libomptarget's for "no device": kernels return
 * OMP_TGT_FAIL (-1: the generated code runs the host fallback), data directives do
 * nothing, omp_get_num_devices() is 0, omp_target_* act on the host (initial device).
 * Registrations are recorded in both cases (osh_interposer_registered), so libraries
 * registered before the callbacks were installed can be replayed.
 *
 * A callback returns 0 (success), -1 (failure: host fallback where libomptarget falls
 * back) or OSH_CB_FATAL (-2): the Python side has printed libomptarget's fatal message
 * (OMP_TARGET_OFFLOAD=mandatory) and the process aborts like libomptarget 16 does.
 *
 * GCC (libgomp) entry points GOMP_offload_register_ver / GOMP_offload_unregister_ver
 * are exported too (version nodes GOMP_4.0.1 / GOMP_4.5), but only for registration:
 * launches stay with libgomp, which falls back to the host when it has no image.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OSH_EXPORT __attribute__((visibility("default")))
#define OSH_CB_FATAL (-2)
#define OMP_TGT_SUCCESS 0
#define OMP_TGT_FAIL (-1)

typedef int (*osh_cb_desc)(void *desc);                           /* register/unregister */
typedef int (*osh_cb_requires)(int64_t flags);
typedef int (*osh_cb_kernel)(void *loc, int64_t dev, int32_t teams, int32_t threads,
                             void *host_ptr, void *kernel_args);
/* kind: 0 begin, 1 end, 2 update */
typedef int (*osh_cb_data)(int32_t kind, void *loc, int64_t dev, int32_t n, void **bases,
                           void **args, int64_t *sizes, int64_t *types, void **names,
                           void **mappers);
typedef int (*osh_cb_alloc)(uint64_t size, int32_t dev, void **out);
typedef int (*osh_cb_free)(void *ptr, int32_t dev);
typedef int (*osh_cb_memcpy)(void *dst, const void *src, uint64_t len, uint64_t dst_off,
                             uint64_t src_off, int32_t dst_dev, int32_t src_dev);
typedef int (*osh_cb_present)(const void *ptr, int32_t dev);      /* returns 0/1 */
typedef int (*osh_cb_num_devices)(void);
typedef int (*osh_cb_gomp)(int32_t unregister, uint32_t version, const void *host_table,
                           int32_t target_type, const void *target_data);

struct osh_interposer_callbacks {
  uint64_t size;                 /* sizeof(struct osh_interposer_callbacks) */
  osh_cb_desc register_lib;
  osh_cb_desc unregister_lib;
  osh_cb_requires register_requires;
  osh_cb_kernel target_kernel;
  osh_cb_data target_data;
  osh_cb_alloc target_alloc;
  osh_cb_free target_free;
  osh_cb_memcpy target_memcpy;
  osh_cb_present target_is_present;
  osh_cb_num_devices num_devices;
  osh_cb_gomp gomp_register;
};

static struct osh_interposer_callbacks cbs;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

#define MAX_REG 256
static void *registered[MAX_REG];
static int num_registered;
static int64_t requires_flags;
static uint64_t calls[16];
enum { C_REG, C_UNREG, C_REQ, C_KERNEL, C_DATA, C_ALLOC, C_FREE, C_MEMCPY, C_PRESENT,
       C_NUMDEV, C_GOMP_REG, C_GOMP_UNREG, C_FALLBACK, C_NCALLS };

static void count(int which) { __atomic_fetch_add(&calls[which], 1, __ATOMIC_RELAXED); }

static void fatal_if(int rc)
{
  if (rc == OSH_CB_FATAL) {
    fflush(stdout);
    fflush(stderr);
    abort();
  }
}

/* ---- control API (called from Python) -------------------------------------------- */
OSH_EXPORT int osh_interposer_set_callbacks(const struct osh_interposer_callbacks *cb)
{
  pthread_mutex_lock(&lock);
  if (!cb) {
    memset(&cbs, 0, sizeof cbs);
  } else {
    if (cb->size != sizeof cbs) {
      pthread_mutex_unlock(&lock);
      return -1;
    }
    cbs = *cb;
  }
  pthread_mutex_unlock(&lock);
  return 0;
}

/* Descriptors registered and not unregistered, in registration order. */
OSH_EXPORT int osh_interposer_registered(void **out, int max)
{
  pthread_mutex_lock(&lock);
  int n = num_registered < max ? num_registered : max;
  for (int i = 0; i < n; i++)
    out[i] = registered[i];
  int total = num_registered;
  pthread_mutex_unlock(&lock);
  return total;
}

OSH_EXPORT int64_t osh_interposer_requires(void) { return requires_flags; }

OSH_EXPORT uint64_t osh_interposer_calls(int which)
{
  return (which >= 0 && which < C_NCALLS) ? __atomic_load_n(&calls[which], __ATOMIC_RELAXED)
                                          : 0;
}

/* ---- libomptarget 16 interface (VERS1.0) ------------------------------------------ */
OSH_EXPORT void __tgt_register_requires(int64_t flags)
{
  count(C_REQ);
  requires_flags = flags;
  osh_cb_requires f = cbs.register_requires;
  if (f)
    fatal_if(f(flags));
}

OSH_EXPORT void __tgt_register_lib(void *desc)
{
  count(C_REG);
  pthread_mutex_lock(&lock);
  if (num_registered < MAX_REG)
    registered[num_registered++] = desc;
  osh_cb_desc f = cbs.register_lib;
  pthread_mutex_unlock(&lock);
  if (f)
    fatal_if(f(desc));
}

OSH_EXPORT void __tgt_unregister_lib(void *desc)
{
  count(C_UNREG);
  pthread_mutex_lock(&lock);
  for (int i = 0; i < num_registered; i++)
    if (registered[i] == desc) {
      memmove(&registered[i], &registered[i + 1],
              (size_t)(num_registered - i - 1) * sizeof(void *));
      num_registered--;
      break;
    }
  osh_cb_desc f = cbs.unregister_lib;
  pthread_mutex_unlock(&lock);
  if (f)
    fatal_if(f(desc));
}

OSH_EXPORT void __tgt_init_all_rtls(void) {}

OSH_EXPORT int __tgt_target_kernel(void *loc, int64_t dev, int32_t teams, int32_t threads,
                                   void *host_ptr, void *args)
{
  count(C_KERNEL);
  osh_cb_kernel f = cbs.target_kernel;
  if (!f) {
    count(C_FALLBACK);
    return OMP_TGT_FAIL;
  }
  int rc = f(loc, dev, teams, threads, host_ptr, args);
  fatal_if(rc);
  if (rc != 0)
    count(C_FALLBACK);
  return rc == 0 ? OMP_TGT_SUCCESS : OMP_TGT_FAIL;
}

/* nowait forms: synchronous, as libomptarget 16 runs them inside the task the compiler
 * created around the construct */
OSH_EXPORT int __tgt_target_kernel_nowait(void *loc, int64_t dev, int32_t teams,
                                          int32_t threads, void *host_ptr, void *args,
                                          int32_t ndeps, void *deps, int32_t nnoalias,
                                          void *noalias)
{
  (void)ndeps; (void)deps; (void)nnoalias; (void)noalias;
  return __tgt_target_kernel(loc, dev, teams, threads, host_ptr, args);
}

static void data_call(int32_t kind, void *loc, int64_t dev, int32_t n, void **bases,
                      void **args, int64_t *sizes, int64_t *types, void **names,
                      void **mappers)
{
  count(C_DATA);
  osh_cb_data f = cbs.target_data;
  if (f)
    fatal_if(f(kind, loc, dev, n, bases, args, sizes, types, names, mappers));
}

#define DATA_FORMS(NAME, KIND)                                                              \
  OSH_EXPORT void __tgt_target_data_##NAME##_mapper(void *loc, int64_t dev, int32_t n,     \
                                                    void **bases, void **args,             \
                                                    int64_t *sizes, int64_t *types,        \
                                                    void **names, void **mappers)          \
  {                                                                                        \
    data_call(KIND, loc, dev, n, bases, args, sizes, types, names, mappers);               \
  }                                                                                        \
  OSH_EXPORT void __tgt_target_data_##NAME##_nowait_mapper(                                \
      void *loc, int64_t dev, int32_t n, void **bases, void **args, int64_t *sizes,        \
      int64_t *types, void **names, void **mappers, int32_t ndeps, void *deps,             \
      int32_t nnoalias, void *noalias)                                                     \
  {                                                                                        \
    (void)ndeps; (void)deps; (void)nnoalias; (void)noalias;                                \
    data_call(KIND, loc, dev, n, bases, args, sizes, types, names, mappers);               \
  }                                                                                        \
  OSH_EXPORT void __tgt_target_data_##NAME(int64_t dev, int32_t n, void **bases,          \
                                           void **args, int64_t *sizes, int64_t *types)    \
  {                                                                                        \
    data_call(KIND, NULL, dev, n, bases, args, sizes, types, NULL, NULL);                  \
  }                                                                                        \
  OSH_EXPORT void __tgt_target_data_##NAME##_nowait(                                       \
      int64_t dev, int32_t n, void **bases, void **args, int64_t *sizes, int64_t *types,   \
      int32_t ndeps, void *deps, int32_t nnoalias, void *noalias)                          \
  {                                                                                        \
    (void)ndeps; (void)deps; (void)nnoalias; (void)noalias;                                \
    data_call(KIND, NULL, dev, n, bases, args, sizes, types, NULL, NULL);                  \
  }

DATA_FORMS(begin, 0)
DATA_FORMS(end, 1)
DATA_FORMS(update, 2)

OSH_EXPORT void __kmpc_push_target_tripcount_mapper(void *loc, int64_t dev, uint64_t n)
{
  (void)loc; (void)dev; (void)n;
}

OSH_EXPORT void __kmpc_push_target_tripcount(int64_t dev, uint64_t n) { (void)dev; (void)n; }

/* ---- device memory API ------------------------------------------------------------ */
OSH_EXPORT int omp_get_num_devices(void)
{
  count(C_NUMDEV);
  osh_cb_num_devices f = cbs.num_devices;
  return f ? f() : 0;
}

/* libomp's omp_get_num_devices() looks this name up with dlsym(RTLD_DEFAULT) first */
OSH_EXPORT int __tgt_get_num_devices(void) { return omp_get_num_devices(); }

/* libomptarget 16: the host is device number omp_get_num_devices() */
OSH_EXPORT int omp_get_initial_device(void) { return omp_get_num_devices(); }

OSH_EXPORT void *omp_target_alloc(size_t size, int dev)
{
  count(C_ALLOC);
  osh_cb_alloc f = cbs.target_alloc;
  if (!f)
    return dev == omp_get_initial_device() ? malloc(size) : NULL;
  void *out = NULL;
  int rc = f(size, dev, &out);
  fatal_if(rc);
  return rc == 0 ? out : NULL;
}

OSH_EXPORT void omp_target_free(void *ptr, int dev)
{
  count(C_FREE);
  osh_cb_free f = cbs.target_free;
  if (!f) {
    if (dev == omp_get_initial_device())
      free(ptr);
    return;
  }
  fatal_if(f(ptr, dev));
}

OSH_EXPORT int omp_target_memcpy(void *dst, const void *src, size_t len, size_t dst_off,
                                 size_t src_off, int dst_dev, int src_dev)
{
  count(C_MEMCPY);
  osh_cb_memcpy f = cbs.target_memcpy;
  if (!f) {
    int host = omp_get_initial_device();
    if (dst_dev != host || src_dev != host)
      return OMP_TGT_FAIL;
    memcpy((char *)dst + dst_off, (const char *)src + src_off, len);
    return 0;
  }
  int rc = f(dst, src, len, dst_off, src_off, dst_dev, src_dev);
  fatal_if(rc);
  return rc == 0 ? 0 : OMP_TGT_FAIL;
}

OSH_EXPORT int omp_target_is_present(const void *ptr, int dev)
{
  count(C_PRESENT);
  osh_cb_present f = cbs.target_is_present;
  if (!f)
    return dev == omp_get_initial_device();
  int rc = f(ptr, dev);
  fatal_if(rc);
  return rc > 0;
}

/* ---- libgomp registration (GOMP_4.0.1 / GOMP_4.5) ---------------------------------- */
OSH_EXPORT void GOMP_offload_register_ver(unsigned version, const void *host_table,
                                          int target_type, const void *target_data)
{
  count(C_GOMP_REG);
  osh_cb_gomp f = cbs.gomp_register;
  if (f)
    fatal_if(f(0, version, host_table, target_type, target_data));
}

OSH_EXPORT void GOMP_offload_unregister_ver(unsigned version, const void *host_table,
                                            int target_type, const void *target_data)
{
  count(C_GOMP_UNREG);
  osh_cb_gomp f = cbs.gomp_register;
  if (f)
    fatal_if(f(1, version, host_table, target_type, target_data));
}
