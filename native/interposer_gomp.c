/* libosh_interposer.so, libgomp side: GCC's offload entry points and omp_* API routines.
 *
 * A program or library built by gcc -fopenmp -foffload=... imports from libgomp.so.1
 * (objdump -T, GCC 12): GOMP_offload_register_ver / _unregister_ver, GOMP_target_ext,
 * GOMP_target_data_ext, GOMP_target_update_ext, GOMP_target_enter_exit_data (GOMP_4.5),
 * GOMP_target_end_data (GOMP_4.0), and the device API at its own version nodes:
 * omp_get_num_devices (OMP_4.0), omp_get_initial_device and omp_target_alloc / free /
 * is_present / memcpy / memcpy_rect / associate_ptr / disassociate_ptr (OMP_4.5),
 * omp_pause_resource (OMP_5.0), omp_get_device_num (OMP_5.0.2).  This file defines exactly
 * those names under those nodes (interposer.map; the omp_* ones through .symver aliases,
 * because interposer.c defines some of the same names for clang under VERS1.0), so the
 * references bind here when this library is preloaded or loaded RTLD_GLOBAL first.
 * Everything else (GOMP_parallel, GOMP_task, omp_is_initial_device, ...) keeps resolving
 * to libgomp.
 *
 * Python installs a table (struct osh_gomp_callbacks, offload_shim/abi/gomp_interposer.py)
 * with osh_gomp_set_callbacks().  Two modes:
 *
 * - libgomp mode (host_device == 0, or no table): every call goes to the real libgomp
 *   entry point with its own arguments (dlvsym), so libgomp decides, prints and exits
 *   exactly as without offload_shim; Python only hears of each registration and
 *   construct (the decide callback, for the report) first.
 * - host-device mode (host_device == 1): Python's device list is the program's.  For each
 *   construct the decide callback answers OSH_GOMP_DEVICE (Python's host device does it),
 *   OSH_GOMP_FALLBACK (libgomp's host fallback: the real entry point with device
 *   GOMP_DEVICE_HOST_FALLBACK), OSH_GOMP_PASSTHROUGH or OSH_GOMP_FATAL (Python printed
 *   libgomp's gomp_fatal text; exit(1) as gomp_fatal does).  A region on the device runs
 *   through the real GOMP_target_ext with device GOMP_DEVICE_HOST_FALLBACK and a
 *   trampoline as the region function: libgomp then provides what its fallback provides
 *   (depend waits, the target task of nowait, a fresh thread state with the thread_limit
 *   of the construct: gomp_target_fallback); inside, the trampoline asks Python to map
 *   (GCC 12 gomp_map_vars with GOMP_MAP_VARS_TARGET), calls the region's host function with
 *   the device block of argument addresses, and asks Python to unmap.  The construct's
 *   arrays and its GOMP_MAP_FIRSTPRIVATE data are copied into one flat block handed to
 *   libgomp as a single GOMP_MAP_FIRSTPRIVATE item, so libgomp itself keeps the copy alive
 *   for a deferred (nowait) task.  Data constructs with depend clauses run as a GOMP_task
 *   with those clauses (undeferred unless nowait), the others synchronously.  GCC's API
 *   routines go to the api callback.
 *
 * Registrations are recorded here too (osh_gomp_registered), so a table installed later
 * can replay them; each is also forwarded to the real libgomp.  An unregistration that
 * arrives after the embedded runtime of offload-shim run stopped (the executable's own
 * destructor runs after the atexit handlers) is handed to
 * offload_shim.interposer.embed.late_gomp_unregister so the report still counts it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interposer_internal.h"

#define OSH_EXPORT __attribute__((visibility("default")))

/* decide / map / api return codes (offload_shim/abi/gomp_interposer.py) */
#define OSH_GOMP_OK 0
#define OSH_GOMP_FALLBACK 1
#define OSH_GOMP_DEVICE 2
#define OSH_GOMP_PASSTHROUGH 3
#define OSH_GOMP_PASSTHROUGH_DEVICE 4
#define OSH_GOMP_FATAL (-3)

/* GCC 12 include/gomp-constants.h */
#define GOMP_DEVICE_HOST_FALLBACK (-2)
#define GOMP_MAP_FIRSTPRIVATE 12
#define GOMP_TARGET_FLAG_NOWAIT 1
#define GOMP_TASK_FLAG_DEPEND 8

/* construct kinds of the decide and map callbacks */
enum { K_TARGET, K_DATA, K_END_DATA, K_UPDATE, K_ENTER_EXIT };

/* api callback operations */
enum { API_NUM_DEVICES, API_INITIAL_DEVICE, API_DEVICE_NUM, API_ALLOC, API_FREE,
       API_IS_PRESENT, API_MEMCPY, API_MEMCPY_RECT, API_ASSOCIATE, API_DISASSOCIATE,
       API_PAUSE };

typedef int (*osh_gomp_reg_fn)(int32_t unregister, uint32_t version, const void *host_table,
                               int32_t target_type, const void *target_data);
typedef int (*osh_gomp_decide_fn)(int32_t kind, int32_t device, void *fn, uint64_t mapnum,
                                  void **hostaddrs, uint64_t *sizes, uint16_t *kinds,
                                  uint32_t flags, void **depend, void **args);
/* out[0]: a handle for unmap (0: none), out[1]: the device address of the argument block
 * (K_TARGET) */
typedef int (*osh_gomp_map_fn)(int32_t kind, uint64_t mapnum, void **hostaddrs,
                               uint64_t *sizes, uint16_t *kinds, uint32_t flags,
                               uint64_t *out);
typedef int (*osh_gomp_unmap_fn)(uint64_t handle);
typedef int (*osh_gomp_api_fn)(int32_t op, uint64_t *args, int32_t nargs, uint64_t *result);

struct osh_gomp_callbacks {
  uint64_t size;                 /* sizeof(struct osh_gomp_callbacks) */
  int64_t host_device;           /* 1: host-device mode */
  osh_gomp_reg_fn reg;
  osh_gomp_decide_fn decide;
  osh_gomp_map_fn map;
  osh_gomp_unmap_fn unmap;
  osh_gomp_api_fn api;
};

static struct osh_gomp_callbacks gcbs;

/* the callbacks of the installed table, or NULL ones once CPython is finalised (a Python
 * program's libraries run their destructors after that) */
static struct osh_gomp_callbacks live_table(void)
{
  struct osh_gomp_callbacks t = gcbs;
  if (osh_ip_python_gone())
    memset(&t, 0, sizeof t);
  return t;
}
static int gomp_host_device;
static pthread_mutex_t glock = PTHREAD_MUTEX_INITIALIZER;

#define MAX_GREG 256
struct greg { uint64_t version, host_table, target_type, target_data; };
static struct greg gregs[MAX_GREG];
static int num_gregs;

/* ---- control API (called from Python) -------------------------------------------- */
OSH_EXPORT int osh_gomp_set_callbacks(const struct osh_gomp_callbacks *cb)
{
  pthread_mutex_lock(&glock);
  if (!cb) {
    memset(&gcbs, 0, sizeof gcbs);
  } else {
    if (cb->size != sizeof gcbs) {
      pthread_mutex_unlock(&glock);
      return -1;
    }
    gcbs = *cb;
  }
  __atomic_store_n(&gomp_host_device, cb != NULL && cb->host_device != 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&glock);
  return 0;
}

/* Registrations not yet unregistered, oldest first: 4 words each (version, host_table,
 * target_type, target_data) for at most max records; returns the total. */
OSH_EXPORT int osh_gomp_registered(uint64_t *out, int max)
{
  pthread_mutex_lock(&glock);
  int n = num_gregs < max ? num_gregs : max;
  for (int i = 0; i < n && out; i++) {
    out[4 * i] = gregs[i].version;
    out[4 * i + 1] = gregs[i].host_table;
    out[4 * i + 2] = gregs[i].target_type;
    out[4 * i + 3] = gregs[i].target_data;
  }
  int total = num_gregs;
  pthread_mutex_unlock(&glock);
  return total;
}

/* ---- the real libgomp ------------------------------------------------------------ */
/* NAME@VER of the libgomp.so.1 already mapped (a GCC library loaded RTLD_LOCAL has it in
 * its local scope only, where RTLD_NEXT cannot see it).  The handle is kept. */
static void *real_gomp(const char *name, const char *ver)
{
  void *h = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!h)
    h = dlopen("libgomp.so.1", RTLD_LAZY);
  return h ? dlvsym(h, name, ver) : NULL;
}

/* An API routine: what the caller would have bound to without this library (the next
 * definition in the global scope, e.g. libgomp in a preloaded program), else libgomp's. */
static void *real_api(const char *name, const char *ver)
{
  void *p = dlvsym(RTLD_NEXT, name, ver);
  return p ? p : real_gomp(name, ver);
}

#define REAL(var, type, lookup, name, ver)                                                 \
  static type var;                                                                         \
  if (!__atomic_load_n(&var, __ATOMIC_ACQUIRE))                                            \
    __atomic_store_n(&var, (type)lookup(name, ver), __ATOMIC_RELEASE);

/* gomp_fatal: Python printed "\nlibgomp: MESSAGE\n"; exit(EXIT_FAILURE) (GCC 12 error.c) */
static void gomp_exit_fatal(int rc)
{
  if (rc != OSH_GOMP_FATAL)
    fputs("\nlibgomp: offload_shim: the Python runtime failed (see above)\n", stderr);
  fflush(stdout);
  fflush(stderr);
  exit(EXIT_FAILURE);
}

/* ---- registration ------------------------------------------------------------------ */
typedef void (*gomp_reg_fn)(unsigned, const void *, int, const void *);

OSH_EXPORT void GOMP_offload_register_ver(unsigned version, const void *host_table,
                                          int target_type, const void *target_data)
{
  osh_ip_count(C_GOMP_REG);
  osh_ip_ensure_python_gomp();
  pthread_mutex_lock(&glock);
  if (num_gregs < MAX_GREG)
    gregs[num_gregs++] = (struct greg){version, (uintptr_t)host_table,
                                       (uint64_t)(int64_t)target_type,
                                       (uintptr_t)target_data};
  osh_gomp_reg_fn f = live_table().reg;
  pthread_mutex_unlock(&glock);
  if (f) {
    int rc = OSH_IP_CB(f(0, version, host_table, target_type, target_data));
    if (rc == OSH_GOMP_FATAL)
      gomp_exit_fatal(rc);
  }
  REAL(real, gomp_reg_fn, real_gomp, "GOMP_offload_register_ver", "GOMP_4.5")
  if (real)
    real(version, host_table, target_type, target_data);
}

OSH_EXPORT void GOMP_offload_unregister_ver(unsigned version, const void *host_table,
                                            int target_type, const void *target_data)
{
  osh_ip_count(C_GOMP_UNREG);
  pthread_mutex_lock(&glock);
  for (int i = 0; i < num_gregs; i++)
    if (gregs[i].host_table == (uintptr_t)host_table
        && gregs[i].target_data == (uintptr_t)target_data) {
      memmove(&gregs[i], &gregs[i + 1], (size_t)(num_gregs - i - 1) * sizeof gregs[0]);
      num_gregs--;
      break;
    }
  osh_gomp_reg_fn f = live_table().reg;
  pthread_mutex_unlock(&glock);
  if (f) {
    int rc = OSH_IP_CB(f(1, version, host_table, target_type, target_data));
    if (rc == OSH_GOMP_FATAL)
      gomp_exit_fatal(rc);
  } else if (osh_ip_python_stopped()) {
    /* the executable's destructor, after embed.stop() wrote the report */
    char code[256];
    snprintf(code, sizeof code,
             "import offload_shim.interposer.embed as _osh_e\n"
             "_osh_e.late_gomp_unregister(%u, %llu, %d, %llu)\n",
             version, (unsigned long long)(uintptr_t)host_table, target_type,
             (unsigned long long)(uintptr_t)target_data);
    osh_ip_run_python(code);
  }
  REAL(real, gomp_reg_fn, real_gomp, "GOMP_offload_unregister_ver", "GOMP_4.5")
  if (real)
    real(version, host_table, target_type, target_data);
}

/* ---- constructs ------------------------------------------------------------------ */
static int gomp_decide(int kind, int device, void (*fn)(void *), size_t mapnum,
                       void **hostaddrs, size_t *sizes, unsigned short *kinds, unsigned flags,
                       void **depend, void **args)
{
  osh_ip_count(kind == K_TARGET ? C_GOMP_TARGET : C_GOMP_DATA);
  osh_ip_ensure_python_gomp();
  osh_gomp_decide_fn f = live_table().decide;
  int rc = f ? OSH_IP_CB(f(kind, device, (void *)fn, mapnum, hostaddrs, (uint64_t *)sizes,
                           (uint16_t *)kinds, flags, depend, args))
             : OSH_GOMP_PASSTHROUGH;
  if (rc == OSH_GOMP_FATAL)
    gomp_exit_fatal(rc);
  if (rc == OSH_GOMP_DEVICE && !(__atomic_load_n(&gomp_host_device, __ATOMIC_ACQUIRE)
                                 && gcbs.map && gcbs.unmap))
    rc = OSH_GOMP_FALLBACK;               /* table removed meanwhile */
  if (rc == OSH_GOMP_DEVICE)
    osh_ip_count(C_GOMP_DEVICE);
  else if (rc != OSH_GOMP_PASSTHROUGH_DEVICE)
    osh_ip_count(C_GOMP_FALLBACK);
  if (rc != OSH_GOMP_DEVICE && rc != OSH_GOMP_FALLBACK)
    rc = OSH_GOMP_PASSTHROUGH;
  return rc;
}

/* One construct's arrays and GOMP_MAP_FIRSTPRIVATE data in one position-independent
 * block: header, hostaddrs[n], sizes[n], fpoff[n] (offset of the private copy of item i
 * from the block start, 0 = none), kinds[n] (padded to 8), then the copies, each at its
 * own alignment relative to the block start. */
struct gomp_ctx {
  uint64_t total;
  void (*fn)(void *);
  uint64_t mapnum;
  int32_t kind;
  uint32_t flags;
};

#define ALIGN_UP(x, a) (((x) + (a) - 1) & ~((uint64_t)(a) - 1))

static void **ctx_hostaddrs(struct gomp_ctx *c) { return (void **)(c + 1); }
static uint64_t *ctx_sizes(struct gomp_ctx *c) { return (uint64_t *)(c + 1) + c->mapnum; }
static uint64_t *ctx_fpoff(struct gomp_ctx *c) { return (uint64_t *)(c + 1) + 2 * c->mapnum; }
static uint16_t *ctx_kinds(struct gomp_ctx *c)
{
  return (uint16_t *)((uint64_t *)(c + 1) + 3 * c->mapnum);
}

static struct gomp_ctx *ctx_build(int kind, void (*fn)(void *), size_t mapnum,
                                  void **hostaddrs, size_t *sizes, unsigned short *kinds,
                                  unsigned flags, size_t *align_out)
{
  uint64_t off = sizeof(struct gomp_ctx) + 3 * 8 * (uint64_t)mapnum
                 + ALIGN_UP(2 * (uint64_t)mapnum, 8);
  uint64_t align = 16;
  for (size_t i = 0; i < mapnum; i++)
    if ((kinds[i] & 0xff) == GOMP_MAP_FIRSTPRIVATE && hostaddrs[i]) {
      uint64_t a = (uint64_t)1 << (kinds[i] >> 8);
      if (a > align)
        align = a;
      off = ALIGN_UP(off, a) + sizes[i];
    }
  struct gomp_ctx *c = malloc(off ? off : 1);
  if (!c) {
    fputs("\nlibgomp: offload_shim: out of memory\n", stderr);
    exit(EXIT_FAILURE);
  }
  c->total = off;
  c->fn = fn;
  c->mapnum = mapnum;
  c->kind = kind;
  c->flags = flags;
  if (mapnum) {
    memcpy(ctx_hostaddrs(c), hostaddrs, mapnum * sizeof(void *));
    memcpy(ctx_sizes(c), sizes, mapnum * sizeof(uint64_t));
    memcpy(ctx_kinds(c), kinds, mapnum * sizeof(uint16_t));
  }
  uint64_t pos = sizeof(struct gomp_ctx) + 3 * 8 * (uint64_t)mapnum
                 + ALIGN_UP(2 * (uint64_t)mapnum, 8);
  for (size_t i = 0; i < mapnum; i++) {
    ctx_fpoff(c)[i] = 0;
    if ((kinds[i] & 0xff) == GOMP_MAP_FIRSTPRIVATE && hostaddrs[i]) {
      pos = ALIGN_UP(pos, (uint64_t)1 << (kinds[i] >> 8));
      memcpy((char *)c + pos, hostaddrs[i], sizes[i]);
      ctx_fpoff(c)[i] = pos;
      pos += sizes[i];
    }
  }
  *align_out = align;
  return c;
}

/* The block as libgomp copied it: point the firstprivate items at their copies. */
static void **ctx_fix(struct gomp_ctx *c)
{
  void **h = ctx_hostaddrs(c);
  for (uint64_t i = 0; i < c->mapnum; i++)
    if (ctx_fpoff(c)[i])
      h[i] = (char *)c + ctx_fpoff(c)[i];
  return h;
}

static void gomp_map_or_die(int kind, uint64_t mapnum, void **hostaddrs, uint64_t *sizes,
                            uint16_t *kinds, uint32_t flags, uint64_t *out)
{
  osh_gomp_map_fn map = gcbs.map;
  int rc = map ? OSH_IP_CB(map(kind, mapnum, hostaddrs, sizes, kinds, flags, out))
               : OSH_GOMP_FATAL - 1;
  if (rc != OSH_GOMP_OK)
    gomp_exit_fatal(rc);
}

/* The region function libgomp's host fallback calls: map, run, unmap. */
static void gomp_region_trampoline(void *arg)
{
  struct gomp_ctx *c = ((void **)arg)[0];
  void **h = ctx_fix(c);
  if (!live_table().map || !gcbs.unmap) {  /* the Python runtime is gone (exit) */
    c->fn(h);
    return;
  }
  uint64_t out[2] = {0, 0};
  gomp_map_or_die(K_TARGET, c->mapnum, h, ctx_sizes(c), ctx_kinds(c), c->flags, out);
  c->fn((void *)(uintptr_t)out[1]);
  osh_gomp_unmap_fn unmap = gcbs.unmap;
  int rc = unmap ? OSH_IP_CB(unmap(out[0])) : OSH_GOMP_OK;
  if (rc != OSH_GOMP_OK)
    gomp_exit_fatal(rc);
}

typedef void (*gomp_target_ext_fn)(int, void (*)(void *), size_t, void **, size_t *,
                                   unsigned short *, unsigned, void **, void **);

static void gomp_region_on_device(gomp_target_ext_fn real, void (*fn)(void *), size_t mapnum,
                                  void **hostaddrs, size_t *sizes, unsigned short *kinds,
                                  unsigned flags, void **depend, void **args)
{
  size_t align;
  struct gomp_ctx *c = ctx_build(K_TARGET, fn, mapnum, hostaddrs, sizes, kinds, flags, &align);
  void *targs[1] = {c};
  size_t tsizes[1] = {c->total};
  unsigned short tkinds[1] = {(unsigned short)(GOMP_MAP_FIRSTPRIVATE
                                               | (__builtin_ctzll(align) << 8))};
  if (real)
    real(GOMP_DEVICE_HOST_FALLBACK, gomp_region_trampoline, 1, targs, tsizes, tkinds, flags,
         depend, args);
  else
    gomp_region_trampoline(targs);
  free(c);
}

static void gomp_data_trampoline(void *data)
{
  struct gomp_ctx *c = data;
  uint64_t out[2] = {0, 0};
  if (gcbs.map)
    gomp_map_or_die(c->kind, c->mapnum, ctx_hostaddrs(c), ctx_sizes(c), ctx_kinds(c),
                    c->flags, out);
}

typedef void (*gomp_task_fn)(void (*)(void *), void *, void (*)(void *, void *), long, long,
                             bool, unsigned, void **, int, void *);

/* A data construct on the device; with depend clauses as a task with those clauses
 * (GCC 12 GOMP_target_update_ext / GOMP_target_enter_exit_data: wait for them, or a
 * deferred target task under nowait). */
static void gomp_data_on_device(int kind, size_t mapnum, void **hostaddrs, size_t *sizes,
                                unsigned short *kinds, unsigned flags, void **depend)
{
  uint64_t out[2] = {0, 0};
  REAL(task, gomp_task_fn, real_gomp, "GOMP_task", "GOMP_2.0")
  if (!depend || !task) {
    gomp_map_or_die(kind, mapnum, hostaddrs, (uint64_t *)sizes, (uint16_t *)kinds, flags,
                    out);
    return;
  }
  size_t align;
  struct gomp_ctx *c = ctx_build(kind, NULL, mapnum, hostaddrs, sizes, kinds, flags, &align);
  task(gomp_data_trampoline, c, NULL, (long)c->total, 8,
       (flags & GOMP_TARGET_FLAG_NOWAIT) != 0, GOMP_TASK_FLAG_DEPEND, depend, 0, NULL);
  free(c);
}

OSH_EXPORT void GOMP_target_ext(int device, void (*fn)(void *), size_t mapnum,
                                void **hostaddrs, size_t *sizes, unsigned short *kinds,
                                unsigned flags, void **depend, void **args)
{
  int rc = gomp_decide(K_TARGET, device, fn, mapnum, hostaddrs, sizes, kinds, flags, depend,
                       args);
  REAL(real, gomp_target_ext_fn, real_gomp, "GOMP_target_ext", "GOMP_4.5")
  if (rc == OSH_GOMP_DEVICE) {
    gomp_region_on_device(real, fn, mapnum, hostaddrs, sizes, kinds, flags, depend, args);
    return;
  }
  if (rc == OSH_GOMP_FALLBACK)
    device = GOMP_DEVICE_HOST_FALLBACK;
  if (real)
    real(device, fn, mapnum, hostaddrs, sizes, kinds, flags, depend, args);
  else
    fn(hostaddrs);                        /* no libgomp: the bare host version */
}

typedef void (*gomp_target_data_ext_fn)(int, size_t, void **, size_t *, unsigned short *);
OSH_EXPORT void GOMP_target_data_ext(int device, size_t mapnum, void **hostaddrs,
                                     size_t *sizes, unsigned short *kinds)
{
  int rc = gomp_decide(K_DATA, device, NULL, mapnum, hostaddrs, sizes, kinds, 0, NULL, NULL);
  if (rc == OSH_GOMP_DEVICE) {
    gomp_data_on_device(K_DATA, mapnum, hostaddrs, sizes, kinds, 0, NULL);
    return;
  }
  if (rc == OSH_GOMP_FALLBACK)
    device = GOMP_DEVICE_HOST_FALLBACK;
  REAL(real, gomp_target_data_ext_fn, real_gomp, "GOMP_target_data_ext", "GOMP_4.5")
  if (real)                               /* keeps libgomp's target-data ICV stack */
    real(device, mapnum, hostaddrs, sizes, kinds);
}

typedef void (*gomp_end_data_fn)(void);
OSH_EXPORT void GOMP_target_end_data(void)
{
  int rc = gomp_decide(K_END_DATA, GOMP_DEVICE_HOST_FALLBACK, NULL, 0, NULL, NULL, NULL, 0,
                       NULL, NULL);
  if (rc == OSH_GOMP_DEVICE) {
    gomp_data_on_device(K_END_DATA, 0, NULL, NULL, NULL, 0, NULL);
    return;
  }
  REAL(real, gomp_end_data_fn, real_gomp, "GOMP_target_end_data", "GOMP_4.0")
  if (real)
    real();
}

typedef void (*gomp_update_ext_fn)(int, size_t, void **, size_t *, unsigned short *,
                                   unsigned, void **);
OSH_EXPORT void GOMP_target_update_ext(int device, size_t mapnum, void **hostaddrs,
                                       size_t *sizes, unsigned short *kinds, unsigned flags,
                                       void **depend)
{
  int rc = gomp_decide(K_UPDATE, device, NULL, mapnum, hostaddrs, sizes, kinds, flags,
                       depend, NULL);
  if (rc == OSH_GOMP_DEVICE) {
    gomp_data_on_device(K_UPDATE, mapnum, hostaddrs, sizes, kinds, flags, depend);
    return;
  }
  if (rc == OSH_GOMP_FALLBACK)
    device = GOMP_DEVICE_HOST_FALLBACK;
  REAL(real, gomp_update_ext_fn, real_gomp, "GOMP_target_update_ext", "GOMP_4.5")
  if (real)
    real(device, mapnum, hostaddrs, sizes, kinds, flags, depend);
}

OSH_EXPORT void GOMP_target_enter_exit_data(int device, size_t mapnum, void **hostaddrs,
                                            size_t *sizes, unsigned short *kinds,
                                            unsigned flags, void **depend)
{
  int rc = gomp_decide(K_ENTER_EXIT, device, NULL, mapnum, hostaddrs, sizes, kinds, flags,
                       depend, NULL);
  if (rc == OSH_GOMP_DEVICE) {
    gomp_data_on_device(K_ENTER_EXIT, mapnum, hostaddrs, sizes, kinds, flags, depend);
    return;
  }
  if (rc == OSH_GOMP_FALLBACK)
    device = GOMP_DEVICE_HOST_FALLBACK;
  REAL(real, gomp_update_ext_fn, real_gomp, "GOMP_target_enter_exit_data", "GOMP_4.5")
  if (real)
    real(device, mapnum, hostaddrs, sizes, kinds, flags, depend);
}

/* ---- GCC's device API routines (OMP_4.0 / OMP_4.5 / OMP_5.0 / OMP_5.0.2) ------------ */
static int api_on(void)
{
  osh_ip_ensure_python_gomp();
  return __atomic_load_n(&gomp_host_device, __ATOMIC_ACQUIRE) && live_table().api;
}

static uint64_t api_call(int op, uint64_t *args, int nargs)
{
  uint64_t result = 0;
  osh_gomp_api_fn f = gcbs.api;
  int rc = f ? OSH_IP_CB(f(op, args, nargs, &result)) : OSH_GOMP_FATAL - 1;
  if (rc != OSH_GOMP_OK)
    gomp_exit_fatal(rc);
  return result;
}

#define U(x) ((uint64_t)(uintptr_t)(x))
#define I(x) ((uint64_t)(int64_t)(x))

typedef int (*int_void_fn)(void);
OSH_EXPORT int oshx_omp_get_num_devices(void)
{
  if (api_on())
    return (int)api_call(API_NUM_DEVICES, NULL, 0);
  REAL(real, int_void_fn, real_api, "omp_get_num_devices", "OMP_4.0")
  return real ? real() : 0;
}
__asm__(".symver oshx_omp_get_num_devices,omp_get_num_devices@OMP_4.0");

OSH_EXPORT int oshx_omp_get_initial_device(void)
{
  if (api_on())
    return (int)api_call(API_INITIAL_DEVICE, NULL, 0);
  REAL(real, int_void_fn, real_api, "omp_get_initial_device", "OMP_4.5")
  return real ? real() : 0;
}
__asm__(".symver oshx_omp_get_initial_device,omp_get_initial_device@OMP_4.5");

OSH_EXPORT int oshx_omp_get_device_num(void)
{
  if (api_on())
    return (int)api_call(API_DEVICE_NUM, NULL, 0);
  REAL(real, int_void_fn, real_api, "omp_get_device_num", "OMP_5.0.2")
  return real ? real() : 0;
}
__asm__(".symver oshx_omp_get_device_num,omp_get_device_num@OMP_5.0.2");

typedef void *(*alloc_fn)(size_t, int);
OSH_EXPORT void *oshx_omp_target_alloc(size_t size, int dev)
{
  if (api_on()) {
    uint64_t a[2] = {size, I(dev)};
    return (void *)(uintptr_t)api_call(API_ALLOC, a, 2);
  }
  REAL(real, alloc_fn, real_api, "omp_target_alloc", "OMP_4.5")
  return real ? real(size, dev) : NULL;
}
__asm__(".symver oshx_omp_target_alloc,omp_target_alloc@OMP_4.5");

typedef void (*free_fn)(void *, int);
OSH_EXPORT void oshx_omp_target_free(void *ptr, int dev)
{
  if (api_on()) {
    uint64_t a[2] = {U(ptr), I(dev)};
    api_call(API_FREE, a, 2);
    return;
  }
  REAL(real, free_fn, real_api, "omp_target_free", "OMP_4.5")
  if (real)
    real(ptr, dev);
}
__asm__(".symver oshx_omp_target_free,omp_target_free@OMP_4.5");

typedef int (*present_fn)(const void *, int);
OSH_EXPORT int oshx_omp_target_is_present(const void *ptr, int dev)
{
  if (api_on()) {
    uint64_t a[2] = {U(ptr), I(dev)};
    return (int)api_call(API_IS_PRESENT, a, 2);
  }
  REAL(real, present_fn, real_api, "omp_target_is_present", "OMP_4.5")
  return real ? real(ptr, dev) : 0;
}
__asm__(".symver oshx_omp_target_is_present,omp_target_is_present@OMP_4.5");

typedef int (*memcpy_fn)(void *, const void *, size_t, size_t, size_t, int, int);
OSH_EXPORT int oshx_omp_target_memcpy(void *dst, const void *src, size_t len, size_t dst_off,
                                      size_t src_off, int dst_dev, int src_dev)
{
  if (api_on()) {
    uint64_t a[7] = {U(dst), U(src), len, dst_off, src_off, I(dst_dev), I(src_dev)};
    return (int)api_call(API_MEMCPY, a, 7);
  }
  REAL(real, memcpy_fn, real_api, "omp_target_memcpy", "OMP_4.5")
  return real ? real(dst, src, len, dst_off, src_off, dst_dev, src_dev) : 22;
}
__asm__(".symver oshx_omp_target_memcpy,omp_target_memcpy@OMP_4.5");

typedef int (*rect_fn)(void *, const void *, size_t, int, const size_t *, const size_t *,
                       const size_t *, const size_t *, const size_t *, int, int);
OSH_EXPORT int oshx_omp_target_memcpy_rect(void *dst, const void *src, size_t esize, int ndims,
                                           const size_t *volume, const size_t *dst_offs,
                                           const size_t *src_offs, const size_t *dst_dims,
                                           const size_t *src_dims, int dst_dev, int src_dev)
{
  if (api_on()) {
    uint64_t a[11] = {U(dst), U(src), esize, I(ndims), U(volume), U(dst_offs), U(src_offs),
                      U(dst_dims), U(src_dims), I(dst_dev), I(src_dev)};
    return (int)api_call(API_MEMCPY_RECT, a, 11);
  }
  REAL(real, rect_fn, real_api, "omp_target_memcpy_rect", "OMP_4.5")
  return real ? real(dst, src, esize, ndims, volume, dst_offs, src_offs, dst_dims, src_dims,
                     dst_dev, src_dev)
              : 22;
}
__asm__(".symver oshx_omp_target_memcpy_rect,omp_target_memcpy_rect@OMP_4.5");

typedef int (*assoc_fn)(const void *, const void *, size_t, size_t, int);
OSH_EXPORT int oshx_omp_target_associate_ptr(const void *host, const void *devp, size_t size,
                                             size_t dev_off, int dev)
{
  if (api_on()) {
    uint64_t a[5] = {U(host), U(devp), size, dev_off, I(dev)};
    return (int)api_call(API_ASSOCIATE, a, 5);
  }
  REAL(real, assoc_fn, real_api, "omp_target_associate_ptr", "OMP_4.5")
  return real ? real(host, devp, size, dev_off, dev) : 22;
}
__asm__(".symver oshx_omp_target_associate_ptr,omp_target_associate_ptr@OMP_4.5");

typedef int (*disassoc_fn)(const void *, int);
OSH_EXPORT int oshx_omp_target_disassociate_ptr(const void *ptr, int dev)
{
  if (api_on()) {
    uint64_t a[2] = {U(ptr), I(dev)};
    return (int)api_call(API_DISASSOCIATE, a, 2);
  }
  REAL(real, disassoc_fn, real_api, "omp_target_disassociate_ptr", "OMP_4.5")
  return real ? real(ptr, dev) : 22;
}
__asm__(".symver oshx_omp_target_disassociate_ptr,omp_target_disassociate_ptr@OMP_4.5");

typedef int (*pause_fn)(int, int);
OSH_EXPORT int oshx_omp_pause_resource(int kind, int dev)
{
  if (api_on()) {
    uint64_t a[2] = {I(kind), I(dev)};
    return (int)api_call(API_PAUSE, a, 2);
  }
  REAL(real, pause_fn, real_api, "omp_pause_resource", "OMP_5.0")
  return real ? real(kind, dev) : -1;
}
__asm__(".symver oshx_omp_pause_resource,omp_pause_resource@OMP_5.0");
