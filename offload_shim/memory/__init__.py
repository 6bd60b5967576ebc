"""Device memory management: the per-device pool of freed device blocks.

``MemoryManager`` reproduces LLVM libomptarget's memory manager (seed 004,
abi-reference 1.9) with the additions of docs/prior-art.md section 2; see
``docs/memory-manager.md``.  Its parts: :mod:`.manager` (the tables and the
hot paths), :mod:`.policies` (exact, binned), :mod:`.eviction` (which cached
blocks go), :mod:`.oom` (the OOM ladders), :mod:`.stats`, :mod:`.events`
(the event log), :mod:`.ownership` (which manager holds a block),
:mod:`.config` (options, environment), :mod:`.plugin_cache` (debug modes
and plugins that cache on their own), :mod:`.pinned` (pinned host memory).
Importing this package does no work.
"""

from ._replay import replay
from .config import DEBUG_ENV, DEFAULT_THRESHOLD, THRESHOLD_ENV, read_threshold_env
from .manager import MemoryManager
from .policies import LLVM_BUCKET_SIZES, binned_size, llvm_bucket
from .stats import BucketStats, PoolStats

__all__ = ["MemoryManager", "PoolStats", "BucketStats", "read_threshold_env", "replay",
           "binned_size", "llvm_bucket", "THRESHOLD_ENV", "DEBUG_ENV", "DEFAULT_THRESHOLD",
           "LLVM_BUCKET_SIZES"]
