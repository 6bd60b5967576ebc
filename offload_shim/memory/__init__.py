"""Device memory management: the per-device pool of freed device blocks.

``MemoryManager`` reproduces LLVM libomptarget's memory manager (seed 004,
abi-reference 1.9) with the additions of docs/prior-art.md section 2; see
``docs/memory-manager.md``.  Importing this package does no work.
"""

from ._replay import replay
from .manager import (DEBUG_ENV, DEFAULT_THRESHOLD, LLVM_BUCKET_SIZES, THRESHOLD_ENV,
                      MemoryManager, binned_size, llvm_bucket, read_threshold_env)
from .stats import PoolStats

__all__ = ["MemoryManager", "PoolStats", "read_threshold_env", "replay", "binned_size",
           "llvm_bucket", "THRESHOLD_ENV", "DEBUG_ENV", "DEFAULT_THRESHOLD",
           "LLVM_BUCKET_SIZES"]
