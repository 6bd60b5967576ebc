"""GCC's device routines for the host device: the ``omp_target_*`` API of GCC 12
``libgomp/target.c`` answered over the device list of :mod:`.target`.

``omp_target_alloc``, ``omp_target_free``, ``omp_target_is_present``,
``omp_target_memcpy``, ``omp_target_memcpy_rect`` (with
``omp_target_memcpy_rect_worker``), ``omp_target_associate_ptr``,
``omp_target_disassociate_ptr`` and ``omp_pause_resource``; ``omp_get_num_devices``,
``omp_get_initial_device`` and ``omp_get_device_num`` (icv-device.c) answer the
device count.  Each resolves its device number like target.c ``resolve_device`` (device
``-1`` is the ``default-device-var`` ICV; under ``OMP_TARGET_OFFLOAD=mandatory`` a
missing device is fatal), the initial device (the count ``n``) is host memory, and the
routines' errors are libgomp's (``EINVAL``, a NULL pointer, ``gomp_fatal``).  The table
itself (associations, presence) is :class:`~.mapping.GompMapper`'s.  In libgomp mode
none of this runs: the program's libgomp answers its own routines.
"""

from __future__ import annotations

from ...abi import gomp_interposer as _gabi
from .fatal import GompFatal, fmt_p
from .kinds import GOMP_DEVICE_HOST_FALLBACK, GOMP_DEVICE_ICV

EINVAL = 22


def _s32(v: int) -> int:
    """The C ``int`` in the low 32 bits of an argument word."""
    return ((v & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000


class GompApi:
    """GCC's API routines (module docstring), mixed into
    :class:`~.target.GompSide`: they use its device list (``num_devices``,
    ``default_device``, ``policy``, ``host_device`` and ``_ensure_init``, which loads the
    registered images), its ``_lock``, ``errors``, ``api_calls`` and ``_fatal``."""

    def _resolve(self, dev: int):
        """``resolve_device`` for an API routine: the host device, or None (libgomp's
        NULL).  Raises GompFatal under mandatory for a missing device."""
        n = self.num_devices()
        if dev == GOMP_DEVICE_ICV:
            dev = self.default_device()
        if not 0 <= dev < n:
            if self.policy() == "mandatory" and dev not in (GOMP_DEVICE_HOST_FALLBACK, n):
                raise GompFatal("OMP_TARGET_OFFLOAD is set to MANDATORY, but device not found")
            return None
        self._ensure_init()
        return self.host_device

    def _api_device(self, dev: int):
        """The device an API routine's device number names, or None: GCC 12's routines
        refuse a negative number before ``resolve_device`` (:meth:`_resolve`, which
        answers None for a number that is no device and raises GompFatal under
        mandatory).  The initial device (the count) is each routine's own case."""
        if dev < 0:
            return None
        return self._resolve(dev)

    def on_api(self, op, args_p, nargs, result) -> int:
        """One of GCC's device routines (GCC 12 target.c / icv-device.c semantics over
        this device list); the value goes to ``result[0]``."""
        op, nargs = int(op), int(nargs)
        a = _gabi.read_u64s(args_p or 0, nargs) if nargs else []
        name = _gabi.API_OPS[op] if 0 <= op < len(_gabi.API_OPS) else str(op)
        with self._lock:
            self.api_calls[name] = self.api_calls.get(name, 0) + 1
            try:
                value = self._api(op, a)
            except GompFatal as exc:
                self.errors.append(exc.message)
                return self._fatal(exc.message)
        result[0] = value & 0xFFFFFFFFFFFFFFFF
        return _gabi.OK

    def _api(self, op: int, a: list[int]) -> int:
        n = self.num_devices()
        if op in (0, 1, 2):                         # num_devices, initial_device, device_num
            return n
        if op == 3:                                 # omp_target_alloc(size, dev)
            size, dev = a[0], _s32(a[1])
            if dev == n:
                return _gabi.host_malloc(size)
            hd = self._api_device(dev)
            if hd is None:
                return 0
            ptr = hd.mapper.mem.alloc(size) if size else 0
            hd.trace({"construct": "omp_target_alloc", "op": "alloc", "kind": None,
                       "host": None, "size": size, "device": fmt_p(ptr)})
            return ptr
        if op == 4:                                 # omp_target_free(ptr, dev)
            ptr, dev = a[0], _s32(a[1])
            if not ptr:
                return 0
            if dev == n:
                _gabi.host_free(ptr)
                return 0
            hd = self._api_device(dev)
            if hd is None:
                return 0
            if not hd.mapper.mem.free(ptr):
                raise GompFatal(f"error in freeing device memory block at {fmt_p(ptr)}")
            hd.trace({"construct": "omp_target_free", "op": "free", "kind": None,
                       "host": None, "size": None, "device": fmt_p(ptr)})
            return 0
        if op == 5:                                 # omp_target_is_present(ptr, dev)
            ptr, dev = a[0], _s32(a[1])
            if not ptr or dev == n:
                return 1
            hd = self._api_device(dev)
            if hd is None:
                return 0
            return 1 if hd.mapper.mem_map.map_0len_lookup(ptr, ptr) is not None else 0
        if op == 6:                                 # omp_target_memcpy
            dst, src, length, doff, soff, ddev, sdev = a[:5] + [_s32(a[5]), _s32(a[6])]
            devs = self._copy_devices(ddev, sdev, n)
            if devs is None:
                return EINVAL
            return self._copy(dst + doff, src + soff, length, devs[0], devs[1])
        if op == 7:                                 # omp_target_memcpy_rect
            return self._memcpy_rect(a)
        if op == 8:                                 # omp_target_associate_ptr
            host, devp, size, doff, dev = a[0], a[1], a[2], a[3], _s32(a[4])
            hd = None if dev == n else self._api_device(dev)
            if hd is None:
                return EINVAL
            return hd.mapper.associate(host, (devp + doff) & 0xFFFFFFFFFFFFFFFF, size)
        if op == 9:                                 # omp_target_disassociate_ptr
            ptr, dev = a[0], _s32(a[1])
            hd = None if dev == n else self._api_device(dev)
            if hd is None:
                return EINVAL
            return hd.mapper.disassociate(ptr)
        if op == 10:                                # omp_pause_resource(kind, dev)
            kind, dev = _s32(a[0]), _s32(a[1])
            if dev == n:
                try:
                    real = _gabi.real_libgomp()
                    return real.pause_resource(kind, real.num_devices()) & 0xFFFFFFFF
                except (OSError, AttributeError):
                    return 0
            if dev < 0 or dev >= n:
                return 0xFFFFFFFF                   # -1
            return 0
        raise GompFatal(f"offload_shim: unknown API operation {op}")

    def _copy_devices(self, ddev: int, sdev: int, n: int) -> tuple | None:
        """The destination and source devices of a copy routine (GCC 12
        ``omp_target_memcpy`` / ``omp_target_memcpy_rect``, which check both device
        numbers alike): None for the initial device ``n`` (host memory), else the device
        :meth:`_resolve` finds; None as a whole (the routine returns EINVAL) where a
        number is negative or no device.  Raises GompFatal as :meth:`_resolve` does."""
        devs = []
        for d in (ddev, sdev):
            if d == n:
                devs.append(None)
                continue
            hd = self._api_device(d)
            if hd is None:
                return None
            devs.append(hd)
        return devs[0], devs[1]

    @staticmethod
    def _copy(dst: int, src: int, length: int, ddev, sdev) -> int:
        if ddev is None and sdev is None:
            _gabi.host_memmove(dst, src, length)
            return 0
        if sdev is None:
            return 0 if ddev.mapper.mem.host2dev(dst, src, length) else EINVAL
        if ddev is None:
            return 0 if sdev.mapper.mem.dev2host(dst, src, length) else EINVAL
        if sdev is ddev:
            return 0 if sdev.mapper.mem.dev2dev(dst, src, length) else EINVAL
        return EINVAL

    def _memcpy_rect(self, a: list[int]) -> int:
        """GCC 12 ``omp_target_memcpy_rect`` / ``omp_target_memcpy_rect_worker``."""
        dst, src, esize, ndims = a[0], a[1], a[2], _s32(a[3])
        ddev, sdev = _s32(a[9]), _s32(a[10])
        if not dst and not src:
            return 0x7FFFFFFF                        # INT_MAX: any number of dimensions
        devs = self._copy_devices(ddev, sdev, self.num_devices())
        if devs is None:
            return EINVAL
        if devs[0] is not None and devs[1] is not None and devs[0] is not devs[1]:
            return EINVAL
        if ndims <= 0:
            return EINVAL
        arrays = [_gabi.read_u64s(p, ndims) for p in a[4:9]]
        volume, doffs, soffs, ddims, sdims = arrays
        limit = 1 << 64

        def worker(dst, src, nd, vol, do, so, dd, sd) -> int:
            if nd == 1:
                length, doff, soff = esize * vol[0], esize * do[0], esize * so[0]
                if max(length, doff, soff) >= limit:
                    return EINVAL
                return self._copy(dst + doff, src + soff, length, devs[0], devs[1])
            dslice = sslice = esize
            for i in range(1, nd):
                dslice *= dd[i]
                sslice *= sd[i]
            doff, soff = dslice * do[0], sslice * so[0]
            if max(dslice, sslice, doff, soff) >= limit:
                return EINVAL
            for _j in range(vol[0]):
                ret = worker(dst + doff, src + soff, nd - 1, vol[1:], do[1:], so[1:], dd[1:],
                             sd[1:])
                if ret:
                    return ret
                doff += dslice
                soff += sslice
            return 0
        return worker(dst, src, ndims, volume, doffs, soffs, ddims, sdims)


__all__ = ["EINVAL", "GompApi"]
