"""libc, bound once and lazily (on the first call, never at import).

The page-locking calls of ``<sys/mman.h>`` used by
:mod:`offload_shim.memory.pinned`; each returns 0 or the ``errno`` the call
left (ctypes ``use_errno``), so callers can type their errors by cause.
More libc entry points belong here, in the same table.
"""

from __future__ import annotations

import ctypes
import functools
from ctypes import c_int, c_size_t, c_void_p

MCL_CURRENT = 1
MCL_FUTURE = 2

_PROTOTYPES = {
    # int mlock(const void *addr, size_t len);
    "mlock": (c_int, [c_void_p, c_size_t]),
    # int munlock(const void *addr, size_t len);
    "munlock": (c_int, [c_void_p, c_size_t]),
    # int mlockall(int flags);
    "mlockall": (c_int, [c_int]),
    # int munlockall(void);
    "munlockall": (c_int, []),
}


@functools.lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(None, use_errno=True)
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def _errno_of(rc: int) -> int:
    return 0 if rc == 0 else (ctypes.get_errno() or -1)


def mlock(addr: int, size: int) -> int:
    """``mlock(addr, size)`` (bytes); 0 or the errno (ENOMEM: not mapped or
    over ``RLIMIT_MEMLOCK``; EPERM; EAGAIN)."""
    return _errno_of(_lib().mlock(addr, size))


def munlock(addr: int, size: int) -> int:
    """``munlock(addr, size)`` (bytes); 0 or the errno."""
    return _errno_of(_lib().munlock(addr, size))


def mlockall(flags: int = MCL_CURRENT | MCL_FUTURE) -> int:
    """``mlockall(flags)``; 0 or the errno."""
    return _errno_of(_lib().mlockall(flags))


def munlockall() -> int:
    """``munlockall()``; 0 or the errno."""
    return _errno_of(_lib().munlockall())


__all__ = ["MCL_CURRENT", "MCL_FUTURE", "mlock", "munlock", "mlockall", "munlockall"]
