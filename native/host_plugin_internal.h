/*
 * host_plugin_internal.h - state and helpers shared by the translation units of
 * libosh_hostplugin.so (host_plugin.c: LLVM __tgt_rtl_* and GOMP_OFFLOAD_* views and the
 * osh_host_* control API; host_plugin_ol.c: the liboffload ol* view).  Not installed;
 * everything here has hidden visibility (the library is built with -fvisibility=hidden).
 * Each .c file defines _GNU_SOURCE before including it.
 */
#ifndef OSH_HOST_PLUGIN_INTERNAL_H
#define OSH_HOST_PLUGIN_INTERNAL_H

#include "osh_host_plugin.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OSH_EXPORT __attribute__((visibility("default")))

#define OFFLOAD_SUCCESS 0
#define OFFLOAD_FAIL (-1)
#define MAX_DEV OSH_HOST_MAX_DEVICES
#define MAX_ARGS OSH_HOST_MAX_KERNEL_ARGS
#define DEFAULT_NUM_DEVICES 4
#define LOG_KEEP 256
#define LOG_LINE 256

/* ---- LLVM ABI types (x86-64) ------------------------------------------------------- */

typedef struct __tgt_offload_entry {
  void *addr;
  char *name;
  size_t size;
  int32_t flags;
  int32_t reserved;
} __tgt_offload_entry;

typedef struct __tgt_device_image {
  void *ImageStart;
  void *ImageEnd;
  __tgt_offload_entry *EntriesBegin;
  __tgt_offload_entry *EntriesEnd;
} __tgt_device_image;

typedef struct __tgt_target_table {
  __tgt_offload_entry *EntriesBegin;
  __tgt_offload_entry *EntriesEnd;
} __tgt_target_table;

typedef struct KernelArgsTy {
  uint32_t Version;
  uint32_t NumArgs;
  void **ArgBasePtrs;
  void **ArgPtrs;
  int64_t *ArgSizes;
  int64_t *ArgTypes;
  void **ArgNames;
  void **ArgMappers;
  uint64_t Tripcount;
  uint64_t Flags;
  uint32_t NumTeams[3];
  uint32_t ThreadLimit[3];
  uint32_t DynCGroupMem;
} KernelArgsTy;

typedef struct __tgt_async_info __tgt_async_info; /* opaque; ignored */

struct addr_pair {
  uintptr_t start;
  uintptr_t end;
};

/* ---- entry points, violation kinds ------------------------------------------------- */

/* liboffload (ol*) view, implemented in host_plugin_ol.c */
#define OSH_OL_ENTRIES(X)                                      \
  X(O_INIT, "olInit")                                          \
  X(O_SHUT_DOWN, "olShutDown")                                 \
  X(O_ITERATE_DEVICES, "olIterateDevices")                     \
  X(O_GET_DEVICE_INFO, "olGetDeviceInfo")                      \
  X(O_GET_DEVICE_INFO_SIZE, "olGetDeviceInfoSize")             \
  X(O_GET_PLATFORM_INFO, "olGetPlatformInfo")                  \
  X(O_GET_PLATFORM_INFO_SIZE, "olGetPlatformInfoSize")         \
  X(O_MEM_ALLOC, "olMemAlloc")                                 \
  X(O_MEM_FREE, "olMemFree")                                   \
  X(O_MEMCPY, "olMemcpy")                                      \
  X(O_MEM_REGISTER, "olMemRegister")                           \
  X(O_MEM_UNREGISTER, "olMemUnregister")                       \
  X(O_CREATE_QUEUE, "olCreateQueue")                           \
  X(O_DESTROY_QUEUE, "olDestroyQueue")                         \
  X(O_SYNC_QUEUE, "olSyncQueue")                               \
  X(O_CREATE_PROGRAM, "olCreateProgram")                       \
  X(O_DESTROY_PROGRAM, "olDestroyProgram")                     \
  X(O_IS_VALID_BINARY, "olIsValidBinary")                      \
  X(O_GET_SYMBOL, "olGetSymbol")                               \
  X(O_GET_SYMBOL_INFO, "olGetSymbolInfo")                      \
  X(O_GET_SYMBOL_INFO_SIZE, "olGetSymbolInfoSize")             \
  X(O_LAUNCH_KERNEL, "olLaunchKernel")

#define OSH_ENTRIES(X)                                   \
  X(E_INIT_PLUGIN, "__tgt_rtl_init_plugin")              \
  X(E_DEINIT_PLUGIN, "__tgt_rtl_deinit_plugin")          \
  X(E_NUMBER_OF_DEVICES, "__tgt_rtl_number_of_devices")  \
  X(E_INIT_REQUIRES, "__tgt_rtl_init_requires")          \
  X(E_INIT_DEVICE, "__tgt_rtl_init_device")              \
  X(E_DEINIT_DEVICE, "__tgt_rtl_deinit_device")          \
  X(E_IS_VALID_BINARY, "__tgt_rtl_is_valid_binary")      \
  X(E_LOAD_BINARY, "__tgt_rtl_load_binary")              \
  X(E_DATA_ALLOC, "__tgt_rtl_data_alloc")                \
  X(E_DATA_DELETE, "__tgt_rtl_data_delete")              \
  X(E_DATA_SUBMIT, "__tgt_rtl_data_submit")              \
  X(E_DATA_RETRIEVE, "__tgt_rtl_data_retrieve")          \
  X(E_DATA_LOCK, "__tgt_rtl_data_lock")                  \
  X(E_DATA_UNLOCK, "__tgt_rtl_data_unlock")              \
  X(E_LAUNCH_KERNEL, "__tgt_rtl_launch_kernel")          \
  X(E_PRINT_DEVICE_INFO, "__tgt_rtl_print_device_info")  \
  X(G_VERSION, "GOMP_OFFLOAD_version")                   \
  X(G_GET_NAME, "GOMP_OFFLOAD_get_name")                 \
  X(G_GET_CAPS, "GOMP_OFFLOAD_get_caps")                 \
  X(G_GET_TYPE, "GOMP_OFFLOAD_get_type")                 \
  X(G_GET_NUM_DEVICES, "GOMP_OFFLOAD_get_num_devices")   \
  X(G_INIT_DEVICE, "GOMP_OFFLOAD_init_device")           \
  X(G_FINI_DEVICE, "GOMP_OFFLOAD_fini_device")           \
  X(G_LOAD_IMAGE, "GOMP_OFFLOAD_load_image")             \
  X(G_UNLOAD_IMAGE, "GOMP_OFFLOAD_unload_image")         \
  X(G_ALLOC, "GOMP_OFFLOAD_alloc")                       \
  X(G_FREE, "GOMP_OFFLOAD_free")                         \
  X(G_HOST2DEV, "GOMP_OFFLOAD_host2dev")                 \
  X(G_DEV2HOST, "GOMP_OFFLOAD_dev2host")                 \
  X(G_DEV2DEV, "GOMP_OFFLOAD_dev2dev")                   \
  X(G_RUN, "GOMP_OFFLOAD_run")                           \
  OSH_OL_ENTRIES(X)

#define OSH_VIOLATIONS(X)                                             \
  X(V_BEFORE_INIT_PLUGIN, "before_init_plugin")                       \
  X(V_AFTER_DEINIT_PLUGIN, "after_deinit_plugin")                     \
  X(V_BAD_DEVICE, "bad_device")                                       \
  X(V_BEFORE_INIT_DEVICE, "before_init_device")                       \
  X(V_AFTER_DEINIT_DEVICE, "after_deinit_device")                     \
  X(V_DOUBLE_INIT, "double_init")                                     \
  X(V_DOUBLE_DEINIT, "double_deinit")                                 \
  X(V_DEINIT_WITHOUT_INIT, "deinit_without_init")                     \
  X(V_UNKNOWN_POINTER, "unknown_pointer")                             \
  X(V_UNKNOWN_KERNEL, "unknown_kernel")                               \
  X(V_UNKNOWN_IMAGE, "unknown_image")                                 \
  X(V_DOUBLE_LOAD, "double_load")                                     \
  X(V_DEINIT_PLUGIN_WITH_LIVE_DEVICES, "deinit_plugin_with_live_devices")         \
  X(V_HOST_DEVICE, "host_device")                                     \
  X(V_UNKNOWN_QUEUE, "unknown_queue")                                 \
  X(V_SHUTDOWN_WITH_LIVE_OBJECTS, "shutdown_with_live_objects")

#define AS_ENUM(e, s) e,
#define AS_NAME(e, s) s,
enum { OSH_ENTRIES(AS_ENUM) E_COUNT };
enum { OSH_VIOLATIONS(AS_ENUM) V_COUNT };
extern const char *const entry_names[E_COUNT];
extern const char *const violation_names[V_COUNT];

/* ---- global state --------------------------------------------------------------------- */

enum { ABI_LLVM = 0, ABI_GOMP = 1, ABI_OL = 2, OSH_NUM_ABIS = 3 };
enum { ST_NEVER = 0, ST_LIVE = 1, ST_DEAD = 2 };

/* Treap node: live allocation (key = device pointer) or locked host range. */
typedef struct anode {
  uintptr_t key;
  uint64_t size;
  uint32_t prio;
  uint32_t refs;
  struct anode *l, *r;
} anode;

#define KERNEL_MAGIC 0x4f53484b45524e4cull /* "OSHKERNL" */

typedef struct osh_kernel {
  uint64_t magic;
  void (*fn)(void);
  uint32_t num_args; /* GOMP only; LLVM uses KernelArgs->NumArgs */
  uint32_t pad;
  const char *name;
  struct osh_image *image;
} osh_kernel;

typedef struct osh_var {
  uintptr_t start, end;
} osh_var;

typedef struct osh_image {
  struct osh_image *next;
  void *handle;
  const void *key; /* GOMP target_data pointer; NULL for LLVM images */
  osh_kernel *kernels;
  size_t num_kernels;
  osh_var *vars;
  size_t num_vars;
  __tgt_offload_entry *entries; /* LLVM table entries */
  size_t num_entries;
  char **names; /* owned copies of names (num_names) */
  size_t num_names;
  __tgt_target_table table;
} osh_image;

typedef struct osh_dev {
  pthread_mutex_t mu;      /* state transitions, allocs, locks, counters */
  pthread_rwlock_t img_rw; /* image list; held (read) during launches and copies */
  _Atomic int state;
  int abi, id;
  anode *allocs;
  anode *locks;
  uint32_t rng;
  osh_image *images;
  _Atomic int64_t live_allocs, live_bytes, leaked_allocs, leaked_bytes;
} osh_dev;

/* ---- shared state (defined in host_plugin.c) ------------------------------------------- */

extern pthread_mutex_t g_life; /* lifecycle transitions (all views) */
extern _Atomic int64_t g_capacity[MAX_DEV];
extern _Atomic int64_t g_lat_alloc, g_lat_free;
extern _Atomic int64_t g_calls[E_COUNT];
extern osh_dev g_dev[OSH_NUM_ABIS][MAX_DEV];
extern _Thread_local char tls_err[512];

void ensure_init(void);
int num_devices(void);

/* ---- errors, violations, fault injection, counters ------------------------------------- */

__attribute__((format(printf, 1, 2))) void set_error(const char *fmt, ...);
__attribute__((format(printf, 3, 4))) void violation(int kind, int entry, const char *fmt, ...);
/* true when this call must fail because of osh_host_fail_nth */
bool inject_fail(int e);
void spin_ns(int64_t ns);

#define ENTER(e, failval)                                                    \
  do {                                                                       \
    ensure_init();                                                           \
    atomic_fetch_add_explicit(&g_calls[(e)], 1, memory_order_relaxed);       \
    if (inject_fail(e)) return failval;                                      \
  } while (0)

#define ENTER_VOID(e)                                                        \
  do {                                                                       \
    ensure_init();                                                           \
    atomic_fetch_add_explicit(&g_calls[(e)], 1, memory_order_relaxed);       \
    if (inject_fail(e)) return;                                              \
  } while (0)

/* ---- address treaps ----------------------------------------------------------------------- */

uint32_t next_prio(osh_dev *d);
anode *t_insert(anode *t, anode *n);
anode *t_erase(anode *t, uintptr_t key, anode **out);
anode *t_find(anode *t, uintptr_t key);
anode *t_floor(anode *t, uintptr_t key);

/* ---- images --------------------------------------------------------------------------------- */

void image_free(osh_image *im);
bool elf_ok(const void *start, size_t size);
/* write the bytes to a temp file, dlopen it, unlink it; NULL + error on failure */
void *dlopen_bytes(const void *bytes, size_t size);
void *lookup_sym(void *h, const char *name);
/* append a fully built image to a live device; false (image freed) otherwise */
bool dev_add_image(osh_dev *d, int e, osh_image *im);
void call_kernel(void (*fn)(void), uint32_t n, void **a);

/* ---- devices --------------------------------------------------------------------------------- */

/* re-check the state under a device lock (records the violation) */
bool dev_live_locked(osh_dev *d, int e);
/* deinitialise a live device: free its allocations (counted as leaked), unlock locked ranges,
 * dlclose its images.  Caller holds g_life. */
void dev_teardown(osh_dev *d);
void *dev_alloc(osh_dev *d, int e, int64_t size, bool zero_ok);
int dev_free(osh_dev *d, int e, void *p);
/* is [p, p+len) inside one live allocation or image global of d?  caller holds img_rw */
bool range_ok(osh_dev *d, const void *p, size_t len);
int dev_copy(osh_dev *d, int e, void *dst, const void *src, int64_t size, bool dev_dst, bool dev_src);

/* ---- liboffload view (host_plugin_ol.c), for the control API ---------------------------- */

/* olInit reference count (0 = not initialised) */
int osh_ol_refcount(void);
/* live queues / programs of ol device `dev` (0..num_devices-1) */
int64_t osh_ol_live_queues(int dev);
int64_t osh_ol_live_programs(int dev);

#endif /* OSH_HOST_PLUGIN_INTERNAL_H */
