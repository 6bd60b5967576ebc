"""Run compiler output through the Python runtime: libomptarget's host side in Python.

``libosh_interposer.so`` (native/interposer.c) exports libomptarget 16's host entry
points under version node ``VERS1.0`` and libgomp's offload entry points.  Loaded
``RTLD_GLOBAL`` before a library built by ``clang-16 -fopenmp
-fopenmp-targets=x86_64-pc-linux-gnu`` (or preloaded into a program by
``offload-shim run``), it forwards that code's registrations, constructs and
``omp_target_*`` calls to an :class:`Interposer`, which re-creates libomptarget 16 over
a :class:`~offload_shim.Runtime`.  The package follows libomptarget's own split:

==================  ==========================================================
:mod:`.bridge`      the C bridge: loading the interposer, its callback table
                    (ctypes in :mod:`offload_shim.abi.interposer`)
:mod:`.interface`   ``interface.cpp``: the entry points, ``checkDeviceAndCtors``,
                    ``handleTargetOutcome``; :class:`Interposer`, :func:`interpose`
:mod:`.rtl`         ``rtl.cpp``: ``__tgt_bin_desc`` decoding, registration, device
                    numbering
:mod:`.mapping`     ``device.cpp``: the mapping table, ``getTargetPointer``,
                    ``getTgtPtrBegin``
:mod:`.omptarget`   ``omptarget.cpp``: map types, ``targetDataBegin/End/Update``
:mod:`.launch`      ``omptarget.cpp`` ``target()``: the kernel launch
:mod:`.api`         ``api.cpp``: ``omp_target_alloc`` & co.
:mod:`.profile`     what differs between libomptarget 16, 19.1 and 22.1: one
                    ``RuntimeProfile`` per release, chosen from what the program
                    links
:mod:`.gomp`        GCC libgomp ``target.c``: registration, constructs, API
                    routines (with ``gomp_mapping``: ``gomp_map_vars`` & co.,
                    and ``gomp_device``: a device with separate host memory)
:mod:`.library`     compiled libraries loaded through the interposer
:mod:`.embed`       the Python side of ``offload-shim run`` inside the program
==================  ==========================================================

See docs/interpose.md.
"""

from __future__ import annotations

from .bridge import (CALL_COUNTERS, INTERPOSER_FILENAME, call_counts, interposer_path,
                     load_interposer)
from .gomp import GOMP_CONSTRUCTS, GompImage
from .interface import (OFFLOAD_DEVICE_DEFAULT, TGT_DEFAULT, TGT_DISABLED, TGT_MANDATORY,
                        Interposer, interpose)
from .library import LoadedLibrary
from .mapping import DeviceMapper, MapEntry, MappingTable
from .omptarget import (MAP_ALWAYS, MAP_ATTACH, MAP_CLOSE, MAP_DELETE, MAP_FROM,
                        MAP_IMPLICIT, MAP_LITERAL, MAP_MEMBER_OF, MAP_NON_CONTIG, MAP_OMPX_HOLD,
                        MAP_PRESENT, MAP_PRIVATE, MAP_PTR_AND_OBJ, MAP_RETURN_PARAM,
                        MAP_TARGET_PARAM, MAP_TO)

__all__ = ["CALL_COUNTERS", "DeviceMapper", "GOMP_CONSTRUCTS", "GompImage",
           "INTERPOSER_FILENAME", "Interposer", "LoadedLibrary", "MapEntry", "MappingTable",
           "OFFLOAD_DEVICE_DEFAULT", "TGT_DEFAULT", "TGT_DISABLED", "TGT_MANDATORY",
           "call_counts", "interpose", "interposer_path", "load_interposer",
           "MAP_ALWAYS", "MAP_ATTACH", "MAP_CLOSE", "MAP_DELETE", "MAP_FROM",
           "MAP_IMPLICIT", "MAP_LITERAL", "MAP_MEMBER_OF", "MAP_NON_CONTIG", "MAP_OMPX_HOLD", "MAP_PRESENT", "MAP_PRIVATE",
           "MAP_PTR_AND_OBJ", "MAP_RETURN_PARAM", "MAP_TARGET_PARAM", "MAP_TO"]
