"""OOM ladders: what the manager does when ``backend_alloc`` returns 0.

A ladder gets four callables from the manager and returns ``(ptr, reused,
released_bytes, retries)`` (``ptr`` 0: still no memory; the manager then
searches its cache once more under its lock and raises
:class:`~offload_shim.errors.OutOfDeviceMemoryError` if nothing fits;
``reused``: ``ptr`` is a cached block taken by ``reuse``, already booked as
a hit, not memory from the backend):

* ``release_all() -> bytes``: release every cached block;
* ``release_largest() -> bytes | None``: release the largest cached block
  (the least recently freed of that size); ``None`` when nothing is cached;
* ``retry() -> ptr``: ask the backend again (0: out of memory);
* ``reuse() -> ptr``: take a cached block that fits the request, as a cache
  hit would (0: none).  Another thread may free a fitting block while the
  ladder releases blocks or waits for the backend; it is then cached, and
  the backend, whose memory it holds, cannot serve the retry.

Every release step is followed by ``reuse`` before ``retry`` (PyTorch's
``CUDACachingAllocator`` searches its pool again after releasing cached
blocks, pytorch/pytorch#189504; LLVM 19's ``MemoryManagerTy::freeAndAllocate``
in ``plugins-nextgen/common/include/MemoryManager.h`` retries the device
only, and raises its OOM with a fitting block cached when a free lands in
that window).  Blocks are released through the backend before the retry, so
the plugin can reuse their memory.  Any exception from a callable propagates.
"""

from __future__ import annotations

import operator

from ..errors import OutOfDeviceMemoryError
from .records import HITS as _HITS, SHIFT as _SHIFT
from .stats import BucketCounters

__all__ = ["LADDERS", "OutOfMemory", "free_all", "incremental"]


def free_all(release_all, release_largest, retry, reuse):
    """LLVM ``MemoryManagerTy::freeAndAllocate``: release every cached
    block, then reuse a fitting block cached meanwhile or retry once (also
    when nothing was cached: another thread may have freed meanwhile)."""
    released = release_all()
    ptr = reuse()
    if ptr:
        return ptr, True, released, 0
    return retry(), False, released, 1


def incremental(release_all, release_largest, retry, reuse):
    """D81054's summary ("walk through all free buffers from the bucket with
    largest base size, pick up one buffer, free it, and try to allocate
    immediately"): release the largest cached block, reuse a fitting block
    cached meanwhile or retry, repeat until one of them succeeds or the
    cache is empty; one attempt if it was empty from the start."""
    released = retries = 0
    while True:
        n = release_largest()
        if n is None:
            break
        released += n
        ptr = reuse()
        if ptr:
            return ptr, True, released, retries
        retries += 1
        ptr = retry()
        if ptr:
            return ptr, False, released, retries
    if retries == 0:
        ptr = reuse()
        if ptr:
            return ptr, True, released, 0
        return retry(), False, released, 1
    return 0, False, released, retries


#: ``oom=`` option -> ladder.
LADDERS = {"free-all": free_all, "incremental": incremental}


class OutOfMemory:
    """The part of :class:`~offload_shim.memory.MemoryManager` that runs when the
    backend has no memory: the ladder of the manager's ``oom`` option over its
    release, reuse and retry steps, and the :class:`OutOfDeviceMemoryError` at its
    end (a mixin: the manager's tables and lock are its own; its locking rule holds
    here too)."""

    __slots__ = ()

    def _out_of_memory(self, size, bucket, pooled):
        """The backend returned 0 for ``size`` bytes: run the OOM ladder (:mod:`.oom`),
        which searches the cache again after each release step (a block that fits may
        have been freed by another thread meanwhile: PyTorch's caching allocator does
        the same after its release, pytorch #189504; LLVM's ``freeAndAllocate`` does
        not).  Returns ``(ptr, reused)``: ``reused`` when ``ptr`` is a cached block
        (booked as a hit), else backend memory.  Before raising
        OutOfDeviceMemoryError the cache is searched once more, under the lock that
        reads the error's figures, so no fitting block is left cached behind an OOM.
        ``pooled`` False (a bypass): nothing cached fits."""
        reuse = (lambda: self._reuse_cached(size)) if pooled else (lambda: 0)
        ptr, reused, released, retries = LADDERS[self._cfg.oom](
            self._release_all_cached, self._release_largest_cached,
            lambda: self._retry(size, bucket), reuse)
        if ptr:
            return (ptr if type(ptr) is int else operator.index(ptr)), reused
        with self._lock:
            ptr = self._reuse_locked(size) if pooled else 0
            if not ptr:
                in_use = self._acc >> _SHIFT
                cached = self._held - in_use
        if ptr:
            return ptr, True
        if self._log is not None:
            self._log.flush()
        label = self._cfg.device_label
        raise OutOfDeviceMemoryError(
            f"out of device memory on device {label or '?'}: requested {size} bytes; "
            f"the backend returned no memory, also after the {self._cfg.oom!r} ladder "
            f"released {released} cached bytes and retried {retries} time(s); now {cached} "
            f"bytes cached, {in_use} bytes in use, none of them a block that fits",
            requested=size, cached=cached, in_use=in_use, device=label or None,
            function="MemoryManager.allocate")

    def _reuse_cached(self, size):
        """OOM ladder step: a cached block that fits ``size`` bytes, taken as a hit;
        0 if none."""
        with self._lock:
            return self._reuse_locked(size)

    def _reuse_locked(self, size):
        """(Lock held.)  The hit path of :meth:`allocate`, for the OOM ladder and for
        :meth:`_hit_slow_locked` (a pool with parked frees or an event log): take a
        cached block that fits ``size`` bytes (a pooled int size; the policy's choice,
        as on the hit path) and book it as live and as a hit, with its ``alloc`` event;
        0 if none is cached.  No closed check: drain empties the free lists."""
        if self._parcel is not None:
            self._unpark_locked()
        fl = self._free.get(size)
        if not fl and self._index is not None:
            fl = self._index.larger(size, self._free)
        if not fl:
            return 0
        if self._newest_first:
            block = fl.pop()
            block.requested = size
        else:
            block = fl.popleft()
        ptr = block.ptr
        self._live[ptr] = block
        self._acc = acc = self._acc + block.hit_step
        if acc > self._peak_acc:
            self._peak_acc = acc | _HITS
        if self._log is not None:
            self._log.record("alloc", size, ptr, True, {"block": block.size})
        return ptr

    def _retry(self, size, bucket):
        """One rung of the ladder: ask the backend again (counted and logged)."""
        stats = self._cfg.stats
        if stats or self._log is not None:
            with self._lock:
                if stats:
                    bc = self._buckets.get(bucket)
                    if bc is None:
                        bc = self._buckets[bucket] = BucketCounters(bucket)
                    bc.oom_retries += 1
                if self._log is not None:
                    self._log.record("oom_retry", size, 0, False)
        return self._balloc(size) or 0
