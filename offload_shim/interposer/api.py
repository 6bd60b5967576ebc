"""The OpenMP device memory routines.

Mirrors libomptarget 16 ``api.cpp``: ``omp_target_alloc`` / ``omp_target_free`` (the
initial device uses ``malloc``/``free``, other devices :meth:`Device.alloc` /
:meth:`Device.free`), ``omp_target_memcpy`` between any two of host and devices,
``omp_target_is_present`` (the initial device always; else a size-0 lookup in the
device's mapping table).  Each routine takes ``ip``, the
:class:`~offload_shim.interposer.interface.Interposer` (for ``num_devices()``,
``device_or_host(num)`` and ``mapper(num)``), and returns the C return value.
"""

from __future__ import annotations

from ..abi import interposer as _abi
from ..abi.interposer import CB_FAIL, CB_OK


def target_alloc(ip, size: int, dev_id: int, out) -> int:
    """``omp_target_alloc(size, dev_id)``: stores the pointer in ``out[0]``; returns
    CB_OK, or CB_FAIL with NULL.  Raises MapError for an invalid device number."""
    dev = ip.device_or_host(dev_id)
    if dev is None:
        out[0] = _abi.malloc(size) or None
    else:
        out[0] = dev.alloc(int(size)) or None
    return CB_OK if out[0] else CB_FAIL


def target_free(ip, ptr: int, dev_id: int) -> int:
    """``omp_target_free(ptr, dev_id)`` (NULL: nothing)."""
    if not ptr:
        return CB_OK
    dev = ip.device_or_host(dev_id)
    if dev is None:
        _abi.free(ptr)
    else:
        dev.free(ptr)
    return CB_OK


def target_memcpy(ip, dst, src, length, dst_off, src_off, dst_dev, src_dev) -> int:
    """``omp_target_memcpy``: ``length`` bytes from ``src + src_off`` on ``src_dev``
    to ``dst + dst_off`` on ``dst_dev`` (0 on success)."""
    dd, sd = ip.device_or_host(dst_dev), ip.device_or_host(src_dev)
    d, s = (dst or 0) + dst_off, (src or 0) + src_off
    if not length:
        return CB_OK
    if dd is None and sd is None:
        _abi.host_memmove(d, s, length)
    elif dd is None:
        sd.retrieve_raw(d, s, length)
    elif sd is None:
        dd.submit_raw(d, s, length)
    else:
        tmp = _abi.HostBuffer(length)
        sd.retrieve_raw(tmp.address, s, length)
        dd.submit_raw(d, tmp.address, length)
    return CB_OK


def target_is_present(ip, ptr: int, dev_id: int) -> int:
    """``omp_target_is_present(ptr, dev_id)``: 1 or 0 (fatal for an invalid device
    number under libomptarget 19+, :meth:`Interposer.check_device_number`)."""
    ip.check_device_number(dev_id)
    n = ip.num_devices()
    if dev_id == n:
        return 1
    if not 0 <= dev_id < n or not ip.has_mapper(dev_id):
        return 0
    return 1 if ip.mapper(dev_id).is_present(ptr or 0) else 0


__all__ = ["target_alloc", "target_free", "target_is_present", "target_memcpy"]
