"""The cheap path of a kernel construct: ``target()`` (libomptarget 16 ``omptarget.cpp``
``target``: ``processDataBeforeLaunch`` -- ``targetDataBegin`` of the region's maps --,
the launch, ``processDataAfterLaunch`` -- ``targetDataEnd``) for a
:class:`~.plan.Plan` whose maps are plain (see :mod:`.plan`).

A kernel construct's new rows stay out of the table while it runs (a
:class:`_Reservation` in :attr:`~.maptable.MappingTable.private`): the first look-up of
any other thread publishes them as ordinary rows (pending while the construct still
allocates or copies to them), so what other threads see is what libomptarget's table
(``device.cpp`` ``MappingInfoTy`` / ``HostDataToTargetMap``) holds; a row another
thread took a reference to outlives the construct and owns its block from then on.
Their device memory is one :meth:`~offload_shim.core.device.Device.lease` from the
pool, allocated in argument order and freed in reverse argument order, as
``targetDataBegin`` / ``targetDataEnd`` do; the frees are put off
(:meth:`~offload_shim.core.device.DeviceLease.park`) so that the region's next
construct takes the same blocks back.
"""

from __future__ import annotations

from ...abi import interposer as _abi
from ...errors import OffloadError
from .maptable import MapEntry, slotted_row
from .repeat import seen_before
from .plan_data import _I64_MAX, ALIGN, HEAD, W_NAMES_P

#: most argument sets a plan remembers (:attr:`~.plan.Plan.replay`, ``args``): one per
#: host thread or per array a loop cycles through
MAX_REPLAYS = 64
W_LOC = _abi.FRAME_LOC
KERNEL = _abi.FRAME_KERNEL
_new = object.__new__

#: phases of a :class:`_Reservation`
RESERVED, RUNNING, ENDING = 0, 1, 2


class _Reservation:
    """The new rows of one kernel construct on the cheap path, kept out of the table
    (in ``MappingTable.private``) while the construct runs.  ``fresh``: ``(k, hp,
    size)`` of each (``k`` its map index; row ``j`` of ``fresh`` has block ``j`` of the
    lease); ``phase``: RESERVED (device memory and ``to`` copies being made), RUNNING
    (ready, the kernel may run), ENDING (the construct dropped its references and
    copies back); ``tgts`` / ``lease``: their device addresses (per map index) and the
    :class:`~offload_shim.core.device.DeviceLease` holding their blocks (set before
    RUNNING); ``entries``: None, or the rows
    :meth:`publish` made; ``ended``: None until the construct's end was applied to
    those rows, then per row whether it dropped the row's last reference (the row's
    ``ends`` count is then the construct's until it finishes).  ``marks``: what
    :meth:`~.maptable.MappingTable.reserved` gave when the reservation was made
    (:meth:`~.maptable.MappingTable.unreserved` when it ends unpublished).

    The owner moves ``phase`` on without the table lock and then reads ``entries``;
    :meth:`publish` (table lock held) writes ``entries`` and then reads ``phase``
    again: under the GIL one of the two sees the other's write, and whoever does
    brings the rows up to the phase (:meth:`settle`, :meth:`drop`, both idempotent;
    the owner takes the table lock for that).  Everything else changes under the
    table lock."""
    __slots__ = ("v", "maps", "fresh", "phase", "tgts", "lease", "entries", "ended",
                 "marks")

    def __init__(self, v, maps, fresh):
        self.v, self.maps, self.fresh = v, maps, fresh
        self.phase = RESERVED
        self.entries = self.ended = self.marks = None

    def publish(self, table) -> None:
        """Insert the rows (table lock held; :meth:`MappingTable.publish`): pending
        until RUNNING, with the construct's reference until ENDING, afterwards at zero
        with the construct's end in flight (libomptarget's delayed deletion).  The
        construct's own block stays its lease's (``leased``)."""
        phase = self.phase
        ready = phase != RESERVED
        ending = phase == ENDING
        v, maps = self.v, self.maps
        names = v[W_NAMES_P]
        ents = []
        for j, (k, hp, size) in enumerate(self.fresh):
            i = maps[k][0]
            name = (names, i) if names else 0
            if ready:
                e = MapEntry(v[HEAD + i], hp, hp + size, self.tgts[k],
                             self.lease.ptrs[j], 0 if ending else 1, 0, name=name)
            else:
                e = MapEntry(v[HEAD + i], hp, hp + size, 0, 0, 1, 0, name=name)
                e.pending = True
            e.leased = True
            if ending:
                e.ends = 1
            table.insert(e)
            ents.append(e)
        if ending:
            self.ended = [True] * len(ents)
        self.entries = ents
        now = self.phase                        # the owner moved on meanwhile?
        if now != phase:
            if phase == RESERVED:
                self._ready()
            if now == ENDING and self.ended is None:
                self.drop()

    def _ready(self) -> None:
        tgts, ptrs = self.tgts, self.lease.ptrs
        for j, (e, (k, _hp, _size)) in enumerate(zip(self.entries, self.fresh)):
            e.tgt = tgts[k]
            e.alloc = ptrs[j]
            e.pending = False

    def settle(self, dm) -> None:
        """RUNNING reached with the rows published while pending: their device
        addresses, and wake who waits for them (table lock held)."""
        self._ready()
        if dm.waiting:
            dm.cv.notify_all()

    def drop(self) -> list[bool]:
        """The construct's end on published rows (table lock held; once): drop its
        reference on each row still in the table; which rows it was the last user
        of (those it copies back and may remove)."""
        if self.ended is not None:
            return self.ended
        ended = []
        for e in self.entries:
            if not e.live:                      # removed meanwhile (a `delete`)
                ended.append(False)
                continue
            last = e.should_remove(False)
            e.dec(False)
            if last:
                e.ends += 1
            ended.append(last)
        self.ended = ended
        return ended


def target(v, n: int, plan, dm, got, failed, repeat=None):
    """``target()``: map, launch, unmap, for a plan on the cheap path.  ``v``: the
    construct frame (:func:`~offload_shim.abi.interposer.frame_view`), ``n`` its
    argument count, ``dm`` the device's :class:`~.mapping.DeviceMapper`, ``got``
    ``(key, launcher, implicit)`` (``FastPath._launcher``), ``failed(kind, exc,
    loc)`` the return code of a construct that failed after the point of no
    return.  Returns the bridge's code, or None when the general code must run the
    construct (nothing of it done).

    The rows a kernel construct creates live exactly as long as the construct
    unless another thread maps them meanwhile: created with a reference count of
    1 by its begin, dropped to 0 by its end.  So they are kept out of the table
    (a :class:`_Reservation`, published as rows when another thread looks at
    the table): their device memory is one :meth:`~offload_shim.core.device.
    Device.lease` from the pool (argument order), given back when the construct
    ends (reverse argument order, together with any row that existed and reached
    zero: the general code's order), their ``to`` / ``from`` copies are one
    :meth:`~offload_shim.core.device.DeviceLease.submit_many` / ``retrieve_many``
    each, and the table sees only the reference counts of the rows that existed
    before.  Two new rows that overlap would see
    each other in the general code: such a construct goes there, and so does one
    that finds a row another thread is still preparing.  If the launch fails the
    new rows enter the table as the general code leaves them (reference count
    1).  The table lock is held for the look-ups and counts only.

    ``repeat``: the :class:`~.repeat.Repeats` a construct whose maps all found rows
    is offered to once done (:func:`_offer`), or None."""
    _key, launch, implicit = got
    table = dm.table
    lock = dm.lock
    a0 = HEAD + n
    s0 = a0 + n
    maps = plan.maps
    nm = len(maps)
    rec = None
    key = v[HEAD:s0 + n].tobytes()          # the region's bases, pointers and sizes
    replay = plan.replay
    rp = replay.get(key)
    lock.acquire()
    try:
        if repeat is not None and table.stamp_slot >= 0:
            stamps = repeat.stamps          # Repeats.mark, inlined
            mark = (stamps[table.stamp_slot], stamps[repeat.devices])
        else:
            mark = None
        if (rp is not None and rp[0] is table and rp[1] == table.version
                and not table.private):
            # the same arguments and no row inserted or removed since a construct of
            # this plan had them: its look-ups find the same rows (MappingTable.version)
            _t, _ver, found, tgts, fresh, present, prep = rp
            if fresh is not None:
                tgts = list(tgts)           # the new rows' places filled in below
            for ent in present:
                if ent.pending:                 # another thread is preparing it
                    return None
            for ent in present:
                ent.inc(False)
        else:
            tgts = [0] * nm
            found = [None] * nm                 # per map: the row that existed, or None
            fresh = None                        # (k, hp, size) of the new rows
            lookup = table.lookup
            for k in range(nm):
                i, _to, _frm, imp = maps[k]
                hp = v[a0 + i]
                size = v[s0 + i]
                if 0 < size <= _I64_MAX:
                    ent, contained, before, after = lookup(hp, size)
                    if contained or (imp and (before or after)):
                        if ent.pending:         # another thread is preparing it
                            _undo(found)
                            return None
                        ent.inc(False)
                        found[k] = ent
                        tgts[k] = ent.tgt + (hp - ent.begin)
                        continue
                    if not (before or after):
                        if fresh is None:
                            fresh = [(k, hp, size)]
                        else:
                            fresh.append((k, hp, size))
                        continue
                _undo(found)                    # explicit extension, size 0: general code
                return None
            if fresh is not None and len(fresh) > 1 and not _disjoint(fresh):
                _undo(found)
                return None
            found = tuple(found)
            prep = None if fresh is None else _prepare(maps, fresh)
            if len(replay) >= MAX_REPLAYS:
                replay.clear()
            tt = tuple(tgts)
            replay[key] = (table, table.version, found, tt, fresh,
                           tuple(e for e in found if e is not None), prep)
            if fresh is None:
                tgts = tt                   # the replays' own tuple (plan.args: `is`)
        if fresh is not None:
            rec = _new(_Reservation)         # __init__ without its call (hot path)
            rec.v = v
            rec.maps = maps
            rec.fresh = fresh
            rec.phase = RESERVED
            rec.entries = rec.ended = None
            table.private.append(rec)
            # an update's look-up would publish it: the C side's repeats go to Python
            # (until the construct ends with its rows unpublished: unreserved)
            rec.marks = table.reserved(fresh)
    finally:
        lock.release()
    nfound = nm - len(fresh) if fresh is not None else nm
    dev = dm.device
    lease = None
    if rec is not None:
        try:
            sizes, tos, backs, places = prep
            parked = plan.parked
            if parked:
                try:
                    lease = parked.pop()
                except IndexError:          # another thread took it
                    lease = None
                if lease is not None and not lease.reclaim(sizes):
                    lease = None
            if lease is None:
                lease = dev.lease(sizes)
            ptrs = lease.ptrs
            for k, j, pad in places:
                tgts[k] = ptrs[j] + pad
            if tos:
                lease.submit_many(tos)
        except BaseException as exc:
            _withdraw(dm, rec, found)
            if lease is not None:
                _release(lease)
            if isinstance(exc, OffloadError):
                return None
            raise
        rec.tgts = tgts
        rec.lease = lease
        rec.phase = RUNNING                 # then read `entries` (_Reservation)
        if rec.entries is not None:
            lock.acquire()
            try:
                rec.settle(dm)
            finally:
                lock.release()
    pa = plan.args.get(key)                 # launch arguments made for these words
    if pa is not None and (pa[0] is tgts or pa[0] == tgts) and pa[1] is implicit:
        # (read only: the launcher copies them; checked once by KernelLauncher.fits;
        # `is`: a replayed construct without new rows has the replay's own tuple)
        args, offsets, run = pa[2], pa[3], launch.run
    else:
        args = list(implicit)
        offsets = [0] * len(args)
        for i, k in plan.params:
            if k < 0:                       # a literal: the value itself
                args.append(v[HEAD + i])    # HstPtrBase, as processDataBefore
                offsets.append(0)
            else:
                args.append(tgts[k])
                offsets.append(v[HEAD + i] - v[a0 + i])
        run = launch                        # checks the values (ValueError)
        if launch.fits(args, offsets):
            if len(plan.args) >= MAX_REPLAYS:
                plan.args.clear()
            plan.args[key] = (tgts, implicit, args, offsets)
    try:
        run(args, offsets)
    except BaseException as exc:
        # the general code leaves the construct's rows mapped (no targetDataEnd):
        # the new rows enter the table and own their blocks from now on
        if rec is not None:
            _launch_failed(v, dm, rec, lease)
        if isinstance(exc, OffloadError):
            return failed(KERNEL, exc, v[W_LOC])
        raise
    # targetDataEnd, in reverse order: the new rows are at their last reference
    # (unless another thread took one); a row that existed before keeps at least
    # the reference it had
    removed = None
    last = None
    if nfound:
        lock.acquire()
        try:
            for k in range(nm - 1, -1, -1):
                ent = found[k]
                if ent is None:
                    continue
                if ent.dec_dyn():
                    ent.ends += 1
                    if removed is None:
                        removed = []
                    removed.append((k, ent))
            if rec is not None:
                rec.phase = ENDING
                if rec.entries is not None:
                    last = rec.drop()
        finally:
            lock.release()
    elif rec is not None:
        rec.phase = ENDING                  # then read `entries` (_Reservation)
        if rec.entries is not None:
            lock.acquire()
            try:
                last = rec.drop()
            finally:
                lock.release()
    err = None
    try:
        if rec is not None:
            if last is None:                # every new row is at its last reference
                back = backs
            else:                           # published: those this construct ended
                back = [op for op in backs if last[op[0]]]
            if back:
                lease.retrieve_many(back)
        if removed is not None:
            dev.retrieve_many([(ent.alloc, tgts[k], v[a0 + maps[k][0]],
                                v[s0 + maps[k][0]]) for k, ent in removed
                               if maps[k][2]])
    except BaseException as exc:           # the construct is finished first
        err = exc
    frees = None
    adopted = None
    published = rec is not None and rec.entries is not None
    if rec is not None and not published:
        try:
            table.private.remove(rec)       # atomic: publish() pops its reservations
        except ValueError:
            published = True                # publish() took it meanwhile
        else:
            if rec.marks is not None:
                lock.acquire()
                try:
                    table.unreserved(rec.marks)
                finally:
                    lock.release()
    if removed is not None or published:
        lock.acquire()
        try:
            if removed is not None:
                # rows that existed and reached zero here: removed unless another
                # thread took them again or ends them too (postProcessingTargetDataEnd)
                done = []
                for k, ent in removed:
                    ent.ends -= 1
                    if err is None and all(e is not ent for _k, e in done):
                        done.append((k, ent))
                for k, ent in done:
                    if ent.total == 0 and ent.ends == 0 and ent.live:
                        table.remove(ent)
                        if ent.alloc and not ent.leased:
                            if frees is None:
                                frees = []
                            frees.append((k, ent.alloc))
            if published:
                adopted = _resolve(table, rec)
        finally:
            lock.release()
    if frees is not None:
        # the general code's order: every row this construct removed, in reverse
        # argument order (its own new rows' blocks among them)
        if rec is not None:
            if lease.valid:                 # (a deinit meanwhile freed its blocks)
                frees += [(maps_k, p) for j, ((maps_k, _hp, _sz), p)
                          in enumerate(zip(fresh, lease.ptrs))
                          if j not in (adopted or ())]
            lease.detach()
        frees.sort(key=_first, reverse=True)
        try:
            dev.free_many([p for _k, p in frees])
        except OffloadError as exc:
            err = err or exc
    elif rec is not None:
        # the C side's rotations took the blocks (its repeats take them in turn, as
        # the pool would hand them out), or: reverse argument order; the frees put off
        # while nobody else uses the pool (the next run of this region takes the same
        # blocks back: DeviceLease.park)
        if (mark is not None and not published and err is None and removed is None
                and _offer(repeat, v, n, plan, dm, key, launch, args, offsets, found,
                           mark, rec, prep)):
            pass
        elif not adopted and repeat is not None and repeat.free_into(dm, lease):
            pass                            # into the rotations other repeats use
        elif adopted or not lease.park():
            _release(lease, adopted)
        elif not plan.parked:
            plan.parked.append(lease)
    if err is not None:
        if isinstance(err, OffloadError):
            return failed(KERNEL, err, v[W_LOC])
        raise err
    if mark is not None and rec is None and removed is None:
        _offer(repeat, v, n, plan, dm, key, launch, args, offsets, found, mark)
    return _abi.CB_OK


def _offer(repeat, v, n, plan, dm, key, launch, args, offsets, found, mark, rec=None,
           prep=None) -> bool:
    """A construct done without error, whose rows of its own (``rec``, if any) ended
    unpublished: handed to the C side (:meth:`~.repeat.Repeats.put_kernel`, which
    frees ``rec``'s blocks into its rotations when it returns True) when the plan saw
    the same arguments under the same stamp before -- the construct repeats while the
    table stands still --, else only noted in ``plan.seen`` (as
    :meth:`~.repeat.Repeats.offer` for updates).  Whether the C side took it (or, with
    ``rec``, its blocks)."""
    if not seen_before(plan, key, mark):
        return False
    return repeat.put_kernel(v, n, dm, launch, args, offsets, found, plan.maps, mark,
                             rec, prep, plan.params)


def repeat_rows(v) -> list[tuple]:
    """The rows of a crossing of the C side's kernel repeats
    (``FRAME_REPEAT_END`` / ``FRAME_REPEAT_FAILED``): ``(row, hp, size, from)`` of
    each row still in its table under the same slot generation."""
    out = []
    for j in range(v[_abi.FRAME_N]):
        w = HEAD + 5 * j
        ent = slotted_row(v[w], v[w + 1])
        if ent is not None:
            out.append((ent, v[w + 2], v[w + 3], bool(v[w + 4])))
    return out


def end_orphans(dm, rows) -> None:
    """The last kernel repeat holding rows that Python left to it
    (:func:`~.maptable.give_slot`: their last reference was the repeat's) dropped its
    holds: libomptarget 16 ``targetDataEnd`` of that construct for each row ``(row,
    hp, size, from)`` nobody took again meanwhile -- copy back the construct's range
    when its map says ``from``, remove the row, free its memory; ``ends`` keeps the
    row while it copies back (delayed deletion).  Raises OffloadError (a copy back
    failed: the rows stay)."""
    table = dm.table
    back, counted = [], []
    with dm.lock:
        for ent, hp, size, frm in rows:
            ent.orphan = False
            if ent.live and ent.total == 0 and ent.ends == 0 and not ent.pending:
                ent.ends += 1
                counted.append(ent)
                if frm and size > 0:
                    back.append((ent.alloc, ent.tgt + (hp - ent.begin), hp, size))
    if not counted:
        return
    err = None
    if back:
        try:
            dm.device.retrieve_many(back)
        except BaseException as exc:
            err = exc
    ptrs = []
    with dm.lock:
        for ent in counted:
            ent.ends -= 1
            if err is None and ent.total == 0 and ent.ends == 0 and ent.live:
                table.remove(ent)
                if ent.alloc and not ent.leased:
                    ptrs.append(ent.alloc)
    if err is not None:
        raise err
    if ptrs:
        dm.device.free_many(ptrs)


def keep_failed(dm, rows) -> None:
    """A kernel repeat's launch failed: its rows keep the construct's reference, as
    the general code leaves the rows of a failed launch (no ``targetDataEnd``)."""
    with dm.lock:
        for ent, _hp, _size, _frm in rows:
            ent.orphan = False
            if ent.live:
                ent.inc(False)


def _prepare(maps, fresh) -> tuple:
    """What a kernel construct's new rows ``fresh`` (``(k, hp, size)``) need, made
    once per set of arguments: the sizes to allocate (argument order), the ``to``
    copies ``(j, offset, hp, size)`` in argument order, the ``from`` copies in
    reverse argument order (libomptarget 16 ``targetDataEnd``), and ``(k, j,
    offset)``: map ``k`` is at ``offset`` in block ``j``."""
    sizes, tos, backs, places = [], [], [], []
    for j, (k, hp, size) in enumerate(fresh):
        pad = hp % ALIGN
        sizes.append(size + pad)
        places.append((k, j, pad))
        if maps[k][1]:
            tos.append((j, pad, hp, size))
        if maps[k][2]:
            backs.append((j, pad, hp, size))
    backs.reverse()
    return sizes, tos, backs, tuple(places)


def _withdraw(dm, rec, found) -> None:
    """The construct's new rows could not be prepared: give back the references
    it took, take its reservation (or the rows it was published as) out of the
    table and wake who waits for them."""
    with dm.lock:
        _undo(found)
        if rec.entries is None:
            dm.table.private.remove(rec)
            dm.table.unreserved(rec.marks)
        else:
            for e in rec.entries:
                if e.live:
                    dm.table.remove(e)
                e.pending = False
            if dm.waiting:
                dm.cv.notify_all()


def _launch_failed(v, dm, rec, lease) -> None:
    """The launch failed: the new rows enter the table with their construct's
    reference, as the general code leaves them, and own their blocks."""
    keep = []
    table = dm.table
    with dm.lock:
        if rec.entries is None:
            table.private.remove(rec)
            names = v[W_NAMES_P]
            for j, (k, hp, size) in enumerate(rec.fresh):
                i = rec.maps[k][0]
                table.insert(MapEntry(v[HEAD + i], hp, hp + size, rec.tgts[k],
                                      lease.ptrs[j], 1, 0,
                                      name=(names, i) if names else 0))
                keep.append(j)
            table.unreserved(rec.marks)     # (after the inserts moved the stamp)
        else:
            for j, e in enumerate(rec.entries):
                if e.live:
                    e.leased = False
                    keep.append(j)
    _release(lease, keep)


def _resolve(table, rec) -> list[int]:
    """The end of a kernel construct whose rows were published (table lock held):
    its ``ends`` on them are over; a row nobody holds goes (its block stays the
    construct's), a row another thread holds or ends stays and keeps its block.
    Returns the lease indices of the blocks rows took over."""
    adopted = []
    ended = rec.ended
    for j, e in enumerate(rec.entries):
        if ended is not None and ended[j]:
            e.ends -= 1
        if not e.live:
            continue
        if e.total == 0 and e.ends == 0:
            table.remove(e)
        else:
            e.leased = False
            adopted.append(j)
    return adopted


def _release(lease, keep=()) -> None:
    """Give a kernel construct's blocks back to the pool, the last first (those in
    ``keep``, indices, now belong to rows)."""
    try:
        lease.release(keep or ())
    except OffloadError:
        pass


def _first(item):
    return item[0]


def _undo(found) -> None:
    """Give back the references a construct's begin took."""
    for ent in found:
        if ent is not None:
            ent.dec(False)


def _disjoint(fresh) -> bool:
    """No two of the ``(k, hp, size)`` ranges overlap."""
    spans = sorted((hp, hp + size) for _k, hp, size in fresh)
    end = spans[0][1]
    for b, e in spans[1:]:
        if b < end:
            return False
        end = e
    return True


__all__ = ["end_orphans", "keep_failed", "repeat_rows", "target"]
