"""Hypothesis strategies for offload sequences.

Every strategy draws plain Python values (ints, bytes) so that a failing
run prints a replayable program (docs/style.md, the Hypothesis row).
Importing this module imports hypothesis, nothing else happens.
"""

from __future__ import annotations

from hypothesis import strategies as st

__all__ = ["DEFAULT_POOL_THRESHOLD", "alloc_sizes", "device_indices", "patterns",
           "thread_counts", "vector_lengths"]

#: LLVM's ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD`` default (LLVM D81054), bytes.
DEFAULT_POOL_THRESHOLD = 8192


def alloc_sizes(threshold: int = DEFAULT_POOL_THRESHOLD, max_size: int = 1 << 17):
    """Allocation sizes in bytes: 0 (LLVM returns NULL), recurring small
    sizes (so the pool reuses blocks), the LLVM bucket edges, sizes just
    around ``threshold`` and sizes above it (the pool is bypassed: libomptarget's
    MemoryManagerTy::allocate, MemoryManager.h), and arbitrary sizes up to ``max_size``."""
    edges = [0, 1, 7, 8, 16, 64, 100, 512, 4096, threshold - 1, threshold,
             threshold + 1, threshold + 8, 2 * threshold + 40, 1 << 16]
    edges = sorted({e for e in edges if 0 <= e <= max_size})
    return st.sampled_from(edges) | st.integers(1, max_size)


def device_indices(max_index: int = 63):
    """Device selector: an int taken modulo the device count by the user."""
    return st.integers(0, max_index)


def patterns():
    """A byte pattern seed: data = ``bytes((p + i) % 251 for i in range(n))``."""
    return st.integers(0, 250)


def vector_lengths(max_n: int = 2048):
    """Element counts for kernel launches (``vec_add``/``increment``)."""
    return st.sampled_from([1, 2, 8, 257, 1025]) | st.integers(1, max_n)


def thread_counts(max_threads: int = 8):
    """Host threads hitting one device at once (llvm-project #49284: 8)."""
    return st.integers(2, max_threads)
