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

#include "interposer_frame.h"
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
uint64_t rp_stamps[OSH_REPEAT_DEVS + 1];
int rp_on;
int64_t rp_inflight;
pthread_mutex_t rp_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t rp_reset_lock = PTHREAD_MUTEX_INITIALIZER;  /* never taken by a repeat */
static struct rp_entry rp_tab[OSH_REPEAT_SLOTS];
static unsigned rp_turn;        /* the way a full set gives up next (under rp_lock) */

/* kernel constructs (below) */
typedef int32_t (*rk_launch_fn)(int32_t, void *, void **, int64_t *, void *, void *);

#define RK_KA_BYTES 104         /* KernelArgsTy, versions 1..3 (LLVM 16 omptarget.h) */

struct rk_row {
  int32_t slot;
  uint32_t gen;
  uint64_t hp;                  /* host begin and size of the construct's map of it */
  int64_t size;
  int32_t from;                 /* the map says FROM */
};

struct rk_entry {
  int used;
  int32_t n;
  uint32_t version;             /* KernelArgsTy Version of the construct */
  int64_t dev;
  uint64_t host_ptr, types_p;
  uint64_t stamp;
  uint64_t words[4 * OSH_REPEAT_MAXN];
  rk_launch_fn fn;
  int32_t id;                   /* the plugin's device id */
  uint64_t entry;               /* the kernel's device entry */
  int32_t nargs;
  uint64_t args[OSH_REPEAT_MAXARGS];
  int64_t offs[OSH_REPEAT_MAXARGS];
  unsigned char ka[RK_KA_BYTES];
  int32_t nrows;
  struct rk_row rows[OSH_REPEAT_MAXN];
  /* rows of its own (maps that found no row): their host ranges, the rotation each
   * one's block comes from (interposer_rotation.c: slot and generation), the copies to
   * the device before the launch (argument order) and back after it (reverse order),
   * whose device address -- and that of the arguments with an arg_row -- is the offset
   * kept here plus the block the repeat took for row to_row / back_row / arg_row */
  int busy;                     /* a repeat of another thread runs it now */
  int32_t nfresh, nto, nback;
  uint64_t lo[OSH_REPEAT_MAXN], hi[OSH_REPEAT_MAXN];
  int32_t rq[OSH_REPEAT_MAXN];
  uint32_t rgen[OSH_REPEAT_MAXN];
  struct rp_op to[OSH_REPEAT_MAXN], back[OSH_REPEAT_MAXN];
  int8_t to_row[OSH_REPEAT_MAXN], back_row[OSH_REPEAT_MAXN], arg_row[OSH_REPEAT_MAXARGS];
};

static struct rk_entry rk_tab[OSH_REPEAT_SLOTS];
/* the repeats in flight with rows of their own (under rp_lock), and how many per
 * device (read by Python without the lock: MappingTable's look-ups ask
 * osh_interposer_repeat_wait only while it is not 0) */
#define RK_BUSY_MAX 64
static struct rk_entry *rk_busy[RK_BUSY_MAX];
static int rk_nbusy;
int64_t rk_cres[OSH_REPEAT_DEVS];
static unsigned rk_turn;
/* per row slot (under rp_lock): holds of repeats in flight, whether Python gave it up
 * while held (orphaned), whether its row left the table (dead: freed at the last
 * hold), in use, generation (one more each time it is given out) */
static int32_t rk_holds[OSH_REPEAT_ROWS];
/* per row slot (under rp_lock): references of the holds that an `exit data` of Python's
 * dropped (osh_interposer_repeat_steal): libomptarget's count of an orphaned row is
 * rk_holds - rk_stolen */
static int32_t rk_stolen[OSH_REPEAT_ROWS];
static unsigned char rk_orph[OSH_REPEAT_ROWS], rk_dead[OSH_REPEAT_ROWS],
    rk_used[OSH_REPEAT_ROWS];
static uint32_t rk_gen[OSH_REPEAT_ROWS];
static unsigned rk_next;        /* where the search for a free slot starts */
static int64_t rk_kernels;      /* kernel repeats in flight (all threads) */
__thread int64_t rp_mine; /* this thread's repeats in flight */

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
  rp_mine++;
  if (__atomic_load_n(&rp_on, __ATOMIC_SEQ_CST)) {
    struct rp_op ops[OSH_REPEAT_MAXN];
    int32_t nops = -1;
    unsigned s = rp_slot(dev, n, (uint64_t)(uintptr_t)types, (const uint64_t *)args);
    pthread_mutex_lock(&rp_lock);
    /* (read under the lock: Python moves the stamp before it ends a reservation, which
     * takes this lock) */
    uint64_t stamp = __atomic_load_n(&rp_stamps[dev], __ATOMIC_SEQ_CST);
    /* (a kernel repeat with rows of its own in flight: libomptarget's table would hold
     * them, Python's look-ups wait for them) */
    for (unsigned w = 0; w < OSH_REPEAT_WAYS && !rk_cres[dev] && !rs_count[dev] &&
                         !osh_ip_pair_out(dev); w++) {
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
  rp_mine--;
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
 * they were (2), and wait until no repeat of another thread is in flight (a repeat's
 * copies and launches run without any lock: this is what makes an unload or a device
 * teardown after it safe); on | 4 (OSH_REPEAT_NO_WAIT): do not wait.  The rows' slots
 * and holds stay (rows still in the tables keep theirs). */
OSH_EXPORT void osh_interposer_repeat_reset(int on)
{
  /* one reset at a time, the wait included: a reset that leaves the repeats as they
   * were (2) reads what the one before it left, never the 0 of a reset still waiting */
  int nowait = (on & 4) != 0;
  on &= 3;
  pthread_mutex_lock(&rp_reset_lock);
  pthread_mutex_lock(&rp_lock);
  if (on == 2)
    on = __atomic_load_n(&rp_on, __ATOMIC_SEQ_CST);
  __atomic_store_n(&rp_on, 0, __ATOMIC_SEQ_CST);
  __atomic_fetch_add(&rp_stamps[OSH_REPEAT_DEVS], 1, __ATOMIC_SEQ_CST);
  for (int i = 0; i < OSH_REPEAT_SLOTS; i++)
    rp_tab[i].used = rk_tab[i].used = 0;
  osh_ip_pair_forget(-1);
  osh_ip_rot_forget();
  pthread_mutex_unlock(&rp_lock);
  /* this thread's own repeat (a kernel that exits, or tears a device down) ends only
   * after the reset; with OSH_REPEAT_NO_WAIT (the runtime is abandoned: nothing is
   * unloaded or freed) the others are not waited for either */
  while (!nowait && __atomic_load_n(&rp_inflight, __ATOMIC_SEQ_CST) != rp_mine) {
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

/* ---- kernel constructs on rows that all exist ----------------------------------------
 * libomptarget 16 target() (omptarget.cpp) for a region whose maps all find a row:
 * targetDataBegin takes one dynamic reference on each row (no copy: the rows exist and
 * no map says `always`), the plugin's __tgt_rtl_launch_kernel runs the kernel, and
 * targetDataEnd drops the references again; a row whose last reference that drop is
 * copies back (FROM) and goes.  Python (offload_shim/interposer/llvm/plan_target.py)
 * does such a construct the first times and then hands this file its launch: the
 * plugin's launch function, the kernel's entry, the argument and offset arrays and
 * KernelArgsTy it built, with the rows it found and the table's stamp.  A repeat here,
 * while the stamp stands, takes a *hold* on each row (rk_holds, a C-side reference:
 * Python gave the row a slot), launches, and drops the holds.
 *
 * Python's reference counts do not see the holds: whenever Python is about to drop what
 * it thinks is a row's last reference it asks here first (osh_interposer_repeat_claim,
 * under the table lock; that also moves the device's stamp, so no repeat takes a new
 * hold on the row afterwards).  A row a repeat holds is then not at its last reference
 * -- libomptarget's count includes the running region's -- and Python leaves it in the
 * table at zero, *orphaned*; the repeat that drops the last hold on it crosses into
 * Python (OSH_FRAME_REPEAT_END), which ends the row as that region's targetDataEnd
 * would (copy back if its map says FROM, remove, free) unless a construct took it again
 * meanwhile.  A failed launch crosses with OSH_FRAME_REPEAT_FAILED: Python takes the
 * references the general code leaves after a failed launch and reports the failure.
 *
 * Rows of its own (maps that found no row: targetDataBegin allocates a block for each,
 * targetDataEnd frees them): a repeat takes each row's block from the rotation of its
 * size (interposer_rotation.c, the pool's free list held here) in argument order, adds
 * its address to the offsets kept for its arguments and copies, and puts the blocks
 * back in reverse argument order; a repeat whose rows of its own meet those of another
 * repeat in flight or a reservation of Python's goes to Python.
 *
 * A repeat counts itself in rp_inflight (and, per thread, in rp_mine) from its look-up
 * to the drop of its holds; the crossings come after, as any construct's callback.  A
 * reset waits for the repeats of the other threads only (a kernel that calls exit()
 * unregisters and resets from inside its own repeat).  Mechanism only: what is handed
 * over is decided in Python. */


static unsigned rk_hash(int64_t dev, int32_t n, uint64_t host_ptr, uint64_t types_p,
                        const uint64_t *begins)
{
  return rp_slot(dev, n, types_p ^ (host_ptr * 0x9E3779B97F4A7C15ull), begins);
}

/* whether host [lo, hi) meets a row of its own of a repeat in flight on device dev
 * (rp_lock held) */
static int rk_meets(int64_t dev, uint64_t lo, uint64_t hi)
{
  for (int i = 0; i < rk_nbusy; i++) {
    const struct rk_entry *b = rk_busy[i];
    if (b->dev != dev)
      continue;
    for (int32_t j = 0; j < b->nfresh; j++)
      if (lo < b->hi[j] && b->lo[j] < hi)
        return 1;
  }
  return 0;
}

/* Reservations of Python's cheap path (offload_shim/interposer/llvm/plan_target.py
 * _Reservation): the host ranges of the new rows of a kernel construct Python runs now,
 * kept out of its table until the construct ends (libomptarget's table holds them
 * meanwhile).  A repeat whose look-ups could meet one goes to Python: a kernel repeat
 * whose rows of its own meet one (its other maps found rows, which no reservation
 * meets), every update and pair repeat of the device while any is made. */
#define RS_MAX 128
static struct {
  int64_t dev;                  /* -1: a free place */
  uint64_t lo, hi, id;
} rs_tab[RS_MAX];
static int rs_used;             /* places up to the last one in use */
static uint64_t rs_next = 1;
int32_t rs_count[OSH_REPEAT_DEVS];

/* whether host [lo, hi) meets a reservation on device dev (rp_lock held) */
static int rs_meets(int64_t dev, uint64_t lo, uint64_t hi)
{
  for (int i = 0; i < rs_used; i++)
    if (rs_tab[i].id && rs_tab[i].dev == dev && lo < rs_tab[i].hi && rs_tab[i].lo < hi)
      return 1;
  return 0;
}

/* A reservation of n host ranges (pairs: begin, size) on device dev: its name, or 0
 * when there is no room (Python moves the device's stamp instead). */
OSH_EXPORT uint64_t osh_interposer_repeat_reserve(int64_t dev, int32_t n,
                                                  const uint64_t *ranges)
{
  uint64_t id = 0;
  if (dev < 0 || dev >= OSH_REPEAT_DEVS || n <= 0 || n > RS_MAX)
    return 0;
  pthread_mutex_lock(&rp_lock);
  int free_ = RS_MAX - rs_used;
  for (int i = 0; i < rs_used; i++)
    free_ += !rs_tab[i].id;
  if (free_ >= n) {
    id = rs_next++;
    for (int i = 0, k = 0; k < n; i++) {
      if (i < rs_used && rs_tab[i].id)
        continue;
      rs_tab[i].dev = dev;
      rs_tab[i].lo = ranges[2 * k];
      rs_tab[i].hi = ranges[2 * k] + (ranges[2 * k + 1] ? ranges[2 * k + 1] : 1);
      rs_tab[i].id = id;
      if (i >= rs_used)
        rs_used = i + 1;
      k++;
    }
    rs_count[dev]++;
  }
  pthread_mutex_unlock(&rp_lock);
  return id;
}

/* The reservation `id` ended (its construct ended, or its rows entered the table). */
OSH_EXPORT void osh_interposer_repeat_unreserve(uint64_t id)
{
  int64_t dev = -1;
  pthread_mutex_lock(&rp_lock);
  for (int i = 0; i < rs_used; i++)
    if (rs_tab[i].id == id) {
      dev = rs_tab[i].dev;
      rs_tab[i].id = 0;
    }
  while (rs_used && !rs_tab[rs_used - 1].id)
    rs_used--;
  if (dev >= 0)
    rs_count[dev]--;
  pthread_mutex_unlock(&rp_lock);
}

/* whether a map of e meets a row of its own of a repeat in flight or a reservation of
 * Python's (rp_lock held): rows libomptarget's table would hold that e's look-ups did
 * not see -- its rows of its own, and a map found by implicit extension, whose range
 * reaches past its row, would find them */
static int rk_overlaps(const struct rk_entry *e)
{
  int64_t dev = e->dev;
  if (!rk_nbusy && !rs_count[dev])
    return 0;
  for (int32_t i = 0; i < e->n; i++) {
    uint64_t lo = e->words[e->n + i], size = e->words[2 * e->n + i];
    uint64_t hi = lo + (size ? size : 1);
    if (rk_meets(dev, lo, hi) || (rs_count[dev] && rs_meets(dev, lo, hi)))
      return 1;
  }
  return 0;
}

int osh_ip_repeat_kernel(int64_t dev, void *loc, void *host_ptr, uint32_t version, int32_t n,
                         void **bases, void **args, int64_t *sizes, int64_t *types,
                         void **mappers, int *rc)
{
  if (!__atomic_load_n(&rp_on, __ATOMIC_RELAXED) || mappers || n < 0 ||
      n > OSH_REPEAT_MAXN || (n > 0 && (!bases || !args || !sizes || !types)) || dev < 0 ||
      dev >= OSH_REPEAT_DEVS)
    return 0;
  __atomic_fetch_add(&rp_inflight, 1, __ATOMIC_SEQ_CST);
  __atomic_fetch_add(&rk_kernels, 1, __ATOMIC_SEQ_CST);
  rp_mine++;
  int got = 0;
  rk_launch_fn fn = NULL;
  int32_t id = 0, nargs = 0, nrows = 0;
  uint64_t entry = 0;
  void *argv[OSH_REPEAT_MAXARGS > 0 ? OSH_REPEAT_MAXARGS : 1];
  int64_t offs[OSH_REPEAT_MAXARGS > 0 ? OSH_REPEAT_MAXARGS : 1];
  uint64_t ka[RK_KA_BYTES / 8];
  struct rk_row rows[OSH_REPEAT_MAXN];
  struct rk_entry *mine = NULL;         /* the entry whose memory this repeat uses */
  int32_t nto = 0, nback = 0, nfresh = 0;
  struct rp_op to[OSH_REPEAT_MAXN], back[OSH_REPEAT_MAXN];
  int32_t rq[OSH_REPEAT_MAXN];
  uint64_t blk[OSH_REPEAT_MAXN];
  if (__atomic_load_n(&rp_on, __ATOMIC_SEQ_CST)) {
    uint64_t tp = (uint64_t)(uintptr_t)types, hptr = (uint64_t)(uintptr_t)host_ptr;
    unsigned s = rk_hash(dev, n, hptr, tp, (const uint64_t *)args);
    pthread_mutex_lock(&rp_lock);
    uint64_t stamp = __atomic_load_n(&rp_stamps[dev], __ATOMIC_SEQ_CST);
    /* (rows of a repeated `enter data` out of Python's table: the stamp says where
     * they are; this only closes the window of a Python write racing that repeat) */
    for (unsigned w = 0; w < OSH_REPEAT_WAYS && !osh_ip_pair_out(dev); w++) {
      struct rk_entry *e = &rk_tab[s + w];
      if (e->used && e->dev == dev && e->n == n && e->types_p == tp &&
          e->host_ptr == hptr && e->version == version && e->stamp == stamp &&
          memcmp(e->words, bases, (size_t)n * 8) == 0 &&
          memcmp(e->words + n, args, (size_t)n * 8) == 0 &&
          memcmp(e->words + 2 * n, sizes, (size_t)n * 8) == 0 &&
          memcmp(e->words + 3 * n, types, (size_t)n * 8) == 0) {
        if ((e->nfresh && (e->busy || rk_nbusy == RK_BUSY_MAX)) || rk_overlaps(e))
          break;                        /* Python does it (and waits, where it overlaps) */
        if (e->nfresh) {
          /* the least recently freed block of each row's size, in argument order (an
           * empty or closed rotation: Python allocates, as the pool would) */
          int32_t j = 0;
          while (j < e->nfresh && osh_ip_rot_take(e->rq[j], e->rgen[j], &blk[j]))
            j++;
          if (j < e->nfresh) {
            while (j-- > 0)
              osh_ip_rot_untake(e->rq[j], blk[j]);
            break;
          }
          nfresh = e->nfresh;
          memcpy(rq, e->rq, (size_t)nfresh * sizeof rq[0]);
          e->busy = 1;
          mine = e;
          rk_busy[rk_nbusy++] = e;
          __atomic_fetch_add(&rk_cres[dev], 1, __ATOMIC_SEQ_CST);
          nto = e->nto;
          nback = e->nback;
          memcpy(to, e->to, (size_t)nto * sizeof to[0]);
          memcpy(back, e->back, (size_t)nback * sizeof back[0]);
          for (int32_t i = 0; i < nto; i++)
            to[i].a += blk[e->to_row[i]];
          for (int32_t i = 0; i < nback; i++)
            back[i].b += blk[e->back_row[i]];
        }
        fn = e->fn;
        id = e->id;
        entry = e->entry;
        nargs = e->nargs;
        for (int32_t i = 0; i < nargs; i++) {
          uint64_t a = e->args[i];
          if (nfresh && e->arg_row[i] >= 0)
            a += blk[e->arg_row[i]];
          argv[i] = (void *)(uintptr_t)a;
          offs[i] = e->offs[i];
        }
        memcpy(ka, e->ka, RK_KA_BYTES);
        nrows = e->nrows;
        memcpy(rows, e->rows, (size_t)nrows * sizeof rows[0]);
        for (int32_t i = 0; i < nrows; i++)
          rk_holds[rows[i].slot]++;
        got = 1;
        break;
      }
    }
    pthread_mutex_unlock(&rp_lock);
  }
  int32_t lrc = 0, phase = 0;           /* phase of a failure: 1 to, 2 launch, 3 back */
  if (got) {
    for (int32_t i = 0; i < nto && lrc == 0; i++)
      if ((lrc = to[i].fn(to[i].id, (void *)(uintptr_t)to[i].a, (void *)(uintptr_t)to[i].b,
                          to[i].size)) != 0)
        phase = 1;
    if (lrc == 0) {
      void *ap = argv;
      memcpy((unsigned char *)ka + 8, &ap, 8);     /* ArgBasePtrs */
      memcpy((unsigned char *)ka + 16, &ap, 8);    /* ArgPtrs */
      if ((lrc = fn(id, (void *)(uintptr_t)entry, argv, offs, ka, NULL)) != 0)
        phase = 2;
    }
    for (int32_t i = 0; i < nback && lrc == 0; i++)
      if ((lrc = back[i].fn(back[i].id, (void *)(uintptr_t)back[i].a,
                            (void *)(uintptr_t)back[i].b, back[i].size)) != 0)
        phase = 3;
  }
  /* drop the holds; the orphaned rows whose last hold this was go to Python.  In
   * reverse map order, as targetDataEnd: of two maps of one row the first drops the
   * last reference, and its map decides whether the row is copied back */
  uint64_t ends[5 * OSH_REPEAT_MAXN];
  int32_t nends = 0;
  if (mine) {
    pthread_mutex_lock(&rp_lock);
    /* the blocks are freed in reverse argument order (targetDataEnd) */
    for (int32_t j = nfresh - 1; j >= 0; j--)
      osh_ip_rot_put(rq[j], blk[j]);
    mine->busy = 0;
    for (int i = 0; i < rk_nbusy; i++)
      if (rk_busy[i] == mine) {
        rk_busy[i] = rk_busy[--rk_nbusy];
        break;
      }
    __atomic_fetch_sub(&rk_cres[dev], 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&rp_lock);
  }
  if (got && nrows) {
    pthread_mutex_lock(&rp_lock);
    for (int32_t i = nrows - 1; i >= 0; i--) {
      int32_t sl = rows[i].slot;
      int32_t h = --rk_holds[sl];
      if (rk_dead[sl]) {
        if (h == 0) {
          rk_dead[sl] = rk_orph[sl] = 0;
          rk_stolen[sl] = 0;
          rk_used[sl] = 0;
        }
        continue;
      }
      /* the region's reference is the last one once the holds left are those stolen */
      if (h > rk_stolen[sl])
        continue;
      if (h == 0)
        rk_stolen[sl] = 0;
      if (rk_orph[sl]) {
        rk_orph[sl] = 0;
        if (lrc == 0) {
          uint64_t *w = &ends[5 * nends++];
          w[0] = (uint64_t)sl;
          w[1] = rows[i].gen;
          w[2] = rows[i].hp;
          w[3] = (uint64_t)rows[i].size;
          w[4] = (uint64_t)rows[i].from;
        }
      }
    }
    pthread_mutex_unlock(&rp_lock);
  }
  rp_mine--;
  __atomic_fetch_sub(&rk_kernels, 1, __ATOMIC_SEQ_CST);
  __atomic_fetch_sub(&rp_inflight, 1, __ATOMIC_SEQ_CST);
  if (!got)
    return 0;
  osh_ip_count(C_KREPEAT);            /* osh_interposer_calls: "kernel_repeated" */
  *rc = 0;
  if (lrc != 0) {
    uint64_t all[5 * OSH_REPEAT_MAXN];
    for (int32_t i = 0; i < nrows; i++) {
      uint64_t *w = &all[5 * i];
      w[0] = (uint64_t)rows[i].slot;
      w[1] = rows[i].gen;
      w[2] = rows[i].hp;
      w[3] = (uint64_t)rows[i].size;
      w[4] = (uint64_t)rows[i].from;
    }
    int r = osh_ip_repeat_cross(OSH_FRAME_REPEAT_FAILED, dev, loc, host_ptr,
                                (int64_t)(((uint64_t)phase << 32) | (uint32_t)lrc), nrows,
                                all);
    *rc = r == INT32_MIN ? -1 : r;
  } else if (nends) {
    int r = osh_ip_repeat_cross(OSH_FRAME_REPEAT_END, dev, loc, host_ptr, 0, nends, ends);
    *rc = r == INT32_MIN ? 0 : r;
  }
  return 1;
}

/* Remember a kernel construct (Python: offload_shim/interposer/llvm/repeat.py
 * Repeats.put_kernel): device `dev`, region `host_ptr`, KernelArgsTy `version`, its n
 * maps' words (bases, begins, sizes, map types: 4n words) and map-type array address,
 * the stamp and epoch read before its look-ups; its launch (the plugin's launch
 * function, device id, kernel entry, nargs arguments and offsets, a KernelArgsTy of
 * RK_KA_BYTES whose two argument pointers are filled per launch) and the rows it holds
 * (5 words each: slot, generation, host begin, size, FROM); its nfresh rows of its own
 * (4 words each: host begin, size, rotation slot and generation:
 * osh_interposer_rotation_open), which of them each argument points into (arg_row, -1:
 * none; args holds the offset into the block then) and its copies to the device and
 * back (4 words each: row, offset into its block, host address, size).  Returns 1 when
 * kept, 0 when refused (repeats off, the stamp moved on meanwhile, a slot not live, out
 * of range). */
OSH_EXPORT int osh_interposer_repeat_put_kernel(int64_t dev, uint64_t host_ptr,
                                                uint32_t version, int32_t n,
                                                const uint64_t *words, uint64_t types_p,
                                                uint64_t stamp, uint64_t epoch, uint64_t fn,
                                                int32_t id, uint64_t entry, int32_t nargs,
                                                const uint64_t *args, const int64_t *offs,
                                                const unsigned char *ka, int32_t nrows,
                                                const uint64_t *rows, uint64_t sub_fn,
                                                uint64_t ret_fn, int32_t nfresh,
                                                const uint64_t *fresh, const int32_t *arg_row,
                                                int32_t nto, const uint64_t *to_ops,
                                                int32_t nback, const uint64_t *back_ops)
{
  if (n < 0 || n > OSH_REPEAT_MAXN || nrows < 0 || nrows > OSH_REPEAT_MAXN || dev < 0 ||
      dev >= OSH_REPEAT_DEVS || !fn || nargs < 0 || nargs > OSH_REPEAT_MAXARGS || !ka ||
      nfresh < 0 || nfresh > OSH_REPEAT_MAXN || nto < 0 || nto > nfresh || nback < 0 ||
      nback > nfresh || ((nto || nback) && (!sub_fn || !ret_fn)) || (nfresh && !arg_row))
    return 0;
  for (int32_t i = 0; i < nrows; i++)
    if (rows[5 * i] >= OSH_REPEAT_ROWS)
      return 0;
  for (int32_t i = 0; i < nfresh; i++)
    if (fresh[4 * i + 2] >= OSH_ROT_MAX)
      return 0;
  for (int32_t i = 0; i < nargs && nfresh; i++)
    if (arg_row[i] < -1 || arg_row[i] >= nfresh)
      return 0;
  for (int32_t i = 0; i < nto + nback; i++) {
    const uint64_t *op = i < nto ? &to_ops[4 * i] : &back_ops[4 * (i - nto)];
    if (op[0] >= (uint64_t)nfresh)
      return 0;
  }
  unsigned s = rk_hash(dev, n, host_ptr, types_p, words + n);
  int kept = 0;
  pthread_mutex_lock(&rp_lock);
  int live = 1;
  for (int32_t i = 0; i < nrows && live; i++) {
    uint64_t sl = rows[5 * i];
    live = rk_used[sl] && !rk_dead[sl] && rk_gen[sl] == (uint32_t)rows[5 * i + 1];
  }
  if (live && __atomic_load_n(&rp_on, __ATOMIC_SEQ_CST) &&
      __atomic_load_n(&rp_stamps[dev], __ATOMIC_SEQ_CST) == stamp &&
      __atomic_load_n(&rp_stamps[OSH_REPEAT_DEVS], __ATOMIC_SEQ_CST) == epoch) {
    /* the construct's own slot when it is kept already, else a free one, else the
     * next in turn; never one whose memory a repeat uses now */
    struct rk_entry *e = NULL;
    for (unsigned w = 0; w < OSH_REPEAT_WAYS && !e; w++) {
      struct rk_entry *x = &rk_tab[s + w];
      if (x->used && x->dev == dev && x->n == n && x->types_p == types_p &&
          x->host_ptr == host_ptr && x->version == version &&
          memcmp(x->words, words, (size_t)n * 4 * 8) == 0)
        e = x;
    }
    if (e && e->busy)
      goto refused;
    for (unsigned w = 0; w < OSH_REPEAT_WAYS && !e; w++)
      if (!rk_tab[s + w].used)
        e = &rk_tab[s + w];
    for (unsigned k = 0; k < OSH_REPEAT_WAYS && !e; k++) {
      struct rk_entry *x = &rk_tab[s + (rk_turn++ % OSH_REPEAT_WAYS)];
      if (!x->busy)
        e = x;
    }
    if (!e)
      goto refused;
    e->used = 1;
    e->n = n;
    e->version = version;
    e->dev = dev;
    e->host_ptr = host_ptr;
    e->types_p = types_p;
    e->stamp = stamp;
    memcpy(e->words, words, (size_t)n * 4 * 8);
    e->fn = (rk_launch_fn)(uintptr_t)fn;
    e->id = id;
    e->entry = entry;
    e->nargs = nargs;
    memcpy(e->args, args, (size_t)nargs * 8);
    memcpy(e->offs, offs, (size_t)nargs * 8);
    memcpy(e->ka, ka, RK_KA_BYTES);
    e->nrows = nrows;
    for (int32_t i = 0; i < nrows; i++) {
      e->rows[i].slot = (int32_t)rows[5 * i];
      e->rows[i].gen = (uint32_t)rows[5 * i + 1];
      e->rows[i].hp = rows[5 * i + 2];
      e->rows[i].size = (int64_t)rows[5 * i + 3];
      e->rows[i].from = (int32_t)rows[5 * i + 4];
    }
    e->busy = 0;
    e->nfresh = nfresh;
    for (int32_t i = 0; i < nfresh; i++) {
      e->lo[i] = fresh[4 * i];
      e->hi[i] = fresh[4 * i] + (fresh[4 * i + 1] ? fresh[4 * i + 1] : 1);
      e->rq[i] = (int32_t)fresh[4 * i + 2];
      e->rgen[i] = (uint32_t)fresh[4 * i + 3];
    }
    for (int32_t i = 0; i < nargs; i++)
      e->arg_row[i] = (int8_t)(nfresh ? arg_row[i] : -1);
    e->nto = nto;
    for (int32_t i = 0; i < nto; i++) {        /* submit(id, tgt, hst, size) */
      e->to_row[i] = (int8_t)to_ops[4 * i];
      e->to[i].fn = (rp_copy_fn)(uintptr_t)sub_fn;
      e->to[i].id = id;
      e->to[i].a = to_ops[4 * i + 1];
      e->to[i].b = to_ops[4 * i + 2];
      e->to[i].size = (int64_t)to_ops[4 * i + 3];
    }
    e->nback = nback;
    for (int32_t i = 0; i < nback; i++) {      /* retrieve(id, hst, tgt, size) */
      e->back_row[i] = (int8_t)back_ops[4 * i];
      e->back[i].fn = (rp_copy_fn)(uintptr_t)ret_fn;
      e->back[i].id = id;
      e->back[i].a = back_ops[4 * i + 2];
      e->back[i].b = back_ops[4 * i + 1];
      e->back[i].size = (int64_t)back_ops[4 * i + 3];
    }
    kept = 1;
  }
refused:
  pthread_mutex_unlock(&rp_lock);
  return kept;
}

/* Wait while host [hp, hp + size) (hp alone for size 0) meets a row of its own of a
 * repeat in flight on device dev (Python's look-ups, table lock held: libomptarget's
 * table would hold that row; the look-up waits until the repeat's construct is over,
 * as if it came after it), at most timeout_ns.  1 when it gave up waiting. */
OSH_EXPORT int osh_interposer_repeat_wait(int64_t dev, uint64_t hp, int64_t size,
                                          int64_t timeout_ns)
{
  uint64_t hi = hp + (uint64_t)(size > 0 ? size : 1);
  struct timespec t0, now;
  int counted = 0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    pthread_mutex_lock(&rp_lock);
    int meets = rk_meets(dev, hp, hi);
    pthread_mutex_unlock(&rp_lock);
    if (!meets)
      return 0;
    if (!counted++)
      osh_ip_count(C_KWAIT);            /* osh_interposer_calls: "kernel_waited" */
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - t0.tv_sec) * 1000000000LL + (now.tv_nsec - t0.tv_nsec) > timeout_ns)
      return 1;
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
}

/* The repeats in flight with rows of their own, per device (OSH_REPEAT_DEVS words). */
OSH_EXPORT int64_t *osh_interposer_repeat_busy(void)
{
  return rk_cres;
}

/* A slot for a row kernel repeats may hold: its index (and *gen its generation), -1 when
 * every slot is in use. */
OSH_EXPORT int32_t osh_interposer_repeat_slot_new(uint32_t *gen)
{
  int32_t got = -1;
  pthread_mutex_lock(&rp_lock);
  for (unsigned k = 0; k < OSH_REPEAT_ROWS; k++) {
    unsigned sl = (rk_next + k) % OSH_REPEAT_ROWS;
    if (!rk_used[sl]) {
      rk_used[sl] = 1;
      rk_dead[sl] = rk_orph[sl] = 0;
      rk_holds[sl] = rk_stolen[sl] = 0;
      *gen = ++rk_gen[sl];
      rk_next = sl + 1;
      got = (int32_t)sl;
      break;
    }
  }
  pthread_mutex_unlock(&rp_lock);
  return got;
}

/* The slot's row left the table: the slot is free again once no repeat holds it. */
OSH_EXPORT void osh_interposer_repeat_slot_drop(int32_t slot)
{
  if (slot < 0 || slot >= OSH_REPEAT_ROWS)
    return;
  pthread_mutex_lock(&rp_lock);
  if (rk_holds[slot] > 0) {
    rk_dead[slot] = 1;
  } else {
    rk_used[slot] = 0;
    rk_dead[slot] = rk_orph[slot] = 0;
  }
  pthread_mutex_unlock(&rp_lock);
}

/* Python is about to drop what it counts as the last reference of the slot's row
 * (table lock held): device `dev`'s stamp becomes `stamp` (no repeat takes a new hold
 * on the row from now on) and, when a repeat holds the row, it is orphaned -- the last
 * hold's drop hands it back (OSH_FRAME_REPEAT_END).  Returns 1 when held (the
 * reference is not the last), 0 otherwise. */
OSH_EXPORT int osh_interposer_repeat_claim(int32_t slot, int64_t dev, uint64_t stamp)
{
  int held = 0;
  pthread_mutex_lock(&rp_lock);
  if (dev >= 0 && dev < OSH_REPEAT_DEVS)
    __atomic_store_n(&rp_stamps[dev], stamp, __ATOMIC_SEQ_CST);
  if (slot >= 0 && slot < OSH_REPEAT_ROWS && rk_used[slot] &&
      rk_holds[slot] - rk_stolen[slot] > 0) {
    rk_orph[slot] = 1;
    held = 1;
  }
  pthread_mutex_unlock(&rp_lock);
  if (held)
    osh_ip_count(C_KORPHAN);            /* osh_interposer_calls: "kernel_orphaned" */
  return held;
}

/* Whether a kernel repeat holds the slot's row now (nothing changes: a look-up that
 * drops no reference, omp_target_is_present or a `target update`, asks this rather than
 * osh_interposer_repeat_claim, which would move the stamp and stop the repeats). */
OSH_EXPORT int osh_interposer_repeat_held(int32_t slot)
{
  int held = 0;
  if (slot < 0 || slot >= OSH_REPEAT_ROWS)
    return 0;
  pthread_mutex_lock(&rp_lock);
  held = rk_used[slot] && rk_holds[slot] - rk_stolen[slot] > 0;
  pthread_mutex_unlock(&rp_lock);
  return held;
}

/* Python drops a reference of the slot's row while its own count is at zero (the row
 * is orphaned: the references left are the regions' that repeats hold) -- an `exit
 * data` beyond the program's `enter data`, which under libomptarget 16 drops one of
 * the running regions' references.  Returns 1 when it was the last (Python ends the row
 * now; the repeats' ends find it gone), 0 when one of several (the last repeat's end
 * hands the row back then), -1 when no repeat holds it. */
OSH_EXPORT int osh_interposer_repeat_steal(int32_t slot)
{
  int r = -1;
  if (slot < 0 || slot >= OSH_REPEAT_ROWS)
    return -1;
  pthread_mutex_lock(&rp_lock);
  int32_t left = rk_holds[slot] - rk_stolen[slot];
  if (rk_used[slot] && !rk_dead[slot] && left > 0) {
    rk_stolen[slot]++;
    r = left == 1;
  }
  pthread_mutex_unlock(&rp_lock);
  return r;
}

/* Kernel repeats in flight now, of all threads (`offload-shim run`'s exit: a process
 * that exits while a kernel runs is abandoned, not torn down). */
OSH_EXPORT int64_t osh_interposer_repeat_kernels(void)
{
  return __atomic_load_n(&rk_kernels, __ATOMIC_SEQ_CST);
}

/* Forget the kept `enter data` / `exit data` pairs of device dev whose rows are not out
 * and write their lease tokens to tokens (at most max): Python's pool is about to be
 * used for something else, and under libomptarget their blocks went back to it at the
 * end of their last repeat (Python gives the leases back before that use:
 * offload_shim/interposer/llvm/repeat.py Repeats._evictor; the kernel constructs' blocks
 * come back with osh_interposer_rotation_drain).  Returns how many; *busy gets how many
 * pairs stay (rows out, no room). */
OSH_EXPORT int32_t osh_interposer_repeat_drop_held(int64_t dev, uint64_t *tokens, int32_t max,
                                                   int32_t *busy)
{
  int32_t got = 0, left = 0;
  pthread_mutex_lock(&rp_lock);
  got += osh_ip_pair_drop(dev, tokens + got, max - got, &left);
  pthread_mutex_unlock(&rp_lock);
  *busy = left;
  return got;
}
