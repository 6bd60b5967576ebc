"""Device memory manager: a cache of freed device blocks in front of a plugin.

The design reproduces LLVM libomptarget's ``MemoryManagerTy`` (LLVM
D81054; LLVM 16 ``plugins/common/MemoryManager/MemoryManager.h``) and adds
what D81054's reviewers asked for and other pools
have (docs/references.md, pools compared): a second size policy, a cap on cached
bytes, trim, statistics, an event log with replay and debug modes.

The manager is pure Python over two callbacks, ``backend_alloc(size) -> ptr``
and ``backend_free(ptr)``; it never imports the plugin layer.  Its parts live
in their own modules: the size policies in :mod:`.policies`, which cached
blocks the cap, ``trim`` and the ladders release in :mod:`.eviction`, the OOM
ladders in :mod:`.oom`, the statistics in :mod:`.stats`, the event log in
:mod:`.events`, which manager holds a block in :mod:`.ownership`, options and
environment variables in :mod:`.config`.  ``docs/memory-manager.md`` has the
whole picture.

Tables (all guarded by one lock):

* ``_live``: ``{ptr: record}`` of the blocks handed out; a record is
  ``(requested bytes, block bytes, free list | None, BucketCounters | None,
  hit step, free step)`` and travels with its block (the free list is the
  one of the block's size, None for blocks that are never cached; the steps
  are what a hit adds to and a free takes from ``_acc``, below).
* ``_acc``: bytes in use (block sizes) shifted left by 64 bits, plus the
  number of hits: a hit adds ``block << 64 | 1`` (``| 0`` with
  ``stats=False``), so booking the bytes, the hit and the peak is one
  addition and one comparison; statistics cost nothing extra on the hit path.
* ``_free``: ``{block bytes: OrderedDict(ptr: record)}``, one free list per
  block size, each ordered from the least to the most recently freed block; a
  hit of the exact policy takes the least recently freed block
  (``popitem(last=False)``), as LLVM's ``MemoryManagerTy`` does (its free lists
  are ``std::multiset`` objects ordered by size: ``insert`` puts a block after the
  ones of its size, ``find`` returns the first of them), so a program that
  reads device memory before writing it sees what it sees under libomptarget;
  a hit of the binned policy takes the most recently freed one
  (``popitem()``).  Lists are kept while the manager is open, so a cached free
  is one store into the list the record names.
* with ``cache_limit``: ``_stamps`` ``{ptr: age}`` of the cached blocks, the
  age order the cap needs across sizes (kept only then: the hit path never
  touches it).

Thread-safety (ROCm aomp #159, llvm-project #49284; D81054 review): one lock guards the
tables and counters; every critical section is a few O(1) dict operations,
and a backend call (``backend_alloc``, ``backend_free``, ``poison``) is
never made while it is held, so a slow ``cudaFree``-like call in one thread
does not stall cache hits in others and a failing backend cannot leave the
lock held.  A cache hit and a cached free take the lock once and call
nothing.  Paths that call the backend run inside ``guard`` (a context
manager; the Device passes its in-flight guard, so deinit waits for them
and they never call a plugin after its device is deinitialised).  Blocks in
transit (being obtained, poisoned or released) are in no table but stay
recorded in the backend's address space; the thread moving them finishes
the move, and returns a block to the backend itself if the manager was
drained meanwhile, so every block is freed exactly once.
"""

from __future__ import annotations

import contextlib
import operator
import weakref
from collections import OrderedDict

from ..errors import OffloadError, OutOfDeviceMemoryError
from . import eviction
from .config import (DEBUG_ENV, DEFAULT_THRESHOLD, MAX_SIZE, PTR_LIMIT, THRESHOLD_ENV,
                     check_bins, check_choice, check_flag, nonneg_int, read_threshold_env,
                     resolve_debug)
from .events import EventLog, now_ns
from .locking import TOKEN, TokenLock
from .oom import LADDERS
from .ownership import address_space
from .policies import (LLVM_BUCKET_SIZES, POLICIES, binned_size, llvm_bucket,
                       llvm_find_bucket_index, make_policy)
from .queries import PoolQueries
from .records import HITS as _HITS, SHIFT as _SHIFT
from .release import CacheRelease
from .stats import BucketCounters, PoolStats

__all__ = [
    "MemoryManager", "read_threshold_env", "llvm_bucket", "llvm_find_bucket_index",
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

class MemoryManager(PoolQueries, CacheRelease):
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
    * ``policy``: ``"exact"`` (LLVM, LLVM D81054: a cached block is reused only
      for a request of exactly its size; stats grouped in the 13 LLVM
      buckets) or ``"binned"`` (any cached block of the request's size
      class that holds it is reused, waste below ``1/bins_per_pow2``; see
      :mod:`offload_shim.memory.policies`).  Both ask the backend for the
      requested size: rounding never costs device memory.
    * ``oom``: what to do when the backend returns 0: ``"free-all"`` (LLVM
      code: release every cached block, retry once) or ``"incremental"``
      (D81054 summary: release one cached block at a time, largest first,
      retry after each, stop at the first success).
    * ``cache_limit``: ``None`` or the most bytes kept cached; a free that
      exceeds it releases the fewest cached blocks that bring the cache
      under it, the oldest that suffice (D81054 reviewer concern; CuPy
      ``set_limit``, RMM ``maximum_pool_size``).  It caps the cache only,
      never memory in use (CuPy #7678, CuPy #7678).
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
    must call :meth:`drain` before ``deinit_device`` (LLVM GenericDeviceTy::deinit);
    there is deliberately no finalizer that would call a plugin during
    interpreter shutdown.
    """

    # slots: attribute access on the hit path is a slot read/write (with
    # more than 30 instance attributes CPython 3.11 gives up shared-key
    # instance dicts and its faster attribute specialisations)
    __slots__ = ("_balloc", "_bfree", "_threshold", "_policy", "_sizes", "_oom",
                 "_ladder", "_cap", "_stats_on", "_debug", "_poison", "_label", "_strict",
                 "_guard", "_enabled", "_pool_max", "_plain", "_batch", "_parcel", "_lock",
                 "_lockq", "_live", "_free", "_index", "_stamps", "_clock", "_transit", "_space", "_ref", "_acc",
                 "_hit_unit", "_held", "_peak_acc", "_peak_held", "_foreign", "_buckets", "_closed",
                 "_log", "__weakref__")

    def __new__(cls, *args, policy="exact", **kwargs):
        # the binned policy has its own hit path (_BinnedManager.allocate)
        if cls is MemoryManager and policy == "binned":
            cls = _BinnedManager
        return object.__new__(cls)

    def __init__(self, backend_alloc, backend_free, *, threshold=None, policy="exact",
                 oom="free-all", cache_limit=None, stats=True, event_log=None,
                 debug=None, device_label="", poison=None, bins_per_pow2=8,
                 strict=False, guard=None, backend_key=None):
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
        space = address_space(backend_free if backend_key is None else backend_key)
        log = EventLog(event_log) if event_log is not None else None

        self._balloc = backend_alloc
        self._bfree = backend_free
        self._threshold = threshold
        self._policy = policy
        self._sizes = make_policy(policy, bins)
        self._oom = oom
        self._ladder = LADDERS[oom]
        self._cap = cache_limit
        self._stats_on = stats
        self._debug = mode
        self._poison = poison if mode == "poison" else None
        self._label = device_label
        self._strict = strict
        self._guard = _NO_GUARD if guard is None else guard
        self._enabled = threshold > 0 and mode != "off-pool"
        #: largest pooled request (bytes); 0: nothing is pooled
        self._pool_max = threshold if self._enabled else 0
        #: a free of a pooled block is one dict store: no cap, no events, no poison
        self._plain = cache_limit is None and log is None and self._poison is None
        #: allocate_many serves its leading hits in one lock round trip (exact policy,
        #: no event log)
        self._batch = log is None and type(self) is MemoryManager
        #: blocks whose free is put off (:meth:`park`): None, or (ptrs in free order,
        #: their records, bytes, hit step)
        self._parcel = None

        self._lock = TokenLock()
        self._lockq = self._lock.queue             # the hot paths take it directly
        self._live = {}
        self._free = {}
        self._index = self._sizes.index()          # binned: class -> cached sizes
        self._stamps = {} if cache_limit is not None else None
        self._clock = 0
        self._transit = {}                         # ptr -> record of blocks being poisoned
        self._space = space
        self._ref = weakref.ref(self)
        # bytes handed out (block sizes) << 64 | hits: a hit books both with one
        # addition of its record's step, so statistics cost no extra operation
        self._acc = 0
        self._hit_unit = 1 if stats else 0
        self._held = 0                             # bytes held from the backend
        # the peak of _acc's high part, low bits all set: hits never pass it
        self._peak_acc = 0
        self._peak_held = 0
        self._foreign = 0
        self._buckets = {}                         # bucket -> BucketCounters
        self._closed = False
        self._log = log
        if log is not None:
            log.append({"op": "config", "policy": policy, "threshold": threshold, "oom": oom,
                        "cache_limit": cache_limit, "debug": mode or "",
                        "bins_per_pow2": bins, "dev": device_label, "t_ns": now_ns()})
            log.flush()

    # -- read-only configuration -------------------------------------------

    @property
    def threshold(self) -> int:
        """Largest pooled request in bytes (LLVM ``SizeThreshold``)."""
        return self._threshold

    @property
    def policy(self) -> str:
        """``"exact"`` or ``"binned"``."""
        return self._policy

    @property
    def oom(self) -> str:
        """OOM ladder: ``"free-all"`` or ``"incremental"``."""
        return self._oom

    @property
    def cache_limit(self):
        """Cap on cached bytes, or ``None``."""
        return self._cap

    @property
    def enabled(self) -> bool:
        """True when blocks are cached: threshold > 0 and debug mode is not
        ``off-pool`` (LLVM: no manager when the threshold is 0)."""
        return self._enabled

    @property
    def debug(self):
        """Active debug mode: ``None``, ``"off-pool"`` or ``"poison"``."""
        return self._debug

    @property
    def device_label(self) -> str:
        return self._label

    @property
    def closed(self) -> bool:
        """True after :meth:`drain` (or :meth:`close`)."""
        return self._closed

    def __repr__(self) -> str:
        return (f"MemoryManager(device_label={self._label!r}, policy={self._policy!r}, "
                f"threshold={self._threshold}, oom={self._oom!r}, cache_limit={self._cap!r}, "
                f"in_use={self._acc >> _SHIFT}, cached={self._held - (self._acc >> _SHIFT)}, "
                f"closed={self._closed})")

    # -- allocate ------------------------------------------------------------

    def allocate(self, size: int) -> int:
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
        if type(size) is not int or size <= 0 or size > self._pool_max:
            return self._allocate_other(size)
        # The hit path (exact policy; the binned one is _BinnedManager's):
        # one lock round trip, three dict operations, one counter.  The
        # least recently freed block of the size (LLVM's multiset find).  The
        # lock's queue is used directly (memory/locking.py), given back in
        # finally.
        # No closed check: drain() empties the free lists, so afterwards
        # every request misses, and the miss path checks.
        lockq = self._lockq
        lockq.get()
        try:
            if self._parcel is not None:
                self._unpark_locked()
            fl = self._free.get(size)
            if fl:
                ptr, rec = fl.popitem(False)
                self._live[ptr] = rec
                self._acc = acc = self._acc + rec[4]    # bytes in use and the hit
                if acc > self._peak_acc:
                    self._peak_acc = acc | _HITS
                if self._log is None:
                    return ptr
                self._event_hit(size, ptr, rec)
            else:
                ptr = 0
        finally:
            lockq.put(TOKEN)
        if ptr:
            self._log.flush()
            return ptr
        return self._allocate_miss(size, True)

    def allocate_many(self, sizes) -> list:
        """:meth:`allocate` of each of ``sizes`` (bytes), in order: the pointers.  The
        same blocks, in the same order, as that many :meth:`allocate` calls (a block
        freed meanwhile by another thread may go to either); the hits at the head of
        the list are served in one lock round trip (exact policy, no event log), the
        rest one by one.  On an error the pointers already obtained are freed again
        and the error is raised (the errors of :meth:`allocate`)."""
        out = []
        if self._batch:
            pool_max = self._pool_max
            free = self._free
            live = self._live
            lockq = self._lockq
            lockq.get()
            try:
                if self._parcel is not None:
                    self._unpark_locked()
                acc = self._acc
                for size in sizes:
                    if type(size) is not int or size <= 0 or size > pool_max:
                        break
                    fl = free.get(size)
                    if not fl:
                        break
                    ptr, rec = fl.popitem(False)
                    live[ptr] = rec
                    acc += rec[4]
                    out.append(ptr)
                if out:
                    self._acc = acc         # only hits: the last figure is the highest
                    if acc > self._peak_acc:
                        self._peak_acc = acc | _HITS
            finally:
                lockq.put(TOKEN)
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

    def free_many(self, ptrs, strict=None) -> None:
        """:meth:`free` of each of ``ptrs``, in order (the order they join the cache
        in: under the exact policy the first one freed is the first a later request
        of its size gets).  The cached frees at the head of the list are done in one
        lock round trip (no cap, event log or poison), the rest one by one; stops at
        the first error, which is raised (the errors of :meth:`free`)."""
        done = 0
        if self._plain:
            live = self._live
            lockq = self._lockq
            lockq.get()
            try:
                if self._parcel is not None:
                    self._unpark_locked()
                acc = self._acc
                for ptr in ptrs:
                    if type(ptr) is not int:
                        break
                    rec = live.pop(ptr, None)
                    if rec is None:
                        break
                    fl = rec[2]
                    if fl is None:
                        live[ptr] = rec     # not pooled: the backend frees it, below
                        break
                    acc -= rec[5]
                    fl[ptr] = rec
                    done += 1
                self._acc = acc
            finally:
                lockq.put(TOKEN)
        if done < len(ptrs):
            free = self.free
            for ptr in ptrs[done:]:
                free(ptr, strict)

    # -- a free put off: the cheap path's round trip ------------------------------

    def park(self, ptrs, known=None):
        """:meth:`free_many` of ``ptrs`` (a list, in that order) put off, for a caller
        that will most likely ask for blocks of the same sizes again before anyone
        else uses the pool (a target region run in a loop: the rows of its kernel
        construct are freed at its end and allocated again at the next one).  Returns a
        parcel for :meth:`reclaim`, or None when the blocks were not parked (not live
        pooled blocks of this manager, another parcel is parked, a size of them has
        cached blocks already, or the policy, ``cache_limit``, event log or poisoning
        make the free do more than cache them); the caller then frees them itself.
        ``known``: ``parcel[1]`` of an earlier parcel of the same blocks (or blocks of
        the same sizes, one each), which spares looking them up again.

        Parked blocks count as cached in every figure (bytes in use drop now), and any
        other call on the manager first frees them as :meth:`free_many` would have, in
        their order, so whoever allocates next gets the block it would have got; the
        parcel is then void."""
        if not (self._batch and self._plain):
            return None
        lockq = self._lockq
        lockq.get()
        try:
            if self._parcel is not None or self._closed:
                return None
            if known is None:
                live = self._live
                lists = {}
                freed = hit = 0
                for ptr in ptrs:
                    rec = live.get(ptr)
                    if rec is None or rec[2] is None:
                        return None
                    lists[id(rec[2])] = rec[2]
                    freed += rec[5]
                    hit += rec[4]
                if len(set(ptrs)) != len(ptrs):
                    return None
                known = (tuple(lists.values()), freed, hit)
            for fl in known[0]:
                if fl:                          # blocks of the size are cached already
                    return None
            parcel = self._parcel = (ptrs, known)
            self._acc -= known[1]
            return parcel
        finally:
            lockq.put(TOKEN)

    def reclaim(self, parcel) -> bool:
        """Take back the blocks of ``parcel`` (:meth:`park`) when nothing else used the
        manager since: True, and the caller holds them again, as if it had allocated
        blocks of their sizes with :meth:`allocate_many` (FIFO per size: among blocks
        of one size the first parked is the first handed out; the caller orders its
        pointers accordingly), counted as that many hits.  False: the parcel was void
        (its blocks were freed as parked) and the caller allocates as usual."""
        lockq = self._lockq
        lockq.get()
        try:
            if self._parcel is not parcel:
                return False
            self._parcel = None
            self._acc = acc = self._acc + parcel[1][2]
            if acc > self._peak_acc:
                self._peak_acc = acc | _HITS
            return True
        finally:
            lockq.put(TOKEN)

    def _settle(self) -> None:
        """Free the parked blocks (:meth:`park`) now, as parked."""
        with self._lock:
            if self._parcel is not None:
                self._unpark_locked()

    def _unpark_locked(self) -> None:
        """(Lock held.)  The parked blocks join their free lists, in their order, as
        :meth:`free_many` would have put them there (their bytes were booked as
        cached when they were parked)."""
        ptrs = self._parcel[0]
        self._parcel = None
        live = self._live
        for ptr in ptrs:
            rec = live.pop(ptr, None)
            if rec is not None:
                rec[2][ptr] = rec

    def _allocate_other(self, size):
        """Requests that are not a pooled int size: checked, then size 0,
        a pooled size given as another integer type, or a bypass."""
        if type(size) is not int:
            if isinstance(size, bool):
                raise TypeError("size must be an int (bytes), not bool")
            try:
                size = operator.index(size)
            except TypeError:
                raise TypeError(f"size must be an int (bytes), not "
                                f"{type(size).__name__}") from None
        if size <= 0:
            if size == 0:
                return 0
            raise ValueError(f"size must be >= 0 bytes, got {size}")
        if size <= self._pool_max:
            return self.allocate(size)
        if size > MAX_SIZE:         # never pooled: threshold <= MAX_SIZE
            raise ValueError(
                f"size {size} bytes does not fit in the plugins' int64/size_t argument "
                f"(at most {MAX_SIZE}); device {self._label or '?'}")
        return self._allocate_miss(size, False)

    def _allocate_miss(self, size, pooled):
        """Obtain ``size`` bytes from the backend (inside the guard) and
        record them; ``pooled``: the block may be cached when freed."""
        if self._closed:                    # re-checked under the lock below
            raise self._closed_error("allocate")
        bucket = self._sizes.bucket(size) if pooled else _BYPASS
        bad = closed = False
        with self._guard:
            ptr = self._balloc(size)
            if not ptr:
                ptr = self._out_of_memory(size, bucket)
            elif type(ptr) is not int:
                ptr = operator.index(ptr)
            with self._lock:
                closed = self._closed
                if not closed:
                    if self._space.claim(ptr, self._ref):
                        self._record_obtained(ptr, size, pooled, bucket)
                    else:
                        bad = True
            if closed:
                # drained while the backend call was in flight: give the block back
                self._bfree(ptr)
        if closed:
            raise self._closed_error("allocate")
        if bad:
            raise OffloadError(
                f"backend_alloc returned {ptr:#x}, which a memory manager of this backend "
                f"already holds (device {self._label or '?'}); the backend is corrupt or the "
                f"block was freed behind the manager's back",
                function="MemoryManager.allocate", device=self._label or None)
        if self._log is not None:
            self._log.flush()
        return ptr

    def _record_obtained(self, ptr, size, pooled, bucket):
        """Book a block just obtained from the backend as live (locked)."""
        fl = None
        if pooled:
            fl = self._free.get(size)
            if fl is None:
                fl = self._free[size] = OrderedDict()
                if self._index is not None:
                    self._index.add(size)       # binned: a size its class can reuse
        self._held = held = self._held + size
        if held > self._peak_held:
            self._peak_held = held
        step = size << _SHIFT
        self._acc = acc = self._acc + step
        if acc > self._peak_acc:
            self._peak_acc = acc | _HITS
        bc = None
        if self._stats_on:
            bc = self._buckets.get(bucket)
            if bc is None:
                bc = self._buckets[bucket] = BucketCounters(bucket)
            bc.obtained(size)
        self._live[ptr] = (size, size, fl, bc, step + self._hit_unit, step)
        if self._log is not None:
            self._log.append({"op": "alloc", "size": size, "ptr": ptr, "hit": False,
                              "block": size, "dev": self._label, "t_ns": now_ns()})

    def _out_of_memory(self, size, bucket):
        """The backend returned 0 for ``size`` bytes: run the OOM ladder;
        raise OutOfDeviceMemoryError when it ends without memory."""
        ptr, released, retries = self._ladder(
            self._release_all_cached, self._release_largest_cached,
            lambda: self._retry(size, bucket))
        if ptr:
            return ptr if type(ptr) is int else operator.index(ptr)
        with self._lock:
            in_use = self._acc >> _SHIFT
            cached = self._held - in_use
        if self._log is not None:
            self._log.flush()
        raise OutOfDeviceMemoryError(
            f"out of device memory on device {self._label or '?'}: requested {size} bytes; "
            f"the backend returned no memory, also after the {self._oom!r} ladder released "
            f"{released} cached bytes and retried {retries} time(s); now {cached} bytes cached, "
            f"{in_use} bytes in use",
            requested=size, cached=cached, in_use=in_use, device=self._label or None,
            function="MemoryManager.allocate")

    def _retry(self, size, bucket):
        if self._stats_on or self._log is not None:
            with self._lock:
                if self._stats_on:
                    bc = self._buckets.get(bucket)
                    if bc is None:
                        bc = self._buckets[bucket] = BucketCounters(bucket)
                    bc.oom_retries += 1
                if self._log is not None:
                    self._log.append({"op": "oom_retry", "size": size, "ptr": 0, "hit": False,
                                      "dev": self._label, "t_ns": now_ns()})
        return self._balloc(size) or 0

    # -- free ------------------------------------------------------------------

    def free(self, ptr: int, strict=None) -> None:
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
        lockq = self._lockq     # see allocate: the lock's queue, inlined
        lockq.get()
        try:
            if self._parcel is not None:
                self._unpark_locked()
            rec = self._live.pop(ptr, None)
            if rec is not None:
                fl = rec[2]
                if fl is not None and self._plain:
                    # a pooled block, no cap/events/poison: cache it (the hot
                    # path).  No closed check: drain() empties _live.
                    self._acc -= rec[5]
                    fl[ptr] = rec
                    return
                self._live[ptr] = rec       # the other path books it
        finally:
            lockq.put(TOKEN)
        self._free_other(ptr, strict)

    def _free_other(self, ptr, strict):
        """Every free that is not a plain cached one: checked, then inside
        the guard booked under the lock and finished outside it."""
        if not ptr:
            return
        if strict is None:
            strict = self._strict
        owner = None
        with self._guard:
            evicted = None
            with self._lock:
                rec = self._live.pop(ptr, None)
                if rec is None:
                    if self._closed:
                        raise self._closed_error("free")
                    holder = self._space.holder(ptr)
                    if holder is self:
                        raise self._double_free_error(ptr)
                    if strict:
                        raise self._unknown_error(ptr)
                    if not 0 <= ptr < PTR_LIMIT:
                        raise ValueError(
                            f"free of {ptr:#x}: not a 64-bit device address (0 <= ptr < "
                            f"2**64); device {self._label or '?'}")
                    if holder is not None:
                        owner = holder          # the block goes back where it came from
                        action = "owner"
                    else:
                        if self._stats_on:
                            self._foreign += 1
                        action = "foreign"
                else:
                    block, fl, bc = rec[1], rec[2], rec[3]
                    if fl is not None and self._poison is None:
                        self._acc = acc = self._acc - rec[5]
                        in_use = acc >> _SHIFT
                        self._cache_locked(ptr, rec)
                        self._event("free", block, ptr, True)
                        if self._cap is not None and self._held - in_use > self._cap:
                            evicted = self._choose_locked(
                                eviction.fewest_oldest(self._free, self._stamps,
                                                       self._held - in_use - self._cap),
                                "evict", "cap")
                        action = "cached"
                    elif fl is not None:
                        self._transit[ptr] = rec     # still counted in use while poisoned
                        action = "poison"
                    else:
                        self._acc -= rec[5]
                        self._held -= block
                        self._space.release(ptr)
                        if bc is not None:
                            bc.released(block)
                        self._event("free", block, ptr, False)
                        action = "backend"      # bypass / pooling off
            if action == "cached":
                if evicted:
                    self._release(evicted)
            elif action == "backend":
                try:
                    self._bfree(ptr)
                except BaseException:
                    self._restore_live(ptr, rec)
                    raise
            elif action == "poison":
                self._free_poisoned(ptr, rec)
            elif action == "foreign":
                self._bfree(ptr)
        if owner is not None:
            owner.free(ptr, strict=False)
        if self._log is not None:
            self._log.flush()

    def _restore_live(self, ptr, rec):
        """Undo the bookkeeping of a free whose ``backend_free`` raised: the
        plugin still holds the block, so it is the caller's live block again
        (no other thread can have been handed the same address meanwhile)."""
        block, bc = rec[1], rec[3]
        with self._lock:
            if self._closed:
                return      # drained meanwhile: the plugin frees it at deinit_device
            self._space.claim(ptr, self._ref)
            self._live[ptr] = rec
            self._acc = acc = self._acc + rec[5]
            self._held = held = self._held + block
            if acc > self._peak_acc:
                self._peak_acc = acc | _HITS
            if held > self._peak_held:
                self._peak_held = held
            if bc is not None:
                bc.unreleased(block)
            if self._log is not None:
                self._log.append({"op": "free_failed", "size": block, "ptr": ptr,
                                  "hit": False, "requested": rec[0], "dev": self._label,
                                  "t_ns": now_ns()})
        if self._log is not None:
            self._log.flush()

    def _free_poisoned(self, ptr, rec):
        """Debug ``poison``: fill the block (outside the lock), then cache it;
        if poisoning fails, the block is released to the backend instead."""
        block, bc = rec[1], rec[3]
        try:
            self._poison(ptr, block)
        except BaseException:
            with self._lock:
                del self._transit[ptr]
                self._acc -= rec[5]
                self._held -= block
                self._space.release(ptr)
                if bc is not None:
                    bc.released(block)
                self._event("free", block, ptr, False)
            try:
                self._bfree(ptr)
            except BaseException:
                self._restore_live(ptr, rec)    # the plugin still holds it
                raise
            raise
        evicted = None
        with self._lock:
            del self._transit[ptr]
            self._acc = acc = self._acc - rec[5]
            in_use = acc >> _SHIFT
            if self._closed:
                self._held -= block
                self._space.release(ptr)
                if bc is not None:
                    bc.released(block)
                self._event("free", block, ptr, False)
                to_backend = True
            else:
                to_backend = False
                self._cache_locked(ptr, rec)
                self._event("free", block, ptr, True)
                if self._cap is not None and self._held - in_use > self._cap:
                    evicted = self._choose_locked(
                        eviction.fewest_oldest(self._free, self._stamps,
                                               self._held - in_use - self._cap),
                        "evict", "cap")
        if to_backend:
            self._bfree(ptr)
        elif evicted:
            self._release(evicted)

    # -- the cache -----------------------------------------------------------------

    def _cache_locked(self, ptr, rec):
        """Put a block on its free list (the young end)."""
        rec[2][ptr] = rec
        if self._stamps is not None:
            self._clock = c = self._clock + 1
            self._stamps[ptr] = c


class _BinnedManager(MemoryManager):
    """A :class:`MemoryManager` with the binned policy (what
    ``MemoryManager(..., policy="binned")`` makes): its hit path reuses a
    cached block of exactly the request's size first, else the smallest
    larger cached block of the request's size class
    (:class:`~offload_shim.memory.policies.SizeClassIndex`)."""

    __slots__ = ()

    def allocate(self, size: int) -> int:
        if type(size) is not int or size <= 0 or size > self._pool_max:
            return self._allocate_other(size)
        lockq = self._lockq
        lockq.get()
        try:
            fl = self._free.get(size)
            if not fl:
                fl = self._index.larger(size, self._free)
            if fl:
                ptr, rec = fl.popitem()
                if rec[0] != size:          # a larger block, or one a smaller request had
                    rec = (size,) + rec[1:]
                self._live[ptr] = rec
                self._acc = acc = self._acc + rec[4]    # bytes in use and the hit
                if acc > self._peak_acc:
                    self._peak_acc = acc | _HITS
                if self._log is None:
                    return ptr
                self._event_hit(size, ptr, rec)
            else:
                ptr = 0
        finally:
            lockq.put(TOKEN)
        if ptr:
            self._log.flush()
            return ptr
        return self._allocate_miss(size, True)

    allocate.__doc__ = MemoryManager.allocate.__doc__
