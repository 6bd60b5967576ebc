/* Rotations (libosh_interposer.so): the cached blocks of one size of a device's memory
 * pool, held by the C side while kernel constructs with rows of their own repeat there.
 *
 * libomptarget 16's memory manager (openmp/libomptarget/plugins-nextgen/common/
 * PluginInterface/MemoryManager.h, MemoryManagerTy::allocate / free) keeps the freed
 * blocks of a size in a free list and hands out the least recently freed one first.
 * A kernel construct whose maps found no row allocates a block per map when it starts
 * (targetDataBegin, argument order) and frees them when it ends (targetDataEnd, reverse
 * argument order).  Run in a loop while other blocks of those sizes are cached -- other
 * host threads running the same construct on their own data, blocks earlier constructs
 * left --, each run gets another block: the loop rotates through the free list.
 *
 * A rotation is that free list, taken whole out of Python's pool
 * (offload_shim/memory/parking.py MemoryManager.take_cached) when a construct is handed
 * to the C side (offload_shim/interposer/llvm/repeat.py Repeats.put_kernel), with the
 * construct's own blocks at its end as their frees would have put them.  A repeat of a
 * construct takes the least recently freed block of each of its sizes in argument order
 * (osh_ip_rot_take), writes the block's address into its arguments and copies, and puts
 * the blocks back at the end in reverse argument order (osh_ip_rot_put): the blocks, the
 * order and what is left in them are those libomptarget's pool would show, whichever
 * threads run which constructs.
 *
 * Python's pool is the free list again before any other use of it: the pool's hook
 * (MemoryManager.set_before) calls osh_interposer_rotation_drain, which closes the
 * device's rotations (no repeat takes from them any more) and hands their blocks back
 * in their order; blocks that repeats in flight hold come back to the closed rotation
 * when those end, and the next drain hands them over.  A construct handed over again
 * opens the rotation again (osh_interposer_rotation_open) with the pool's cached blocks.
 * Everything here runs under rp_lock (interposer_repeat.c) and calls nothing.
 */
#include <stdint.h>

#include "interposer_internal.h"

#define OSH_EXPORT __attribute__((visibility("default")))

struct rot {
  int32_t state;                /* ROT_FREE, ROT_OPEN (repeats take blocks), ROT_CLOSED */
  uint32_t gen;                 /* one more every time the slot is given to a size */
  int64_t dev;
  uint64_t size;                /* bytes of every block (the free list's size) */
  int32_t head, count;          /* the resident blocks: a ring, least recently freed first */
  int32_t out;                  /* blocks repeats in flight hold */
  uint64_t blk[OSH_ROT_CAP];
};

enum { ROT_FREE = 0, ROT_OPEN = 1, ROT_CLOSED = 2 };

static struct rot rot_tab[OSH_ROT_MAX];

int osh_ip_rot_take(int32_t q, uint32_t gen, uint64_t *ptr)
{
  if (q < 0 || q >= OSH_ROT_MAX)
    return 0;
  struct rot *r = &rot_tab[q];
  if (r->state != ROT_OPEN || r->gen != gen || r->count == 0)
    return 0;
  *ptr = r->blk[r->head];
  r->head = (r->head + 1) % OSH_ROT_CAP;
  r->count--;
  r->out++;
  return 1;
}

void osh_ip_rot_untake(int32_t q, uint64_t ptr)
{
  struct rot *r = &rot_tab[q];
  r->head = (r->head + OSH_ROT_CAP - 1) % OSH_ROT_CAP;
  r->blk[r->head] = ptr;
  r->count++;
  r->out--;
}

void osh_ip_rot_put(int32_t q, uint64_t ptr)
{
  struct rot *r = &rot_tab[q];
  /* count + out never exceeds OSH_ROT_CAP: a block put back was taken from here */
  r->blk[(r->head + r->count) % OSH_ROT_CAP] = ptr;
  r->count++;
  r->out--;
}

void osh_ip_rot_forget(void)
{
  for (int q = 0; q < OSH_ROT_MAX; q++)
    if (rot_tab[q].state == ROT_OPEN)
      rot_tab[q].state = ROT_CLOSED;
}

/* Open device dev's rotation of `size`-byte blocks with blocks[0..n) appended, least
 * recently freed first: the one of that size (open, or closed with no block left in it
 * by a drain) or a free slot.  Returns its slot (and *gen), -1 when none is free or it
 * would hold more than OSH_ROT_CAP blocks, or when a closed one still has blocks (the
 * next drain hands them back first). */
OSH_EXPORT int32_t osh_interposer_rotation_open(int64_t dev, uint64_t size, int32_t n,
                                                const uint64_t *blocks, uint32_t *gen)
{
  int32_t got = -1;
  if (n < 0 || n > OSH_ROT_CAP || !size)
    return -1;
  pthread_mutex_lock(&rp_lock);
  struct rot *r = NULL, *spare = NULL;
  for (int q = 0; q < OSH_ROT_MAX; q++) {
    struct rot *x = &rot_tab[q];
    if (x->state != ROT_FREE && x->dev == dev && x->size == size)
      r = x;
    else if (x->state == ROT_FREE && !spare)
      spare = x;
  }
  if (r && r->state == ROT_CLOSED && r->count)
    r = NULL, spare = NULL;             /* blocks came back since the last drain */
  else if (!r && spare) {
    r = spare;
    r->gen++;
    r->dev = dev;
    r->size = size;
    r->head = r->count = r->out = 0;
  }
  if (r && r->count + r->out + n <= OSH_ROT_CAP) {
    for (int32_t i = 0; i < n; i++)
      r->blk[(r->head + r->count + i) % OSH_ROT_CAP] = blocks[i];
    r->count += n;
    r->state = ROT_OPEN;
    *gen = r->gen;
    got = (int32_t)(r - rot_tab);
  }
  pthread_mutex_unlock(&rp_lock);
  return got;
}

/* Close device dev's rotations (dev -1: all) and write the blocks they hold, as pairs
 * (size, address), each rotation least recently freed first, to out (at most max
 * pairs); a closed rotation whose blocks are all back is free again.  Returns how many
 * pairs; *busy: blocks stay out (repeats in flight hold them, or no room): call again
 * later. */
OSH_EXPORT int32_t osh_interposer_rotation_drain(int64_t dev, uint64_t *out, int32_t max,
                                                 int32_t *busy)
{
  int32_t got = 0, left = 0;
  pthread_mutex_lock(&rp_lock);
  for (int q = 0; q < OSH_ROT_MAX; q++) {
    struct rot *r = &rot_tab[q];
    if (r->state == ROT_FREE || (dev >= 0 && r->dev != dev))
      continue;
    r->state = ROT_CLOSED;
    while (r->count && got < max) {
      out[2 * got] = r->size;
      out[2 * got + 1] = r->blk[r->head];
      got++;
      r->head = (r->head + 1) % OSH_ROT_CAP;
      r->count--;
    }
    if (r->count || r->out)
      left++;
    else
      r->state = ROT_FREE;
  }
  pthread_mutex_unlock(&rp_lock);
  *busy = left;
  return got;
}

/* Blocks the rotations of device dev (-1: all) hold now, resident or out. */
OSH_EXPORT int64_t osh_interposer_rotation_blocks(int64_t dev)
{
  int64_t n = 0;
  pthread_mutex_lock(&rp_lock);
  for (int q = 0; q < OSH_ROT_MAX; q++) {
    const struct rot *r = &rot_tab[q];
    if (r->state != ROT_FREE && (dev < 0 || r->dev == dev))
      n += r->count + r->out;
  }
  pthread_mutex_unlock(&rp_lock);
  return n;
}

/* The state of device dev's rotation of `size`-byte blocks: 0 none, 1 open (repeats take
 * from it), 2 closed (its blocks go back to the pool at the next drain); *resident: the
 * blocks in it, *out: those repeats in flight hold. */
OSH_EXPORT int osh_interposer_rotation_state(int64_t dev, uint64_t size, int32_t *resident,
                                             int32_t *out)
{
  int state = 0;
  *resident = *out = 0;
  pthread_mutex_lock(&rp_lock);
  for (int q = 0; q < OSH_ROT_MAX && !state; q++) {
    const struct rot *r = &rot_tab[q];
    if (r->state != ROT_FREE && r->dev == dev && r->size == size) {
      state = r->state;
      *resident = r->count;
      *out = r->out;
    }
  }
  pthread_mutex_unlock(&rp_lock);
  return state;
}

/* Take the least recently freed block out of device dev's open rotation of `size`-byte
 * blocks (Python's pool is about to allocate that size: under libomptarget the
 * allocation gets it; the rotation stays open).  1 and *ptr, or 0 when it holds none. */
OSH_EXPORT int osh_interposer_rotation_lend(int64_t dev, uint64_t size, uint64_t *ptr)
{
  int got = 0;
  pthread_mutex_lock(&rp_lock);
  for (int q = 0; q < OSH_ROT_MAX && !got; q++) {
    struct rot *r = &rot_tab[q];
    if (r->state == ROT_OPEN && r->dev == dev && r->size == size && r->count) {
      *ptr = r->blk[r->head];
      r->head = (r->head + 1) % OSH_ROT_CAP;
      r->count--;
      got = 1;
    }
  }
  pthread_mutex_unlock(&rp_lock);
  return got;
}
