"""ctypes layer for GCC libgomp plugins (``GOMP_OFFLOAD_*``).

Facts from GCC 12 ``libgomp-plugin.h`` / ``target.c`` (GCC 12.2 plugins
verified; other versions from libgomp sources).  GCC 12 has
``GOMP_VERSION`` 1: ``GOMP_OFFLOAD_version()`` returns the plain version,
images carry ``GOMP_VERSION_PACK(GOMP_VERSION, GOMP_VERSION_<DEV>)``.
"""

from __future__ import annotations

import ctypes
from ctypes import (POINTER, Structure, c_bool, c_char_p, c_int, c_size_t,
                    c_uint, c_uint32, c_uint64, c_void_p)

_c_uintptr = c_size_t  # uintptr_t on LP64

PREFIX = "GOMP_OFFLOAD_"

GOMP_VERSION_GCC12 = 1

GOMP_OFFLOAD_CAP_SHARED_MEM = 1 << 0
GOMP_OFFLOAD_CAP_NATIVE_EXEC = 1 << 1
GOMP_OFFLOAD_CAP_OPENMP_400 = 1 << 2
GOMP_OFFLOAD_CAP_OPENACC_200 = 1 << 3

# enum offload_target_type
OFFLOAD_TARGET_TYPE_HOST = 2
OFFLOAD_TARGET_TYPE_NVIDIA_PTX = 5
OFFLOAD_TARGET_TYPE_INTEL_MIC = 6
OFFLOAD_TARGET_TYPE_HSA = 7
OFFLOAD_TARGET_TYPE_GCN = 8

TARGET_TYPE_NAMES = {2: "host", 5: "nvidia_ptx", 6: "intel_mic", 7: "hsa", 8: "gcn"}


def version_pack(lib: int, dev: int) -> int:
    """``GOMP_VERSION_PACK(LIB, DEV)`` = (LIB << 16) | DEV."""
    return ((lib & 0xFFFF) << 16) | (dev & 0xFFFF)


def version_lib(packed: int) -> int:
    return (packed >> 16) & 0xFFFF


def version_dev(packed: int) -> int:
    return packed & 0xFFFF


class AddrPair(Structure):
    """``struct addr_pair { uintptr_t start, end; }``, 16 bytes."""
    _fields_ = [("start", _c_uintptr), ("end", _c_uintptr)]


# The bundled host plugin's target_data (native/osh_host_plugin.h).
OSH_GOMP_TARGET_DATA_MAGIC = 0x4748534F  # "OSHG"


class OshGompTargetData(Structure):
    """``struct osh_gomp_target_data`` of the bundled host plugin, 64 bytes:
    image bytes, kernel names with their argument counts, variable names."""
    _fields_ = [
        ("magic", c_uint32),
        ("format_version", c_uint32),
        ("image", c_void_p),
        ("image_size", c_uint64),
        ("func_names", POINTER(c_char_p)),
        ("func_num_args", POINTER(c_uint32)),
        ("num_funcs", c_uint32),
        ("pad0", c_uint32),
        ("var_names", POINTER(c_char_p)),
        ("num_vars", c_uint32),
        ("pad1", c_uint32),
    ]


AddrPairPP = POINTER(POINTER(AddrPair))

# GCC 12 prototypes: short name -> (restype, argtypes).
_GCC12 = {
    # unsigned GOMP_OFFLOAD_version(void);
    "version": (c_uint, []),
    # const char *GOMP_OFFLOAD_get_name(void);
    "get_name": (c_char_p, []),
    # unsigned GOMP_OFFLOAD_get_caps(void);
    "get_caps": (c_uint, []),
    # int GOMP_OFFLOAD_get_type(void);
    "get_type": (c_int, []),
    # int GOMP_OFFLOAD_get_num_devices(void);   (GCC 13+: (unsigned omp_requires_mask))
    "get_num_devices": (c_int, [c_uint]),
    # bool GOMP_OFFLOAD_init_device(int n);
    "init_device": (c_bool, [c_int]),
    # bool GOMP_OFFLOAD_fini_device(int n);
    "fini_device": (c_bool, [c_int]),
    # int GOMP_OFFLOAD_load_image(int n, unsigned version, const void *target_data,
    #                             struct addr_pair **target_table);
    #   (GCC 13+: + uint64_t **rev_fn_table; passing NULL for it is harmless in 12)
    "load_image": (c_int, [c_int, c_uint, c_void_p, AddrPairPP, c_void_p]),
    # bool GOMP_OFFLOAD_unload_image(int n, unsigned version, const void *target_data);
    "unload_image": (c_bool, [c_int, c_uint, c_void_p]),
    # void *GOMP_OFFLOAD_alloc(int n, size_t size);
    "alloc": (c_void_p, [c_int, c_size_t]),
    # bool GOMP_OFFLOAD_free(int n, void *ptr);
    "free": (c_bool, [c_int, c_void_p]),
    # bool GOMP_OFFLOAD_dev2host(int n, void *dst, const void *src, size_t len);
    "dev2host": (c_bool, [c_int, c_void_p, c_void_p, c_size_t]),
    # bool GOMP_OFFLOAD_host2dev(int n, void *dst, const void *src, size_t len);
    "host2dev": (c_bool, [c_int, c_void_p, c_void_p, c_size_t]),
    # bool GOMP_OFFLOAD_dev2dev(int n, void *dst, const void *src, size_t len);
    "dev2dev": (c_bool, [c_int, c_void_p, c_void_p, c_size_t]),
    # void GOMP_OFFLOAD_run(int n, void *tgt_fn, void *tgt_vars, void **args);
    "run": (None, [c_int, c_void_p, c_void_p, POINTER(c_void_p)]),
    # bool GOMP_OFFLOAD_can_run(void *fn_ptr);
    "can_run": (c_bool, [c_void_p]),
    # optional, GCC trunk/og13 ``libgomp-plugin.h`` (absent from GCC 12 plugins):
    # bool GOMP_OFFLOAD_page_locked_host_alloc(void **ptr, size_t size);
    "page_locked_host_alloc": (c_bool, [POINTER(c_void_p), c_size_t]),
    # bool GOMP_OFFLOAD_page_locked_host_free(void *ptr);
    "page_locked_host_free": (c_bool, [c_void_p]),
}

#: libgomp 12 loader: required before caps are known (GCC 12 target.c gomp_load_plugin_for_device)
REQUIRED_BASE = ("version", "get_name", "get_caps", "get_type", "get_num_devices",
                 "init_device", "fini_device", "load_image", "unload_image",
                 "alloc", "free", "dev2host", "host2dev")
#: additionally required when caps & GOMP_OFFLOAD_CAP_OPENMP_400
REQUIRED_OPENMP = ("run", "dev2dev")

PROTOTYPES = {1: _GCC12}
SUPPORTED_VERSIONS = (1,)

#: GOMP_VERSION by GCC release, as far as known (GCC 12 libgomp-plugin.h GOMP_VERSION)
GCC_FOR_VERSION = {0: "GCC 6-7", 1: "GCC 8-12", 2: "GCC 13", 3: "GCC 14-15", 4: "GCC 16 (trunk)"}


def generation(version: int | None) -> str:
    if version is None:
        return "gomp-unversioned (GCC 5)"
    return f"gomp-v{version}"


def table_address(table) -> int:
    """The address a ``struct addr_pair **`` out-parameter received (0 for NULL):
    what ``load_image`` ``malloc``\\ ed and the caller frees (libgomp ``target.c``)."""
    return ctypes.cast(table, c_void_p).value or 0


def call_out_pointer(fn, *args) -> tuple[int, bool]:
    """Call ``bool fn(void **out, args...)``; returns ``(*out or 0, result)``
    (``page_locked_host_alloc``'s convention)."""
    out = c_void_p()
    ok = bool(fn(ctypes.byref(out), *args))
    return out.value or 0, ok
