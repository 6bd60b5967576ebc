"""The manager's records, shared by its parts: :class:`Block` and the accounting word.

PyTorch's ``CUDACachingAllocator`` keeps one ``Block`` struct per block it holds
(``c10/cuda/CUDACachingAllocator.cpp``: size, requested size, pool, stream, ...) and
its counters in named ``Stat`` records; here a :class:`Block` is that record and the
counters are :class:`~offload_shim.memory.stats.BucketCounters`.

``_acc`` of a :class:`~offload_shim.memory.MemoryManager` is the accounting word: the
bytes in use (block sizes) shifted left by :data:`SHIFT` bits plus the number of hits
below them.  A hit adds its block's :attr:`Block.hit_step` (``size << SHIFT | 1``, ``|
0`` with ``stats=False``), so booking the bytes, the hit and the peak is one addition
and one comparison; a cached free takes :attr:`Block.free_step` (``size << SHIFT``).
"""

from __future__ import annotations

__all__ = ["Block", "SHIFT", "HITS"]

#: bytes in use above, hits below (``MemoryManager._acc``)
SHIFT = 64
#: the hits part of ``_acc``
HITS = (1 << SHIFT) - 1


class Block:
    """One block a :class:`~offload_shim.memory.MemoryManager` holds from its backend,
    as its tables keep it; the record travels with the block between the tables
    (``_live``, a free list, ``_transit``).

    * ``ptr``: the device address (``int``); a free list holds records, not addresses.
    * ``requested``: bytes the caller asked for.  Under the binned policy a hit hands
      a block to any request of its size class, which then sets it (fewer than
      ``size``); under the exact policy it is always ``size``.
    * ``size``: bytes held from the backend (what the request that obtained the block
      asked for); the key of its free list.
    * ``free_list``: the free list of ``size``-byte blocks (a ``collections.deque`` of
      records, the least recently freed at the left; kept while the manager is open), or
      None for a block that is never cached (above the threshold, pooling off).
    * ``bucket``: its :class:`~offload_shim.memory.stats.BucketCounters`, or None with
      ``stats=False``.
    * ``hit_step``: what a hit adds to the accounting word (``size << SHIFT``, plus 1
      when hits are counted).
    * ``free_step``: what a free takes from it (``size << SHIFT``).
    * ``cache_list``: ``free_list`` when a free caches the block on the spot (the
      manager has no ``cache_limit`` and no debug ``poison``), else None: the one
      test of a cached free.

    Only ``requested`` changes (a binned hit, under the manager's lock).  ``__slots__``:
    a field read is a slot read, as fast on the hit path as a tuple index."""

    __slots__ = ("ptr", "requested", "size", "free_list", "bucket", "hit_step", "free_step",
                 "cache_list")

    def __init__(self, ptr: int, requested: int, size: int, free_list, bucket, hit_step: int,
                 free_step: int, cache_list=None):
        self.ptr = ptr
        self.requested = requested
        self.size = size
        self.free_list = free_list
        self.bucket = bucket
        self.hit_step = hit_step
        self.free_step = free_step
        self.cache_list = cache_list

    def __repr__(self) -> str:
        return (f"Block(ptr={self.ptr:#x}, requested={self.requested}, size={self.size}, "
                f"pooled={self.free_list is not None})")
