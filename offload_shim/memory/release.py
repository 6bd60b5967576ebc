"""Blocks going back: the frees that are more than one dict store (a block above the
threshold or with pooling off, debug ``poison``, the cap, a pointer of another manager
or of none), and the releases of cached blocks (the cap's, the OOM ladders' steps,
``trim``, ``drain``).

:class:`BlockRelease` is a part of :class:`~offload_shim.memory.MemoryManager` (a
mixin: the manager's tables and lock are its own; its locking rule holds here too).
Which cached blocks go is :mod:`.eviction`'s choice; here they are taken out of the
tables under the lock (``*_locked`` methods) and freed through the backend outside it
(:meth:`BlockRelease._release`).
"""

from __future__ import annotations

import sys

from ..errors import LifecycleError
from . import eviction
from .config import PTR_LIMIT, nonneg_int
from .records import HITS as _HITS, SHIFT as _SHIFT

__all__ = ["BlockRelease"]


class BlockRelease:
    """The part of :class:`~offload_shim.memory.MemoryManager` that gives blocks back."""

    __slots__ = ()

    # -- the frees that are not one dict store --------------------------------------

    def _free_other(self, ptr, strict):
        """Every free that is not a plain cached one: checked, then inside
        the guard booked under the lock and finished outside it."""
        if not ptr:
            return
        if strict is None:
            strict = self._cfg.strict
        owner = None
        with self._guard:
            evicted = None
            with self._lock:
                block = self._live.pop(ptr, None)
                if block is None:
                    action, owner = self._free_unknown_locked(ptr, strict)
                elif block.free_list is None:
                    self._book_backend_free_locked(ptr, block)
                    action = "backend"      # bypass / pooling off
                elif self._poison is None:
                    evicted = self._cache_freed_locked(ptr, block)
                    action = "cached"
                else:
                    self._transit[ptr] = block      # still counted in use while poisoned
                    action = "poison"
            if action == "cached":
                if evicted:
                    self._release(evicted)
            elif action == "backend":
                try:
                    self._bfree(ptr)
                except BaseException:
                    self._restore_live(ptr, block)
                    raise
            elif action == "poison":
                self._free_poisoned(ptr, block)
            elif action == "foreign":
                self._bfree(ptr)
        if owner is not None:
            owner.free(ptr, strict=False)
        if self._log is not None:
            self._log.flush()

    def _free_unknown_locked(self, ptr, strict):
        """A free of a pointer that is not live here: ``("owner", manager)`` when
        another manager of the backend holds it (the block goes back where it came
        from), ``("foreign", None)`` when none does (counted); raises for a closed
        manager, a double free, with ``strict``, and for a pointer that is not a
        64-bit address."""
        if self._closed:
            raise self._closed_error("free")
        holder = self._space.holder(ptr)
        if holder is self:
            raise self._double_free_error(ptr)
        if strict:
            raise self._unknown_error(ptr)
        if not 0 <= ptr < PTR_LIMIT:
            raise ValueError(f"free of {ptr:#x}: not a 64-bit device address (0 <= ptr < "
                             f"2**64); device {self._cfg.device_label or '?'}")
        if holder is not None:
            return "owner", holder
        if self._cfg.stats:
            self._foreign += 1
        return "foreign", None

    def _book_backend_free_locked(self, ptr, block, reason=None):
        """Book ``block`` (taken out of the tables) as returned to the backend:
        bytes in use and held, the address space, its bucket, a ``free`` event."""
        size = block.size
        self._acc -= block.free_step
        self._held -= size
        self._space.release(ptr)
        if block.bucket is not None:
            block.bucket.released(size)
        self._event_locked("free", size, ptr, False, reason)

    def _cache_freed_locked(self, ptr, block):
        """A freed (or poisoned) block goes into the cache; returns the cached
        blocks the cap then releases (for :meth:`_release`), or None."""
        self._acc = acc = self._acc - block.free_step
        self._cache_locked(ptr, block)
        self._event_locked("free", block.size, ptr, True)
        cap = self._cfg.cache_limit
        cached = self._held - (acc >> _SHIFT)
        if cap is not None and cached > cap:
            return self._choose_locked(
                eviction.fewest_oldest(self._free, self._stamps, cached - cap),
                "evict", "cap")
        return None

    def _restore_live(self, ptr, block):
        """Undo the bookkeeping of a free whose ``backend_free`` raised: the
        plugin still holds the block, so it is the caller's live block again
        (no other thread can have been handed the same address meanwhile)."""
        size = block.size
        with self._lock:
            if self._closed:
                return      # drained meanwhile: the plugin frees it at deinit_device
            self._space.claim(ptr, self._ref)
            self._live[ptr] = block
            self._acc = acc = self._acc + block.free_step
            self._held = held = self._held + size
            if acc > self._peak_acc:
                self._peak_acc = acc | _HITS
            self._peak_open = (self._peak_acc >> _SHIFT) < held     # held grew
            if held > self._peak_held:
                self._peak_held = held
            if block.bucket is not None:
                block.bucket.unreleased(size)
            if self._log is not None:
                self._log.record("free_failed", size, ptr, False,
                                 {"requested": block.requested})
        if self._log is not None:
            self._log.flush()

    def _free_poisoned(self, ptr, block):
        """Debug ``poison``: fill the block (outside the lock), then cache it;
        if poisoning fails, the block is released to the backend instead."""
        try:
            self._poison(ptr, block.size)
        except BaseException:
            with self._lock:
                del self._transit[ptr]
                self._book_backend_free_locked(ptr, block)
            try:
                self._bfree(ptr)
            except BaseException:
                self._restore_live(ptr, block)    # the plugin still holds it
                raise
            raise
        evicted = None
        with self._lock:
            del self._transit[ptr]
            to_backend = self._closed
            if to_backend:
                self._book_backend_free_locked(ptr, block)
            else:
                evicted = self._cache_freed_locked(ptr, block)
        if to_backend:
            self._bfree(ptr)
        elif evicted:
            self._release(evicted)

    # -- choosing and releasing cached blocks --------------------------------------

    def _choose_locked(self, chosen, op, reason):
        """Take the cached blocks ``[(ptr, size), ...]`` out of the cache and
        book their release (counters, address space, events); returns the
        ``[(ptr, Block), ...]`` to pass to :meth:`_release`."""
        victims = []
        free, stamps = self._free, self._stamps
        released = 0
        for ptr, size in chosen:
            fl = free[size]
            block = fl.popleft()            # :mod:`.eviction` takes the oldest first
            if block.ptr != ptr:            # (not the oldest: put it back, find it)
                fl.appendleft(block)
                block = next(b for b in fl if b.ptr == ptr)
                fl.remove(block)
            if stamps is not None:
                stamps.pop(ptr, None)
            released += size
            self._space.release(ptr)
            bc = block.bucket
            if bc is not None:
                bc.evictions += 1
                bc.released(size)
            self._event_locked(op, size, ptr, False, reason)
            victims.append((ptr, block))
        self._held -= released
        return victims

    def _all_cached_locked(self):
        return [(block.ptr, size) for size, fl in self._free.items() for block in fl]

    def _release(self, victims) -> int:
        """Free ``(ptr, Block)`` pairs already taken out of the tables
        through the backend, outside the lock.  All are attempted; the first
        exception is re-raised at the end.  A block whose ``backend_free``
        raised is still held by the plugin: unless the manager is closed
        (drain) it goes back into the cache, its release uncounted, so a
        later trim retries it."""
        err = None
        failed = None
        released = 0
        bfree = self._bfree
        for ptr, block in victims:
            try:
                bfree(ptr)
                released += block.size
            except BaseException as e:      # keep freeing the others
                if err is None:
                    err = e
                    failed = []
                failed.append((ptr, block))
        if err is not None:
            self._recache(failed)
            raise err
        return released

    def _recache(self, failed):
        """Cached blocks whose ``backend_free`` raised go back into the cache."""
        with self._lock:
            if self._closed:
                return      # drain: the plugin frees them at deinit_device
            for ptr, block in failed:
                self._space.claim(ptr, self._ref)
                self._cache_locked(ptr, block)
                self._held = held = self._held + block.size
                if held > self._peak_held:
                    self._peak_held = held
                bc = block.bucket
                if bc is not None:
                    bc.evictions -= 1
                    bc.unreleased(block.size)
            self._peak_open = (self._peak_acc >> _SHIFT) < self._held     # held grew

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
        its live blocks.  The pointer table is copied when it is mostly empty
        slots (free lists, deques, give their memory back as they shrink)."""
        live = self._live
        if sys.getsizeof(live) > 4096 + 128 * len(live):
            self._live = dict(live)

    def release_all(self) -> int:
        """Release every cached block; returns the bytes released."""
        return self.trim(0)

    def drain(self) -> tuple:
        """Teardown: close the manager, then free every cached block and every
        live block through the backend -- before the plugin's ``deinit_device``
        (LLVM ``GenericDeviceTy::deinit`` deletes its manager before
        ``deinitImpl``; review D81054's TODO: the plugin library destroyed
        before the memory manager).

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
            for ptr, block in live:
                live_bytes += block.size
                self._book_backend_free_locked(ptr, block, "drain")
                victims.append((ptr, block))
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
