"""Statistics of a :class:`~offload_shim.memory.MemoryManager`.

Names follow what users of other pools already know: CuPy ``used_bytes`` /
``total_bytes``, RMM statistics adaptor ``current/peak``, PyTorch
``memory_stats`` "allocated / reserved" (docs/references.md, pools compared,
"statistics" row).  LLVM's MemoryManager keeps none.

How they are kept: per operation the manager counts only what cannot be
derived.  A cache hit adds one precomputed step to a single integer that
holds the bytes in use and the number of hits, and compares it with its
peak; a cached free subtracts the bytes.  Misses, evictions, backend frees
and OOM retries (the slow paths, each next to a backend call) count in
:class:`BucketCounters`.  Everything else (per-bucket bytes and blocks in use
and cached) is derived by :func:`snapshot` from the manager's tables when
``stats`` is read.
"""

from __future__ import annotations

import operator
from collections import Counter, namedtuple

__all__ = ["PoolStats", "BucketStats", "BucketCounters", "BucketCounts", "snapshot"]


_BUCKET_FIELDS = ("bytes_in_use", "bytes_cached", "bytes_total", "peak_bytes_total", "misses",
                  "evictions", "oom_retries", "backend_allocs", "backend_frees", "live_blocks",
                  "cached_blocks")


class BucketStats(namedtuple("BucketStats", _BUCKET_FIELDS,
                             defaults=(0,) * len(_BUCKET_FIELDS))):
    """Counters of one statistics bucket (bytes are bytes held from the
    backend).  The fields mean what they mean in :class:`PoolStats`.  A
    bucket has no ``hits`` and no ``peak_bytes_in_use``: keeping them would
    cost an update of the bucket on every hit (and every cached free), and
    the pool's own ``hits`` and ``peak_bytes_in_use`` are exact; nor
    ``foreign_frees`` (a foreign pointer has no bucket).  ``peak_bytes_total``
    is exact: a bucket's bytes held change on backend calls only.  Immutable (a
    ``namedtuple``: see :mod:`offload_shim.records`); every field an int, 0 by
    default."""

    __slots__ = ()

    def as_dict(self) -> dict:
        """Plain ``dict`` (JSON-ready)."""
        return dict(zip(self._fields, self))


_POOL_FIELDS = ("bytes_in_use", "bytes_cached", "bytes_total", "peak_bytes_in_use",
                "peak_bytes_total", "hits", "misses", "evictions", "oom_retries", "backend_allocs",
                "backend_frees", "foreign_frees", "live_blocks", "cached_blocks", "per_bucket")


class PoolStats(namedtuple("PoolStats", _POOL_FIELDS,
                           defaults=(0,) * (len(_POOL_FIELDS) - 1) + (None,))):
    """Immutable snapshot of pool counters.  All ``bytes_*`` are bytes.

    Block sizes are what the manager holds from the backend: the size of
    the request that first obtained the block (a binned hit may hand a
    block to a slightly smaller request of its class).

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
    * ``foreign_frees``: frees of pointers no manager of the backend handed
      out, passed straight to the backend (LLVM behaviour); not in
      ``backend_frees``.
    * ``live_blocks`` / ``cached_blocks``: block counts.
    * ``per_bucket``: ``{bucket: BucketStats}`` (the same figures per bucket,
      without ``hits``, ``peak_bytes_in_use`` and ``foreign_frees``).
      Buckets are the LLVM
      buckets ``0, 4, 8, ..., 8192`` under ``exact``, the size class under
      ``binned``, and :attr:`BYPASS_BUCKET` (``-1``) for blocks above the
      threshold or with pooling off.

    With ``stats=False`` only the gauges are kept: ``bytes_in_use``,
    ``bytes_cached``, ``bytes_total``, their peaks ``peak_bytes_in_use`` and
    ``peak_bytes_total``, ``live_blocks`` and ``cached_blocks``; every
    counter reads 0 and ``per_bucket`` is empty.

    Immutable (a ``namedtuple``: see :mod:`offload_shim.records`); every field but
    ``per_bucket`` an int, 0 by default; ``per_bucket`` defaults to a new ``{}``.
    """

    __slots__ = ()
    BYPASS_BUCKET = -1

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls, *args, **kwargs)
        return self._replace(per_bucket={}) if self.per_bucket is None else self

    def as_dict(self) -> dict:
        """Plain ``dict`` (JSON-ready); ``per_bucket`` becomes
        ``{bucket: dict}``."""
        out = {name: value for name, value in zip(self._fields, self)
               if name != "per_bucket"}
        out["per_bucket"] = {b: s.as_dict() for b, s in sorted(self.per_bucket.items())}
        return out

    @property
    def hit_rate(self) -> float:
        """``hits / (hits + misses)``; 0.0 before any allocation."""
        n = self.hits + self.misses
        return self.hits / n if n else 0.0


class BucketCounters:
    """Event counters of one statistics bucket, mutated under the manager's
    lock.  ``held`` is the bytes obtained from the backend for the bucket
    and not yet returned; it and its high-water mark ``peak_held`` change
    on backend calls only."""

    __slots__ = ("bucket", "misses", "evictions", "oom_retries", "backend_allocs",
                 "backend_frees", "held", "peak_held")

    def __init__(self, bucket):
        self.bucket = bucket
        self.misses = self.evictions = self.oom_retries = 0
        self.backend_allocs = self.backend_frees = self.held = self.peak_held = 0

    def obtained(self, block: int) -> None:
        """A block of ``block`` bytes came from the backend (a miss)."""
        self.misses += 1
        self.backend_allocs += 1
        self.held = held = self.held + block
        if held > self.peak_held:
            self.peak_held = held

    def released(self, block: int) -> None:
        """A block went back to the backend."""
        self.backend_frees += 1
        self.held -= block

    def unreleased(self, block: int) -> None:
        """Undo :meth:`released`: the backend free failed, the block is held."""
        self.backend_frees -= 1
        self.held = held = self.held + block
        if held > self.peak_held:
            self.peak_held = held

    def counts(self) -> "BucketCounts":
        """A copy of the counters, read under the manager's lock."""
        return BucketCounts(self.misses, self.evictions, self.oom_retries,
                            self.backend_allocs, self.backend_frees, self.peak_held)


class BucketCounts(namedtuple("BucketCounts", "misses evictions oom_retries backend_allocs "
                                              "backend_frees peak_held")):
    """A copy of one :class:`BucketCounters` (counts; ``peak_held`` in bytes)."""

    __slots__ = ()


_PICK = operator.attrgetter("bucket", "size")   # Block -> (BucketCounters, block bytes)
_ZERO = (0, 0, 0, 0)


def snapshot(*, in_use: int, hits: int, held: int, peak_in_use: int, peak_held: int,
             foreign: int, live_blocks: int, cached_blocks: int, counters=None, live=(),
             cached=()):
    """A :class:`PoolStats` from the manager's figures, copied under its
    lock by the caller: the global bytes, hits and peaks, block counts, and, with
    statistics on, ``counters`` (``[(BucketCounters, counts()), ...]``) and
    the :class:`~offload_shim.memory.records.Block` records of the live and
    cached blocks.  Per-bucket gauges are counted here,
    outside the lock: O(live + cached blocks), at C speed per record and in
    Python per distinct (bucket, block size)."""
    per = {}
    tot = [0] * 5
    if counters is not None:
        gauges = {}
        for i, recs in ((0, live), (2, cached)):
            for (bc, block), n in Counter(map(_PICK, recs)).items():
                g = gauges.get(bc)
                if g is None:
                    g = gauges[bc] = [0, 0, 0, 0]
                g[i] += n
                g[i + 1] += n * block
        for bc, c in counters:
            ln, lb, cn, cb = gauges.get(bc, _ZERO)
            events = (c.misses, c.evictions, c.oom_retries, c.backend_allocs,
                      c.backend_frees)
            for i, v in enumerate(events):
                tot[i] += v
            per[bc.bucket] = BucketStats(
                bytes_in_use=lb, bytes_cached=cb, bytes_total=lb + cb,
                peak_bytes_total=c.peak_held, misses=c.misses, evictions=c.evictions,
                oom_retries=c.oom_retries, backend_allocs=c.backend_allocs,
                backend_frees=c.backend_frees, live_blocks=ln, cached_blocks=cn)
    misses, evictions, oom_retries, backend_allocs, backend_frees = tot
    return PoolStats(bytes_in_use=in_use, bytes_cached=held - in_use, bytes_total=held,
                     peak_bytes_in_use=peak_in_use, peak_bytes_total=peak_held,
                     hits=hits, misses=misses, evictions=evictions, oom_retries=oom_retries,
                     backend_allocs=backend_allocs, backend_frees=backend_frees,
                     foreign_frees=foreign, live_blocks=live_blocks,
                     cached_blocks=cached_blocks, per_bucket=per)
