"""The target launch: map, launch the kernel, unmap.

Mirrors libomptarget 16 ``omptarget.cpp`` ``target()`` with ``processDataBefore``
(``targetDataBegin``; then one kernel argument per ``target_param`` that is not
``member_of``: ``TgtPtrBegin`` with offset ``HstPtrBase - HstPtrBegin``, the host value
for a pointer that is not mapped; literals by value; privates get device memory, the
first-private ones of at most 1024 bytes packed into one buffer and copied at once
(``PrivateArgumentManagerTy``, laid out as the program's release does:
``RuntimeProfile.pack_firstprivate``); the device pointers inside a mapped lambda object are
rewritten to the device copies of what they point to) and ``processDataAfter``
(``targetDataEnd``, then the private memory is freed).  Kernels built by clang 18-22
(``KernelArgsTy`` version 3) take the implicit ``dyn_ptr`` first: the caller passes it
in ``implicit`` (LLVM 19/22 host plugins prepend it in ``GenericKernelTy::launch``; the
LLVM 16 plugins and the bundled plugin pass only what they are given).
"""

from __future__ import annotations

import contextlib

from ...abi import interposer as _abi
from ...errors import OffloadError
from . import diag
from .mapping import DeviceMapper, MapError
from .omptarget import (MAP_IMPLICIT, MAP_LITERAL, MAP_MEMBER_OF, MAP_PRIVATE,
                        MAP_PTR_AND_OBJ, MAP_TARGET_PARAM, MAP_TO, parent_index,
                        target_data_begin, target_data_end)

_FIRSTPRIVATE_PACK_LIMIT = 1024
_LAMBDA = MAP_PTR_AND_OBJ | MAP_LITERAL | MAP_IMPLICIT


class _Privates:
    """``PrivateArgumentManagerTy``: device memory of (first-)private arguments."""

    def __init__(self, dm: DeviceMapper):
        self.dm = dm
        self.allocs: list[int] = []
        self.packed: list[tuple[int, int, int]] = []    # (arg index, host addr, size)

    def add(self, hp: int, size: int, first: bool, index: int, now: bool) -> int:
        if size > _FIRSTPRIVATE_PACK_LIMIT or not first or now:
            p = self.dm.device.alloc(size) if size else 0
            if size and not p:
                raise MapError(f"allocation of {size} bytes for a private argument failed")
            if p:
                self.allocs.append(p)
                if first:
                    self.dm.submit(p, hp, size)
            return p
        self.packed.append((index, hp, size))
        return 0

    def layout(self, args) -> tuple[list[int], int]:
        """Where ``PrivateArgumentManagerTy`` puts packed first-private arguments
        ``args`` (``(host address, size)``): the program's release's rule
        (:meth:`RuntimeProfile.pack_firstprivate
        <offload_shim.interposer.llvm.profile.RuntimeProfile.pack_firstprivate>`; 16: each
        takes ``Size + Size % 8`` bytes, 13 bytes take 18).  Returns (offsets, total
        bytes)."""
        return self.dm.profile.pack_firstprivate(args)

    def pack(self, tgt_args: list[int]) -> None:
        """Copy the packed first-private arguments to the device at once and set their
        kernel arguments (``packAndTransfer``)."""
        if not self.packed:
            return
        offsets, total = self.layout([(h, s) for _i, h, s in self.packed])
        buf = _abi.HostBuffer(total)            # zero-filled, as the resized buffer
        for (_i, hp, size), off in zip(self.packed, offsets):
            _abi.host_memmove(buf.address + off, hp, size)
        p = self.dm.device.alloc(total)
        if not p:
            raise MapError(f"allocation of {total} bytes for private arguments failed")
        self.allocs.append(p)
        self.dm.submit(p, buf.address, total)
        for (i, _hp, _size), off in zip(self.packed, offsets):
            tgt_args[i] = p + off

    def free(self) -> None:
        for p in self.allocs:
            with contextlib.suppress(OffloadError):
                self.dm.device.free(p)
        self.allocs.clear()


def _process_data_before(dm: DeviceMapper, m: _abi.MapArgs, privates: _Privates,
                         implicit: tuple[int, ...] = ()) -> tuple[list[int], list[int]]:
    try:
        target_data_begin(dm, m)
    except MapError:
        diag.report("Call to targetDataBegin failed, abort target.")
        raise
    tgt_args: list[int] = list(implicit)
    offsets: list[int] = [0] * len(implicit)
    positions = [-1] * m.n
    for i in range(m.n):
        t = m.types[i]
        if not t & MAP_TARGET_PARAM:
            if (t & _LAMBDA) == _LAMBDA:
                idx = parent_index(t)
                pos = positions[idx] if 0 <= idx < m.n else -1
                if pos < 0:
                    continue
                tgt_base = tgt_args[pos] + offsets[pos]
                delta = m.bases[i] - m.args[idx]
                tpr = dm.get_tgt_ptr_begin(m.args[i], m.sizes[i])
                if not tpr.present or tpr.is_host:
                    continue
                cell = _abi.HostCell(tpr.tgt)
                try:
                    dm.submit(tgt_base + delta, cell.address, 8, tpr.entry)
                except OffloadError:
                    diag.report("Copying data to device failed.")
                    raise MapError("lambda capture update failed") from None
            continue
        hp, base = m.args[i], m.bases[i]
        if t & MAP_LITERAL:
            tgt, off = base, 0
        elif t & MAP_PRIVATE:
            off = base - hp
            first = bool(t & MAP_TO)
            now = i < m.n - 1 and bool(m.types[i + 1] & MAP_MEMBER_OF)
            try:
                tgt = privates.add(hp, m.sizes[i], first, len(tgt_args), now)
            except (MapError, OffloadError):
                diag.report(f"Failed to process {'first-' if first else ''}private "
                            f"argument {diag.ptr(hp)}")
                raise MapError("private argument") from None
        else:
            if t & MAP_PTR_AND_OBJ:
                base = _abi.read_pointer(base)
            tgt = dm.get_tgt_ptr_begin(hp, m.sizes[i]).tgt
            off = base - hp
        positions[i] = len(tgt_args)
        tgt_args.append(tgt & 0xFFFFFFFFFFFFFFFF)
        offsets.append(off)
    privates.pack(tgt_args)
    return tgt_args, offsets


def target(dm: DeviceMapper, entry: int, m: _abi.MapArgs,
           implicit: tuple[int, ...] = ()) -> None:
    """Run the kernel whose device entry address is ``entry`` (``Device.translate`` of
    the region id) with the construct's arguments ``m``, after the ``implicit`` leading
    arguments (``(DYN_PTR_HOST,)`` for clang 18-22 kernels, abi/clang.py).  Raises
    MapError (lines printed) or OffloadError."""
    privates = _Privates(dm)
    try:
        try:
            if m.n:
                tgt_args, offsets = _process_data_before(dm, m, privates, implicit)
            else:
                tgt_args, offsets = list(implicit), [0] * len(implicit)
        except (MapError, OffloadError):
            diag.report("Failed to process data before launching the kernel.")
            raise
        try:
            dm.device.launch_entry(entry, tgt_args, offsets)
        except OffloadError:
            diag.report("Executing target region abort target.")
            raise
        if m.n:
            try:
                target_data_end(dm, m)
            except MapError:
                diag.report("Call to targetDataEnd failed, abort target.")
                diag.report("Failed to process data after launching the kernel.")
                raise
    finally:
        privates.free()


__all__ = ["target"]
