"""Run compiler output through the Python runtime: libomptarget's host side in Python.

``libosh_interposer.so`` (native/interposer.c) exports libomptarget 16's host entry
points under version node ``VERS1.0`` and libgomp's offload entry points.  Loaded
``RTLD_GLOBAL`` before a library built by ``clang-16 -fopenmp
-fopenmp-targets=x86_64-pc-linux-gnu`` (or preloaded into a program by
``offload-shim run``), it forwards that code's registrations, constructs and
``omp_target_*`` calls to an :class:`Interposer`, which re-creates libomptarget 16 over
a :class:`~offload_shim.Runtime`.  The shared bridge sits here, beside two wings:

==================  ==========================================================
:mod:`.bridge`      the C bridge: loading the interposer, its callback table
                    (ctypes in :mod:`offload_shim.abi.interposer`)
:mod:`.library`     compiled libraries loaded through the interposer
:mod:`.embed`       the Python side of ``offload-shim run`` inside the program
:mod:`.holdings`    what the Python side holds, counted
:mod:`.llvm`        libomptarget's host side, one module per upstream source
                    file (``interface.cpp``, ``rtl.cpp``, ``device.cpp``,
                    ``omptarget.cpp``, ``api.cpp``) and the release profiles
:mod:`.gomp`        GCC libgomp 12's ``target.c``: registration, constructs,
                    API routines, ``gomp_map_vars`` & co., the host device
==================  ==========================================================

See docs/interpose.md.
"""

from __future__ import annotations

from .bridge import (CALL_COUNTERS, INTERPOSER_FILENAME, call_counts, interposer_path,
                     load_interposer)
from .library import LoadedLibrary
from .llvm.interface import (OFFLOAD_DEVICE_DEFAULT, TGT_DEFAULT, TGT_DISABLED,
                             TGT_MANDATORY, Interposer, interpose)
from .llvm.mapping import DeviceMapper
from .llvm.maptable import MapEntry, MappingTable
from .llvm.omptarget import (MAP_ALWAYS, MAP_ATTACH, MAP_CLOSE, MAP_DELETE, MAP_FROM,
                             MAP_IMPLICIT, MAP_LITERAL, MAP_MEMBER_OF, MAP_NON_CONTIG,
                             MAP_OMPX_HOLD, MAP_PRESENT, MAP_PRIVATE, MAP_PTR_AND_OBJ,
                             MAP_RETURN_PARAM, MAP_TARGET_PARAM, MAP_TO)

__all__ = ["CALL_COUNTERS", "DeviceMapper", "GOMP_CONSTRUCTS", "GompImage",
           "INTERPOSER_FILENAME", "Interposer", "LoadedLibrary", "MapEntry", "MappingTable",
           "OFFLOAD_DEVICE_DEFAULT", "TGT_DEFAULT", "TGT_DISABLED", "TGT_MANDATORY",
           "call_counts", "interpose", "interposer_path", "load_interposer",
           "MAP_ALWAYS", "MAP_ATTACH", "MAP_CLOSE", "MAP_DELETE", "MAP_FROM",
           "MAP_IMPLICIT", "MAP_LITERAL", "MAP_MEMBER_OF", "MAP_NON_CONTIG", "MAP_OMPX_HOLD", "MAP_PRESENT", "MAP_PRIVATE",
           "MAP_PTR_AND_OBJ", "MAP_RETURN_PARAM", "MAP_TARGET_PARAM", "MAP_TO"]


def __getattr__(name: str):
    # the GCC side's names on first access (PEP 562): a clang program's embedded
    # runtime never imports gomp.target (gomp/lazy.py)
    if name in ("GOMP_CONSTRUCTS", "GompImage"):
        from .gomp import target
        value = getattr(target, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"GOMP_CONSTRUCTS", "GompImage"})
