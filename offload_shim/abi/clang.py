"""What a clang-built program hands libomptarget, per LLVM release (host side of the ABI).

A program or library built with ``clang -fopenmp -fopenmp-targets=...`` registers its
device images with ``__tgt_register_lib(__tgt_bin_desc *)`` and launches kernels with
``__tgt_target_kernel(..., KernelArgsTy *)``.  Three records in that exchange changed
between the LLVM releases people use; this module describes every generation as data
(no ctypes: the records are read as bytes with :mod:`struct`) so the interposer, the
image reader and the docs share one table.

Binary descriptor (``__tgt_bin_desc``, 32 bytes, and ``__tgt_device_image``, 32 bytes):
unchanged from LLVM 12 to 22 -- LLVM 16 ``openmp/libomptarget/include/omptarget.h``;
LLVM 19 and 22 ``offload/include/Shared/APITypes.h`` (22 types the entry pointers as
``llvm::offloading::EntryTy *``).  The device image is an ``OffloadBinary`` (magic
``0x10FF10AD``, version 1 in ``llvm/Object/OffloadBinary.h`` of the Debian
``llvm-16-dev`` 16.0.6, ``llvm-19-dev`` 19.1.7 and ``llvm-22-dev`` 22.1.8 headers) that
wraps an ELF shared object for x86_64 host offloading in all three (verified on the
compilers' output).

Offload entry record (:data:`ENTRY_LAYOUTS`):

=====================  =====  ===================================================
``__tgt_offload_entry``  32 B  ``{void *addr; char *name; size_t size; int32_t flags;
                               int32_t reserved}`` -- LLVM 16-18 (``omptarget.h``);
                               LLVM 19 calls the last field ``data`` and uses it for
                               the ``requires`` flags (entry flag
                               ``OMP_REGISTER_REQUIRES`` = 0x10, replacing
                               ``__tgt_register_requires``: llvm-project PR #80460,
                               Feb 2024).  Section ``omp_offloading_entries``.
``EntryTy`` version 1    56 B  ``{uint64_t Reserved /* 0 */; uint16_t Version /* 1 */;
                               uint16_t Kind; uint32_t Flags; void *Address;
                               char *SymbolName; uint64_t Size; uint64_t Data;
                               void *AuxAddr}`` -- ``llvm::offloading::EntryTy`` in
                               ``llvm/Frontend/Offloading/Utility.h`` (Debian
                               ``llvm-22-dev`` 22.1.8), since LLVM 20 (PR #124018,
                               Jan 2025: "the first 64 bits are reserved as zero so the
                               OpenMP runtime can detect the old format").  ``Kind``
                               is ``object::OffloadKind`` (OpenMP 1, CUDA 2, HIP 4,
                               SYCL 8).  Section ``omp_offloading_entries`` in 20,
                               ``llvm_offload_entries`` from 21 on (PR #125731).
=====================  =====  ===================================================

The Debian ``llvm-19-dev`` 19.1.7 ``Utility.h`` has no ``EntryTy`` yet (19 still emits
``%struct.__tgt_offload_entry = type { ptr, ptr, i64, i32, i32 }``, checked on
clang-19's IR); the 22.1.8 one has the 56-byte record (clang-22 IR:
``type { i64, i16, i16, i32, ptr, ptr, i64, i64, ptr }``).  Entry flags
(``OMPTargetGlobalVarEntryKind`` in ``llvm/Frontend/OpenMP/OMPIRBuilder.h`` of 19.1.7
and 22.1.8): link 0x1, enter 0x2, indirect 0x8, register-requires 0x10, indirect
vtable 0x20 (22); ctor 0x2 / dtor 0x4 in 16's ``omptarget.h``.

Kernel arguments (``KernelArgsTy`` / ``__tgt_kernel_arguments``, :data:`KERNEL_ARGS`):
104 bytes in every version -- ``{u32 Version; u32 NumArgs; void **ArgBasePtrs,
**ArgPtrs; i64 *ArgSizes, *ArgTypes; void **ArgNames, **ArgMappers; u64 Tripcount;
u64 Flags; u32 NumTeams[3], ThreadLimit[3], DynCGroupMem}`` (the IR type is the same
in clang-16.0.6, 19.1.7 and 22.1.8 output).  ``Version`` 2 in LLVM 16-17; 3 from LLVM
18 (``OMP_KERNEL_ARG_VERSION 3`` and ``OMP_KERNEL_ARG_MIN_VERSION_WITH_DYN_PTR 3`` in
``llvm/Frontend/OpenMP/OMPConstants.h`` of 19.1.7 and 22.1.8; PR #70401, Nov 2023):
every kernel takes an implicit first argument ``dyn_ptr`` (the
``KernelLaunchEnvironment``), which the LLVM 19 and 22 host plugins set to
``(void *)~0`` for host kernels (seen in gdb on clang-19/22 programs under their own
libomptarget).  LLVM 16 plugins ignore ``Version`` and pass exactly the arguments they
are given, so a runtime driving them must add that argument itself.  Version 4 (LLVM
23 development, PR #185989, Mar 2026) moves ``dyn_ptr`` to the end and host kernels
take one argument struct (PR #186261): not a layout this runtime can drive.
"""

from __future__ import annotations

import struct
from collections import namedtuple

from ..errors import UnknownLayoutError

# -- entry flags (OMPIRBuilder.h OMPTargetGlobalVarEntryKind; omptarget.h 16) ---------------
OMP_DECLARE_TARGET_LINK = 0x01
OMP_DECLARE_TARGET_CTOR = 0x02      # 16: ctor; 19+: "enter"
OMP_DECLARE_TARGET_DTOR = 0x04
OMP_DECLARE_TARGET_INDIRECT = 0x08
OMP_REGISTER_REQUIRES = 0x10
OMP_DECLARE_TARGET_INDIRECT_VTABLE = 0x20

#: ``object::OffloadKind`` (llvm/Object/OffloadBinary.h 22.1.8): the ``Kind`` of an EntryTy
OFFLOAD_KINDS = {1: "openmp", 2: "cuda", 4: "hip", 8: "sycl"}
OFK_OPENMP = 1

#: ``(void *)~0``: the ``dyn_ptr`` LLVM 19/22 host plugins pass to host kernels
DYN_PTR_HOST = (1 << 64) - 1

BIN_DESC = struct.Struct("<i4xQQQ")         # __tgt_bin_desc, 32 bytes
DEVICE_IMAGE = struct.Struct("<QQQQ")       # __tgt_device_image, 32 bytes


class EntryFields(namedtuple(
        "EntryFields", "addr name_ptr size flags data kind version", defaults=(0, OFK_OPENMP, 0))):
    """One offload entry, whatever its layout: host ``addr``, ``name_ptr`` (address of
    the NUL-terminated name), ``size`` (bytes; 0 = kernel), ``flags``, ``data`` (the
    ``requires`` flags of an ``OMP_REGISTER_REQUIRES`` entry), ``kind``
    (``OFFLOAD_KINDS``; OpenMP for the 32-byte layout) and ``version`` (0 for the
    32-byte layout)."""
    __slots__ = ()

    @property
    def is_requires(self) -> bool:
        return bool(self.flags & OMP_REGISTER_REQUIRES)


class EntryLayout(namedtuple("EntryLayout", "name size releases sections decode problem")):
    """An offload-entry record layout: ``size`` bytes per record, ``releases`` (the
    LLVM releases that emit it), ``sections`` (where the compiler puts the records),
    ``decode(raw) -> EntryFields`` and ``problem(raw, any_version=False) -> str |
    None`` (why a record is not of this layout, None when it fits; ``any_version``: a
    record of another ``Version`` fits too)."""
    __slots__ = ()

    def __repr__(self) -> str:
        return f"<EntryLayout {self.name} ({self.size} bytes, {self.releases})>"


_LEGACY = struct.Struct("<QQQiI")
_ENTRY_V1 = struct.Struct("<QHHIQQQQQ")


def _decode_legacy(raw: bytes) -> EntryFields:
    addr, name, size, flags, data = _LEGACY.unpack(raw)
    return EntryFields(addr, name, size, flags, data)


def _problem_legacy(raw: bytes, any_version: bool = False) -> str | None:
    addr, name, size, flags, data = _LEGACY.unpack(raw)
    if not name:
        return "null name pointer"
    if not addr and not flags & OMP_REGISTER_REQUIRES:
        return "null address"
    if flags < 0 or flags > 0xFF:
        return f"flags {flags:#x}"
    return None


def _decode_v1(raw: bytes) -> EntryFields:
    _res, version, kind, flags, addr, name, size, data, _aux = _ENTRY_V1.unpack(raw)
    return EntryFields(addr, name, size, flags, data, kind, version)


def _problem_v1(raw: bytes, any_version: bool = False) -> str | None:
    res, version, kind, flags, addr, name, size, data, aux = _ENTRY_V1.unpack(raw)
    if res:
        return "Reserved is not 0"
    if version != 1 and not any_version:
        return f"Version {version}"
    if kind not in OFFLOAD_KINDS:
        return f"Kind {kind}"
    if not name:
        return "null name pointer"
    return None


#: ``__tgt_offload_entry`` of LLVM 16-19 (32 bytes)
TGT_OFFLOAD_ENTRY = EntryLayout("__tgt_offload_entry", 32, "LLVM 16-19",
                                ("omp_offloading_entries",), _decode_legacy,
                                _problem_legacy)
#: ``llvm::offloading::EntryTy`` version 1 of LLVM 20-22 (56 bytes)
ENTRY_TY_V1 = EntryLayout("llvm::offloading::EntryTy v1", 56, "LLVM 20-22",
                          ("omp_offloading_entries", "llvm_offload_entries"), _decode_v1,
                          _problem_v1)
#: every known layout, newest first (LLVM 20+ libomptarget also looks at the new one first)
ENTRY_LAYOUTS: tuple[EntryLayout, ...] = (ENTRY_TY_V1, TGT_OFFLOAD_ENTRY)


def detect_entry_layout(table: bytes, where: str = "offload entry table", *,
                        any_version: bool = False) -> EntryLayout:
    """The layout of an entry table given as its raw bytes: the first of
    :data:`ENTRY_LAYOUTS` whose record size divides the table and that every record
    fits.  An empty table is a 16-19 table (nothing to decode).  ``any_version``:
    ``EntryTy`` records of any ``Version`` fit (libomptarget 22.1 reads them whatever
    it says: ``PluginManager::upgradeLegacyEntries`` looks at ``Reserved`` only);
    otherwise only version 1, what clang 20-22 emit.  Raises
    :class:`~offload_shim.errors.UnknownLayoutError` (one line: the size, why each known
    layout does not fit) otherwise."""
    if not table:
        return TGT_OFFLOAD_ENTRY
    why = []
    for layout in ENTRY_LAYOUTS:
        if len(table) % layout.size:
            why.append(f"{layout.name}: {len(table)} bytes is not a multiple of "
                       f"{layout.size}")
            continue
        for k in range(len(table) // layout.size):
            p = layout.problem(table[k * layout.size:(k + 1) * layout.size], any_version)
            if p:
                why.append(f"{layout.name}: record {k}: {p}")
                break
        else:
            return layout
    raise UnknownLayoutError(f"{where} ({len(table)} bytes) is no known offload-entry "
                             f"layout ({'; '.join(why)}): built by a compiler newer than "
                             f"LLVM 22 or corrupt")


# -- kernel arguments ------------------------------------------------------------------------
KERNEL_ARGS_SIZE = 104
KERNEL_ARGS_HEAD = struct.Struct("<II")     # Version, NumArgs


class KernelArgsVersion(namedtuple("KernelArgsVersion", "version releases implicit_dyn_ptr")):
    """One ``KernelArgsTy.Version``: the LLVM ``releases`` that emit it and whether
    every kernel takes the implicit first argument ``dyn_ptr`` (``implicit_dyn_ptr``)."""
    __slots__ = ()


#: ``KernelArgsTy.Version`` -> layout (104 bytes each)
KERNEL_ARGS: dict[int, KernelArgsVersion] = {
    1: KernelArgsVersion(1, "LLVM 16 development snapshots", False),
    2: KernelArgsVersion(2, "LLVM 16-17", False),
    3: KernelArgsVersion(3, "LLVM 18-22", True),
}


def kernel_args_version(version: int) -> KernelArgsVersion:
    """The :class:`KernelArgsVersion` of ``version``; raises UnknownLayoutError for a
    version no supported release emits (4 = LLVM 23 development: ``dyn_ptr`` last,
    one argument struct per host kernel)."""
    kv = KERNEL_ARGS.get(version)
    if kv is None:
        hint = (" (LLVM 23 development: dyn_ptr moved last, host kernels take one "
                "argument struct)") if version == 4 else ""
        raise UnknownLayoutError(f"__tgt_target_kernel: KernelArgsTy version {version}"
                                 f"{hint} is not one of {sorted(KERNEL_ARGS)} "
                                 f"(clang 16-22)")
    return kv


# -- compiler generations ------------------------------------------------------------------
class Generation(namedtuple(
        "Generation", "name layout section device_entry_prefix kernel_args requires runtime")):
    """What one range of clang releases emits for x86_64 (and GPU) offloading: the
    entry ``layout`` and ``section``, the prefix of the entry symbols inside the device
    image (``device_entry_prefix``), the ``KernelArgsTy.Version``, how ``requires``
    reaches the runtime and the runtime library the program links."""
    __slots__ = ()


#: clang releases, oldest first.  16, 19 and 22 verified on Debian's compilers
#: (16.0.6, 19.1.7, 22.1.8); 17, 18, 20, 21 from the llvm-project changes cited above
#: (PR #70116, Oct 2023, renamed the entry symbols ".offloading.entry." for 18).
GENERATIONS: tuple[Generation, ...] = (
    Generation("clang 16-17", TGT_OFFLOAD_ENTRY, "omp_offloading_entries",
               ".omp_offloading.entry.", 2, "__tgt_register_requires(flags)",
               "libomptarget.so.16 / .17"),
    Generation("clang 18", TGT_OFFLOAD_ENTRY, "omp_offloading_entries",
               ".offloading.entry.", 3, "__tgt_register_requires(flags)",
               "libomptarget.so.18.1"),
    Generation("clang 19", TGT_OFFLOAD_ENTRY, "omp_offloading_entries",
               ".offloading.entry.", 3, "entry with flags 0x10, flags in `data`",
               "libomptarget.so.19.1"),
    Generation("clang 20", ENTRY_TY_V1, "omp_offloading_entries",
               ".offloading.entry.", 3, "entry with flags 0x10, flags in `Data`",
               "libomptarget.so.20.1"),
    Generation("clang 21-22", ENTRY_TY_V1, "llvm_offload_entries",
               ".offloading.entry.", 3, "entry \".requires\" with flags 0x10, flags in "
               "`Data`", "libomptarget.so.21.1 / .22.1"),
)


def generations_of(layout: EntryLayout | None = None, *, kernel_args: int | None = None,
                   section: str | None = None, device_entry_prefix: str | None = None,
                   requires_entry: bool | None = None) -> list[Generation]:
    """The generations consistent with what was seen (each argument narrows; None =
    not seen)."""
    out = []
    for g in GENERATIONS:
        if layout is not None and g.layout is not layout:
            continue
        if kernel_args is not None and not (g.kernel_args == kernel_args or
                                            (kernel_args == 1 and g.kernel_args == 2)):
            continue
        if section is not None and g.section != section:
            continue
        if device_entry_prefix is not None and g.device_entry_prefix != device_entry_prefix:
            continue
        if requires_entry and g.requires.startswith("__tgt_register_requires"):
            continue
        out.append(g)
    return out


def describe_generations(gens: list[Generation]) -> str:
    """``"clang 18-19"``-style text for a run of consecutive generations (``"unknown
    compiler"`` when empty)."""
    if not gens:
        return "unknown compiler"
    first = gens[0].name.split()[1].split("-")[0]
    last = gens[-1].name.split()[1].split("-")[-1]
    return f"clang {first}" if first == last else f"clang {first}-{last}"


__all__ = ["BIN_DESC", "DEVICE_IMAGE", "DYN_PTR_HOST", "ENTRY_LAYOUTS", "ENTRY_TY_V1",
           "EntryFields", "EntryLayout", "GENERATIONS", "Generation", "KERNEL_ARGS",
           "KERNEL_ARGS_HEAD", "KERNEL_ARGS_SIZE", "KernelArgsVersion", "OFFLOAD_KINDS",
           "OFK_OPENMP", "OMP_DECLARE_TARGET_CTOR", "OMP_DECLARE_TARGET_DTOR",
           "OMP_DECLARE_TARGET_INDIRECT", "OMP_DECLARE_TARGET_INDIRECT_VTABLE",
           "OMP_DECLARE_TARGET_LINK", "OMP_REGISTER_REQUIRES", "TGT_OFFLOAD_ENTRY",
           "describe_generations", "detect_entry_layout", "generations_of",
           "kernel_args_version"]
