/* A stand-in for the CUDA driver library (libcuda.so.1), for tests without a GPU.
 *
 * NOT A GPU.  It implements the driver entry points that the LLVM 16 CUDA plugins
 * (nextgen and classic, dlopen("libcuda.so") + dlsym), the GCC 12 nvptx plugin
 * (dlopen("libcuda.so.1") + dlsym, cuda-lib.def) and cuda-python 13
 * (cuda.bindings.driver: dlopen("libcuda.so.1") + cuGetProcAddress_v2 by name and ABI
 * version) call, with the driver's control flow and error codes, over host memory:
 *
 *  - contexts: per-device primary context with a retain count (inactive, and every call
 *    made under it CUDA_ERROR_CONTEXT_IS_DESTROYED (709), once the count drops to 0 --
 *    it stays current on threads that had it current); cuCtxCreate'd contexts; a
 *    per-thread context stack (cuCtxSetCurrent/GetCurrent/Push/Pop); calls that need a
 *    context answer CUDA_ERROR_INVALID_CONTEXT (201) without one;
 *  - "device" memory is host memory (malloc), recorded per context; copies check that
 *    the device side lies in a live allocation (CUDA_ERROR_INVALID_VALUE otherwise);
 *    a capacity per device (CUDA_ERROR_OUT_OF_MEMORY past it);
 *  - cuMemHostRegister is page granular: a range touching a page already registered
 *    answers CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED (712); unregistering an address
 *    that does not start a registration answers 713;
 *  - modules accept any image; cuModuleGetFunction/GetGlobal find a name if it occurs
 *    in the image (globals take their size from an ELF symbol table); kernels are
 *    recorded, never run.
 *
 * Configuration (read at cuInit): OSH_CUDA_STANDIN_DEVICES (default 1),
 * OSH_CUDA_STANDIN_MEM (bytes per device, default 1 GiB), OSH_CUDA_STANDIN_LOG (a file
 * that gets one line per call: "thread function args -> result"),
 * OSH_CUDA_STANDIN_FAIL ("name:n:code[,...]": the n-th call of entry point `name`
 * returns `code`).  The device is named "offload_shim CUDA driver stand-in (no GPU)";
 * osh_cuda_standin_calls(name) counts calls in process.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct osh_ctx *CUcontext;
typedef struct osh_obj *CUmodule, *CUfunction, *CUstream, *CUevent, *CUlinkState;
typedef void (*CUstreamCallback)(CUstream, CUresult, void *);

enum {
  CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3, CUDA_ERROR_NO_DEVICE = 100, CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200, CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217, CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500, CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
  CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
  CUDA_ERROR_NOT_SUPPORTED = 801, CUDA_ERROR_UNKNOWN = 999,
};

#define MAX_DEV 8
#define MAGIC 0x05ca1ab1eu

struct osh_ctx {
  unsigned magic;
  int dev;
  int primary;
  int alive;        /* created / retained and not destroyed / released to 0 */
  int retains;      /* primary only */
  unsigned flags;
  size_t limits[8];
  int id;
};

enum { K_MODULE = 1, K_FUNCTION, K_STREAM, K_EVENT, K_LINK };
struct osh_obj {
  unsigned magic;
  int kind;
  int alive;
  CUcontext ctx;
  char *data;       /* module image copy / link buffer / function name */
  size_t size;
  struct osh_obj *module;
};

struct alloc { uintptr_t p; size_t n; CUcontext ctx; int kind; };  /* kind: 0 dev, 1 host, 2 managed, 3 global */
struct reg { uintptr_t base, start, end; };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialized, ndev = 1;
static size_t capacity = (size_t)1 << 30, used[MAX_DEV];
static struct osh_ctx primary[MAX_DEV];
static struct alloc *allocs; static size_t nallocs, capallocs;
static struct reg *regs; static size_t nregs, capregs;
static FILE *logf;
static int next_ctx_id = 1;
static long pagesz;

static __thread CUcontext stack[32];
static __thread int depth;

/* ---- call log, counters, fault injection ------------------------------------------- */
#define MAX_NAMES 256
static struct { char name[48]; unsigned long calls; unsigned long fail_at; int fail_code; } counts[MAX_NAMES];
static int ncounts;

static int slot(const char *fn) {
  for (int i = 0; i < ncounts; i++)
    if (!strcmp(counts[i].name, fn)) return i;
  if (ncounts == MAX_NAMES) return -1;
  snprintf(counts[ncounts].name, sizeof counts[ncounts].name, "%s", fn);
  return ncounts++;
}

/* Count the call; returns the injected error code, or 0. */
static int enter(const char *fn) {
  pthread_mutex_lock(&mu);
  int i = slot(fn), code = 0;
  if (i >= 0) {
    counts[i].calls++;
    if (counts[i].fail_at && counts[i].calls == counts[i].fail_at) code = counts[i].fail_code;
  }
  pthread_mutex_unlock(&mu);
  return code;
}

static CUresult done(const char *fn, CUresult rc, const char *fmt, ...) {
  if (logf) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&mu);
    fprintf(logf, "%ld %s %s -> %d\n", (long)syscall(SYS_gettid), fn, buf, rc);
    fflush(logf);
    pthread_mutex_unlock(&mu);
  }
  return rc;
}

#define BEGIN(fn)                                                                 \
  static const char *const FN = fn;                                                \
  do {                                                                             \
    int inj_ = enter(FN);                                                          \
    if (inj_) return done(FN, inj_, "(injected)");                                 \
  } while (0)
#define NEED_INIT()                                                                \
  do { if (!initialized) return done(FN, CUDA_ERROR_NOT_INITIALIZED, ""); } while (0)

EXPORT unsigned long osh_cuda_standin_calls(const char *name) {
  unsigned long n = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < ncounts; i++)
    if (!strcmp(counts[i].name, name)) n = counts[i].calls;
  pthread_mutex_unlock(&mu);
  return n;
}
EXPORT const char osh_cuda_standin_marker[] = "offload_shim CUDA driver stand-in (no GPU)";

static void parse_fail(const char *spec) {
  char *dup = strdup(spec), *save = NULL;
  for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    char name[48];
    unsigned long n;
    int code;
    if (sscanf(tok, "%47[^:]:%lu:%d", name, &n, &code) == 3) {
      int i = slot(name);
      if (i >= 0) { counts[i].fail_at = n; counts[i].fail_code = code; }
    }
  }
  free(dup);
}

/* ---- contexts ------------------------------------------------------------------------ */
static CUcontext current(void) { return depth ? stack[depth - 1] : NULL; }

static int valid_ctx(CUcontext c) { return c && c->magic == MAGIC; }

/* The current context, or the error a call that needs one gets. */
static CUresult need_ctx(CUcontext *out) {
  CUcontext c = current();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (!c->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (out) *out = c;
  return CUDA_SUCCESS;
}

static void drop_allocs_of(CUcontext c) {     /* with mu held */
  size_t j = 0;
  for (size_t i = 0; i < nallocs; i++) {
    if (allocs[i].ctx == c) {
      if (allocs[i].kind == 0 || allocs[i].kind == 2) used[c->dev] -= allocs[i].n;
      free((void *)allocs[i].p);
    } else {
      allocs[j++] = allocs[i];
    }
  }
  nallocs = j;
}

/* ---- allocation table ---------------------------------------------------------------- */
static void add_alloc(uintptr_t p, size_t n, CUcontext c, int kind) {   /* with mu held */
  if (nallocs == capallocs) {
    capallocs = capallocs ? 2 * capallocs : 64;
    allocs = realloc(allocs, capallocs * sizeof *allocs);
  }
  allocs[nallocs++] = (struct alloc){p, n, c, kind};
}

static long find_alloc(uintptr_t p, size_t n, int base_only) {   /* with mu held; -1 if none */
  for (size_t i = 0; i < nallocs; i++) {
    struct alloc *a = &allocs[i];
    if (base_only ? p == a->p : (p >= a->p && p + n <= a->p + a->n && p + n >= p)) return (long)i;
  }
  return -1;
}

static CUresult check_dev_range(CUdeviceptr d, size_t n) {
  pthread_mutex_lock(&mu);
  long i = find_alloc((uintptr_t)d, n, 0);
  pthread_mutex_unlock(&mu);
  return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ---- init, devices ----------------------------------------------------------------------- */
EXPORT CUresult cuInit(unsigned flags) {
  BEGIN("cuInit");
  pthread_mutex_lock(&mu);
  if (!initialized) {
    const char *s;
    if ((s = getenv("OSH_CUDA_STANDIN_DEVICES"))) ndev = atoi(s);
    if (ndev < 0) ndev = 0;
    if (ndev > MAX_DEV) ndev = MAX_DEV;
    if ((s = getenv("OSH_CUDA_STANDIN_MEM"))) capacity = strtoull(s, NULL, 0);
    if ((s = getenv("OSH_CUDA_STANDIN_LOG")) && *s) logf = fopen(s, "a");
    if ((s = getenv("OSH_CUDA_STANDIN_FAIL"))) parse_fail(s);
    pagesz = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < MAX_DEV; i++)
      primary[i] = (struct osh_ctx){MAGIC, i, 1, 0, 0, 0, {0}, next_ctx_id++};
    initialized = 1;
  }
  pthread_mutex_unlock(&mu);
  if (flags) return done(FN, CUDA_ERROR_INVALID_VALUE, "(%u)", flags);
  return done(FN, ndev ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE, "(0) devices=%d", ndev);
}

EXPORT CUresult cuDriverGetVersion(int *v) {
  BEGIN("cuDriverGetVersion");
  if (!v) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  *v = 13000;
  return done(FN, CUDA_SUCCESS, "%d", *v);
}

EXPORT CUresult cuDeviceGetCount(int *n) {
  BEGIN("cuDeviceGetCount");
  NEED_INIT();
  if (!n) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  *n = ndev;
  return done(FN, CUDA_SUCCESS, "%d", ndev);
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  BEGIN("cuDeviceGet");
  NEED_INIT();
  if (!d) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  if (ordinal < 0 || ordinal >= ndev) return done(FN, CUDA_ERROR_INVALID_DEVICE, "(%d)", ordinal);
  *d = ordinal;
  return done(FN, CUDA_SUCCESS, "(%d)", ordinal);
}

#define DEV_OK(dev) ((dev) >= 0 && (dev) < ndev)

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  BEGIN("cuDeviceGetName");
  NEED_INIT();
  if (!DEV_OK(dev)) return done(FN, CUDA_ERROR_INVALID_DEVICE, "(%d)", dev);
  if (!name || len <= 0) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  snprintf(name, (size_t)len, "%s", osh_cuda_standin_marker);
  return done(FN, CUDA_SUCCESS, "(%d)", dev);
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  BEGIN("cuDeviceTotalMem_v2");
  NEED_INIT();
  if (!DEV_OK(dev)) return done(FN, CUDA_ERROR_INVALID_DEVICE, "(%d)", dev);
  if (!bytes) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  *bytes = capacity;
  return done(FN, CUDA_SUCCESS, "(%d) %zu", dev, capacity);
}

/* the CUDA 3.1 ABI: 32-bit byte count */
EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
  BEGIN("cuDeviceTotalMem");
  NEED_INIT();
  if (!DEV_OK(dev)) return done(FN, CUDA_ERROR_INVALID_DEVICE, "(%d)", dev);
  if (!bytes) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  *bytes = capacity > UINT_MAX ? UINT_MAX : (unsigned)capacity;
  return done(FN, CUDA_SUCCESS, "(%d) %u", dev, *bytes);
}

static int attribute(int a) {
  switch (a) {
  case 1: return 1024;          /* MAX_THREADS_PER_BLOCK */
  case 2: case 3: return 1024;  /* MAX_BLOCK_DIM_X/Y */
  case 4: return 64;            /* MAX_BLOCK_DIM_Z */
  case 5: return INT_MAX;       /* MAX_GRID_DIM_X */
  case 6: case 7: return 65535;
  case 8: return 49152;         /* MAX_SHARED_MEMORY_PER_BLOCK */
  case 9: return 65536;         /* TOTAL_CONSTANT_MEMORY */
  case 10: return 32;           /* WARP_SIZE */
  case 11: return INT_MAX;      /* MAX_PITCH */
  case 12: return 65536;        /* MAX_REGISTERS_PER_BLOCK */
  case 13: return 1980000;      /* CLOCK_RATE (kHz) */
  case 14: return 512;          /* TEXTURE_ALIGNMENT */
  case 15: return 1;            /* GPU_OVERLAP */
  case 16: return 132;          /* MULTIPROCESSOR_COUNT */
  case 19: return 1;            /* CAN_MAP_HOST_MEMORY */
  case 31: return 1;            /* CONCURRENT_KERNELS */
  case 36: return 3201000;      /* MEMORY_CLOCK_RATE */
  case 37: return 6144;         /* GLOBAL_MEMORY_BUS_WIDTH */
  case 38: return 62914560;     /* L2_CACHE_SIZE */
  case 39: return 2048;         /* MAX_THREADS_PER_MULTIPROCESSOR */
  case 40: return 3;            /* ASYNC_ENGINE_COUNT */
  case 41: return 1;            /* UNIFIED_ADDRESSING */
  case 75: return 9;            /* COMPUTE_CAPABILITY_MAJOR */
  case 76: return 0;            /* COMPUTE_CAPABILITY_MINOR */
  case 81: return 233472;       /* MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
  case 82: return 65536;        /* MAX_REGISTERS_PER_MULTIPROCESSOR */
  case 83: return 1;            /* MANAGED_MEMORY */
  default: return 0;
  }
}

EXPORT CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev) {
  BEGIN("cuDeviceGetAttribute");
  NEED_INIT();
  if (!DEV_OK(dev)) return done(FN, CUDA_ERROR_INVALID_DEVICE, "(%d)", dev);
  if (!pi || attrib <= 0 || attrib > 200) return done(FN, CUDA_ERROR_INVALID_VALUE, "(%d)", attrib);
  *pi = attribute(attrib);
  return done(FN, CUDA_SUCCESS, "(%d, dev %d) %d", attrib, dev, *pi);
}

EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice a, CUdevice b) {
  BEGIN("cuDeviceCanAccessPeer");
  NEED_INIT();
  if (!can || !DEV_OK(a) || !DEV_OK(b)) return done(FN, CUDA_ERROR_INVALID_DEVICE, "");
  *can = 0;
  return done(FN, CUDA_SUCCESS, "(%d, %d) 0", a, b);
}

/* ---- primary contexts ---------------------------------------------------------------------- */
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  BEGIN("cuDevicePrimaryCtxRetain");
  NEED_INIT();
  if (!DEV_OK(dev)) return done(FN, CUDA_ERROR_INVALID_DEVICE, "(%d)", dev);
  if (!pctx) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  pthread_mutex_lock(&mu);
  primary[dev].retains++;
  primary[dev].alive = 1;
  int n = primary[dev].retains;
  pthread_mutex_unlock(&mu);
  *pctx = &primary[dev];
  return done(FN, CUDA_SUCCESS, "(%d) ctx#%d retains=%d", dev, primary[dev].id, n);
}

static CUresult primary_release(const char *fn, CUdevice dev) {
  if (!DEV_OK(dev)) return done(fn, CUDA_ERROR_INVALID_DEVICE, "(%d)", dev);
  pthread_mutex_lock(&mu);
  if (primary[dev].retains <= 0) {
    pthread_mutex_unlock(&mu);
    return done(fn, CUDA_ERROR_INVALID_CONTEXT, "(%d) not retained", dev);
  }
  int n = --primary[dev].retains;
  if (!n) {                       /* deactivated: its resources go, handles stay current */
    primary[dev].alive = 0;
    drop_allocs_of(&primary[dev]);
  }
  pthread_mutex_unlock(&mu);
  return done(fn, CUDA_SUCCESS, "(%d) retains=%d%s", dev, n, n ? "" : " (inactive)");
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  BEGIN("cuDevicePrimaryCtxRelease_v2");
  NEED_INIT();
  return primary_release(FN, dev);
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  BEGIN("cuDevicePrimaryCtxRelease");
  NEED_INIT();
  return primary_release(FN, dev);
}

EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  BEGIN("cuDevicePrimaryCtxReset_v2");
  NEED_INIT();
  if (!DEV_OK(dev)) return done(FN, CUDA_ERROR_INVALID_DEVICE, "(%d)", dev);
  pthread_mutex_lock(&mu);
  primary[dev].alive = primary[dev].retains > 0;
  drop_allocs_of(&primary[dev]);
  pthread_mutex_unlock(&mu);
  return done(FN, CUDA_SUCCESS, "(%d)", dev);
}

EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned *flags, int *active) {
  BEGIN("cuDevicePrimaryCtxGetState");
  NEED_INIT();
  if (!DEV_OK(dev)) return done(FN, CUDA_ERROR_INVALID_DEVICE, "(%d)", dev);
  if (!flags || !active) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  *flags = primary[dev].flags;
  *active = primary[dev].retains > 0;
  return done(FN, CUDA_SUCCESS, "(%d) flags=%u active=%d", dev, *flags, *active);
}

static CUresult primary_set_flags(const char *fn, CUdevice dev, unsigned flags) {
  if (!DEV_OK(dev)) return done(fn, CUDA_ERROR_INVALID_DEVICE, "(%d)", dev);
  primary[dev].flags = flags;
  return done(fn, CUDA_SUCCESS, "(%d, %u)", dev, flags);
}

EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned flags) {
  BEGIN("cuDevicePrimaryCtxSetFlags_v2");
  NEED_INIT();
  return primary_set_flags(FN, dev, flags);
}

EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned flags) {
  BEGIN("cuDevicePrimaryCtxSetFlags");
  NEED_INIT();
  return primary_set_flags(FN, dev, flags);
}

/* ---- context stack ------------------------------------------------------------------------- */
static int cid(CUcontext c) { return valid_ctx(c) ? c->id : 0; }

EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) {
  BEGIN("cuCtxGetCurrent");
  NEED_INIT();
  if (!pctx) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  *pctx = current();
  return done(FN, CUDA_SUCCESS, "ctx#%d%s", cid(*pctx),
              *pctx && !(*pctx)->alive ? " (destroyed)" : "");
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  BEGIN("cuCtxSetCurrent");
  NEED_INIT();
  if (ctx && !valid_ctx(ctx)) return done(FN, CUDA_ERROR_INVALID_CONTEXT, "(bad handle)");
  if (ctx && !ctx->primary && !ctx->alive)
    return done(FN, CUDA_ERROR_INVALID_CONTEXT, "(ctx#%d destroyed)", ctx->id);
  if (!ctx) {
    if (depth) depth--;
  } else if (depth) {
    stack[depth - 1] = ctx;
  } else {
    stack[depth++] = ctx;
  }
  return done(FN, CUDA_SUCCESS, "(ctx#%d) depth=%d", cid(ctx), depth);
}

EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  BEGIN("cuCtxPushCurrent_v2");
  NEED_INIT();
  if (!valid_ctx(ctx)) return done(FN, CUDA_ERROR_INVALID_CONTEXT, "(bad handle)");
  if (!ctx->primary && !ctx->alive) return done(FN, CUDA_ERROR_INVALID_CONTEXT, "(destroyed)");
  if (depth == (int)(sizeof stack / sizeof stack[0]))
    return done(FN, CUDA_ERROR_UNKNOWN, "(stack full)");
  stack[depth++] = ctx;
  return done(FN, CUDA_SUCCESS, "(ctx#%d) depth=%d", ctx->id, depth);
}

EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
  BEGIN("cuCtxPopCurrent_v2");
  NEED_INIT();
  if (!depth) return done(FN, CUDA_ERROR_INVALID_CONTEXT, "(empty stack)");
  CUcontext c = stack[--depth];
  if (pctx) *pctx = c;
  return done(FN, CUDA_SUCCESS, "ctx#%d depth=%d", cid(c), depth);
}

EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned flags, CUdevice dev) {
  BEGIN("cuCtxCreate_v2");
  NEED_INIT();
  if (!pctx) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  if (!DEV_OK(dev)) return done(FN, CUDA_ERROR_INVALID_DEVICE, "(%d)", dev);
  struct osh_ctx *c = calloc(1, sizeof *c);
  pthread_mutex_lock(&mu);
  *c = (struct osh_ctx){MAGIC, dev, 0, 1, 0, flags, {0}, next_ctx_id++};
  pthread_mutex_unlock(&mu);
  if (depth < (int)(sizeof stack / sizeof stack[0])) stack[depth++] = c;
  *pctx = c;
  return done(FN, CUDA_SUCCESS, "(%u, %d) ctx#%d", flags, dev, c->id);
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  BEGIN("cuCtxDestroy_v2");
  NEED_INIT();
  if (!valid_ctx(ctx) || ctx->primary) return done(FN, CUDA_ERROR_INVALID_CONTEXT, "");
  if (!ctx->alive) return done(FN, CUDA_ERROR_CONTEXT_IS_DESTROYED, "(ctx#%d)", ctx->id);
  pthread_mutex_lock(&mu);
  ctx->alive = 0;
  drop_allocs_of(ctx);
  pthread_mutex_unlock(&mu);
  if (depth && stack[depth - 1] == ctx) depth--;
  return done(FN, CUDA_SUCCESS, "(ctx#%d)", ctx->id);
}

EXPORT CUresult cuCtxGetDevice(CUdevice *dev) {
  BEGIN("cuCtxGetDevice");
  NEED_INIT();
  CUcontext c;
  CUresult rc = need_ctx(&c);
  if (rc) return done(FN, rc, "ctx#%d", cid(current()));
  if (!dev) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  *dev = c->dev;
  return done(FN, CUDA_SUCCESS, "ctx#%d dev %d", c->id, c->dev);
}

EXPORT CUresult cuCtxSynchronize(void) {
  BEGIN("cuCtxSynchronize");
  NEED_INIT();
  return done(FN, need_ctx(NULL), "");
}

EXPORT CUresult cuCtxSetLimit(int limit, size_t value) {
  BEGIN("cuCtxSetLimit");
  NEED_INIT();
  CUcontext c;
  CUresult rc = need_ctx(&c);
  if (rc) return done(FN, rc, "");
  if (limit < 0 || limit >= 8) return done(FN, CUDA_ERROR_INVALID_VALUE, "(%d)", limit);
  c->limits[limit] = value;
  return done(FN, CUDA_SUCCESS, "(%d, %zu)", limit, value);
}

EXPORT CUresult cuCtxGetLimit(size_t *value, int limit) {
  BEGIN("cuCtxGetLimit");
  NEED_INIT();
  CUcontext c;
  CUresult rc = need_ctx(&c);
  if (rc) return done(FN, rc, "");
  if (!value || limit < 0 || limit >= 8) return done(FN, CUDA_ERROR_INVALID_VALUE, "(%d)", limit);
  *value = c->limits[limit] ? c->limits[limit] : (limit == 0 ? 1024 : 0);
  return done(FN, CUDA_SUCCESS, "(%d) %zu", limit, *value);
}

EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned flags) {
  BEGIN("cuCtxEnablePeerAccess");
  NEED_INIT();
  (void)peer;
  (void)flags;
  return done(FN, CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "");
}

/* ---- memory ----------------------------------------------------------------------------------- */
static CUresult mem_alloc(const char *fn, CUdeviceptr *dptr, size_t n, int kind) {
  CUcontext c;
  CUresult rc = need_ctx(&c);
  if (rc) return done(fn, rc, "(%zu)", n);
  if (!dptr || !n) return done(fn, CUDA_ERROR_INVALID_VALUE, "(%zu)", n);
  pthread_mutex_lock(&mu);
  if (kind != 1 && (n > capacity || used[c->dev] > capacity - n)) {
    pthread_mutex_unlock(&mu);
    return done(fn, CUDA_ERROR_OUT_OF_MEMORY, "(%zu) used=%zu", n, used[c->dev]);
  }
  void *p = NULL;
  if (posix_memalign(&p, 256, n) != 0 || !p) {
    pthread_mutex_unlock(&mu);
    return done(fn, CUDA_ERROR_OUT_OF_MEMORY, "(%zu) host malloc failed", n);
  }
  if (kind != 1) used[c->dev] += n;
  add_alloc((uintptr_t)p, n, c, kind);
  pthread_mutex_unlock(&mu);
  *dptr = (CUdeviceptr)(uintptr_t)p;
  return done(fn, CUDA_SUCCESS, "(%zu) ctx#%d -> %#llx", n, c->id, *dptr);
}

static CUresult mem_free(const char *fn, uintptr_t p, int host) {
  CUcontext c;
  CUresult rc = need_ctx(&c);
  if (rc) return done(fn, rc, "(%#lx)", (unsigned long)p);
  if (!p) return done(fn, CUDA_SUCCESS, "(0)");
  pthread_mutex_lock(&mu);
  long i = find_alloc(p, 0, 1);
  if (i < 0 || (allocs[i].kind == 1) != host) {
    pthread_mutex_unlock(&mu);
    return done(fn, CUDA_ERROR_INVALID_VALUE, "(%#lx) not allocated", (unsigned long)p);
  }
  struct alloc a = allocs[i];
  allocs[i] = allocs[--nallocs];
  if (a.kind != 1) used[a.ctx->dev] -= a.n;
  pthread_mutex_unlock(&mu);
  free((void *)p);
  return done(fn, CUDA_SUCCESS, "(%#lx) %zu bytes", (unsigned long)p, a.n);
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t n) {
  BEGIN("cuMemAlloc_v2");
  NEED_INIT();
  return mem_alloc(FN, dptr, n, 0);
}

/* the CUDA 3.1 ABI (32-bit pointer and size) is not provided: it fails loudly */
EXPORT CUresult cuMemAlloc(unsigned int *dptr, unsigned int n) {
  BEGIN("cuMemAlloc");
  (void)dptr;
  return done(FN, CUDA_ERROR_NOT_SUPPORTED, "(%u) v1 ABI", n);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  BEGIN("cuMemFree_v2");
  NEED_INIT();
  return mem_free(FN, (uintptr_t)p, 0);
}

EXPORT CUresult cuMemFree(unsigned int p) {
  BEGIN("cuMemFree");
  return done(FN, CUDA_ERROR_NOT_SUPPORTED, "(%#x) v1 ABI", p);
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t n, CUstream s) {   /* stream order: at once */
  BEGIN("cuMemAllocAsync");
  NEED_INIT();
  (void)s;
  return mem_alloc(FN, dptr, n, 0);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
  BEGIN("cuMemFreeAsync");
  NEED_INIT();
  (void)s;
  return mem_free(FN, (uintptr_t)p, 0);
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t n, unsigned flags) {
  BEGIN("cuMemAllocManaged");
  NEED_INIT();
  (void)flags;
  return mem_alloc(FN, dptr, n, 2);
}

EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t n) {
  BEGIN("cuMemAllocHost_v2");
  NEED_INIT();
  return mem_alloc(FN, (CUdeviceptr *)pp, n, 1);
}

EXPORT CUresult cuMemAllocHost(void **pp, unsigned int n) {     /* CUDA 3.1 ABI: 32-bit size */
  BEGIN("cuMemAllocHost");
  NEED_INIT();
  return mem_alloc(FN, (CUdeviceptr *)pp, n, 1);
}

EXPORT CUresult cuMemFreeHost(void *p) {
  BEGIN("cuMemFreeHost");
  NEED_INIT();
  return mem_free(FN, (uintptr_t)p, 1);
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total) {
  BEGIN("cuMemGetInfo_v2");
  NEED_INIT();
  CUcontext c;
  CUresult rc = need_ctx(&c);
  if (rc) return done(FN, rc, "");
  if (!free_b || !total) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  *total = capacity;
  *free_b = capacity - used[c->dev];
  return done(FN, CUDA_SUCCESS, "free=%zu total=%zu", *free_b, *total);
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr d) {
  BEGIN("cuMemGetAddressRange_v2");
  NEED_INIT();
  CUresult rc = need_ctx(NULL);
  if (rc) return done(FN, rc, "");
  pthread_mutex_lock(&mu);
  long i = find_alloc((uintptr_t)d, 1, 0);
  struct alloc a = i >= 0 ? allocs[i] : (struct alloc){0};
  pthread_mutex_unlock(&mu);
  if (i < 0) return done(FN, CUDA_ERROR_NOT_FOUND, "(%#llx)", d);
  if (base) *base = a.p;
  if (size) *size = a.n;
  return done(FN, CUDA_SUCCESS, "(%#llx) base %#lx size %zu", d, (unsigned long)a.p, a.n);
}

EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags) {
  BEGIN("cuMemHostGetDevicePointer_v2");
  NEED_INIT();
  (void)flags;
  if (!d) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  *d = (CUdeviceptr)(uintptr_t)p;
  return done(FN, CUDA_SUCCESS, "(%p)", p);
}

/* copies: the device side must lie in a live allocation */
static CUresult copy(const char *fn, void *dst, const void *src, size_t n, CUdeviceptr dcheck,
                     CUdeviceptr scheck) {
  CUresult rc = need_ctx(NULL);
  if (rc) return done(fn, rc, "(%zu)", n);
  if (dcheck && check_dev_range(dcheck, n)) return done(fn, CUDA_ERROR_INVALID_VALUE, "(dst %p, %zu)", dst, n);
  if (scheck && check_dev_range(scheck, n)) return done(fn, CUDA_ERROR_INVALID_VALUE, "(src %p, %zu)", src, n);
  if (n) memmove(dst, src, n);
  return done(fn, CUDA_SUCCESS, "(%p <- %p, %zu)", dst, src, n);
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) {
  BEGIN("cuMemcpyHtoD_v2");
  NEED_INIT();
  return copy(FN, (void *)(uintptr_t)d, h, n, d, 0);
}
EXPORT CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) {
  BEGIN("cuMemcpyDtoH_v2");
  NEED_INIT();
  return copy(FN, h, (void *)(uintptr_t)d, n, 0, d);
}
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, CUstream s) {
  BEGIN("cuMemcpyHtoDAsync_v2");
  NEED_INIT();
  (void)s;
  return copy(FN, (void *)(uintptr_t)d, h, n, d, 0);
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, CUstream s) {
  BEGIN("cuMemcpyDtoHAsync_v2");
  NEED_INIT();
  (void)s;
  return copy(FN, h, (void *)(uintptr_t)d, n, 0, d);
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s_, size_t n, CUstream s) {
  BEGIN("cuMemcpyDtoDAsync_v2");
  NEED_INIT();
  (void)s;
  return copy(FN, (void *)(uintptr_t)d, (void *)(uintptr_t)s_, n, d, s_);
}
EXPORT CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s_, size_t n) {      /* unified addressing */
  BEGIN("cuMemcpy");
  NEED_INIT();
  return copy(FN, (void *)(uintptr_t)d, (void *)(uintptr_t)s_, n, 0, 0);
}
EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s_, CUcontext sc,
                                  size_t n, CUstream s) {
  BEGIN("cuMemcpyPeerAsync");
  NEED_INIT();
  (void)dc; (void)sc; (void)s;
  return copy(FN, (void *)(uintptr_t)d, (void *)(uintptr_t)s_, n, d, s_);
}
/* the CUDA 3.1 ABIs (32-bit device pointers) are not provided */
EXPORT CUresult cuMemcpyHtoD(unsigned d, const void *h, unsigned n) { BEGIN("cuMemcpyHtoD"); (void)d; (void)h; (void)n; return done(FN, CUDA_ERROR_NOT_SUPPORTED, "v1 ABI"); }
EXPORT CUresult cuMemcpyDtoH(void *h, unsigned d, unsigned n) { BEGIN("cuMemcpyDtoH"); (void)d; (void)h; (void)n; return done(FN, CUDA_ERROR_NOT_SUPPORTED, "v1 ABI"); }
EXPORT CUresult cuMemcpyHtoDAsync(unsigned d, const void *h, unsigned n, CUstream s) { BEGIN("cuMemcpyHtoDAsync"); (void)d; (void)h; (void)n; (void)s; return done(FN, CUDA_ERROR_NOT_SUPPORTED, "v1 ABI"); }
EXPORT CUresult cuMemcpyDtoHAsync(void *h, unsigned d, unsigned n, CUstream s) { BEGIN("cuMemcpyDtoHAsync"); (void)d; (void)h; (void)n; (void)s; return done(FN, CUDA_ERROR_NOT_SUPPORTED, "v1 ABI"); }
EXPORT CUresult cuMemcpyDtoDAsync(unsigned d, unsigned s_, unsigned n, CUstream s) { BEGIN("cuMemcpyDtoDAsync"); (void)d; (void)s_; (void)n; (void)s; return done(FN, CUDA_ERROR_NOT_SUPPORTED, "v1 ABI"); }

/* ---- page-locked registration (page granular) -------------------------------------------- */
static CUresult host_register(const char *fn, void *p, size_t n, unsigned flags) {
  CUresult rc = need_ctx(NULL);
  if (rc) return done(fn, rc, "(%p, %zu)", p, n);
  if (!p || !n) return done(fn, CUDA_ERROR_INVALID_VALUE, "(%p, %zu)", p, n);
  uintptr_t s = (uintptr_t)p & ~(uintptr_t)(pagesz - 1);
  uintptr_t e = ((uintptr_t)p + n + pagesz - 1) & ~(uintptr_t)(pagesz - 1);
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nregs; i++) {
    if (regs[i].start < e && s < regs[i].end) {
      pthread_mutex_unlock(&mu);
      return done(fn, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                  "(%p, %zu, %u) pages [%#lx, %#lx) overlap [%#lx, %#lx)", p, n, flags,
                  (unsigned long)s, (unsigned long)e, (unsigned long)regs[i].start,
                  (unsigned long)regs[i].end);
    }
  }
  if (nregs == capregs) {
    capregs = capregs ? 2 * capregs : 64;
    regs = realloc(regs, capregs * sizeof *regs);
  }
  regs[nregs++] = (struct reg){(uintptr_t)p, s, e};
  pthread_mutex_unlock(&mu);
  return done(fn, CUDA_SUCCESS, "(%p, %zu, %u) pages [%#lx, %#lx)", p, n, flags,
              (unsigned long)s, (unsigned long)e);
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
  BEGIN("cuMemHostRegister_v2");
  NEED_INIT();
  return host_register(FN, p, n, flags);
}

EXPORT CUresult cuMemHostRegister(void *p, size_t n, unsigned flags) {
  BEGIN("cuMemHostRegister");
  NEED_INIT();
  return host_register(FN, p, n, flags);
}

EXPORT CUresult cuMemHostUnregister(void *p) {
  BEGIN("cuMemHostUnregister");
  NEED_INIT();
  CUresult rc = need_ctx(NULL);
  if (rc) return done(FN, rc, "(%p)", p);
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nregs; i++) {
    if (regs[i].base == (uintptr_t)p) {
      regs[i] = regs[--nregs];
      pthread_mutex_unlock(&mu);
      return done(FN, CUDA_SUCCESS, "(%p)", p);
    }
  }
  pthread_mutex_unlock(&mu);
  return done(FN, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "(%p)", p);
}

EXPORT unsigned long osh_cuda_standin_registered(void) {
  pthread_mutex_lock(&mu);
  unsigned long n = nregs;
  pthread_mutex_unlock(&mu);
  return n;
}

/* ---- streams, events ---------------------------------------------------------------------- */
static struct osh_obj *new_obj(int kind, CUcontext c) {
  struct osh_obj *o = calloc(1, sizeof *o);
  o->magic = MAGIC;
  o->kind = kind;
  o->alive = 1;
  o->ctx = c;
  return o;
}

static int valid_obj(struct osh_obj *o, int kind) {
  return o && o->magic == MAGIC && o->kind == kind && o->alive;
}

EXPORT CUresult cuStreamCreate(CUstream *ps, unsigned flags) {
  BEGIN("cuStreamCreate");
  NEED_INIT();
  CUcontext c;
  CUresult rc = need_ctx(&c);
  if (rc) return done(FN, rc, "");
  if (!ps) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  *ps = new_obj(K_STREAM, c);
  return done(FN, CUDA_SUCCESS, "(%u) %p", flags, (void *)*ps);
}

static CUresult stream_destroy(const char *fn, CUstream s) {
  if (!valid_obj(s, K_STREAM)) return done(fn, CUDA_ERROR_INVALID_HANDLE, "(%p)", (void *)s);
  s->alive = 0;
  return done(fn, CUDA_SUCCESS, "(%p)", (void *)s);
}
EXPORT CUresult cuStreamDestroy_v2(CUstream s) { BEGIN("cuStreamDestroy_v2"); NEED_INIT(); return stream_destroy(FN, s); }
EXPORT CUresult cuStreamDestroy(CUstream s) { BEGIN("cuStreamDestroy"); NEED_INIT(); return stream_destroy(FN, s); }

static CUresult stream_op(const char *fn, CUstream s) {
  if (s && !valid_obj(s, K_STREAM)) return done(fn, CUDA_ERROR_INVALID_HANDLE, "(%p)", (void *)s);
  if (s && !s->ctx->alive) return done(fn, CUDA_ERROR_CONTEXT_IS_DESTROYED, "(%p)", (void *)s);
  if (!s) {
    CUresult rc = need_ctx(NULL);
    if (rc) return done(fn, rc, "(null stream)");
  }
  return done(fn, CUDA_SUCCESS, "(%p)", (void *)s);
}
EXPORT CUresult cuStreamSynchronize(CUstream s) { BEGIN("cuStreamSynchronize"); NEED_INIT(); return stream_op(FN, s); }
EXPORT CUresult cuStreamQuery(CUstream s) { BEGIN("cuStreamQuery"); NEED_INIT(); return stream_op(FN, s); }
EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
  BEGIN("cuStreamWaitEvent");
  NEED_INIT();
  (void)flags;
  if (!valid_obj(e, K_EVENT)) return done(FN, CUDA_ERROR_INVALID_HANDLE, "(event %p)", (void *)e);
  return stream_op(FN, s);
}
EXPORT CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *user, unsigned flags) {
  BEGIN("cuStreamAddCallback");
  NEED_INIT();
  (void)flags;
  CUresult rc = stream_op(FN, s);
  if (!rc && cb) cb(s, CUDA_SUCCESS, user);      /* everything already ran */
  return rc;
}

EXPORT CUresult cuEventCreate(CUevent *pe, unsigned flags) {
  BEGIN("cuEventCreate");
  NEED_INIT();
  CUcontext c;
  CUresult rc = need_ctx(&c);
  if (rc) return done(FN, rc, "");
  if (!pe) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  *pe = new_obj(K_EVENT, c);
  return done(FN, CUDA_SUCCESS, "(%u) %p", flags, (void *)*pe);
}
static CUresult event_destroy(const char *fn, CUevent e) {
  if (!valid_obj(e, K_EVENT)) return done(fn, CUDA_ERROR_INVALID_HANDLE, "(%p)", (void *)e);
  e->alive = 0;
  return done(fn, CUDA_SUCCESS, "(%p)", (void *)e);
}
EXPORT CUresult cuEventDestroy_v2(CUevent e) { BEGIN("cuEventDestroy_v2"); NEED_INIT(); return event_destroy(FN, e); }
EXPORT CUresult cuEventDestroy(CUevent e) { BEGIN("cuEventDestroy"); NEED_INIT(); return event_destroy(FN, e); }
EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
  BEGIN("cuEventRecord");
  NEED_INIT();
  if (!valid_obj(e, K_EVENT)) return done(FN, CUDA_ERROR_INVALID_HANDLE, "(%p)", (void *)e);
  return stream_op(FN, s);
}
static CUresult event_op(const char *fn, CUevent e) {
  if (!valid_obj(e, K_EVENT)) return done(fn, CUDA_ERROR_INVALID_HANDLE, "(%p)", (void *)e);
  return done(fn, CUDA_SUCCESS, "(%p)", (void *)e);
}
EXPORT CUresult cuEventSynchronize(CUevent e) { BEGIN("cuEventSynchronize"); NEED_INIT(); return event_op(FN, e); }
EXPORT CUresult cuEventQuery(CUevent e) { BEGIN("cuEventQuery"); NEED_INIT(); return event_op(FN, e); }
EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
  BEGIN("cuEventElapsedTime");
  NEED_INIT();
  if (!ms || !valid_obj(a, K_EVENT) || !valid_obj(b, K_EVENT))
    return done(FN, CUDA_ERROR_INVALID_HANDLE, "");
  *ms = 0.0f;
  return done(FN, CUDA_SUCCESS, "0.0 (stand-in: no timing)");
}

/* ---- modules, linking, launches ----------------------------------------------------------- */
static size_t image_size(const void *image) {
  const unsigned char *p = image;
  if (!memcmp(p, ELFMAG, SELFMAG) && p[EI_CLASS] == ELFCLASS64) {
    const Elf64_Ehdr *eh = image;
    size_t end = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
    const Elf64_Phdr *ph = (const void *)(p + eh->e_phoff);
    for (int i = 0; eh->e_phoff && i < eh->e_phnum; i++)
      if (ph[i].p_offset + ph[i].p_filesz > end) end = ph[i].p_offset + ph[i].p_filesz;
    return end;
  }
  return strlen(image) + 1;       /* PTX text */
}

/* size of symbol `name` in an ELF image, or 0 */
static size_t elf_symbol_size(const char *img, size_t n, const char *name) {
  const Elf64_Ehdr *eh = (const void *)img;
  if (n < sizeof *eh || memcmp(img, ELFMAG, SELFMAG) || img[EI_CLASS] != ELFCLASS64) return 0;
  if (eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > n) return 0;
  const Elf64_Shdr *sh = (const void *)(img + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
    const Elf64_Shdr *str = &sh[sh[i].sh_link];
    if (sh[i].sh_offset + sh[i].sh_size > n || str->sh_offset + str->sh_size > n) continue;
    const Elf64_Sym *sym = (const void *)(img + sh[i].sh_offset);
    for (size_t k = 0; k < sh[i].sh_size / sizeof *sym; k++)
      if (sym[k].st_name < str->sh_size && !strcmp(img + str->sh_offset + sym[k].st_name, name))
        return sym[k].st_size;
  }
  return 0;
}

static CUresult module_load(const char *fn, CUmodule *pm, const void *image) {
  CUcontext c;
  CUresult rc = need_ctx(&c);
  if (rc) return done(fn, rc, "");
  if (!pm || !image) return done(fn, CUDA_ERROR_INVALID_VALUE, "");
  size_t n = image_size(image);
  struct osh_obj *m = new_obj(K_MODULE, c);
  m->data = malloc(n);
  memcpy(m->data, image, n);
  m->size = n;
  *pm = m;
  return done(fn, CUDA_SUCCESS, "(%zu bytes) %p", n, (void *)m);
}

EXPORT CUresult cuModuleLoadDataEx(CUmodule *pm, const void *image, unsigned nopt, int *opts, void **vals) {
  BEGIN("cuModuleLoadDataEx");
  NEED_INIT();
  (void)nopt; (void)opts; (void)vals;
  return module_load(FN, pm, image);
}
EXPORT CUresult cuModuleLoadData(CUmodule *pm, const void *image) {
  BEGIN("cuModuleLoadData");
  NEED_INIT();
  return module_load(FN, pm, image);
}
EXPORT CUresult cuModuleLoad(CUmodule *pm, const char *path) {
  BEGIN("cuModuleLoad");
  NEED_INIT();
  (void)pm;
  return done(FN, CUDA_ERROR_NOT_SUPPORTED, "(%s)", path ? path : "");
}
EXPORT CUresult cuModuleUnload(CUmodule m) {
  BEGIN("cuModuleUnload");
  NEED_INIT();
  if (!valid_obj(m, K_MODULE)) return done(FN, CUDA_ERROR_INVALID_HANDLE, "(%p)", (void *)m);
  m->alive = 0;
  return done(FN, CUDA_SUCCESS, "(%p)", (void *)m);
}

EXPORT CUresult cuModuleGetFunction(CUfunction *pf, CUmodule m, const char *name) {
  BEGIN("cuModuleGetFunction");
  NEED_INIT();
  if (!valid_obj(m, K_MODULE)) return done(FN, CUDA_ERROR_INVALID_HANDLE, "(%p)", (void *)m);
  if (!pf || !name) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  if (!memmem(m->data, m->size, name, strlen(name))) return done(FN, CUDA_ERROR_NOT_FOUND, "(%s)", name);
  struct osh_obj *f = new_obj(K_FUNCTION, m->ctx);
  f->data = strdup(name);
  f->module = m;
  *pf = f;
  return done(FN, CUDA_SUCCESS, "(%s) %p", name, (void *)f);
}

EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule m, const char *name) {
  BEGIN("cuModuleGetGlobal_v2");
  NEED_INIT();
  if (!valid_obj(m, K_MODULE)) return done(FN, CUDA_ERROR_INVALID_HANDLE, "(%p)", (void *)m);
  if (!name) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  size_t n = elf_symbol_size(m->data, m->size, name);
  if (!n) return done(FN, CUDA_ERROR_NOT_FOUND, "(%s)", name);
  void *p = calloc(1, n);
  pthread_mutex_lock(&mu);
  add_alloc((uintptr_t)p, n, m->ctx, 3);
  pthread_mutex_unlock(&mu);
  if (dptr) *dptr = (CUdeviceptr)(uintptr_t)p;
  if (bytes) *bytes = n;
  return done(FN, CUDA_SUCCESS, "(%s) %p %zu", name, p, n);
}
EXPORT CUresult cuModuleGetGlobal(unsigned *dptr, unsigned *bytes, CUmodule m, const char *name) {
  BEGIN("cuModuleGetGlobal");
  (void)dptr; (void)bytes; (void)m;
  return done(FN, CUDA_ERROR_NOT_SUPPORTED, "(%s) v1 ABI", name ? name : "");
}

EXPORT CUresult cuFuncGetAttribute(int *pi, int attrib, CUfunction f) {
  BEGIN("cuFuncGetAttribute");
  NEED_INIT();
  if (!valid_obj(f, K_FUNCTION) || !pi) return done(FN, CUDA_ERROR_INVALID_HANDLE, "");
  *pi = attrib == 0 ? 1024 : attrib == 4 ? 32 : 0;  /* MAX_THREADS_PER_BLOCK, NUM_REGS */
  return done(FN, CUDA_SUCCESS, "(%d, %s) %d", attrib, f->data, *pi);
}

EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block, CUfunction f, void *cb,
                                                 size_t dyn, int limit) {
  BEGIN("cuOccupancyMaxPotentialBlockSize");
  NEED_INIT();
  (void)cb; (void)dyn; (void)limit;
  if (!valid_obj(f, K_FUNCTION) || !min_grid || !block) return done(FN, CUDA_ERROR_INVALID_HANDLE, "");
  *min_grid = 132 * 2;
  *block = 1024;
  return done(FN, CUDA_SUCCESS, "(%s)", f->data);
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                               void **extra) {
  BEGIN("cuLaunchKernel");
  NEED_INIT();
  (void)params; (void)extra; (void)shmem;
  if (!valid_obj(f, K_FUNCTION)) return done(FN, CUDA_ERROR_INVALID_HANDLE, "(%p)", (void *)f);
  CUresult rc = need_ctx(NULL);
  if (rc) return done(FN, rc, "(%s)", f->data);
  if (s && !valid_obj(s, K_STREAM)) return done(FN, CUDA_ERROR_INVALID_HANDLE, "(stream %p)", (void *)s);
  return done(FN, CUDA_SUCCESS, "(%s, grid %ux%ux%u, block %ux%ux%u) NOT RUN (stand-in)", f->data,
              gx, gy, gz, bx, by, bz);
}

EXPORT CUresult cuLinkCreate_v2(unsigned nopt, int *opts, void **vals, CUlinkState *ps) {
  BEGIN("cuLinkCreate_v2");
  NEED_INIT();
  (void)nopt; (void)opts; (void)vals;
  CUcontext c;
  CUresult rc = need_ctx(&c);
  if (rc) return done(FN, rc, "");
  if (!ps) return done(FN, CUDA_ERROR_INVALID_VALUE, "");
  *ps = new_obj(K_LINK, c);
  return done(FN, CUDA_SUCCESS, "%p", (void *)*ps);
}
EXPORT CUresult cuLinkCreate(unsigned nopt, int *opts, void **vals, CUlinkState *ps) {
  return cuLinkCreate_v2(nopt, opts, vals, ps);
}
EXPORT CUresult cuLinkAddData_v2(CUlinkState st, int type, void *data, size_t n, const char *name,
                                 unsigned nopt, int *opts, void **vals) {
  BEGIN("cuLinkAddData_v2");
  NEED_INIT();
  (void)type; (void)nopt; (void)opts; (void)vals;
  if (!valid_obj(st, K_LINK) || !data) return done(FN, CUDA_ERROR_INVALID_HANDLE, "");
  st->data = realloc(st->data, st->size + n + 1);
  memcpy(st->data + st->size, data, n);
  st->size += n;
  st->data[st->size] = 0;
  return done(FN, CUDA_SUCCESS, "(%s, %zu bytes)", name ? name : "", n);
}
EXPORT CUresult cuLinkAddData(CUlinkState st, int type, void *data, size_t n, const char *name,
                              unsigned nopt, int *opts, void **vals) {
  return cuLinkAddData_v2(st, type, data, n, name, nopt, opts, vals);
}
EXPORT CUresult cuLinkComplete(CUlinkState st, void **out, size_t *n) {
  BEGIN("cuLinkComplete");
  NEED_INIT();
  if (!valid_obj(st, K_LINK) || !out || !n) return done(FN, CUDA_ERROR_INVALID_HANDLE, "");
  *out = st->data;         /* the "cubin" is the linked PTX text */
  *n = st->size + 1;
  return done(FN, CUDA_SUCCESS, "%zu bytes", st->size);
}
EXPORT CUresult cuLinkDestroy(CUlinkState st) {
  BEGIN("cuLinkDestroy");
  NEED_INIT();
  if (!valid_obj(st, K_LINK)) return done(FN, CUDA_ERROR_INVALID_HANDLE, "");
  st->alive = 0;
  return done(FN, CUDA_SUCCESS, "");
}

/* ---- errors ---------------------------------------------------------------------------------- */
static const char *error_string(CUresult r, int name) {
  switch (r) {
#define E(code, nm, text) case code: return name ? nm : text;
    E(0, "CUDA_SUCCESS", "no error")
    E(1, "CUDA_ERROR_INVALID_VALUE", "invalid argument")
    E(2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory")
    E(3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error")
    E(100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected")
    E(101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal")
    E(200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid")
    E(201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context")
    E(217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices")
    E(400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle")
    E(500, "CUDA_ERROR_NOT_FOUND", "named symbol not found")
    E(709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed")
    E(712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped")
    E(713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region")
    E(801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported")
    E(999, "CUDA_ERROR_UNKNOWN", "unknown error")
#undef E
  default: return NULL;
  }
}

EXPORT CUresult cuGetErrorString(CUresult r, const char **s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  *s = error_string(r, 0);
  return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorName(CUresult r, const char **s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  *s = error_string(r, 1);
  return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- cuGetProcAddress (cuda-python) ---------------------------------------------------------
 * cuda.bindings asks for every entry point by base name and the CUDA version that introduced
 * the ABI it wants ("cuMemAlloc", 3020 -> cuMemAlloc_v2).  An ABI is offered for versions in
 * [since, until); names and versions not listed are CUDA_ERROR_NOT_FOUND, as for a driver
 * that lacks them. */
struct proc { const char *name; int since, until; void *fn; };
#define P(n, s, u, f) {n, s, u, (void *)f}
static const struct proc procs[] = {
  P("cuGetErrorString", 6000, 0, cuGetErrorString), P("cuGetErrorName", 6000, 0, cuGetErrorName),
  P("cuInit", 2000, 0, cuInit), P("cuDriverGetVersion", 2020, 0, cuDriverGetVersion),
  P("cuDeviceGet", 2000, 0, cuDeviceGet), P("cuDeviceGetCount", 2000, 0, cuDeviceGetCount),
  P("cuDeviceGetName", 2000, 0, cuDeviceGetName), P("cuDeviceTotalMem", 3020, 0, cuDeviceTotalMem_v2),
  P("cuDeviceGetAttribute", 2000, 0, cuDeviceGetAttribute),
  P("cuDeviceCanAccessPeer", 4000, 0, cuDeviceCanAccessPeer),
  P("cuDevicePrimaryCtxRetain", 7000, 0, cuDevicePrimaryCtxRetain),
  P("cuDevicePrimaryCtxRelease", 11000, 0, cuDevicePrimaryCtxRelease_v2),
  P("cuDevicePrimaryCtxSetFlags", 11000, 0, cuDevicePrimaryCtxSetFlags_v2),
  P("cuDevicePrimaryCtxGetState", 7000, 0, cuDevicePrimaryCtxGetState),
  P("cuDevicePrimaryCtxReset", 11000, 0, cuDevicePrimaryCtxReset_v2),
  P("cuCtxCreate", 3020, 11040, cuCtxCreate_v2), P("cuCtxDestroy", 4000, 0, cuCtxDestroy_v2),
  P("cuCtxPushCurrent", 4000, 0, cuCtxPushCurrent_v2), P("cuCtxPopCurrent", 4000, 0, cuCtxPopCurrent_v2),
  P("cuCtxSetCurrent", 4000, 0, cuCtxSetCurrent), P("cuCtxGetCurrent", 4000, 0, cuCtxGetCurrent),
  P("cuCtxGetDevice", 2000, 0, cuCtxGetDevice), P("cuCtxSynchronize", 2000, 0, cuCtxSynchronize),
  P("cuCtxSetLimit", 3010, 0, cuCtxSetLimit), P("cuCtxGetLimit", 3010, 0, cuCtxGetLimit),
  P("cuModuleLoadData", 2000, 0, cuModuleLoadData), P("cuModuleLoadDataEx", 2010, 0, cuModuleLoadDataEx),
  P("cuModuleUnload", 2000, 0, cuModuleUnload), P("cuModuleGetFunction", 2000, 0, cuModuleGetFunction),
  P("cuModuleGetGlobal", 3020, 0, cuModuleGetGlobal_v2),
  P("cuMemGetInfo", 3020, 0, cuMemGetInfo_v2), P("cuMemAlloc", 3020, 0, cuMemAlloc_v2),
  P("cuMemFree", 3020, 0, cuMemFree_v2), P("cuMemGetAddressRange", 3020, 0, cuMemGetAddressRange_v2),
  P("cuMemAllocHost", 3020, 0, cuMemAllocHost_v2), P("cuMemFreeHost", 2000, 0, cuMemFreeHost),
  P("cuMemAllocManaged", 6000, 0, cuMemAllocManaged),
  P("cuMemAllocAsync", 11020, 0, cuMemAllocAsync), P("cuMemFreeAsync", 11020, 0, cuMemFreeAsync),
  P("cuMemHostGetDevicePointer", 3020, 0, cuMemHostGetDevicePointer_v2),
  P("cuMemHostRegister", 6050, 0, cuMemHostRegister_v2), P("cuMemHostUnregister", 4000, 0, cuMemHostUnregister),
  P("cuMemcpy", 4000, 0, cuMemcpy), P("cuMemcpyHtoD", 3020, 0, cuMemcpyHtoD_v2),
  P("cuMemcpyDtoH", 3020, 0, cuMemcpyDtoH_v2), P("cuMemcpyHtoDAsync", 3020, 0, cuMemcpyHtoDAsync_v2),
  P("cuMemcpyDtoHAsync", 3020, 0, cuMemcpyDtoHAsync_v2), P("cuMemcpyDtoDAsync", 3020, 0, cuMemcpyDtoDAsync_v2),
  P("cuStreamCreate", 2000, 0, cuStreamCreate), P("cuStreamDestroy", 4000, 0, cuStreamDestroy_v2),
  P("cuStreamSynchronize", 2000, 0, cuStreamSynchronize), P("cuStreamQuery", 2000, 0, cuStreamQuery),
  P("cuStreamWaitEvent", 3020, 0, cuStreamWaitEvent), P("cuStreamAddCallback", 5000, 0, cuStreamAddCallback),
  P("cuEventCreate", 2000, 0, cuEventCreate), P("cuEventRecord", 2000, 0, cuEventRecord),
  P("cuEventQuery", 2000, 0, cuEventQuery), P("cuEventSynchronize", 2000, 0, cuEventSynchronize),
  P("cuEventDestroy", 4000, 0, cuEventDestroy_v2), P("cuEventElapsedTime", 2000, 12080, cuEventElapsedTime),
  P("cuFuncGetAttribute", 2020, 0, cuFuncGetAttribute), P("cuLaunchKernel", 4000, 0, cuLaunchKernel),
  P("cuLinkCreate", 6050, 0, cuLinkCreate_v2), P("cuLinkAddData", 6050, 0, cuLinkAddData_v2),
  P("cuLinkComplete", 5050, 0, cuLinkComplete), P("cuLinkDestroy", 5050, 0, cuLinkDestroy),
};
#undef P

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                                    int *status) {
  (void)flags;
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = NULL;
  for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
    const struct proc *p = &procs[i];
    if (!strcmp(p->name, symbol) && version >= p->since && (!p->until || version < p->until)) {
      *pfn = p->fn;
      if (status) *status = 0;                 /* CU_GET_PROC_ADDRESS_SUCCESS */
      return CUDA_SUCCESS;
    }
  }
  if (status) *status = 1;                     /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
  return CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
