"""Device memory manager: a cache of freed device blocks in front of a plugin.

The algorithm is LLVM libomptarget's ``MemoryManagerTy``
(``openmp/libomptarget/plugins/common/MemoryManager/MemoryManager.h``, LLVM 14/16;
introduced by review D81054), with what that review's reviewers asked for and other
pools have (a second size policy, a cap on cached bytes, ``trim``, statistics, an
event log with replay, debug modes; ``docs/memory-manager.md`` compares them):

* ``allocate(size)``, ``0 < size <= threshold`` (pooled): reuse a cached block the
  policy allows -- a *hit*: one lock round trip, three dict operations, one addition.
  Otherwise a *miss*: ``backend_alloc(size)``; when the backend has no memory, the
  OOM ladder releases cached blocks and asks again; when that ends without memory,
  :class:`~offload_shim.errors.OutOfDeviceMemoryError`.
* A larger request, or any with pooling off (threshold 0, debug ``off-pool``), goes
  straight to the backend and back (still tracked: ``owns``, stats).
* ``free(ptr)`` of a pooled block caches it (one dict store); with ``cache_limit``
  the fewest, oldest cached blocks that bring the cache under the cap go back to the
  backend; in debug ``poison`` the block is filled first.
* ``trim`` releases cached blocks, ``drain`` every block (teardown).

The manager is Python (its hit path also in C: :mod:`.hitpath`) over two callbacks,
``backend_alloc(size) -> ptr`` and ``backend_free(ptr)``; it never imports the plugin
layer.  Its parts: this module
(the tables, the hit and miss paths, the cached frees, the batches),
:mod:`.oom` (the out-of-memory path and its ladders), :mod:`.release` (the other frees; releasing cached blocks), :mod:`.parking` (frees
put off), :mod:`.queries` (what it answers; its errors), :mod:`.records` (the
:class:`~offload_shim.memory.records.Block` record), :mod:`.policies`,
:mod:`.eviction` (which cached blocks go), :mod:`.stats`,
:mod:`.events`, :mod:`.ownership` (which manager holds a block), :mod:`.config`
(options, environment).

Tables (all guarded by one lock):

* ``_live``: ``{ptr: Block}`` of the blocks handed out; every block the manager
  holds is one :class:`~offload_shim.memory.records.Block` (requested bytes, block
  bytes, its free list, its statistics bucket, the two steps of the accounting word),
  which travels with the block between the tables.
* ``_free``: ``{block bytes: deque([Block, ...])}``, one free list per block size,
  each ordered from the least (left) to the most (right) recently freed block.  A hit
  of the exact policy takes the least recently freed block (``popleft()``), as LLVM's
  ``MemoryManagerTy`` does (its free lists are ``std::multiset`` objects ordered by
  size: ``insert`` puts a block after the ones of its size, ``find`` returns the first
  of them), so a program that reads device memory before writing it sees what it
  sees under libomptarget; a hit of the binned policy takes the most recently freed
  one (``pop()``).  A cached free is one ``append`` to the list the record names
  (lists are kept while the manager is open).  A ``deque`` takes and gives back at
  either end in O(1) whatever its length, without hashing: an ``OrderedDict`` taking
  at the front and inserting at the back cost 2-3x more per hit+free, and more as the
  list grew (its dict fills with deleted slots and is rebuilt).  Releasing cached
  blocks (the cap, ``trim``, the OOM ladders) takes them from the left, the oldest
  first, as :mod:`.eviction` chooses them.
* ``_acc``: the accounting word, bytes in use shifted left by
  :data:`~offload_shim.memory.records.SHIFT` bits plus the number of hits (a
  block's ``hit_step`` books the bytes and the hit in one addition); statistics cost
  nothing extra on the hit path.
* with ``cache_limit``: ``_stamps`` ``{ptr: age}`` of the cached blocks, the age
  order the cap needs across sizes (kept only then: the hit path never touches it).
* ``_transit``: ``{ptr: Block}`` of blocks being poisoned (still in use).
* ``_parcel``: blocks whose free is put off (:mod:`.parking`), or None.

Locking rule (the lock is :class:`~offload_shim.memory.locking.TokenLock`; the hot
paths take its token deque ``_lockq`` directly):

* a method whose name ends in ``_locked`` runs with the lock held: it takes no lock,
  waits for nothing and calls nothing outside the manager (no backend, ``poison`` or
  ``guard``);
* every other method takes the lock itself for each bookkeeping step and never holds
  it across a call of the backend, ``poison`` or ``guard`` -- so a slow
  ``cudaFree``-like call in one thread does not stall other threads' hits, and a
  failing backend cannot leave the lock held (ROCm aomp #159: a lock left held by a
  failed allocation deadlocked the exit).  ``tests/test_pool_records.py`` checks both
  on the source.

The hit path and the cached free run in C where the extension is built
(``native/pool_hit.c``, :mod:`.hitpath`): ``allocate`` and ``free`` are then methods of
its ``PoolCore`` base, which hand every other call to ``_allocate_py``/``_free_py`` below
(the whole methods without the extension); the two keep one meaning, step for step, and
``tests/test_pool_hit_c.py`` runs them side by side.

PyTorch's ``CUDACachingAllocator`` writes its rule as "public methods take the mutex,
private ones do not"; here the slow paths must drop the lock around every backend
call, so the mark is the ``_locked`` suffix rather than publicness.  Paths that call
the backend run inside ``guard`` (the Device passes its in-flight guard, so deinit
waits for them and they never call a plugin after its device is deinitialised).
Blocks in transit (being obtained, poisoned or released) are in no table but stay
recorded in the backend's address space; the thread moving them finishes the move,
and returns a block to the backend itself if the manager was drained meanwhile, so
every block is freed exactly once.
"""

from __future__ import annotations

import contextlib
import operator
import weakref
from collections import deque

from ..errors import OffloadError
from .config import (DEBUG_ENV, DEFAULT_THRESHOLD, MAX_SIZE, PTR_LIMIT, THRESHOLD_ENV,
                     PoolConfig, check_bins, check_choice, check_flag, nonneg_int,
                     read_threshold_env, resolve_debug)
from .hitpath import CORE_FIELDS, hit_core
from .locking import TOKEN, TokenLock
from .oom import LADDERS, OutOfMemory
from .ownership import address_space
from .parking import ParkedFrees
from .policies import (LLVM_BUCKET_SIZES, POLICIES, binned_size, llvm_bucket,
                       llvm_find_bucket_index, make_policy)
from .queries import PoolQueries
from .records import HITS as _HITS, SHIFT as _SHIFT, Block
from .release import BlockRelease
from .stats import BucketCounters, PoolStats

_hit = hit_core()       # the hit path in C (native/pool_hit.c), or None

__all__ = [
    "MemoryManager", "Block", "read_threshold_env", "llvm_bucket", "llvm_find_bucket_index",
    "binned_size", "THRESHOLD_ENV", "DEBUG_ENV", "DEFAULT_THRESHOLD", "LLVM_BUCKET_SIZES",
    "POLICIES", "OOM_LADDERS", "MAX_SIZE", "PTR_LIMIT",
]

OOM_LADDERS = tuple(LADDERS)
_BYPASS = PoolStats.BYPASS_BUCKET
_NO_GUARD = contextlib.nullcontext()


def _as_pointer(ptr) -> int:
    """``ptr`` as a plain int (``operator.index``: numpy integers...); TypeError
    naming the type for a bool, float, str..."""
    if isinstance(ptr, bool):
        raise TypeError("ptr must be an int (device address), not bool")
    try:
        return operator.index(ptr)
    except TypeError:
        raise TypeError(f"ptr must be an int (device address), not "
                        f"{type(ptr).__name__}") from None


def _corrupt_backend(ptr, size, held, why, label) -> OffloadError:
    """The error of a block ``backend_alloc`` should not have given: one a manager of the
    backend holds (``why`` ``"held"``), or ``size`` bytes beyond ``held`` that pass 2**64
    (``"overflow"``)."""
    what = (f"{size} bytes at {ptr:#x} beyond the {held} bytes it gave already: more "
            f"than 64-bit memory holds" if why == "overflow" else
            f"{ptr:#x}, which a memory manager of this backend already holds")
    return OffloadError(f"backend_alloc returned {what} (device {label or '?'}); the backend "
                        f"is corrupt or the block was freed behind the manager's back",
                        function="MemoryManager.allocate", device=label or None)


def _checked_arguments(backend_alloc, backend_free, threshold, policy, oom, cache_limit,
                       stats, debug, device_label, poison, bins_per_pow2, strict, guard):
    """:class:`MemoryManager`'s arguments checked (TypeError, ValueError): ``(threshold,
    cache_limit, bins_per_pow2, debug mode)`` resolved."""
    if not callable(backend_alloc) or not callable(backend_free):
        raise TypeError("backend_alloc and backend_free must be callable")
    threshold = (read_threshold_env() if threshold is None
                 else nonneg_int(threshold, "threshold", MAX_SIZE))
    check_choice(policy, "policy", POLICIES)
    check_choice(oom, "oom", OOM_LADDERS)
    if cache_limit is not None:
        cache_limit = nonneg_int(cache_limit, "cache_limit", MAX_SIZE)
    check_flag(stats, "stats")
    check_flag(strict, "strict")
    bins = check_bins(bins_per_pow2)
    if not isinstance(device_label, str):
        raise TypeError(f"device_label must be a str, not {type(device_label).__name__}")
    mode = resolve_debug(debug)
    if poison is not None and not callable(poison):
        raise TypeError("poison must be callable or None")
    if mode == "poison" and poison is None:
        raise ValueError("debug mode 'poison' needs a poison(ptr, size) callback")
    if guard is not None and not (hasattr(guard, "__enter__") and hasattr(guard, "__exit__")):
        raise TypeError("guard must be None or a context manager")
    return threshold, cache_limit, bins, mode


class MemoryManager(PoolQueries, BlockRelease, ParkedFrees, OutOfMemory,
                    object if _hit is None else _hit.PoolCore):
    """Cache of freed device blocks in front of ``backend_alloc``/``backend_free``.

    Parameters (sizes are bytes, pointers are ``int`` device addresses):

    * ``backend_alloc(size) -> int``: a device pointer; ``0`` (or ``None``,
      what ctypes gives for NULL) means out of memory; any other failure
      should raise (e.g. :class:`~offload_shim.errors.OffloadError`), which
      propagates unchanged.
    * ``backend_free(ptr) -> None``: returns a block to the plugin.
    * ``threshold``: requests of more than ``threshold`` bytes bypass the
      cache (allocated and freed straight through the backend, still
      tracked by :meth:`owns` and the stats).  ``None`` reads
      :func:`read_threshold_env` (LLVM: default 8192, ``0`` turns the
      manager off).  ``0`` -> no pooling at all.
    * ``policy``: ``"exact"`` (LLVM ``MemoryManagerTy``: a cached block is
      reused only for a request of exactly its size, the least recently freed
      first; stats grouped in the 13 LLVM buckets), ``"binned"`` (any cached block of the request's size
      class that holds it is reused, waste below ``1/bins_per_pow2``) or
      ``"best-fit"`` (the smallest cached block that holds it and is below twice its
      size; see :mod:`offload_shim.memory.policies`).  All ask the backend for the
      requested size: rounding never costs device memory.
    * ``oom``: what to do when the backend returns 0: ``"free-all"`` (LLVM
      ``MemoryManagerTy::freeAndAllocate``: release every cached block, retry
      once) or ``"incremental"`` (the summary of review D81054: release one
      cached block at a time, largest first, retry after each, stop at the
      first success).
    * ``cache_limit``: ``None`` or the most bytes kept cached; a free that
      exceeds it releases the fewest cached blocks that bring the cache
      under it, the oldest that suffice (a concern of review D81054; CuPy
      ``set_limit``, RMM ``maximum_pool_size``).  It caps the cache only,
      never memory in use (CuPy #7678).
    * ``stats``: ``True``/``False``: keep the counters of :class:`PoolStats`
      (off: only bytes/blocks in use and cached and ``peak_bytes_total``).
    * ``event_log``: ``None``, a path (opened for append, closed by
      :meth:`drain`) or a text file object (flushed, not closed): one JSON
      object per line, see ``docs/memory-manager.md``.
    * ``debug``: ``None`` reads ``OFFLOAD_SHIM_POOL_DEBUG``; ``"off-pool"``
      turns pooling off so a use-after-free reaches the backend's checks
      (LLVM #214752 disables pooling under tracing); ``"poison"`` calls
      ``poison(ptr, block_size)`` on every block before caching it.
    * ``device_label``: a str naming the device in errors and events.
    * ``poison``: ``poison(ptr, size) -> None``, required for ``"poison"``.
    * ``bins_per_pow2``: size classes per power of two for ``"binned"`` (a
      power of two, default 8 -> waste below 1/8 of the request).
    * ``strict``: the default of :meth:`free`'s ``strict``.
    * ``guard``: ``None`` or a reusable context manager entered around every
      path that calls the backend (not around cache hits and cached frees,
      nor around :meth:`drain`); an exception from entering it propagates
      and leaves the books unchanged.
    * ``backend_key``: hashable identity of the device memory the backend
      allocates from (default: ``backend_free`` itself).  Managers with
      equal keys know each other's blocks (:mod:`offload_shim.memory.ownership`).

    Raises ``TypeError`` (wrong type, e.g. ``stats="yes"``) or
    ``ValueError`` (bad value, including a bad environment value, naming
    the variable) for bad arguments.

    Thread-safe: see the module docstring.  The owner (the runtime's Device)
    must call :meth:`drain` before ``deinit_device`` (LLVM
    ``GenericDeviceTy::deinit`` deletes its manager before ``deinitImpl``; the
    pool must not outlive the plugin, the TODO of review D81054); there is
    deliberately no finalizer that would call a plugin during interpreter
    shutdown.
    """

    # slots: a slot read/write on the hit path (CPython 3.11 gives up shared-key
    # instance dicts above 30 attributes)
    __slots__ = tuple(n for n in (
        "_cfg", "_balloc", "_bfree", "_sizes", "_poison", "_guard", "_pool_max", "_cacheable",
        "_batch", "_parcel", "_newest_first", "_lock", "_lockq", "_live", "_free", "_index",
        "_stamps", "_clock", "_transit", "_space", "_ref", "_acc", "_hit_unit", "_held",
        "_peak_acc", "_peak_open", "_peak_held", "_foreign", "_buckets", "_closed", "_log",
        "_slow", "_asleep", "_steps", "before", "__weakref__")
        if _hit is None or n not in CORE_FIELDS)   # C hit path: PoolCore's fields

    def __init__(self, backend_alloc, backend_free, *, threshold=None, policy="exact",
                 oom="free-all", cache_limit=None, stats=True, event_log=None,
                 debug=None, device_label="", poison=None, bins_per_pow2=8,
                 strict=False, guard=None, backend_key=None):
        threshold, cache_limit, bins, mode = _checked_arguments(
            backend_alloc, backend_free, threshold, policy, oom, cache_limit, stats, debug,
            device_label, poison, bins_per_pow2, strict, guard)
        space = address_space(backend_free if backend_key is None else backend_key)
        log = None
        if event_log is not None:       # .events (and json) only for a pool that logs
            from .events import EventLog
            log = EventLog(event_log, device_label)

        self._cfg = cfg = PoolConfig(threshold, policy, oom, cache_limit, stats, mode,
                                     device_label, strict, bins)
        self._balloc = backend_alloc
        self._bfree = backend_free
        self._sizes = make_policy(policy, bins)
        self._poison = poison if mode == "poison" else None
        self._guard = _NO_GUARD if guard is None else guard
        #: largest pooled request (bytes); 0: nothing is pooled
        self._pool_max = threshold if cfg.enabled else 0
        #: a free of a pooled block caches it and nothing else but its ``free`` event
        #: (with an event log): free_many's batch and parked frees (:mod:`.parking`)
        self._cacheable = cache_limit is None and self._poison is None
        #: allocate_many serves its leading hits in one lock round trip (exact policy;
        #: with an event log each hit is logged in that round trip)
        self._batch = policy == "exact"
        #: blocks whose free is put off (:mod:`.parking`): None, or (ptrs in free order,
        #: (their free lists, bytes, hit step))
        self._parcel = None
        self.before = None              # ParkedFrees.set_before's hook (parking.py)
        #: which end of a free list a hit takes: exact, the left (``popleft``: the least
        #: recently freed block, LLVM); binned and best-fit, the right (``pop``)
        self._newest_first = policy != "exact"

        self._asleep = False                       # the lock's asleep (TokenLock owner)
        self._lock = TokenLock(self)
        self._lockq = self._lock.tokens            # the hot paths take it directly
        self._live = {}
        self._free = {}
        self._index = self._sizes.index()          # binned: class -> cached sizes
        self._stamps = {} if cache_limit is not None else None
        self._clock = 0
        self._transit = {}                         # ptr -> Block being poisoned
        self._space = space
        self._ref = weakref.ref(self)
        self._acc = 0                              # the accounting word (module docstring)
        self._hit_unit = 1 if stats else 0
        #: pooled size -> (hit step, free step): the blocks of a size share the two int
        #: objects, so an exact hit (which cycles through every cached block of its size)
        #: reads one warm int instead of one per block from cold memory
        self._steps = {}
        self._held = 0                             # bytes held from the backend
        # the peak of _acc's high part, low bits all set: hits never pass it
        self._peak_acc = 0
        #: False while peak in use >= bytes held: no hit can pass it, the hit path skips
        #: the comparison.  Recomputed where bytes held grow and at a hit's new peak.
        self._peak_open = False
        self._peak_held = 0
        self._foreign = 0
        self._buckets = {}                         # bucket -> BucketCounters
        self._closed = False
        self._log = log
        self._slow = log is not None    # parked frees (_parcel) or an event log
        if log is not None:
            log.config({"policy": policy, "threshold": threshold, "oom": oom,
                        "cache_limit": cache_limit, "debug": mode or "",
                        "bins_per_pow2": bins})
            log.flush()

    # -- allocate ------------------------------------------------------------

    def _allocate_py(self, size: int) -> int:
        """A device pointer for ``size`` bytes.

        * ``size == 0`` returns 0 without touching the backend (LLVM).
        * ``size <= threshold`` with pooling on: a cached block is reused
          (the policy says which: exact, the least recently freed of the size,
          as LLVM's ``MemoryManagerTy``; binned, the most recently freed of
          its size, else the smallest cached size of its class); otherwise
          a block of ``size`` bytes is obtained from the backend.  Larger
          requests go straight to the backend.
        * When the backend returns 0 the OOM ladder runs (``oom``).

        Raises ``ValueError`` (negative size, or more than :data:`MAX_SIZE`
        = 2**63 - 1 bytes, which the plugins' int64/size_t argument cannot
        hold; nothing is recorded), ``TypeError`` (not an int),
        :class:`OutOfDeviceMemoryError` (backend out of memory after the
        ladder; ``.requested``, ``.cached``, ``.in_use`` bytes, ``.device``),
        :class:`LifecycleError` after :meth:`drain` or when ``guard``
        refuses, and whatever ``backend_alloc`` raises.
        """
        # The hit path of both policies (native/pool_hit.c and allocate_many's batch
        # repeat it): one lock round trip (the token deque, memory/locking.py), three dict
        # operations, one addition.  _slow (parked frees, event log): _hit_slow_locked.
        # No closed check: drain() empties the free lists.  The rest after the round
        # trip (_allocate_other).
        lockq = self._lockq
        try:
            lockq.pop()
        except IndexError:
            self._lock.wait_token()
        try:
            if self._slow:                  # parked frees or an event log: one flag
                ptr = self._hit_slow_locked(size)
            elif type(size) is not int:     # checked after the round trip
                ptr = 0
            elif (fl := self._free.get(size)) or (
                    self._index is not None and 0 < size <= self._pool_max  # binned: else
                    and (fl := self._index.larger(size, self._free))):  # a larger size
                # exact: the least recently freed block of the size (LLVM's multiset
                # find); binned: the most recently freed of the size, else of the
                # smallest larger cached size of the request's class
                if self._newest_first:
                    block = fl.pop()
                    block.requested = size  # it may have served another request
                else:
                    block = fl.popleft()    # exact: requested is the size already
                ptr = block.ptr
                self._live[ptr] = block
                self._acc = self._acc + block.hit_step      # bytes in use and the hit
                if self._peak_open and self._acc > self._peak_acc:
                    self._peak_acc = self._acc | _HITS
                    self._peak_open = (self._acc >> _SHIFT) < self._held
                return ptr
            else:
                ptr = 0
        finally:
            lockq.append(True)      # TOKEN as a constant (LOAD_CONST)
            if self._asleep:            # (TokenLock.asleep, kept here by the lock)
                self._lock.wake()
        if ptr:                         # a hit of the slow round trip
            if self._log is not None:
                self._log.flush()
            return ptr
        return self._allocate_other(size)

    def allocate_many(self, sizes) -> list:
        """:meth:`allocate` of each of ``sizes`` (bytes), in order: the pointers.  The
        same blocks, in the same order, as that many :meth:`allocate` calls (a block
        freed meanwhile by another thread may go to either); the hits at the head of
        the list are served in one lock round trip (exact policy; an event log gets
        their events in that round trip), the rest one by one.  On an error the
        pointers already obtained are freed again and the error is raised (the errors
        of :meth:`allocate`)."""
        out = []
        if self._batch:
            pool_max = self._pool_max
            free = self._free
            live = self._live
            lockq = self._lockq
            try:
                lockq.pop()
            except IndexError:
                self._lock.wait_token()
            try:
                if self._parcel is not None:
                    self._unpark_locked()
                acc = self._acc
                for size in sizes:
                    # allocate's hit path of the exact policy, for a run of hits
                    if type(size) is not int or size <= 0 or size > pool_max:
                        break
                    fl = free.get(size)
                    if not fl:
                        break
                    block = fl.popleft()
                    ptr = block.ptr
                    live[ptr] = block
                    acc += block.hit_step
                    out.append(ptr)
                if out:
                    self._acc = acc         # only hits: the last figure is the highest
                    if acc > self._peak_acc:
                        self._peak_acc = acc | _HITS
                    if self._log is not None:   # the hits' events, in their order
                        self._log.record_many("alloc", zip(sizes, out), True, True)
            finally:
                lockq.append(TOKEN)
                if self._lock.waiting:
                    self._lock.wake()
            if out and self._log is not None:
                self._log.flush()
            if len(out) == len(sizes):
                return out
        try:
            allocate = self.allocate
            for size in sizes[len(out):]:
                out.append(allocate(size))
        except BaseException:
            for ptr in out:
                with contextlib.suppress(OffloadError):
                    self.free(ptr)
            raise
        return out

    def _allocate_other(self, size):
        """:meth:`allocate` after a lock round trip without a hit: ``size`` checked,
        then size 0, a miss of a pooled size, a pooled size given as another integer
        type (tried again), or a bypass."""
        if type(size) is not int:
            if isinstance(size, bool):
                raise TypeError("size must be an int (bytes), not bool")
            try:
                size = operator.index(size)
            except TypeError:
                raise TypeError(f"size must be an int (bytes), not "
                                f"{type(size).__name__}") from None
            if 0 < size <= self._pool_max:
                return self.allocate(size)
        if size <= 0:
            if size == 0:
                return 0
            raise ValueError(f"size must be >= 0 bytes, got {size}")
        if size <= self._pool_max:
            return self._allocate_miss(size, True)
        if size > MAX_SIZE:         # never pooled: threshold <= MAX_SIZE
            raise ValueError(
                f"size {size} bytes does not fit in the plugins' int64/size_t argument "
                f"(at most {MAX_SIZE}); device {self._cfg.device_label or '?'}")
        return self._allocate_miss(size, False)

    def _allocate_miss(self, size, pooled):
        """Obtain ``size`` bytes from the backend (inside the guard) and
        record them; ``pooled``: the block may be cached when freed."""
        if self._closed:                    # re-checked under the lock below
            raise self._closed_error("allocate")
        bucket = self._sizes.bucket(size) if pooled else _BYPASS
        bad, closed = None, False
        with self._guard:
            # the backend; without memory the OOM ladder (release, search, ask again)
            ptr = self._balloc(size)
            if not ptr:
                ptr, reused = self._out_of_memory(size, bucket, pooled)
                if reused:                  # a cached block another thread freed, as a hit
                    if self._log is not None:
                        self._log.flush()
                    return ptr
            if type(ptr) is not int:
                ptr = operator.index(ptr)
            with self._lock:
                closed = self._closed
                if not closed:
                    # more bytes held than 64-bit memory has (the C hit path's fields,
                    # native/pool_hit.c, hold 64 bits): refused before any booking
                    if self._held + size >= PTR_LIMIT:
                        bad = "overflow"
                    elif self._space.claim(ptr, self._ref):
                        self._record_obtained_locked(ptr, size, pooled, bucket)
                    else:
                        bad = "held"
            if closed or bad == "overflow":
                # drained while the backend call was in flight, or refused: give it back
                self._bfree(ptr)
        if closed:
            raise self._closed_error("allocate")
        if bad:
            raise _corrupt_backend(ptr, size, self._held, bad, self._cfg.device_label)
        if self._log is not None:
            self._log.flush()
        return ptr

    def _record_obtained_locked(self, ptr, size, pooled, bucket):
        """Book a block just obtained from the backend as live."""
        fl = None
        if pooled:
            fl = self._free.get(size)
            if fl is None:
                fl = self._free[size] = deque()
                if self._index is not None:
                    self._index.add(size)       # binned: a size its class can reuse
        self._held = held = self._held + size
        if held > self._peak_held:
            self._peak_held = held
        steps = self._steps.get(size) if pooled else None
        if steps is None:
            steps = (size << _SHIFT) + self._hit_unit, size << _SHIFT
            if pooled:
                self._steps[size] = steps
        hit_step, step = steps
        self._acc = acc = self._acc + step
        if acc > self._peak_acc:
            self._peak_acc = acc | _HITS
        self._peak_open = (self._peak_acc >> _SHIFT) < held
        bc = None
        if self._cfg.stats:
            bc = self._buckets.get(bucket)
            if bc is None:
                bc = self._buckets[bucket] = BucketCounters(bucket)
            bc.obtained(size)
        self._live[ptr] = Block(ptr, size, size, fl, bc, hit_step, step,
                                fl if self._cacheable else None)
        if self._log is not None:
            self._log.record("alloc", size, ptr, False, {"block": size})

    # -- free ------------------------------------------------------------------

    def _free_py(self, ptr: int, strict=None) -> None:
        """Give back a pointer.

        * ``0``/``None``: no-op (``allocate(0)`` returns 0).
        * a live pointer of this manager: cached (pooled size, pooling on),
          else freed through the backend; caching past ``cache_limit``
          releases cached blocks (see ``cache_limit``); in debug ``poison``
          the block is poisoned (outside the lock) before it is cached.
        * a pointer another manager of the same backend holds
          (``backend_key``): that manager frees it (non-strict only).
        * a pointer no manager of the backend holds: straight to
          ``backend_free`` (LLVM ``MemoryManagerTy::free``), unless strict.

        ``strict`` (default: the manager's ``strict`` option; what
        :class:`~offload_shim.Device` uses): a pointer that is not live here
        raises :class:`UnknownPointerError` and never reaches the backend.

        Raises :class:`UnknownPointerError` for a double free of a block
        this manager caches (or is poisoning), and with ``strict`` for any
        pointer that is not live: the cache is left untouched.
        :class:`LifecycleError` after :meth:`drain` or when ``guard``
        refuses; ``TypeError`` for a non-int; ``ValueError`` for a pointer
        that is not a 64-bit address (negative or ``>= 2**64``; never passed
        to the backend); whatever ``backend_free``/``poison`` raise.

        If ``backend_free`` raises for a block of this manager, the plugin
        still holds it: the block stays (becomes again) a live allocation of
        the caller, who may retry the free; the error propagates and the
        event log gets a ``free_failed`` event after the ``free``.  (If the
        manager was drained meanwhile the block is not recorded again.)
        """
        if type(ptr) is not int and ptr is not None:
            # a float or numpy integer equal to a live pointer would find it in the
            # table and be cached as the key (and handed to the plugin later)
            ptr = _as_pointer(ptr)
        lockq = self._lockq     # see allocate: the lock's token deque, inlined
        try:
            lockq.pop()
        except IndexError:
            self._lock.wait_token()
        try:
            if self._slow:                  # parked frees or an event log
                block = self._free_slow_locked(ptr)
            elif (block := self._live.get(ptr)) is not None:
                if block.cache_list is not None:
                    # a pooled block, no cap/poison: cache it (the hot path).  No
                    # closed check: drain() empties _live.
                    del self._live[ptr]
                    self._acc -= block.free_step
                    block.cache_list.append(block)
                    return
                block = None                # the other path books it (_live's order kept)
        finally:
            lockq.append(True)
            if self._asleep:
                self._lock.wake()
        if block is not None:           # cached in the slow round trip
            if self._log is not None:
                self._log.flush()
            return
        self._free_other(ptr, strict)

    if _hit is None:        # no C hit path (memory/hitpath.py): these are the entry points
        allocate, free = _allocate_py, _free_py

    def free_many(self, ptrs, strict=None) -> None:
        """:meth:`free` of each of ``ptrs``, in order (the order they join the cache
        in: under the exact policy the first one freed is the first a later request
        of its size gets).  The cached frees at the head of the list are done in one
        lock round trip (no cap or poison), the rest one by one; stops at
        the first error, which is raised (the errors of :meth:`free`).  With an event
        log the batch logs each cached free (``free``, hit) in its round trip."""
        done = 0
        if self._cacheable:
            log = self._log
            live = self._live
            rows = [] if log is not None else None
            lockq = self._lockq
            try:
                lockq.pop()
            except IndexError:
                self._lock.wait_token()
            try:
                if self._parcel is not None:
                    self._unpark_locked()
                acc = self._acc
                for ptr in ptrs:
                    # free's cached free, for a run of them
                    if type(ptr) is not int:
                        break
                    block = live.pop(ptr, None)
                    if block is None:
                        break
                    fl = block.free_list
                    if fl is None:
                        live[ptr] = block   # not pooled: the backend frees it, below
                        break
                    acc -= block.free_step
                    fl.append(block)
                    done += 1
                    if rows is not None:
                        rows.append((block.size, ptr))
                self._acc = acc
                if rows:                        # the cached frees' events, in order
                    log.record_many("free", rows, True)
            finally:
                lockq.append(TOKEN)
                if self._lock.waiting:
                    self._lock.wake()
            if done and log is not None:
                log.flush()
        if done < len(ptrs):
            free = self.free
            for ptr in ptrs[done:]:
                free(ptr, strict)

    # -- the cache -----------------------------------------------------------------

    def _cache_locked(self, ptr, block):
        """Put a block on its free list (the young end)."""
        block.free_list.append(block)
        if self._stamps is not None:
            self._clock = c = self._clock + 1
            self._stamps[ptr] = c

