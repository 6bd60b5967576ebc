"""Map-type semantics of ``target data`` / ``enter data`` / ``exit data`` / ``update``.

Mirrors libomptarget 16 ``omptarget.cpp`` (``targetDataBegin``, ``targetDataEnd``,
``targetDataUpdate``) and the ``OMP_TGT_MAPTYPE_*`` bits of ``omptarget.h``.  Each
function takes the :class:`~offload_shim.interposer.mapping.DeviceMapper` of the device
and the construct's :class:`~offload_shim.abi.interposer.MapArgs`; errors raise
:class:`~offload_shim.interposer.mapping.MapError`.

``MAP_ATTACH`` (0x4000) is emitted by clang 22 for list items with a base pointer
(``map(to: p[0:n])`` -> the section, then ``{&p, &p[0], sizeof(p), ATTACH}``); LLVM 22
``OMPConstants.h`` "attach pointer and pointee, after processing all other maps;
applicable to map-entering directives; does not change ref-count", libomptarget
llvm-project PR #149036: the pointer is attached only when the pointer or the pointee
was newly mapped by the construct (or ``always``), and only when both are mapped.
"""

from __future__ import annotations

from ..abi import interposer as _abi
from .mapping import DeviceMapper, MapEntry, MapError

# OMP_TGT_MAPTYPE_* (LLVM 16 openmp/libomptarget/include/omptarget.h)
MAP_TO = 0x001
MAP_FROM = 0x002
MAP_ALWAYS = 0x004
MAP_DELETE = 0x008
MAP_PTR_AND_OBJ = 0x010
MAP_TARGET_PARAM = 0x020
MAP_RETURN_PARAM = 0x040
MAP_PRIVATE = 0x080
MAP_LITERAL = 0x100
MAP_IMPLICIT = 0x200
MAP_CLOSE = 0x400
MAP_PRESENT = 0x1000
MAP_OMPX_HOLD = 0x2000
MAP_ATTACH = 0x4000          # LLVM 22 (OMPConstants.h OMP_MAP_ATTACH)
MAP_NON_CONTIG = 0x100000000000
MAP_MEMBER_OF = 0xFFFF000000000000


def _no_mappers(m: _abi.MapArgs, i: int) -> None:
    if m.mappers and m.mappers[i]:
        raise MapError("user-defined mappers are not supported by offload_shim")


def target_data_begin(dm: DeviceMapper, m: _abi.MapArgs) -> None:
    """``targetDataBegin``: map every argument in order (allocate, copy ``to``,
    attach ``ptr_and_obj`` pointees, write ``return_param`` bases), then the
    ``attach`` entries."""
    attach: list[int] = []
    fresh: set[int] = set()             # host begin addresses newly mapped here
    for i in range(m.n):
        t = m.types[i]
        if t & (MAP_LITERAL | MAP_PRIVATE):
            continue
        if t & MAP_ATTACH:
            attach.append(i)
            continue
        _no_mappers(m, i)
        hp, base, size = m.args[i], m.bases[i], m.sizes[i]
        implicit, close = bool(t & MAP_IMPLICIT), bool(t & MAP_CLOSE)
        present, hold = bool(t & MAP_PRESENT), bool(t & MAP_OMPX_HOLD)
        update_ref = not (t & MAP_MEMBER_OF)
        ptr_tgt = ptr_host = 0
        if t & MAP_PTR_AND_OBJ:
            ptr_tgt, _e, ptr_new = dm.get_target_pointer(
                base, base, 8, to=False, always=False, implicit=implicit,
                update_ref=update_ref, close=close, present=present, hold=hold)
            if ptr_new:
                fresh.add(base)
            if not ptr_tgt:
                raise MapError(f"call to getTargetPointer returned null pointer for the "
                               f"pointer at {base:#x}")
            ptr_host = base
            base = _abi.read_pointer(base)
            update_ref = True
        tgt, _ent, new = dm.get_target_pointer(
            hp, base, size, to=bool(t & MAP_TO), always=bool(t & MAP_ALWAYS),
            implicit=implicit, update_ref=update_ref, close=close, present=present,
            hold=hold)
        if new:
            fresh.add(hp)
        if not tgt and (size or present):
            why = "present modifier" if present else "device failure or illegal mapping"
            raise MapError(f"call to getTargetPointer returned null pointer ({why})")
        if t & MAP_RETURN_PARAM:
            m.set_base(i, tgt - (hp - base) if tgt else 0)
        if t & MAP_PTR_AND_OBJ and tgt:
            dm.attach(ptr_host, ptr_tgt, base, tgt - (hp - base))
    for i in attach:
        _attach_entry(dm, m, i, fresh)


def _attach_entry(dm: DeviceMapper, m: _abi.MapArgs, i: int, fresh: set[int]) -> None:
    """One ``ATTACH`` entry ``{&ptr, pointee begin, sizeof(ptr)}``: when both the
    pointer and the pointee are mapped and one of them is new in this construct (or
    ``always``), store the pointee's device address in the device copy of the
    pointer (a shadow pointer, as ``ptr_and_obj`` does)."""
    ptr_host, pointee, psize = m.bases[i], m.args[i], m.sizes[i] or 8
    ptr_tgt, _l, pent = dm.get_tgt_ptr_begin(ptr_host, psize, update_ref=False, hold=False,
                                             must_contain=True, force=False)
    tgt, _l, ent = dm.get_tgt_ptr_begin(pointee, 0, update_ref=False, hold=False,
                                        must_contain=True, force=False)
    if pent is None or ent is None or not ptr_tgt or not tgt:
        return
    if not (m.types[i] & MAP_ALWAYS or pent.begin in fresh or ptr_host in fresh
            or ent.begin in fresh or pointee in fresh):
        return
    value = _abi.read_pointer(ptr_host)
    dm.attach(ptr_host, ptr_tgt, value, tgt - (pointee - value))


def target_data_end(dm: DeviceMapper, m: _abi.MapArgs) -> None:
    """``targetDataEnd``: in reverse order, drop a reference, copy ``from`` on the
    last one (or ``always``), then free the rows that reached zero.  A ``present``
    argument without a mapping fails the construct after the others are done."""
    doomed: list[MapEntry] = []
    failed = None
    for i in reversed(range(m.n)):
        t = m.types[i]
        if t & (MAP_LITERAL | MAP_PRIVATE | MAP_ATTACH):
            continue
        _no_mappers(m, i)
        hp, size = m.args[i], m.sizes[i]
        update_ref = (not (t & MAP_MEMBER_OF)) or bool(t & MAP_PTR_AND_OBJ)
        present, hold = bool(t & MAP_PRESENT), bool(t & MAP_OMPX_HOLD)
        tgt, is_last, ent = dm.get_tgt_ptr_begin(
            hp, size, update_ref=update_ref, hold=hold,
            must_contain=not (t & MAP_IMPLICIT), force=bool(t & MAP_DELETE))
        if ent is None:
            if present and (size or present):
                failed = ("device mapping required by 'present' map type modifier does "
                          f"not exist for host address {hp:#x} ({size} bytes)")
            continue
        if t & MAP_FROM and (t & MAP_ALWAYS or is_last) and size:
            dm.from_device(hp, tgt, size)
        if is_last and ent not in doomed:
            doomed.append(ent)
    dm.deallocate(doomed)
    if failed:
        raise MapError(failed)


def target_data_update(dm: DeviceMapper, m: _abi.MapArgs) -> None:
    """``targetDataUpdate``: copy ``from``/``to`` for mapped arguments; a ``present``
    motion modifier without a mapping fails the construct."""
    for i in range(m.n):
        t = m.types[i]
        if t & (MAP_LITERAL | MAP_PRIVATE | MAP_ATTACH):
            continue
        _no_mappers(m, i)
        if t & MAP_NON_CONTIG:
            raise MapError("non-contiguous target update is not supported by offload_shim")
        hp, size = m.args[i], m.sizes[i]
        tgt, _last, ent = dm.get_tgt_ptr_begin(hp, size, update_ref=False, hold=False,
                                               must_contain=True, force=False)
        if ent is None:
            if t & MAP_PRESENT:
                raise MapError("device mapping required by 'present' motion modifier "
                               f"does not exist for host address {hp:#x} ({size} bytes)")
            continue
        if t & MAP_FROM:
            dm.from_device(hp, tgt, size)
        if t & MAP_TO:
            dm.to_device(hp, tgt, size)


__all__ = ["MAP_ALWAYS", "MAP_ATTACH", "MAP_CLOSE", "MAP_DELETE", "MAP_FROM", "MAP_IMPLICIT",
           "MAP_LITERAL", "MAP_MEMBER_OF", "MAP_NON_CONTIG", "MAP_OMPX_HOLD",
           "MAP_PRESENT", "MAP_PRIVATE", "MAP_PTR_AND_OBJ", "MAP_RETURN_PARAM",
           "MAP_TARGET_PARAM", "MAP_TO", "target_data_begin", "target_data_end",
           "target_data_update"]
