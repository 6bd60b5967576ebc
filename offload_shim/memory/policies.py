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

* :class:`BestFitPolicy` (``"best-fit"``): a request may reuse the smallest
  cached block that holds it, of any size class, as long as the block is less
  than :data:`BEST_FIT_LIMIT` (2) times the request: the waste of a hit is
  below the request itself (below half the block).  Without such a bound a
  best-fit pool hands a 64 KiB cached block to a 4-byte request and keeps the
  rest idle until it is freed (the worry of review D81054 about reusing larger
  blocks); the bound is what a replay reports as ``waste_bound``.
  Statistics are grouped in LLVM's buckets.

The manager keeps one free list per exact block size for every policy, so a
request first reuses a block of exactly its size; the binned and best-fit
policies then look for the smallest larger block through a
:class:`SizeClassIndex` (class -> sorted block sizes; best-fit: one class with
every size, :class:`BestFitIndex`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

__all__ = ["LLVM_BUCKET_SIZES", "POLICIES", "BEST_FIT_LIMIT", "llvm_bucket",
           "llvm_find_bucket_index", "binned_size", "ExactPolicy", "BinnedPolicy",
           "BestFitPolicy", "SizeClassIndex", "BestFitIndex", "make_policy", "waste_bound"]

#: LLVM ``BucketSize[]``: the 13 buckets.
LLVM_BUCKET_SIZES = (0, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
POLICIES = ("exact", "binned", "best-fit")
#: best-fit reuses a cached block of B bytes for a request of R bytes only if B < 2 R
BEST_FIT_LIMIT = 2


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


class BestFitPolicy:
    """Reuse the smallest cached block that holds the request and is less than
    :data:`BEST_FIT_LIMIT` times its size (waste below the request)."""

    name = "best-fit"
    limit = BEST_FIT_LIMIT

    def bucket(self, size: int) -> int:
        """Statistics bucket of a pooled block: the LLVM bucket."""
        return llvm_bucket(size)

    def index(self) -> "BestFitIndex":
        return BestFitIndex(self.limit)


class BestFitIndex(SizeClassIndex):
    """Every cached block size in one sorted list; :meth:`larger` finds the
    smallest size above a request, below ``limit`` times it, whose list has a
    block."""

    __slots__ = ("_limit",)

    def __init__(self, limit: int = BEST_FIT_LIMIT):
        super().__init__(_one_class)
        self._limit = limit

    def larger(self, size: int, free: dict):
        sizes = self._classes.get(0)
        if sizes:
            cap = size * self._limit
            for block in sizes[bisect_right(sizes, size):]:
                if block >= cap:
                    break
                fl = free[block]
                if fl:
                    return fl
        return None


def _one_class(size: int) -> int:
    return 0


def make_policy(policy: str, bins_per_pow2: int):
    """The policy object for ``policy`` (``"exact"``, ``"binned"``, ``"best-fit"``)."""
    if policy == "exact":
        return ExactPolicy()
    if policy == "best-fit":
        return BestFitPolicy()
    return BinnedPolicy(bins_per_pow2)


def waste_bound(policy: str, bins_per_pow2: int = 8) -> float:
    """The most a hit of ``policy`` may waste, as a fraction of the request: 0 for
    exact, ``1 / bins_per_pow2`` for binned (a block never exceeds the request's
    class), ``BEST_FIT_LIMIT - 1`` for best-fit (the block is below that many
    times the request).  ``ValueError`` for another policy."""
    if policy == "exact":
        return 0.0
    if policy == "binned":
        return 1.0 / bins_per_pow2
    if policy == "best-fit":
        return float(BEST_FIT_LIMIT - 1)
    raise ValueError(f"unknown policy {policy!r}; expected one of {POLICIES}")
