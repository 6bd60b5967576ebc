"""Size policies of the memory manager: which cached block may serve a request.

Both policies ask the backend for exactly the requested size, so rounding
never spends device memory (a request the device can hold is served whatever
the policy); they differ in which cached blocks a later request may reuse.

* :class:`ExactPolicy` (LLVM ``MemoryManagerTy``, LLVM D81054, LLVM 16
  ``MemoryManager.h``): a cached block is reused only for a request of exactly its size.
  Statistics are grouped in LLVM's 13 buckets (:func:`llvm_bucket`).
* :class:`BinnedPolicy`: every power-of-two range ``[2**k, 2**(k+1))`` is
  split into ``bins_per_pow2`` size classes (:func:`binned_size`); a request
  may reuse any cached block of its class that is at least as large: one of
  exactly its size first, else the smallest larger one.  A block never
  exceeds its class size, so the waste stays below ``1 / bins_per_pow2`` of
  the request (RMM ``binning`` and PyTorch's size rounding in the same
  spirit, without their rounded device allocations).  Statistics are
  grouped by class.

The manager keeps one free list per exact block size for both policies, so a
request first reuses a block of exactly its size; the binned policy then
looks for the smallest larger block of the class through a
:class:`SizeClassIndex` (class -> sorted block sizes).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

__all__ = ["LLVM_BUCKET_SIZES", "POLICIES", "llvm_bucket", "llvm_find_bucket_index",
           "binned_size", "ExactPolicy", "BinnedPolicy", "SizeClassIndex", "make_policy"]

#: LLVM ``BucketSize[]``: the 13 buckets.
LLVM_BUCKET_SIZES = (0, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
POLICIES = ("exact", "binned")


def llvm_bucket(size: int) -> int:
    """Bucket size (one of :data:`LLVM_BUCKET_SIZES`) for a block of ``size``
    bytes: the size floored to a power of two, clamped to ``[4, 8192]``;
    sizes 1-3 go to bucket 0.  This is the intent of LLVM ``findBucket``
    (LLVM D81054); see :func:`llvm_find_bucket_index` for its exact output."""
    if size < 4:
        return 0
    f = 1 << (size.bit_length() - 1)
    return 8192 if f > 8192 else f


def llvm_find_bucket_index(size: int) -> int:
    """Faithful port of LLVM ``MemoryManagerTy::findBucket`` (index into
    ``BucketSize``).  Its binary search (``H = M - 1``) skips some exact
    matches: sizes whose floor-pow2 is 4, 64, 512 or >= 8192 land one
    bucket low (buckets 0, 32, 256 and 4096; bucket 8192 is never used).
    Harmless in LLVM, where reuse needs an exactly equal size anyway; kept
    for comparing with LLVM debug output only."""
    if size == 0:
        return 0
    f = 1 << (size.bit_length() - 1)
    lo, hi = 0, len(LLVM_BUCKET_SIZES) - 1
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if LLVM_BUCKET_SIZES[mid] == f:
            return mid
        if LLVM_BUCKET_SIZES[mid] > f:
            hi = mid - 1
        else:
            lo = mid
    return lo


def binned_size(size: int, bins_per_pow2: int = 8) -> int:
    """Size class (bytes) of a ``size``-byte request under the ``binned``
    policy: every power-of-two range ``[2**k, 2**(k+1))`` is split into
    ``bins_per_pow2`` classes of step ``2**k / bins_per_pow2`` (at least 1
    byte), and the class is the request rounded up to its step.  Requests
    of one class differ by less than one step, i.e. by less than
    ``size / bins_per_pow2`` bytes."""
    shift = bins_per_pow2.bit_length() - 1
    b = size.bit_length() - 1 - shift
    if b <= 0:
        return size
    return ((size + (1 << b) - 1) >> b) << b


class ExactPolicy:
    """LLVM's rule: reuse a cached block for a request of exactly its size."""

    name = "exact"

    def bucket(self, size: int) -> int:
        """Statistics bucket of a pooled block: the LLVM bucket."""
        return llvm_bucket(size)

    def index(self):
        """The exact policy needs no index beyond the per-size free lists."""
        return None


class BinnedPolicy:
    """Reuse any cached block of the request's size class that holds it.

    ``bins_per_pow2``: classes per power of two (a power of two >= 1)."""

    name = "binned"

    def __init__(self, bins_per_pow2: int = 8):
        self.bins_per_pow2 = bins_per_pow2
        self.shift = bins_per_pow2.bit_length() - 1

    def size_class(self, size: int) -> int:
        """The class of a request (:func:`binned_size`)."""
        b = size.bit_length() - 1 - self.shift
        if b <= 0:
            return size
        return ((size + (1 << b) - 1) >> b) << b

    bucket = size_class

    def index(self) -> "SizeClassIndex":
        return SizeClassIndex(self.size_class)


class SizeClassIndex:
    """Class -> sorted block sizes the manager keeps free lists for.

    A size is added when the manager makes its free list (on the miss that
    first obtains a block of that size, under the manager's lock) and stays
    until the manager is drained; :meth:`larger` finds the smallest of those
    sizes above a request, in the request's class, whose list has a block.
    Cache hits and cached frees never touch the index."""

    __slots__ = ("_classes", "_size_class")

    def __init__(self, size_class):
        self._classes = {}
        self._size_class = size_class

    def add(self, block: int) -> None:
        """A free list for ``block``-byte blocks now exists."""
        c = self._size_class(block)
        sizes = self._classes.get(c)
        if sizes is None:
            self._classes[c] = [block]
        else:
            i = bisect_left(sizes, block)
            if i == len(sizes) or sizes[i] != block:
                sizes.insert(i, block)

    def larger(self, size: int, free: dict):
        """The non-empty free list (from ``free``, the manager's ``{block
        size: list}``) of the smallest block size in ``size``'s class that is
        larger than ``size``, or None.  O(log n + empty lists skipped)."""
        sizes = self._classes.get(self._size_class(size))
        if sizes:
            for block in sizes[bisect_right(sizes, size):]:
                fl = free[block]
                if fl:
                    return fl
        return None

    def clear(self) -> None:
        self._classes.clear()


def make_policy(policy: str, bins_per_pow2: int):
    """The policy object for ``policy`` (``"exact"`` or ``"binned"``)."""
    return ExactPolicy() if policy == "exact" else BinnedPolicy(bins_per_pow2)
