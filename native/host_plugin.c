/*
 * host_plugin.c - libosh_hostplugin.so: an OpenMP offload plugin whose "device memory"
 * is host malloc memory.  Exports the LLVM 16 nextgen __tgt_rtl_* ABI and the GCC 12
 * GOMP_OFFLOAD_* ABI (separate device tables), plus the osh_host_* control API declared
 * in osh_host_plugin.h.  See native/README.md for the behaviour contract.
 */
#define _GNU_SOURCE
#include "osh_host_plugin.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "host_plugin_internal.h"

_Static_assert(sizeof(__tgt_offload_entry) == 32, "entry layout");
_Static_assert(sizeof(__tgt_device_image) == 32, "image layout");
_Static_assert(sizeof(KernelArgsTy) == 104, "KernelArgsTy layout");
_Static_assert(offsetof(KernelArgsTy, NumArgs) == 4, "KernelArgsTy.NumArgs");
_Static_assert(sizeof(struct osh_gomp_target_data) == 64, "target_data layout");


static pthread_once_t g_once = PTHREAD_ONCE_INIT;
pthread_mutex_t g_life = PTHREAD_MUTEX_INITIALIZER; /* lifecycle transitions */
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_num_devices;
static _Atomic int g_llvm_state;
_Atomic int64_t g_capacity[MAX_DEV];
_Atomic int64_t g_lat_alloc, g_lat_free;
_Atomic int64_t g_calls[E_COUNT];
static _Atomic int64_t g_fail_at[E_COUNT];
static _Atomic int64_t g_violations[V_COUNT];
static char g_log[LOG_KEEP][LOG_LINE];
static uint64_t g_log_total; /* lines ever logged since reset (under g_log_mu) */
osh_dev g_dev[OSH_NUM_ABIS][MAX_DEV];
_Thread_local char tls_err[512];

const char *const entry_names[E_COUNT] = {OSH_ENTRIES(AS_NAME)};
const char *const violation_names[V_COUNT] = {OSH_VIOLATIONS(AS_NAME)};

static void osh_init_once(void) {
  int n = DEFAULT_NUM_DEVICES;
  const char *env = getenv("OFFLOAD_SHIM_HOST_NUM_DEVICES");
  if (env && *env) {
    char *end = NULL;
    long v = strtol(env, &end, 10);
    if (end && *end == '\0' && v >= 0 && v <= MAX_DEV) n = (int)v;
  }
  atomic_store(&g_num_devices, n);
  for (int a = 0; a < OSH_NUM_ABIS; a++) {
    for (int i = 0; i < MAX_DEV; i++) {
      osh_dev *d = &g_dev[a][i];
      pthread_mutex_init(&d->mu, NULL);
      pthread_rwlock_init(&d->img_rw, NULL);
      d->abi = a;
      d->id = i;
      d->rng = 0x9e3779b9u ^ (uint32_t)(i * 2654435761u) ^ (uint32_t)a;
    }
  }
}

void ensure_init(void) { pthread_once(&g_once, osh_init_once); }
int num_devices(void) { return atomic_load(&g_num_devices); }

/* ---- errors, violations, counters --------------------------------------------------- */

__attribute__((format(printf, 1, 2))) void set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tls_err, sizeof tls_err, fmt, ap);
  va_end(ap);
}

__attribute__((format(printf, 3, 4))) void violation(int kind, int entry, const char *fmt, ...) {
  char detail[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  atomic_fetch_add(&g_violations[kind], 1);
  pthread_mutex_lock(&g_log_mu);
  snprintf(g_log[g_log_total % LOG_KEEP], LOG_LINE, "%s %s %s", violation_names[kind], entry_names[entry],
           detail);
  g_log_total++;
  pthread_mutex_unlock(&g_log_mu);
  set_error("contract violation %s in %s: %s", violation_names[kind], entry_names[entry], detail);
}

/* Returns true when this call must fail because of osh_host_fail_nth. */
bool inject_fail(int e) {
  int64_t v = atomic_load(&g_fail_at[e]);
  while (v > 0) {
    if (atomic_compare_exchange_weak(&g_fail_at[e], &v, v - 1)) {
      if (v == 1) {
        set_error("%s: injected failure (osh_host_fail_nth)", entry_names[e]);
        return true;
      }
      return false;
    }
  }
  return false;
}

void spin_ns(int64_t ns) {
  if (ns <= 0) return;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &t);
    int64_t el = (int64_t)(t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec);
    if (el >= ns) return;
  }
}

/* ---- treap keyed by address ------------------------------------------------------------ */

uint32_t next_prio(osh_dev *d) {
  uint32_t x = d->rng;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  d->rng = x ? x : 1;
  return x;
}

static anode *rot_right(anode *t) {
  anode *l = t->l;
  t->l = l->r;
  l->r = t;
  return l;
}

static anode *rot_left(anode *t) {
  anode *r = t->r;
  t->r = r->l;
  r->l = t;
  return r;
}

anode *t_insert(anode *t, anode *n) {
  if (!t) return n;
  if (n->key < t->key) {
    t->l = t_insert(t->l, n);
    if (t->l->prio > t->prio) t = rot_right(t);
  } else {
    t->r = t_insert(t->r, n);
    if (t->r->prio > t->prio) t = rot_left(t);
  }
  return t;
}

static anode *t_merge(anode *a, anode *b) {
  if (!a) return b;
  if (!b) return a;
  if (a->prio > b->prio) {
    a->r = t_merge(a->r, b);
    return a;
  }
  b->l = t_merge(a, b->l);
  return b;
}

anode *t_erase(anode *t, uintptr_t key, anode **out) {
  if (!t) return NULL;
  if (key < t->key)
    t->l = t_erase(t->l, key, out);
  else if (key > t->key)
    t->r = t_erase(t->r, key, out);
  else {
    *out = t;
    return t_merge(t->l, t->r);
  }
  return t;
}

anode *t_find(anode *t, uintptr_t key) {
  while (t) {
    if (key == t->key) return t;
    t = key < t->key ? t->l : t->r;
  }
  return NULL;
}

anode *t_floor(anode *t, uintptr_t key) {
  anode *best = NULL;
  while (t) {
    if (t->key <= key) {
      best = t;
      t = t->r;
    } else {
      t = t->l;
    }
  }
  return best;
}

/* ---- images ------------------------------------------------------------------------------ */

void image_free(osh_image *im) {
  if (!im) return;
  if (im->handle) dlclose(im->handle);
  for (size_t i = 0; i < im->num_names; i++) free(im->names[i]);
  free(im->names);
  free(im->kernels);
  free(im->vars);
  free(im->entries);
  free(im);
}

static osh_kernel *find_kernel(osh_dev *d, const void *p) {
  uintptr_t a = (uintptr_t)p;
  for (osh_image *im = d->images; im; im = im->next) {
    if (!im->num_kernels) continue;
    uintptr_t b = (uintptr_t)im->kernels, e = (uintptr_t)(im->kernels + im->num_kernels);
    if (a >= b && a < e && (a - b) % sizeof(osh_kernel) == 0) return (osh_kernel *)p;
  }
  return NULL;
}

static osh_image *find_image_key(osh_dev *d, const void *key) {
  for (osh_image *im = d->images; im; im = im->next)
    if (im->key == key) return im;
  return NULL;
}

bool elf_ok(const void *start, size_t size) {
  if (!start || size < sizeof(Elf64_Ehdr)) return false;
  const unsigned char *b = start;
  if (memcmp(b, ELFMAG, SELFMAG) != 0) return false;
  if (b[EI_CLASS] != ELFCLASS64) return false;
  Elf64_Half mach;
  memcpy(&mach, b + offsetof(Elf64_Ehdr, e_machine), sizeof mach);
  return mach == EM_X86_64;
}

/* Write the bytes to a temp file, dlopen it, unlink it.  NULL + error on failure. */
void *dlopen_bytes(const void *bytes, size_t size) {
  const char *dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  char path[4096];
  if (snprintf(path, sizeof path, "%s/tmposh_image_XXXXXX", dir) >= (int)sizeof path) {
    set_error("TMPDIR too long");
    return NULL;
  }
  int fd = mkstemp(path);
  if (fd < 0) {
    set_error("mkstemp(%s) failed: %s", path, strerror(errno));
    return NULL;
  }
  const char *p = bytes;
  size_t left = size;
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      set_error("writing image to %s failed: %s", path, strerror(errno));
      close(fd);
      unlink(path);
      return NULL;
    }
    p += w;
    left -= (size_t)w;
  }
  if (close(fd) != 0) {
    set_error("closing %s failed: %s", path, strerror(errno));
    unlink(path);
    return NULL;
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    set_error("dlopen failed: %s", e ? e : "unknown error");
  }
  unlink(path);
  return h;
}

void *lookup_sym(void *h, const char *name) {
  dlerror();
  return dlsym(h, name);
}

/* ---- device helpers ----------------------------------------------------------------------- */

static int state_violation_kind(int s) { return s == ST_NEVER ? V_BEFORE_INIT_DEVICE : V_AFTER_DEINIT_DEVICE; }

static osh_dev *dev_check(int abi, int e, int id) {
  int n = num_devices();
  if (id < 0 || id >= n) {
    violation(V_BAD_DEVICE, e, "device %d not in [0,%d)", id, n);
    return NULL;
  }
  osh_dev *d = &g_dev[abi][id];
  int s = atomic_load(&d->state);
  if (s != ST_LIVE) {
    violation(state_violation_kind(s), e, "device %d %s", id, s == ST_NEVER ? "not initialised" : "deinitialised");
    return NULL;
  }
  return d;
}

/* Re-check under a device lock. */
bool dev_live_locked(osh_dev *d, int e) {
  int s = atomic_load(&d->state);
  if (s == ST_LIVE) return true;
  violation(state_violation_kind(s), e, "device %d %s", d->id, s == ST_NEVER ? "not initialised" : "deinitialised");
  return false;
}

static bool llvm_plugin_ok(int e) {
  int s = atomic_load(&g_llvm_state);
  if (s == ST_LIVE) return true;
  if (s == ST_NEVER)
    violation(V_BEFORE_INIT_PLUGIN, e, "__tgt_rtl_init_plugin not called");
  else
    violation(V_AFTER_DEINIT_PLUGIN, e, "plugin deinitialised");
  return false;
}

static osh_dev *llvm_dev(int e, int32_t id) {
  if (!llvm_plugin_ok(e)) return NULL;
  return dev_check(ABI_LLVM, e, id);
}

static void free_tree_leaked(osh_dev *d, anode *t) {
  if (!t) return;
  free_tree_leaked(d, t->l);
  free_tree_leaked(d, t->r);
  atomic_fetch_add(&d->leaked_allocs, 1);
  atomic_fetch_add(&d->leaked_bytes, (int64_t)t->size);
  free((void *)t->key);
  free(t);
}

static void free_tree_locks(anode *t) {
  if (!t) return;
  free_tree_locks(t->l);
  free_tree_locks(t->r);
  munlock((void *)t->key, (size_t)t->size);
  free(t);
}

/* Deinitialise a live device: free its allocations (counted as leaked), unlock locked
 * ranges, dlclose its images.  Caller holds g_life. */
void dev_teardown(osh_dev *d) {
  pthread_rwlock_wrlock(&d->img_rw);
  pthread_mutex_lock(&d->mu);
  atomic_store(&d->state, ST_DEAD);
  osh_image *ims = d->images;
  d->images = NULL;
  anode *allocs = d->allocs, *locks = d->locks;
  d->allocs = NULL;
  d->locks = NULL;
  free_tree_leaked(d, allocs);
  free_tree_locks(locks);
  atomic_store(&d->live_allocs, 0);
  atomic_store(&d->live_bytes, 0);
  pthread_mutex_unlock(&d->mu);
  pthread_rwlock_unlock(&d->img_rw);
  while (ims) {
    osh_image *nx = ims->next;
    image_free(ims);
    ims = nx;
  }
}

/* Common init/deinit for one device of either ABI.  Caller holds g_life.  Returns 0/-1. */
static int dev_init_locked(int abi, int e, int id) {
  int n = num_devices();
  if (id < 0 || id >= n) {
    violation(V_BAD_DEVICE, e, "device %d not in [0,%d)", id, n);
    return -1;
  }
  osh_dev *d = &g_dev[abi][id];
  if (atomic_load(&d->state) == ST_LIVE) {
    violation(V_DOUBLE_INIT, e, "device %d already initialised", id);
    return -1;
  }
  pthread_rwlock_wrlock(&d->img_rw);
  pthread_mutex_lock(&d->mu);
  atomic_store(&d->state, ST_LIVE);
  pthread_mutex_unlock(&d->mu);
  pthread_rwlock_unlock(&d->img_rw);
  return 0;
}

static int dev_deinit_locked(int abi, int e, int id) {
  int n = num_devices();
  if (id < 0 || id >= n) {
    violation(V_BAD_DEVICE, e, "device %d not in [0,%d)", id, n);
    return -1;
  }
  osh_dev *d = &g_dev[abi][id];
  int s = atomic_load(&d->state);
  if (s == ST_NEVER) {
    violation(V_DEINIT_WITHOUT_INIT, e, "device %d never initialised", id);
    return -1;
  }
  if (s == ST_DEAD) {
    violation(V_DOUBLE_DEINIT, e, "device %d already deinitialised", id);
    return -1;
  }
  dev_teardown(d);
  return 0;
}

/* Allocation shared by both ABIs.  zero_ok: GOMP alloc(0) gets a unique 1-byte block
 * recorded with size 0 (libgomp treats NULL as a fatal allocation failure). */
void *dev_alloc(osh_dev *d, int e, int64_t size, bool zero_ok) {
  spin_ns(atomic_load(&g_lat_alloc));
  if (size < 0 || (size == 0 && !zero_ok)) {
    set_error("%s: invalid size %lld", entry_names[e], (long long)size);
    return NULL;
  }
  void *p = malloc(size ? (size_t)size : 1);
  anode *n = malloc(sizeof *n);
  if (!p || !n) {
    free(p);
    free(n);
    set_error("%s: out of memory (malloc of %lld bytes failed)", entry_names[e], (long long)size);
    return NULL;
  }
  n->key = (uintptr_t)p;
  n->size = (uint64_t)size;
  n->refs = 1;
  n->l = n->r = NULL;
  pthread_mutex_lock(&d->mu);
  if (!dev_live_locked(d, e)) {
    pthread_mutex_unlock(&d->mu);
    free(p);
    free(n);
    return NULL;
  }
  int64_t cap = atomic_load(&g_capacity[d->id]);
  int64_t live = atomic_load(&d->live_bytes);
  if (cap > 0 && size > cap - live) {
    pthread_mutex_unlock(&d->mu);
    free(p);
    free(n);
    set_error("%s: out of memory: device %d has %lld of %lld bytes in use, %lld requested", entry_names[e], d->id,
              (long long)live, (long long)cap, (long long)size);
    return NULL;
  }
  n->prio = next_prio(d);
  d->allocs = t_insert(d->allocs, n);
  atomic_fetch_add(&d->live_allocs, 1);
  atomic_fetch_add(&d->live_bytes, size);
  pthread_mutex_unlock(&d->mu);
  return p;
}

int dev_free(osh_dev *d, int e, void *p) {
  spin_ns(atomic_load(&g_lat_free));
  anode *n = NULL;
  pthread_mutex_lock(&d->mu);
  if (!dev_live_locked(d, e)) {
    pthread_mutex_unlock(&d->mu);
    return -1;
  }
  d->allocs = t_erase(d->allocs, (uintptr_t)p, &n);
  if (n) {
    atomic_fetch_sub(&d->live_allocs, 1);
    atomic_fetch_sub(&d->live_bytes, (int64_t)n->size);
  }
  pthread_mutex_unlock(&d->mu);
  if (!n) {
    violation(V_UNKNOWN_POINTER, e, "device %d: %p is not a live allocation", d->id, p);
    return -1;
  }
  free(p);
  free(n);
  return 0;
}

/* Is [p, p+len) inside one live allocation or image global of d?  Caller holds img_rw
 * (read or write). */
bool range_ok(osh_dev *d, const void *p, size_t len) {
  uintptr_t s = (uintptr_t)p, end = s + len;
  if (end < s) return false;
  bool ok = false;
  pthread_mutex_lock(&d->mu);
  anode *n = t_floor(d->allocs, s);
  if (n && end <= n->key + n->size) ok = true;
  pthread_mutex_unlock(&d->mu);
  if (ok) return true;
  for (osh_image *im = d->images; im; im = im->next)
    for (size_t i = 0; i < im->num_vars; i++)
      if (s >= im->vars[i].start && end <= im->vars[i].end) return true;
  return false;
}

/* Copy with device-range checks.  dev_dst/dev_src say which sides are device memory. */
int dev_copy(osh_dev *d, int e, void *dst, const void *src, int64_t size, bool dev_dst, bool dev_src) {
  if (size < 0) {
    set_error("%s: negative size %lld", entry_names[e], (long long)size);
    return -1;
  }
  if (size == 0) return 0;
  pthread_rwlock_rdlock(&d->img_rw);
  if (!dev_live_locked(d, e)) {
    pthread_rwlock_unlock(&d->img_rw);
    return -1;
  }
  if (dev_dst && !range_ok(d, dst, (size_t)size)) {
    pthread_rwlock_unlock(&d->img_rw);
    violation(V_UNKNOWN_POINTER, e, "device %d: [%p, +%lld) is not inside device memory", d->id, dst, (long long)size);
    return -1;
  }
  if (dev_src && !range_ok(d, src, (size_t)size)) {
    pthread_rwlock_unlock(&d->img_rw);
    violation(V_UNKNOWN_POINTER, e, "device %d: [%p, +%lld) is not inside device memory", d->id, src, (long long)size);
    return -1;
  }
  if (!dev_src && !src) {
    pthread_rwlock_unlock(&d->img_rw);
    set_error("%s: NULL host pointer", entry_names[e]);
    return -1;
  }
  if (!dev_dst && !dst) {
    pthread_rwlock_unlock(&d->img_rw);
    set_error("%s: NULL host pointer", entry_names[e]);
    return -1;
  }
  memmove(dst, src, (size_t)size);
  pthread_rwlock_unlock(&d->img_rw);
  return 0;
}

typedef void *P_;
void call_kernel(void (*fn)(void), uint32_t n, void **a) {
  switch (n) {
  case 0: ((void (*)(void))fn)(); break;
  case 1: ((void (*)(P_))fn)(a[0]); break;
  case 2: ((void (*)(P_, P_))fn)(a[0], a[1]); break;
  case 3: ((void (*)(P_, P_, P_))fn)(a[0], a[1], a[2]); break;
  case 4: ((void (*)(P_, P_, P_, P_))fn)(a[0], a[1], a[2], a[3]); break;
  case 5: ((void (*)(P_, P_, P_, P_, P_))fn)(a[0], a[1], a[2], a[3], a[4]); break;
  case 6: ((void (*)(P_, P_, P_, P_, P_, P_))fn)(a[0], a[1], a[2], a[3], a[4], a[5]); break;
  case 7: ((void (*)(P_, P_, P_, P_, P_, P_, P_))fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6]); break;
  case 8: ((void (*)(P_, P_, P_, P_, P_, P_, P_, P_))fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]); break;
  case 9:
    ((void (*)(P_, P_, P_, P_, P_, P_, P_, P_, P_))fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]);
    break;
  case 10:
    ((void (*)(P_, P_, P_, P_, P_, P_, P_, P_, P_, P_))fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8],
                                                           a[9]);
    break;
  case 11:
    ((void (*)(P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_))fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7],
                                                               a[8], a[9], a[10]);
    break;
  case 12:
    ((void (*)(P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_))fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7],
                                                                   a[8], a[9], a[10], a[11]);
    break;
  case 13:
    ((void (*)(P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_))fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6],
                                                                       a[7], a[8], a[9], a[10], a[11], a[12]);
    break;
  case 14:
    ((void (*)(P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_))fn)(
        a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13]);
    break;
  case 15:
    ((void (*)(P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_))fn)(
        a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14]);
    break;
  case 16:
    ((void (*)(P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_))fn)(
        a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15]);
    break;
  default: break;
  }
}

/* Append a fully built image to a live device.  Returns false (and frees it) otherwise. */
bool dev_add_image(osh_dev *d, int e, osh_image *im) {
  pthread_rwlock_wrlock(&d->img_rw);
  if (!dev_live_locked(d, e)) {
    pthread_rwlock_unlock(&d->img_rw);
    image_free(im);
    return false;
  }
  if (im->key && find_image_key(d, im->key)) {
    pthread_rwlock_unlock(&d->img_rw);
    violation(V_DOUBLE_LOAD, e, "device %d: target_data %p already loaded", d->id, im->key);
    image_free(im);
    return false;
  }
  osh_image **pp = &d->images;
  while (*pp) pp = &(*pp)->next;
  *pp = im;
  pthread_rwlock_unlock(&d->img_rw);
  return true;
}

static char *dup_name(osh_image *im, const char *s) {
  char *c = strdup(s);
  if (c) im->names[im->num_names++] = c;
  return c;
}

/* ======================================================================================= */
/* LLVM ABI                                                                               */
/* ======================================================================================= */

/* fault injection for GCC PR 68463: the next image loads report this many entries fewer */
static _Atomic int g_table_shortfall;

static size_t take_table_shortfall(size_t n) {
  int k = atomic_load(&g_table_shortfall);
  if (k <= 0) return 0;
  return (size_t)k < n ? (size_t)k : n;
}

OSH_EXPORT int32_t __tgt_rtl_init_plugin(void) {
  ENTER(E_INIT_PLUGIN, OFFLOAD_FAIL);
  pthread_mutex_lock(&g_life);
  int s = atomic_load(&g_llvm_state);
  if (s == ST_LIVE) {
    pthread_mutex_unlock(&g_life);
    violation(V_DOUBLE_INIT, E_INIT_PLUGIN, "plugin already initialised");
    return OFFLOAD_FAIL;
  }
  if (s == ST_DEAD) /* fresh cycle: all devices are deinitialised, forget them */
    for (int i = 0; i < MAX_DEV; i++) atomic_store(&g_dev[ABI_LLVM][i].state, ST_NEVER);
  atomic_store(&g_llvm_state, ST_LIVE);
  pthread_mutex_unlock(&g_life);
  return OFFLOAD_SUCCESS;
}

OSH_EXPORT int32_t __tgt_rtl_deinit_plugin(void) {
  ENTER(E_DEINIT_PLUGIN, OFFLOAD_FAIL);
  pthread_mutex_lock(&g_life);
  int s = atomic_load(&g_llvm_state);
  if (s != ST_LIVE) {
    pthread_mutex_unlock(&g_life);
    if (s == ST_NEVER)
      violation(V_DEINIT_WITHOUT_INIT, E_DEINIT_PLUGIN, "plugin never initialised");
    else
      violation(V_DOUBLE_DEINIT, E_DEINIT_PLUGIN, "plugin already deinitialised");
    return OFFLOAD_FAIL;
  }
  int live = 0;
  for (int i = 0; i < MAX_DEV; i++) {
    osh_dev *d = &g_dev[ABI_LLVM][i];
    if (atomic_load(&d->state) == ST_LIVE) {
      live++;
      dev_teardown(d);
    }
  }
  atomic_store(&g_llvm_state, ST_DEAD);
  pthread_mutex_unlock(&g_life);
  if (live) {
    violation(V_DEINIT_PLUGIN_WITH_LIVE_DEVICES, E_DEINIT_PLUGIN, "%d device(s) still initialised; deinitialised them",
              live);
    return OFFLOAD_FAIL;
  }
  return OFFLOAD_SUCCESS;
}

OSH_EXPORT int32_t __tgt_rtl_number_of_devices(void) {
  ENTER(E_NUMBER_OF_DEVICES, 0);
  if (!llvm_plugin_ok(E_NUMBER_OF_DEVICES)) return 0;
  return num_devices();
}

OSH_EXPORT int64_t __tgt_rtl_init_requires(int64_t Flags) {
  ENTER(E_INIT_REQUIRES, OFFLOAD_FAIL);
  if (!llvm_plugin_ok(E_INIT_REQUIRES)) return OFFLOAD_FAIL;
  return Flags;
}

OSH_EXPORT int32_t __tgt_rtl_init_device(int32_t ID) {
  ENTER(E_INIT_DEVICE, OFFLOAD_FAIL);
  pthread_mutex_lock(&g_life);
  int rc = llvm_plugin_ok(E_INIT_DEVICE) ? dev_init_locked(ABI_LLVM, E_INIT_DEVICE, ID) : -1;
  pthread_mutex_unlock(&g_life);
  return rc ? OFFLOAD_FAIL : OFFLOAD_SUCCESS;
}

OSH_EXPORT int32_t __tgt_rtl_deinit_device(int32_t ID) {
  ENTER(E_DEINIT_DEVICE, OFFLOAD_FAIL);
  pthread_mutex_lock(&g_life);
  int rc = llvm_plugin_ok(E_DEINIT_DEVICE) ? dev_deinit_locked(ABI_LLVM, E_DEINIT_DEVICE, ID) : -1;
  pthread_mutex_unlock(&g_life);
  return rc ? OFFLOAD_FAIL : OFFLOAD_SUCCESS;
}

OSH_EXPORT int32_t __tgt_rtl_is_valid_binary(__tgt_device_image *Image) {
  ENTER(E_IS_VALID_BINARY, 0);
  if (!llvm_plugin_ok(E_IS_VALID_BINARY)) return 0;
  if (!Image || !Image->ImageStart || (uintptr_t)Image->ImageEnd < (uintptr_t)Image->ImageStart) return 0;
  return elf_ok(Image->ImageStart, (size_t)((char *)Image->ImageEnd - (char *)Image->ImageStart)) ? 1 : 0;
}

OSH_EXPORT __tgt_target_table *__tgt_rtl_load_binary(int32_t ID, __tgt_device_image *Image) {
  ENTER(E_LOAD_BINARY, NULL);
  osh_dev *d = llvm_dev(E_LOAD_BINARY, ID);
  if (!d) return NULL;
  if (!Image || !Image->ImageStart || (uintptr_t)Image->ImageEnd < (uintptr_t)Image->ImageStart) {
    set_error("__tgt_rtl_load_binary: invalid image descriptor");
    return NULL;
  }
  size_t size = (size_t)((char *)Image->ImageEnd - (char *)Image->ImageStart);
  if (!elf_ok(Image->ImageStart, size)) {
    set_error("__tgt_rtl_load_binary: image is not an x86-64 ELF64 object");
    return NULL;
  }
  size_t n = 0;
  if (Image->EntriesBegin && Image->EntriesEnd && Image->EntriesEnd > Image->EntriesBegin)
    n = (size_t)(Image->EntriesEnd - Image->EntriesBegin);
  void *h = dlopen_bytes(Image->ImageStart, size);
  if (!h) return NULL;
  osh_image *im = calloc(1, sizeof *im);
  if (im) {
    im->handle = h;
    im->entries = calloc(n ? n : 1, sizeof *im->entries);
    im->kernels = calloc(n ? n : 1, sizeof *im->kernels);
    im->vars = calloc(n ? n : 1, sizeof *im->vars);
    im->names = calloc(n ? n : 1, sizeof *im->names);
  }
  if (!im || !im->entries || !im->kernels || !im->vars || !im->names) {
    if (im) image_free(im);
    else dlclose(h);
    set_error("__tgt_rtl_load_binary: out of host memory");
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    const __tgt_offload_entry *he = &Image->EntriesBegin[i];
    if (!he->name) {
      set_error("host entry %zu has no name", i);
      image_free(im);
      return NULL;
    }
    void *sym = lookup_sym(h, he->name);
    if (!sym) {
      set_error("symbol '%s' not found in image", he->name);
      image_free(im);
      return NULL;
    }
    __tgt_offload_entry *te = &im->entries[i];
    te->name = dup_name(im, he->name);
    if (!te->name) {
      set_error("__tgt_rtl_load_binary: out of host memory");
      image_free(im);
      return NULL;
    }
    te->size = he->size;
    te->flags = he->flags;
    te->reserved = he->reserved;
    if (he->size == 0) {
      osh_kernel *k = &im->kernels[im->num_kernels++];
      k->magic = KERNEL_MAGIC;
      memcpy(&k->fn, &sym, sizeof k->fn);
      k->num_args = 0;
      k->name = te->name;
      k->image = im;
      te->addr = k;
    } else {
      osh_var *v = &im->vars[im->num_vars++];
      v->start = (uintptr_t)sym;
      v->end = (uintptr_t)sym + he->size;
      te->addr = sym;
    }
  }
  im->num_entries = n;
  im->table.EntriesBegin = im->entries;
  /* fault injection (GCC PR 68463): report a table shorter than the host table */
  im->table.EntriesEnd = im->entries + (n - take_table_shortfall(n));
  if (!dev_add_image(d, E_LOAD_BINARY, im)) return NULL;
  return &im->table;
}

OSH_EXPORT void *__tgt_rtl_data_alloc(int32_t ID, int64_t Size, void *HstPtr, int32_t Kind) {
  (void)HstPtr;
  ENTER(E_DATA_ALLOC, NULL);
  osh_dev *d = llvm_dev(E_DATA_ALLOC, ID);
  if (!d) return NULL;
  if (Kind < 0 || Kind > 3) {
    set_error("__tgt_rtl_data_alloc: invalid target data allocation kind %d", Kind);
    return NULL;
  }
  return dev_alloc(d, E_DATA_ALLOC, Size, false);
}

OSH_EXPORT int32_t __tgt_rtl_data_delete(int32_t ID, void *TgtPtr, int32_t Kind) {
  (void)Kind; /* LLVM 14 callers pass no kind: ignore it */
  ENTER(E_DATA_DELETE, OFFLOAD_FAIL);
  osh_dev *d = llvm_dev(E_DATA_DELETE, ID);
  if (!d) return OFFLOAD_FAIL;
  return dev_free(d, E_DATA_DELETE, TgtPtr) ? OFFLOAD_FAIL : OFFLOAD_SUCCESS;
}

OSH_EXPORT int32_t __tgt_rtl_data_submit(int32_t ID, void *TgtPtr, void *HstPtr, int64_t Size) {
  ENTER(E_DATA_SUBMIT, OFFLOAD_FAIL);
  osh_dev *d = llvm_dev(E_DATA_SUBMIT, ID);
  if (!d) return OFFLOAD_FAIL;
  return dev_copy(d, E_DATA_SUBMIT, TgtPtr, HstPtr, Size, true, false) ? OFFLOAD_FAIL : OFFLOAD_SUCCESS;
}

OSH_EXPORT int32_t __tgt_rtl_data_retrieve(int32_t ID, void *HstPtr, void *TgtPtr, int64_t Size) {
  ENTER(E_DATA_RETRIEVE, OFFLOAD_FAIL);
  osh_dev *d = llvm_dev(E_DATA_RETRIEVE, ID);
  if (!d) return OFFLOAD_FAIL;
  return dev_copy(d, E_DATA_RETRIEVE, HstPtr, TgtPtr, Size, false, true) ? OFFLOAD_FAIL : OFFLOAD_SUCCESS;
}

/* LLVM 16 nextgen shape (verified against the Debian 16.0.6 plugins):
   int32_t data_lock(ID, HstPtr, Size, void **LockedPtr); int32_t data_unlock(ID, HstPtr). */
OSH_EXPORT int32_t __tgt_rtl_data_lock(int32_t ID, void *HstPtr, int64_t Size, void **LockedPtr) {
  ENTER(E_DATA_LOCK, OFFLOAD_FAIL);
  if (LockedPtr) *LockedPtr = NULL;
  osh_dev *d = llvm_dev(E_DATA_LOCK, ID);
  if (!d) return OFFLOAD_FAIL;
  if (!HstPtr || Size <= 0 || !LockedPtr) {
    set_error("__tgt_rtl_data_lock: invalid range (%p, %lld) or NULL LockedPtr", HstPtr, (long long)Size);
    return OFFLOAD_FAIL;
  }
  anode *n = malloc(sizeof *n);
  if (!n) {
    set_error("__tgt_rtl_data_lock: out of host memory");
    return OFFLOAD_FAIL;
  }
  if (mlock(HstPtr, (size_t)Size) != 0) {
    set_error("__tgt_rtl_data_lock: mlock(%p, %lld) failed: %s", HstPtr, (long long)Size, strerror(errno));
    free(n);
    return OFFLOAD_FAIL;
  }
  pthread_mutex_lock(&d->mu);
  if (!dev_live_locked(d, E_DATA_LOCK)) {
    pthread_mutex_unlock(&d->mu);
    munlock(HstPtr, (size_t)Size);
    free(n);
    return OFFLOAD_FAIL;
  }
  anode *old = t_find(d->locks, (uintptr_t)HstPtr);
  if (old) {
    old->refs++;
    if ((uint64_t)Size > old->size) old->size = (uint64_t)Size;
    free(n);
  } else {
    n->key = (uintptr_t)HstPtr;
    n->size = (uint64_t)Size;
    n->refs = 1;
    n->l = n->r = NULL;
    n->prio = next_prio(d);
    d->locks = t_insert(d->locks, n);
  }
  pthread_mutex_unlock(&d->mu);
  *LockedPtr = HstPtr;
  return OFFLOAD_SUCCESS;
}

OSH_EXPORT int32_t __tgt_rtl_data_unlock(int32_t ID, void *HstPtr) {
  ENTER(E_DATA_UNLOCK, OFFLOAD_FAIL);
  osh_dev *d = llvm_dev(E_DATA_UNLOCK, ID);
  if (!d) return OFFLOAD_FAIL;
  anode *n = NULL;
  pthread_mutex_lock(&d->mu);
  if (!dev_live_locked(d, E_DATA_UNLOCK)) {
    pthread_mutex_unlock(&d->mu);
    return OFFLOAD_FAIL;
  }
  anode *f = t_find(d->locks, (uintptr_t)HstPtr);
  if (f && --f->refs == 0) d->locks = t_erase(d->locks, (uintptr_t)HstPtr, &n);
  pthread_mutex_unlock(&d->mu);
  if (!f) {
    violation(V_UNKNOWN_POINTER, E_DATA_UNLOCK, "device %d: %p was not locked", d->id, HstPtr);
    return OFFLOAD_FAIL;
  }
  if (n) {
    munlock((void *)n->key, (size_t)n->size);
    free(n);
  }
  return OFFLOAD_SUCCESS;
}

OSH_EXPORT int32_t __tgt_rtl_launch_kernel(int32_t ID, void *Entry, void **TgtArgs, ptrdiff_t *TgtOffsets,
                                           KernelArgsTy *KernelArgs, __tgt_async_info *AsyncInfo) {
  (void)AsyncInfo; /* synchronous execution */
  ENTER(E_LAUNCH_KERNEL, OFFLOAD_FAIL);
  osh_dev *d = llvm_dev(E_LAUNCH_KERNEL, ID);
  if (!d) return OFFLOAD_FAIL;
  pthread_rwlock_rdlock(&d->img_rw);
  if (!dev_live_locked(d, E_LAUNCH_KERNEL)) {
    pthread_rwlock_unlock(&d->img_rw);
    return OFFLOAD_FAIL;
  }
  osh_kernel *k = find_kernel(d, Entry);
  if (!k) {
    pthread_rwlock_unlock(&d->img_rw);
    violation(V_UNKNOWN_KERNEL, E_LAUNCH_KERNEL, "device %d: %p is not a kernel loaded on this device", ID, Entry);
    return OFFLOAD_FAIL;
  }
  if (!KernelArgs) {
    pthread_rwlock_unlock(&d->img_rw);
    set_error("__tgt_rtl_launch_kernel: KernelArgs is NULL");
    return OFFLOAD_FAIL;
  }
  uint32_t n = KernelArgs->NumArgs;
  if (n > MAX_ARGS) {
    pthread_rwlock_unlock(&d->img_rw);
    set_error("__tgt_rtl_launch_kernel: kernel '%s': %u arguments, at most %d supported", k->name, n, MAX_ARGS);
    return OFFLOAD_FAIL;
  }
  if (n > 0 && !TgtArgs) {
    pthread_rwlock_unlock(&d->img_rw);
    set_error("__tgt_rtl_launch_kernel: TgtArgs is NULL with %u arguments", n);
    return OFFLOAD_FAIL;
  }
  void *a[MAX_ARGS] = {0};
  for (uint32_t i = 0; i < n; i++) a[i] = (void *)((intptr_t)TgtArgs[i] + (TgtOffsets ? TgtOffsets[i] : 0));
  call_kernel(k->fn, n, a);
  pthread_rwlock_unlock(&d->img_rw);
  return OFFLOAD_SUCCESS;
}

OSH_EXPORT void __tgt_rtl_print_device_info(int32_t ID) {
  ENTER_VOID(E_PRINT_DEVICE_INFO);
  osh_dev *d = llvm_dev(E_PRINT_DEVICE_INFO, ID);
  if (!d) return;
  pthread_rwlock_rdlock(&d->img_rw);
  size_t nimg = 0;
  for (osh_image *im = d->images; im; im = im->next) nimg++;
  pthread_rwlock_unlock(&d->img_rw);
  int64_t cap = atomic_load(&g_capacity[ID]);
  char capacity[48];
  if (cap > 0)
    snprintf(capacity, sizeof capacity, "%lld bytes", (long long)cap);
  else
    snprintf(capacity, sizeof capacity, "unlimited");
  printf("osh_host device %d: host malloc memory; %lld live allocations, %lld live bytes, capacity %s, %zu "
         "image(s)\n",
         ID, (long long)atomic_load(&d->live_allocs), (long long)atomic_load(&d->live_bytes),
         capacity, nimg);
  fflush(stdout);
}

/* ======================================================================================= */
/* GOMP ABI (GCC 12)                                                                      */
/* ======================================================================================= */

#define GOMP_OFFLOAD_CAP_OPENMP_400 (1u << 2)
#define OSH_GOMP_TYPE_HOST 2

OSH_EXPORT unsigned GOMP_OFFLOAD_version(void) {
  ENTER(G_VERSION, 0);
  return 1;
}

OSH_EXPORT const char *GOMP_OFFLOAD_get_name(void) {
  ENTER(G_GET_NAME, NULL);
  return "osh_host";
}

OSH_EXPORT unsigned GOMP_OFFLOAD_get_caps(void) {
  ENTER(G_GET_CAPS, 0);
  return GOMP_OFFLOAD_CAP_OPENMP_400;
}

OSH_EXPORT int GOMP_OFFLOAD_get_type(void) {
  ENTER(G_GET_TYPE, -1);
  return OSH_GOMP_TYPE_HOST;
}

OSH_EXPORT int GOMP_OFFLOAD_get_num_devices(void) {
  ENTER(G_GET_NUM_DEVICES, 0);
  return num_devices();
}

OSH_EXPORT bool GOMP_OFFLOAD_init_device(int n) {
  ENTER(G_INIT_DEVICE, false);
  pthread_mutex_lock(&g_life);
  int rc = dev_init_locked(ABI_GOMP, G_INIT_DEVICE, n);
  pthread_mutex_unlock(&g_life);
  return rc == 0;
}

OSH_EXPORT bool GOMP_OFFLOAD_fini_device(int n) {
  ENTER(G_FINI_DEVICE, false);
  pthread_mutex_lock(&g_life);
  int rc = dev_deinit_locked(ABI_GOMP, G_FINI_DEVICE, n);
  pthread_mutex_unlock(&g_life);
  return rc == 0;
}

OSH_EXPORT int GOMP_OFFLOAD_load_image(int n, unsigned version, const void *target_data, struct addr_pair **table) {
  ENTER(G_LOAD_IMAGE, -1);
  osh_dev *d = dev_check(ABI_GOMP, G_LOAD_IMAGE, n);
  if (!d) return -1;
  if ((version >> 16) > 1) {
    set_error("GOMP_OFFLOAD_load_image: image version 0x%x needs a newer library (GOMP_VERSION 1)", version);
    return -1;
  }
  const struct osh_gomp_target_data *td = target_data;
  if (!td || !table) {
    set_error("GOMP_OFFLOAD_load_image: NULL target_data or table");
    return -1;
  }
  if (td->magic != OSH_GOMP_TARGET_DATA_MAGIC || td->format_version != OSH_GOMP_TARGET_DATA_FORMAT) {
    set_error("GOMP_OFFLOAD_load_image: bad target_data (magic 0x%08x, format %u; expected 0x%08x, %u)", td->magic,
              td->format_version, OSH_GOMP_TARGET_DATA_MAGIC, OSH_GOMP_TARGET_DATA_FORMAT);
    return -1;
  }
  if ((td->num_funcs && (!td->func_names || !td->func_num_args)) || (td->num_vars && !td->var_names)) {
    set_error("GOMP_OFFLOAD_load_image: NULL name/argument arrays");
    return -1;
  }
  if (!elf_ok(td->image, (size_t)td->image_size)) {
    set_error("GOMP_OFFLOAD_load_image: image is not an x86-64 ELF64 object");
    return -1;
  }
  for (uint32_t i = 0; i < td->num_funcs; i++) {
    if (!td->func_names[i] || td->func_num_args[i] > MAX_ARGS) {
      set_error("GOMP_OFFLOAD_load_image: function %u: %s", i,
                td->func_names[i] ? "more than 16 arguments" : "NULL name");
      return -1;
    }
  }
  /* early double-load check (repeated under the write lock) */
  pthread_rwlock_rdlock(&d->img_rw);
  bool dup = find_image_key(d, td) != NULL;
  pthread_rwlock_unlock(&d->img_rw);
  if (dup) {
    violation(V_DOUBLE_LOAD, G_LOAD_IMAGE, "device %d: target_data %p already loaded", n, target_data);
    return -1;
  }
  size_t total = (size_t)td->num_funcs + td->num_vars;
  void *h = dlopen_bytes(td->image, (size_t)td->image_size);
  if (!h) return -1;
  osh_image *im = calloc(1, sizeof *im);
  struct addr_pair *tab = calloc(total ? total : 1, sizeof *tab);
  if (im) {
    im->handle = h;
    im->key = td;
    im->kernels = calloc(td->num_funcs ? td->num_funcs : 1, sizeof *im->kernels);
    im->vars = calloc(td->num_vars ? td->num_vars : 1, sizeof *im->vars);
    im->names = calloc(td->num_funcs ? td->num_funcs : 1, sizeof *im->names);
  }
  if (!im || !tab || !im->kernels || !im->vars || !im->names) {
    if (im) image_free(im);
    else dlclose(h);
    free(tab);
    set_error("GOMP_OFFLOAD_load_image: out of host memory");
    return -1;
  }
  for (uint32_t i = 0; i < td->num_funcs; i++) {
    void *sym = lookup_sym(h, td->func_names[i]);
    if (!sym) {
      set_error("symbol '%s' not found in image", td->func_names[i]);
      goto fail;
    }
    osh_kernel *k = &im->kernels[im->num_kernels++];
    k->magic = KERNEL_MAGIC;
    memcpy(&k->fn, &sym, sizeof k->fn);
    k->num_args = td->func_num_args[i];
    k->name = dup_name(im, td->func_names[i]);
    k->image = im;
    if (!k->name) {
      set_error("GOMP_OFFLOAD_load_image: out of host memory");
      goto fail;
    }
    tab[i].start = (uintptr_t)k;
    tab[i].end = (uintptr_t)k + 1;
  }
  for (uint32_t j = 0; j < td->num_vars; j++) {
    const char *name = td->var_names[j];
    void *sym = name ? lookup_sym(h, name) : NULL;
    if (!sym) {
      set_error("symbol '%s' not found in image", name ? name : "(null)");
      goto fail;
    }
    Dl_info info;
    ElfW(Sym) *es = NULL;
    if (!dladdr1(sym, &info, (void **)&es, RTLD_DL_SYMENT) || !es) {
      set_error("GOMP_OFFLOAD_load_image: cannot determine the size of '%s'", name);
      goto fail;
    }
    osh_var *v = &im->vars[im->num_vars++];
    v->start = (uintptr_t)sym;
    v->end = (uintptr_t)sym + es->st_size;
    tab[td->num_funcs + j].start = v->start;
    tab[td->num_funcs + j].end = v->end;
  }
  if (!dev_add_image(d, G_LOAD_IMAGE, im)) {
    free(tab);
    return -1;
  }
  *table = tab;
  return (int)(total - take_table_shortfall(total));
fail:
  image_free(im);
  free(tab);
  return -1;
}

OSH_EXPORT bool GOMP_OFFLOAD_unload_image(int n, unsigned version, const void *target_data) {
  (void)version;
  ENTER(G_UNLOAD_IMAGE, false);
  osh_dev *d = dev_check(ABI_GOMP, G_UNLOAD_IMAGE, n);
  if (!d) return false;
  pthread_rwlock_wrlock(&d->img_rw);
  if (!dev_live_locked(d, G_UNLOAD_IMAGE)) {
    pthread_rwlock_unlock(&d->img_rw);
    return false;
  }
  osh_image *found = NULL;
  for (osh_image **pp = &d->images; *pp; pp = &(*pp)->next) {
    if (target_data && (*pp)->key == target_data) {
      found = *pp;
      *pp = found->next;
      break;
    }
  }
  pthread_rwlock_unlock(&d->img_rw);
  if (!found) {
    violation(V_UNKNOWN_IMAGE, G_UNLOAD_IMAGE, "device %d: target_data %p not loaded", n, target_data);
    return false;
  }
  image_free(found);
  return true;
}

OSH_EXPORT void *GOMP_OFFLOAD_alloc(int n, size_t size) {
  ENTER(G_ALLOC, NULL);
  osh_dev *d = dev_check(ABI_GOMP, G_ALLOC, n);
  if (!d) return NULL;
  if (size > (size_t)INT64_MAX) {
    set_error("GOMP_OFFLOAD_alloc: size too large");
    return NULL;
  }
  return dev_alloc(d, G_ALLOC, (int64_t)size, true);
}

OSH_EXPORT bool GOMP_OFFLOAD_free(int n, void *ptr) {
  ENTER(G_FREE, false);
  osh_dev *d = dev_check(ABI_GOMP, G_FREE, n);
  if (!d) return false;
  return dev_free(d, G_FREE, ptr) == 0;
}

OSH_EXPORT bool GOMP_OFFLOAD_host2dev(int n, void *dst, const void *src, size_t len) {
  ENTER(G_HOST2DEV, false);
  osh_dev *d = dev_check(ABI_GOMP, G_HOST2DEV, n);
  if (!d) return false;
  if (len > (size_t)INT64_MAX) return false;
  return dev_copy(d, G_HOST2DEV, dst, src, (int64_t)len, true, false) == 0;
}

OSH_EXPORT bool GOMP_OFFLOAD_dev2host(int n, void *dst, const void *src, size_t len) {
  ENTER(G_DEV2HOST, false);
  osh_dev *d = dev_check(ABI_GOMP, G_DEV2HOST, n);
  if (!d) return false;
  if (len > (size_t)INT64_MAX) return false;
  return dev_copy(d, G_DEV2HOST, dst, src, (int64_t)len, false, true) == 0;
}

OSH_EXPORT bool GOMP_OFFLOAD_dev2dev(int n, void *dst, const void *src, size_t len) {
  ENTER(G_DEV2DEV, false);
  osh_dev *d = dev_check(ABI_GOMP, G_DEV2DEV, n);
  if (!d) return false;
  if (len > (size_t)INT64_MAX) return false;
  return dev_copy(d, G_DEV2DEV, dst, src, (int64_t)len, true, true) == 0;
}

OSH_EXPORT void GOMP_OFFLOAD_run(int n, void *tgt_fn, void *tgt_vars, void **args) {
  (void)args; /* GOMP target-argument vector (teams/threads): ignored */
  ENTER_VOID(G_RUN);
  osh_dev *d = dev_check(ABI_GOMP, G_RUN, n);
  if (!d) return;
  pthread_rwlock_rdlock(&d->img_rw);
  if (!dev_live_locked(d, G_RUN)) {
    pthread_rwlock_unlock(&d->img_rw);
    return;
  }
  osh_kernel *k = find_kernel(d, tgt_fn);
  if (!k) {
    pthread_rwlock_unlock(&d->img_rw);
    violation(V_UNKNOWN_KERNEL, G_RUN, "device %d: %p is not a kernel loaded on this device", n, tgt_fn);
    return;
  }
  if (k->num_args > 0 && !tgt_vars) {
    pthread_rwlock_unlock(&d->img_rw);
    set_error("GOMP_OFFLOAD_run: kernel '%s' takes %u arguments but tgt_vars is NULL", k->name, k->num_args);
    return;
  }
  void *a[MAX_ARGS] = {0};
  if (k->num_args) memcpy(a, tgt_vars, k->num_args * sizeof(void *));
  call_kernel(k->fn, k->num_args, a);
  pthread_rwlock_unlock(&d->img_rw);
}

/* ======================================================================================= */
/* control / inspection API                                                                */
/* ======================================================================================= */

static int entry_index(const char *name) {
  if (!name) return -1;
  for (int i = 0; i < E_COUNT; i++)
    if (strcmp(entry_names[i], name) == 0) return i;
  return -1;
}

OSH_EXPORT int osh_host_set_num_devices(int n) {
  ensure_init();
  if (n < 0 || n > MAX_DEV) {
    set_error("osh_host_set_num_devices: %d not in [0,%d]", n, MAX_DEV);
    return -1;
  }
  pthread_mutex_lock(&g_life);
  bool busy = atomic_load(&g_llvm_state) == ST_LIVE || osh_ol_refcount() > 0;
  for (int i = 0; i < MAX_DEV && !busy; i++)
    if (atomic_load(&g_dev[ABI_GOMP][i].state) == ST_LIVE) busy = true;
  if (!busy) atomic_store(&g_num_devices, n);
  pthread_mutex_unlock(&g_life);
  if (busy) {
    set_error("osh_host_set_num_devices: refused while the LLVM plugin, a GOMP device or liboffload is initialised");
    return -1;
  }
  return 0;
}

OSH_EXPORT int osh_host_set_capacity(int dev, int64_t bytes) {
  ensure_init();
  if (bytes < 0) bytes = 0;
  if (dev == -1) {
    for (int i = 0; i < MAX_DEV; i++) atomic_store(&g_capacity[i], bytes);
    return 0;
  }
  if (dev < 0 || dev >= num_devices()) {
    set_error("osh_host_set_capacity: bad device %d", dev);
    return -1;
  }
  atomic_store(&g_capacity[dev], bytes);
  return 0;
}

OSH_EXPORT void osh_host_set_table_shortfall(int n) {
  ensure_init();
  atomic_store(&g_table_shortfall, n > 0 ? n : 0);
}

OSH_EXPORT void osh_host_set_latency(int64_t alloc_ns, int64_t free_ns) {
  ensure_init();
  atomic_store(&g_lat_alloc, alloc_ns > 0 ? alloc_ns : 0);
  atomic_store(&g_lat_free, free_ns > 0 ? free_ns : 0);
}

OSH_EXPORT int osh_host_fail_nth(const char *entry, int64_t nth) {
  ensure_init();
  int i = entry_index(entry);
  if (i < 0 || nth < 0) {
    set_error("osh_host_fail_nth: %s", i < 0 ? "unknown entry point" : "nth must be >= 0");
    return -1;
  }
  atomic_store(&g_fail_at[i], nth);
  return 0;
}

OSH_EXPORT int64_t osh_host_call_count(const char *entry) {
  ensure_init();
  int i = entry_index(entry);
  return i < 0 ? -1 : atomic_load(&g_calls[i]);
}

static int64_t sum_dev(int dev, size_t off) {
  ensure_init();
  if (dev < -1 || dev >= MAX_DEV || (dev >= 0 && dev >= num_devices())) return -1;
  int64_t s = 0;
  for (int a = 0; a < OSH_NUM_ABIS; a++)
    for (int i = 0; i < MAX_DEV; i++)
      if (dev == -1 || dev == i) s += atomic_load((_Atomic int64_t *)((char *)&g_dev[a][i] + off));
  return s;
}

OSH_EXPORT int64_t osh_host_live_allocs(int dev) { return sum_dev(dev, offsetof(osh_dev, live_allocs)); }
OSH_EXPORT int64_t osh_host_live_bytes(int dev) { return sum_dev(dev, offsetof(osh_dev, live_bytes)); }
OSH_EXPORT int64_t osh_host_leaked_allocs(int dev) { return sum_dev(dev, offsetof(osh_dev, leaked_allocs)); }

OSH_EXPORT int64_t osh_host_violation_count(const char *kind) {
  ensure_init();
  if (!kind) {
    int64_t s = 0;
    for (int i = 0; i < V_COUNT; i++) s += atomic_load(&g_violations[i]);
    return s;
  }
  for (int i = 0; i < V_COUNT; i++)
    if (strcmp(kind, violation_names[i]) == 0) return atomic_load(&g_violations[i]);
  return -1;
}

OSH_EXPORT int osh_host_violation_log(char *buf, int64_t len) {
  ensure_init();
  pthread_mutex_lock(&g_log_mu);
  uint64_t first = g_log_total > LOG_KEEP ? g_log_total - LOG_KEEP : 0;
  int64_t need = 0, w = 0;
  bool query = !buf || len <= 0;
  for (uint64_t k = first; k < g_log_total; k++) {
    const char *line = g_log[k % LOG_KEEP];
    size_t l = strlen(line);
    need += (int64_t)l + 1;
    if (query) continue;
    for (size_t c = 0; c <= l && w < len - 1; c++) buf[w++] = c < l ? line[c] : '\n';
  }
  pthread_mutex_unlock(&g_log_mu);
  if (query) return (int)need;
  buf[w] = '\0';
  return (int)w;
}

OSH_EXPORT const char *osh_host_last_error(void) { return tls_err; }

OSH_EXPORT int osh_host_is_plugin_initialized(void) {
  ensure_init();
  return atomic_load(&g_llvm_state) == ST_LIVE;
}

OSH_EXPORT int osh_host_is_device_initialized(int abi, int dev) {
  ensure_init();
  if (abi < 0 || abi >= OSH_NUM_ABIS || dev < 0 || dev >= MAX_DEV) return -1;
  /* liboffload has no per-device init: the runtime's device init is the device's queue */
  if (abi == ABI_OL) return osh_ol_live_queues(dev) > 0;
  return atomic_load(&g_dev[abi][dev].state) == ST_LIVE;
}

OSH_EXPORT void osh_host_reset_counters(void) {
  ensure_init();
  for (int i = 0; i < E_COUNT; i++) {
    atomic_store(&g_calls[i], 0);
    atomic_store(&g_fail_at[i], 0);
  }
  for (int i = 0; i < V_COUNT; i++) atomic_store(&g_violations[i], 0);
  pthread_mutex_lock(&g_log_mu);
  g_log_total = 0;
  pthread_mutex_unlock(&g_log_mu);
}

OSH_EXPORT const char *osh_host_entry_point_name(int i) { return i >= 0 && i < E_COUNT ? entry_names[i] : NULL; }

OSH_EXPORT const char *osh_host_violation_kind_name(int i) {
  return i >= 0 && i < V_COUNT ? violation_names[i] : NULL;
}

/* The cost floor of a ctypes call pair: nothing but the call (see the header). */
OSH_EXPORT void *osh_host_nop_alloc(int32_t dev, int64_t size, void *host_ptr, int32_t kind) {
  (void)dev, (void)size, (void)host_ptr, (void)kind;
  return (void *)(uintptr_t)0x1000;
}

OSH_EXPORT int32_t osh_host_nop_delete(int32_t dev, void *ptr, int32_t kind) {
  (void)dev, (void)ptr, (void)kind;
  return 0;
}
