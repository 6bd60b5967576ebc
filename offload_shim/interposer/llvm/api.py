"""The OpenMP device memory routines and LLVM's extensions.

Mirrors libomptarget 16 ``api.cpp`` (and ``targetAllocExplicit`` /
``targetFreeExplicit`` / ``targetLockExplicit`` of ``omptarget.cpp``):
``omp_target_alloc`` and ``llvm_omp_target_alloc_{device,host,shared}`` (the initial
device uses ``malloc``; a size of 0 or a device that is not ready gives NULL; device
memory from :meth:`Device.alloc`), the frees, ``omp_target_memcpy`` between any two of
host and devices (invalid arguments and devices are reported), ``omp_target_is_present``
and ``omp_get_mapped_ptr`` (a 1-byte lookup), ``omp_target_associate_ptr`` /
``omp_target_disassociate_ptr``, ``llvm_omp_target_lock_mem`` / ``unlock_mem`` (the
plugin's ``data_lock``), ``__tgt_print_device_info`` and ``__tgt_set_info_flag``.
``omp_target_memcpy_rect`` and ``omp_get_device_num`` are done in C
(native/interposer.c) on top of these.  Each routine takes ``ip``, the
:class:`~offload_shim.interposer.llvm.interface.Interposer`, and returns the C value.

The routines libomptarget 19.1 and 22.1 added (native/interposer_api.c): the
asynchronous copies and fills are libomp tasks in C around the routines above;
``omp_target_is_accessible``, the device UIDs, ``ompx_dump_mapping_tables``,
``__tgt_activate_record_replay`` and the interop routines are answered here, as the
release the program links answers where releases differ (:mod:`.profile`).
"""

from __future__ import annotations

import sys

from ...abi import interposer as _abi
from ...abi.interposer import CB_FAIL, CB_OK
from ...errors import OffloadError
from . import diag
from . import profile as _prof
from .mapping import TGT_DISABLED

#: Exports of libomptarget 16, 19.1 and 22.1 (``nm -D --defined-only``) that offload_shim
#: does not define, on purpose: name -> reason (docs/conformance.md).  Every other export
#: of the three is defined by libosh_interposer.so under the same version node
#: (tests/test_conformance_api.py checks both).
FORWARDED = {
    name: ("OpenMP 5.1 interop properties: libomp's omp_get_interop_* look the routine up "
           "with dlsym(RTLD_NEXT), which never finds the preloaded interposer, so the "
           "program's own libomptarget answers whatever is exported here; its getters "
           "read only the object, never the plugin manager, so they answer as in the "
           "reference run: libomptarget 16 made the object (the interposer forwards "
           "__tgt_interop_init there), 19.1 / 22.1 get omp_interop_none as from their "
           "own host plugin (22.1's getters dereference it, as there)")
    for name in ("omp_get_interop_int", "omp_get_interop_name", "omp_get_interop_ptr",
                 "omp_get_interop_str", "omp_get_interop_type_desc")}

OMP_INVALID_DEVICE = -2          # omp.h omp_invalid_device (OpenMP 6.0)
OMP_INITIAL_DEVICE = -1          # omp.h omp_initial_device (OpenMP 6.0)
HOST_UID = b"HOST"               # GenericPluginTy::getHostDeviceUid (22.1)
OMP_IRC_OTHER = -6               # omp_interop_rc_t omp_irc_other
#: the UID prefix of a device of each LLVM plugin family (22.1 GenericPluginTy::getName:
#: ``<name>-<vendor UID>``, llvm-project PR #164391); the bundled host plugin is offload_shim's
_UID_FAMILY = {"x86_64": "x86_64", "cuda": "CUDA", "amdgpu": "AMDGPU",
               "osh_hostplugin": "osh_host"}

TARGET_ALLOC_DEVICE, TARGET_ALLOC_HOST, TARGET_ALLOC_SHARED, TARGET_ALLOC_DEFAULT = range(4)
OFFLOAD_FAIL = -1


def target_alloc(ip, size: int, dev_id: int, kind: int, out) -> int:
    """``targetAllocExplicit``: the pointer goes to ``out[0]`` (NULL on failure).
    libomptarget 19+ stops the program on an invalid device number
    (:meth:`Interposer.check_device_number`)."""
    ip.check_device_number(dev_id)
    out[0] = None
    if size <= 0:
        return CB_OK
    if dev_id == ip.num_devices():
        out[0] = _abi.malloc(size) or None
        return CB_OK
    if not ip.device_ready(dev_id):
        return CB_OK
    try:
        out[0] = ip.devices[dev_id].alloc(int(size)) or None
    except OffloadError as exc:
        ip.errors.append(f"alloc({size}) on device {dev_id}: {exc}")
    return CB_OK


def target_free(ip, ptr: int, dev_id: int, kind: int) -> int:
    """``targetFreeExplicit`` (NULL: nothing; a device that is not ready: nothing)."""
    if not ptr:
        return CB_OK
    ip.check_device_number(dev_id)
    if dev_id == ip.num_devices():
        _abi.free(ptr)
        return CB_OK
    if not ip.device_ready(dev_id):
        return CB_OK
    try:
        ip.devices[dev_id].free(ptr)
    except OffloadError as exc:
        ip.errors.append(f"free({ptr:#x}) on device {dev_id}: {exc}")
    return CB_OK


def target_memcpy(ip, dst, src, length, dst_off, src_off, dst_dev, src_dev) -> int:
    """``omp_target_memcpy``: ``length`` bytes from ``src + src_off`` on ``src_dev``
    to ``dst + dst_off`` on ``dst_dev`` (0, or -1 with libomptarget's report)."""
    if not dst or not src or length <= 0:
        if length == 0:
            return CB_OK
        diag.report("Call to omp_target_memcpy with invalid arguments")
        return CB_FAIL
    ip.check_device_number(dst_dev)
    ip.check_device_number(src_dev)
    host = ip.num_devices()
    for d in (src_dev, dst_dev):
        if d != host and not ip.device_ready(d):
            diag.report("omp_target_memcpy returns OFFLOAD_FAIL")
            return CB_FAIL
    d, s = dst + dst_off, src + src_off
    try:
        if src_dev == host and dst_dev == host:
            _abi.host_memmove(d, s, length)
        elif src_dev == host:
            ip.mapper(dst_dev).submit(d, s, length)
        elif dst_dev == host:
            ip.mapper(src_dev).retrieve(d, s, length)
        else:
            tmp = _abi.HostBuffer(length)
            ip.mapper(src_dev).retrieve(tmp.address, s, length)
            ip.mapper(dst_dev).submit(d, tmp.address, length)
    except OffloadError as exc:
        ip.errors.append(f"omp_target_memcpy: {exc}")
        return CB_FAIL
    return CB_OK


def target_is_present(ip, ptr: int, dev_id: int) -> int:
    """``omp_target_is_present(ptr, dev_id)``: 1 or 0 (fatal for an invalid device
    number under libomptarget 19+, :meth:`Interposer.check_device_number`)."""
    if not ptr:
        return 0
    ip.check_device_number(dev_id)
    n = ip.num_devices()
    if dev_id == n:
        return 1
    if not 0 <= dev_id < n:
        return 0
    return 1 if ip.mapper(dev_id).is_present(ptr) else 0


def _association_device(ip, dev: int, routine: str) -> bool:
    """Whether device ``dev`` can take an association of ``routine``
    (``omp_target_associate_ptr`` / ``omp_target_disassociate_ptr``, LLVM 16 api.cpp):
    not the initial device, and ready; otherwise False after libomptarget's report."""
    if dev == ip.num_devices():
        diag.report(f"{routine}: no association possible on the host")
        return False
    if not ip.device_ready(dev):
        diag.report(f"{routine} returns OFFLOAD_FAIL")
        return False
    return True


def associate(ip, host: int, dptr: int, size: int, offset: int, dev: int) -> int:
    """``omp_target_associate_ptr``: 0 or -1 (reported)."""
    if not host or not dptr or size <= 0:
        diag.report("Call to omp_target_associate_ptr with invalid arguments")
        return OFFLOAD_FAIL
    if not _association_device(ip, dev, "omp_target_associate_ptr"):
        return OFFLOAD_FAIL
    return 0 if ip.mapper(dev).associate(host, dptr + offset, size) else OFFLOAD_FAIL


def disassociate(ip, host: int, dev: int) -> int:
    """``omp_target_disassociate_ptr``: 0 or -1 (reported)."""
    if not host:
        diag.report("Call to omp_target_associate_ptr with invalid host_ptr")
        return OFFLOAD_FAIL
    if not _association_device(ip, dev, "omp_target_disassociate_ptr"):
        return OFFLOAD_FAIL
    return 0 if ip.mapper(dev).disassociate(host) else OFFLOAD_FAIL


def mapped_ptr(ip, ptr: int, dev: int) -> int:
    """``omp_get_mapped_ptr``: the device address of mapped data, the pointer itself
    on the initial device, else NULL.  A device number at or above the number of
    devices gives NULL silently.  LLVM 16 api.cpp reports the initial device and a
    number below 0 (as not ready); 19.1 and 22.1 say nothing for the initial device
    and stop the program on a number below 0 (``RuntimeProfile.mapped_ptr_reports``,
    :meth:`Interposer.check_device_number`)."""
    if not ptr:
        diag.report("Call to omp_get_mapped_ptr with nullptr.")
        return 0
    reports = ip.profile.mapped_ptr_reports
    if dev == ip.num_devices():
        if reports:
            diag.report(f"Device {dev} is initial device, returning Ptr {diag.ptr(ptr)}.")
        return ptr
    if dev >= len(ip.devices):              # DevicesSize <= DeviceNum: silent
        return 0
    if not reports:
        ip.check_device_number(dev)
    if not ip.device_ready(dev):            # a negative number is "not ready"
        diag.report(f"Device {dev} is not ready, returning nullptr.")
        return 0
    tpr = ip.mapper(dev).get_tgt_ptr_begin(ptr, 1)
    return tpr.tgt if tpr.present else 0


def lock_mem(ip, ptr: int, size: int, dev: int) -> int:
    """``llvm_omp_target_lock_mem``: the plugin's ``data_lock`` (NULL when it has none
    or fails)."""
    if size <= 0 or not ip.device_ready(dev):
        return 0
    d = ip.devices[dev]
    if not d.plugin.has("data_lock"):
        return 0
    try:
        return d.plugin.lock(d.index, ptr, size)
    except OffloadError:
        return 0


def unlock_mem(ip, ptr: int, dev: int) -> int:
    """``llvm_omp_target_unlock_mem``."""
    if 0 <= dev < len(ip.devices):
        d = ip.devices[dev]
        if d.plugin.has("data_unlock") and d.initialized:
            try:
                d.plugin.unlock(d.index, ptr)
            except OffloadError:
                pass
    return 0


def print_device_info(ip, dev: int) -> int:
    """``__tgt_print_device_info``: the plugin prints; 1 when it can."""
    if not 0 <= dev < len(ip.devices):
        return 0
    d = ip.devices[dev]
    if not d.plugin.has("print_device_info"):
        return 0
    d.plugin.print_device_info(d.index)
    return 1


def set_info_flag(ip, flag: int) -> int:
    """``__tgt_set_info_flag``: the INFO mask here and in every plugin."""
    diag.set_info_level(flag)
    ip.fast.invalidate()                    # the cheap path prints no trace
    for p in ip.runtime.plugins:
        if p.has("set_info_flag"):
            p.entry_point("set_info_flag")(flag & 0xFFFFFFFF)
    return 0


def is_accessible(ip, ptr: int, size: int, dev: int) -> int:
    """``omp_target_is_accessible(ptr, size, dev)`` (OpenMP 5.1; libomptarget 22.1
    ``OpenMP/API.cpp``, llvm-project PR #138294, as the 22.1.8 build does it): 0 for
    NULL whatever ``dev`` is; 1 on the initial device, named by its number or by
    ``omp_initial_device`` (-1); the fatal error of
    :meth:`Interposer.check_device_number` for a number that is no device; else the
    device's answer whether it can reach ``[ptr, ptr + size)`` -- 0: 22.1's own x86_64
    host plugin answers 0 for any memory (its own included, also under ``requires
    unified_shared_memory``), and the LLVM 16 plugins have no such query."""
    if not ptr:
        return 0
    if dev in (ip.num_devices(), OMP_INITIAL_DEVICE):
        return 1
    ip.check_device_number(dev)
    return 0


def device_uid(ip, num: int) -> bytes:
    """The UID of OpenMP device ``num`` (``0 <= num < len(ip.devices)``):
    ``<family>-<plugin device index>`` as libomptarget 22.1 names its devices
    (``x86_64-0``: ``GenericPluginTy::getName() + "-" + vendor UID``, the host plugin's
    vendor UID being the device index).  The LLVM 16 plugins report no vendor UID (22.1's
    CUDA / AMDGPU plugins use the device's UUID), so the index stands in; the k-th
    further plugin of the same family is ``<family>.<k>`` (``x86_64.1-0``) so that every
    device's UID is its own.  Raises IndexError for a number that is no device."""
    if not 0 <= num < len(ip.devices):
        raise IndexError(f"no device {num} (the list has {len(ip.devices)})")
    seen: dict[str, list] = {}                  # family -> its plugins, in device order
    for d in ip.devices[:num + 1]:
        fam = _UID_FAMILY.get(d.plugin.name.split(".")[0], d.plugin.name)
        plugins = seen.setdefault(fam, [])
        if not any(p is d.plugin for p in plugins):
            plugins.append(d.plugin)
    d = ip.devices[num]
    fam = _UID_FAMILY.get(d.plugin.name.split(".")[0], d.plugin.name)
    k = next(i for i, p in enumerate(seen[fam]) if p is d.plugin)
    return f"{fam if k == 0 else f'{fam}.{k}'}-{d.index}".encode()


def uid_from_device(ip, dev: int) -> int:
    """``omp_get_uid_from_device(dev)`` (OpenMP 6.0; libomptarget 22.1, llvm-project PR
    #164392): NULL for ``omp_invalid_device``, ``"HOST"`` for the initial device, the
    fatal error for a number that is no device, else :func:`device_uid`.  Returns the
    address of a ``malloc``'ed copy (the C side keeps one per text for the process) or
    0 for NULL."""
    if dev == OMP_INVALID_DEVICE:
        return 0
    n = ip.num_devices()
    if dev == n:
        return _abi.c_string_copy(HOST_UID)
    ip.check_device_number(dev)
    if not 0 <= dev < n:
        return 0
    return _abi.c_string_copy(device_uid(ip, dev))


def device_from_uid(ip, uid_addr: int) -> int:
    """``omp_get_device_from_uid(uid)``: ``omp_invalid_device`` for NULL or a UID no
    device has, the initial device for ``"HOST"``, else the first device whose
    :func:`device_uid` it is (22.1 walks its device list: none under
    ``OMP_TARGET_OFFLOAD=disabled``)."""
    if not uid_addr:
        return OMP_INVALID_DEVICE
    text = _abi.read_cstring(uid_addr)
    n = ip.num_devices()
    if text == HOST_UID:
        return n
    for num in range(min(n, len(ip.devices))):
        if device_uid(ip, num) == text:
            return num
    return OMP_INVALID_DEVICE


def dump_tables(ip) -> int:
    """``ompx_dump_mapping_tables()`` (libomptarget 19.1 / 22.1 ``OpenMP/API.cpp``:
    ``dumpTargetPointerMappings(&Loc, Device, /*toStdOut=*/true)`` for every device,
    whatever ``LIBOMPTARGET_INFO`` says): ``<runtime> device N info: ...`` lines, the
    table's rows (:meth:`DeviceMapper.table_lines`) or ``OpenMP Host-Device pointer
    mappings table empty``.  Returns a ``malloc``'ed text the C side prints into the
    program's stdout buffer and frees (0 when there is no device)."""
    si = diag.SourceInfo(";libomptarget;libomptarget;0;0;;")
    name = diag.runtime_name()
    out = []
    for num in range(min(ip.num_devices(), len(ip.devices))):
        rows = ip.mapper(num).table_lines(si) if ip.has_mapper(num) else []
        for text in rows or ["OpenMP Host-Device pointer mappings table empty"]:
            out.append(f"{name} device {num} info: {text}\n")
    return _abi.c_string_copy("".join(out).encode()) if out else 0


def record_replay(ip, dev: int, memory_size: int, is_record: int, save_output: int) -> int:
    """``__tgt_activate_record_replay`` (libomptarget 19.1 / 22.1 ``interface.cpp``, the
    llvm-omp-kernel-replay tool's hook): the device number as ``PM->getDevice`` takes
    it (fatal for anything but a device, the initial device included), then the
    plugin would set up recording -- the LLVM 16 plugins cannot, which offload_shim
    says in one line; returns 0 (``OMP_TGT_SUCCESS``) as those releases do whatever
    the plugin answered (their check is an assert)."""
    ip.check_device_number(dev, initial_ok=False)
    what = "record" if is_record else "replay"
    sys.stderr.write(f"offload_shim: kernel record-replay is not supported: the LLVM 16 "
                     f"plugins cannot {what} (__tgt_activate_record_replay, "
                     f"{memory_size} bytes, device {dev})\n")
    sys.stderr.flush()
    return 0


def _interop_get22(ip, targetsync: int, ndeps: int) -> int:
    """libomptarget 22.1 ``__tgt_interop_get``: nothing under a disabled policy (the
    default one without devices included: ``OffloadPolicy``), else wait for the depend
    clauses of a targetsync request; the object is ``omp_interop_none`` (the LLVM 16
    plugins select no foreign runtime, as 22.1's own x86_64 host plugin)."""
    if ip.policy() == TGT_DISABLED:
        return 0
    return _abi.IOP_WAIT if targetsync and ndeps else 0


def interop(ip, op: int, targetsync: int, dev: int, ndeps: int) -> int:
    """The interop routines (native/interposer_api.c): for ``__tgt_interop_init`` /
    ``_use`` / ``_destroy`` and 22.1's ``__tgt_interop_get`` the plan of the C side
    (bits ``IOP_FORWARD``: the program's libomptarget does it; ``IOP_WAIT``: wait for
    the depend clauses; ``IOP_DEVICE_INFO``: ask the plugin for its device info), by
    ``RuntimeProfile.interop`` of the program's runtime; ``IOP_OP_DEVICE_INFO`` asks the
    plugin; 22.1's ``__tgt_interop_use60`` / ``_release`` answer ``OFFLOAD_FAIL`` and
    ``ompx_interop_add_completion_callback`` ``omp_irc_other`` (22.1's answers for
    ``omp_interop_none``, the only object offload_shim makes).  Raises ValueError for
    an unknown ``op``."""
    kind = ip.profile.interop
    if op == _abi.IOP_OP_INIT:
        if kind == _prof.INTEROP_FORWARD:
            return _abi.IOP_FORWARD
        if kind == _prof.INTEROP_DEVICE_INFO:
            plan = _abi.IOP_WAIT if targetsync else 0
            if 0 <= dev < ip.num_devices():
                plan |= _abi.IOP_DEVICE_INFO
            return plan
        return _interop_get22(ip, targetsync, ndeps)
    if op == _abi.IOP_OP_GET:
        return _interop_get22(ip, targetsync, ndeps)
    if op in (_abi.IOP_OP_USE, _abi.IOP_OP_DESTROY):
        return _abi.IOP_FORWARD if kind == _prof.INTEROP_FORWARD else 0
    if op == _abi.IOP_OP_DEVICE_INFO:
        if ip.device_ready(dev):
            d = ip.devices[dev]
            try:
                d.plugin.init_device_info(d.index)
            except (OffloadError, ValueError) as exc:
                ip.errors.append(f"init_device_info on device {dev}: {exc}")
        return 0
    if op in (_abi.IOP_OP_USE60, _abi.IOP_OP_RELEASE):
        return OFFLOAD_FAIL
    if op == _abi.IOP_OP_CALLBACK:
        return OMP_IRC_OTHER
    raise ValueError(f"unknown interop operation {op}")


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


def _s64(v: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    return v - (1 << 64) if v >> 63 else v


def dispatch(ip, which: int, a: list[int]) -> int:
    """The ``api`` callback: routine ``which`` (``abi.interposer.API_*``) with the
    64-bit arguments ``a``."""
    if which == _abi.API_ASSOCIATE:
        return associate(ip, a[0], a[1], a[2], a[3], _s32(a[4]))
    if which == _abi.API_DISASSOCIATE:
        return disassociate(ip, a[0], _s32(a[1]))
    if which == _abi.API_MAPPED_PTR:
        return mapped_ptr(ip, a[0], _s32(a[1]))
    if which == _abi.API_LOCK:
        return lock_mem(ip, a[0], a[1], _s32(a[2]))
    if which == _abi.API_UNLOCK:
        return unlock_mem(ip, a[0], _s32(a[1]))
    if which == _abi.API_PRINT_DEVICE_INFO:
        return print_device_info(ip, _s64(a[0]))
    if which == _abi.API_SET_INFO_FLAG:
        return set_info_flag(ip, a[0])
    if which == _abi.API_IS_ACCESSIBLE:
        return is_accessible(ip, a[0], a[1], _s32(a[2]))
    if which == _abi.API_UID_FROM_DEVICE:
        return uid_from_device(ip, _s32(a[0]))
    if which == _abi.API_DEVICE_FROM_UID:
        return device_from_uid(ip, a[0])
    if which == _abi.API_DUMP_TABLES:
        return dump_tables(ip)
    if which == _abi.API_RECORD_REPLAY:
        return record_replay(ip, _s64(a[0]), a[1], a[2], a[3])
    if which == _abi.API_INTEROP:
        return interop(ip, a[0], a[1], _s64(a[2]), _s64(a[3]))
    raise ValueError(f"unknown API routine {which}")


__all__ = ["FORWARDED", "HOST_UID", "OMP_INITIAL_DEVICE", "OMP_INVALID_DEVICE", "associate", "device_from_uid",
           "device_uid", "disassociate", "dispatch", "dump_tables", "interop",
           "is_accessible", "lock_mem", "mapped_ptr", "print_device_info", "record_replay",
           "set_info_flag", "target_alloc", "target_free", "target_is_present",
           "target_memcpy", "uid_from_device", "unlock_mem"]
