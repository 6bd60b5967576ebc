/*
 * host_plugin_ol.c - the liboffload (ol*) view of libosh_hostplugin.so.
 *
 * The subset of LLVM liboffload's C API (offload/liboffload, OffloadAPI.h of LLVM 22.1.8:
 * same names, prototypes, enum values and the ol_result_t convention: NULL on success, else a
 * pointer to {Code, Details}) that offload_shim's liboffload family drives, over the same
 * host-malloc devices, capacity, latency, fault injection, counters and contract-violation
 * record as the LLVM and GOMP views (host_plugin_internal.h).  Its devices are a third device
 * table (ABI_OL).  See native/README.md for the behaviour contract.
 *
 * Devices: olIterateDevices yields num_devices() devices of type CPU on platform "osh_host"
 * (backend UNKNOWN), then one device of type HOST on platform "host" (backend HOST) -- like
 * the real library's "Virtual Host Device", a memcpy endpoint only.  Where liboffload 22.1.8
 * segfaults (allocation, programs, queues and registration on the host device, handles it
 * never returned) this view records a contract violation and returns an error instead.
 *
 * Programs are x86-64 ELF shared objects (dlopen'ed from a temp file, as the other views do);
 * olGetSymbol resolves kernels and globals with dlsym; olLaunchKernel calls the kernel with
 * ArgumentsSize / 8 pointer-sized arguments read from the packed argument buffer.  Queues
 * execute synchronously.
 */
#define _GNU_SOURCE
#include "host_plugin_internal.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- OffloadAPI.h (22.1.8) types and values ------------------------------------------- */

typedef int32_t ol_errc_t;
typedef struct ol_error_struct_t {
  ol_errc_t Code;
  const char *Details;
} ol_error_struct_t;
typedef const ol_error_struct_t *ol_result_t;

enum {
  OL_ERRC_SUCCESS = 0,
  OL_ERRC_UNKNOWN = 1,
  OL_ERRC_INVALID_BINARY = 3,
  OL_ERRC_INVALID_NULL_POINTER = 4,
  OL_ERRC_INVALID_ARGUMENT = 5,
  OL_ERRC_NOT_FOUND = 6,
  OL_ERRC_OUT_OF_RESOURCES = 7,
  OL_ERRC_INVALID_SIZE = 8,
  OL_ERRC_INVALID_ENUMERATION = 9,
  OL_ERRC_UNSUPPORTED = 13,
  OL_ERRC_UNINITIALIZED = 18,
  OL_ERRC_INVALID_NULL_HANDLE = 19,
  OL_ERRC_INVALID_DEVICE = 21,
  OL_ERRC_INVALID_QUEUE = 22,
  OL_ERRC_SYMBOL_KIND = 24,
};

enum { OL_DEVICE_TYPE_CPU = 3, OL_DEVICE_TYPE_HOST = 4 };
enum { OL_PLATFORM_BACKEND_UNKNOWN = 0, OL_PLATFORM_BACKEND_HOST = 4 };
enum { OL_ALLOC_TYPE_HOST = 0, OL_ALLOC_TYPE_DEVICE = 1, OL_ALLOC_TYPE_MANAGED = 2, OL_ALLOC_TYPE_LAST = 3 };
enum { OL_SYMBOL_KIND_KERNEL = 0, OL_SYMBOL_KIND_GLOBAL_VARIABLE = 1, OL_SYMBOL_KIND_LAST = 2 };
enum {
  OL_DEVICE_INFO_TYPE = 0,
  OL_DEVICE_INFO_PLATFORM = 1,
  OL_DEVICE_INFO_NAME = 2,
  OL_DEVICE_INFO_PRODUCT_NAME = 3,
  OL_DEVICE_INFO_UID = 4,
  OL_DEVICE_INFO_VENDOR = 5,
  OL_DEVICE_INFO_DRIVER_VERSION = 6,
  OL_DEVICE_INFO_VENDOR_ID = 11,
  OL_DEVICE_INFO_NUM_COMPUTE_UNITS = 12,
  OL_DEVICE_INFO_ADDRESS_BITS = 15,
  OL_DEVICE_INFO_MAX_MEM_ALLOC_SIZE = 16,
  OL_DEVICE_INFO_GLOBAL_MEM_SIZE = 17,
  OL_DEVICE_INFO_LAST = 29,
};
enum {
  OL_PLATFORM_INFO_NAME = 0,
  OL_PLATFORM_INFO_VENDOR_NAME = 1,
  OL_PLATFORM_INFO_VERSION = 2,
  OL_PLATFORM_INFO_BACKEND = 3,
  OL_PLATFORM_INFO_LAST = 4,
};
enum {
  OL_SYMBOL_INFO_KIND = 0,
  OL_SYMBOL_INFO_GLOBAL_VARIABLE_ADDRESS = 1,
  OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE = 2,
  OL_SYMBOL_INFO_LAST = 3,
};

typedef struct ol_dimensions_t {
  uint32_t x, y, z;
} ol_dimensions_t;

typedef struct ol_kernel_launch_size_args_t {
  size_t Dimensions;
  ol_dimensions_t NumGroups;
  ol_dimensions_t GroupSize;
  size_t DynSharedMemory;
} ol_kernel_launch_size_args_t;

_Static_assert(sizeof(ol_error_struct_t) == 16, "ol_error_struct_t layout");
_Static_assert(sizeof(ol_kernel_launch_size_args_t) == 40, "ol_kernel_launch_size_args_t layout");
_Static_assert(offsetof(ol_kernel_launch_size_args_t, DynSharedMemory) == 32, "DynSharedMemory");

#define OL_PLATFORM_MAGIC 0x4f5348504c415446ull /* "OSHPLATF" */
#define OL_DEVICE_MAGIC 0x4f53484f4c444556ull   /* "OSHOLDEV" */
#define OL_QUEUE_MAGIC 0x4f53484f4c515545ull    /* "OSHOLQUE" */
#define OL_PROGRAM_MAGIC 0x4f53484f4c505247ull  /* "OSHOLPRG" */
#define OL_SYMBOL_MAGIC 0x4f53484f4c53594dull   /* "OSHOLSYM" */

typedef struct ol_platform_impl_t {
  uint64_t magic;
  int backend;
  const char *name;
} ol_platform_impl_t;

typedef struct ol_device_impl_t {
  uint64_t magic;
  int index; /* -1: the host device */
  ol_platform_impl_t *platform;
} ol_device_impl_t;
typedef ol_device_impl_t *ol_device_handle_t;

typedef struct ol_queue_impl_t {
  uint64_t magic;
  ol_device_impl_t *dev;
  struct ol_queue_impl_t *next;
} ol_queue_impl_t;
typedef ol_queue_impl_t *ol_queue_handle_t;

struct ol_program_impl_t;

typedef struct ol_symbol_impl_t {
  uint64_t magic;
  int kind;
  void *addr;
  uint64_t size; /* globals: bytes */
  char *name;
  struct ol_program_impl_t *prog;
  struct ol_symbol_impl_t *next;
} ol_symbol_impl_t;
typedef ol_symbol_impl_t *ol_symbol_handle_t;

typedef struct ol_program_impl_t {
  uint64_t magic;
  ol_device_impl_t *dev;
  osh_image *im; /* on the device's image list (ranges of its globals count as device memory) */
  ol_symbol_impl_t *syms;
  struct ol_program_impl_t *next;
} ol_program_impl_t;
typedef ol_program_impl_t *ol_program_handle_t;

typedef bool (*ol_device_iterate_cb_t)(ol_device_handle_t Device, void *UserData);

/* ---- state ------------------------------------------------------------------------------ */

static pthread_mutex_t g_ol_mu = PTHREAD_MUTEX_INITIALIZER; /* refcount, queue/program lists */
static int g_ol_refs;                                        /* olInit reference count */
static int g_ol_ever;                                        /* olInit ever succeeded */
static int g_ol_ndev;                                        /* devices while initialised */
static ol_platform_impl_t g_plat_osh = {OL_PLATFORM_MAGIC, OL_PLATFORM_BACKEND_UNKNOWN, "osh_host"};
static ol_platform_impl_t g_plat_host = {OL_PLATFORM_MAGIC, OL_PLATFORM_BACKEND_HOST, "host"};
static ol_device_impl_t g_ol_devs[MAX_DEV];
static ol_device_impl_t g_ol_host = {OL_DEVICE_MAGIC, -1, &g_plat_host};
static ol_queue_impl_t *g_queues;
static ol_program_impl_t *g_programs;

static _Thread_local ol_error_struct_t tls_ol_err;
static _Thread_local char tls_ol_details[sizeof tls_err];

static const char UNINIT_MSG[] = "liboffload has not been initialized - please call olInit before using this API";

/* The error of this call: Details is the thread's last error text (valid until the next
 * failing call on this thread). */
static ol_result_t ol_error(ol_errc_t code) {
  memcpy(tls_ol_details, tls_err, sizeof tls_ol_details);
  tls_ol_details[sizeof tls_ol_details - 1] = '\0';
  tls_ol_err.Code = code;
  tls_ol_err.Details = tls_ol_details;
  return &tls_ol_err;
}

__attribute__((format(printf, 2, 3))) static ol_result_t ol_fail(ol_errc_t code, const char *fmt, ...) {
  char buf[sizeof tls_err];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  set_error("%s", buf);
  return ol_error(code);
}

/* Count the call; an injected failure (osh_host_fail_nth) returns `code`. */
#define OL_ENTER(e, code)                                                    \
  do {                                                                       \
    ensure_init();                                                           \
    atomic_fetch_add_explicit(&g_calls[(e)], 1, memory_order_relaxed);       \
    if (inject_fail(e)) return ol_error(code);                               \
  } while (0)

/* Calls before olInit / after the last olShutDown: liboffload returns UNINITIALIZED. */
static ol_result_t ol_uninit(int e) {
  if (g_ol_ever)
    violation(V_AFTER_DEINIT_PLUGIN, e, "olShutDown released liboffload");
  else
    violation(V_BEFORE_INIT_PLUGIN, e, "olInit not called");
  set_error("%s", UNINIT_MSG);
  return ol_error(OL_ERRC_UNINITIALIZED);
}

static bool ol_live(void) { return __atomic_load_n(&g_ol_refs, __ATOMIC_ACQUIRE) > 0; }

#define OL_NEED_INIT(e)                                                      \
  do {                                                                       \
    if (!ol_live()) return ol_uninit(e);                                     \
  } while (0)

/* Resolve a device handle: NULL for a handle this library never returned (violation). */
static ol_device_impl_t *ol_device(int e, ol_device_handle_t h) {
  if (h == &g_ol_host) return h;
  uintptr_t a = (uintptr_t)h, b = (uintptr_t)g_ol_devs;
  if (a >= b && a < (uintptr_t)(g_ol_devs + g_ol_ndev) && (a - b) % sizeof(ol_device_impl_t) == 0 &&
      h->magic == OL_DEVICE_MAGIC)
    return h;
  violation(V_BAD_DEVICE, e, "%p is not a device handle of this library", (void *)h);
  return NULL;
}

static osh_dev *ol_osh_dev(ol_device_impl_t *d) { return &g_dev[ABI_OL][d->index]; }

/* The host device is only a memcpy endpoint (liboffload 22.1.8 segfaults on it here). */
static ol_result_t ol_host_refused(int e) {
  violation(V_HOST_DEVICE, e, "the host device is only a memcpy endpoint");
  return ol_error(OL_ERRC_UNSUPPORTED);
}

static ol_queue_impl_t *find_queue_locked(ol_queue_handle_t q) {
  for (ol_queue_impl_t *x = g_queues; x; x = x->next)
    if (x == q) return x;
  return NULL;
}

static ol_program_impl_t *find_program_locked(ol_program_handle_t p) {
  for (ol_program_impl_t *x = g_programs; x; x = x->next)
    if (x == p) return x;
  return NULL;
}

static ol_symbol_impl_t *find_symbol_locked(ol_symbol_handle_t s) {
  for (ol_program_impl_t *p = g_programs; p; p = p->next)
    for (ol_symbol_impl_t *x = p->syms; x; x = x->next)
      if (x == s) return x;
  return NULL;
}

static void free_symbols(ol_program_impl_t *p) {
  ol_symbol_impl_t *s = p->syms;
  while (s) {
    ol_symbol_impl_t *nx = s->next;
    free(s->name);
    free(s);
    s = nx;
  }
  p->syms = NULL;
}

/* ---- lifecycle --------------------------------------------------------------------------- */

OSH_EXPORT ol_result_t olInit(void) {
  OL_ENTER(O_INIT, OL_ERRC_UNKNOWN);
  pthread_mutex_lock(&g_life);
  pthread_mutex_lock(&g_ol_mu);
  if (g_ol_refs == 0) {
    g_ol_ndev = num_devices();
    for (int i = 0; i < g_ol_ndev; i++) {
      g_ol_devs[i].magic = OL_DEVICE_MAGIC;
      g_ol_devs[i].index = i;
      g_ol_devs[i].platform = &g_plat_osh;
      osh_dev *d = &g_dev[ABI_OL][i];
      pthread_rwlock_wrlock(&d->img_rw);
      pthread_mutex_lock(&d->mu);
      atomic_store(&d->state, ST_LIVE);
      pthread_mutex_unlock(&d->mu);
      pthread_rwlock_unlock(&d->img_rw);
    }
    g_ol_ever = 1;
  }
  __atomic_store_n(&g_ol_refs, g_ol_refs + 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&g_ol_mu);
  pthread_mutex_unlock(&g_life);
  return NULL;
}

OSH_EXPORT ol_result_t olShutDown(void) {
  OL_ENTER(O_SHUT_DOWN, OL_ERRC_UNKNOWN);
  pthread_mutex_lock(&g_life);
  pthread_mutex_lock(&g_ol_mu);
  if (g_ol_refs == 0) {
    bool ever = g_ol_ever;
    pthread_mutex_unlock(&g_ol_mu);
    pthread_mutex_unlock(&g_life);
    violation(ever ? V_DOUBLE_DEINIT : V_DEINIT_WITHOUT_INIT, O_SHUT_DOWN, "olShutDown without a matching olInit");
    set_error("%s", UNINIT_MSG);
    return ol_error(OL_ERRC_UNINITIALIZED);
  }
  if (g_ol_refs > 1) {
    __atomic_store_n(&g_ol_refs, g_ol_refs - 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_ol_mu);
    pthread_mutex_unlock(&g_life);
    return NULL;
  }
  /* the last reference: release everything (programs, queues, allocations, registrations) */
  int nq = 0, np = 0;
  int64_t na = 0;
  while (g_programs) {
    ol_program_impl_t *p = g_programs;
    g_programs = p->next;
    free_symbols(p);
    p->magic = 0;
    free(p); /* its image is on the device's list: dev_teardown dlcloses it */
    np++;
  }
  while (g_queues) {
    ol_queue_impl_t *q = g_queues;
    g_queues = q->next;
    q->magic = 0;
    free(q);
    nq++;
  }
  for (int i = 0; i < g_ol_ndev; i++) {
    osh_dev *d = &g_dev[ABI_OL][i];
    na += atomic_load(&d->live_allocs);
    dev_teardown(d);
  }
  __atomic_store_n(&g_ol_refs, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&g_ol_mu);
  pthread_mutex_unlock(&g_life);
  if (nq || np || na) {
    violation(V_SHUTDOWN_WITH_LIVE_OBJECTS, O_SHUT_DOWN,
              "%d program(s), %d queue(s), %lld allocation(s) still live; released them", np, nq, (long long)na);
    return ol_error(OL_ERRC_INVALID_ARGUMENT);
  }
  return NULL;
}

OSH_EXPORT ol_result_t olIterateDevices(ol_device_iterate_cb_t Callback, void *UserData) {
  OL_ENTER(O_ITERATE_DEVICES, OL_ERRC_UNKNOWN);
  OL_NEED_INIT(O_ITERATE_DEVICES);
  if (!Callback) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == Callback");
  for (int i = 0; i < g_ol_ndev; i++)
    if (!Callback(&g_ol_devs[i], UserData)) return NULL;
  Callback(&g_ol_host, UserData);
  return NULL;
}

/* ---- info --------------------------------------------------------------------------------- */

/* Fill a property: `size` bytes needed; PropValue NULL = only report the size. */
static ol_result_t put_prop(const void *val, size_t need, size_t PropSize, void *PropValue, size_t *SizeRet) {
  if (SizeRet) {
    *SizeRet = need;
    return NULL;
  }
  if (PropSize == 0 || PropSize < need) return ol_fail(OL_ERRC_INVALID_SIZE, "provided size is invalid");
  if (!PropValue) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == PropValue");
  memcpy(PropValue, val, need);
  return NULL;
}

static ol_result_t put_str(const char *s, size_t PropSize, void *PropValue, size_t *SizeRet) {
  return put_prop(s, strlen(s) + 1, PropSize, PropValue, SizeRet);
}

static ol_result_t device_info(int e, ol_device_handle_t Device, int PropName, size_t PropSize, void *PropValue,
                               size_t *SizeRet) {
  OL_NEED_INIT(e);
  if (!Device) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == Device");
  if (!SizeRet && !PropValue) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == PropValue");
  if (SizeRet == NULL && PropSize == 0) return ol_fail(OL_ERRC_INVALID_SIZE, "validation failure: PropSize == 0");
  ol_device_impl_t *d = ol_device(e, Device);
  if (!d) return ol_error(OL_ERRC_INVALID_DEVICE);
  bool host = d->index < 0;
  char buf[96];
  uint32_t u32;
  uint64_t u64;
  switch (PropName) {
  case OL_DEVICE_INFO_TYPE:
    u32 = host ? OL_DEVICE_TYPE_HOST : OL_DEVICE_TYPE_CPU;
    return put_prop(&u32, sizeof u32, PropSize, PropValue, SizeRet);
  case OL_DEVICE_INFO_PLATFORM: {
    ol_platform_impl_t *p = d->platform;
    return put_prop(&p, sizeof p, PropSize, PropValue, SizeRet);
  }
  case OL_DEVICE_INFO_NAME:
    if (host) return put_str("Virtual Host Device", PropSize, PropValue, SizeRet);
    snprintf(buf, sizeof buf, "osh_host device %d", d->index);
    return put_str(buf, PropSize, PropValue, SizeRet);
  case OL_DEVICE_INFO_PRODUCT_NAME:
    return put_str(host ? "Virtual Host Device" : "offload_shim host-malloc device", PropSize, PropValue, SizeRet);
  case OL_DEVICE_INFO_UID:
    snprintf(buf, sizeof buf, "osh-ol-%d", d->index);
    return put_str(buf, PropSize, PropValue, SizeRet);
  case OL_DEVICE_INFO_VENDOR:
    return put_str("offload_shim", PropSize, PropValue, SizeRet);
  case OL_DEVICE_INFO_DRIVER_VERSION:
    return put_str("libosh_hostplugin 1", PropSize, PropValue, SizeRet);
  case OL_DEVICE_INFO_VENDOR_ID:
    u32 = 0;
    return put_prop(&u32, sizeof u32, PropSize, PropValue, SizeRet);
  case OL_DEVICE_INFO_NUM_COMPUTE_UNITS:
    u32 = 1;
    return put_prop(&u32, sizeof u32, PropSize, PropValue, SizeRet);
  case OL_DEVICE_INFO_ADDRESS_BITS:
    u32 = 64;
    return put_prop(&u32, sizeof u32, PropSize, PropValue, SizeRet);
  case OL_DEVICE_INFO_MAX_MEM_ALLOC_SIZE:
  case OL_DEVICE_INFO_GLOBAL_MEM_SIZE: /* the capacity; 0 = unlimited */
    u64 = host ? 0 : (uint64_t)atomic_load(&g_capacity[d->index]);
    return put_prop(&u64, sizeof u64, PropSize, PropValue, SizeRet);
  default:
    if (PropName >= 0 && PropName < OL_DEVICE_INFO_LAST)
      return ol_fail(OL_ERRC_UNSUPPORTED, "device info %d is not provided by the bundled host plugin", PropName);
    return ol_fail(OL_ERRC_INVALID_ENUMERATION, "getDeviceInfo enum '%d' is invalid", PropName);
  }
}

OSH_EXPORT ol_result_t olGetDeviceInfo(ol_device_handle_t Device, int PropName, size_t PropSize, void *PropValue) {
  OL_ENTER(O_GET_DEVICE_INFO, OL_ERRC_UNKNOWN);
  return device_info(O_GET_DEVICE_INFO, Device, PropName, PropSize, PropValue, NULL);
}

OSH_EXPORT ol_result_t olGetDeviceInfoSize(ol_device_handle_t Device, int PropName, size_t *PropSizeRet) {
  OL_ENTER(O_GET_DEVICE_INFO_SIZE, OL_ERRC_UNKNOWN);
  if (!PropSizeRet) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == PropSizeRet");
  return device_info(O_GET_DEVICE_INFO_SIZE, Device, PropName, 0, NULL, PropSizeRet);
}

static ol_result_t platform_info(int e, ol_platform_impl_t *Platform, int PropName, size_t PropSize,
                                 void *PropValue, size_t *SizeRet) {
  OL_NEED_INIT(e);
  if (!Platform) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == Platform");
  if (!SizeRet && !PropValue) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == PropValue");
  if (Platform != &g_plat_osh && Platform != &g_plat_host) {
    violation(V_BAD_DEVICE, e, "%p is not a platform handle of this library", (void *)Platform);
    return ol_error(OL_ERRC_INVALID_ARGUMENT);
  }
  uint32_t u32;
  switch (PropName) {
  case OL_PLATFORM_INFO_NAME:
    return put_str(Platform->name, PropSize, PropValue, SizeRet);
  case OL_PLATFORM_INFO_VENDOR_NAME:
    return put_str("offload_shim", PropSize, PropValue, SizeRet);
  case OL_PLATFORM_INFO_VERSION:
    return put_str("v0.0.1", PropSize, PropValue, SizeRet);
  case OL_PLATFORM_INFO_BACKEND:
    u32 = (uint32_t)Platform->backend;
    return put_prop(&u32, sizeof u32, PropSize, PropValue, SizeRet);
  default:
    return ol_fail(OL_ERRC_INVALID_ENUMERATION, "getPlatformInfo enum '%d' is invalid", PropName);
  }
}

OSH_EXPORT ol_result_t olGetPlatformInfo(ol_platform_impl_t *Platform, int PropName, size_t PropSize,
                                         void *PropValue) {
  OL_ENTER(O_GET_PLATFORM_INFO, OL_ERRC_UNKNOWN);
  return platform_info(O_GET_PLATFORM_INFO, Platform, PropName, PropSize, PropValue, NULL);
}

OSH_EXPORT ol_result_t olGetPlatformInfoSize(ol_platform_impl_t *Platform, int PropName, size_t *PropSizeRet) {
  OL_ENTER(O_GET_PLATFORM_INFO_SIZE, OL_ERRC_UNKNOWN);
  if (!PropSizeRet) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == PropSizeRet");
  return platform_info(O_GET_PLATFORM_INFO_SIZE, Platform, PropName, 0, NULL, PropSizeRet);
}

/* ---- memory ------------------------------------------------------------------------------- */

OSH_EXPORT ol_result_t olMemAlloc(ol_device_handle_t Device, int Type, size_t Size, void **AllocationOut) {
  OL_ENTER(O_MEM_ALLOC, OL_ERRC_OUT_OF_RESOURCES);
  OL_NEED_INIT(O_MEM_ALLOC);
  if (!Device) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == Device");
  if (!AllocationOut) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == AllocationOut");
  *AllocationOut = NULL;
  if (Size == 0) return ol_fail(OL_ERRC_INVALID_SIZE, "validation failure: Size == 0");
  if (Type < 0 || Type >= OL_ALLOC_TYPE_LAST)
    return ol_fail(OL_ERRC_INVALID_ENUMERATION, "olMemAlloc: allocation type %d is invalid", Type);
  ol_device_impl_t *d = ol_device(O_MEM_ALLOC, Device);
  if (!d) return ol_error(OL_ERRC_INVALID_DEVICE);
  if (d->index < 0) return ol_host_refused(O_MEM_ALLOC);
  if (Size > (size_t)INT64_MAX) return ol_fail(OL_ERRC_OUT_OF_RESOURCES, "olMemAlloc: size too large");
  void *p = dev_alloc(ol_osh_dev(d), O_MEM_ALLOC, (int64_t)Size, false);
  if (!p) return ol_error(OL_ERRC_OUT_OF_RESOURCES);
  *AllocationOut = p;
  return NULL;
}

OSH_EXPORT ol_result_t olMemFree(void *Address) {
  OL_ENTER(O_MEM_FREE, OL_ERRC_UNKNOWN);
  OL_NEED_INIT(O_MEM_FREE);
  if (!Address) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == Address");
  for (int i = 0; i < g_ol_ndev; i++) {
    osh_dev *d = &g_dev[ABI_OL][i];
    pthread_mutex_lock(&d->mu);
    bool mine = t_find(d->allocs, (uintptr_t)Address) != NULL;
    pthread_mutex_unlock(&d->mu);
    if (mine) return dev_free(d, O_MEM_FREE, Address) ? ol_error(OL_ERRC_INVALID_ARGUMENT) : NULL;
  }
  violation(V_UNKNOWN_POINTER, O_MEM_FREE, "%p is not a live allocation", Address);
  set_error("address is not a known allocation");
  return ol_error(OL_ERRC_INVALID_ARGUMENT);
}

/* Validate an optional queue; NULL + violation for an unknown one. */
static ol_result_t check_queue(int e, ol_queue_handle_t Queue, ol_queue_impl_t **out) {
  *out = NULL;
  if (!Queue) return NULL;
  pthread_mutex_lock(&g_ol_mu);
  ol_queue_impl_t *q = find_queue_locked(Queue);
  pthread_mutex_unlock(&g_ol_mu);
  if (!q) {
    violation(V_UNKNOWN_QUEUE, e, "%p is not a live queue", (void *)Queue);
    return ol_error(OL_ERRC_INVALID_QUEUE);
  }
  *out = q;
  return NULL;
}

OSH_EXPORT ol_result_t olMemcpy(ol_queue_handle_t Queue, void *DstPtr, ol_device_handle_t DstDevice,
                                const void *SrcPtr, ol_device_handle_t SrcDevice, size_t Size) {
  OL_ENTER(O_MEMCPY, OL_ERRC_UNKNOWN);
  OL_NEED_INIT(O_MEMCPY);
  if (!DstDevice) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == DstDevice");
  if (!SrcDevice) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == SrcDevice");
  if (!DstPtr) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == DstPtr");
  if (!SrcPtr) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == SrcPtr");
  ol_device_impl_t *dd = ol_device(O_MEMCPY, DstDevice), *sd = dd ? ol_device(O_MEMCPY, SrcDevice) : NULL;
  if (!dd || !sd) return ol_error(OL_ERRC_INVALID_DEVICE);
  ol_queue_impl_t *q;
  ol_result_t r = check_queue(O_MEMCPY, Queue, &q);
  if (r) return r;
  if (q && q->dev != dd && q->dev != sd)
    return ol_fail(OL_ERRC_INVALID_ARGUMENT, "olMemcpy: the queue belongs to neither device");
  if (Size > (size_t)INT64_MAX) return ol_fail(OL_ERRC_INVALID_SIZE, "olMemcpy: size too large");
  if (Size == 0) return NULL;
  bool dh = dd->index < 0, sh = sd->index < 0;
  int rc;
  if (dh && sh) {
    memmove(DstPtr, SrcPtr, Size);
    return NULL;
  } else if (sh) {
    rc = dev_copy(ol_osh_dev(dd), O_MEMCPY, DstPtr, SrcPtr, (int64_t)Size, true, false);
  } else if (dh) {
    rc = dev_copy(ol_osh_dev(sd), O_MEMCPY, DstPtr, SrcPtr, (int64_t)Size, false, true);
  } else if (dd == sd) {
    rc = dev_copy(ol_osh_dev(dd), O_MEMCPY, DstPtr, SrcPtr, (int64_t)Size, true, true);
  } else {
    /* device to device: check the source range on its device, copy into the destination */
    osh_dev *s = ol_osh_dev(sd);
    pthread_rwlock_rdlock(&s->img_rw);
    if (!dev_live_locked(s, O_MEMCPY)) {
      pthread_rwlock_unlock(&s->img_rw);
      return ol_error(OL_ERRC_INVALID_DEVICE);
    }
    if (!range_ok(s, SrcPtr, Size)) {
      pthread_rwlock_unlock(&s->img_rw);
      violation(V_UNKNOWN_POINTER, O_MEMCPY, "device %d: [%p, +%zu) is not inside device memory", s->id, SrcPtr,
                Size);
      return ol_error(OL_ERRC_INVALID_ARGUMENT);
    }
    rc = dev_copy(ol_osh_dev(dd), O_MEMCPY, DstPtr, SrcPtr, (int64_t)Size, true, false);
    pthread_rwlock_unlock(&s->img_rw);
  }
  return rc ? ol_error(OL_ERRC_INVALID_ARGUMENT) : NULL;
}

/* olMemRegister: the range rule of LLVM PinnedAllocationMapTy::lockHostBuffer (which backs it):
 * the same or a contained range adds a user, a partial overlap is an error. */
OSH_EXPORT ol_result_t olMemRegister(ol_device_handle_t Device, void *Ptr, size_t Size, uint32_t Flags,
                                     void **PinnedPtr) {
  (void)Flags; /* reserved */
  OL_ENTER(O_MEM_REGISTER, OL_ERRC_UNKNOWN);
  OL_NEED_INIT(O_MEM_REGISTER);
  if (!Device) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == Device");
  if (!Ptr) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == Ptr");
  if (!PinnedPtr) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == PinnedPtr");
  *PinnedPtr = NULL;
  if (Size == 0) return ol_fail(OL_ERRC_INVALID_SIZE, "validation failure: Size == 0");
  ol_device_impl_t *od = ol_device(O_MEM_REGISTER, Device);
  if (!od) return ol_error(OL_ERRC_INVALID_DEVICE);
  if (od->index < 0) return ol_host_refused(O_MEM_REGISTER);
  osh_dev *d = ol_osh_dev(od);
  uintptr_t s = (uintptr_t)Ptr, e = s + Size;
  if (e < s) return ol_fail(OL_ERRC_INVALID_SIZE, "olMemRegister: range wraps around");
  anode *n = malloc(sizeof *n);
  if (!n) return ol_fail(OL_ERRC_OUT_OF_RESOURCES, "olMemRegister: out of host memory");
  pthread_mutex_lock(&d->mu);
  if (!dev_live_locked(d, O_MEM_REGISTER)) {
    pthread_mutex_unlock(&d->mu);
    free(n);
    return ol_error(OL_ERRC_INVALID_DEVICE);
  }
  anode *f = t_floor(d->locks, s);
  if (f && s < f->key + f->size) {
    if (e <= f->key + f->size) { /* the same or a contained range: one more user */
      f->refs++;
      pthread_mutex_unlock(&d->mu);
      free(n);
      *PinnedPtr = Ptr;
      return NULL;
    }
    pthread_mutex_unlock(&d->mu);
    free(n);
    return ol_fail(OL_ERRC_INVALID_ARGUMENT, "olMemRegister: [%p, +%zu) partially overlaps a registered buffer", Ptr,
                   Size);
  }
  anode *g = t_floor(d->locks, e - 1);
  if (g && g->key > s) {
    pthread_mutex_unlock(&d->mu);
    free(n);
    return ol_fail(OL_ERRC_INVALID_ARGUMENT, "olMemRegister: [%p, +%zu) contains a registered buffer", Ptr, Size);
  }
  if (mlock(Ptr, Size) != 0) {
    int err = errno;
    pthread_mutex_unlock(&d->mu);
    free(n);
    return ol_fail(OL_ERRC_OUT_OF_RESOURCES, "olMemRegister: mlock(%p, %zu) failed: %s", Ptr, Size, strerror(err));
  }
  n->key = s;
  n->size = Size;
  n->refs = 1;
  n->l = n->r = NULL;
  n->prio = next_prio(d);
  d->locks = t_insert(d->locks, n);
  pthread_mutex_unlock(&d->mu);
  *PinnedPtr = Ptr;
  return NULL;
}

OSH_EXPORT ol_result_t olMemUnregister(ol_device_handle_t Device, void *Ptr) {
  OL_ENTER(O_MEM_UNREGISTER, OL_ERRC_UNKNOWN);
  OL_NEED_INIT(O_MEM_UNREGISTER);
  if (!Device) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == Device");
  if (!Ptr) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == Ptr");
  ol_device_impl_t *od = ol_device(O_MEM_UNREGISTER, Device);
  if (!od) return ol_error(OL_ERRC_INVALID_DEVICE);
  if (od->index < 0) return ol_host_refused(O_MEM_UNREGISTER);
  osh_dev *d = ol_osh_dev(od);
  anode *gone = NULL;
  pthread_mutex_lock(&d->mu);
  if (!dev_live_locked(d, O_MEM_UNREGISTER)) {
    pthread_mutex_unlock(&d->mu);
    return ol_error(OL_ERRC_INVALID_DEVICE);
  }
  anode *f = t_floor(d->locks, (uintptr_t)Ptr);
  bool found = f && (uintptr_t)Ptr < f->key + f->size;
  if (found && --f->refs == 0) d->locks = t_erase(d->locks, f->key, &gone);
  pthread_mutex_unlock(&d->mu);
  if (!found) {
    violation(V_UNKNOWN_POINTER, O_MEM_UNREGISTER, "device %d: %p is not registered", d->id, Ptr);
    return ol_error(OL_ERRC_INVALID_ARGUMENT);
  }
  if (gone) {
    munlock((void *)gone->key, (size_t)gone->size);
    free(gone);
  }
  return NULL;
}

/* ---- queues ------------------------------------------------------------------------------- */

OSH_EXPORT ol_result_t olCreateQueue(ol_device_handle_t Device, ol_queue_handle_t *Queue) {
  OL_ENTER(O_CREATE_QUEUE, OL_ERRC_UNKNOWN);
  OL_NEED_INIT(O_CREATE_QUEUE);
  if (!Device) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == Device");
  if (!Queue) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == Queue");
  *Queue = NULL;
  ol_device_impl_t *d = ol_device(O_CREATE_QUEUE, Device);
  if (!d) return ol_error(OL_ERRC_INVALID_DEVICE);
  if (d->index < 0) return ol_host_refused(O_CREATE_QUEUE);
  ol_queue_impl_t *q = calloc(1, sizeof *q);
  if (!q) return ol_fail(OL_ERRC_OUT_OF_RESOURCES, "olCreateQueue: out of host memory");
  q->magic = OL_QUEUE_MAGIC;
  q->dev = d;
  pthread_mutex_lock(&g_ol_mu);
  q->next = g_queues;
  g_queues = q;
  pthread_mutex_unlock(&g_ol_mu);
  *Queue = q;
  return NULL;
}

OSH_EXPORT ol_result_t olDestroyQueue(ol_queue_handle_t Queue) {
  OL_ENTER(O_DESTROY_QUEUE, OL_ERRC_UNKNOWN);
  OL_NEED_INIT(O_DESTROY_QUEUE);
  if (!Queue) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == Queue");
  pthread_mutex_lock(&g_ol_mu);
  ol_queue_impl_t *found = NULL;
  for (ol_queue_impl_t **pp = &g_queues; *pp; pp = &(*pp)->next) {
    if (*pp == Queue) {
      found = *pp;
      *pp = found->next;
      break;
    }
  }
  pthread_mutex_unlock(&g_ol_mu);
  if (!found) {
    violation(V_UNKNOWN_QUEUE, O_DESTROY_QUEUE, "%p is not a live queue", (void *)Queue);
    return ol_error(OL_ERRC_INVALID_QUEUE);
  }
  found->magic = 0;
  free(found);
  return NULL;
}

OSH_EXPORT ol_result_t olSyncQueue(ol_queue_handle_t Queue) {
  OL_ENTER(O_SYNC_QUEUE, OL_ERRC_UNKNOWN);
  OL_NEED_INIT(O_SYNC_QUEUE);
  if (!Queue) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == Queue");
  ol_queue_impl_t *q;
  return check_queue(O_SYNC_QUEUE, Queue, &q); /* work ran synchronously at enqueue */
}

/* ---- programs and symbols ------------------------------------------------------------------ */

OSH_EXPORT ol_result_t olIsValidBinary(ol_device_handle_t Device, const void *ProgData, size_t ProgDataSize,
                                       bool *Valid) {
  OL_ENTER(O_IS_VALID_BINARY, OL_ERRC_UNKNOWN);
  OL_NEED_INIT(O_IS_VALID_BINARY);
  if (!Device) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == Device");
  if (!ProgData) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == ProgData");
  if (!Valid) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == Valid");
  ol_device_impl_t *d = ol_device(O_IS_VALID_BINARY, Device);
  if (!d) return ol_error(OL_ERRC_INVALID_DEVICE);
  *Valid = d->index >= 0 && elf_ok(ProgData, ProgDataSize);
  return NULL;
}

OSH_EXPORT ol_result_t olCreateProgram(ol_device_handle_t Device, const void *ProgData, size_t ProgDataSize,
                                       ol_program_handle_t *Program) {
  OL_ENTER(O_CREATE_PROGRAM, OL_ERRC_UNKNOWN);
  OL_NEED_INIT(O_CREATE_PROGRAM);
  if (!Device) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == Device");
  if (!ProgData) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == ProgData");
  if (!Program) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == Program");
  *Program = NULL;
  ol_device_impl_t *od = ol_device(O_CREATE_PROGRAM, Device);
  if (!od) return ol_error(OL_ERRC_INVALID_DEVICE);
  if (od->index < 0) return ol_host_refused(O_CREATE_PROGRAM);
  if (!elf_ok(ProgData, ProgDataSize))
    return ol_fail(OL_ERRC_INVALID_BINARY, "olCreateProgram: image is not an x86-64 ELF64 object");
  void *h = dlopen_bytes(ProgData, ProgDataSize);
  if (!h) return ol_error(OL_ERRC_INVALID_BINARY);
  osh_image *im = calloc(1, sizeof *im);
  ol_program_impl_t *p = calloc(1, sizeof *p);
  if (!im || !p) {
    free(p);
    free(im);
    dlclose(h);
    return ol_fail(OL_ERRC_OUT_OF_RESOURCES, "olCreateProgram: out of host memory");
  }
  im->handle = h;
  p->magic = OL_PROGRAM_MAGIC;
  p->dev = od;
  p->im = im;
  pthread_mutex_lock(&g_ol_mu);
  if (!dev_add_image(ol_osh_dev(od), O_CREATE_PROGRAM, im)) { /* frees im */
    pthread_mutex_unlock(&g_ol_mu);
    free(p);
    return ol_error(OL_ERRC_INVALID_DEVICE);
  }
  p->next = g_programs;
  g_programs = p;
  pthread_mutex_unlock(&g_ol_mu);
  *Program = p;
  return NULL;
}

OSH_EXPORT ol_result_t olDestroyProgram(ol_program_handle_t Program) {
  OL_ENTER(O_DESTROY_PROGRAM, OL_ERRC_UNKNOWN);
  OL_NEED_INIT(O_DESTROY_PROGRAM);
  if (!Program) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == Program");
  pthread_mutex_lock(&g_ol_mu);
  ol_program_impl_t *found = NULL;
  for (ol_program_impl_t **pp = &g_programs; *pp; pp = &(*pp)->next) {
    if (*pp == Program) {
      found = *pp;
      *pp = found->next;
      break;
    }
  }
  pthread_mutex_unlock(&g_ol_mu);
  if (!found) {
    violation(V_UNKNOWN_IMAGE, O_DESTROY_PROGRAM, "%p is not a live program", (void *)Program);
    return ol_fail(OL_ERRC_INVALID_ARGUMENT, "olDestroyProgram: %p is not a live program", (void *)Program);
  }
  /* unlink the image under the write lock: waits for launches and copies on this device */
  osh_dev *d = ol_osh_dev(found->dev);
  pthread_rwlock_wrlock(&d->img_rw);
  for (osh_image **pp = &d->images; *pp; pp = &(*pp)->next) {
    if (*pp == found->im) {
      *pp = found->im->next;
      break;
    }
  }
  pthread_rwlock_unlock(&d->img_rw);
  image_free(found->im);
  free_symbols(found);
  found->magic = 0;
  free(found);
  return NULL;
}

OSH_EXPORT ol_result_t olGetSymbol(ol_program_handle_t Program, const char *Name, int Kind,
                                   ol_symbol_handle_t *Symbol) {
  OL_ENTER(O_GET_SYMBOL, OL_ERRC_UNKNOWN);
  OL_NEED_INIT(O_GET_SYMBOL);
  if (!Program) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == Program");
  if (!Name) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == Name");
  if (!Symbol) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == Symbol");
  *Symbol = NULL;
  if (Kind < 0 || Kind >= OL_SYMBOL_KIND_LAST)
    return ol_fail(OL_ERRC_INVALID_ENUMERATION, "olGetSymbol: symbol kind %d is invalid", Kind);
  pthread_mutex_lock(&g_ol_mu);
  ol_program_impl_t *p = find_program_locked(Program);
  if (!p) {
    pthread_mutex_unlock(&g_ol_mu);
    violation(V_UNKNOWN_IMAGE, O_GET_SYMBOL, "%p is not a live program", (void *)Program);
    return ol_fail(OL_ERRC_INVALID_ARGUMENT, "olGetSymbol: %p is not a live program", (void *)Program);
  }
  for (ol_symbol_impl_t *s = p->syms; s; s = s->next) {
    if (s->kind == Kind && strcmp(s->name, Name) == 0) {
      pthread_mutex_unlock(&g_ol_mu);
      *Symbol = s;
      return NULL;
    }
  }
  void *addr = lookup_sym(p->im->handle, Name);
  if (!addr) {
    pthread_mutex_unlock(&g_ol_mu);
    return ol_fail(OL_ERRC_NOT_FOUND, "could not find symbol '%s' in the program", Name);
  }
  uint64_t size = 0;
  if (Kind == OL_SYMBOL_KIND_GLOBAL_VARIABLE) {
    Dl_info info;
    ElfW(Sym) *es = NULL;
    if (!dladdr1(addr, &info, (void **)&es, RTLD_DL_SYMENT) || !es) {
      pthread_mutex_unlock(&g_ol_mu);
      return ol_fail(OL_ERRC_NOT_FOUND, "olGetSymbol: cannot determine the size of '%s'", Name);
    }
    size = es->st_size;
  }
  ol_symbol_impl_t *s = calloc(1, sizeof *s);
  char *nm = strdup(Name);
  osh_var *vars = NULL;
  if (s && nm && Kind == OL_SYMBOL_KIND_GLOBAL_VARIABLE) {
    /* the global's range counts as device memory for copies (range_ok) */
    osh_dev *d = ol_osh_dev(p->dev);
    pthread_rwlock_wrlock(&d->img_rw);
    vars = realloc(p->im->vars, (p->im->num_vars + 1) * sizeof *vars);
    if (vars) {
      vars[p->im->num_vars].start = (uintptr_t)addr;
      vars[p->im->num_vars].end = (uintptr_t)addr + size;
      p->im->vars = vars;
      p->im->num_vars++;
    }
    pthread_rwlock_unlock(&d->img_rw);
  }
  if (!s || !nm || (Kind == OL_SYMBOL_KIND_GLOBAL_VARIABLE && !vars)) {
    pthread_mutex_unlock(&g_ol_mu);
    free(s);
    free(nm);
    return ol_fail(OL_ERRC_OUT_OF_RESOURCES, "olGetSymbol: out of host memory");
  }
  s->magic = OL_SYMBOL_MAGIC;
  s->kind = Kind;
  s->addr = addr;
  s->size = size;
  s->name = nm;
  s->prog = p;
  s->next = p->syms;
  p->syms = s;
  pthread_mutex_unlock(&g_ol_mu);
  *Symbol = s;
  return NULL;
}

static ol_result_t symbol_info(int e, ol_symbol_handle_t Symbol, int PropName, size_t PropSize, void *PropValue,
                               size_t *SizeRet) {
  OL_NEED_INIT(e);
  if (!Symbol) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == Symbol");
  if (!SizeRet && !PropValue) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == PropValue");
  pthread_mutex_lock(&g_ol_mu);
  ol_symbol_impl_t *s = find_symbol_locked(Symbol);
  int kind = s ? s->kind : -1;
  void *addr = s ? s->addr : NULL;
  uint64_t size = s ? s->size : 0;
  pthread_mutex_unlock(&g_ol_mu);
  if (!s) {
    violation(V_UNKNOWN_KERNEL, e, "%p is not a symbol of a live program", (void *)Symbol);
    return ol_fail(OL_ERRC_INVALID_ARGUMENT, "%p is not a symbol of a live program", (void *)Symbol);
  }
  uint32_t k = (uint32_t)kind;
  size_t sz = (size_t)size;
  switch (PropName) {
  case OL_SYMBOL_INFO_KIND:
    return put_prop(&k, sizeof k, PropSize, PropValue, SizeRet);
  case OL_SYMBOL_INFO_GLOBAL_VARIABLE_ADDRESS:
    if (kind != OL_SYMBOL_KIND_GLOBAL_VARIABLE)
      return ol_fail(OL_ERRC_SYMBOL_KIND, "the symbol is not a global variable");
    return put_prop(&addr, sizeof addr, PropSize, PropValue, SizeRet);
  case OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE:
    if (kind != OL_SYMBOL_KIND_GLOBAL_VARIABLE)
      return ol_fail(OL_ERRC_SYMBOL_KIND, "the symbol is not a global variable");
    return put_prop(&sz, sizeof sz, PropSize, PropValue, SizeRet);
  default:
    return ol_fail(OL_ERRC_INVALID_ENUMERATION, "getSymbolInfo enum '%d' is invalid", PropName);
  }
}

OSH_EXPORT ol_result_t olGetSymbolInfo(ol_symbol_handle_t Symbol, int PropName, size_t PropSize, void *PropValue) {
  OL_ENTER(O_GET_SYMBOL_INFO, OL_ERRC_UNKNOWN);
  return symbol_info(O_GET_SYMBOL_INFO, Symbol, PropName, PropSize, PropValue, NULL);
}

OSH_EXPORT ol_result_t olGetSymbolInfoSize(ol_symbol_handle_t Symbol, int PropName, size_t *PropSizeRet) {
  OL_ENTER(O_GET_SYMBOL_INFO_SIZE, OL_ERRC_UNKNOWN);
  if (!PropSizeRet) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == PropSizeRet");
  return symbol_info(O_GET_SYMBOL_INFO_SIZE, Symbol, PropName, 0, NULL, PropSizeRet);
}

/* ---- launch --------------------------------------------------------------------------------- */

OSH_EXPORT ol_result_t olLaunchKernel(ol_queue_handle_t Queue, ol_device_handle_t Device, ol_symbol_handle_t Kernel,
                                      const void *ArgumentsData, size_t ArgumentsSize,
                                      const ol_kernel_launch_size_args_t *LaunchSizeArgs) {
  OL_ENTER(O_LAUNCH_KERNEL, OL_ERRC_UNKNOWN);
  OL_NEED_INIT(O_LAUNCH_KERNEL);
  if (!Device) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == Device");
  if (!Kernel) return ol_fail(OL_ERRC_INVALID_NULL_HANDLE, "validation failure: NULL == Kernel");
  if (!LaunchSizeArgs) return ol_fail(OL_ERRC_INVALID_NULL_POINTER, "validation failure: NULL == LaunchSizeArgs");
  if (ArgumentsSize > 0 && !ArgumentsData)
    return ol_fail(OL_ERRC_INVALID_ARGUMENT, "validation failure: ArgumentsSize > 0 && ArgumentsData == NULL");
  ol_device_impl_t *od = ol_device(O_LAUNCH_KERNEL, Device);
  if (!od) return ol_error(OL_ERRC_INVALID_DEVICE);
  if (od->index < 0) return ol_host_refused(O_LAUNCH_KERNEL);
  ol_queue_impl_t *q;
  ol_result_t r = check_queue(O_LAUNCH_KERNEL, Queue, &q);
  if (r) return r;
  if (q && q->dev != od) return ol_fail(OL_ERRC_INVALID_DEVICE, "olLaunchKernel: the queue belongs to another device");
  if (ArgumentsSize % sizeof(void *) != 0 || ArgumentsSize / sizeof(void *) > MAX_ARGS)
    return ol_fail(OL_ERRC_INVALID_ARGUMENT,
                   "olLaunchKernel: %zu bytes of arguments; the bundled host plugin takes up to %d pointer-sized "
                   "arguments",
                   ArgumentsSize, MAX_ARGS);
  osh_dev *d = ol_osh_dev(od);
  pthread_mutex_lock(&g_ol_mu);
  ol_symbol_impl_t *s = find_symbol_locked(Kernel);
  if (!s || s->prog->dev != od) {
    pthread_mutex_unlock(&g_ol_mu);
    violation(V_UNKNOWN_KERNEL, O_LAUNCH_KERNEL, "device %d: %p is not a kernel of a program on this device", od->index,
              (void *)Kernel);
    return ol_error(OL_ERRC_INVALID_ARGUMENT);
  }
  if (s->kind != OL_SYMBOL_KIND_KERNEL) {
    pthread_mutex_unlock(&g_ol_mu);
    return ol_fail(OL_ERRC_SYMBOL_KIND, "the provided symbol is not a kernel");
  }
  void (*fn)(void);
  memcpy(&fn, &s->addr, sizeof fn);
  /* hold the device's image lock (read) while the kernel runs: olDestroyProgram waits */
  pthread_rwlock_rdlock(&d->img_rw);
  pthread_mutex_unlock(&g_ol_mu);
  if (!dev_live_locked(d, O_LAUNCH_KERNEL)) {
    pthread_rwlock_unlock(&d->img_rw);
    return ol_error(OL_ERRC_INVALID_DEVICE);
  }
  void *a[MAX_ARGS] = {0};
  uint32_t n = (uint32_t)(ArgumentsSize / sizeof(void *));
  if (n) memcpy(a, ArgumentsData, ArgumentsSize);
  call_kernel(fn, n, a);
  pthread_rwlock_unlock(&d->img_rw);
  return NULL;
}

/* ---- control API additions ------------------------------------------------------------------ */

int osh_ol_refcount(void) { return __atomic_load_n(&g_ol_refs, __ATOMIC_ACQUIRE); }

int64_t osh_ol_live_queues(int dev) {
  int64_t n = 0;
  pthread_mutex_lock(&g_ol_mu);
  for (ol_queue_impl_t *q = g_queues; q; q = q->next)
    if (dev < 0 || q->dev->index == dev) n++;
  pthread_mutex_unlock(&g_ol_mu);
  return n;
}

int64_t osh_ol_live_programs(int dev) {
  int64_t n = 0;
  pthread_mutex_lock(&g_ol_mu);
  for (ol_program_impl_t *p = g_programs; p; p = p->next)
    if (dev < 0 || p->dev->index == dev) n++;
  pthread_mutex_unlock(&g_ol_mu);
  return n;
}

OSH_EXPORT int osh_host_ol_refcount(void) {
  ensure_init();
  return osh_ol_refcount();
}

OSH_EXPORT int64_t osh_host_ol_live_queues(int dev) {
  ensure_init();
  if (dev < -1 || dev >= MAX_DEV) return -1;
  return osh_ol_live_queues(dev);
}

OSH_EXPORT int64_t osh_host_ol_live_programs(int dev) {
  ensure_init();
  if (dev < -1 || dev >= MAX_DEV) return -1;
  return osh_ol_live_programs(dev);
}
