"""Statistics snapshot of a :class:`~offload_shim.memory.MemoryManager`.

Names follow what users of other pools already know: CuPy ``used_bytes`` /
``total_bytes``, RMM statistics adaptor ``current/peak``, PyTorch
``memory_stats`` "allocated / reserved" (docs/prior-art.md section 2,
"statistics" row).  LLVM's MemoryManager keeps none.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar

__all__ = ["PoolStats"]


@dataclass(frozen=True)
class PoolStats:
    """Immutable snapshot of pool counters.  All ``bytes_*`` are bytes.

    Block sizes are what the manager holds from the backend: the requested
    size under the ``exact`` policy, the rounded size-class size under
    ``binned``, the requested size for blocks above the threshold.

    * ``bytes_in_use``: bytes of blocks handed out and not yet freed.
    * ``bytes_cached``: bytes of freed blocks kept for reuse.
    * ``bytes_total``: ``bytes_in_use + bytes_cached``, i.e. what the
      manager holds from the backend right now.
    * ``peak_bytes_in_use`` / ``peak_bytes_total``: high-water marks.
    * ``hits`` / ``misses``: pooled allocations served from the cache /
      from the backend.  Allocations above the threshold (bypass) and with
      pooling off count as misses.
    * ``evictions``: cached blocks released because of ``cache_limit``, an
      OOM ladder, ``trim``, ``release_all`` or ``drain``.
    * ``oom_retries``: backend allocations retried after the backend
      returned 0 (out of memory).
    * ``backend_allocs`` / ``backend_frees``: blocks obtained from / returned
      to the backend by this manager.  Invariant:
      ``backend_allocs - backend_frees == live_blocks + cached_blocks``.
    * ``foreign_frees``: frees of pointers this manager never handed out,
      passed straight to the backend (LLVM behaviour); not in
      ``backend_frees``.
    * ``live_blocks`` / ``cached_blocks``: block counts.
    * ``per_bucket``: ``{bucket: PoolStats}`` with the same counters per
      bucket (their own ``per_bucket`` is empty), except that a bucket's
      ``peak_bytes_in_use`` is not kept and reads 0 (it would cost a
      per-bucket update on every hit and every free; issue 5) and its
      ``foreign_frees`` is 0 (a foreign pointer has no bucket).  A bucket's
      ``peak_bytes_total`` is exact: its bytes held only change on backend
      calls.  Buckets are the LLVM buckets ``0, 4, 8, ..., 8192`` under
      ``exact``, the size-class size under ``binned``, and
      :attr:`BYPASS_BUCKET` (``-1``) for blocks above the threshold or with
      pooling off.

    How they are kept (issue 5): per operation the manager counts only what
    cannot be derived (a hit adds 1 to its bucket's ``hits``; a miss, an
    eviction, a backend free or an OOM retry add to their counters) and the
    global bytes in use and held from the backend with their peaks.  Bytes
    and blocks in use and cached per bucket are derived from the pointer
    table and the free lists when the snapshot is taken (O(live + cached
    blocks), copied under the lock, counted outside it).

    With ``stats=False`` only ``bytes_in_use``, ``bytes_cached``,
    ``bytes_total``, ``live_blocks`` and ``cached_blocks`` are kept (the
    manager needs them itself); every other counter reads 0 and
    ``per_bucket`` is empty.
    """

    BYPASS_BUCKET: ClassVar[int] = -1

    bytes_in_use: int = 0
    bytes_cached: int = 0
    bytes_total: int = 0
    peak_bytes_in_use: int = 0
    peak_bytes_total: int = 0
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    oom_retries: int = 0
    backend_allocs: int = 0
    backend_frees: int = 0
    foreign_frees: int = 0
    live_blocks: int = 0
    cached_blocks: int = 0
    per_bucket: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        """Plain ``dict`` (JSON-ready); ``per_bucket`` becomes
        ``{bucket: dict}``."""
        out = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name != "per_bucket"}
        out["per_bucket"] = {b: s.as_dict() for b, s in sorted(self.per_bucket.items())}
        return out

    @property
    def hit_rate(self) -> float:
        """``hits / (hits + misses)``; 0.0 before any allocation."""
        n = self.hits + self.misses
        return self.hits / n if n else 0.0
