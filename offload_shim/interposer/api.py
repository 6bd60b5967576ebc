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
:class:`~offload_shim.interposer.interface.Interposer`, and returns the C value.
"""

from __future__ import annotations

from ..abi import interposer as _abi
from ..abi.interposer import CB_FAIL, CB_OK
from ..errors import OffloadError
from . import diag

#: libomptarget.so.16 exports that offload_shim does not define, on purpose: a call
#: reaches the real libomptarget.so.16 (mapped as the program's DT_NEEDED), which has no
#: device.  name -> reason (docs/conformance.md)
FORWARDED = {
    name: ("OpenMP 5.1 interop objects: with the LLVM 16 host plugins libomptarget 16 "
           "itself crashes (the x86_64 plugin has no device info: SIGSEGV after "
           "'initDeviceInfoImpl not supported'); forwarded, every interop object reports "
           "'Device not ready!' instead of crashing")
    for name in ("__tgt_interop_init", "__tgt_interop_use", "__tgt_interop_destroy",
                 "omp_get_interop_int", "omp_get_interop_name", "omp_get_interop_ptr",
                 "omp_get_interop_str", "omp_get_interop_type_desc")}

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


def associate(ip, host: int, dptr: int, size: int, offset: int, dev: int) -> int:
    """``omp_target_associate_ptr``: 0 or -1 (reported)."""
    if not host or not dptr or size <= 0:
        diag.report("Call to omp_target_associate_ptr with invalid arguments")
        return OFFLOAD_FAIL
    if dev == ip.num_devices():
        diag.report("omp_target_associate_ptr: no association possible on the host")
        return OFFLOAD_FAIL
    if not ip.device_ready(dev):
        diag.report("omp_target_associate_ptr returns OFFLOAD_FAIL")
        return OFFLOAD_FAIL
    return 0 if ip.mapper(dev).associate(host, dptr + offset, size) else OFFLOAD_FAIL


def disassociate(ip, host: int, dev: int) -> int:
    """``omp_target_disassociate_ptr``: 0 or -1 (reported)."""
    if not host:
        diag.report("Call to omp_target_associate_ptr with invalid host_ptr")
        return OFFLOAD_FAIL
    if dev == ip.num_devices():
        diag.report("omp_target_disassociate_ptr: no association possible on the host")
        return OFFLOAD_FAIL
    if not ip.device_ready(dev):
        diag.report("omp_target_disassociate_ptr returns OFFLOAD_FAIL")
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


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


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
        return print_device_info(ip, a[0] - (1 << 64) if a[0] >> 63 else a[0])
    if which == _abi.API_SET_INFO_FLAG:
        return set_info_flag(ip, a[0])
    raise ValueError(f"unknown API routine {which}")


__all__ = ["FORWARDED", "associate", "disassociate", "dispatch", "lock_mem", "mapped_ptr",
           "print_device_info", "set_info_flag", "target_alloc", "target_free",
           "target_is_present", "target_memcpy", "unlock_mem"]
