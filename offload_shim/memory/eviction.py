"""Which cached blocks to release: the choice, separate from the releasing.

Each function reads the manager's free lists (``{block size: deque of
records}``, a record's ``ptr`` its address, every list ordered from the
least to the most recently freed block, as the manager keeps them) and returns ``[(ptr, block size), ...]``
to release; the manager takes the blocks out and frees them through the
backend outside its lock.  Nothing here mutates the lists.

* :func:`fewest_oldest` serves ``cache_limit``: the fewest blocks whose
  release brings the cache under the cap, the oldest that suffice.  A block
  larger than the cap is therefore never kept, and the small blocks cached
  before it stay (D81054 reviewer concern "unbounded memory"; CuPy
  ``set_limit``, RMM ``maximum_pool_size``).
* :func:`largest_first` serves ``trim`` and the incremental OOM ladder:
  the fewest blocks that release the bytes asked for, i.e. the largest
  sizes first (each release is a backend free: a ``cudaFree`` costs about
  14 us and synchronises the device), the least recently freed of a size
  first.  The D81054 summary describes the ladder the same way.
"""

from __future__ import annotations

from itertools import islice

__all__ = ["fewest_oldest", "largest_first"]


def _nth(fl, k: int):
    """The ``k``-th oldest pointer of a free list."""
    return next(islice(fl, k, None)).ptr


def fewest_oldest(free: dict, stamps: dict, need: int) -> list:
    """Blocks whose release frees at least ``need`` bytes: as few as
    possible, and among those the oldest.  ``stamps``: ``{ptr: age}`` of the
    cached blocks (smaller is older).

    Greedy and exact for the count: while no single block covers the rest
    of the need, the largest block is in some smallest set (replace the
    smallest block of any such set by it), so it is taken; once one block
    covers the rest, the oldest block that does is taken.  O(distinct
    cached sizes) per block released."""
    victims = []
    taken = {}
    while need > 0:
        best_age = best_size = best_ptr = None      # the oldest block covering the need
        largest = None
        for size, fl in free.items():
            k = taken.get(size, 0)
            if len(fl) <= k:
                continue
            if largest is None or size > largest:
                largest = size
            if size >= need:
                ptr = _nth(fl, k)
                age = stamps.get(ptr, 0)
                if best_age is None or age < best_age:
                    best_age, best_size, best_ptr = age, size, ptr
        if best_age is not None:
            victims.append((best_ptr, best_size))
            break
        if largest is None:
            break
        k = taken.get(largest, 0)
        victims.append((_nth(free[largest], k), largest))
        taken[largest] = k + 1
        need -= largest
    return victims


def largest_first(free: dict, need: int) -> list:
    """Blocks whose release frees at least ``need`` bytes, largest sizes
    first and the least recently freed of a size first (the fewest blocks
    for the bytes).  ``need`` larger than the cache: every cached block."""
    victims = []
    if need <= 0:
        return victims
    for size in sorted((s for s, fl in free.items() if fl), reverse=True):
        for block in free[size]:
            victims.append((block.ptr, size))
            need -= size
            if need <= 0:
                return victims
    return victims
