"""The target launch: map, launch the kernel, unmap.

Mirrors libomptarget 16 ``omptarget.cpp`` ``target()`` with ``processDataBefore``
(``targetDataBegin``, then one argument per ``target_param`` that is not ``member_of``:
``TgtPtrBegin`` with offset ``HstPtrBase - HstPtrBegin``; literals by value; privates
get a device copy, initialised when firstprivate, freed after the launch) and
``processDataAfter`` (``targetDataEnd``).  Kernels built by clang 18-22
(``KernelArgsTy`` version 3) take the implicit ``dyn_ptr`` first: the caller passes it
in ``implicit`` (LLVM 19/22 host plugins prepend it in ``GenericKernelTy::launch``; the
LLVM 16 plugins and the bundled plugin pass only what they are given).
"""

from __future__ import annotations

import contextlib

from ..abi import interposer as _abi
from ..errors import OffloadError
from .mapping import DeviceMapper, MapError
from .omptarget import (MAP_LITERAL, MAP_MEMBER_OF, MAP_PRIVATE, MAP_PTR_AND_OBJ,
                        MAP_TARGET_PARAM, MAP_TO, target_data_begin, target_data_end)


def target(dm: DeviceMapper, entry: int, m: _abi.MapArgs,
           implicit: tuple[int, ...] = ()) -> None:
    """Run the kernel whose device entry address is ``entry`` (``Device.translate`` of
    the region id) with the construct's arguments ``m``, after the ``implicit``
    leading arguments (``(DYN_PTR_HOST,)`` for clang 18-22 kernels, abi/clang.py).
    Raises MapError, OffloadError (allocation, copies, the launch itself)."""
    dev = dm.device
    privates: list[int] = []
    try:
        target_data_begin(dm, m)
        tgt_args, offsets = list(implicit), [0] * len(implicit)
        for i in range(m.n):
            t = m.types[i]
            if t & MAP_MEMBER_OF or not t & MAP_TARGET_PARAM:
                continue
            hp, base = m.args[i], m.bases[i]
            if t & MAP_LITERAL:
                tgt_args.append(hp)
                offsets.append(0)
                continue
            if t & MAP_PRIVATE:
                size = m.sizes[i]
                p = dev.alloc(size) if size else 0
                if size and not p:
                    raise MapError(f"allocation of {size} bytes for a private failed")
                if p:
                    privates.append(p)
                    if t & MAP_TO:
                        dev.submit_raw(p, hp, size)
                tgt_args.append(p)
                offsets.append(base - hp)
                continue
            if t & MAP_PTR_AND_OBJ:
                base = _abi.read_pointer(base)
            tgt, _l, _e = dm.get_tgt_ptr_begin(hp, m.sizes[i], update_ref=False, hold=False,
                                               must_contain=False, force=False)
            tgt_args.append(tgt)
            offsets.append(base - hp)
        dev.launch_entry(entry, tgt_args, offsets)
        target_data_end(dm, m)
    finally:
        for p in privates:
            with contextlib.suppress(OffloadError):
                dev.free(p)


__all__ = ["target"]
