"""Device memory management: the per-device pool of freed device blocks.

``MemoryManager`` reproduces LLVM libomptarget's memory manager (LLVM D81054,
LLVM 16 MemoryManager.h) with the additions of docs/references.md, pools compared; see
``docs/memory-manager.md``.  Its parts: :mod:`.manager` (the tables and the
hot paths), :mod:`.records` (the ``Block`` record), :mod:`.release` (the other
frees, releasing cached blocks), :mod:`.parking` (frees put off), :mod:`.queries`
(what it answers), :mod:`.policies` (exact, binned), :mod:`.eviction` (which cached
blocks go), :mod:`.oom` (the out-of-memory path and its ladders), :mod:`.stats`, :mod:`.events`
(the event log), :mod:`.ownership` (which manager holds a block),
:mod:`.config` (options, environment), :mod:`.plugin_cache` (debug modes
and plugins that cache on their own), :mod:`.pinned` (pinned host memory: the registry;
with :mod:`.pinned_ranges`, the ranges' table, :mod:`.pinned_host`, the pinned host
pool, and :mod:`.pin_backends`, how a range is locked).
Importing this package imports nothing more (the names below are imported on first use).
"""

#: public name -> the submodule defining it, imported on first access (PEP 562): a
#: Device needs the manager only, not the replay tool and its fake backend (start-up
#: of every ``offload-shim run``)
_LAZY = {"replay": "._replay", "DEBUG_ENV": ".config", "DEFAULT_THRESHOLD": ".config",
         "THRESHOLD_ENV": ".config", "read_threshold_env": ".config",
         "MemoryManager": ".manager", "LLVM_BUCKET_SIZES": ".policies",
         "binned_size": ".policies", "llvm_bucket": ".policies", "BucketStats": ".stats",
         "PoolStats": ".stats"}

__all__ = ["MemoryManager", "PoolStats", "BucketStats", "read_threshold_env", "replay",
           "binned_size", "llvm_bucket", "THRESHOLD_ENV", "DEBUG_ENV", "DEFAULT_THRESHOLD",
           "LLVM_BUCKET_SIZES"]


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(mod, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
