"""Map-type semantics of ``target data`` / ``enter data`` / ``exit data`` / ``update``.

Mirrors libomptarget 16 ``omptarget.cpp`` (``targetDataBegin``, ``targetDataEnd``,
``targetDataUpdate`` with ``targetDataContiguous`` / ``targetDataNonContiguous``,
``targetDataMapper`` for user-defined mappers, the partial-struct padding of
``getPartialStructRequiredAlignment``) and the ``OMP_TGT_MAPTYPE_*`` bits of
``omptarget.h``.  Each function takes the
:class:`~offload_shim.interposer.llvm.mapping.DeviceMapper` of the device and the construct's
:class:`~offload_shim.abi.interposer.MapArgs`; a failure prints libomptarget's lines and
raises :class:`~offload_shim.interposer.llvm.mapping.MapError`.

``MAP_ATTACH`` (0x4000) is emitted by clang 22 for list items with a base pointer
(``map(to: p[0:n])`` -> the section, then ``{&p, &p[0], sizeof(p), ATTACH}``); LLVM 22
``OMPConstants.h`` "attach pointer and pointee, after processing all other maps;
applicable to map-entering directives; does not change ref-count", libomptarget
llvm-project PR #149036: the pointer is attached only when the pointer or the pointee
was newly mapped by the construct (or ``always``), and only when both are mapped.
"""

from __future__ import annotations

from ...abi import interposer as _abi
from ...errors import OffloadError
from . import diag
from .mapping import DeviceMapper, MapError, TargetPointer

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

_MAX_ALIGNMENT = 16


def parent_index(t: int) -> int:
    """``getParentIndex``: the index of the struct this argument is a member of, -1."""
    return ((t & MAP_MEMBER_OF) >> 48) - 1


def _padding(m: _abi.MapArgs, i: int) -> int:
    """Padding before a combined struct entry whose next argument is its member
    (``getPartialStructRequiredAlignment``: the base's alignment, at most 16)."""
    if parent_index(m.types[i]) >= 0 or i + 1 >= m.n or parent_index(m.types[i + 1]) != i:
        return 0
    base = m.bases[i]
    align = min(_MAX_ALIGNMENT, base & -base) if base else _MAX_ALIGNMENT
    return m.args[i] % align


def target_data_mapper(dm: DeviceMapper, i: int, m: _abi.MapArgs, fn) -> None:
    """``targetDataMapper``: call argument ``i``'s mapper function, then ``fn`` on the
    components it pushed (``from_mapper``)."""
    comps = _abi.call_mapper(m.mappers[i], m.bases[i], m.args[i], m.sizes[i], m.types[i],
                             m.names[i] if m.names else 0)
    sub = _abi.MapArgs.from_lists([c[0] for c in comps], [c[1] for c in comps],
                                  [c[2] for c in comps], [c[3] for c in comps],
                                  [c[4] for c in comps])
    fn(dm, sub, from_mapper=True)


def _report_null_pointer(present: bool) -> None:
    """libomptarget 16 ``targetDataBegin``'s line when ``getTargetPointer`` gives no
    device pointer (``present``: the argument has the ``present`` modifier)."""
    diag.report("Call to getTargetPointer returned null pointer ("
                + ("'present' map type modifier" if present
                   else "device failure or illegal mapping") + ").")


def _own_arguments(dm: DeviceMapper, m: _abi.MapArgs, order, fn, upstream: str):
    """The indices, in ``order``, of the arguments that ``fn`` maps itself: literal,
    private and ``attach`` arguments are skipped, one with a user-defined mapper goes
    through it (:func:`target_data_mapper`) -- libomptarget 16 ``omptarget.cpp``
    ``targetDataBegin`` / ``targetDataEnd`` / ``targetDataUpdate`` (``upstream``), whose
    failure there prints ``Call to <upstream> via targetDataMapper for custom mapper
    failed.`` and raises MapError."""
    for i in order:
        if m.types[i] & (MAP_LITERAL | MAP_PRIVATE | MAP_ATTACH):
            continue
        if m.mappers and m.mappers[i]:
            try:
                target_data_mapper(dm, i, m, fn)
            except MapError:
                diag.report(f"Call to {upstream} via targetDataMapper for custom mapper "
                            "failed.")
                raise
            continue
        yield i


def target_data_begin(dm: DeviceMapper, m: _abi.MapArgs, *, from_mapper: bool = False
                      ) -> None:
    """``targetDataBegin``: map every argument in order (allocate, copy ``to``,
    attach ``ptr_and_obj`` pointees, write ``return_param`` bases), then the
    ``attach`` entries."""
    attach = [i for i in range(m.n)
              if m.types[i] & MAP_ATTACH and not m.types[i] & (MAP_LITERAL | MAP_PRIVATE)]
    fresh: set[int] = set()             # host begin addresses newly mapped here
    for i in _own_arguments(dm, m, range(m.n), target_data_begin, "targetDataBegin"):
        t = m.types[i]
        hp, base, size = m.args[i], m.bases[i], m.sizes[i]
        name = m.names[i] if m.names else 0
        padding = _padding(m, i)
        implicit, close = bool(t & MAP_IMPLICIT), bool(t & MAP_CLOSE)
        present, hold = bool(t & MAP_PRESENT), bool(t & MAP_OMPX_HOLD)
        update_ref = not (t & MAP_MEMBER_OF) and not (from_mapper and i == 0)
        ptr_tpr = TargetPointer(present=False)
        ptr_host = 0
        if t & MAP_PTR_AND_OBJ:
            ptr_tpr = dm.get_target_pointer(base, base, 8, implicit=implicit,
                                            update_ref=update_ref, close=close,
                                            present=present, hold=hold)
            if ptr_tpr.is_new:
                fresh.add(base)
            if not ptr_tpr.tgt:
                _report_null_pointer(present)
                raise MapError(f"no device copy of the pointer at {base:#x}")
            ptr_host = base
            base = _abi.read_pointer(base)
            update_ref = not from_mapper or i != 0
        tpr = dm.get_target_pointer(hp, base, size, to=bool(t & MAP_TO),
                                    always=bool(t & MAP_ALWAYS), implicit=implicit,
                                    update_ref=update_ref, close=close, present=present,
                                    hold=hold, padding=padding, name=name)
        if tpr.is_new:
            fresh.add(hp)
        if not tpr.tgt and (size or present):
            _report_null_pointer(present)
            raise MapError(f"cannot map {size} bytes at {hp:#x}")
        if t & MAP_RETURN_PARAM:
            m.set_base(i, _return_param(dm, hp, base, tpr.tgt))
        if t & MAP_PTR_AND_OBJ and not tpr.is_host:
            if ptr_tpr.is_host and not tpr.tgt:
                # unified shared memory, a zero-length pointee without a device copy:
                # the pointer's "device copy" is the host's pointer, and 16 writes
                # (NULL - offset) into it, 19.1 crashes; 22.1 leaves it
                # (FIXED_UPSTREAM "usm-attach-over-host-pointer")
                dm.note_fixed_upstream("usm-attach-over-host-pointer")
                continue
            try:
                dm.attach(ptr_host, ptr_tpr.tgt, base, tpr.tgt - (hp - base),
                          ptr_tpr.entry)
            except OffloadError:
                diag.report("Copying data to device failed.")
                raise MapError("cannot attach a pointer") from None
    for i in attach:
        _attach_entry(dm, m, i, fresh)


def _return_param(dm: DeviceMapper, hp: int, base: int, tgt: int) -> int:
    """The base ``use_device_ptr`` / ``use_device_addr`` (a ``RETURN_PARAM`` map)
    gives: the device address minus the begin's offset from the base; when the
    look-up failed, NULL (16, 19.1) or the host base itself (22.1, OpenMP 5.1: the
    list item keeps its address; llvm-project PR #174659:
    ``RuntimeProfile.use_device_fallback``)."""
    delta = hp - base
    if tgt:
        return (tgt - delta) & 0xFFFFFFFFFFFFFFFF
    if dm.profile.use_device_fallback == "host":
        return (hp - delta) & 0xFFFFFFFFFFFFFFFF
    return 0


def _attach_entry(dm: DeviceMapper, m: _abi.MapArgs, i: int, fresh: set[int]) -> None:
    """One ``ATTACH`` entry ``{&ptr, pointee begin, sizeof(ptr)}``: when both the
    pointer and the pointee are mapped and one of them is new in this construct (or
    ``always``), store the pointee's device address in the device copy of the
    pointer (a shadow pointer, as ``ptr_and_obj`` does)."""
    ptr_host, pointee, psize = m.bases[i], m.args[i], m.sizes[i] or 8
    p = dm.get_tgt_ptr_begin(ptr_host, psize, must_contain=True)
    e = dm.get_tgt_ptr_begin(pointee, 0, must_contain=True)
    if not p.present or not e.present or p.entry is None or e.entry is None:
        return
    if not (m.types[i] & MAP_ALWAYS or p.entry.begin in fresh or ptr_host in fresh
            or e.entry.begin in fresh or pointee in fresh):
        return
    value = _abi.read_pointer(ptr_host)
    dm.attach(ptr_host, p.tgt, value, e.tgt - (pointee - value), p.entry)


def target_data_end(dm: DeviceMapper, m: _abi.MapArgs, *, from_mapper: bool = False
                    ) -> None:
    """``targetDataEnd``: in reverse order, drop a reference, copy ``from`` on the
    last one (or ``always``), then remove the rows that reached zero.  A ``present``
    argument without a mapping fails the construct.

    Threads: the counts change under the table lock, the copies run without it, and
    a row this construct dropped to zero is removed at the end only if no other
    thread took a reference meanwhile and no other construct is still ending it
    (``postProcessingTargetDataEnd``, LLVM 16 omptarget.cpp; the row's ``ends``)."""
    post = []
    counted = []                        # rows whose `ends` this construct raised
    try:
        for i in _own_arguments(dm, m, reversed(range(m.n)), target_data_end,
                                "targetDataEnd"):
            t = m.types[i]
            hp, size = m.args[i], m.sizes[i]
            implicit = bool(t & MAP_IMPLICIT)
            update_ref = ((not (t & MAP_MEMBER_OF)) or bool(t & MAP_PTR_AND_OBJ)) and \
                not (from_mapper and i == 0)
            present, hold = bool(t & MAP_PRESENT), bool(t & MAP_OMPX_HOLD)
            tpr = dm.get_tgt_ptr_begin(hp, size, update_ref=update_ref, hold=hold,
                                       must_contain=not implicit,
                                       force=bool(t & MAP_DELETE))
            if update_ref and tpr.is_last and tpr.entry is not None:
                counted.append(tpr.entry)
            mismatch = tpr.entry.begin != hp if tpr.entry is not None else True
            if not tpr.is_host:
                if not tpr.present and (size or present):
                    if present:
                        diag.message("device mapping required by 'present' map type "
                                     f"modifier does not exist for host address "
                                     f"{diag.ptr(hp)} ({size} bytes)")
                        raise MapError(f"'present' data at {hp:#x} is not mapped")
                if not tpr.present:
                    continue
                if t & MAP_FROM and (t & MAP_ALWAYS or tpr.is_last) and size:
                    try:
                        dm.retrieve(hp, tpr.tgt, size, tpr.entry)
                    except OffloadError:
                        diag.report("Copying data from device failed.")
                        raise MapError("copy from the device failed") from None
            elif size == 0 and not tpr.present and mismatch:
                continue
            post.append((hp, size, t, tpr))
    except BaseException:
        dm.end_rows(counted)
        raise
    # postProcessingTargetDataEnd: under the table lock, the rows this construct ended
    # are no longer being ended by it; a row at zero that nobody else ends goes.  A row
    # several arguments end (``map(alloc: pp[0])`` beside ``map(tofrom: pp[0][0])``)
    # goes at its last argument only: libomptarget 16 counts one data-end user per
    # argument (``incDataEndThreadCount`` in ``getTgtPtrBegin``, ``decDataEndThreadCount``
    # here), so the earlier ones neither delete it nor drop its shadow pointers, and a
    # ``from`` argument after them still restores the host pointer values
    last = {id(tpr.entry): k for k, (_hp, _size, _t, tpr) in enumerate(post)
            if tpr.entry is not None}
    frees = []
    with dm.lock:
        for ent in counted:
            ent.ends -= 1
        for k, (hp, size, t, tpr) in enumerate(post):
            ent = tpr.entry
            if ent is None:
                continue
            delete = last[id(ent)] == k and \
                not ((t & MAP_MEMBER_OF) and not (t & MAP_PTR_AND_OBJ))
            if delete and (ent.total != 0 or ent.ends or ent.orphan):
                # (orphan: the reference this construct dropped was not the last, a
                # kernel repeated in C holds the row -- libomptarget counts the running
                # region's reference -- and its end hands the row back)
                delete = False
            if t & MAP_FROM:
                for addr, (hval, _ta, _tv) in dm.table.shadow.items():
                    if ent.begin <= addr < ent.end:
                        _abi.write_pointer(addr, hval)
            if not delete or not ent.live:
                continue
            frees.append(dm.remove_row(ent, size))
    for ptr in frees:
        if not ptr:
            continue
        try:
            dm.device.free(ptr)
        except OffloadError:
            diag.report("Deallocating data from device failed.")
            raise MapError("device free failed") from None


def _contiguous(dm: DeviceMapper, hp: int, size: int, t: int) -> None:
    """``targetDataContiguous``."""
    tpr = dm.get_tgt_ptr_begin(hp, size, must_contain=True)
    if not tpr.present:
        if t & MAP_PRESENT:
            diag.message("device mapping required by 'present' motion modifier does not "
                         f"exist for host address {diag.ptr(hp)} ({size} bytes)")
            raise MapError(f"'present' data at {hp:#x} is not mapped")
        return
    if tpr.is_host:
        return
    try:
        if t & MAP_TO:
            dm.to_device(hp, tpr.tgt, size, tpr.entry)
        if t & MAP_FROM:
            dm.from_device(hp, tpr.tgt, size, tpr.entry)
    except OffloadError:
        diag.report("Copying data to device failed." if t & MAP_TO
                    else "Copying data from device failed.")
        raise MapError("copy failed") from None


def _non_contiguous(dm, base, dims, size, t, cur, ndims, offset) -> None:
    """``targetDataNonContiguous``: one contiguous piece per innermost run."""
    if cur < ndims:
        off, count, stride = dims[cur]
        for k in range(count):
            cur_off = (off + k) * stride
            if cur != ndims - 1 or k == 0:
                _non_contiguous(dm, base, dims, size, t, cur + 1, ndims, offset + cur_off)
    else:
        _contiguous(dm, base + offset, size, t)


def target_data_update(dm: DeviceMapper, m: _abi.MapArgs, *, from_mapper: bool = False
                       ) -> None:
    """``targetDataUpdate``: copy ``from``/``to`` for mapped arguments (non-contiguous
    sections piece by piece); a ``present`` motion modifier without a mapping fails
    the construct."""
    del from_mapper
    for i in _own_arguments(dm, m, range(m.n), target_data_update, "targetDataUpdate"):
        t = m.types[i]
        if t & MAP_NON_CONTIG:
            ndims = m.sizes[i]
            dims = _abi.read_non_contig(m.args[i], ndims)
            size = dims[-1][1] * dims[-1][2]
            merged = sum(1 for d in range(ndims - 1, 0, -1)
                         if dims[d][1] * dims[d][2] == dims[d - 1][2])
            _non_contiguous(dm, m.bases[i], dims, size, t, 0, ndims - merged, 0)
        else:
            _contiguous(dm, m.args[i], m.sizes[i], t)


__all__ = ["MAP_ALWAYS", "MAP_ATTACH", "MAP_CLOSE", "MAP_DELETE", "MAP_FROM", "MAP_IMPLICIT",
           "MAP_LITERAL", "MAP_MEMBER_OF", "MAP_NON_CONTIG", "MAP_OMPX_HOLD",
           "MAP_PRESENT", "MAP_PRIVATE", "MAP_PTR_AND_OBJ", "MAP_RETURN_PARAM",
           "MAP_TARGET_PARAM", "MAP_TO", "parent_index", "target_data_begin",
           "target_data_end", "target_data_mapper", "target_data_update"]
