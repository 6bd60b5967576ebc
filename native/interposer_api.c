/* libosh_interposer.so: the routines libomptarget 19.1 and 22.1 export beyond 16's.
 *
 * `nm -D --defined-only` of libomptarget.so.19.1 adds to 16's exports
 * omp_target_memcpy_async, omp_target_memcpy_rect_async, omp_target_memset(_async),
 * ompx_dump_mapping_tables, __tgt_activate_record_replay, __tgt_rtl_init / _deinit and
 * ompt_libomptarget_connect; libomptarget.so.22.1 adds omp_target_is_accessible,
 * omp_get_device_from_uid / omp_get_uid_from_device, __tgt_target_sync,
 * __tgt_interop_get / _use60 / _release, ompx_interop_add_completion_callback and the
 * kernel-language entry points llvmLaunchKernel, __llvmPush/PopCallConfiguration.
 * All of them are defined here under VERS1.0 (interposer.map; omp_target_memset lives in
 * interposer.c), so a program under offload-shim run never reaches its own libomptarget,
 * which was never initialised there (it segfaults on them: its plugin manager is created
 * by the first registration, which it never receives).
 *
 * The asynchronous copies and fills run as libomptarget 19.1 / 22.1 run them (OpenMP/API.cpp
 * libomp_helper_task_creation; checked in the disassembly of both releases): a task of
 * the program's libomp, allocated with __kmpc_omp_target_task_alloc (flags: hidden helper,
 * sizeof(kmp_task_t) 24, no shareds, device -1; libomp makes it an untied target task run
 * by its hidden helper threads when LIBOMP_USE_HIDDEN_HELPER_TASK allows, else by the team)
 * and started with __kmpc_omp_task_with_deps and the program's depend objects; the task
 * calls the blocking routine (omp_target_memcpy / _memcpy_rect / _memset here, which go
 * to the Python runtime) and frees its arguments.  The value returned is
 * __kmpc_omp_task_with_deps's.  The program waits for the task as for any other
 * (taskwait, a depend clause, the end of a parallel region).
 *
 * Everything else goes to Python through the generic API callback (osh_ip_api_call), which
 * answers as the libomptarget the program links (offload_shim/interposer/llvm/api.py,
 * api_rules.py).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interposer_internal.h"

#define OSH_EXPORT __attribute__((visibility("default")))
#define OMP_TGT_SUCCESS 0
#define OMP_TGT_FAIL (-1)
#define OMP_INVALID_DEVICE (-2)          /* omp.h omp_invalid_device (OpenMP 6.0) */

/* defined in interposer.c (exported) */
int omp_get_initial_device(void);
int omp_target_memcpy(void *dst, const void *src, size_t len, size_t dst_off, size_t src_off,
                      int dst_dev, int src_dev);
int omp_target_memcpy_rect(void *dst, const void *src, size_t esize, int ndims,
                           const size_t *volume, const size_t *dst_offsets,
                           const size_t *src_offsets, const size_t *dst_dims,
                           const size_t *src_dims, int dst_dev, int src_dev);
void *omp_target_memset(void *ptr, int value, size_t n, int dev);

/* ---- libomp's tasking entry points (the program's own libomp) ---------------------- */
/* libomptarget's kmp_task_t (OpenMP/InternalTypes.h): 24 bytes */
struct osh_kmp_task {
  void *shareds;
  int32_t (*routine)(int32_t, struct osh_kmp_task *);
  int32_t part_id;
};
typedef int32_t (*osh_task_entry)(int32_t, struct osh_kmp_task *);
/* kmp_depend_info_t: base address, length, flags (24 bytes); an omp_depend_t points to one */
struct osh_depend_info {
  intptr_t base_addr;
  size_t len;
  uint64_t flags;
};
/* kmp_tasking_flags_t.hidden_helper (bit 7), what libomp_helper_task_creation sets */
#define OSH_TASK_HIDDEN_HELPER 0x80

static int32_t (*p_gtid)(void *);
static struct osh_kmp_task *(*p_task_alloc)(void *, int32_t, int32_t, size_t, size_t,
                                            osh_task_entry, int64_t);
static int32_t (*p_task_with_deps)(void *, int32_t, struct osh_kmp_task *, int32_t,
                                   struct osh_depend_info *, int32_t,
                                   struct osh_depend_info *);
static void (*p_wait_deps)(void *, int32_t, int32_t, struct osh_depend_info *, int32_t,
                           struct osh_depend_info *);
static int (*p_default_device)(void);
static pthread_once_t libomp_once = PTHREAD_ONCE_INIT;

static void libomp_resolve(void)
{
  p_gtid = (int32_t (*)(void *))dlsym(RTLD_DEFAULT, "__kmpc_global_thread_num");
  *(void **)&p_task_alloc = dlsym(RTLD_DEFAULT, "__kmpc_omp_target_task_alloc");
  *(void **)&p_task_with_deps = dlsym(RTLD_DEFAULT, "__kmpc_omp_task_with_deps");
  *(void **)&p_wait_deps = dlsym(RTLD_DEFAULT, "__kmpc_omp_wait_deps");
  p_default_device = (int (*)(void))dlsym(RTLD_DEFAULT, "omp_get_default_device");
}

static void libomp_bind(void) { pthread_once(&libomp_once, libomp_resolve); }

/* libomp_helper_task_creation: `args` (malloc'ed, freed by `fn`) as the shareds of a
 * hidden-helper target task with the program's depend objects.  In a process without
 * libomp (no OpenMP program) the routine runs at once instead (libomptarget would call
 * its weak, unresolved references). */
static int helper_task(void *args, osh_task_entry fn, int ndeps, void **deplist)
{
  libomp_bind();
  if (!p_gtid || !p_task_alloc || !p_task_with_deps) {
    struct osh_kmp_task t = {args, fn, 0};
    return fn(0, &t) == OMP_TGT_SUCCESS ? OMP_TGT_SUCCESS : OMP_TGT_FAIL;
  }
  int32_t gtid = p_gtid(NULL);
  struct osh_kmp_task *task = p_task_alloc(NULL, gtid, OSH_TASK_HIDDEN_HELPER,
                                           sizeof(struct osh_kmp_task), 0, fn, -1);
  if (!task) {
    free(args);
    return OMP_TGT_FAIL;
  }
  task->shareds = args;
  struct osh_depend_info local[4], *deps = local;
  if (ndeps > 4) {
    deps = malloc((size_t)ndeps * sizeof *deps);
    if (!deps) {
      fprintf(stderr, "offload_shim: out of memory for %d depend objects\n", ndeps);
      abort();
    }
  }
  for (int i = 0; i < ndeps; i++)     /* each omp_depend_t points to a kmp_depend_info_t */
    memcpy(&deps[i], deplist[i], sizeof deps[i]);
  int rc = p_task_with_deps(NULL, gtid, task, ndeps, deps, 0, NULL);
  if (deps != local)
    free(deps);
  return rc;
}

/* TargetMemcpyArgsTy (libomptarget private.h): the rectangle's arrays are the caller's,
 * not copies -- they must live until the task ran, as with libomptarget */
struct memcpy_args {
  void *dst;
  const void *src;
  int dst_dev, src_dev, rect;
  size_t len, dst_off, src_off;
  size_t esize;
  int ndims;
  const size_t *volume, *dst_offsets, *src_offsets, *dst_dims, *src_dims;
};

static int32_t memcpy_task(int32_t gtid, struct osh_kmp_task *task)
{
  (void)gtid;
  struct memcpy_args *a = task ? (struct memcpy_args *)task->shareds : NULL;
  if (!a)
    return OMP_TGT_FAIL;
  int rc = a->rect ? omp_target_memcpy_rect(a->dst, a->src, a->esize, a->ndims, a->volume,
                                            a->dst_offsets, a->src_offsets, a->dst_dims,
                                            a->src_dims, a->dst_dev, a->src_dev)
                   : omp_target_memcpy(a->dst, a->src, a->len, a->dst_off, a->src_off,
                                       a->dst_dev, a->src_dev);
  free(a);
  return rc;
}

struct memset_args {
  void *ptr;
  int value;
  size_t n;
  int dev;
};

static int32_t memset_task(int32_t gtid, struct osh_kmp_task *task)
{
  (void)gtid;
  struct memset_args *a = task ? (struct memset_args *)task->shareds : NULL;
  if (!a)
    return OMP_TGT_FAIL;
  (void)omp_target_memset(a->ptr, a->value, a->n, a->dev);
  free(a);
  return OMP_TGT_SUCCESS;
}

static void *args_alloc(size_t size)
{
  void *p = calloc(1, size);
  if (!p) {                               /* libomptarget's `new` throws: terminate */
    fprintf(stderr, "offload_shim: out of memory for an asynchronous copy\n");
    abort();
  }
  return p;
}

/* OpenMP 5.1; libomptarget 19.1 / 22.1 api.cpp: NULL pointers fail at once (-1), no
 * other check before the task (a zero length copies nothing in it) */
OSH_EXPORT int omp_target_memcpy_async(void *dst, const void *src, size_t len,
                                       size_t dst_off, size_t src_off, int dst_dev,
                                       int src_dev, int ndeps, void **deps)
{
  osh_ip_ensure_python();
  if (!dst || !src)
    return OMP_TGT_FAIL;
  struct memcpy_args *a = args_alloc(sizeof *a);
  *a = (struct memcpy_args){.dst = dst, .src = src, .dst_dev = dst_dev, .src_dev = src_dev,
                            .len = len, .dst_off = dst_off, .src_off = src_off};
  return helper_task(a, memcpy_task, ndeps, deps);
}

/* NULL dst and src ask for the number of dimensions (INT_MAX) before anything else */
OSH_EXPORT int omp_target_memcpy_rect_async(void *dst, const void *src, size_t esize,
                                            int ndims, const size_t *volume,
                                            const size_t *dst_offsets,
                                            const size_t *src_offsets,
                                            const size_t *dst_dims, const size_t *src_dims,
                                            int dst_dev, int src_dev, int ndeps,
                                            void **deps)
{
  osh_ip_ensure_python();
  if (!dst && !src)
    return INT_MAX;
  if (!dst || !src)
    return OMP_TGT_FAIL;
  struct memcpy_args *a = args_alloc(sizeof *a);
  *a = (struct memcpy_args){.dst = dst, .src = src, .dst_dev = dst_dev, .src_dev = src_dev,
                            .rect = 1, .esize = esize, .ndims = ndims, .volume = volume,
                            .dst_offsets = dst_offsets, .src_offsets = src_offsets,
                            .dst_dims = dst_dims, .src_dims = src_dims};
  return helper_task(a, memcpy_task, ndeps, deps);
}

/* OpenMP 6.0: NULL or 0 bytes: nothing (no task); otherwise the task fills with
 * omp_target_memset; returns ptr whatever happens */
OSH_EXPORT void *omp_target_memset_async(void *ptr, int value, size_t n, int dev, int ndeps,
                                         void **deps)
{
  osh_ip_ensure_python();
  if (!ptr || !n)
    return ptr;
  struct memset_args *a = args_alloc(sizeof *a);
  *a = (struct memset_args){ptr, value, n, dev};
  (void)helper_task(a, memset_task, ndeps, deps);
  return ptr;
}

/* ---- device queries (libomptarget 22.1) ------------------------------------------- */
OSH_EXPORT int omp_target_is_accessible(const void *ptr, size_t size, int dev)
{
  uint64_t a[3] = {(uintptr_t)ptr, size, (uint64_t)(int64_t)dev};
  /* no table: the host only (-1: omp_initial_device) */
  uint64_t dflt = ptr && (dev == omp_get_initial_device() || dev == -1);
  return (int)osh_ip_api_call(OSH_API_IS_ACCESSIBLE, a, 3, dflt);
}

/* The UID strings handed out: one copy per distinct text for the whole process (the
 * program may keep the pointer; libomptarget's live as long as its devices) */
#define MAX_UIDS 256
static const char *uids[MAX_UIDS];
static int num_uids;
static pthread_mutex_t uid_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *uid_intern(char *text)
{
  const char *out = NULL;
  pthread_mutex_lock(&uid_lock);
  for (int i = 0; i < num_uids && !out; i++)
    if (strcmp(uids[i], text) == 0)
      out = uids[i];
  if (!out && num_uids < MAX_UIDS)
    out = uids[num_uids++] = text;
  pthread_mutex_unlock(&uid_lock);
  if (!out)                               /* more texts than MAX_UIDS: this one is kept */
    return text;
  if (out != text)
    free(text);
  return out;
}

OSH_EXPORT const char *omp_get_uid_from_device(int dev)
{
  uint64_t a[1] = {(uint64_t)(int64_t)dev};
  /* Python answers a malloc'ed string (or 0 for NULL) */
  uint64_t r = osh_ip_api_call(OSH_API_UID_FROM_DEVICE, a, 1, 0);
  if (r)
    return uid_intern((char *)(uintptr_t)r);
  if (dev != OMP_INVALID_DEVICE && dev == omp_get_initial_device())
    return uid_intern(strdup("HOST"));      /* no table */
  return NULL;
}

OSH_EXPORT int omp_get_device_from_uid(const char *uid)
{
  uint64_t a[1] = {(uintptr_t)uid};
  int dflt = uid && strcmp(uid, "HOST") == 0 ? omp_get_initial_device() : OMP_INVALID_DEVICE;
  return (int)(int64_t)osh_ip_api_call(OSH_API_DEVICE_FROM_UID, a, 1, (uint64_t)(int64_t)dflt);
}

/* ---- LLVM extensions ----------------------------------------------------------------- */
/* The mapping table of every device on stdout (dumpTargetPointerMappings(toStdOut=true)),
 * through the program's own stdout buffer as libomptarget's fprintf(stdout) */
OSH_EXPORT void ompx_dump_mapping_tables(void)
{
  char *text = (char *)(uintptr_t)osh_ip_api_call(OSH_API_DUMP_TABLES, NULL, 0, 0);
  if (text) {
    fputs(text, stdout);
    free(text);
  }
}

/* llvm-omp-kernel-record-replay: the device number is checked as libomptarget does; the
 * LLVM 16 plugins cannot record (Python says so in one line); returns what 19.1 / 22.1
 * return (OMP_TGT_SUCCESS: their check of the plugin's answer is an assert) */
OSH_EXPORT int __tgt_activate_record_replay(int64_t dev, uint64_t memory_size, void *vaddr,
                                            bool is_record, bool save_output,
                                            uint64_t *req_ptr_arg_offset)
{
  (void)vaddr; (void)req_ptr_arg_offset;
  uint64_t a[4] = {(uint64_t)dev, memory_size, is_record, save_output};
  return (int)osh_ip_api_call(OSH_API_RECORD_REPLAY, a, 4, OMP_TGT_SUCCESS);
}

/* libomptarget 19.1 / 22.1 initRuntime / deinitRuntime (a reference count of users of
 * the plugin manager).  The Python runtime starts with the first entry point and lives
 * until the process exits (docs/interpose.md "Lifetime and exit"), so init only starts it
 * and deinit has nothing to drop. */
OSH_EXPORT void __tgt_rtl_init(void) { osh_ip_ensure_python(); }
OSH_EXPORT void __tgt_rtl_deinit(void) {}

/* libomptarget 19.1's OMPT connector for plugins built as separate libraries: it hands
 * them libomptarget's OMPT callbacks only once its own initRuntime connected to libomp,
 * which never happens under offload-shim run; offload_shim emits no OMPT device events,
 * so there is nothing to hand out either. */
OSH_EXPORT void ompt_libomptarget_connect(void *result) { (void)result; }

/* ---- interop (OpenMP 5.1 / 6.0) -------------------------------------------------------- */
/* Python's plan for an interop routine (api.py interop_plan, by the program's runtime):
 * forward it to the program's libomptarget (16: its plugin manager exists from its
 * constructor on, and libomp reads the objects with that library's getters), wait for the
 * depend clauses, ask the device's plugin for its device info; the object is always
 * omp_interop_none otherwise (the LLVM 16 plugins offer no foreign runtime). */
enum { IOP_WAIT = 1, IOP_DEVICE_INFO = 2, IOP_FORWARD = 4 };
enum { IOP_OP_INIT = 1, IOP_OP_USE, IOP_OP_DESTROY, IOP_OP_GET, IOP_OP_DEVICE_INFO,
       IOP_OP_USE60, IOP_OP_RELEASE, IOP_OP_CALLBACK };

static uint64_t interop_call(int op, int targetsync, int64_t dev, int64_t ndeps,
                             uint64_t dflt)
{
  uint64_t a[4] = {(uint64_t)op, (uint64_t)targetsync, (uint64_t)dev, (uint64_t)ndeps};
  return osh_ip_api_call(OSH_API_INTEROP, a, 4, dflt);
}

static int64_t default_device(int64_t dev)
{
  libomp_bind();
  return dev == -1 && p_default_device ? p_default_device() : dev;
}

static void wait_deps(void *loc, int32_t gtid, int32_t ndeps, void *deps, int32_t nnoalias,
                      void *noalias)
{
  libomp_bind();
  if (p_wait_deps)
    p_wait_deps(loc, gtid, ndeps, deps, nnoalias, noalias);
}

typedef void (*interop_fn)(void *, int32_t, void **, int32_t, int32_t, int32_t, void *,
                           int32_t);

/* `name` of the program's libomptarget: next in the global scope (a program, or a library
 * loaded RTLD_GLOBAL), else the libomptarget.so.N mapped as the DT_NEEDED of a library a
 * host loaded RTLD_LOCAL (not in the global scope) */
static int find_libomptarget(struct dl_phdr_info *info, size_t size, void *data)
{
  (void)size;
  const char *name = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
  name = name ? name + 1 : info->dlpi_name;
  if (name && strncmp(name, "libomptarget.so", 15) == 0) {
    *(const char **)data = info->dlpi_name;
    return 1;
  }
  return 0;
}

static void *libomptarget_sym(const char *name)
{
  void *p = dlvsym(RTLD_NEXT, name, "VERS1.0");
  const char *path = NULL;
  if (p || !dl_iterate_phdr(find_libomptarget, &path) || !path)
    return p;
  void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (h) {
    p = dlvsym(h, name, "VERS1.0");
    dlclose(h);                           /* still mapped: the library holds it */
  }
  return p;
}

static interop_fn real_interop(const char *name)
{
  return (interop_fn)libomptarget_sym(name);
}

/* kmp_interop_type_t of clang's calls: 1 target, 2 targetsync */
OSH_EXPORT void __tgt_interop_init(void *loc, int32_t gtid, void **interop, int32_t type,
                                   int32_t dev, int32_t ndeps, void *deps, int32_t nowait)
{
  int64_t d = default_device(dev);
  uint64_t plan = interop_call(IOP_OP_INIT, type == 2, d, ndeps, 0);
  interop_fn real = plan & IOP_FORWARD ? real_interop("__tgt_interop_init") : NULL;
  if (real) {
    real(loc, gtid, interop, type, dev, ndeps, deps, nowait);
    return;
  }
  if (plan & IOP_WAIT)
    wait_deps(loc, gtid, ndeps, deps, 0, NULL);
  if (plan & IOP_DEVICE_INFO)
    interop_call(IOP_OP_DEVICE_INFO, type == 2, d, 0, 0);
  *interop = NULL;
}

OSH_EXPORT void __tgt_interop_use(void *loc, int32_t gtid, void **interop, int32_t dev,
                                  int32_t ndeps, void *deps, int32_t nowait)
{
  uint64_t plan = interop_call(IOP_OP_USE, 0, default_device(dev), ndeps, 0);
  void (*real)(void *, int32_t, void **, int32_t, int32_t, void *, int32_t) = NULL;
  if (plan & IOP_FORWARD)
    *(void **)&real = libomptarget_sym("__tgt_interop_use");
  if (real)
    real(loc, gtid, interop, dev, ndeps, deps, nowait);
}

OSH_EXPORT void __tgt_interop_destroy(void *loc, int32_t gtid, void **interop, int32_t dev,
                                      int32_t ndeps, void *deps, int32_t nowait)
{
  uint64_t plan = interop_call(IOP_OP_DESTROY, 0, default_device(dev), ndeps, 0);
  void (*real)(void *, int32_t, void **, int32_t, int32_t, void *, int32_t) = NULL;
  if (plan & IOP_FORWARD)
    *(void **)&real = libomptarget_sym("__tgt_interop_destroy");
  if (real)
    real(loc, gtid, interop, dev, ndeps, deps, nowait);
}

/* libomptarget 22.1 (OpenMP/InteropAPI.h, checked in its disassembly): interop_ctx_t
 * {uint32 version; flags; int gtid}, dep_pack_t {int32 ndeps, ndeps_noalias;
 * kmp_depend_info_t *deplist, *noalias_deplist}; kmp_interop_type_t 0 target,
 * 1 targetsync */
struct osh_interop_ctx {
  uint32_t version, flags;
  int32_t gtid;
};
struct osh_dep_pack {
  int32_t ndeps, ndeps_noalias;
  void *deplist, *noalias_deplist;
};

OSH_EXPORT void *__tgt_interop_get(void *loc, int32_t type, int64_t dev, int32_t nprefers,
                                   void *prefers, struct osh_interop_ctx *ctx,
                                   struct osh_dep_pack *deps)
{
  (void)nprefers; (void)prefers;
  uint64_t plan = interop_call(IOP_OP_GET, type == 1, default_device(dev), deps != NULL, 0);
  if ((plan & IOP_WAIT) && deps)
    wait_deps(loc, ctx ? ctx->gtid : 0, deps->ndeps, deps->deplist, deps->ndeps_noalias,
              deps->noalias_deplist);
  return NULL;
}

OSH_EXPORT int __tgt_interop_use60(void *loc, void *interop, struct osh_interop_ctx *ctx,
                                   struct osh_dep_pack *deps)
{
  (void)loc; (void)ctx; (void)deps;
  uint64_t a[4] = {IOP_OP_USE60, 0, (uintptr_t)interop, 0};
  return (int)(int64_t)osh_ip_api_call(OSH_API_INTEROP, a, 4, (uint64_t)(int64_t)OMP_TGT_FAIL);
}

OSH_EXPORT int __tgt_interop_release(void *loc, void *interop, struct osh_interop_ctx *ctx,
                                     struct osh_dep_pack *deps)
{
  (void)loc; (void)ctx; (void)deps;
  uint64_t a[4] = {IOP_OP_RELEASE, 0, (uintptr_t)interop, 0};
  return (int)(int64_t)osh_ip_api_call(OSH_API_INTEROP, a, 4, (uint64_t)(int64_t)OMP_TGT_FAIL);
}

#define OMP_IRC_OTHER (-6)
OSH_EXPORT int ompx_interop_add_completion_callback(void *interop, void *cb, void *data)
{
  (void)cb; (void)data;
  uint64_t a[4] = {IOP_OP_CALLBACK, 0, (uintptr_t)interop, 0};
  return (int)(int64_t)osh_ip_api_call(OSH_API_INTEROP, a, 4, (uint64_t)(int64_t)OMP_IRC_OTHER);
}

/* libomp (22) at a task's end: synchronises the implicit interop objects of the thread
 * (dispatch constructs); offload_shim never makes one */
OSH_EXPORT void __tgt_target_sync(void *loc, int32_t gtid, void *task, void *event)
{
  (void)loc; (void)gtid; (void)task; (void)event;
}

/* ---- kernel language (CUDA/HIP on OpenMP offload, libomptarget 20+ KernelLanguage/API.cpp)
 */
struct osh_dim3 {
  unsigned x, y, z;
};
/* One configuration for the process: KernelLanguage/API.cpp declares it threadprivate,
 * but libomptarget 22.1 is not compiled as OpenMP code, so the pragma is ignored there
 * (checked: another thread pops what the first pushed); the same here.  Unlocked, as
 * there. */
static struct {
  struct osh_dim3 grid, block;
  size_t shared_memory;
  void *stream;
} call_config;

OSH_EXPORT unsigned __llvmPushCallConfiguration(struct osh_dim3 grid, struct osh_dim3 block,
                                                size_t shared_memory, void *stream)
{
  call_config.grid = grid;
  call_config.block = block;
  call_config.shared_memory = shared_memory;
  call_config.stream = stream;
  return 0;
}

OSH_EXPORT unsigned __llvmPopCallConfiguration(struct osh_dim3 *grid, struct osh_dim3 *block,
                                               size_t *shared_memory, void *stream)
{
  *grid = call_config.grid;
  *block = call_config.block;
  *shared_memory = call_config.shared_memory;
  *(void **)stream = call_config.stream;
  return 0;
}

/* KernelLanguage/API.cpp llvmLaunchKernel: a KernelArgsTy (version 3, the layout of
 * interposer.c's struct osh_kernel_args) with Flags.IsCUDA (the arguments are one packed
 * buffer), the grid as teams, the block as threads, the dynamic shared memory, launched
 * with __tgt_target_kernel on device 0 -- here the interposer's: no kernel for `func`
 * fails as any construct does (libomptarget's lines, fatal when offloading is mandatory);
 * for a kernel, Python refuses the packed buffer the LLVM 16 plugins cannot take */
struct osh_kernel_args_v3 {
  uint32_t Version, NumArgs;
  void **ArgBasePtrs, **ArgPtrs;
  int64_t *ArgSizes, *ArgTypes;
  void **ArgNames, **ArgMappers;
  uint64_t Tripcount, Flags;
  uint32_t NumTeams[3], ThreadLimit[3], DynCGroupMem;
};
#define OSH_KERNEL_FLAG_IS_CUDA 0x2       /* KernelArgsTy::Flags bit 1 (LLVM 20+) */
int __tgt_target_kernel(void *loc, int64_t dev, int32_t teams, int32_t threads,
                        void *host_ptr, void *args);

OSH_EXPORT unsigned llvmLaunchKernel(const void *func, struct osh_dim3 grid,
                                     struct osh_dim3 block, void *args, size_t shared_memory,
                                     void *stream)
{
  (void)stream;
  struct osh_kernel_args_v3 ka;
  memset(&ka, 0, sizeof ka);
  ka.Version = 3;
  ka.DynCGroupMem = (uint32_t)shared_memory;
  ka.NumTeams[0] = grid.x;
  ka.NumTeams[1] = grid.y;
  ka.NumTeams[2] = grid.z;
  ka.ThreadLimit[0] = block.x;
  ka.ThreadLimit[1] = block.y;
  ka.ThreadLimit[2] = block.z;
  ka.ArgPtrs = (void **)args;
  ka.Flags = OSH_KERNEL_FLAG_IS_CUDA;
  return (unsigned)__tgt_target_kernel(NULL, 0, (int32_t)grid.x, (int32_t)block.x,
                                       (void *)func, &ka);
}
