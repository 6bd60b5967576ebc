"""Compiled libraries loaded while an interposer is active.

A library built by ``clang-16 -fopenmp -fopenmp-targets=...`` registers its images from
a constructor (``__tgt_register_lib``) and unregisters them from a destructor
(``__tgt_unregister_lib``), so ``dlopen`` / ``dlclose`` are registration and
unregistration (libomptarget 16 ``rtl.cpp``; the C side: native/interposer.c).
"""

from __future__ import annotations

import errno
import os

from ..abi import interposer as _abi
from ..errors import LifecycleError, MissingEntryPointError


class LoadedLibrary:
    """A shared library ``dlopen``ed (RTLD_NOW | RTLD_LOCAL) while an
    :class:`~offload_shim.interposer.Interposer` is active, so its constructors
    register its images with the Python runtime.  ``call(name)`` calls ``int64_t name(void)``;
    ``function(name, restype, argtypes)`` returns a ctypes function.  ``close()``
    ``dlclose``s it (destructors unregister); idempotent; also a context manager."""

    def __init__(self, path: str, handle: int):
        self.path = path
        self.handle = handle
        self._cdll = _abi.cdll_from_handle(path, handle)
        self._closed = False

    def function(self, name: str, restype=_abi.C_INT64, argtypes=()):
        """The ctypes function ``name``.  Raises TypeError for a name that is not a
        str, MissingEntryPointError (an OffloadError; ``.function`` = ``name``) when
        the library exports no such symbol, LifecycleError after close."""
        if self._closed:
            raise LifecycleError(f"{self.path}: library is closed")
        if not isinstance(name, str):
            raise TypeError(f"function name must be a str, not {type(name).__name__}")
        try:
            fn = getattr(self._cdll, name)
        except AttributeError:
            raise MissingEntryPointError(f"{self.path}: no function {name!r} (the library "
                                         "does not export that symbol)",
                                         function=name) from None
        fn.restype = restype
        fn.argtypes = list(argtypes)
        return fn

    def call(self, name: str, *args, restype=_abi.C_INT64):
        return self.function(name, restype)(*args)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        err = _abi.dlclose(self.handle)
        if err is not None:
            raise OSError(f"dlclose({self.path}): {err or 'failed'}")

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<LoadedLibrary {self.path} {'closed' if self._closed else 'open'}>"


def open_library(path: str | os.PathLike) -> LoadedLibrary:
    """``dlopen(path, RTLD_NOW | RTLD_LOCAL)``.  Raises FileNotFoundError (no such
    file, an empty path), IsADirectoryError, OSError with the dlerror text (not a shared library, a
    missing dependency...)."""
    from pathlib import Path
    if not os.fspath(path):         # Path("") is the working directory
        raise FileNotFoundError(errno.ENOENT, "empty library path", "")
    p = str(Path(path).resolve())
    if not os.path.exists(p):
        raise FileNotFoundError(errno.ENOENT, f"{path}: no such library file", str(path))
    if os.path.isdir(p):
        raise IsADirectoryError(errno.EISDIR, f"{path}: is a directory, not a shared "
                                "library", str(path))
    h, err = _abi.dlopen_local(p)
    if not h:
        raise OSError(f"cannot load {path} as a shared library: {err or 'dlopen failed'}")
    return LoadedLibrary(p, h)


__all__ = ["LoadedLibrary", "open_library"]
