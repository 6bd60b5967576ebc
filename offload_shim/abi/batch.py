"""ctypes binding of ``libosh_batch.so`` (native/batch.c): one foreign call for a run
of calls of one plugin entry point shaped ``int32_t (int32_t, void *, void *,
int64_t)`` (``__tgt_rtl_data_submit`` / ``__tgt_rtl_data_retrieve`` of LLVM 14 and 16).

Bound lazily on first use, never at import (docs/style.md); when the library is
missing (a source checkout that was not built) :func:`call4` is None and callers make
the calls one by one.
"""

from __future__ import annotations

import ctypes
import os
from array import array
from ctypes import POINTER, c_int32, c_int64, c_void_p

FILENAME = "libosh_batch.so"

_fn = None
_loaded = False


def _bind():
    global _fn, _loaded
    _loaded = True
    try:
        from .native import bundled_native_dir
        lib = ctypes.CDLL(os.fspath(bundled_native_dir() / FILENAME), mode=os.RTLD_LOCAL)
        fn = lib.osh_batch_call4
    except (OSError, AttributeError):
        return None
    # int64_t osh_batch_call4(void *fn, int32_t dev, int64_t n, const uint64_t *ops,
    #                         int32_t *rc)
    fn.argtypes = [c_void_p, c_int32, c_int64, c_void_p, POINTER(c_int32)]
    fn.restype = c_int64
    _fn = fn
    return fn


def function_address(fn) -> int:
    """The address of a bound ctypes function (what :func:`call4` takes)."""
    return ctypes.cast(fn, c_void_p).value or 0


def call4(fn_addr: int, dev: int, ops) -> tuple[int, int] | None:
    """Call the function at ``fn_addr`` as ``f(dev, a, b, size)`` for each ``(a, b,
    size)`` of ``ops`` (a list of int triples, or an ``array('Q')`` of them one after
    the other) in order, stopping at the first that does not return 0: ``(calls that
    returned 0, return code of the failing one or 0)``.  None when
    ``libosh_batch.so`` is not available (nothing was called)."""
    fn = _fn if _loaded else _bind()
    if fn is None:
        return None
    if isinstance(ops, array):
        flat = ops
    else:
        flat = array("Q")
        for triple in ops:
            flat.extend(triple)
    rc = c_int32(0)
    done = fn(fn_addr, dev, len(flat) // 3, flat.buffer_info()[0], ctypes.byref(rc))
    return int(done), int(rc.value)


__all__ = ["FILENAME", "call4", "function_address"]
