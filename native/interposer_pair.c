/* Repeats of `target enter data` / `target exit data` pairs (libosh_interposer.so): a
 * loop that maps data in and out again (`enter data map(to: b[0:n])` ... `exit data
 * map(from: b[0:n])`, or a `target data` region around host code) makes the same rows,
 * copies and frees every time while nothing else changes the device's mapping table.
 *
 * libomptarget 16 targetDataBegin (omptarget.cpp) looks each item up, and for one that
 * finds no row allocates device memory (the memory manager of the nextgen plugins:
 * the same block the previous iteration freed), inserts a row with one dynamic
 * reference and copies `to` items; targetDataEnd drops the references in reverse order
 * and, for rows reaching zero, copies `from` items back, removes the rows and frees
 * their memory.  Python (offload_shim/interposer/llvm/plan_data.py) serves such a pair
 * the first times; when an `exit data` removed exactly the rows one `enter data` made,
 * item for item, and the table's stamp went back to what it was before that enter (the
 * rows were the only change: maptable.py MappingTable.remove), it hands this file the
 * pair (osh_interposer_repeat_put_pair) with the rows' device memory as a lease kept
 * here between repeats (as the kernel repeats keep theirs: interposer_repeat.c).
 *
 * The same `enter data` again -- same device, map-type array, bases, begins, sizes and
 * map types -- while the device's stamp is the one it was handed under makes its `to`
 * copies into the lease's blocks; its rows are then *out*: rows of libomptarget's table
 * that are not in Python's.  The stamp becomes a value fixed for the pair (`mid`), and
 * the device's word of pr_out tells Python's look-ups to take the rows in first
 * (osh_interposer_repeat_take: Python inserts them as ordinary rows owning the
 * lease's blocks, and the pair is forgotten).  The matching `exit data` while the rows
 * are still out and the stamp still `mid` makes the `from` copies (reverse order, as
 * Python handed them) and sets the stamp back: the table is what it was.
 *
 * Threads.  rp_lock guards everything here and is never held across a plugin call;
 * while copies of an enter or an exit run, pr_state says so and a take waits for them
 * (they take no Python lock).  A reset (interposer_repeat.c) forgets the pairs whose
 * rows are not out; rows out stay until Python takes them (they hold the program's
 * data) and are never repeated again.  A failed copy sends the construct to Python:
 * an enter's rows are dropped first (Python makes them anew), an exit's rows stay out
 * (Python takes them and makes the copies again, reporting the failure). */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "interposer_internal.h"

#define OSH_EXPORT __attribute__((visibility("default")))
#define PR_SLOTS 64

typedef int32_t (*pr_copy_fn)(int32_t, void *, void *, int64_t);

struct pr_op {
  pr_copy_fn fn;                /* the plugin's data_submit or data_retrieve */
  int32_t id;
  uint64_t a, b;
  int64_t size;
};

struct pr_entry {
  int used;
  int gone;                     /* a reset came while its rows were out: never again */
  int64_t dev;
  uint64_t stamp, mid;          /* the device's stamp before the enter, and after it */
  uint64_t token;               /* Python's name for the lease of the rows' memory */
  int32_t n, xn;
  uint64_t types_p, xtypes_p;
  uint64_t words[4 * OSH_REPEAT_MAXN], xwords[4 * OSH_REPEAT_MAXN];
  int32_t nto, nback;
  struct pr_op to[OSH_REPEAT_MAXN], back[OSH_REPEAT_MAXN];
};

static struct pr_entry pr_tab[PR_SLOTS];
static unsigned pr_turn;
static int pr_used;             /* entries in use (written under rp_lock): 0 spares the lock */
/* per device (under rp_lock): the pair whose rows are out, and what runs on them (0:
 * nothing, 1: the enter's copies, 2: nothing, rows stand, 3: the exit's copies) */
static struct pr_entry *pr_pend[OSH_REPEAT_DEVS];
static int pr_state[OSH_REPEAT_DEVS];
/* per device: 1 while rows are out (read by Python without the lock: MappingTable's
 * look-ups take them in first) */
static int64_t pr_out[OSH_REPEAT_DEVS];

static int pr_same(const uint64_t *w, int32_t n, void **bases, void **args,
                   const int64_t *sizes, const int64_t *types)
{
  size_t k = (size_t)n * 8;
  return memcmp(w, bases, k) == 0 && memcmp(w + n, args, k) == 0 &&
         memcmp(w + 2 * n, sizes, k) == 0 && memcmp(w + 3 * n, types, k) == 0;
}

static int pr_copies(const struct pr_op *ops, int32_t nops)
{
  int32_t i = 0;
  while (i < nops && ops[i].fn(ops[i].id, (void *)(uintptr_t)ops[i].a,
                               (void *)(uintptr_t)ops[i].b, ops[i].size) == 0)
    i++;
  return i == nops;
}

static int pr_args_ok(int64_t dev, int32_t n, void **bases, void **args, int64_t *sizes,
                      int64_t *types, void **mappers)
{
  return __atomic_load_n(&rp_on, __ATOMIC_RELAXED) && !mappers && n > 0 &&
         n <= OSH_REPEAT_MAXN && bases && args && sizes && types && dev >= 0 &&
         dev < OSH_REPEAT_DEVS;
}

/* (rp_lock held) the remembered pair an enter of these arguments repeats now, its rows
 * put out and its `to` copies in ops; NULL when none */
static struct pr_entry *pr_enter_locked(int64_t dev, int32_t n, void **bases, void **args,
                                        int64_t *sizes, int64_t *types, struct pr_op *ops,
                                        int32_t *nops)
{
  /* (a kernel repeat with rows of its own in flight: libomptarget's table holds them,
   * and one of them may be an item of this enter) */
  if (pr_pend[dev] || rk_cres[dev] || rs_count[dev])
    return NULL;
  uint64_t stamp = __atomic_load_n(&rp_stamps[dev], __ATOMIC_SEQ_CST);
  struct pr_entry *e = NULL;
  for (int i = 0; i < PR_SLOTS && !e; i++) {
    struct pr_entry *x = &pr_tab[i];
    if (x->used && !x->gone && x->dev == dev && x->n == n && x->stamp == stamp &&
        x->types_p == (uint64_t)(uintptr_t)types &&
        pr_same(x->words, n, bases, args, sizes, types))
      e = x;
  }
  /* Python writes the stamp under its table lock, not this one: the rows go out only if
   * it did not move meanwhile */
  if (!e || !__atomic_compare_exchange_n(&rp_stamps[dev], &stamp, e->mid, 0,
                                         __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
    return NULL;
  pr_pend[dev] = e;
  pr_state[dev] = 1;
  __atomic_store_n(&pr_out[dev], 1, __ATOMIC_SEQ_CST);
  *nops = e->nto;
  memcpy(ops, e->to, (size_t)e->nto * sizeof ops[0]);
  return e;
}

/* (rp_lock held) the pair whose rows are out that an exit of these arguments ends now,
 * its `from` copies in ops; NULL when none */
static struct pr_entry *pr_exit_locked(int64_t dev, int32_t n, void **bases, void **args,
                                       int64_t *sizes, int64_t *types, struct pr_op *ops,
                                       int32_t *nops)
{
  struct pr_entry *e = pr_pend[dev];
  if (!e || pr_state[dev] != 2 || e->gone || e->xn != n || rs_count[dev] ||
      e->xtypes_p != (uint64_t)(uintptr_t)types ||
      __atomic_load_n(&rp_stamps[dev], __ATOMIC_SEQ_CST) != e->mid ||
      !pr_same(e->xwords, n, bases, args, sizes, types))
    return NULL;
  pr_state[dev] = 3;
  *nops = e->nback;
  memcpy(ops, e->back, (size_t)e->nback * sizeof ops[0]);
  return e;
}

/* (rp_lock held) the rows of device dev are no longer out: the exit ended them (or the
 * enter's copies failed), and the stamp goes back to the one before the enter unless
 * Python moved it meanwhile */
static void pr_in_locked(int64_t dev, struct pr_entry *e)
{
  uint64_t mid = e->mid;
  pr_pend[dev] = NULL;
  pr_state[dev] = 0;
  __atomic_store_n(&pr_out[dev], 0, __ATOMIC_SEQ_CST);
  __atomic_compare_exchange_n(&rp_stamps[dev], &mid, e->stamp, 0, __ATOMIC_SEQ_CST,
                              __ATOMIC_SEQ_CST);
}

/* An enter (is_exit 0) or exit (1) data construct repeated here: 1 when done. */
static int pr_repeat(int is_exit, int64_t dev, int32_t n, void **bases, void **args,
                     int64_t *sizes, int64_t *types)
{
  struct pr_op ops[OSH_REPEAT_MAXN];
  int32_t nops = 0;
  int done = 0;
  __atomic_fetch_add(&rp_inflight, 1, __ATOMIC_SEQ_CST);
  rp_mine++;
  pthread_mutex_lock(&rp_lock);
  struct pr_entry *e = NULL;
  if (__atomic_load_n(&rp_on, __ATOMIC_SEQ_CST))
    e = (is_exit ? pr_exit_locked : pr_enter_locked)(dev, n, bases, args, sizes, types, ops,
                                                      &nops);
  pthread_mutex_unlock(&rp_lock);
  if (e) {
    int ok = pr_copies(ops, nops);
    pthread_mutex_lock(&rp_lock);
    if (ok) {
      if (is_exit)
        pr_in_locked(dev, e);
      else
        pr_state[dev] = 2;
      done = 1;
    } else if (is_exit) {
      pr_state[dev] = 2;              /* Python takes the rows and ends them itself */
    } else {
      pr_in_locked(dev, e);           /* the rows never were: Python makes the construct */
    }
    pthread_mutex_unlock(&rp_lock);
  }
  if (done)     /* osh_interposer_calls: "exit_repeated" / "enter_repeated" */
    osh_ip_count(is_exit ? C_XREPEAT : C_EREPEAT);
  rp_mine--;
  __atomic_fetch_sub(&rp_inflight, 1, __ATOMIC_SEQ_CST);
  return done;
}

int osh_ip_repeat_enter(int64_t dev, int32_t n, void **bases, void **args, int64_t *sizes,
                        int64_t *types, void **mappers)
{
  if (!pr_args_ok(dev, n, bases, args, sizes, types, mappers) ||
      !__atomic_load_n(&pr_used, __ATOMIC_RELAXED))
    return 0;
  return pr_repeat(0, dev, n, bases, args, sizes, types);
}

int osh_ip_repeat_exit(int64_t dev, int32_t n, void **bases, void **args, int64_t *sizes,
                       int64_t *types, void **mappers)
{
  if (!pr_args_ok(dev, n, bases, args, sizes, types, mappers) ||
      !__atomic_load_n(&pr_out[dev], __ATOMIC_RELAXED))
    return 0;
  return pr_repeat(1, dev, n, bases, args, sizes, types);
}

/* n copies from Python's 5 words each: function, plugin device id, first pointer,
 * second pointer, size */
static void pr_ops_from(struct pr_op *ops, const uint64_t *words, int32_t n)
{
  for (int32_t i = 0; i < n; i++) {
    ops[i].fn = (pr_copy_fn)(uintptr_t)words[5 * i];
    ops[i].id = (int32_t)words[5 * i + 1];
    ops[i].a = words[5 * i + 2];
    ops[i].b = words[5 * i + 3];
    ops[i].size = (int64_t)words[5 * i + 4];
  }
}

/* Remember a pair (Python, after the exit it served removed the enter's rows and the
 * stamp of device dev went back to `stamp`): the enter's and the exit's words (4n each:
 * bases, begins, sizes, map types) and map-type arrays, the stamp and epoch read
 * before the enter, `mid` (the stamp its repeats leave), the lease's token, the
 * enter's `to` copies and the exit's `from` copies (5 words each: function, plugin
 * device id, first pointer, second pointer, size).  *evicted gets the token of a pair
 * it replaced (0: none).  1 when kept, 0 when refused (repeats off, the stamp or epoch
 * moved on, rows out on the device, out of range). */
OSH_EXPORT int osh_interposer_repeat_put_pair(int64_t dev, int32_t n, const uint64_t *words,
                                              uint64_t types_p, int32_t xn,
                                              const uint64_t *xwords, uint64_t xtypes_p,
                                              uint64_t stamp, uint64_t epoch, uint64_t mid,
                                              uint64_t token, int32_t nto,
                                              const uint64_t *to_ops, int32_t nback,
                                              const uint64_t *back_ops, uint64_t *evicted)
{
  *evicted = 0;
  if (n <= 0 || n > OSH_REPEAT_MAXN || xn <= 0 || xn > OSH_REPEAT_MAXN || nto < 0 ||
      nto > OSH_REPEAT_MAXN || nback < 0 || nback > OSH_REPEAT_MAXN || dev < 0 ||
      dev >= OSH_REPEAT_DEVS || !token || mid == stamp)
    return 0;
  for (int32_t i = 0; i < nto; i++)
    if (!to_ops[5 * i])
      return 0;
  for (int32_t i = 0; i < nback; i++)
    if (!back_ops[5 * i])
      return 0;
  int kept = 0;
  pthread_mutex_lock(&rp_lock);
  if (__atomic_load_n(&rp_on, __ATOMIC_SEQ_CST) && !pr_pend[dev] &&
      __atomic_load_n(&rp_stamps[dev], __ATOMIC_SEQ_CST) == stamp &&
      __atomic_load_n(&rp_stamps[OSH_REPEAT_DEVS], __ATOMIC_SEQ_CST) == epoch) {
    /* the enter's own entry when kept already (another stamp), else a free one, else
     * the next in turn whose rows are not out */
    struct pr_entry *e = NULL;
    for (int i = 0; i < PR_SLOTS && !e; i++) {
      struct pr_entry *x = &pr_tab[i];
      if (x->used && x->dev == dev && x->n == n && x->types_p == types_p &&
          memcmp(x->words, words, (size_t)n * 4 * 8) == 0 && pr_pend[x->dev] != x)
        e = x;
    }
    for (int i = 0; i < PR_SLOTS && !e; i++)
      if (!pr_tab[i].used)
        e = &pr_tab[i];
    for (int i = 0; i < PR_SLOTS && !e; i++) {
      struct pr_entry *x = &pr_tab[pr_turn++ % PR_SLOTS];
      if (pr_pend[x->dev] != x)
        e = x;
    }
    if (e) {
      if (e->used)
        *evicted = e->token;
      else
        __atomic_store_n(&pr_used, pr_used + 1, __ATOMIC_RELAXED);
      e->used = 1;
      e->gone = 0;
      e->dev = dev;
      e->stamp = stamp;
      e->mid = mid;
      e->token = token;
      e->n = n;
      e->xn = xn;
      e->types_p = types_p;
      e->xtypes_p = xtypes_p;
      memcpy(e->words, words, (size_t)n * 4 * 8);
      memcpy(e->xwords, xwords, (size_t)xn * 4 * 8);
      e->nto = nto;
      pr_ops_from(e->to, to_ops, nto);
      e->nback = nback;
      pr_ops_from(e->back, back_ops, nback);
      kept = 1;
    }
  }
  pthread_mutex_unlock(&rp_lock);
  return kept;
}

/* Python's look-up on device dev found rows out (table lock held): wait for the copies
 * of a repeat running on them, then hand them over -- the token of the pair's lease
 * (Python inserts the rows as its own, owning the lease's blocks), 0 when no rows are
 * out (an exit repeat ended them meanwhile).  The pair is forgotten, and the epoch moves
 * on (a hand-over that read the stamp before this must not be kept: the stamp may come
 * back to that value while the rows it saw are gone). */
OSH_EXPORT uint64_t osh_interposer_repeat_take(int64_t dev)
{
  uint64_t token = 0;
  if (dev < 0 || dev >= OSH_REPEAT_DEVS)
    return 0;
  pthread_mutex_lock(&rp_lock);
  while (pr_pend[dev] && (pr_state[dev] == 1 || pr_state[dev] == 3)) {
    pthread_mutex_unlock(&rp_lock);
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&rp_lock);
  }
  struct pr_entry *e = pr_pend[dev];
  if (e) {
    token = e->token;
    e->used = 0;
    __atomic_store_n(&pr_used, pr_used - 1, __ATOMIC_RELAXED);
    pr_pend[dev] = NULL;
    pr_state[dev] = 0;
    __atomic_store_n(&pr_out[dev], 0, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&rp_stamps[OSH_REPEAT_DEVS], 1, __ATOMIC_SEQ_CST);
  }
  pthread_mutex_unlock(&rp_lock);
  return token;
}

int osh_ip_pair_out(int64_t dev)
{
  return __atomic_load_n(&pr_out[dev], __ATOMIC_SEQ_CST) != 0;
}

/* Per device, 1 while rows of a pair are out (OSH_REPEAT_DEVS words). */
OSH_EXPORT int64_t *osh_interposer_repeat_out(void)
{
  return pr_out;
}

/* The tokens of the pairs whose rows are out now (at most max); how many. */
OSH_EXPORT int32_t osh_interposer_repeat_out_tokens(uint64_t *tokens, int32_t max)
{
  int32_t got = 0;
  pthread_mutex_lock(&rp_lock);
  for (int d = 0; d < OSH_REPEAT_DEVS && got < max; d++)
    if (pr_pend[d])
      tokens[got++] = pr_pend[d]->token;
  pthread_mutex_unlock(&rp_lock);
  return got;
}

void osh_ip_pair_forget(int64_t dev)
{
  for (int i = 0; i < PR_SLOTS; i++) {
    struct pr_entry *x = &pr_tab[i];
    if (!x->used || (dev >= 0 && x->dev != dev))
      continue;
    if (pr_pend[x->dev] == x) {
      x->gone = 1;
    } else {
      x->used = 0;
      __atomic_store_n(&pr_used, pr_used - 1, __ATOMIC_RELAXED);
    }
  }
}

int32_t osh_ip_pair_drop(int64_t dev, uint64_t *tokens, int32_t max, int32_t *left)
{
  int32_t got = 0;
  for (int i = 0; i < PR_SLOTS; i++) {
    struct pr_entry *x = &pr_tab[i];
    if (!x->used || x->dev != dev)
      continue;
    if (pr_pend[x->dev] == x || got >= max) {
      (*left)++;
      continue;
    }
    tokens[got++] = x->token;
    x->used = 0;
    __atomic_store_n(&pr_used, pr_used - 1, __ATOMIC_RELAXED);
  }
  return got;
}
