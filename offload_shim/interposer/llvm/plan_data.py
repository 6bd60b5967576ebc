"""The cheap path of the data constructs: ``target enter data`` / ``exit data`` /
``update`` for a :class:`~.plan.Plan` whose maps are plain (``to``, ``from``,
``tofrom``, ``alloc`` / ``release``, ``implicit``; see :mod:`.plan`).

Mirrors libomptarget 16 ``omptarget.cpp`` ``targetDataBegin`` (each argument through
``device.cpp`` ``getTargetPointer``: look up, take a reference or make a row, allocate,
copy ``to`` when new), ``targetDataEnd`` (each argument in reverse order through
``getTgtPtrBegin``: drop a reference, on the last one copy ``from`` back and
``deallocTgtPtrAndEntry``, the delayed deletion of ``HostDataToTargetTy``) and
``targetDataUpdate`` (``retrieveData`` / ``submitData`` of each mapped item), with the
table's lock (:attr:`~.mapping.DeviceMapper.lock`, ``DeviceTy::DataMapMtx``) held for
the look-ups and the counts only: the allocations, copies and frees of a construct go
to the device in one call each, without it.  :func:`begin` raises :class:`Fallback`
(nothing of the construct left done) when the general code must serve it;
:func:`end` / :func:`update` answer False then.
"""

from __future__ import annotations

from ...abi import interposer as _abi
from ...errors import OffloadError
from . import pairs as _pairs
from .maptable import MapEntry

HEAD = _abi.FRAME_HEAD
W_NAMES_P = _abi.FRAME_NAMES_P
W_TYPES_P = _abi.FRAME_TYPES_P
W_HOST_PTR = _abi.FRAME_HOST_PTR           # a data construct's: its _nowait entry point
#: libomptarget 16 pads a new allocation only for the combined entry of a partially
#: mapped struct (``getPartialStructRequiredAlignment``; those carry MEMBER_OF members
#: and never take the cheap path): a plain row's device copy starts at its allocation
#: (checked against libomptarget 16: tests/programs/map_alignment.c), so no padding
ALIGN = 1
_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1


class Fallback(Exception):
    """The cheap path cannot serve this construct (nothing of it is left done)."""


def begin(v, n: int, plan, dm, repeat=None) -> list:
    """targetDataBegin for the plan's maps: one ``(row, hp)`` per map, in order.
    Lookups first (new rows go into the table at once, so later arguments see
    them, as in the general code; other threads see them pending), then the new
    rows' device memory in one :meth:`~offload_shim.Device.alloc_many` (same
    sizes, same order) and their ``to`` copies in one
    :meth:`~offload_shim.Device.submit_many`, without the table lock.  Raises
    Fallback with everything undone.  ``repeat``: the :class:`~.repeat.Repeats` of
    the C side, or None; with it, the rows of a construct whose items all made new
    rows note it (:class:`~.pairs.Made`: its exit may hand the pair over)."""
    table = dm.table
    a0, s0 = HEAD + n, HEAD + 2 * n
    rows = []
    incs = []
    new = []                                # (row, bytes to allocate, pad, to)
    ptrs = ()
    names = v[W_NAMES_P]                    # a row's name: (array, index), read lazily
    lock = dm.lock
    lock.acquire()
    try:
        lookup = table.lookup
        try:
            for i, to, _frm, implicit in plan.maps:
                hp = v[a0 + i]
                size = v[s0 + i]
                if not 0 < size <= _I64_MAX:
                    raise Fallback
                ent, contained, before, after = lookup(hp, size)
                if contained or (implicit and (before or after)):
                    if ent.pending:             # another thread is preparing it
                        raise Fallback
                    ent.inc(False)
                    incs.append(ent)
                elif before or after:
                    raise Fallback              # explicit extension: reported there
                else:
                    pad = hp % ALIGN
                    ent = MapEntry(v[HEAD + i], hp, hp + size, 0, 0, 1, 0,
                                   name=(names, i) if names else 0)
                    table.insert(ent)
                    new.append((ent, size + pad, pad, to))
                rows.append((ent, hp))
        except Fallback:
            for ent in incs:
                ent.dec(False)
            for ent, _nb, _pad, _to in new:
                table.remove(ent)
            raise
        for ent, _nb, _pad, _to in new:
            ent.pending = True              # seen by other threads from now on
        made = None
        if (repeat is not None and not incs and len(new) == len(plan.maps) == n
                and not v[W_HOST_PTR] and new[0][0].marks is not None):
            # every item made a row, in one hold of the lock: the stamp before the
            # first insertion is the table without them (the epoch read after any
            # take-in of the look-ups)
            made = _pairs.Made(plan, v[HEAD:HEAD + 4 * n].tobytes(), v[W_TYPES_P], n,
                               (new[0][0].marks[0], repeat.stamps[repeat.devices]),
                               [x[0] for x in new], [x[3] for x in new])
    finally:
        lock.release()
    if not new:
        return rows
    dev = dm.device
    try:
        ptrs = dev.alloc_many([x[1] for x in new])
        ops = []
        for (ent, _nb, pad, to), ptr in zip(new, ptrs):
            if not ptr:
                raise Fallback
            ent.alloc = ptr
            ent.tgt = ptr + pad
            if to:
                ops.append((ptr, ent.tgt, ent.begin, ent.end - ent.begin))
        if len(ops) == 1:
            dev.submit_in(*ops[0])              # O(1): checked against its block
        elif ops:
            dev.submit_many(ops)
    except BaseException as exc:
        with dm.lock:
            for ent in incs:
                ent.dec(False)
        dm.withdraw([x[0] for x in new])
        if ptrs:
            try:
                dev.free_many([p for p in ptrs if p])
            except OffloadError:
                pass
        if isinstance(exc, (Fallback, OffloadError)):
            raise Fallback from None
        raise
    if made is not None:
        for ent in made.rows:
            ent.made = made
    dm.settle([x[0] for x in new])
    return rows


def end(v, n: int, plan, dm, repeat=None) -> bool:
    """targetDataEnd for the plan's maps: in reverse order drop a reference;
    on the last one copy back (``from``) and remove the row.  The copies back go
    in one :meth:`~offload_shim.Device.retrieve_many` after the loop, the frees in
    one :meth:`~offload_shim.Device.free_many`, both without the table lock (a
    copy that fails is raised after every reference was dropped, where the
    general code stops at once).  A row that another thread re-took while this
    construct copied it back stays (libomptarget's delayed deletion).  False
    (nothing done) when a row is still being prepared by another thread.
    ``repeat``: the :class:`~.repeat.Repeats` of the C side, or None; with it, an
    exit that removed exactly the rows of one ``enter data`` is offered to it with
    that enter (:func:`~.pairs.offer`: then their blocks stay with the C side)."""
    table = dm.table
    lock = dm.lock
    a0, s0 = HEAD + n, HEAD + 2 * n
    back = []
    doomed = []
    counted = []
    maps = plan.maps
    lock.acquire()
    try:
        lookup = table.lookup
        items = []
        for k in range(len(maps) - 1, -1, -1):
            i, _to, frm, implicit = maps[k]
            hp = v[a0 + i]
            size = v[s0 + i]
            if size > _I64_MAX:
                size -= _U64                # int64_t, as the general code reads it
            ent, contained, before, after = lookup(hp, size)
            if ent is None or not (contained or (implicit and (before or after))):
                continue
            if ent.pending:
                return False
            items.append((ent, hp, size, frm))
        for ent, hp, size, frm in items:
            if ent.dec_dyn():
                ent.ends += 1
                counted.append(ent)
                if frm and size > 0:
                    back.append((ent.alloc, ent.tgt + (hp - ent.begin), hp, size))
                if ent not in doomed:
                    doomed.append(ent)
        if counted and not back:
            # nothing to copy back: the rows go now, in the same hold of the lock
            ptrs = []
            for ent in counted:
                ent.ends -= 1
            for ent in doomed:
                if ent.dyn == 0 and ent.hold == 0 and ent.ends == 0 and ent.live:
                    table.remove(ent)
                    if ent.alloc and not ent.leased:
                        ptrs.append(ent.alloc)
            counted = None
            pair = _pair_of(repeat, table, items, doomed, ptrs)
    finally:
        lock.release()
    if counted is None:
        if pair and _pairs.offer(repeat, dm, plan, v, n, items, back):
            return True
        if ptrs:
            dm.device.free_many(ptrs)
        return True
    if not counted:
        return True
    err = None
    if back:
        try:
            if len(back) == 1:                  # O(1): checked against its block
                block, tgt, hp, size = back[0]
                dm.device.retrieve_in(block, hp, tgt, size)
            else:
                dm.device.retrieve_many(back)
        except BaseException as exc:        # the counts are settled first
            err = exc
    ptrs = []
    pair = False
    lock.acquire()
    try:
        for ent in counted:
            ent.ends -= 1
        if err is None:
            for ent in doomed:
                if ent.dyn == 0 and ent.hold == 0 and ent.ends == 0 and ent.live:
                    table.remove(ent)
                    if ent.alloc and not ent.leased:
                        ptrs.append(ent.alloc)
            pair = _pair_of(repeat, table, items, doomed, ptrs)
    finally:
        lock.release()
    if err is not None:
        raise err
    if pair and _pairs.offer(repeat, dm, plan, v, n, items, back):
        return True
    if ptrs:
        dm.device.free_many(ptrs)
    return True


def _pair_of(repeat, table, items, doomed, ptrs) -> bool:
    """Whether an ``exit data`` may be offered with the ``enter data`` of its rows
    (:func:`~.pairs.offer`; table lock held, its rows just removed): every item
    dropped the last reference of a row of its own, every such row left the table and
    its block is freed here, they were made by one ``enter data``, and the stamp is
    back where it was before that enter (nothing else changed the table)."""
    if repeat is None or not items or len(doomed) != len(items) or len(ptrs) != len(items):
        return False
    made = items[0][0].made
    if made is None:
        return False
    stamps = table._stamps
    return stamps is not None and stamps[table.stamp_slot] == made.mark[0]


def update(v, n: int, plan, dm, repeat=None) -> bool:
    """targetDataUpdate: copy each mapped item from / to the device (runs of
    items in the same direction in one call), the look-ups under the table lock,
    the copies without it.  False (nothing done) when a row is still being
    prepared by another thread, or when the table has shadow pointers or padded rows
    (FastPath._serve looks without the lock; under it, the answer is exact).
    ``repeat``: the :class:`~.repeat.Repeats` the construct is offered to once done
    (the C side makes its copies again while the table's stamp, read here before the
    look-ups, stays), or None."""
    a0, s0 = HEAD + n, HEAD + 2 * n
    items = []
    lock = dm.lock
    lock.acquire()
    try:
        table = dm.table
        if table.shadow or table.padded:
            # attached since FastPath._serve looked (another thread): the copies of a
            # `to` must write the device values of the pointers back, the general
            # code's (a plain copy handed to the C side would be repeated as long as
            # the table stays so)
            return False
        mark = None
        if repeat is not None:
            slot = table.stamp_slot
            if slot >= 0:               # Repeats.mark, inlined: (stamp, epoch)
                stamps = repeat.stamps
                mark = (stamps[slot], stamps[repeat.devices])
        lookup = table.lookup
        for i, to, frm, _implicit in plan.maps:
            hp = v[a0 + i]
            size = v[s0 + i]
            if size > _I64_MAX:
                size -= _U64
            ent, contained, _b, _a = lookup(hp, size)
            if not contained or size <= 0:
                continue
            if ent.pending:
                return False
            items.append((ent.alloc, ent.tgt + (hp - ent.begin), hp, size, to, frm))
    finally:
        lock.release()
    dev = dm.device
    run, run_from = [], True
    for alloc, tgt, hp, size, to, frm in items:
        if not alloc:                       # a global of an image
            _flush(dev, run, run_from)
            run = []
            if frm:
                dev.retrieve_raw(hp, tgt, size)
            if to:
                dev.submit_raw(tgt, hp, size)
            continue
        if frm != run_from and run:
            _flush(dev, run, run_from)
            run = []
        run_from = frm
        run.append((alloc, tgt, hp, size))
    _flush(dev, run, run_from)
    if mark is not None:
        # Repeats.offer, its first step inlined: handed over on the second run of the
        # same words under the same stamp
        key = v[HEAD:a0 + 3 * n].tobytes()
        seen = plan.seen
        if seen.get(key) == mark:
            repeat.put(v, n, dm, items, mark)
        elif len(seen) < 64:
            seen[key] = mark
        else:
            seen.clear()
            seen[key] = mark
    return True


def _flush(dev, run: list, from_device: bool) -> None:
    if len(run) == 1:                       # O(1): checked against its block
        block, tgt, hp, size = run[0]
        if from_device:
            dev.retrieve_in(block, hp, tgt, size)
        else:
            dev.submit_in(block, tgt, hp, size)
    elif run:
        if from_device:
            dev.retrieve_many(run)
        else:
            dev.submit_many(run)


__all__ = ["ALIGN", "Fallback", "begin", "end", "update"]
