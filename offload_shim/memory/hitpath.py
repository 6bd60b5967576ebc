"""Which hit path a :class:`~offload_shim.memory.MemoryManager` runs: the C one of
``native/pool_hit.c`` (the extension module ``offload_shim.memory._hit``, built by
``pip install .``) or the manager's own Python code.

With the extension, ``MemoryManager`` derives from its ``PoolCore``: the fields the hit
path uses (:data:`CORE_FIELDS`) are C fields of the instance, and ``allocate`` and
``free`` are C methods that serve a cache hit and a cached free of a pooled block and
hand every other call to ``MemoryManager._allocate_py`` / ``_free_py`` (or, for a plain
miss or a free that is not a cached one, ``_allocate_other`` / ``_free_other``, where
the Python path would go after its round trip).  A pair costs about a quarter of the
Python one's instructions (``benchmarks/pool_hit_ir.py``; docs/benchmarks.md "Issue 29's pool
targets").  The C code runs only while the manager's lock is free and runs to its end
holding the GIL without calling Python code, so it needs no token of its own
(``native/pool_hit.c`` explains why).

Without the extension (a build without CPython's headers) or with
``OFFLOAD_SHIM_POOL_PURE=1`` in the environment when the package is imported, the
Python methods are ``allocate`` and ``free`` themselves: the same steps in the same
order, so the same blocks in the same order (``tests/test_pool_hit_c.py`` runs both
side by side).
"""

from __future__ import annotations

import os
from collections import deque

__all__ = ["PURE_ENV", "CORE_FIELDS", "hit_core", "hit_path"]

#: ``1``: the Python hit path even where the C one is built (read at import)
PURE_ENV = "OFFLOAD_SHIM_POOL_PURE"

#: the manager's fields that live in ``PoolCore`` when the C hit path is on
CORE_FIELDS = ("_free", "_live", "_lockq", "_index", "_acc", "_peak_acc", "_peak_open",
               "_held", "_newest_first", "_slow")

_core = False       # not looked up yet


def hit_core():
    """The configured extension module ``offload_shim.memory._hit``, or None (not
    built, or :data:`PURE_ENV` set to ``1``)."""
    global _core
    if _core is False:
        _core = None
        if os.environ.get(PURE_ENV, "") != "1":
            try:
                from . import _hit
                from .records import Block
                _hit.configure(deque, Block)
            except (ImportError, TypeError):
                pass            # not built, or a CPython whose deque it does not know
            else:
                _core = _hit
    return _core


def hit_path() -> str:
    """``"c"`` or ``"python"``: the hit path of the managers of this process."""
    return "python" if hit_core() is None else "c"
