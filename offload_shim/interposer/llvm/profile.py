"""What differs between the libomptarget releases a program can link: one profile each.

A program built by clang 16, 19 or 22 links its own release's ``libomptarget.so``
(16, 19.1, 22.1; the one mapped into the process: :func:`detect`), and must behave
under ``offload-shim run`` exactly as under that runtime.  Everything the interposer
does differently for those releases is a field of :class:`RuntimeProfile`, one
instance per release (:data:`LIBOMPTARGET_16`, :data:`LIBOMPTARGET_19`,
:data:`LIBOMPTARGET_22`); the code of :mod:`.interface`, :mod:`.mapping`,
:mod:`.omptarget`, :mod:`.launch`, :mod:`.api`, :mod:`.rtl` and :mod:`.diag` asks the
profile and never tests a version number itself.  The profile is chosen once, when
the first library registers (:attr:`Interposer.profile
<offload_shim.interposer.llvm.interface.Interposer.profile>`).

Each field's documentation names the upstream source (file and function, the release
whose behaviour it is, the pull request that changed it where known) and how it was
checked: against Debian's libomptarget 16.0.6 and the unpacked 19.1.7 and 22.1.8
(``scripts/setup.sh``), with the programs of ``tests/programs/`` built by each clang
and run as they are.  docs/conformance.md ("libomptarget releases") has the table.
"""

from __future__ import annotations

from ...records import FieldsRepr

#: ``printKernelArguments``' region kinds (the frame kinds of the interposer)
REGION_BEGIN, REGION_END, REGION_UPDATE = 0, 1, 2

#: ``OpenMPOffloadingRequiresDirFlags`` (omptarget.h 16; Shared/Requirements.h 19, 22)
OMP_REQ_UNDEFINED = 0x000
OMP_REQ_NONE = 0x001
OMP_REQ_REVERSE_OFFLOAD = 0x002
OMP_REQ_UNIFIED_ADDRESS = 0x004
OMP_REQ_UNIFIED_SHARED_MEMORY = 0x008
OMP_REQ_DYNAMIC_ALLOCATORS = 0x010

_CLAUSES = {OMP_REQ_REVERSE_OFFLOAD: "reverse_offload",
            OMP_REQ_UNIFIED_ADDRESS: "unified_address",
            OMP_REQ_UNIFIED_SHARED_MEMORY: "unified_shared_memory",
            OMP_REQ_DYNAMIC_ALLOCATORS: "dynamic_allocators"}

_MAX_ALIGNMENT = 16      # omptarget.cpp MaxAlignment (16, 19, 22)

#: ``RuntimeProfile.interop`` values: what ``__tgt_interop_init`` & co. do
INTEROP_FORWARD = "forward"          # 16: the program's libomptarget does it
INTEROP_DEVICE_INFO = "device-info"  # 19.1: the plugin's init_device_info, else none
INTEROP_PREFERENCE = "preference"    # 22.1: the plugin's interop preference, else none


class RuntimeProfile(FieldsRepr):
    """The behaviours of one libomptarget release that the others do not share.

    Immutable once made; compare with ``==``.  The fields, in order (their
    documentation is each member's ``__doc__``)."""

    __slots__ = {
        "release": "The release: ``'16'``, ``'19.1'``, ``'22.1'``.",
        "major": "Its LLVM major version (16, 19, 22).",
        "name":
            "The runtime's name in its lines (``Debug.h`` ``GETNAME(TARGET_NAME)``): "
            "``Libomptarget`` in 16 (``openmp/libomptarget/include/Debug.h``), "
            "``omptarget`` from 19 on (``offload/include/Shared/Debug.h``; the runtime "
            "moved to ``offload/``, llvm-project PR #75125).",
        "devices_when_disabled":
            "``omp_get_num_devices()`` counts the devices under "
            "``OMP_TARGET_OFFLOAD=disabled``: False in 16 (rtl.cpp ``RTLsTy::loadRTLs`` "
            "returns before loading a plugin) and 22.1 (``PluginManager::init`` skips "
            "the plugins), True in 19.1 (``PluginManager::init`` loads them whatever "
            "the policy; seen on Debian 19.1.7).",
        "policy_at_registration":
            "When ``OMP_TARGET_OFFLOAD`` is read (libomp's "
            "``__kmpc_get_target_offload``, which makes libomp read its environment "
            "if it has not yet): True = at the first ``__tgt_register_lib``, before "
            "``main`` for a program (16: rtl.cpp ``RTLsTy::loadRTLs``; 22.1: "
            "``PluginManager::init`` from ``initRuntime``), so a ``setenv`` in "
            "``main`` changes nothing; False = at the first construct (19.1: "
            "``OffloadPolicy::get`` from interface.cpp ``checkDevice``).",
        "invalid_device":
            "What a device number that is neither a device nor the initial device "
            "does at a construct or an API routine: None = 16's answers (a construct "
            "reports ``Device N is not ready.`` and fails through "
            "``handleTargetOutcome``, API routines return their error); otherwise "
            "the text of the one fatal line, ``FATAL_MESSAGE(DeviceNum, ...)`` of "
            "``PluginManager::getDevice``'s error (19.1: ``Device number 'N' out of "
            "range, only M devices available``; 22.1: the error code first, "
            "``\"invalid value\" device number ...``), with ``{dev}`` and ``{n}``.",
        "args_before_device":
            "``LIBOMPTARGET_INFO`` bit 1's argument lines come before the check of "
            "the device number (22.1: interface.cpp ``targetData`` / ``targetKernel`` "
            "print them after ``checkDevice`` and before ``PM->getDevice``, so they "
            "precede the fatal line of a device that does not exist) or after it (16: "
            "after ``checkDeviceAndCtors``; 19.1: after ``PM->getDevice``, seen on "
            "Debian 19.1.7: no argument lines before that fatal line).",
        "region_names":
            "``printKernelArguments``' region names of the data constructs: "
            "``{(kind, nowait): text}`` with kind 0 begin, 1 end, 2 update.  16: "
            "``Entering OpenMP data region``, ``Exiting OpenMP data region``, "
            "``Updating OpenMP data`` (interface.cpp; the nowait forms call the "
            "others); 19.1, 22.1: the name of the entry point, ``Entering OpenMP "
            "data region with being_mapper`` / ``being_nowait_mapper``, ``Exiting "
            "OpenMP data region with end_mapper`` / ``end_nowait_mapper``, "
            "``Updating data within the OpenMP data region with update_mapper`` / "
            "``update_nowait_mapper``.",
        "attach_kind":
            "``printKernelArguments`` names an ``ATTACH`` map ``attach`` (22.1, "
            "llvm-project PR #155509) instead of ``alloc``.",
        "alloc_begin_info":
            "``Creating new map entry`` names ``TgtAllocBegin=`` (the allocation, "
            "before the partial-struct padding) before ``TgtPtrBegin=`` (19.1, "
            "22.1: ``MappingInfoTy::getTargetPointer``; 16 has no such field).",
        "usm_info":
            "``getTargetPointer`` under ``requires unified_shared_memory`` prints "
            "``Return HstPtrBegin 0x... Size=N for unified shared memory`` with INFO "
            "bit 8 (19.1, 22.1: OpenMP/Mapping.cpp "
            "``MappingInfoTy::getTargetPointer``); 16 prints nothing there (device.cpp, "
            "a ``DP`` line).",
        "dump_empty_tables":
            "The mapping-table dump (INFO bit 4 after each construct, "
            "``handleTargetOutcome``) covers every device of the list and prints "
            "``OpenMP Host-Device pointer mappings table empty`` for an empty table "
            "(19.1, 22.1: omptarget.cpp ``handleTargetOutcome`` over "
            "``PM->devices()``, ``dumpTargetPointerMappings``); 16 prints nothing "
            "for an empty table.",
        "exit_dump_descending":
            "The dump at exit (device.cpp ``DeviceTy::~DeviceTy`` with INFO bit 4) "
            "runs over the devices from the last to the first (19.1, 22.1: the "
            "``llvm::SmallVector`` of devices is destroyed from its end); 16 (a "
            "``std::vector``) from the first.",
        "firstprivate_alignment":
            "How ``PrivateArgumentManagerTy::addArg`` packs first-private arguments "
            "of at most 1024 bytes into one buffer: False = 16's ``Size + Size % 8`` "
            "bytes each (omptarget.cpp, LLVM 16); True = 19.1's and 22.1's alignment "
            "rule: each starts after the previous one, padded by ``Required - "
            "Start`` when the host address's alignment (at most 16) exceeds the "
            "alignment left by the previous argument (omptarget.cpp "
            "``PrivateArgumentManagerTy::addArg`` of 19.1 and 22.1); see "
            ":meth:`pack_firstprivate`.",
        "debug_env":
            "``LIBOMPTARGET_DEBUG`` is read with ``std::stoi`` at the first INFO "
            "statement and, when not 0, silences the INFO lines (16, 19.1: "
            "``Debug.h`` ``getDebugLevel``, the ``INFO`` macro); 22.1 does neither "
            "(its debug output was rewritten; Debian's 22.1.8 prints the INFO lines "
            "whatever the variable holds, ``abc`` included).",
        "nextgen_plugins_env":
            "``LIBOMPTARGET_NEXTGEN_PLUGINS`` chooses between the classic and the "
            "nextgen x86_64 plugin (16: rtl.cpp ``RTLsTy::loadRTLs``); 19.1 and 22.1 "
            "have only the nextgen host plugin, linked in (llvm-project PR #87009), "
            "and never read the variable.",
        "use_device_fallback":
            "What ``use_device_ptr`` / ``use_device_addr`` (``RETURN_PARAM`` maps) "
            "give when the look-up fails: ``'null'`` (16, 19.1: ``targetDataBegin`` "
            "returns the failed look-up's NULL) or ``'host'`` (22.1: the original "
            "host address, OpenMP 5.1's rule; llvm-project PR #174659).",
        "requires_from_entries":
            "Where the ``requires`` flags come from: False = "
            "``__tgt_register_requires(flags)`` calls (16: rtl.cpp "
            "``RTLsTy::registerRequires``); True = the requires entries (flag "
            "``OMP_REGISTER_REQUIRES``) of each ``__tgt_bin_desc``'s host entry "
            "table (19.1, 22.1: ``PluginManager::registerLib`` -> "
            "``addRequirements``; llvm-project PR #80460), whose "
            "``__tgt_register_requires`` only prints :attr:`register_requires_message`.",
        "requires_fatal":
            "The consistency rule of later ``requires`` flags against the first: "
            "``(fatal error number, clauses compared)``.  16: ``(1, "
            "reverse_offload, unified_address, unified_shared_memory)``, "
            "``FATAL_MESSAGE0(1, \"'#pragma omp requires X' not used "
            "consistently!\")`` (rtl.cpp ``registerRequires``); 19.1, 22.1: ``(2, "
            "... and dynamic_allocators)``, ``FATAL_MESSAGE(2, ...)`` of "
            "``RequirementCollection::checkConsistency`` (Shared/Requirements.h).  "
            "The first value is kept; a later one that agrees changes nothing.",
        "register_requires_message":
            "The ``MESSAGE`` of ``__tgt_register_requires`` when the release no "
            "longer honours it (19.1, 22.1: ``The void "
            "__tgt_register_requires(int64_t) function has been removed. Old OpenMP "
            "requirements will not be handled``, interface.cpp); None = it sets the "
            "flags (16).",
        "any_entry_version":
            "An ``llvm::offloading::EntryTy`` table is read whatever the records' "
            "``Version`` (22.1: ``PluginManager::upgradeLegacyEntries`` tells the "
            "layouts apart by the first record's ``Reserved`` only, so version 0 "
            "is read as version 1); otherwise only version 1 (what clang 20-22 "
            "emit; 16 and 19.1 read no ``EntryTy`` at all).",
        "mapped_ptr_reports":
            "``omp_get_mapped_ptr`` reports the initial device (``Device N is "
            "initial device, returning Ptr ...``) and a negative device number "
            "(``Device N is not ready, returning nullptr.``) with ``REPORT`` (16, "
            "api.cpp); 19.1 and 22.1 say nothing for the initial device (a ``DP`` "
            "line) and stop on a negative number (:attr:`invalid_device`).",
        "interop":
            "What the interop routines do: :data:`INTEROP_FORWARD` (16: the objects "
            "are made and read by the program's own libomptarget, whose plugin "
            "manager exists from its constructor on; libomp's ``omp_get_interop_*`` "
            "reach that library with ``dlsym(RTLD_NEXT)`` whatever offload_shim "
            "exports), :data:`INTEROP_DEVICE_INFO` (19.1 ``OpenMP/InteropAPI.cpp`` "
            "``__tgt_interop_init``: targetsync waits for the depend clauses, the "
            "device's plugin is asked for its device info -- the LLVM 16 nextgen "
            "plugin prints ``Failure to initialize device info`` -- and the object is "
            "``omp_interop_none``), :data:`INTEROP_PREFERENCE` (22.1 "
            "``__tgt_interop_get``, llvm-project PR #143491, its 5.1 wrappers PR "
            "#161429: nothing under ``disabled``, targetsync waits for its depend "
            "clauses, ``omp_interop_none`` unless the plugin selects a foreign "
            "runtime, which the LLVM 16 plugins cannot).",
        "new_entry_points":
            "Names ``libomptarget.so`` of this release exports that 16's does not "
            "(``nm -D --defined-only``, C++ names left out).",
        "dropped_entry_points":
            "Names 16's ``libomptarget.so.16`` exports that this release does not "
            "(``nm -D --defined-only``).",
        "fixed_upstream":
            "The bugs of this release that lose or corrupt a program's data, that a "
            "later release fixed, and that offload_shim does not reproduce (it "
            "follows the fix for every program): ids of :data:`FIXED_UPSTREAM`, "
            "which names each one's upstream source and fix (16: the partial-struct "
            "padding registered as mapped host memory, omptarget.cpp "
            "``targetDataBegin``; a struct copy over an attached pointer, the shape "
            "of llvm-project PR #70821; an ``always`` copy of a struct whose pointer "
            "member is attached; 19.1: the last two, 22.1: none, it attaches again "
            "after the copy, PR #149036).  Where a construct "
            "meets one of them, ``offload-shim run --report`` counts it under "
            "``fixed_upstream`` (:meth:`~offload_shim.interposer.llvm.mapping."
            "DeviceMapper.note_fixed_upstream`).",
    }

    def __init__(self, **fields):
        missing = [n for n in self.__slots__ if n not in fields]
        extra = [n for n in fields if n not in self.__slots__]
        if missing or extra:
            raise TypeError(f"RuntimeProfile fields: missing {missing}, unknown {extra}")
        for n in self.__slots__:
            object.__setattr__(self, n, fields[n])

    def __setattr__(self, name, value):
        raise AttributeError("RuntimeProfile is immutable")

    _fields = tuple(__slots__)

    def __repr__(self) -> str:
        return f"<RuntimeProfile libomptarget {self.release}>"

    def __hash__(self) -> int:
        return hash(self.release)

    # -- behaviours computed from the fields --------------------------------------------
    def invalid_device_text(self, dev: int, n: int) -> str:
        """The fatal line's text for device number ``dev`` with ``n`` devices
        (:attr:`invalid_device`).  Raises ValueError for 16, which has none."""
        if self.invalid_device is None:
            raise ValueError(f"libomptarget {self.release} has no fatal error for an "
                             f"invalid device number")
        return self.invalid_device.format(dev=dev, n=n)

    def region_name(self, kind: int, nowait: bool = False) -> str:
        """``printKernelArguments``' name of a data construct (``kind`` 0 begin, 1 end,
        2 update; ``nowait``: the ``_nowait`` entry point).  Raises KeyError for
        another kind."""
        return self.region_names[(kind, bool(nowait))]

    def pack_firstprivate(self, args) -> tuple[list[int], int]:
        """Where ``PrivateArgumentManagerTy`` puts packed first-private arguments:
        ``args`` are ``(host address, size in bytes)`` in argument order; returns
        (byte offset of each in the buffer, buffer size in bytes).

        16: each takes ``Size + Size % 8`` bytes (not a multiple of 8 in general).
        19.1, 22.1 (:attr:`firstprivate_alignment`): the first starts at 0 with
        alignment 16; each next one starts after the previous one's bytes; the
        alignment left there is the previous alignment, or ``previous size %
        previous alignment`` when that is not 0; when the host address's alignment
        (lowest set bit, at most 16, ``getPartialStructRequiredAlignment``) is
        larger, ``Required - Start`` padding bytes come first -- which does not
        always align the argument, as upstream (``addArg``)."""
        offsets: list[int] = []
        total = 0
        if not self.firstprivate_alignment:
            for _hp, size in args:
                offsets.append(total)
                total += size + size % 8
            return offsets, total
        prev_align = prev_size = None
        for hp, size in args:
            padding = 0
            align = _MAX_ALIGNMENT
            if prev_align is not None:
                align = prev_align
                rest = prev_size % align
                if rest:
                    align = rest
                low = hp & -hp if hp else 1 << 63
                required = min(_MAX_ALIGNMENT, low)
                if required > align:
                    padding = required - align
                    align = required
            total += padding
            offsets.append(total)
            total += size
            prev_align, prev_size = align, size
        return offsets, total

    def requires_conflict(self, set_flags: int, new_flags: int) -> tuple[int, str] | None:
        """``(fatal error number, message)`` when ``new_flags`` disagree with the
        ``requires`` flags already set (``set_flags``) on a clause the release compares
        (:attr:`requires_fatal`; the first clause that differs), else None."""
        num, clauses = self.requires_fatal
        for bit in clauses:
            if (set_flags & bit) != (new_flags & bit):
                return num, (f"'#pragma omp requires {_CLAUSES[bit]}' not used "
                             f"consistently!")
        return None

    def accepts_entry_version(self, version: int) -> bool:
        """Whether an ``EntryTy`` record of ``version`` is read
        (:attr:`any_entry_version`)."""
        return self.any_entry_version or version == 1


class FixedUpstream(FieldsRepr):
    """One data-losing bug of a libomptarget release that a later release fixed:
    ``id`` (short, stable: the key of :data:`FIXED_UPSTREAM` and of the
    ``fixed_upstream`` counts of ``offload-shim run --report``), ``what`` (what the
    buggy release does and what the program loses), ``fix`` (where upstream fixed it:
    pull request, release, file and function) and ``program`` (the conformance
    program of tests/programs/ that shows it)."""
    _fields = ("id", "what", "fix", "program")
    __slots__ = _fields

    def __init__(self, id: str, what: str, fix: str, program: str) -> None:
        self.id, self.what, self.fix, self.program = id, what, fix, program

    def label(self) -> str:
        """``"known: fixed upstream (ID: FIX)"``, the words ``offload-shim compare``
        gives a difference this bug explains."""
        return f"known: fixed upstream ({self.id}: {self.fix})"


#: the data-losing bugs offload_shim does not reproduce, by id (docs/conformance.md
#: "Fixed upstream: where offload_shim follows the fix"); each profile's
#: :attr:`RuntimeProfile.fixed_upstream` names those of its release
FIXED_UPSTREAM: dict[str, FixedUpstream] = {f.id: f for f in (
    FixedUpstream(
        "partial-struct-padding",
        "the alignment padding before the combined entry of a partially mapped struct "
        "is registered as mapped host memory (targetDataBegin moves HstPtrBegin back "
        "by the padding): an unmapped member inside the padding is found present, "
        "never copied either way -- the region reads device garbage, its writes are "
        "lost (and omp_target_is_present says 1)",
        "after LLVM 16 (19.1 has it): omptarget.cpp targetDataBegin keeps the padding "
        "on the device side only (TgtPadding passed to getTargetPointer); upstream "
        "test openmp/libomptarget/test/mapping/padding_not_mapped.c",
        "fixed_upstream_padding.c"),
    FixedUpstream(
        "struct-copy-over-attached-pointer",
        "the first copy to the device of a struct whose pointer member is attached "
        "(clang 16 copies the struct's members after attaching the pointer for "
        "map(to: s.p[:n]) map(to: s), the shape of llvm-project PR #70821; a declare "
        "mapper's struct component, always or not, is copied again while the "
        "struct's count is 1) "
        "writes the host pointer over the attached device pointer and it is not "
        "attached again: the region writes through the host address and the writes "
        "to the pointee are lost",
        "clang codegen PR #75642 (LLVM 18) copies the struct before attaching (the "
        "runtime attempt PR #70821 was closed); libomptarget 22 attaches again after "
        "the copy (ATTACH map type, PR #149036)",
        "fixed_upstream_struct_copy.c"),
    FixedUpstream(
        "always-pointer-member-reattach",
        "map(always, to: s) of a struct whose pointer member is attached to a mapped "
        "pointee copies the host pointer over the attached device pointer and does "
        "not attach it again: the region writes through the host address and the "
        "writes to the pointee are lost (through a declare mapper the struct "
        "component carries no always bit: struct-copy-over-attached-pointer)",
        "libomptarget 22 re-attaches after the copy (ATTACH map type, llvm-project "
        "PR #149036; clang PR #153683)",
        "fixed_upstream_always.c"),
    FixedUpstream(
        "usm-attach-over-host-pointer",
        "under requires unified_shared_memory, a pointer-and-object entry whose pointee "
        "section is zero-length (map(to: s) map(tofrom: s.p[1:0])) has no device copy, "
        "and targetDataBegin attaches anyway: 16 writes the absent pointee's address "
        "minus the section's offset into the pointer's 'device copy', which under "
        "unified shared memory is the host's own pointer (the program's s.p becomes "
        "garbage); 19.1 crashes there (the shadow pointer of an entry that does not "
        "exist)",
        "libomptarget 22 attaches only when pointer and pointee both have device "
        "copies that are not host pointers (omptarget.cpp processAttachEntries, ATTACH "
        "map type, llvm-project PR #149036; clang PR #153683 emits it)",
        "fixed_upstream_usm_attach.c"),
)}

_REGIONS_16 = {(0, False): "Entering OpenMP data region",
               (0, True): "Entering OpenMP data region",
               (1, False): "Exiting OpenMP data region",
               (1, True): "Exiting OpenMP data region",
               (2, False): "Updating OpenMP data",
               (2, True): "Updating OpenMP data"}
_REGIONS_19 = {(0, False): "Entering OpenMP data region with being_mapper",
               (0, True): "Entering OpenMP data region with being_nowait_mapper",
               (1, False): "Exiting OpenMP data region with end_mapper",
               (1, True): "Exiting OpenMP data region with end_nowait_mapper",
               (2, False): "Updating data within the OpenMP data region with update_mapper",
               (2, True): "Updating data within the OpenMP data region with "
                          "update_nowait_mapper"}

_REQ_16 = (1, (OMP_REQ_REVERSE_OFFLOAD, OMP_REQ_UNIFIED_ADDRESS,
               OMP_REQ_UNIFIED_SHARED_MEMORY))
_REQ_19 = (2, (OMP_REQ_REVERSE_OFFLOAD, OMP_REQ_UNIFIED_ADDRESS,
               OMP_REQ_UNIFIED_SHARED_MEMORY, OMP_REQ_DYNAMIC_ALLOCATORS))
_REQ_REMOVED = ("The void __tgt_register_requires(int64_t) function has been removed. "
                "Old OpenMP requirements will not be handled")

_NEW_19 = frozenset({"__tgt_activate_record_replay", "__tgt_rtl_init", "__tgt_rtl_deinit",
                     "omp_target_memcpy_async", "omp_target_memcpy_rect_async",
                     "omp_target_memset", "omp_target_memset_async",
                     "ompt_libomptarget_connect", "ompx_dump_mapping_tables"})
_NEW_22 = (_NEW_19 - {"ompt_libomptarget_connect"}) | frozenset({
    "__llvmPopCallConfiguration", "__llvmPushCallConfiguration", "__tgt_interop_get",
    "__tgt_interop_release", "__tgt_interop_use60", "__tgt_target_sync",
    "llvmLaunchKernel", "omp_get_device_from_uid", "omp_get_uid_from_device",
    "omp_target_is_accessible", "ompx_interop_add_completion_callback"})

#: Debian ``libomp5-16`` 16.0.6
LIBOMPTARGET_16 = RuntimeProfile(
    release="16", major=16, name="Libomptarget", devices_when_disabled=False,
    policy_at_registration=True, invalid_device=None, args_before_device=False,
    region_names=_REGIONS_16, attach_kind=False, alloc_begin_info=False, usm_info=False,
    dump_empty_tables=False, exit_dump_descending=False, firstprivate_alignment=False,
    debug_env=True, nextgen_plugins_env=True, use_device_fallback="null",
    requires_from_entries=False, requires_fatal=_REQ_16, register_requires_message=None,
    any_entry_version=False, mapped_ptr_reports=True, interop=INTEROP_FORWARD,
    new_entry_points=frozenset(),
    dropped_entry_points=frozenset(),
    fixed_upstream=("partial-struct-padding", "struct-copy-over-attached-pointer",
                    "always-pointer-member-reattach", "usm-attach-over-host-pointer"))

#: ``libomp5-19`` / ``libomp-19-dev`` 19.1.7 (unpacked into .cache/llvm19)
LIBOMPTARGET_19 = RuntimeProfile(
    release="19.1", major=19, name="omptarget", devices_when_disabled=True,
    policy_at_registration=False,
    invalid_device="Device number '{dev}' out of range, only {n} devices available",
    args_before_device=False, region_names=_REGIONS_19, attach_kind=False,
    alloc_begin_info=True, usm_info=True, dump_empty_tables=True,
    exit_dump_descending=True, firstprivate_alignment=True, debug_env=True,
    nextgen_plugins_env=False, use_device_fallback="null", requires_from_entries=True,
    requires_fatal=_REQ_19, register_requires_message=_REQ_REMOVED,
    any_entry_version=False, mapped_ptr_reports=False, interop=INTEROP_DEVICE_INFO,
    new_entry_points=_NEW_19,
    dropped_entry_points=frozenset(),
    fixed_upstream=("struct-copy-over-attached-pointer",
                    "always-pointer-member-reattach", "usm-attach-over-host-pointer"))

#: ``libomp-22-dev`` / ``liboffload-22`` 22.1.8 (unpacked into .cache/liboffload22)
LIBOMPTARGET_22 = RuntimeProfile(
    release="22.1", major=22, name="omptarget", devices_when_disabled=False,
    policy_at_registration=True,
    invalid_device='"invalid value" device number \'{dev}\' out of range, only {n} '
                   'devices available',
    args_before_device=True, region_names=_REGIONS_19, attach_kind=True,
    alloc_begin_info=True, usm_info=True, dump_empty_tables=True,
    exit_dump_descending=True, firstprivate_alignment=True, debug_env=False,
    nextgen_plugins_env=False, use_device_fallback="host", requires_from_entries=True,
    requires_fatal=_REQ_19, register_requires_message=_REQ_REMOVED,
    any_entry_version=True, mapped_ptr_reports=False, interop=INTEROP_PREFERENCE,
    new_entry_points=_NEW_22,
    dropped_entry_points=frozenset(),
    fixed_upstream=())

#: every profile, oldest first
PROFILES: tuple[RuntimeProfile, ...] = (LIBOMPTARGET_16, LIBOMPTARGET_19, LIBOMPTARGET_22)


def profile_for(major: int) -> RuntimeProfile:
    """The profile of libomptarget ``major``: 16, 19 and 22 are the tested ones; a
    release between them gets the newest profile not newer than it (17, 18 -> 16; 20,
    21 -> 19), one after 22 gets 22's (untested).  Raises ValueError for a major
    below 16 or not an int."""
    if not isinstance(major, int) or isinstance(major, bool):
        raise ValueError(f"an LLVM major version is an int, not {major!r}")
    if major < 16:
        raise ValueError(f"libomptarget {major} is older than the oldest profile (16)")
    best = PROFILES[0]
    for p in PROFILES:
        if p.major <= major:
            best = p
    return best


def detect(addr: int | None = None) -> RuntimeProfile:
    """The profile of the libomptarget the code at ``addr`` links: the
    ``libomptarget.so.N`` its loaded object names in ``DT_NEEDED``
    (:func:`offload_shim.abi.interposer.libomptarget_needed_by`; a registering
    library's ``__tgt_bin_desc`` lies in it); without ``addr``, or when that object
    names none, the ``libomptarget.so.N`` mapped into the process (the newest when
    several are, :func:`offload_shim.abi.interposer.loaded_libomptarget`); 16's when
    none is."""
    from ...abi import interposer as _abi
    major = _abi.libomptarget_needed_by(addr) if addr else None
    if major is None:
        found = _abi.loaded_libomptarget()
        major = found[0] if found else None
    if major is None or major < 16:
        return LIBOMPTARGET_16
    return profile_for(major)


__all__ = ["FIXED_UPSTREAM", "FixedUpstream", "INTEROP_DEVICE_INFO", "INTEROP_FORWARD", "INTEROP_PREFERENCE", "LIBOMPTARGET_16", "LIBOMPTARGET_19", "LIBOMPTARGET_22", "OMP_REQ_DYNAMIC_ALLOCATORS",
           "OMP_REQ_NONE", "OMP_REQ_REVERSE_OFFLOAD", "OMP_REQ_UNDEFINED",
           "OMP_REQ_UNIFIED_ADDRESS", "OMP_REQ_UNIFIED_SHARED_MEMORY", "PROFILES",
           "REGION_BEGIN", "REGION_END", "REGION_UPDATE", "RuntimeProfile", "detect",
           "profile_for"]
