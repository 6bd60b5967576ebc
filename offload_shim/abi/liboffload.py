"""ctypes layer for LLVM liboffload, the ``ol*`` C API of ``libLLVMOffload.so``.

Source of every value here: ``offload/OffloadAPI.h`` of LLVM **22.1.8** (Debian
``liboffload-22-dev`` 1:22.1.8-1~deb12u1, generated from upstream
``offload/liboffload/API/*.td``), checked against the exports of
``libLLVMOffload.so.22.1`` (``nm -D``: every function is ``ol<Name>@@VERS1.0``
plus an ``ol<Name>WithCodeLoc`` twin) and by calling it on this machine
(liboffload 22.1 ``OffloadAPI.h``).  ``OL_VERSION`` 0.0.1.

Conventions (22.1.8):

* every entry point returns ``ol_result_t`` = ``const ol_error_struct_t *``:
  **NULL on success**, else a library-owned ``{ol_errc_t Code; const char
  *Details;}`` (16 bytes);
* handles are opaque pointers to distinct incomplete structs; here each is a
  distinct ``POINTER`` type, so passing a queue where a device is expected
  fails in ctypes (``ctypes.ArgumentError``) instead of in the library;
* host memory is addressed through the *host device* (``OL_DEVICE_TYPE_HOST``
  on the ``OL_PLATFORM_BACKEND_HOST`` platform): it is a memcpy endpoint only.
  On 22.1.8 ``olMemAlloc``, ``olCreateProgram``, ``olCreateQueue``,
  ``olMemRegister``/``olMemUnregister`` and ``olMemFill`` on it **segfault**
  (verified in child processes), as does any handle the library never returned.

Generations (:func:`classify`, from the exported names only):

====================  ===================================================
``liboffload22``      ``olGetSymbol(Program, Name, Kind, ol_symbol_handle_t*)``
                      + ``olGetSymbolInfo``: kernels and globals (22.1.8)
``liboffload21``      ``olGetKernel(Program, Name, ol_kernel_handle_t*)``,
                      no global-variable lookup: the API shape before
                      upstream PR #147943/#148221 (2025-07-10/11) replaced
                      it with ``olGetSymbol`` -- LLVM 21 branched in the
                      same week, so a 21 build has one or the other; no 21
                      binary or header was available here, so this shape
                      is taken from the PRs and is **unverified**
``liboffload20``      no ``olInit``/``olIterateDevices`` (the LLVM 20
                      platform-count API): recognised, not supported
====================  ===================================================

Differences 21 vs 22 known from upstream history (llvm/llvm-project PRs and
stored versions of ``offload/liboffload``): ``olMemFree`` takes only the
address in both (the ``olMemFree(Device, Address)`` of PR #122106's first
draft was gone by May 2025, when PR #140889 describes the allocation map that
replaced it; a later trunk ``Memory.td``, commit 071ae75, has an optional
device argument again); ``ol_errc_t`` values were renumbered when the error
codes were shared with the plugins (the generated ``OffloadAPI.h`` of commit
0ca7527 has ``INVALID_VALUE = 1`` ... ``UNKNOWN = 15``), so only 22's names
are given; ``ol_device_info_t`` gained ``PRODUCT_NAME = 3`` (shifting
``VENDOR``), so on 21 only ``TYPE`` (0), ``PLATFORM`` (1) and ``NAME`` (2),
equal in every version seen, are read.

Nothing is loaded here; :mod:`offload_shim.plugins.liboffload` binds the
table into one plugin object per library.
"""

from __future__ import annotations

import ctypes
import enum
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char_p, c_int32, c_size_t,
                    c_uint32, c_void_p)

#: header of the release the tables follow
HEADER = "OffloadAPI.h, LLVM 22.1.8 (Debian liboffload-22-dev)"
OL_VERSION = (0, 0, 1)


class ErrorStruct(Structure):
    """``ol_error_struct_t`` (16 bytes): ``Code`` (``ol_errc_t``), ``Details``."""
    _fields_ = [("Code", c_int32), ("Details", c_char_p)]


#: ``ol_result_t``: NULL (falsy) = OL_SUCCESS
ol_result_t = POINTER(ErrorStruct)


def _handle(name: str):
    """A distinct pointer type for one opaque handle (``struct <name> *``)."""
    return POINTER(type(name, (Structure,), {}))


ol_platform_handle_t = _handle("ol_platform_impl_t")
ol_device_handle_t = _handle("ol_device_impl_t")
ol_context_handle_t = _handle("ol_context_impl_t")
ol_queue_handle_t = _handle("ol_queue_impl_t")
ol_event_handle_t = _handle("ol_event_impl_t")
ol_program_handle_t = _handle("ol_program_impl_t")
ol_symbol_handle_t = _handle("ol_symbol_impl_t")
#: 21 shape (olGetKernel): ``ol_kernel_handle_t`` (renamed to ol_symbol_handle_t by PR #147943)
ol_kernel_handle_t = _handle("ol_kernel_impl_t")

#: ``bool (*ol_device_iterate_cb_t)(ol_device_handle_t Device, void *UserData)``
ol_device_iterate_cb_t = CFUNCTYPE(c_bool, ol_device_handle_t, c_void_p)


class Errc(enum.IntEnum):
    """``ol_errc_t`` (22.1.8)."""
    SUCCESS = 0
    UNKNOWN = 1
    HOST_IO = 2
    INVALID_BINARY = 3
    INVALID_NULL_POINTER = 4
    INVALID_ARGUMENT = 5
    NOT_FOUND = 6
    OUT_OF_RESOURCES = 7
    INVALID_SIZE = 8
    INVALID_ENUMERATION = 9
    HOST_TOOL_NOT_FOUND = 10
    INVALID_VALUE = 11
    UNIMPLEMENTED = 12
    UNSUPPORTED = 13
    ASSEMBLE_FAILURE = 14
    COMPILE_FAILURE = 15
    LINK_FAILURE = 16
    BACKEND_FAILURE = 17
    UNINITIALIZED = 18
    INVALID_NULL_HANDLE = 19
    INVALID_PLATFORM = 20
    INVALID_DEVICE = 21
    INVALID_QUEUE = 22
    INVALID_EVENT = 23
    SYMBOL_KIND = 24


def errc_name(code: int, generation: str = "liboffload22") -> str:
    """``"UNINITIALIZED"`` for 18 on 22; ``"code N"`` where the name is not
    known for ``generation`` (the values were renumbered before 22)."""
    if generation == "liboffload22":
        try:
            return Errc(code).name
        except ValueError:
            pass
    return f"code {code}"


class AllocType(enum.IntEnum):
    """``ol_alloc_type_t``."""
    HOST = 0
    DEVICE = 1
    MANAGED = 2


class DeviceType(enum.IntEnum):
    """``ol_device_type_t``."""
    DEFAULT = 0
    ALL = 1
    GPU = 2
    CPU = 3
    HOST = 4


class PlatformBackend(enum.IntEnum):
    """``ol_platform_backend_t``."""
    UNKNOWN = 0
    CUDA = 1
    AMDGPU = 2
    LEVEL_ZERO = 3
    HOST = 4


class PlatformInfo(enum.IntEnum):
    """``ol_platform_info_t``: NAME/VENDOR_NAME/VERSION are ``char[]``,
    BACKEND an ``ol_platform_backend_t`` (4 bytes)."""
    NAME = 0
    VENDOR_NAME = 1
    VERSION = 2
    BACKEND = 3


class DeviceInfo(enum.IntEnum):
    """``ol_device_info_t`` (22.1.8)."""
    TYPE = 0
    PLATFORM = 1
    NAME = 2
    PRODUCT_NAME = 3
    UID = 4
    VENDOR = 5
    DRIVER_VERSION = 6
    MAX_WORK_GROUP_SIZE = 7
    MAX_WORK_GROUP_SIZE_PER_DIMENSION = 8
    MAX_WORK_SIZE = 9
    MAX_WORK_SIZE_PER_DIMENSION = 10
    VENDOR_ID = 11
    NUM_COMPUTE_UNITS = 12
    MAX_CLOCK_FREQUENCY = 13
    MEMORY_CLOCK_RATE = 14
    ADDRESS_BITS = 15
    MAX_MEM_ALLOC_SIZE = 16
    GLOBAL_MEM_SIZE = 17
    WORK_GROUP_LOCAL_MEM_SIZE = 18
    SINGLE_FP_CONFIG = 19
    DOUBLE_FP_CONFIG = 20
    HALF_FP_CONFIG = 21
    NATIVE_VECTOR_WIDTH_CHAR = 22
    NATIVE_VECTOR_WIDTH_SHORT = 23
    NATIVE_VECTOR_WIDTH_INT = 24
    NATIVE_VECTOR_WIDTH_LONG = 25
    NATIVE_VECTOR_WIDTH_FLOAT = 26
    NATIVE_VECTOR_WIDTH_DOUBLE = 27
    NATIVE_VECTOR_WIDTH_HALF = 28


#: value type of each device property read by offload_shim ("str" = char[])
DEVICE_INFO_TYPES = {
    DeviceInfo.TYPE: c_uint32, DeviceInfo.PLATFORM: c_void_p, DeviceInfo.NAME: "str",
    DeviceInfo.PRODUCT_NAME: "str", DeviceInfo.UID: "str", DeviceInfo.VENDOR: "str",
    DeviceInfo.DRIVER_VERSION: "str", DeviceInfo.VENDOR_ID: c_uint32,
    DeviceInfo.NUM_COMPUTE_UNITS: c_uint32, DeviceInfo.ADDRESS_BITS: c_uint32,
    DeviceInfo.MAX_MEM_ALLOC_SIZE: ctypes.c_uint64, DeviceInfo.GLOBAL_MEM_SIZE: ctypes.c_uint64,
}

#: device properties whose value is the same in every header seen (see the module doc)
STABLE_DEVICE_INFO = (DeviceInfo.TYPE, DeviceInfo.PLATFORM, DeviceInfo.NAME)


class MemInfo(enum.IntEnum):
    """``ol_mem_info_t``."""
    DEVICE = 0
    BASE = 1
    SIZE = 2
    TYPE = 3


class QueueInfo(enum.IntEnum):
    """``ol_queue_info_t``."""
    DEVICE = 0
    EMPTY = 1


class EventInfo(enum.IntEnum):
    """``ol_event_info_t``."""
    QUEUE = 0
    IS_COMPLETE = 1


class SymbolKind(enum.IntEnum):
    """``ol_symbol_kind_t``."""
    KERNEL = 0
    GLOBAL_VARIABLE = 1


class SymbolInfo(enum.IntEnum):
    """``ol_symbol_info_t``: KIND (4 bytes), GLOBAL_VARIABLE_ADDRESS
    (``void *``), GLOBAL_VARIABLE_SIZE (``size_t``, bytes)."""
    KIND = 0
    GLOBAL_VARIABLE_ADDRESS = 1
    GLOBAL_VARIABLE_SIZE = 2


class Dimensions(Structure):
    """``ol_dimensions_t`` (12 bytes)."""
    _fields_ = [("x", c_uint32), ("y", c_uint32), ("z", c_uint32)]


class KernelLaunchSizeArgs(Structure):
    """``ol_kernel_launch_size_args_t`` (40 bytes: offsets 0, 8, 20, 32)."""
    _fields_ = [("Dimensions", c_size_t), ("NumGroups", Dimensions),
                ("GroupSize", Dimensions), ("DynSharedMemory", c_size_t)]


class CodeLocation(Structure):
    """``ol_code_location_t`` (24 bytes), argument of the ``*WithCodeLoc`` twins."""
    _fields_ = [("FunctionName", c_char_p), ("SourceFile", c_char_p),
                ("LineNumber", c_uint32), ("ColumnNumber", c_uint32)]


_R = ol_result_t
_dev, _plat, _q, _prog = ol_device_handle_t, ol_platform_handle_t, ol_queue_handle_t, ol_program_handle_t
_sym = ol_symbol_handle_t

#: name -> (restype, argtypes), 22.1.8 (``olGetKernel`` is the 21 shape)
PROTOTYPES: dict[str, tuple] = {
    # ol_result_t olInit(void);        refcounted; the first call initialises the platforms
    "olInit": (_R, []),
    # ol_result_t olShutDown(void);    decrements; at 0 every resource is released
    "olShutDown": (_R, []),
    # ol_result_t olIterateDevices(ol_device_iterate_cb_t Callback, void *UserData);
    "olIterateDevices": (_R, [ol_device_iterate_cb_t, c_void_p]),
    # ol_result_t olGetDeviceInfo(ol_device_handle_t, ol_device_info_t, size_t PropSize, void *PropValue);
    "olGetDeviceInfo": (_R, [_dev, c_uint32, c_size_t, c_void_p]),
    # ol_result_t olGetDeviceInfoSize(ol_device_handle_t, ol_device_info_t, size_t *PropSizeRet);
    "olGetDeviceInfoSize": (_R, [_dev, c_uint32, POINTER(c_size_t)]),
    # ol_result_t olGetPlatformInfo(ol_platform_handle_t, ol_platform_info_t, size_t, void *);
    "olGetPlatformInfo": (_R, [_plat, c_uint32, c_size_t, c_void_p]),
    # ol_result_t olGetPlatformInfoSize(ol_platform_handle_t, ol_platform_info_t, size_t *);
    "olGetPlatformInfoSize": (_R, [_plat, c_uint32, POINTER(c_size_t)]),
    # ol_result_t olMemAlloc(ol_device_handle_t, ol_alloc_type_t, size_t Size, void **AllocationOut);
    "olMemAlloc": (_R, [_dev, c_uint32, c_size_t, POINTER(c_void_p)]),
    # ol_result_t olMemFree(void *Address);
    "olMemFree": (_R, [c_void_p]),
    # ol_result_t olMemcpy(ol_queue_handle_t Queue /* NULL: synchronous */, void *DstPtr,
    #                      ol_device_handle_t DstDevice, const void *SrcPtr,
    #                      ol_device_handle_t SrcDevice, size_t Size);
    "olMemcpy": (_R, [_q, c_void_p, _dev, c_void_p, _dev, c_size_t]),
    # ol_result_t olMemFill(ol_queue_handle_t, void *Ptr, size_t PatternSize,
    #                       const void *PatternPtr, size_t FillSize);
    "olMemFill": (_R, [_q, c_void_p, c_size_t, c_void_p, c_size_t]),
    # ol_result_t olMemRegister(ol_device_handle_t, void *Ptr, size_t Size,
    #                           ol_memory_register_flags_t Flags, void **PinnedPtr);
    "olMemRegister": (_R, [_dev, c_void_p, c_size_t, c_uint32, POINTER(c_void_p)]),
    # ol_result_t olMemUnregister(ol_device_handle_t, void *Ptr);
    "olMemUnregister": (_R, [_dev, c_void_p]),
    # ol_result_t olGetMemInfo(const void *Ptr, ol_mem_info_t, size_t, void *);
    "olGetMemInfo": (_R, [c_void_p, c_uint32, c_size_t, c_void_p]),
    # ol_result_t olCreateQueue(ol_device_handle_t, ol_queue_handle_t *Queue);
    "olCreateQueue": (_R, [_dev, POINTER(_q)]),
    # ol_result_t olDestroyQueue(ol_queue_handle_t);
    "olDestroyQueue": (_R, [_q]),
    # ol_result_t olSyncQueue(ol_queue_handle_t);
    "olSyncQueue": (_R, [_q]),
    # ol_result_t olCreateProgram(ol_device_handle_t, const void *ProgData, size_t ProgDataSize,
    #                             ol_program_handle_t *Program);   /* ProgData is copied */
    "olCreateProgram": (_R, [_dev, c_void_p, c_size_t, POINTER(_prog)]),
    # ol_result_t olDestroyProgram(ol_program_handle_t);
    "olDestroyProgram": (_R, [_prog]),
    # ol_result_t olIsValidBinary(ol_device_handle_t, const void *ProgData, size_t ProgDataSize,
    #                             bool *Valid);
    "olIsValidBinary": (_R, [_dev, c_void_p, c_size_t, POINTER(c_bool)]),
    # ol_result_t olGetSymbol(ol_program_handle_t, const char *Name, ol_symbol_kind_t Kind,
    #                         ol_symbol_handle_t *Symbol);     /* owned by the program */
    "olGetSymbol": (_R, [_prog, c_char_p, c_uint32, POINTER(_sym)]),
    # ol_result_t olGetSymbolInfo(ol_symbol_handle_t, ol_symbol_info_t, size_t, void *);
    "olGetSymbolInfo": (_R, [_sym, c_uint32, c_size_t, c_void_p]),
    # ol_result_t olGetSymbolInfoSize(ol_symbol_handle_t, ol_symbol_info_t, size_t *);
    "olGetSymbolInfoSize": (_R, [_sym, c_uint32, POINTER(c_size_t)]),
    # 21 shape: ol_result_t olGetKernel(ol_program_handle_t, const char *KernelName,
    #                                   ol_kernel_handle_t *Kernel);
    "olGetKernel": (_R, [_prog, c_char_p, POINTER(ol_kernel_handle_t)]),
    # ol_result_t olLaunchKernel(ol_queue_handle_t Queue /* NULL: synchronous */,
    #                            ol_device_handle_t Device, ol_symbol_handle_t Kernel,
    #                            const void *ArgumentsData, size_t ArgumentsSize,
    #                            const ol_kernel_launch_size_args_t *LaunchSizeArgs);
    # ArgumentsData: a packed buffer laid out like the kernel's parameter list.
    "olLaunchKernel": (_R, [_q, _dev, _sym, c_void_p, c_size_t, POINTER(KernelLaunchSizeArgs)]),
    # ol_result_t olCalculateOptimalOccupancy(ol_device_handle_t, ol_symbol_handle_t,
    #                                         size_t SharedMemory, size_t *GroupSize);
    "olCalculateOptimalOccupancy": (_R, [_dev, _sym, c_size_t, POINTER(c_size_t)]),
    # ol_result_t olCreateEvent(ol_queue_handle_t, ol_event_handle_t *);
    "olCreateEvent": (_R, [_q, POINTER(ol_event_handle_t)]),
    # ol_result_t olDestroyEvent(ol_event_handle_t);
    "olDestroyEvent": (_R, [ol_event_handle_t]),
    # ol_result_t olSyncEvent(ol_event_handle_t);
    "olSyncEvent": (_R, [ol_event_handle_t]),
    # ol_result_t olWaitEvents(ol_queue_handle_t, ol_event_handle_t *Events, size_t NumEvents);
    "olWaitEvents": (_R, [_q, POINTER(ol_event_handle_t), c_size_t]),
}

#: the 21 shape's differences: the kernel handle type (``ol_kernel_handle_t``)
PROTOTYPES_21 = {
    "olLaunchKernel": (_R, [_q, _dev, ol_kernel_handle_t, c_void_p, c_size_t,
                            POINTER(KernelLaunchSizeArgs)]),
    "olCalculateOptimalOccupancy": (_R, [_dev, ol_kernel_handle_t, c_size_t, POINTER(c_size_t)]),
}


def prototypes(generation: str) -> dict[str, tuple]:
    """The prototype table of ``generation`` (``"liboffload22"`` or ``"liboffload21"``)."""
    if generation == "liboffload21":
        return {**PROTOTYPES, **PROTOTYPES_21}
    return dict(PROTOTYPES)


#: entry points a library must export to be driven as a plugin (besides the symbol lookup)
REQUIRED = ("olInit", "olShutDown", "olIterateDevices", "olGetDeviceInfo",
            "olGetDeviceInfoSize", "olGetPlatformInfo", "olGetPlatformInfoSize",
            "olMemAlloc", "olMemFree", "olMemcpy", "olCreateQueue", "olDestroyQueue",
            "olSyncQueue", "olCreateProgram", "olDestroyProgram", "olLaunchKernel")

#: detected by symbol; absent ones raise MissingEntryPointError when needed
OPTIONAL = ("olIsValidBinary", "olMemRegister", "olMemUnregister", "olMemFill",
            "olGetMemInfo", "olGetSymbolInfo", "olGetSymbolInfoSize",
            "olCalculateOptimalOccupancy", "olCreateEvent", "olDestroyEvent",
            "olSyncEvent", "olWaitEvents")

#: generation -> entry points required on top of REQUIRED
GENERATIONS: dict[str, tuple[str, ...]] = {
    "liboffload22": ("olGetSymbol", "olGetSymbolInfo"),
    "liboffload21": ("olGetKernel",),
}

#: generations this package drives
SUPPORTED = ("liboffload22", "liboffload21")


def all_names() -> tuple[str, ...]:
    """Every entry-point name looked up when a library is classified."""
    return tuple(PROTOTYPES) + ("olGetPlatform", "olGetPlatformCount", "olGetDeviceCount")


def classify(symbols) -> str | None:
    """Generation of a liboffload from its exported names, or None when it is
    not liboffload at all (no ``olMemAlloc``/``olLaunchKernel``).
    ``olGetSymbol`` + ``olGetSymbolInfo`` -> 22 shape; ``olGetKernel`` ->
    21 shape; no ``olInit``/``olIterateDevices`` -> ``liboffload20``."""
    symbols = set(symbols)
    if not {"olMemAlloc", "olLaunchKernel"} & symbols and "olGetPlatformCount" not in symbols:
        return None
    if "olInit" not in symbols or "olIterateDevices" not in symbols:
        return "liboffload20"
    if {"olGetSymbol", "olGetSymbolInfo"} <= symbols:
        return "liboffload22"
    if "olGetKernel" in symbols or "olGetSymbol" in symbols:
        return "liboffload21"
    return None


def missing(symbols, generation: str = "liboffload22") -> list[str]:
    """Required entry points of ``generation`` that ``symbols`` lacks."""
    symbols = set(symbols)
    return [n for n in REQUIRED + GENERATIONS.get(generation, ()) if n not in symbols]


def pack_arguments(values) -> ctypes.Array:
    """The packed argument buffer of ``olLaunchKernel`` for pointer-sized
    arguments: ``len(values) * 8`` bytes, argument i at offset 8 i (each at
    its natural alignment, as a kernel taking ``void *``/``int64_t``
    parameters lays them out).  ``values``: ints, taken modulo 2**64."""
    vals = [int(v) & 0xFFFFFFFFFFFFFFFF for v in values]
    return (ctypes.c_uint64 * max(len(vals), 1))(*vals)


def launch_size(groups: int = 1, group_size: int = 1) -> KernelLaunchSizeArgs:
    """A one-dimensional ``ol_kernel_launch_size_args_t``."""
    ls = KernelLaunchSizeArgs()
    ls.Dimensions = 1
    ls.NumGroups.x, ls.NumGroups.y, ls.NumGroups.z = groups, 1, 1
    ls.GroupSize.x, ls.GroupSize.y, ls.GroupSize.z = group_size, 1, 1
    ls.DynSharedMemory = 0
    return ls


__all__ = ["AllocType", "CodeLocation", "DeviceInfo", "DeviceType", "Dimensions", "Errc",
           "ErrorStruct", "EventInfo", "GENERATIONS", "HEADER", "KernelLaunchSizeArgs",
           "MemInfo", "OPTIONAL", "PROTOTYPES", "PROTOTYPES_21", "PlatformBackend", "PlatformInfo",
           "QueueInfo", "REQUIRED", "SUPPORTED", "SymbolInfo", "SymbolKind", "classify",
           "errc_name", "launch_size", "missing", "prototypes", "ol_device_handle_t",
           "ol_device_iterate_cb_t", "ol_event_handle_t", "ol_kernel_handle_t",
           "ol_platform_handle_t", "ol_program_handle_t", "ol_queue_handle_t",
           "ol_result_t", "ol_symbol_handle_t", "pack_arguments"]
