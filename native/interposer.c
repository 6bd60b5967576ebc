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
 * osh_interposer_set_callbacks() (ctypes CFUNCTYPE callbacks; offload_shim/interposer/).
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
 * GCC (libgomp) entry points (GOMP_offload_register_ver, GOMP_target_ext & co., and
 * GCC's omp_* API routines at their OMP_4.x version nodes) live in interposer_gomp.c;
 * the two files share the counters, the embedded CPython and the GIL helpers through
 * interposer_internal.h.  The routines libomptarget 19.1 / 22.1 export beyond 16's
 * (asynchronous copies as libomp tasks, device UIDs, interop, ...) live in
 * interposer_api.c and reach Python through this file's generic API callback.
 *
 * offload-shim run: when OFFLOAD_SHIM_EMBED=1 (set by the run command together with
 * LD_PRELOAD) the first entry point called without a callback table starts an embedded
 * CPython (embed_start below) which installs the table; every callback then runs with
 * the GIL taken by PyGILState_Ensure/Release.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "interposer_frame.h"
#include "interposer_internal.h"

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
/* kind: TargetAllocTy (0 device, 1 host, 2 shared, 3 default = omp_target_alloc) */
typedef int (*osh_cb_alloc)(uint64_t size, int32_t dev, int32_t kind, void **out);
typedef int (*osh_cb_free)(void *ptr, int32_t dev, int32_t kind);
typedef int (*osh_cb_memcpy)(void *dst, const void *src, uint64_t len, uint64_t dst_off,
                             uint64_t src_off, int32_t dst_dev, int32_t src_dev);
typedef int (*osh_cb_present)(const void *ptr, int32_t dev);      /* returns 0/1 */
typedef int (*osh_cb_num_devices)(void);
/* One construct, described in a frame (struct osh_frame below); same return protocol as
 * target_kernel / target_data.  NULL: those two are called instead. */
typedef int (*osh_cb_construct)(void *frame);
/* The other API routines of libomptarget 16 (api.cpp / interface.cpp): `which` is one
 * of OSH_API_*, args[0..nargs) their arguments as 64-bit values, *result the value
 * the routine returns (pointers, ints).  Returns 0, -1 or OSH_CB_FATAL. */
typedef int (*osh_cb_api)(int32_t which, const uint64_t *args, int32_t nargs,
                          uint64_t *result);
enum { OSH_API_ASSOCIATE = 1, OSH_API_DISASSOCIATE, OSH_API_MAPPED_PTR, OSH_API_LOCK,
       OSH_API_UNLOCK, OSH_API_PRINT_DEVICE_INFO, OSH_API_SET_INFO_FLAG };
/* OSH_API_* of the routines libomptarget 19.1 / 22.1 added: interposer_internal.h */

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
  osh_cb_construct construct;
  osh_cb_api api;
};

static struct osh_interposer_callbacks cbs;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

#define MAX_REG 256
static void *registered[MAX_REG];
static int num_registered;
static int64_t requires_flags;
/* deferred boot (boot_deferred below) */
static int64_t lazy_requires;             /* the first requires a deferred boot recorded */
static int lazy_requires_seen;            /* ... recorded (kept: later ones compare with it) */
static int lazy_requires_pending;         /* ... not yet delivered to Python */
static uint64_t calls[24];

static void count(int which) { __atomic_fetch_add(&calls[which], 1, __ATOMIC_RELAXED); }
void osh_ip_count(int which) { count(which); }

/* libomptarget 16 FATAL_MESSAGE: the message (printed by Python) then abort(); stdout is
 * not flushed, so what the program printed into a full buffer is lost exactly as there. */
static void fatal_if(int rc)
{
  if (rc == OSH_CB_FATAL) {
    fflush(stderr);
    abort();
  }
}


/* ---- embedded CPython (offload-shim run) ------------------------------------------ */
/* The run command sets OFFLOAD_SHIM_EMBED=1, OFFLOAD_SHIM_LIBPYTHON (the shared
 * libpython3.X.so of the interpreter that runs offload-shim), OFFLOAD_SHIM_PYTHON (that
 * interpreter) and OFFLOAD_SHIM_PYTHONPATH (its sys.path).  libpython is dlopen'ed
 * RTLD_GLOBAL (extension modules such as _ctypes resolve Py* there); nothing links against
 * it, so the interposer stays usable from any Python.
 * offload_shim.interposer.embed.start() builds the Runtime and installs the callbacks; the
 * GIL is then released and every callback takes it (CB below; ctypes' own trampolines do
 * the same).
 *
 * Teardown (offload_shim.interposer.embed.stop()) runs once, at the latest point of the
 * process's exit at which everything it calls is still alive: the runtime lives for the
 * whole process, as libomptarget's does (its plugin manager is deleted by libomptarget's
 * own destructor, rtl.cpp deinit(); images unregistered before exit leave the plugins and
 * devices up).  That point is the first of:
 *
 *   1. this library's own destructor (.fini_array).  glibc's _dl_fini finalises the
 *      executable first, then the preloaded objects, then the executable's DT_NEEDED
 *      libraries and what was dlopen'ed (libpython, the plugins); so the runtime is up
 *      for every atexit handler and C++ static destructor of the program and for the
 *      executable's own unregistration (clang 16: .fini_array), and stops before any
 *      linked library's unregistration (clang 16: its .fini_array; clang 19+:
 *      atexit(unregister) registered in its constructor, which runs before _dl_fini was
 *      registered and so inside _dl_fini -- llvm-project PR #74532 shows the shape) and
 *      before libpython and the plugins are finalised;
 *   2. ... and after every exit handler of the runtime's plugins: the LLVM 16 nextgen
 *      plugin's `Plugin` object (registered when the plugin is first initialised), the
 *      classic plugin's globals (registered when it is loaded).  Registered after
 *      _dl_fini -- by the runtime, or by the program's own libomptarget.so.16
 *      constructor when a host dlopens its first offload library -- such a handler runs
 *      before _dl_fini and would tear the plugin down under the live runtime (with the
 *      real libomptarget the plugins are loaded before main and finalised inside
 *      _dl_fini, after the program).  __cxa_atexit below wraps every exit handler; one
 *      of a plugin's objects is put off until the runtime has stopped.
 *
 * Later unregistrations (the linked libraries', a dlopen'ed library never closed) find no
 * callback table and only update the C bookkeeping; nothing enters Python or a plugin
 * after the stop.  When the program is itself a Python interpreter, start() registers
 * stop() with Python's atexit module (it runs before the interpreter is finalised and
 * uninstalls the callbacks) and nothing here enters Python after that. */
static int cbs_installed;                 /* a Python table is installed */
static int embed_active;                  /* we started CPython */
static int host_is_python;                /* ... inside a program that is a CPython */
static pthread_once_t embed_once = PTHREAD_ONCE_INIT;
static int (*p_gil_ensure)(void);         /* PyGILState_Ensure (PyGILState_STATE = int) */
static void (*p_gil_release)(int);
static int (*p_run)(const char *);        /* PyRun_SimpleString */
static int (*p_is_init)(void);            /* Py_IsInitialized */

/* CPython is still usable: a Python program finalises its interpreter before the C
 * exit handlers run, and nothing may enter it after that (LLVM D120089) */
static int python_alive(void) { return embed_active && p_is_init && p_is_init(); }

/* The GIL around a callback, when this library started CPython (ctypes' trampolines
 * take it themselves otherwise): the PyGILState_STATE, or -1 when none was taken. */
static int gil_take(void)
{
  return __atomic_load_n(&embed_active, __ATOMIC_ACQUIRE) ? p_gil_ensure() : -1;
}
static void gil_drop(int st)
{
  if (st >= 0)
    p_gil_release(st);
}
#define CB(call) ({ int st_ = gil_take(); int r_ = (call); gil_drop(st_); r_; })

static int embed_stopped;                 /* embed_stop ran (CPython stays initialised) */
static int embed_failed;                  /* the boot failed (boot_failed): no stop either */
static __thread int tls_starting;         /* this thread is running embed_start */

static void embed_stop(void)
{
  static int once;
  if (!python_alive() || host_is_python || embed_failed ||
      __atomic_exchange_n(&once, 1, __ATOMIC_ACQ_REL))
    return;
  int st = p_gil_ensure();
  p_run("import offload_shim.interposer.embed as _osh_e\n_osh_e.stop(at_exit=True)\n");
  __atomic_store_n(&embed_stopped, 1, __ATOMIC_RELEASE);
  p_gil_release(st);
}


/* 2. above.  Under offload-shim run every exit handler is registered as run_wrapped(rec)
 * with the same DSO handle (so a dlclose of its object still runs it, and glibc's order is
 * unchanged).  When it runs, a handler of one of the runtime's plugins (Python names them,
 * osh_interposer_note_plugin) stops the runtime first.  Whoever registered it: the LLVM 16
 * nextgen plugin registers its `Plugin` object's destructor when it is first initialised,
 * which may be the program's own libomptarget.so.16 constructor in the middle of main (a
 * host that dlopens its first offload library) as well as the runtime here.  A plugin's
 * handlers run only when the process exits (the runtime keeps every plugin open). */
#define MAX_PLUGINS 32
/* the mapped ranges [lo, hi) of the plugins' objects (their PT_LOAD segments): a handler's
 * DSO handle (&__dso_handle of the object that registered it) is looked up among them
 * without dladdr, which would cost a search per handler at exit (libLLVM alone registers
 * thousands) */
static uintptr_t plugin_lo[MAX_PLUGINS], plugin_hi[MAX_PLUGINS];
static int num_plugins;

struct range_query {
  uintptr_t addr, lo, hi;
};
static int find_range(struct dl_phdr_info *info, size_t size, void *data)
{
  (void)size;
  struct range_query *q = (struct range_query *)data;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD)
      continue;
    uintptr_t b = info->dlpi_addr + ph->p_vaddr, e = b + ph->p_memsz;
    lo = b < lo ? b : lo;
    hi = e > hi ? e : hi;
  }
  if (lo <= q->addr && q->addr < hi) {
    q->lo = lo;
    q->hi = hi;
    return 1;
  }
  return 0;
}

OSH_EXPORT void osh_interposer_note_plugin(const void *addr)
{
  struct range_query q = {(uintptr_t)addr, 0, 0};
  if (!addr || !dl_iterate_phdr(find_range, &q))
    return;
  pthread_mutex_lock(&lock);
  int known = 0;
  for (int i = 0; i < num_plugins; i++)
    known |= plugin_lo[i] == q.lo;
  if (!known && num_plugins < MAX_PLUGINS) {
    plugin_lo[num_plugins] = q.lo;
    plugin_hi[num_plugins] = q.hi;
    __atomic_store_n(&num_plugins, num_plugins + 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&lock);
}

static int is_plugin_object(const void *dso)
{
  int n = __atomic_load_n(&num_plugins, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++)
    if (plugin_lo[i] <= (uintptr_t)dso && (uintptr_t)dso < plugin_hi[i])
      return 1;
  return 0;
}

/* The process has begun to finalise its objects (_dl_fini runs: the executable's
 * destructors, then the preloaded objects' ...): set by the wrapper of _dl_fini that
 * __libc_start_main below registers in its place.  Python asks before an unregistration
 * that would wait for another thread's kernel. */
static int exiting;

struct wrapped_handler {
  void (*fn)(void *);
  void *arg, *dso;
  struct wrapped_handler *next;
};
static struct wrapped_handler *deferred, **deferred_end = &deferred;

typedef int (*cxa_atexit_fn)(void (*)(void *), void *, void *);
static cxa_atexit_fn real_cxa_atexit;
extern void *__dso_handle;
static int wrap_handlers;                 /* OFFLOAD_SHIM_EMBED=1: offload-shim run */
static pthread_once_t cxa_once = PTHREAD_ONCE_INIT;
static void cxa_resolve(void)
{
  real_cxa_atexit = (cxa_atexit_fn)dlvsym(RTLD_NEXT, "__cxa_atexit", "GLIBC_2.2.5");
  if (!real_cxa_atexit)
    real_cxa_atexit = (cxa_atexit_fn)dlsym(RTLD_NEXT, "__cxa_atexit");
  const char *on = getenv("OFFLOAD_SHIM_EMBED");
  wrap_handlers = on && strcmp(on, "1") == 0;
}

static void run_wrapped(void *p)
{
  struct wrapped_handler *w = (struct wrapped_handler *)p;
  if (!__atomic_load_n(&embed_stopped, __ATOMIC_ACQUIRE) && python_alive() &&
      !host_is_python && is_plugin_object(w->dso)) {
    pthread_mutex_lock(&lock);            /* runs after the stop, in this order */
    w->next = NULL;
    *deferred_end = w;
    deferred_end = &w->next;
    pthread_mutex_unlock(&lock);
    return;
  }
  w->fn(w->arg);
  free(w);
}

/* 1. above: after the executable's destructors, before the linked libraries' and the
 * dlopen'ed objects' (nothing to stop when CPython was never started here); then the
 * plugins' exit handlers that came before it, as they would have run */
static int keep_plugins;                  /* their exit handlers must not run */
__attribute__((destructor)) static void interposer_fini(void)
{
  embed_stop();
  pthread_mutex_lock(&lock);
  struct wrapped_handler *w = deferred;
  deferred = NULL;
  deferred_end = &deferred;
  pthread_mutex_unlock(&lock);
  int skip = __atomic_load_n(&keep_plugins, __ATOMIC_ACQUIRE);
  while (w) {
    struct wrapped_handler *next = w->next;
    if (!skip)
      w->fn(w->arg);
    free(w);
    w = next;
  }
}

/* The stop found a plugin call still running (a kernel of another thread, or of the
 * exiting one): the plugins' own exit handlers would tear down (unload the image of) a
 * kernel that is still running; the process's exit releases what they hold. */
OSH_EXPORT void osh_interposer_keep_plugins(void)
{
  __atomic_store_n(&keep_plugins, 1, __ATOMIC_RELEASE);
}

/* glibc's __cxa_atexit (atexit() and C++ static destructors call it), exported at glibc's
 * version GLIBC_2.2.5 (interposer.map) so that the preloaded definition takes the calls */
OSH_EXPORT int osh_cxa_atexit(void (*fn)(void *), void *arg, void *dso) __asm__("__cxa_atexit");
int osh_cxa_atexit(void (*fn)(void *), void *arg, void *dso)
{
  pthread_once(&cxa_once, cxa_resolve);
  if (!real_cxa_atexit)
    return -1;
  if (!wrap_handlers)
    return real_cxa_atexit(fn, arg, dso);
  struct wrapped_handler *w = dso ? malloc(sizeof *w) : NULL;
  int rc;
  if (w) {
    w->fn = fn;
    w->arg = arg;
    w->dso = dso;
    rc = real_cxa_atexit(run_wrapped, w, dso);
    if (rc != 0)
      free(w);
  } else {
    rc = real_cxa_atexit(fn, arg, dso);
  }
  return rc;
}

OSH_EXPORT int osh_interposer_exiting(void) { return __atomic_load_n(&exiting, __ATOMIC_ACQUIRE); }

/* glibc's __libc_start_main (both versions programs call: GLIBC_2.34 since glibc 2.34,
 * GLIBC_2.2.5 before), forwarded with the dynamic linker's finaliser (_dl_fini, which it
 * registers with __cxa_atexit before the executable's constructors run) wrapped, so that
 * `exiting` is set when the objects' destructors begin -- the executable's own
 * unregistration (clang 16: .fini_array) comes first of them. */
typedef int (*main_fn)(int, char **, char **);
typedef int (*start_main_fn)(main_fn, int, char **, void (*)(void), void (*)(void),
                             void (*)(void), void *);
static void (*real_rtld_fini)(void);
static void rtld_fini_wrapper(void)
{
  __atomic_store_n(&exiting, 1, __ATOMIC_RELEASE);
  real_rtld_fini();
}
static int start_main(const char *version, main_fn main, int argc, char **argv,
                      void (*init)(void), void (*fini)(void), void (*rtld_fini)(void),
                      void *stack_end)
{
  start_main_fn real = (start_main_fn)dlvsym(RTLD_NEXT, "__libc_start_main", version);
  if (!real)
    real = (start_main_fn)dlsym(RTLD_NEXT, "__libc_start_main");
  if (rtld_fini) {
    real_rtld_fini = rtld_fini;
    rtld_fini = rtld_fini_wrapper;
  }
  return real(main, argc, argv, init, fini, rtld_fini, stack_end);
}
OSH_EXPORT int oshx_start_main_234(main_fn main, int argc, char **argv, void (*init)(void),
                                   void (*fini)(void), void (*rtld_fini)(void), void *end)
{
  return start_main("GLIBC_2.34", main, argc, argv, init, fini, rtld_fini, end);
}
__asm__(".symver oshx_start_main_234,__libc_start_main@@GLIBC_2.34");
OSH_EXPORT int oshx_start_main_225(main_fn main, int argc, char **argv, void (*init)(void),
                                   void (*fini)(void), void (*rtld_fini)(void), void *end)
{
  return start_main("GLIBC_2.2.5", main, argc, argv, init, fini, rtld_fini, end);
}
__asm__(".symver oshx_start_main_225,__libc_start_main@GLIBC_2.2.5");

/* The program's signal dispositions, as they were before CPython started.
 * Py_InitializeEx(0) installs no handler, but the first import of `_signal` (which
 * `subprocess`, `signal` and so the runtime import) still installs Python's SIGINT
 * handler where SIGINT is SIG_DFL (CPython 3.8-3.13 Modules/signalmodule.c,
 * signal_get_set_handlers: "Install Python SIGINT handler which raises
 * KeyboardInterrupt"): Ctrl-C would then only set a flag that the program's own code
 * never checks (the program went on and exited 0), or raise KeyboardInterrupt inside a
 * callback.  The boot imports `_signal` first, and then every disposition it changed is
 * put back: the program keeps its own, exactly as without `offload-shim run`. */
static struct sigaction saved_sig[NSIG];
static unsigned char saved_sig_ok[NSIG];

static void signals_save(void)
{
  for (int s = 1; s < NSIG; s++)
    saved_sig_ok[s] = sigaction(s, NULL, &saved_sig[s]) == 0;
}

static void signals_restore(void)
{
  for (int s = 1; s < NSIG; s++) {
    struct sigaction now;
    if (!saved_sig_ok[s] || s == SIGKILL || s == SIGSTOP || sigaction(s, NULL, &now) != 0)
      continue;
    if (now.sa_handler != saved_sig[s].sa_handler || now.sa_flags != saved_sig[s].sa_flags)
      sigaction(s, &saved_sig[s], NULL);
  }
}

/* The runtime could not be started (libpython not loaded, its embedding API missing, the
 * boot's Python code failed: the offload_shim package cannot be imported -- a broken or
 * half-reinstalled installation -- or the start raised past embed.start()).  The line
 * saying so is printed; the program then runs without a device (the C side's answers
 * with no callback table: host fallback), except under a mandatory offload policy, where
 * it ends as its libomptarget ends when offloading is mandatory and cannot happen
 * (LLVM 16 omptarget.cpp handleTargetOutcome: FATAL_MESSAGE0(1, "failure of target
 * construct while offloading is mandatory"), then abort()) -- what embed.start() does for
 * the failures it catches.  Without this, such a run printed one line and went on, the
 * program's target regions running on the host with exit status 0. */
/* dl_iterate_phdr callback: 1 for a loaded object whose file name (without its folder)
 * starts with `prefix` (a const char *) */
static int name_starts(struct dl_phdr_info *info, size_t size, void *prefix)
{
  (void)size;
  const char *name = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
  name = name ? name + 1 : info->dlpi_name;
  return name && strncmp(name, (const char *)prefix, strlen((const char *)prefix)) == 0;
}

/* embed.py _policy: the run command's policy option (OFFLOAD_SHIM_RUN_OPTIONS, JSON
 * written by offload_shim/cli/run.py run_environment), else OMP_TARGET_OFFLOAD,
 * case-insensitive and trimmed, as libomp reads it */
static int policy_mandatory(void)
{
  const char *opts = getenv("OFFLOAD_SHIM_RUN_OPTIONS");
  const char *p = opts ? strstr(opts, "\"policy\": ") : NULL;
  if (p && strncmp(p + 10, "null", 4) != 0)
    return strncasecmp(p + 10, "\"mandatory\"", 11) == 0;
  const char *env = getenv("OMP_TARGET_OFFLOAD");
  if (!env)
    return 0;
  while (*env == ' ' || *env == '\t')
    env++;
  size_t n = strlen(env);
  while (n && (env[n - 1] == ' ' || env[n - 1] == '\t' || env[n - 1] == '\n'))
    n--;
  return n == 9 && strncasecmp(env, "mandatory", 9) == 0;
}

/* Only a program that maps a libomptarget (clang-built offload code) ends with its
 * fatal message.  A GCC-built program maps libgomp alone: its GOMP_* and omp_* entry
 * points pass through to libgomp without a callback table, and libgomp applies
 * OMP_TARGET_OFFLOAD itself (GCC 12 target.c resolve_device: with no device, device 0
 * is the initial device and a mandatory policy runs it on the host) -- the run then
 * behaves as the program does without offload-shim.  It used to abort with
 * libomptarget's message, a runtime the program does not use. */
static void mandatory_fatal(void);
static int failed_is_fatal(void)
{
  return policy_mandatory() && dl_iterate_phdr(name_starts, (void *)"libomptarget.so.");
}

static void boot_failed(void)
{
  __atomic_store_n(&embed_failed, 1, __ATOMIC_RELEASE);
  /* the caller's line ends here: what happens next */
  if (!failed_is_fatal()) {
    fputs("; running without the Python runtime (no device)\n", stderr);
    return;
  }
  fputs("\n", stderr);
  mandatory_fatal();
}

static void mandatory_fatal(void)
{
  /* the program's release names itself: "omptarget" for 19.1 and 22.1 */
  const char *name = dl_iterate_phdr(name_starts, (void *)"libomptarget.so.19") ||
                     dl_iterate_phdr(name_starts, (void *)"libomptarget.so.22") ? "omptarget"
                                                                        : "Libomptarget";
  fprintf(stderr, "%s fatal error 1: failure of target construct while offloading is "
          "mandatory\n", name);
  abort();
}

static void embed_boot(void);
static void embed_start(void)
{
  const char *on = getenv("OFFLOAD_SHIM_EMBED");
  if (!on || strcmp(on, "1") != 0)
    return;
  tls_starting = 1;
  embed_boot();
  tls_starting = 0;
}

static void embed_boot(void)
{
  const char *path = getenv("OFFLOAD_SHIM_LIBPYTHON");
  void *h = path ? dlopen(path, RTLD_NOW | RTLD_GLOBAL) : NULL;
  if (!h) {
    fprintf(stderr, "offload_shim: cannot load libpython (%s): %s",
            path ? path : "OFFLOAD_SHIM_LIBPYTHON unset", path ? dlerror() : "");
    boot_failed();
    return;
  }
  int (*is_init)(void) = (int (*)(void))dlsym(h, "Py_IsInitialized");
  p_is_init = is_init;
  void (*init_ex)(int) = (void (*)(int))dlsym(h, "Py_InitializeEx");
  void *(*save)(void) = (void *(*)(void))dlsym(h, "PyEval_SaveThread");
  p_gil_ensure = (int (*)(void))dlsym(h, "PyGILState_Ensure");
  p_gil_release = (void (*)(int))dlsym(h, "PyGILState_Release");
  p_run = (int (*)(const char *))dlsym(h, "PyRun_SimpleString");
  if (!is_init || !init_ex || !save || !p_gil_ensure || !p_gil_release || !p_run) {
    fprintf(stderr, "offload_shim: %s lacks the embedding API", path);
    boot_failed();
    return;
  }
  /* `import _signal` alone first, its handlers put back at once (signals_save): a
   * Ctrl-C during the rest of the boot (imports: tenths of a second) then ends the
   * program as it would without offload-shim, instead of a KeyboardInterrupt that
   * failed the boot while the program went on without a device */
  static const char boot_signal[] = "import _signal\n";
  /* the garbage collector is off while the boot imports (some 100 modules: their
   * allocations set off collections that find nothing to free, about 8 million
   * instructions) and on again once it has ended (boot_gc_on), failed or not; what the
   * boot built (modules, classes, the runtime) is then frozen -- set aside from every
   * later collection, and the allocation count that would start one at once reset
   * (gc.freeze, CPython gcmodule.c gc_freeze_impl) */
  static const char boot[] =
      "import os, sys, gc as _osh_gc; _osh_gc.disable(); del _osh_gc\n"
      "sys.argv = sys.argv or ['offload-shim-run']\n"
      "if os.environ.get('OFFLOAD_SHIM_PYTHON'):\n"
      "    sys.executable = os.environ['OFFLOAD_SHIM_PYTHON']\n"
      /* the launcher's sys.path first, in its order: an entry PYTHONPATH already put
       * here must not end up behind the installed site-packages (another copy of
       * offload_shim, whose interposer is not the one preloaded) */
      "_osh_p = [p for p in os.environ.get('OFFLOAD_SHIM_PYTHONPATH', '')"
      ".split(os.pathsep) if p]\n"
      "sys.path[:] = _osh_p + [p for p in sys.path if p not in _osh_p]\n"
      "del _osh_p\n"
      "import offload_shim.interposer.embed as _osh_e\n"
      "_osh_e.start()\n";
  static const char boot_gc_on[] = "__import__('gc').freeze(); __import__('gc').enable()\n";
  static const char boot_host[] =
      "import os, sys\n"
      "sys.path[:0] = [p for p in os.environ.get('OFFLOAD_SHIM_PYTHONPATH', '')"
      ".split(os.pathsep) if p and p not in sys.path]\n"
      "import offload_shim.interposer.embed as _osh_e\n"
      "_osh_e.start(python_host=True)\n";
  /* no `site`: the run command passes its own complete sys.path (site-packages and
   * what .pth files added) in OFFLOAD_SHIM_PYTHONPATH, and `site` would only add the
   * base interpreter's site-packages and run its .pth hooks (start-up time) */
  int *no_site = (int *)dlsym(h, "Py_NoSiteFlag");
  int rc;
  if (is_init()) {                        /* the program is itself a Python */
    host_is_python = 1;
    int st = p_gil_ensure();
    rc = p_run(boot_host);
    p_gil_release(st);
  } else {
    if (no_site)
      *no_site = 1;
    signals_save();
    init_ex(0);                           /* no signal handlers: the program keeps its own */
    rc = p_run(boot_signal);
    signals_restore();                    /* and those `import _signal` installed go */
    if (rc == 0) {
      rc = p_run(boot);
      p_run(boot_gc_on);
    }
    signals_restore();                    /* anything the boot's imports installed */
    save();                               /* release the GIL for good */
  }
  __atomic_store_n(&embed_active, 1, __ATOMIC_RELEASE);
  if (rc == 0 && !__atomic_load_n(&cbs_installed, __ATOMIC_ACQUIRE))
    /* embed.start() failed and said so itself (and ended the program when that was
     * fatal): entry points reached later treat it as a failed boot */
    __atomic_store_n(&embed_failed, 1, __ATOMIC_RELEASE);
  if (rc != 0) {
    fprintf(stderr, "offload_shim: the embedded runtime failed to start (traceback "
            "above)");
    boot_failed();
  }
}

/* Start CPython once (a no-op on the thread that is starting it: a plugin's constructor
 * may call exit(), whose handlers then reach an entry point on this same thread) */
static void ensure_python_once(void)
{
  if (!__atomic_load_n(&cbs_installed, __ATOMIC_ACQUIRE) && !tls_starting)
    pthread_once(&embed_once, embed_start);
}

/* For the LLVM entry points: after a failed boot, a mandatory policy is fatal once a
 * libomptarget is mapped -- also when the boot failed before one was (a Python host that
 * loaded a GCC offload library first, then a clang one: the clang library's regions ran
 * on the host with exit status 0).  Only on the path without a callback table. */
static void ensure_python(void)
{
  if (!__atomic_load_n(&cbs_installed, __ATOMIC_ACQUIRE) && !tls_starting) {
    pthread_once(&embed_once, embed_start);
    if (__atomic_load_n(&embed_failed, __ATOMIC_ACQUIRE) && failed_is_fatal()) {
      fflush(stdout);
      mandatory_fatal();
    }
  }
}

/* interposer_internal.h */
void osh_ip_ensure_python(void) { ensure_python(); }
void osh_ip_ensure_python_gomp(void) { ensure_python_once(); }
int osh_ip_gil_take(void) { return gil_take(); }
void osh_ip_gil_drop(int st) { gil_drop(st); }
int osh_ip_python_stopped(void) { return __atomic_load_n(&embed_stopped, __ATOMIC_ACQUIRE); }
int osh_ip_python_gone(void) { return embed_active && !python_alive(); }

int osh_ip_run_python(const char *code)
{
  if (!python_alive())
    return -1;
  int st = p_gil_ensure();
  int rc = p_run(code);
  p_gil_release(st);
  return rc;
}

/* ---- control API (called from Python) -------------------------------------------- */
/* The runtime's name in the lines the C side prints itself (Debug.h GETNAME(TARGET_NAME)):
 * "Libomptarget" (LLVM 16) until Python sets the program's release's
 * (RuntimeProfile.name: "omptarget" for 19.1 and 22.1). */
static char runtime_name[32] = "Libomptarget";

OSH_EXPORT void osh_interposer_set_runtime_name(const char *name)
{
  if (name) {
    strncpy(runtime_name, name, sizeof runtime_name - 1);
    runtime_name[sizeof runtime_name - 1] = 0;
  }
}

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
  __atomic_store_n(&cbs_installed, cb != NULL, __ATOMIC_RELEASE);
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

/* The __tgt_register_requires a deferred boot (boot_deferred) recorded without a callback
 * table: 1 and its flags in *flags the first time it is asked after such a call, 0 when
 * none is pending (every call since reached Python).  Python's install delivers it before
 * it replays the registrations, in the order the program made them. */
OSH_EXPORT int osh_interposer_pending_requires(int64_t *flags)
{
  pthread_mutex_lock(&lock);
  int pending = lazy_requires_pending;
  if (pending && flags)
    *flags = lazy_requires;
  lazy_requires_pending = 0;
  pthread_mutex_unlock(&lock);
  return pending;
}

OSH_EXPORT uint64_t osh_interposer_calls(int which)
{
  return (which >= 0 && which < C_NCALLS) ? __atomic_load_n(&calls[which], __ATOMIC_RELAXED)
                                          : 0;
}

/* ---- one crossing per construct ---------------------------------------------------- */
/* The frame's layout, its kinds and OSH_DATA_NOWAIT: interposer_frame.h */

static pthread_key_t frame_key;
static pthread_once_t frame_once = PTHREAD_ONCE_INIT;
static __thread uint64_t *tframe;         /* this thread's frame (malloc'ed) */
static __thread int tframe_busy;          /* a construct is using it (no nesting) */

static int (*p_omp_default_device)(void);  /* libomp's, resolved once */
static void frame_key_make(void)
{
  pthread_key_create(&frame_key, free);
  p_omp_default_device = (int (*)(void))dlsym(RTLD_DEFAULT, "omp_get_default_device");
}

static uint64_t *frame_get(void)
{
  if (tframe_busy)
    return NULL;
  if (!tframe) {
    pthread_once(&frame_once, frame_key_make);
    tframe = calloc(OSH_FRAME_WORDS, sizeof(uint64_t));
    if (!tframe)
      return NULL;
    pthread_setspecific(frame_key, tframe);
  }
  return tframe;
}

static void frame_fill(uint64_t *f, int kind, void *loc, int64_t dev, int64_t n,
                       void **bases, void **args, int64_t *sizes, int64_t *types,
                       void **names, void **mappers)
{
  f[OSH_FRAME_KIND] = (uint64_t)kind;
  f[OSH_FRAME_N] = (uint64_t)n;
  /* the default device, as libomptarget's checkDeviceAndCtors resolves it: the
   * calling thread's default-device ICV */
  if (dev == -1 && p_omp_default_device)
    dev = p_omp_default_device();
  f[OSH_FRAME_DEV] = (uint64_t)dev;
  f[OSH_FRAME_LOC] = (uint64_t)(uintptr_t)loc;
  f[OSH_FRAME_BASES_P] = (uint64_t)(uintptr_t)bases;
  f[OSH_FRAME_ARGS_P] = (uint64_t)(uintptr_t)args;
  f[OSH_FRAME_SIZES_P] = (uint64_t)(uintptr_t)sizes;
  f[OSH_FRAME_TYPES_P] = (uint64_t)(uintptr_t)types;
  f[OSH_FRAME_NAMES_P] = (uint64_t)(uintptr_t)names;
  f[OSH_FRAME_MAPPERS_P] = (uint64_t)(uintptr_t)mappers;
  int copy = n >= 0 && n <= OSH_FRAME_MAX && (n == 0 || (bases && args && sizes && types));
  f[OSH_FRAME_COPIED] = (uint64_t)copy;
  if (copy && n > 0) {
    memcpy(&f[OSH_FRAME_HEAD], bases, (size_t)n * 8);
    memcpy(&f[OSH_FRAME_HEAD + n], args, (size_t)n * 8);
    memcpy(&f[OSH_FRAME_HEAD + 2 * n], sizes, (size_t)n * 8);
    memcpy(&f[OSH_FRAME_HEAD + 3 * n], types, (size_t)n * 8);
  }
}

/* the construct callback on a filled frame: its return code, or INT32_MIN when there is
 * no construct callback or no free frame (the caller uses the per-kind callback) */
static int frame_call(uint64_t *f)
{
  osh_cb_construct g = cbs.construct;
  if (!g)
    return INT32_MIN;
  tframe_busy = 1;
  int rc = CB(g(f));
  tframe_busy = 0;
  return rc;
}

int osh_ip_repeat_cross(int kind, int64_t dev, void *loc, void *host_ptr, int64_t code,
                        int32_t n, const uint64_t *words)
{
  if (n < 0 || 5 * (int64_t)n > 4 * (int64_t)OSH_FRAME_MAX || osh_ip_python_gone())
    return INT32_MIN;
  uint64_t *f = cbs.construct ? frame_get() : NULL;
  if (!f)
    return INT32_MIN;
  memset(f, 0, OSH_FRAME_HEAD * sizeof(uint64_t));
  f[OSH_FRAME_KIND] = (uint64_t)kind;
  f[OSH_FRAME_N] = (uint64_t)n;
  f[OSH_FRAME_DEV] = (uint64_t)dev;
  f[OSH_FRAME_LOC] = (uint64_t)(uintptr_t)loc;
  f[OSH_FRAME_HOST_PTR] = (uint64_t)(uintptr_t)host_ptr;
  f[OSH_FRAME_KARGS] = (uint64_t)code;
  memcpy(&f[OSH_FRAME_HEAD], words, (size_t)n * 5 * 8);
  return frame_call(f);
}

/* ---- deferred boot (offload-shim run, OFFLOAD_SHIM_EMBED_LAZY=1) ---------------------
 * A program's registration constructors (__tgt_register_requires, __tgt_register_lib)
 * run before main; a program that never offloads only unregisters at exit.  With the
 * launcher's OFFLOAD_SHIM_EMBED_LAZY=1 (set only when no option or variable makes the
 * registrations themselves say anything: no --report, --record or --gomp-host-device, the
 * default policy, no LIBOMPTARGET_* variable: offload_shim/cli/run.py lazy_boot_ok), these
 * three entry points only record what they were given, and CPython starts at the first
 * other entry point (a construct, omp_get_num_devices, omp_target_*...), where install
 * delivers the recorded requires and replays the registrations, in their order, before
 * the construct.  So does libomptarget 16 itself: it loads its plugins at the first
 * registration but initialises a device only at its first use (device.cpp
 * DeviceTy::initOnce), and a program without a construct never reaches one.  Not
 * deferred: a program that is itself a Python (its interpreter is already running), one
 * that maps no libomptarget.so.16 (19.1 and 22.1 print a line for every
 * __tgt_register_requires; GCC's registrations are libgomp's), and a second requires
 * whose flags differ from the first (libomptarget 16 stops the program there: the
 * runtime must see it at that point). */

static int boot_deferred(void)
{
  if (__atomic_load_n(&embed_active, __ATOMIC_ACQUIRE) ||
      __atomic_load_n(&embed_failed, __ATOMIC_ACQUIRE) ||
      __atomic_load_n(&cbs_installed, __ATOMIC_ACQUIRE) || tls_starting)
    return 0;
  const char *on = getenv("OFFLOAD_SHIM_EMBED"), *lazy = getenv("OFFLOAD_SHIM_EMBED_LAZY");
  if (!on || strcmp(on, "1") != 0 || !lazy || strcmp(lazy, "1") != 0)
    return 0;
  int (*is_init)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsInitialized");
  if (is_init && is_init())
    return 0;                             /* the program is a Python: boot_host as before */
  return dl_iterate_phdr(name_starts, (void *)"libomptarget.so.16") &&
         !dl_iterate_phdr(name_starts, (void *)"libomptarget.so.19") &&
         !dl_iterate_phdr(name_starts, (void *)"libomptarget.so.22");
}

/* ---- libomptarget 16 interface (VERS1.0) ------------------------------------------ */
OSH_EXPORT void __tgt_register_requires(int64_t flags)
{
  count(C_REQ);
  requires_flags = flags;
  if (boot_deferred()) {
    pthread_mutex_lock(&lock);
    int differs = lazy_requires_seen && lazy_requires != flags;
    if (!lazy_requires_seen) {
      lazy_requires = flags;
      lazy_requires_seen = lazy_requires_pending = 1;
    }
    pthread_mutex_unlock(&lock);
    if (!differs)
      return;                             /* libomptarget 16 keeps the first: nothing to do */
  }
  ensure_python();
  osh_cb_requires f = cbs.register_requires;
  if (f)
    fatal_if(CB(f(flags)));
}

/* The program's own libomptarget (libomptarget.so.N, a DT_NEEDED of every clang-built
 * offload object) is mapped although it never sees a registration.  LLVM 16's constructor
 * still loads and initialises its plugins, and its destructor (rtl.cpp deinit()) tears
 * them down -- the same plugin files, hence the same objects, the runtime here uses.  A
 * host that dlopens and dlcloses its only offload library unloads and reloads that
 * libomptarget every cycle, deinitialising the plugins under the live runtime.  Pinned
 * (RTLD_NODELETE) at each registration, it is loaded once and finalised only after the
 * runtime stopped. */
static int pin_one(struct dl_phdr_info *info, size_t size, void *unused)
{
  (void)unused;
  if (name_starts(info, size, (void *)"libomptarget.so")) {
    void *h = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    if (h)
      dlclose(h);                         /* NODELETE stays; the count is as before */
  }
  return 0;
}

OSH_EXPORT void __tgt_register_lib(void *desc)
{
  count(C_REG);
  if (getenv("OFFLOAD_SHIM_EMBED"))
    dl_iterate_phdr(pin_one, NULL);
  if (!boot_deferred())
    ensure_python();
  pthread_mutex_lock(&lock);
  if (num_registered < MAX_REG)
    registered[num_registered++] = desc;
  osh_cb_desc f = cbs.register_lib;
  pthread_mutex_unlock(&lock);
  if (f)
    fatal_if(CB(f(desc)));
}

OSH_EXPORT void __tgt_unregister_lib(void *desc)
{
  count(C_UNREG);
  if (!boot_deferred())
    ensure_python();
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
  if (f && !osh_ip_python_gone())
    fatal_if(CB(f(desc)));
}

OSH_EXPORT void __tgt_init_all_rtls(void) {}

OSH_EXPORT int __tgt_target_kernel(void *loc, int64_t dev, int32_t teams, int32_t threads,
                                   void *host_ptr, void *args)
{
  count(C_KERNEL);
  ensure_python();
  osh_cb_kernel f = cbs.target_kernel;
  if (!f) {
    count(C_FALLBACK);
    return OMP_TGT_FAIL;
  }
  int rc = INT32_MIN;
  /* a CUDA-style launch (llvmLaunchKernel: KernelArgsTy version 3+ with Flags.IsCUDA,
   * bit 1) goes to the per-kind callback, which refuses it by name */
  uint32_t kv = 0;
  uint64_t kflags = 0;
  if (args) {
    memcpy(&kv, args, 4);
    memcpy(&kflags, (const unsigned char *)args + 64, 8);
  }
  /* a construct repeated with the same arguments on rows that all exist
   * (interposer_repeat.c); the device resolved as frame_fill does */
  if (cbs.construct && args && kv >= 1 && kv <= 3 && !(kv >= 3 && (kflags & 2))) {
    const unsigned char *ka = (const unsigned char *)args;
    uint32_t nargs;
    void *arr[6];
    memcpy(&nargs, ka + 4, 4);
    memcpy(arr, ka + 8, sizeof arr);
    int64_t d = dev;
    if (d == -1) {
      pthread_once(&frame_once, frame_key_make);
      if (p_omp_default_device)
        d = p_omp_default_device();
    }
    if (osh_ip_repeat_kernel(d, loc, host_ptr, kv, (int32_t)nargs, (void **)arr[0],
                             (void **)arr[1], (int64_t *)arr[2], (int64_t *)arr[3],
                             (void **)arr[5], &rc)) {
      fatal_if(rc);
      if (rc != 0)
        count(C_FALLBACK);
      return rc == 0 ? OMP_TGT_SUCCESS : OMP_TGT_FAIL;
    }
  }
  uint64_t *fr = cbs.construct && args && !(kv >= 3 && (kflags & 2)) ? frame_get() : NULL;
  if (fr) {
    const unsigned char *ka = (const unsigned char *)args;
    uint32_t version, nargs;
    void *arr[6];
    memcpy(&version, ka, 4);
    memcpy(&nargs, ka + 4, 4);
    memcpy(arr, ka + 8, sizeof arr);
    frame_fill(fr, OSH_FRAME_KERNEL, loc, dev, nargs, (void **)arr[0], (void **)arr[1],
               (int64_t *)arr[2], (int64_t *)arr[3], (void **)arr[4], (void **)arr[5]);
    fr[OSH_FRAME_HOST_PTR] = (uint64_t)(uintptr_t)host_ptr;
    fr[OSH_FRAME_KARGS] = (uint64_t)(uintptr_t)args;
    fr[OSH_FRAME_TEAMS] = (uint64_t)(int64_t)teams;
    fr[OSH_FRAME_THREADS] = (uint64_t)(int64_t)threads;
    fr[OSH_FRAME_KARGS_VERSION] = version;
    rc = frame_call(fr);
  }
  if (rc == INT32_MIN)
    rc = CB(f(loc, dev, teams, threads, host_ptr, args));
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

/* LLVM 16 KernelArgsTy (omptarget.h), version 2 layout */
struct osh_kernel_args {
  uint32_t Version, NumArgs;
  void **ArgBasePtrs, **ArgPtrs;
  int64_t *ArgSizes, *ArgTypes;
  void **ArgNames, **ArgMappers;
  uint64_t Tripcount, Flags;
  uint32_t NumTeams[3], ThreadLimit[3], DynCGroupMem;
};

/* The entry points clang emitted before __tgt_target_kernel (LLVM 16 interface.cpp):
 * a version-1 KernelArgsTy, NumTeams -1 for a non-teams region. */
OSH_EXPORT int __tgt_target_teams_mapper(void *loc, int64_t dev, void *host_ptr, int32_t n,
                                         void **bases, void **args, int64_t *sizes,
                                         int64_t *types, void **names, void **mappers,
                                         int32_t teams, int32_t threads)
{
  struct osh_kernel_args ka;
  memset(&ka, 0, sizeof ka);
  ka.Version = 1;
  ka.NumArgs = (uint32_t)n;
  ka.ArgBasePtrs = bases;
  ka.ArgPtrs = args;
  ka.ArgSizes = sizes;
  ka.ArgTypes = types;
  ka.ArgNames = names;
  ka.ArgMappers = mappers;
  ka.NumTeams[0] = (uint32_t)teams;
  ka.ThreadLimit[0] = (uint32_t)threads;
  return __tgt_target_kernel(loc, dev, teams, threads, host_ptr, &ka);
}

OSH_EXPORT int __tgt_target_mapper(void *loc, int64_t dev, void *host_ptr, int32_t n,
                                   void **bases, void **args, int64_t *sizes,
                                   int64_t *types, void **names, void **mappers)
{
  return __tgt_target_teams_mapper(loc, dev, host_ptr, n, bases, args, sizes, types, names,
                                   mappers, -1, 0);
}

OSH_EXPORT int __tgt_target(int64_t dev, void *host_ptr, int32_t n, void **bases,
                            void **args, int64_t *sizes, int64_t *types)
{
  return __tgt_target_mapper(NULL, dev, host_ptr, n, bases, args, sizes, types, NULL, NULL);
}

OSH_EXPORT int __tgt_target_nowait(int64_t dev, void *host_ptr, int32_t n, void **bases,
                                   void **args, int64_t *sizes, int64_t *types,
                                   int32_t ndeps, void *deps, int32_t nnoalias,
                                   void *noalias)
{
  (void)ndeps; (void)deps; (void)nnoalias; (void)noalias;
  return __tgt_target(dev, host_ptr, n, bases, args, sizes, types);
}

OSH_EXPORT int __tgt_target_nowait_mapper(void *loc, int64_t dev, void *host_ptr, int32_t n,
                                          void **bases, void **args, int64_t *sizes,
                                          int64_t *types, void **names, void **mappers,
                                          int32_t ndeps, void *deps, int32_t nnoalias,
                                          void *noalias)
{
  (void)ndeps; (void)deps; (void)nnoalias; (void)noalias;
  return __tgt_target_mapper(loc, dev, host_ptr, n, bases, args, sizes, types, names,
                             mappers);
}

OSH_EXPORT int __tgt_target_teams(int64_t dev, void *host_ptr, int32_t n, void **bases,
                                  void **args, int64_t *sizes, int64_t *types,
                                  int32_t teams, int32_t threads)
{
  return __tgt_target_teams_mapper(NULL, dev, host_ptr, n, bases, args, sizes, types, NULL,
                                   NULL, teams, threads);
}

OSH_EXPORT int __tgt_target_teams_nowait(int64_t dev, void *host_ptr, int32_t n,
                                         void **bases, void **args, int64_t *sizes,
                                         int64_t *types, int32_t teams, int32_t threads,
                                         int32_t ndeps, void *deps, int32_t nnoalias,
                                         void *noalias)
{
  (void)ndeps; (void)deps; (void)nnoalias; (void)noalias;
  return __tgt_target_teams(dev, host_ptr, n, bases, args, sizes, types, teams, threads);
}

OSH_EXPORT int __tgt_target_teams_nowait_mapper(void *loc, int64_t dev, void *host_ptr,
                                                int32_t n, void **bases, void **args,
                                                int64_t *sizes, int64_t *types, void **names,
                                                void **mappers, int32_t teams,
                                                int32_t threads, int32_t ndeps, void *deps,
                                                int32_t nnoalias, void *noalias)
{
  (void)ndeps; (void)deps; (void)nnoalias; (void)noalias;
  return __tgt_target_teams_mapper(loc, dev, host_ptr, n, bases, args, sizes, types, names,
                                   mappers, teams, threads);
}

/* Kernels run synchronously, so libomp never holds an async handle to query
 * (libomptarget 16: an invalid handle is fatal). */
OSH_EXPORT void __tgt_target_nowait_query(void **handle)
{
  if (!handle || !*handle) {
    fprintf(stderr, "%s fatal error 1: Receive an invalid async handle from the "
            "current OpenMP task. Is this a target nowait region?\n\n", runtime_name);
    abort();
  }
  *handle = NULL;
}

/* Kernel record-replay (llvm-omp-kernel-replay): not supported by offload_shim. */
OSH_EXPORT int __tgt_target_kernel_replay(void *loc, int64_t dev, void *host_ptr,
                                          void *dev_mem, int64_t dev_mem_size, void **args,
                                          void *offsets, int32_t nargs, int32_t teams,
                                          int32_t threads, uint64_t tripcount)
{
  (void)loc; (void)dev; (void)host_ptr; (void)dev_mem; (void)dev_mem_size; (void)args;
  (void)offsets; (void)nargs; (void)teams; (void)threads; (void)tripcount;
  fprintf(stderr, "offload_shim: kernel record-replay is not supported "
          "(__tgt_target_kernel_replay).\n");
  return OMP_TGT_FAIL;
}

/* ---- user-defined mappers: the component handle -------------------------------------- */
/* A mapper function generated by clang pushes the components of one argument onto the
 * handle the runtime passes it.  The handle is libomptarget's MapperComponentsTy
 * (private.h; __tgt_mapper_num_components / __tgt_push_mapper_component in
 * interface.cpp), whose only member is an llvm::SmallVector<MapComponentInfoTy>: a
 * buffer pointer (BeginX), a 32-bit size, a 32-bit capacity, then room for one element
 * inline (FirstEl, at offset 16).  The same in libomptarget 16, 19.1 and 22.1 (checked by
 * disassembly of libomptarget.so.16 / .19.1 / .22.1: the count is the 32-bit word at +8,
 * a full vector grows through SmallVectorBase<uint32_t>::grow_pod(FirstEl = handle + 16,
 * size + 1, 40)).  Programs and test suites hand these entry points handles of their own
 * (llvm-project offload/test/mapping/declare_mapper_api.cpp passes a std::vector, which
 * libomptarget reads as a SmallVector with a null buffer), so the layout and the growth
 * are libomptarget's exactly: grow_pod's capacity 2 * capacity + 1 (at least size + 1,
 * at most 2^32 - 1), malloc + copy while the buffer is the inline one, realloc after.
 * Python makes the handle for the mappers it calls (osh_mapper_components_*), reads the
 * components and frees it. */
struct osh_mapper_component {               /* MapComponentInfoTy, 40 bytes */
  void *base, *begin;
  int64_t size, type;
  void *name;
};
struct osh_mapper_components {              /* MapperComponentsTy: SmallVector<..., 1> */
  struct osh_mapper_component *begin;       /* BeginX */
  uint32_t size, capacity;
  struct osh_mapper_component first;        /* FirstEl: the inline element */
};
#define OSH_MAPPER_FIRST(c) ((struct osh_mapper_component *)((char *)(c) + 16))

OSH_EXPORT int64_t __tgt_mapper_num_components(void *handle)
{
  return handle ? (int64_t)((struct osh_mapper_components *)handle)->size : 0;
}

/* SmallVectorBase<uint32_t>::grow_pod for one more element (LLVM's safe_malloc /
 * safe_realloc: out of memory is fatal). */
static void mapper_grow(struct osh_mapper_components *c)
{
  uint64_t min = (uint64_t)c->size + 1, cap = c->capacity;
  if (min > UINT32_MAX) {                   /* getNewCapacity: report_size_overflow */
    fprintf(stderr, "LLVM ERROR: SmallVector unable to grow. Requested capacity (%llu) is "
            "larger than maximum value for size type (%u)\n", (unsigned long long)min,
            (unsigned)UINT32_MAX);
    abort();
  }
  if (cap == UINT32_MAX) {                  /* report_at_maximum_capacity */
    fprintf(stderr, "LLVM ERROR: SmallVector capacity unable to grow. Already at maximum "
            "size %u\n", (unsigned)UINT32_MAX);
    abort();
  }
  uint64_t want = 2 * cap + 1;
  if (want < min)
    want = min;
  if (want > UINT32_MAX)
    want = UINT32_MAX;
  struct osh_mapper_component *v;
  if (c->begin == OSH_MAPPER_FIRST(c)) {
    v = malloc((size_t)want * sizeof *v);
    if (v)
      memcpy(v, c->begin, (size_t)c->size * sizeof *v);
  } else {
    v = realloc(c->begin, (size_t)want * sizeof *v);
  }
  if (!v) {
    fprintf(stderr, "LLVM ERROR: out of memory\nAllocation failed\n");
    abort();
  }
  c->begin = v;
  c->capacity = (uint32_t)want;
}

OSH_EXPORT void __tgt_push_mapper_component(void *handle, void *base, void *begin,
                                            int64_t size, int64_t type, void *name)
{
  struct osh_mapper_components *c = handle;
  if (!c)
    return;
  if (c->size >= c->capacity)
    mapper_grow(c);
  c->begin[c->size++] = (struct osh_mapper_component){base, begin, size, type, name};
}

/* A handle as libomptarget's targetDataMapper makes it (a MapperComponentsTy on its
 * stack): the inline buffer, size 0, capacity 1. */
OSH_EXPORT void *osh_mapper_components_new(void)
{
  struct osh_mapper_components *c = calloc(1, sizeof *c);
  if (c) {
    c->begin = OSH_MAPPER_FIRST(c);
    c->capacity = 1;
  }
  return c;
}

/* The components pushed so far: *out points to n records {base, begin, size, type,
 * name} (40 bytes each), valid until the next push or the free. */
OSH_EXPORT int64_t osh_mapper_components_get(void *handle, void **out)
{
  struct osh_mapper_components *c = handle;
  *out = c ? (void *)c->begin : NULL;
  return c ? (int64_t)c->size : 0;
}

OSH_EXPORT void osh_mapper_components_free(void *handle)
{
  struct osh_mapper_components *c = handle;
  if (c) {
    if (c->begin != OSH_MAPPER_FIRST(c))
      free(c->begin);
    free(c);
  }
}

_Static_assert(sizeof(struct osh_mapper_component) == 40, "MapComponentInfoTy is 40 bytes");
_Static_assert(__builtin_offsetof(struct osh_mapper_components, first) == 16,
               "SmallVector's inline element is at offset 16");


static void data_call(int32_t kind, void *loc, int64_t dev, int32_t n, void **bases,
                      void **args, int64_t *sizes, int64_t *types, void **names,
                      void **mappers)
{
  count(C_DATA);
  ensure_python();
  osh_cb_data f = cbs.target_data;
  if (!f)
    return;
  /* a `target update` repeated with the same arguments on an unchanged table
   * (interposer_repeat.c), an `enter data` / `exit data` pair repeated on a table that
   * is back where it was (interposer_pair.c); the device resolved as frame_fill does */
  if (kind == OSH_FRAME_UPDATE || kind == OSH_FRAME_BEGIN || kind == OSH_FRAME_END) {
    int64_t d = dev;
    if (d == -1) {
      pthread_once(&frame_once, frame_key_make);
      if (p_omp_default_device)
        d = p_omp_default_device();
    }
    if (kind == OSH_FRAME_UPDATE ? osh_ip_repeat_update(d, n, bases, args, sizes, types, mappers)
        : kind == OSH_FRAME_BEGIN ? osh_ip_repeat_enter(d, n, bases, args, sizes, types, mappers)
        : osh_ip_repeat_exit(d, n, bases, args, sizes, types, mappers))
      return;
  }
  int rc = INT32_MIN;
  uint64_t *fr = cbs.construct ? frame_get() : NULL;
  if (fr) {
    frame_fill(fr, kind & ~OSH_DATA_NOWAIT, loc, dev, n, bases, args, sizes, types, names,
               mappers);
    fr[OSH_FRAME_KARGS] = fr[OSH_FRAME_TEAMS] = fr[OSH_FRAME_THREADS] = 0;
    fr[OSH_FRAME_KARGS_VERSION] = 0;
    fr[OSH_FRAME_HOST_PTR] = (kind & OSH_DATA_NOWAIT) ? 1 : 0;
    rc = frame_call(fr);
  }
  if (rc == INT32_MIN)
    rc = CB(f(kind, loc, dev, n, bases, args, sizes, types, names, mappers));
  fatal_if(rc);
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
    data_call(KIND | OSH_DATA_NOWAIT, loc, dev, n, bases, args, sizes, types, names,       \
              mappers);                                                                    \
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
    data_call(KIND | OSH_DATA_NOWAIT, NULL, dev, n, bases, args, sizes, types, NULL,       \
              NULL);                                                                       \
  }

DATA_FORMS(begin, OSH_FRAME_BEGIN)
DATA_FORMS(end, OSH_FRAME_END)
DATA_FORMS(update, OSH_FRAME_UPDATE)

OSH_EXPORT void __kmpc_push_target_tripcount_mapper(void *loc, int64_t dev, uint64_t n)
{
  (void)loc; (void)dev; (void)n;
}

OSH_EXPORT void __kmpc_push_target_tripcount(int64_t dev, uint64_t n) { (void)dev; (void)n; }

/* ---- device memory API ------------------------------------------------------------ */
OSH_EXPORT int omp_get_num_devices(void)
{
  count(C_NUMDEV);
  ensure_python();
  osh_cb_num_devices f = cbs.num_devices;
  return f ? CB(f()) : 0;
}

/* libomp's omp_get_num_devices() looks this name up with dlsym(RTLD_DEFAULT) first */
OSH_EXPORT int __tgt_get_num_devices(void) { return omp_get_num_devices(); }

/* libomptarget 16: the host is device number omp_get_num_devices() */
OSH_EXPORT int omp_get_initial_device(void) { return omp_get_num_devices(); }

static void *target_alloc(size_t size, int dev, int kind)
{
  count(C_ALLOC);
  ensure_python();
  osh_cb_alloc f = cbs.target_alloc;
  if (!f)
    return dev == omp_get_initial_device() && size ? malloc(size) : NULL;
  void *out = NULL;
  int rc = CB(f(size, dev, kind, &out));
  fatal_if(rc);
  return rc == 0 ? out : NULL;
}

static void target_free(void *ptr, int dev, int kind)
{
  count(C_FREE);
  ensure_python();
  osh_cb_free f = cbs.target_free;
  if (!f) {
    if (dev == omp_get_initial_device())
      free(ptr);
    return;
  }
  fatal_if(CB(f(ptr, dev, kind)));
}

/* TargetAllocTy */
enum { OSH_ALLOC_DEVICE = 0, OSH_ALLOC_HOST = 1, OSH_ALLOC_SHARED = 2, OSH_ALLOC_DEFAULT = 3 };

OSH_EXPORT void *omp_target_alloc(size_t size, int dev)
{
  return target_alloc(size, dev, OSH_ALLOC_DEFAULT);
}
OSH_EXPORT void *llvm_omp_target_alloc_device(size_t size, int dev)
{
  return target_alloc(size, dev, OSH_ALLOC_DEVICE);
}
OSH_EXPORT void *llvm_omp_target_alloc_host(size_t size, int dev)
{
  return target_alloc(size, dev, OSH_ALLOC_HOST);
}
OSH_EXPORT void *llvm_omp_target_alloc_shared(size_t size, int dev)
{
  return target_alloc(size, dev, OSH_ALLOC_SHARED);
}
OSH_EXPORT void omp_target_free(void *ptr, int dev) { target_free(ptr, dev, OSH_ALLOC_DEFAULT); }
OSH_EXPORT void llvm_omp_target_free_device(void *ptr, int dev)
{
  target_free(ptr, dev, OSH_ALLOC_DEVICE);
}
OSH_EXPORT void llvm_omp_target_free_host(void *ptr, int dev)
{
  target_free(ptr, dev, OSH_ALLOC_HOST);
}
OSH_EXPORT void llvm_omp_target_free_shared(void *ptr, int dev)
{
  target_free(ptr, dev, OSH_ALLOC_SHARED);
}

/* libomptarget 16 api.cpp: the host has no dynamic shared memory */
OSH_EXPORT void *llvm_omp_target_dynamic_shared_alloc(void) { return NULL; }

/* The API routines forwarded through the generic callback; `dflt` without a table. */
static uint64_t api_call(int which, const uint64_t *args, int nargs, uint64_t dflt)
{
  count(C_API);
  ensure_python();
  osh_cb_api f = cbs.api;
  if (!f)
    return dflt;
  uint64_t result = dflt;
  int rc = CB(f(which, args, nargs, &result));
  fatal_if(rc);
  return result;
}

/* interposer_internal.h: the same for interposer_api.c */
uint64_t osh_ip_api_call(int which, const uint64_t *args, int nargs, uint64_t dflt)
{
  return api_call(which, args, nargs, dflt);
}

OSH_EXPORT int omp_target_associate_ptr(const void *host, const void *dptr, size_t size,
                                        size_t offset, int dev)
{
  uint64_t a[5] = {(uintptr_t)host, (uintptr_t)dptr, size, offset, (uint64_t)(int64_t)dev};
  return (int)api_call(OSH_API_ASSOCIATE, a, 5, (uint64_t)(int64_t)OMP_TGT_FAIL);
}

OSH_EXPORT int omp_target_disassociate_ptr(const void *host, int dev)
{
  uint64_t a[2] = {(uintptr_t)host, (uint64_t)(int64_t)dev};
  return (int)api_call(OSH_API_DISASSOCIATE, a, 2, (uint64_t)(int64_t)OMP_TGT_FAIL);
}

OSH_EXPORT void *omp_get_mapped_ptr(const void *ptr, int dev)
{
  uint64_t a[2] = {(uintptr_t)ptr, (uint64_t)(int64_t)dev};
  uint64_t dflt = ptr && dev == omp_get_initial_device() ? (uintptr_t)ptr : 0;
  return (void *)(uintptr_t)api_call(OSH_API_MAPPED_PTR, a, 2, dflt);
}

OSH_EXPORT void *llvm_omp_target_lock_mem(void *ptr, size_t size, int dev)
{
  uint64_t a[3] = {(uintptr_t)ptr, size, (uint64_t)(int64_t)dev};
  return (void *)(uintptr_t)api_call(OSH_API_LOCK, a, 3, 0);
}

OSH_EXPORT void llvm_omp_target_unlock_mem(void *ptr, int dev)
{
  uint64_t a[2] = {(uintptr_t)ptr, (uint64_t)(int64_t)dev};
  api_call(OSH_API_UNLOCK, a, 2, 0);
}

OSH_EXPORT int __tgt_print_device_info(int64_t dev)
{
  uint64_t a[1] = {(uint64_t)dev};
  return (int)api_call(OSH_API_PRINT_DEVICE_INFO, a, 1, 0);
}

OSH_EXPORT void __tgt_set_info_flag(uint32_t flag)
{
  uint64_t a[1] = {flag};
  api_call(OSH_API_SET_INFO_FLAG, a, 1, 0);
}

/* libomptarget 16 api.cpp: code on the host runs on the initial device */
OSH_EXPORT int omp_get_device_num(void) { return omp_get_initial_device(); }

OSH_EXPORT int omp_target_memcpy(void *dst, const void *src, size_t len, size_t dst_off,
                                 size_t src_off, int dst_dev, int src_dev)
{
  count(C_MEMCPY);
  ensure_python();
  osh_cb_memcpy f = cbs.target_memcpy;
  if (!f) {
    int host = omp_get_initial_device();
    if (dst_dev != host || src_dev != host)
      return OMP_TGT_FAIL;
    memcpy((char *)dst + dst_off, (const char *)src + src_off, len);
    return 0;
  }
  int rc = CB(f(dst, src, len, dst_off, src_off, dst_dev, src_dev));
  fatal_if(rc);
  return rc == 0 ? 0 : OMP_TGT_FAIL;
}

/* OpenMP 6.0 omp_target_memset (libomptarget 19.1 and 22.1 export it; clang 19/22's omp.h
 * declares it).  As libomptarget's own (llvm-project PR #68706, api.cpp): memset on the
 * initial device, else a host buffer filled with the byte and copied to the device
 * with omp_target_memcpy, so it goes through the Python runtime's devices. */
OSH_EXPORT void *omp_target_memset(void *ptr, int value, size_t n, int dev)
{
  if (!ptr || !n)
    return ptr;
  int host = omp_get_initial_device();
  if (dev == host)
    return memset(ptr, value, n);
  void *shadow = malloc(n);
  if (!shadow)
    return ptr;
  memset(shadow, value, n);
  (void)omp_target_memcpy(ptr, shadow, n, 0, 0, dev, host);
  free(shadow);
  return ptr;
}

/* LLVM 16 api.cpp omp_target_memcpy_rect: NULL dst and src ask for the number of
 * dimensions supported (INT_MAX); otherwise one omp_target_memcpy per contiguous row. */
OSH_EXPORT int omp_target_memcpy_rect(void *dst, const void *src, size_t esize, int ndims,
                                      const size_t *volume, const size_t *dst_offsets,
                                      const size_t *src_offsets, const size_t *dst_dims,
                                      const size_t *src_dims, int dst_dev, int src_dev)
{
  if (!dst && !src)
    return 0x7fffffff;
  if (!dst || !src || esize < 1 || ndims < 1 || !volume || !dst_offsets || !src_offsets ||
      !dst_dims || !src_dims) {
    fprintf(stderr, "%s error: Call to omp_target_memcpy_rect with invalid "
            "arguments\n", runtime_name);
    return OMP_TGT_FAIL;
  }
  if (ndims == 1)
    return omp_target_memcpy(dst, src, esize * volume[0], esize * dst_offsets[0],
                             esize * src_offsets[0], dst_dev, src_dev);
  size_t dslice = esize, sslice = esize;
  for (int i = 1; i < ndims; i++) {
    dslice *= dst_dims[i];
    sslice *= src_dims[i];
  }
  size_t doff = dst_offsets[0] * dslice, soff = src_offsets[0] * sslice;
  int rc = 0;
  for (size_t i = 0; i < volume[0]; i++) {
    rc = omp_target_memcpy_rect((char *)dst + doff + dslice * i,
                                (const char *)src + soff + sslice * i, esize, ndims - 1,
                                volume + 1, dst_offsets + 1, src_offsets + 1, dst_dims + 1,
                                src_dims + 1, dst_dev, src_dev);
    if (rc)
      return rc;
  }
  return rc;
}

OSH_EXPORT int omp_target_is_present(const void *ptr, int dev)
{
  count(C_PRESENT);
  ensure_python();
  osh_cb_present f = cbs.target_is_present;
  if (!f)
    return dev == omp_get_initial_device();
  int rc = CB(f(ptr, dev));
  fatal_if(rc);
  return rc > 0;
}
