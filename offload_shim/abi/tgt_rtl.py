"""ctypes layer for LLVM libomptarget plugins (``__tgt_rtl_*``).

Structs and one prototype table per ABI generation.  Facts come from
LLVM 14/16 ``omptargetplugin.h`` / ``omptarget.h`` (verified against the Debian LLVM
14.0.6 and 16.0.6 plugin binaries; 17/18 from upstream ``PluginAPI.h``).

Generations (``classify``):

=================  ==========================================================
``llvm14``         classic; launch = ``run_target_region``/``run_target_team_region``
``llvm16-classic`` ``launch_kernel`` with ``KernelArgsTy``; no ``init_plugin``
``llvm16-nextgen`` ``launch_kernel`` + ``init_plugin``/``deinit_plugin``,
                   ``data_lock``, ``supports_empty_images``...
                   (LLVM 17 nextgen has the same C API and classifies here)
``llvm18``         ``load_binary`` returns int32 + ``__tgt_device_binary``,
                   ``get_function``/``get_global`` (recognised)
=================  ==========================================================
"""

from __future__ import annotations

import ctypes
from ctypes import (POINTER, Structure, c_char_p, c_int32, c_int64, c_size_t,
                    c_uint32, c_uint64, c_void_p)

PREFIX = "__tgt_rtl_"

OFFLOAD_SUCCESS = 0
OFFLOAD_FAIL = -1  # ~0 as int32

# TargetAllocTy (data_alloc / data_delete Kind), LLVM 16 omptarget.h
TARGET_ALLOC_DEVICE = 0
TARGET_ALLOC_HOST = 1
TARGET_ALLOC_SHARED = 2
TARGET_ALLOC_DEFAULT = 3

# Requires flags (init_requires)
OMP_REQ_UNDEFINED = 0x000
OMP_REQ_NONE = 0x001
OMP_REQ_REVERSE_OFFLOAD = 0x002
OMP_REQ_UNIFIED_ADDRESS = 0x004
OMP_REQ_UNIFIED_SHARED_MEMORY = 0x008
OMP_REQ_DYNAMIC_ALLOCATORS = 0x010

# __tgt_offload_entry flags
OMP_DECLARE_TARGET_LINK = 0x01
OMP_DECLARE_TARGET_CTOR = 0x02
OMP_DECLARE_TARGET_DTOR = 0x04

KERNEL_ARGS_VERSION = 2  # LLVM 16 omptarget.h KernelArgsTy: send 2 to 16/17 (and 18 without dyn_ptr)


class OffloadEntry(Structure):
    """``__tgt_offload_entry`` (LLVM <= 19), 32 bytes."""
    _fields_ = [
        ("addr", c_void_p),      # host address (must be non-NULL for 16)
        ("name", c_char_p),      # symbol name
        ("size", c_size_t),      # 0 = function, >0 = variable size in bytes
        ("flags", c_int32),
        ("reserved", c_int32),
    ]


class DeviceImage(Structure):
    """``__tgt_device_image``, 32 bytes: image bytes [ImageStart, ImageEnd) and
    the *host* entries [EntriesBegin, EntriesEnd)."""
    _fields_ = [
        ("ImageStart", c_void_p),
        ("ImageEnd", c_void_p),
        ("EntriesBegin", POINTER(OffloadEntry)),
        ("EntriesEnd", POINTER(OffloadEntry)),
    ]


class BinDesc(Structure):
    """``__tgt_bin_desc``, 32 bytes (only used by libomptarget's
    ``__tgt_register_lib``; never passed to a plugin)."""
    _fields_ = [
        ("NumDeviceImages", c_int32),
        ("DeviceImages", POINTER(DeviceImage)),
        ("HostEntriesBegin", POINTER(OffloadEntry)),
        ("HostEntriesEnd", POINTER(OffloadEntry)),
    ]


class TargetTable(Structure):
    """``__tgt_target_table``, 16 bytes; returned by ``load_binary`` (<= 17),
    owned by the plugin."""
    _fields_ = [
        ("EntriesBegin", POINTER(OffloadEntry)),
        ("EntriesEnd", POINTER(OffloadEntry)),
    ]


class ImageInfo(Structure):
    """``__tgt_image_info`` (16), 8 bytes."""
    _fields_ = [("Arch", c_char_p)]


class DeviceInfo(Structure):
    """``__tgt_device_info`` (14/16/18), 16 bytes."""
    _fields_ = [("Context", c_void_p), ("Device", c_void_p)]


class DeviceBinary(Structure):
    """``__tgt_device_binary`` (18 only)."""
    _fields_ = [("handle", c_size_t)]  # uintptr_t


class KernelArgs(Structure):
    """``KernelArgsTy`` (LLVM 16+), 104 bytes in every version.  The host
    plugins only read ``NumArgs``."""
    _fields_ = [
        ("Version", c_uint32),
        ("NumArgs", c_uint32),
        ("ArgBasePtrs", POINTER(c_void_p)),
        ("ArgPtrs", POINTER(c_void_p)),
        ("ArgSizes", POINTER(c_int64)),
        ("ArgTypes", POINTER(c_int64)),
        ("ArgNames", POINTER(c_void_p)),
        ("ArgMappers", POINTER(c_void_p)),
        ("Tripcount", c_uint64),
        ("Flags", c_uint64),          # bit 0: NoWait
        ("NumTeams", c_uint32 * 3),
        ("ThreadLimit", c_uint32 * 3),
        ("DynCGroupMem", c_uint32),
    ]


#: ``int32_t __tgt_rtl_launch_kernel(int32_t ID, void *TgtEntryPtr, void **TgtArgs,
#: ptrdiff_t *TgtOffsets, KernelArgsTy *KernelArgs, __tgt_async_info *AsyncInfo)``
#: (LLVM 16) with every pointer passed as an address: for a caller that keeps its
#: argument blocks and launches again and again (Plugin.launcher)
LAUNCH_BY_ADDRESS = ctypes.CFUNCTYPE(c_int32, c_int32, c_void_p, c_void_p, c_void_p,
                                     c_void_p, c_void_p)

# Opaque-ish pointer types so crossed pointers fail in ctypes (style.md).
OffloadEntryP = POINTER(OffloadEntry)
DeviceImageP = POINTER(DeviceImage)
TargetTableP = POINTER(TargetTable)
KernelArgsP = POINTER(KernelArgs)
AsyncInfoP = c_void_p   # __tgt_async_info *: NULL (synchronous), or ASYNC_INFO_BYTES zeros
#: bytes of the zero-filled ``__tgt_async_info`` passed where NULL is not accepted: more
#: than any version's layout ({Queue} in 14, + SmallVector in 16/18; LLVM 14/16 omptarget.h)
ASYNC_INFO_BYTES = 256
c_ptrdiff_t = ctypes.c_ssize_t

# ---------------------------------------------------------------------------
# Prototype tables: short name -> (restype, argtypes).  The C prototype is the
# comment above each entry.  One table per generation; required sets follow
# libomptarget's loader of that version (LLVM 16 rtl.cpp RTLsTy::loadRTLs).

_COMMON = {
    # int32_t __tgt_rtl_number_of_devices(void);
    "number_of_devices": (c_int32, []),
    # int32_t __tgt_rtl_is_valid_binary(__tgt_device_image *Image);
    "is_valid_binary": (c_int32, [DeviceImageP]),
    # int32_t __tgt_rtl_init_device(int32_t ID);
    "init_device": (c_int32, [c_int32]),
    # void *__tgt_rtl_data_alloc(int32_t ID, int64_t Size, void *HostPtr, int32_t Kind);
    "data_alloc": (c_void_p, [c_int32, c_int64, c_void_p, c_int32]),
    # int32_t __tgt_rtl_data_submit(int32_t ID, void *TgtPtr, void *HstPtr, int64_t Size);
    "data_submit": (c_int32, [c_int32, c_void_p, c_void_p, c_int64]),
    # int32_t __tgt_rtl_data_retrieve(int32_t ID, void *HstPtr, void *TgtPtr, int64_t Size);
    "data_retrieve": (c_int32, [c_int32, c_void_p, c_void_p, c_int64]),
    # __tgt_target_table *__tgt_rtl_load_binary(int32_t ID, __tgt_device_image *Image);
    "load_binary": (TargetTableP, [c_int32, DeviceImageP]),
}

_LLVM14 = dict(_COMMON)
_LLVM14.update({
    # int32_t __tgt_rtl_data_delete(int32_t ID, void *TgtPtr);
    "data_delete": (c_int32, [c_int32, c_void_p]),
    # int32_t __tgt_rtl_run_target_region(int32_t ID, void *Entry, void **TgtArgs,
    #                                     ptrdiff_t *TgtOffsets, int32_t NumArgs);
    "run_target_region": (c_int32, [c_int32, c_void_p, POINTER(c_void_p),
                                    POINTER(c_ptrdiff_t), c_int32]),
    # int32_t __tgt_rtl_run_target_team_region(int32_t ID, void *Entry, void **TgtArgs,
    #     ptrdiff_t *TgtOffsets, int32_t NumArgs, int32_t NumTeams,
    #     int32_t ThreadLimit, uint64_t LoopTripcount);
    "run_target_team_region": (c_int32, [c_int32, c_void_p, POINTER(c_void_p),
                                         POINTER(c_ptrdiff_t), c_int32, c_int32,
                                         c_int32, c_uint64]),
    # int64_t __tgt_rtl_init_requires(int64_t RequiresFlags);
    "init_requires": (c_int64, [c_int64]),
    # void __tgt_rtl_print_device_info(int32_t ID);
    "print_device_info": (None, [c_int32]),
    # int32_t __tgt_rtl_deinit_device(int32_t ID);   (cuda classic only)
    "deinit_device": (c_int32, [c_int32]),
})

_LLVM16 = dict(_COMMON)
_LLVM16.update({
    # int32_t __tgt_rtl_data_delete(int32_t ID, void *TgtPtr, int32_t Kind);
    "data_delete": (c_int32, [c_int32, c_void_p, c_int32]),
    # int32_t __tgt_rtl_launch_kernel(int32_t ID, void *Entry, void **TgtArgs,
    #     ptrdiff_t *TgtOffsets, KernelArgsTy *KernelArgs, __tgt_async_info *AsyncInfo);
    "launch_kernel": (c_int32, [c_int32, c_void_p, POINTER(c_void_p),
                                POINTER(c_ptrdiff_t), KernelArgsP, AsyncInfoP]),
    # int32_t __tgt_rtl_synchronize(int32_t ID, __tgt_async_info *AsyncInfo);
    "synchronize": (c_int32, [c_int32, AsyncInfoP]),
    # int32_t __tgt_rtl_init_plugin(void);
    "init_plugin": (c_int32, []),
    # int32_t __tgt_rtl_deinit_plugin(void);
    "deinit_plugin": (c_int32, []),
    # int32_t __tgt_rtl_deinit_device(int32_t ID);
    "deinit_device": (c_int32, [c_int32]),
    # int64_t __tgt_rtl_init_requires(int64_t RequiresFlags);
    "init_requires": (c_int64, [c_int64]),
    # int32_t __tgt_rtl_is_valid_binary_info(__tgt_device_image *, __tgt_image_info *);
    "is_valid_binary_info": (c_int32, [DeviceImageP, POINTER(ImageInfo)]),
    # int32_t __tgt_rtl_supports_empty_images(void);
    "supports_empty_images": (c_int32, []),
    # void __tgt_rtl_print_device_info(int32_t ID);
    "print_device_info": (None, [c_int32]),
    # int32_t __tgt_rtl_data_lock(int32_t ID, void *HstPtr, int64_t Size, void **LockedPtr);
    #   (the Debian 16.0.6 nextgen and amdgpu plugins store through the 4th argument;
    #    the later releases' 3-argument form is wrong for 16)
    "data_lock": (c_int32, [c_int32, c_void_p, c_int64, POINTER(c_void_p)]),
    # int32_t __tgt_rtl_data_unlock(int32_t ID, void *HstPtr);
    "data_unlock": (c_int32, [c_int32, c_void_p]),
    # int32_t __tgt_rtl_is_data_exchangable(int32_t SrcID, int32_t DstID);
    "is_data_exchangable": (c_int32, [c_int32, c_int32]),
    # int32_t __tgt_rtl_data_exchange(int32_t SrcID, void *SrcPtr, int32_t DstID,
    #                                 void *DstPtr, int64_t Size);
    "data_exchange": (c_int32, [c_int32, c_void_p, c_int32, c_void_p, c_int64]),
    # void __tgt_rtl_set_info_flag(uint32_t Flags);
    "set_info_flag": (None, [c_uint32]),
    # int32_t __tgt_rtl_init_device_info(int32_t ID, __tgt_device_info *DI, const char **ErrStr);
    "init_device_info": (c_int32, [c_int32, POINTER(DeviceInfo), POINTER(c_char_p)]),
})

_LLVM18 = dict(_LLVM16)
del _LLVM18["is_valid_binary_info"]
_LLVM18.update({
    # int32_t __tgt_rtl_load_binary(int32_t ID, __tgt_device_image *Image,
    #                               __tgt_device_binary *Binary);
    "load_binary": (c_int32, [c_int32, DeviceImageP, POINTER(DeviceBinary)]),
    # int32_t __tgt_rtl_get_function(__tgt_device_binary Bin, const char *Name, void **DevicePtr);
    "get_function": (c_int32, [DeviceBinary, c_char_p, POINTER(c_void_p)]),
    # int32_t __tgt_rtl_get_global(__tgt_device_binary Bin, uint64_t Size,
    #                              const char *Name, void **DevicePtr);
    "get_global": (c_int32, [DeviceBinary, c_uint64, c_char_p, POINTER(c_void_p)]),
})

_REQ_CORE = ("is_valid_binary", "number_of_devices", "init_device", "load_binary",
             "data_alloc", "data_submit", "data_retrieve", "data_delete")

#: generation -> (prototypes, required short names).  Required sets are
#: libomptarget's own (LLVM 16 rtl.cpp RTLsTy::loadRTLs): 14 needs both run_target_* entry
#: points, 16 needs launch_kernel, 18 also needs init_plugin.
GENERATIONS: dict[str, tuple[dict, tuple[str, ...]]] = {
    "llvm14": (_LLVM14, _REQ_CORE + ("run_target_region", "run_target_team_region")),
    "llvm16-classic": (_LLVM16, _REQ_CORE + ("launch_kernel",)),
    "llvm16-nextgen": (_LLVM16, _REQ_CORE + ("launch_kernel",)),
    "llvm18": (_LLVM18, _REQ_CORE + ("launch_kernel", "init_plugin")),
}

#: generations this package can drive end to end (17/18 are recognised only)
SUPPORTED = ("llvm14", "llvm16-classic", "llvm16-nextgen")

# Nextgen plugins export init_plugin, deinit_plugin and deinit_device together;
# 16 classic amdgpu has init/deinit_plugin but no deinit_device, 16 classic cuda
# has deinit_device but no init_plugin (the installed plugins' exports).
_NEXTGEN_MARKERS = {"init_plugin", "deinit_plugin", "deinit_device"}


def classify(symbols: set[str]) -> str | None:
    """Generation of an LLVM plugin from its exported short names (without
    ``__tgt_rtl_``), or None when it has no launch entry point.  Rules from
    docs/references.md, plugin contracts: ``get_function``/``get_global`` -> 18;
    ``launch_kernel`` -> 16+ (nextgen when it has init_plugin, deinit_plugin and
    deinit_device; 17 is API-identical and classifies as 16 nextgen);
    ``run_target_team_region`` without ``launch_kernel`` -> 14."""
    if "launch_kernel" in symbols:
        if "get_function" in symbols or "get_global" in symbols:
            return "llvm18"
        if _NEXTGEN_MARKERS <= symbols:
            # 17 nextgen has the same C API as 16 nextgen (minus the optional
            # is_valid_binary_info) and no symbol that tells them apart.
            return "llvm16-nextgen"
        return "llvm16-classic"
    if "run_target_team_region" in symbols or "run_target_region" in symbols:
        return "llvm14"
    return None


def all_names() -> set[str]:
    names: set[str] = set()
    for protos, _ in GENERATIONS.values():
        names.update(protos)
    return names
