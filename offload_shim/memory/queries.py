"""What a memory manager answers: its configuration, live pointers and sizes,
statistics, the event log, and the errors its paths raise.

:class:`PoolQueries` is a part of :class:`~offload_shim.memory.MemoryManager` (a
mixin: the manager's tables and lock are its own).
"""

from __future__ import annotations

from itertools import chain

from ..errors import LifecycleError, UnknownPointerError
from .records import HITS as _HITS, SHIFT as _SHIFT
from .stats import PoolStats, snapshot

__all__ = ["PoolQueries"]

_NO_DEFAULT = object()


class PoolQueries:
    """The answering part of :class:`~offload_shim.memory.MemoryManager`."""

    __slots__ = ()

    # -- read-only configuration -------------------------------------------

    @property
    def threshold(self) -> int:
        """Largest pooled request in bytes (LLVM ``SizeThreshold``)."""
        return self._cfg.threshold

    @property
    def policy(self) -> str:
        """``"exact"`` or ``"binned"``."""
        return self._cfg.policy

    @property
    def oom(self) -> str:
        """OOM ladder: ``"free-all"`` or ``"incremental"``."""
        return self._cfg.oom

    @property
    def cache_limit(self):
        """Cap on cached bytes, or ``None``."""
        return self._cfg.cache_limit

    @property
    def enabled(self) -> bool:
        """True when blocks are cached: threshold > 0 and debug mode is not
        ``off-pool`` (LLVM: no manager when the threshold is 0)."""
        return self._cfg.enabled

    @property
    def debug(self):
        """Active debug mode: ``None``, ``"off-pool"`` or ``"poison"``."""
        return self._cfg.debug

    @property
    def device_label(self) -> str:
        return self._cfg.device_label

    @property
    def closed(self) -> bool:
        """True after :meth:`drain` (or :meth:`close`)."""
        return self._closed

    def __repr__(self) -> str:
        c = self._cfg
        return (f"MemoryManager(device_label={c.device_label!r}, policy={c.policy!r}, "
                f"threshold={c.threshold}, oom={c.oom!r}, cache_limit={c.cache_limit!r}, "
                f"in_use={self._acc >> _SHIFT}, cached={self._held - (self._acc >> _SHIFT)}, "
                f"closed={self._closed})")

    # -- pointers ------------------------------------------------------------

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
        block = self._live.get(ptr)         # one dict lookup: atomic
        if block is None:
            if default is _NO_DEFAULT:
                raise KeyError(ptr)
            return default
        return block.requested

    def sizes_of(self, ptrs) -> list:
        """:meth:`size_of` of each pointer (None for one that is not live here)."""
        if self._parcel is not None:
            self._settle()
        live = self._live
        blocks = [live.get(p) for p in ptrs]        # one dict lookup each: atomic
        return [None if b is None else b.requested for b in blocks]

    def block_size_of(self, ptr) -> int:
        """Bytes held from the backend for a live allocation (under
        ``binned`` at least the requested size); ``KeyError`` if ``ptr`` is
        not live here."""
        if self._parcel is not None:
            self._settle()
        block = self._live.get(ptr)
        if block is None:
            raise KeyError(ptr)
        return block.size

    def live_allocations(self) -> list:
        """``[(ptr, requested bytes), ...]`` of the live allocations (blocks
        being poisoned are no longer live); a snapshot, O(live blocks)."""
        with self._lock:
            if self._parcel is not None:
                self._unpark_locked()
            # under the lock: a binned hit sets a record's requested size
            return [(p, block.requested) for p, block in self._live.items()]

    @property
    def stats(self) -> PoolStats:
        """A consistent :class:`PoolStats` snapshot.  The counters and tables
        are copied under the lock; gauges (per-bucket bytes and blocks in use
        and cached) are then derived outside it, O(live + cached blocks)."""
        with self._lock:
            if self._parcel is not None:
                self._unpark_locked()
            cached = list(chain.from_iterable(self._free.values()))
            acc = self._acc
            figures = dict(in_use=acc >> _SHIFT, hits=acc & _HITS, held=self._held,
                           peak_in_use=self._peak_acc >> _SHIFT, peak_held=self._peak_held,
                           foreign=self._foreign,
                           live_blocks=len(self._live) + len(self._transit),
                           cached_blocks=len(cached))
            if self._cfg.stats:
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

    def _event_locked(self, op, size, ptr, hit, reason=None):
        """Queue an event (:meth:`EventLog.record`); no-op without a log."""
        if self._log is not None:
            self._log.record(op, size, ptr, hit, reason=reason)

    # -- errors / test hooks -----------------------------------------------------

    def _closed_error(self, op):
        label = self._cfg.device_label
        return LifecycleError(
            f"{op} on the memory manager of device {label or '?'}, which is closed "
            f"(drained when its device was deinitialised or closed)",
            function=f"MemoryManager.{op}", device=label or None)

    def _double_free_error(self, ptr):
        label = self._cfg.device_label
        return UnknownPointerError(
            f"double free of device pointer {ptr:#x} on device {label or '?'}: it was "
            f"already freed and the memory manager caches it",
            function="MemoryManager.free", device=label or None)

    def _unknown_error(self, ptr):
        label = self._cfg.device_label
        return UnknownPointerError(
            f"free of device pointer {ptr:#x}, which is not a live allocation of the memory "
            f"manager of device {label or '?'} (never handed out, or already freed)",
            function="MemoryManager.free", device=label or None)

    def _locks(self):
        """The manager's locks (for tests that check none is left held)."""
        locks = [self._lock]
        if self._log is not None:
            locks.append(self._log.lock())
        return tuple(locks)
