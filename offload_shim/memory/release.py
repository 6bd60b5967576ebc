"""Releasing cached blocks: the cap, ``trim``, the OOM ladders' steps and ``drain``.

:class:`CacheRelease` is a part of :class:`~offload_shim.memory.MemoryManager` (a
mixin: the manager's tables and lock are its own).  Which blocks go is
:mod:`.eviction`'s choice; here they are taken out of the tables under the lock
(``*_locked`` methods) and freed through the backend outside it (:meth:`_release`).
"""

from __future__ import annotations

import sys

from ..errors import LifecycleError
from . import eviction
from .config import nonneg_int
from .records import SHIFT as _SHIFT

__all__ = ["CacheRelease"]


class CacheRelease:
    """The releasing part of :class:`~offload_shim.memory.MemoryManager`."""

    __slots__ = ()

    # -- choosing and releasing cached blocks --------------------------------------

    def _choose_locked(self, chosen, op, reason):
        """Take the cached blocks ``[(ptr, size), ...]`` out of the cache and
        book their release (counters, address space, events); returns the
        ``[(ptr, record), ...]`` to pass to :meth:`_release`."""
        victims = []
        free, stamps = self._free, self._stamps
        released = 0
        for ptr, size in chosen:
            rec = free[size].pop(ptr)
            if stamps is not None:
                stamps.pop(ptr, None)
            released += size
            self._space.release(ptr)
            bc = rec[3]
            if bc is not None:
                bc.evictions += 1
                bc.released(size)
            self._event(op, size, ptr, False, reason)
            victims.append((ptr, rec))
        self._held -= released
        return victims

    def _all_cached_locked(self):
        return [(ptr, size) for size, fl in self._free.items() for ptr in fl]

    def _release(self, victims) -> int:
        """Free ``(ptr, record)`` pairs already taken out of the tables
        through the backend, outside the lock.  All are attempted; the first
        exception is re-raised at the end.  A block whose ``backend_free``
        raised is still held by the plugin: unless the manager is closed
        (drain) it goes back into the cache, its release uncounted, so a
        later trim retries it."""
        err = None
        failed = None
        released = 0
        bfree = self._bfree
        for victim in victims:
            try:
                bfree(victim[0])
                released += victim[1][1]
            except BaseException as e:      # keep freeing the others
                if err is None:
                    err = e
                    failed = []
                failed.append(victim)
        if err is not None:
            self._recache(failed)
            raise err
        return released

    def _recache(self, failed):
        with self._lock:
            if self._closed:
                return      # drain: the plugin frees them at deinit_device
            for ptr, rec in failed:
                block, bc = rec[1], rec[3]
                self._space.claim(ptr, self._ref)
                self._cache_locked(ptr, rec)
                self._held = held = self._held + block
                if held > self._peak_held:
                    self._peak_held = held
                if bc is not None:
                    bc.evictions -= 1
                    bc.unreleased(block)

    def _release_all_cached(self) -> int:
        """OOM ladder step: release every cached block."""
        with self._lock:
            if self._parcel is not None:
                self._unpark_locked()
            victims = self._choose_locked(self._all_cached_locked(), "evict", "oom")
        return self._release(victims)

    def _release_largest_cached(self):
        """OOM ladder step: release the largest cached block; None if none."""
        with self._lock:
            if self._parcel is not None:
                self._unpark_locked()
            chosen = eviction.largest_first(self._free, 1)
            if not chosen:
                return None
            victims = self._choose_locked(chosen, "evict", "oom")
        return self._release(victims)

    # -- releasing cached blocks ---------------------------------------------

    def trim(self, keep_bytes: int = 0) -> int:
        """Release cached blocks until at most ``keep_bytes`` bytes stay
        cached: the fewest blocks that do it, largest sizes first, the least
        recently freed of a size first (each release is a backend free);
        the manager's tables shrink back after a burst of blocks.  CuPy
        ``free_all_blocks``, RMM ``release``, PyTorch ``empty_cache`` for
        ``keep_bytes=0``; LLVM has no trim.  Returns the bytes released
        through ``backend_free``; 0 after :meth:`drain` or when ``guard``
        refuses (the device is being torn down: its drain releases them)."""
        keep = nonneg_int(keep_bytes, "keep_bytes")
        if self._closed:
            return 0
        guard = self._guard
        try:
            guard.__enter__()
        except LifecycleError:
            return 0
        try:
            with self._lock:
                if self._closed:
                    return 0
                if self._parcel is not None:
                    self._unpark_locked()
                need = self._held - (self._acc >> _SHIFT) - keep
                if need <= 0:
                    return 0
                chosen = (self._all_cached_locked() if keep == 0
                          else eviction.largest_first(self._free, need))
                victims = self._choose_locked(chosen, "trim", "trim")
                self._compact_locked()
            released = self._release(victims)
        finally:
            guard.__exit__(None, None, None)
            if self._log is not None:
                self._log.flush()
        return released

    def _compact_locked(self):
        """Give back the memory of tables a burst left sparse: a dict keeps
        its table size after deletions, and a hit on a pointer table once
        sized for 100,000 blocks touches more cache lines than one sized for
        its live blocks.  Free lists emptied by the trim shrink in place
        (records hold them); the pointer table is copied when it is mostly
        empty slots."""
        for fl in self._free.values():
            if not fl:
                fl.clear()
        live = self._live
        if sys.getsizeof(live) > 4096 + 128 * len(live):
            self._live = dict(live)

    def release_all(self) -> int:
        """Release every cached block; returns the bytes released."""
        return self.trim(0)

    def drain(self) -> tuple:
        """Teardown (LLVM GenericDeviceTy::deinit, D81054 TODO "plugin destroyed
        before the memory manager"): close the manager, then free every
        cached block and every live block through the backend.

        Returns ``(live_count, live_bytes)``: blocks (and their bytes, block
        sizes) still in use by the caller, i.e. leaked.  Afterwards
        :meth:`allocate`/:meth:`free` raise :class:`LifecycleError`; a second
        ``drain`` returns ``(0, 0)``.  If ``backend_free`` raises, every
        other block is still freed and the first exception is re-raised
        (the manager stays closed; the plugin frees what it still holds at
        ``deinit_device``).  Every live block freed here is logged as a
        ``free`` event with ``"reason": "drain"``, cached ones as ``trim``
        events with ``"reason": "drain"``.  A file ``event_log`` given as a
        path is closed.  ``guard`` is not entered: the owner drains while
        it tears the device down.
        """
        with self._lock:
            if self._closed:
                return (0, 0)
            if self._parcel is not None:
                self._unpark_locked()
            self._closed = True
            victims = self._choose_locked(self._all_cached_locked(), "trim", "drain")
            self._free.clear()
            if self._index is not None:
                self._index.clear()
            if self._stamps is not None:
                self._stamps.clear()
            live = list(self._live.items())
            self._live.clear()
            live_bytes = 0
            for ptr, rec in live:
                block, bc = rec[1], rec[3]
                live_bytes += block
                self._space.release(ptr)
                if bc is not None:
                    bc.released(block)
                self._event("free", block, ptr, False, "drain")
                victims.append((ptr, rec))
            self._acc -= live_bytes << _SHIFT
            self._held -= live_bytes
        try:
            self._release(victims)
        finally:
            if self._log is not None:
                self._log.close()
        return (len(live), live_bytes)

    def close(self) -> None:
        """Same as :meth:`drain`, discarding its result; idempotent."""
        self.drain()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.drain()
