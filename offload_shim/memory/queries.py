"""What a memory manager answers: live pointers and sizes, statistics, the event log,
and the errors its paths raise.

:class:`PoolQueries` is a part of :class:`~offload_shim.memory.MemoryManager` (a
mixin: the manager's tables and lock are its own).
"""

from __future__ import annotations

from itertools import chain

from ..errors import LifecycleError, UnknownPointerError
from .events import now_ns
from .records import HITS as _HITS, SHIFT as _SHIFT
from .stats import PoolStats, snapshot

__all__ = ["PoolQueries"]

_NO_DEFAULT = object()


class PoolQueries:
    """The answering part of :class:`~offload_shim.memory.MemoryManager`."""

    __slots__ = ()

    def owns(self, ptr) -> bool:
        """True if ``ptr`` is a live allocation handed out by this manager
        (cached blocks are not live)."""
        if self._parcel is not None:
            self._settle()
        return ptr in self._live            # one dict lookup: atomic

    def size_of(self, ptr, default=_NO_DEFAULT) -> int:
        """Requested size in bytes of a live allocation.  If ``ptr`` is not
        live here: ``default`` when given, else ``KeyError``."""
        if self._parcel is not None:
            self._settle()
        rec = self._live.get(ptr)           # one dict lookup: atomic
        if rec is None:
            if default is _NO_DEFAULT:
                raise KeyError(ptr)
            return default
        return rec[0]

    def sizes_of(self, ptrs) -> list:
        """:meth:`size_of` of each pointer (None for one that is not live here)."""
        if self._parcel is not None:
            self._settle()
        live = self._live
        recs = [live.get(p) for p in ptrs]          # one dict lookup each: atomic
        return [None if rec is None else rec[0] for rec in recs]

    def block_size_of(self, ptr) -> int:
        """Bytes held from the backend for a live allocation (under
        ``binned`` at least the requested size); ``KeyError`` if ``ptr`` is
        not live here."""
        if self._parcel is not None:
            self._settle()
        rec = self._live.get(ptr)
        if rec is None:
            raise KeyError(ptr)
        return rec[1]

    def live_allocations(self) -> list:
        """``[(ptr, requested bytes), ...]`` of the live allocations (blocks
        being poisoned are no longer live); a snapshot, O(live blocks)."""
        with self._lock:
            if self._parcel is not None:
                self._unpark_locked()
            items = list(self._live.items())
        return [(p, rec[0]) for p, rec in items]

    @property
    def stats(self) -> PoolStats:
        """A consistent :class:`PoolStats` snapshot.  The counters and tables
        are copied under the lock; gauges (per-bucket bytes and blocks in use
        and cached) are then derived outside it, O(live + cached blocks)."""
        with self._lock:
            if self._parcel is not None:
                self._unpark_locked()
            cached = list(chain.from_iterable(fl.values() for fl in self._free.values()))
            acc = self._acc
            figures = dict(in_use=acc >> _SHIFT, hits=acc & _HITS, held=self._held,
                           peak_in_use=self._peak_acc >> _SHIFT, peak_held=self._peak_held,
                           foreign=self._foreign,
                           live_blocks=len(self._live) + len(self._transit),
                           cached_blocks=len(cached))
            if self._stats_on:
                counters = [(bc, bc.counts()) for bc in self._buckets.values()]
                live = list(self._live.values())
                live += self._transit.values()
            else:
                counters, live, cached = None, (), ()
        return snapshot(counters=counters, live=live, cached=cached, **figures)

    # -- event log ---------------------------------------------------------------

    def flush_event_log(self) -> None:
        """Write pending events and flush the event log file."""
        if self._log is not None:
            self._log.flush(sync=True)

    def _event_hit(self, size, ptr, rec):
        self._log.append({"op": "alloc", "size": size, "ptr": ptr, "hit": True,
                          "block": rec[1], "dev": self._label, "t_ns": now_ns()})

    def _event(self, op, size, ptr, hit, reason=None):
        """Queue an event (called under the lock); no-op without a log."""
        log = self._log
        if log is not None:
            ev = {"op": op, "size": size, "ptr": ptr, "hit": hit, "dev": self._label,
                  "t_ns": now_ns()}
            if reason is not None:
                ev["reason"] = reason
            log.append(ev)

    # -- errors / test hooks -----------------------------------------------------

    def _closed_error(self, op):
        return LifecycleError(
            f"{op} on the memory manager of device {self._label or '?'}, which is closed "
            f"(drained when its device was deinitialised or closed)",
            function=f"MemoryManager.{op}", device=self._label or None)

    def _double_free_error(self, ptr):
        return UnknownPointerError(
            f"double free of device pointer {ptr:#x} on device {self._label or '?'}: it was "
            f"already freed and the memory manager caches it",
            function="MemoryManager.free", device=self._label or None)

    def _unknown_error(self, ptr):
        return UnknownPointerError(
            f"free of device pointer {ptr:#x}, which is not a live allocation of the memory "
            f"manager of device {self._label or '?'} (never handed out, or already freed)",
            function="MemoryManager.free", device=self._label or None)

    def _locks(self):
        """The manager's locks (for tests that check none is left held)."""
        locks = [self._lock]
        if self._log is not None:
            locks.append(self._log.lock())
        return tuple(locks)
