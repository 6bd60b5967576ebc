/* The repeat path of `target update` (libosh_interposer.so): a construct whose arguments
 * are exactly those of an earlier one, on a device whose mapping table has not changed
 * since, does the same copies again without crossing into Python.
 *
 * libomptarget 16 targetDataUpdate (omptarget.cpp) looks each item up in the device's
 * table (DeviceTy::getTgtPtrBegin, no reference taken), then copies it with the
 * plugin's __tgt_rtl_data_submit / __tgt_rtl_data_retrieve outside the table lock.  The
 * look-ups depend only on the items (base, begin, size, map type) and on the table's
 * rows; the copies only on what the look-ups found.  Python serves a construct the
 * first time (offload_shim/interposer/llvm/plan_data.py update) and, when it took the
 * plain way, hands this file the copies it made (osh_interposer_repeat_put) together
 * with the table's stamp read under the table lock before its look-ups.  The stamp of
 * a device (rp_stamps, written by Python: offload_shim/interposer/llvm/maptable.py
 * MappingTable) changes with every row inserted or removed and every shadow pointer
 * attached, and is unique over the process, so a remembered construct is only repeated
 * while its look-ups would find the same rows.  Mechanism only: which constructs may be
 * repeated is decided in Python.
 *
 * Threads.  rp_lock guards the table of remembered constructs and is never held across
 * a plugin call.  A repeat counts itself in rp_inflight for the whole of its copies;
 * osh_interposer_repeat_reset (Python: registration, unregistration, requires, device
 * teardown, close) forgets everything and waits until no repeat is in flight, so no
 * copy of a repeat runs once the runtime unloads an image or deinitialises a device.
 * A copy that fails is not reported here: the construct goes to Python, which makes all
 * of its copies again (an update's copies can be made twice) and reports the failure as
 * the general code does.
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "interposer_internal.h"

#define OSH_EXPORT __attribute__((visibility("default")))

typedef int32_t (*rp_copy_fn)(int32_t, void *, void *, int64_t);

struct rp_op {
  rp_copy_fn fn;                /* the plugin's data_submit or data_retrieve */
  int32_t id;                   /* the plugin's device id */
  uint64_t a, b;                /* its pointer arguments, in the plugin's order */
  int64_t size;                 /* bytes */
};

struct rp_entry {
  int used;
  int32_t n;
  int64_t dev;
  uint64_t types_p;             /* the map-type array's address (part of the identity) */
  uint64_t stamp;               /* the device's stamp the look-ups were made under */
  uint64_t words[4 * OSH_REPEAT_MAXN];  /* bases, begins, sizes, map types */
  int32_t nops;
  struct rp_op ops[OSH_REPEAT_MAXN];
};

/* word d < OSH_REPEAT_DEVS: device d's stamp; word OSH_REPEAT_DEVS: the epoch, one more
 * with every reset */
static uint64_t rp_stamps[OSH_REPEAT_DEVS + 1];
static int rp_on;
static int64_t rp_inflight;
static pthread_mutex_t rp_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t rp_reset_lock = PTHREAD_MUTEX_INITIALIZER;  /* never taken by a repeat */
static struct rp_entry rp_tab[OSH_REPEAT_SLOTS];
static unsigned rp_turn;        /* the way a full set gives up next (under rp_lock) */

/* the first of the OSH_REPEAT_WAYS slots a construct may be kept in (splitmix64's
 * finaliser over its identity and its begins) */
static unsigned rp_slot(int64_t dev, int32_t n, uint64_t types_p, const uint64_t *begins)
{
  uint64_t h = types_p ^ ((uint64_t)dev << 40) ^ ((uint64_t)n << 52);
  for (int32_t i = 0; i < n; i++) {
    h ^= begins[i] + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h ^= h >> 30;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 31;
  }
  return (unsigned)(h % OSH_REPEAT_SLOTS) & ~(unsigned)(OSH_REPEAT_WAYS - 1);
}

static int rp_same(const struct rp_entry *e, int32_t n, void **bases, void **args,
                   const int64_t *sizes, const int64_t *types)
{
  size_t k = (size_t)n * 8;
  return memcmp(e->words, bases, k) == 0 && memcmp(e->words + n, args, k) == 0 &&
         memcmp(e->words + 2 * n, sizes, k) == 0 && memcmp(e->words + 3 * n, types, k) == 0;
}

int osh_ip_repeat_update(int64_t dev, int32_t n, void **bases, void **args,
                         int64_t *sizes, int64_t *types, void **mappers)
{
  if (!__atomic_load_n(&rp_on, __ATOMIC_RELAXED) || mappers || n <= 0 ||
      n > OSH_REPEAT_MAXN || !bases || !args || !sizes || !types || dev < 0 ||
      dev >= OSH_REPEAT_DEVS)
    return 0;
  int done = 0;
  __atomic_fetch_add(&rp_inflight, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&rp_on, __ATOMIC_SEQ_CST)) {
    struct rp_op ops[OSH_REPEAT_MAXN];
    int32_t nops = -1;
    uint64_t stamp = __atomic_load_n(&rp_stamps[dev], __ATOMIC_SEQ_CST);
    unsigned s = rp_slot(dev, n, (uint64_t)(uintptr_t)types, (const uint64_t *)args);
    pthread_mutex_lock(&rp_lock);
    for (unsigned w = 0; w < OSH_REPEAT_WAYS; w++) {
      struct rp_entry *e = &rp_tab[s + w];
      if (e->used && e->dev == dev && e->n == n &&
          e->types_p == (uint64_t)(uintptr_t)types && e->stamp == stamp &&
          rp_same(e, n, bases, args, sizes, types)) {
        nops = e->nops;
        memcpy(ops, e->ops, (size_t)nops * sizeof ops[0]);
        break;
      }
    }
    pthread_mutex_unlock(&rp_lock);
    if (nops >= 0) {
      int32_t i = 0;
      while (i < nops && ops[i].fn(ops[i].id, (void *)(uintptr_t)ops[i].a,
                                   (void *)(uintptr_t)ops[i].b, ops[i].size) == 0)
        i++;
      done = i == nops;
    }
  }
  if (done)
    osh_ip_count(C_REPEAT);           /* osh_interposer_calls: "update_repeated" */
  __atomic_fetch_sub(&rp_inflight, 1, __ATOMIC_SEQ_CST);
  return done;
}

/* Remember a construct: its n items' words (bases, begins, sizes, map types: 4n words),
 * the address of its map-type array, the stamp of device `dev` and the epoch read
 * before its look-ups, and its copies (5 words each: function, device id, first pointer, second
 * pointer, size).  Returns 1 when kept, 0 when refused (repeats off, the stamp moved on
 * meanwhile, out of range). */
OSH_EXPORT int osh_interposer_repeat_put(int64_t dev, int32_t n, const uint64_t *words,
                                         uint64_t types_p, uint64_t stamp, uint64_t epoch,
                                         int32_t nops, const uint64_t *ops)
{
  if (n <= 0 || n > OSH_REPEAT_MAXN || nops < 0 || nops > OSH_REPEAT_MAXN || dev < 0 ||
      dev >= OSH_REPEAT_DEVS)
    return 0;
  for (int32_t i = 0; i < nops; i++)
    if (!ops[5 * i])
      return 0;
  unsigned s = rp_slot(dev, n, types_p, words + n);
  int kept = 0;
  pthread_mutex_lock(&rp_lock);
  if (__atomic_load_n(&rp_on, __ATOMIC_SEQ_CST) &&
      __atomic_load_n(&rp_stamps[dev], __ATOMIC_SEQ_CST) == stamp &&
      __atomic_load_n(&rp_stamps[OSH_REPEAT_DEVS], __ATOMIC_SEQ_CST) == epoch) {
    /* the construct's own slot when it is kept already (another stamp), else a free
     * one, else the next in turn */
    struct rp_entry *e = NULL;
    for (unsigned w = 0; w < OSH_REPEAT_WAYS && !e; w++) {
      struct rp_entry *x = &rp_tab[s + w];
      if (x->used && x->dev == dev && x->n == n && x->types_p == types_p &&
          memcmp(x->words, words, (size_t)n * 4 * 8) == 0)
        e = x;
    }
    for (unsigned w = 0; w < OSH_REPEAT_WAYS && !e; w++)
      if (!rp_tab[s + w].used)
        e = &rp_tab[s + w];
    if (!e)
      e = &rp_tab[s + (rp_turn++ % OSH_REPEAT_WAYS)];
    e->used = 1;
    e->n = n;
    e->dev = dev;
    e->types_p = types_p;
    e->stamp = stamp;
    memcpy(e->words, words, (size_t)n * 4 * 8);
    e->nops = nops;
    for (int32_t i = 0; i < nops; i++) {
      e->ops[i].fn = (rp_copy_fn)(uintptr_t)ops[5 * i];
      e->ops[i].id = (int32_t)ops[5 * i + 1];
      e->ops[i].a = ops[5 * i + 2];
      e->ops[i].b = ops[5 * i + 3];
      e->ops[i].size = (int64_t)ops[5 * i + 4];
    }
    kept = 1;
  }
  pthread_mutex_unlock(&rp_lock);
  return kept;
}

/* Forget every remembered construct, turn repeats off (on = 0), on (1) or leave them as
 * they were (2), and wait until no repeat is in flight (a repeat's copies run without
 * any lock: this is what makes an unload or a device teardown after it safe). */
OSH_EXPORT void osh_interposer_repeat_reset(int on)
{
  /* one reset at a time, the wait included: a reset that leaves the repeats as they
   * were (2) reads what the one before it left, never the 0 of a reset still waiting */
  pthread_mutex_lock(&rp_reset_lock);
  pthread_mutex_lock(&rp_lock);
  if (on == 2)
    on = __atomic_load_n(&rp_on, __ATOMIC_SEQ_CST);
  __atomic_store_n(&rp_on, 0, __ATOMIC_SEQ_CST);
  __atomic_fetch_add(&rp_stamps[OSH_REPEAT_DEVS], 1, __ATOMIC_SEQ_CST);
  for (int i = 0; i < OSH_REPEAT_SLOTS; i++)
    rp_tab[i].used = 0;
  pthread_mutex_unlock(&rp_lock);
  while (__atomic_load_n(&rp_inflight, __ATOMIC_SEQ_CST) != 0) {
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
  __atomic_store_n(&rp_on, on ? 1 : 0, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&rp_reset_lock);
}

/* The stamps: OSH_REPEAT_DEVS per-device words that Python writes, then the epoch (read
 * only); *devs and *maxn get OSH_REPEAT_DEVS and OSH_REPEAT_MAXN (most items of a
 * construct repeated here). */
OSH_EXPORT uint64_t *osh_interposer_repeat_stamps(int32_t *devs, int32_t *maxn)
{
  *devs = OSH_REPEAT_DEVS;
  *maxn = OSH_REPEAT_MAXN;
  return rp_stamps;
}
