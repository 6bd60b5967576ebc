"""The rows of one OpenMP device's mapping table: host ranges -> device memory.

Mirrors libomptarget 16 ``device.h`` / ``device.cpp``: ``HostDataToTargetTy`` (a row
with a dynamic and a hold reference count, ``decShouldRemove``, ``resetRefCount``, the
delayed deletion of ``setDeleteThreadId`` / ``DataEndThreadCount``) and
``HostDataToTargetMap`` with ``DeviceTy::lookupMapping`` (contained / extends before /
extends after; size-0 lookups).  The operations over a table (``getTargetPointer``,
``getTgtPtrBegin``, ...) are :class:`~.mapping.DeviceMapper`'s, whose ``lock``
(libomptarget 16 ``DeviceTy::DataMapMtx``) guards every table and row here.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import count as _count

from ...abi import interposer as _abi

_INF = float("inf")
#: the stamps of the tables (MappingTable.stamp_slot): unique over the process
_STAMPS = _count(1)
#: the first word of a reservation's marks that the C side knows by name
#: (:meth:`MappingTable.reserved`)
_NAMED = object()


class MapEntry:
    """One row (libomptarget ``HostDataToTargetTy``): host ``[begin, end)`` with
    ``base`` (``HstPtrBase``) -> device ``tgt``; ``alloc``: the device pointer to free
    (None for a global of an image or an associated pointer); ``dyn``/``hold``:
    reference counts (``dyn`` is infinite for declare-target globals and associated
    pointers); ``owner``: the OffloadImage of a global; ``name``: the address of the
    map name string (0: none), or a global's entry name.

    Thread states (guarded by the owning :attr:`~.mapping.DeviceMapper.lock`):
    ``live`` (in a table), ``pending`` (its creator is still allocating or copying to
    it; ``tgt`` is 0 until the allocation is made), ``ends`` (constructs that dropped
    its last reference and have not finished their end yet: libomptarget 16
    ``HostDataToTargetTy`` ``DataEndThreadCount``), ``leased`` (``alloc`` belongs to a
    kernel construct of the cheap path, :mod:`.plan_target`: whoever removes the row
    must not free it), ``cslot``/``cdev``: the row's slot in the C side's kernel
    repeats and its device's stamp word (:func:`give_slot`; -1: none), so that a repeat
    in flight holds the row: the decisions that a reference is the last
    (:meth:`should_remove`, :meth:`dec_dyn`) ask the C side first; ``orphan``: the
    last such decision found the row held (a repeat's end hands it back:
    :func:`~.plan_target.end_orphans`; until then the general code's
    ``postProcessingTargetDataEnd`` must not remove it at zero); ``marks``: the
    device's stamp before and after the row's insertion (:meth:`MappingTable.remove`
    sets it back when nothing else moved it since); ``made``: the
    :class:`~.pairs.Made` of the ``enter data`` that made it, or None."""
    __slots__ = ("base", "begin", "end", "tgt", "alloc", "dyn", "hold", "owner", "name",
                 "live", "pending", "ends", "leased", "cslot", "cdev", "orphan", "marks",
                 "made")

    def __init__(self, base, begin, end, tgt, alloc, dyn, hold, owner=None, name=0):
        self.base, self.begin, self.end, self.tgt = base, begin, end, tgt
        self.alloc = alloc
        self.dyn, self.hold = dyn, hold
        self.owner = owner
        self.name = name or 0
        self.live = self.pending = self.leased = self.orphan = False
        self.ends = 0
        self.cslot = -1
        self.marks = self.made = None

    @property
    def infinite(self) -> bool:
        return self.dyn == _INF

    @property
    def total(self):
        return self.dyn + self.hold

    def inc(self, hold: bool) -> None:
        if hold:
            if self.hold != _INF:
                self.hold += 1
        elif self.dyn != _INF:
            self.dyn += 1

    def dec(self, hold: bool) -> None:
        if hold:
            if self.hold != _INF:
                self.hold = max(0, self.hold - 1)
        elif self.dyn != _INF:
            self.dyn = max(0, self.dyn - 1)

    def reset(self, hold: bool) -> None:
        """``resetRefCount``: the count becomes 1 (unless infinite)."""
        if hold:
            if self.hold != _INF:
                self.hold = 1
        elif self.dyn != _INF:
            self.dyn = 1

    def should_remove(self, hold: bool, after_reset: bool = False,
                      claim: bool = True) -> bool:
        """``decShouldRemove``: would one decrement (or, after a reset, the reset
        count's decrement) drop the last reference.  After a reset (``delete``) the
        reference of a region running meanwhile does not count either (libomptarget
        16 ``decShouldRemove`` with ``AfterReset``): a kernel repeat's hold does not
        keep the row, not even one already left to it (``orphan``).  ``claim=False``:
        a look-up that drops no reference (the C side is only asked whether a repeat
        holds the row; :func:`_held` would move the device's stamp, stopping its
        repeats)."""
        this, other = (self.hold, self.dyn) if hold else (self.dyn, self.hold)
        if other > 0:
            return False
        if after_reset:
            if this == _INF:
                return False
            self.orphan = False         # nothing is left to a repeat's end
            return True
        if this == 0 and not hold and self.orphan and claim:
            return _stolen(self)
        last = this == 1
        if last and self.cslot >= 0:
            return not (_held(self) if claim else _abi.repeat_held(self.cslot))
        return last

    def dec_dyn(self) -> bool:
        """``decShouldRemove`` and the decrement of the dynamic count in one call (the
        end of a construct without ``delete``): whether it dropped the last reference."""
        dyn = self.dyn
        if dyn == _INF:
            return False
        if dyn == 0 and self.orphan and self.hold <= 0:
            return _stolen(self)
        last = dyn == 1 and self.hold <= 0
        self.dyn = dyn - 1 if dyn > 0 else 0
        if last and self.cslot >= 0:
            return not _held(self)
        return last

    @staticmethod
    def count_str(n) -> str:
        return "INF" if n == _INF else str(int(n))

    def __repr__(self):
        return (f"<map [{self.begin:#x},{self.end:#x}) -> {self.tgt:#x} dyn={self.dyn} "
                f"hold={self.hold}>")


#: token -> the ``enter data`` / ``exit data`` pairs the C side keeps, their rows out of
#: the table or not (:class:`~.pairs.Pair`; :meth:`MappingTable.take_out`)
PAIRS: dict = {}

#: slot -> (generation, row) of the rows the C side's kernel repeats may hold
_SLOTTED: dict[int, tuple[int, MapEntry]] = {}


def _held(entry: MapEntry) -> bool:
    """A decision that ``entry``'s last reference is dropped (table lock held): the
    device's stamp moves on and the C side says whether a kernel repeat holds the row
    (its region's reference, which Python does not count: then it is not the last,
    and the repeat's end hands the row back: :func:`~.plan_target.end_orphans`)."""
    held = _abi.repeat_claim(entry.cslot, entry.cdev, next(_STAMPS))
    entry.orphan = held
    return held


def _stolen(entry: MapEntry) -> bool:
    """A reference dropped from an orphaned row (Python's count at zero, table lock
    held): under libomptarget 16 it is one of the running regions' references (an
    `exit data` beyond the program's `enter data`), the last one when a single repeat
    holds the row -- then the row ends now, as there, and the repeats' ends find it
    gone (``osh_interposer_repeat_steal``)."""
    if entry.cslot < 0:
        return False
    r = _abi.repeat_steal(entry.cslot)
    if r == 1:
        entry.orphan = False
        return True
    return False


def give_slot(entry: MapEntry, table: "MappingTable") -> bool:
    """A slot of the C side's kernel repeats for ``entry``, a row of ``table`` (table
    lock held): whether it has one (False: none free, or no stamp)."""
    if entry.cslot >= 0:
        return True
    if table.stamp_slot < 0 or not entry.live:
        return False
    slot, gen = _abi.repeat_slot_new()
    if slot < 0:
        return False
    entry.cslot = slot
    entry.cdev = table.stamp_slot
    _SLOTTED[slot] = (gen, entry)
    return True


def slot_info(entry: MapEntry) -> tuple[int, int]:
    """``(slot, generation)`` of a row :func:`give_slot` gave one."""
    return entry.cslot, _SLOTTED[entry.cslot][0]


def slotted_row(slot: int, gen: int) -> MapEntry | None:
    """The row of ``slot`` while it has the generation ``gen``, else None."""
    got = _SLOTTED.get(slot)
    return got[1] if got is not None and got[0] == gen else None


def _drop_slot(entry: MapEntry) -> None:
    slot = entry.cslot
    entry.cslot = -1
    got = _SLOTTED.get(slot)
    if got is not None and got[1] is entry:
        del _SLOTTED[slot]
    _abi.repeat_slot_drop(slot)


class MappingTable:
    """Host -> device rows of one device, sorted by host begin address
    (libomptarget ``HostDataToTargetMap``, ``lookupMapping``), plus the shadow
    pointers (host address of an attached pointer -> (host value, device address,
    device value)).  Not thread-safe by itself: its
    :class:`~.mapping.DeviceMapper`'s ``lock`` guards it.

    ``private``: reservations of the cheap path (:mod:`.plan_target`): the rows of a kernel
    construct in flight, kept out of the table while nobody else looks.  Every look-up
    first *publishes* them (each reservation's ``publish(table)`` inserts its rows as
    ordinary :class:`MapEntry` rows), so what a look-up sees is what libomptarget's
    table would hold.

    ``padded``: host begin -> padding bytes of each row made with a partial-struct
    padding, kept only for a program whose release registers that padding as mapped
    host memory (``partial-struct-padding`` in its profile's ``fixed_upstream``), so
    that a look-up libomptarget 16 would have resolved into the padding is noticed
    (:meth:`~.mapping.DeviceMapper.note_fixed_upstream`); a row leaves it when it
    leaves the table.

    ``version``: grows by one with every insertion and removal of a row (and
    :meth:`clear`): while it is unchanged, a look-up of the same range finds the
    same row (the rows' host ranges never change), which lets the cheap path replay
    a region's look-ups (:mod:`.plan_target`).

    ``stamp_slot``: the OpenMP device number whose word of the interposer's stamps
    (:mod:`.repeat`, ``native/interposer_repeat.c``) this table writes, -1 for none (no
    interposer bound when the table was made, or a number past the C side's limit).
    The word gets a value unique over the process when the table is made and with
    every insertion, removal, :meth:`clear`, :meth:`touch` and :meth:`reserved` (under
    the table's lock, as the rest)."""

    def __init__(self, slot: int = -1):
        self.version = 0
        self.stamp_slot = -1
        self._stamps = None
        self._busy = None
        self._out = None
        rs = _abi.repeat_stamps() if slot >= 0 else None
        if rs is not None and slot < rs[1]:
            self.stamp_slot = slot
            self._stamps = rs[0]
            self._stamps[slot] = next(_STAMPS)
            self._busy = _abi.repeat_busy()
            self._out = _abi.repeat_out()
        self.entries: list[MapEntry] = []
        self._begins: list[int] = []        # entries[i].begin, for bisect (O(log n))
        self.shadow: dict[int, tuple[int, int, int]] = {}
        self.private: list = []
        self.padded: dict[int, int] = {}
        # reservations made and not yet ended or published, and the stamps the first
        # of them moved the table's from and to (reserved / unreserved)
        self._nres = 0
        self._res_marks = None

    def publish(self) -> None:
        """Insert the rows of every reservation (see the class docstring)."""
        recs = self.private
        self.private = []
        self._nres = 0                      # (the inserts move the stamp on)
        named = [rec.marks[1] for rec in recs
                 if rec.marks is not None and rec.marks[0] is _NAMED]
        while recs:
            recs.pop().publish(self)
        # the C side forgets them after the inserts moved the stamp (a repeat that
        # finds no reservation then finds the new stamp)
        for name in named:
            _abi.repeat_unreserve(name)

    def rows(self) -> list[MapEntry]:
        """Every row, reservations published first (the list itself: copy it before
        the lock is released)."""
        if self.private:
            self.publish()
        if self._out is not None and self._out[self.stamp_slot]:
            self.take_out()
        return self.entries

    def out(self) -> bool:
        """Whether rows of an ``enter data`` the C side repeated are out of this table
        now (:meth:`take_out` takes them in; ``native/interposer_pair.c``)."""
        return self._out is not None and self._out[self.stamp_slot] != 0

    def take_out(self) -> None:
        """Insert the rows of an ``enter data`` the C side repeated
        (``native/interposer_pair.c``, :mod:`.pairs`: libomptarget's rows that this
        table does not hold yet) as ordinary rows owning their device memory; table
        lock held.  Every look-up calls it first (:meth:`lookup_raw`, :meth:`find`,
        :meth:`rows`), so what a look-up sees is what libomptarget's table holds.
        When the stamp is still the one the repeat left, their insertions chain from
        the stamp before the enter to it (removing them sets it back, as for rows
        made here); a lease of a device deinitialised meanwhile is dropped (its memory
        went with the device)."""
        token = _abi.repeat_take(self.stamp_slot)
        pair = PAIRS.pop(token, None) if token else None
        if pair is None:
            return
        pair.plan.taken += 1
        lease = pair.lease
        if not lease.valid:
            return
        lease.detach()
        stamps = self._stamps
        slot = self.stamp_slot
        chain = stamps[slot] == pair.mid
        prev = pair.before
        last = len(pair.rows) - 1
        ptrs = lease.ptrs
        for j, (base, begin, end, name) in enumerate(pair.rows):
            ent = MapEntry(base, begin, end, ptrs[j], ptrs[j], 1, 0, name=name)
            self.insert(ent)
            if chain:
                nxt = pair.mid if j == last else ent.marks[1]
                ent.marks = (prev, nxt)
                prev = nxt
        if chain:
            stamps[slot] = pair.mid

    def wait_for_repeats(self, hp: int, size: int) -> None:
        """A look-up of host ``[hp, hp+size)`` while kernel repeats of the C side with
        rows of their own are in flight on this device (``native/
        interposer_repeat.c``): rows libomptarget's table would hold, that no
        look-up here can see.  One that meets the range is waited for (table lock
        held: the repeat needs no Python lock), so the look-up comes after that
        construct, as a look-up a moment later would; after a second it gives up
        and answers without them (a kernel that waits for this thread)."""
        _abi.repeat_wait(self.stamp_slot, hp, size)

    def _index(self, hp: int) -> int:
        return bisect_right(self._begins, hp)       # upper_bound on begin

    def lookup(self, hp: int, size: int) -> tuple[MapEntry | None, bool, bool, bool]:
        """(entry, contained, extends_before, extends_after), libomptarget 16 rules
        (size 0: a pointer one past the end or inside [base, end) counts as contained).
        The reservations of :attr:`private` are published only when one of them
        meets or touches the range, or the range is empty (a row whose base is at or
        below ``hp`` holds it): the rows of the others would not change the result
        (unlike :meth:`lookup_raw`'s neighbour), so that host threads running kernel
        constructs with rows of their own at once keep their reservations."""
        private = self.private
        near = size == 0                    # (a row whose base is at or below hp holds it)
        if private and not near:
            hi = hp + size
            near = any(begin <= hi and hp <= begin + n
                       for rec in private for _k, begin, n in rec.fresh)
        entry, contained, before, after = self.lookup_raw(hp, size, near or not private)
        if size == 0:
            return (entry if contained else None), contained, False, False
        if not (contained or before or after):
            entry = None
        return entry, contained, before, after

    def lookup_raw(self, hp: int, size: int, publish: bool = True
                   ) -> tuple[MapEntry | None, bool, bool, bool]:
        """:meth:`lookup` with ``LookupResult.Entry`` as ``lookupMapping`` (LLVM 16
        device.cpp) leaves it: the last row it looked at -- the row below ``hp``, or
        the row above when that one does not hold ``hp`` -- even when neither holds
        the range.  ``submitData``/``retrieveData`` name that row in their
        DATA_TRANSFER lines, so a copy of memory that is not mapped (packed
        first-private arguments, ``omp_target_memcpy`` of a host buffer) shows a
        neighbour's name.  ``publish``: publish the reservations first (False: the
        caller knows none of them meets the range)."""
        if publish and self.private:
            self.publish()
        if self._busy is not None:
            if self._out[self.stamp_slot]:
                self.take_out()
            if self._busy[self.stamp_slot]:
                self.wait_for_repeats(hp, size)
        if not self.entries:
            return None, False, False, False
        up = self._index(hp)
        entry, contained, before, after = None, False, False, False
        if size == 0:
            if up > 0:
                entry = self.entries[up - 1]
                contained = hp < entry.end or hp < entry.base
            if not contained and up < len(self.entries):
                entry = self.entries[up]
                contained = hp >= entry.base
            return entry, contained, False, False
        if up > 0:
            entry = self.entries[up - 1]
            contained = entry.begin <= hp < entry.end and hp + size <= entry.end
            after = hp < entry.end < hp + size
        if not (contained or after) and up < len(self.entries):
            entry = self.entries[up]
            before = hp < entry.begin < hp + size
            after = hp < entry.end < hp + size
        return entry, contained, before, after

    def find(self, hp: int) -> MapEntry | None:
        """The row whose host begin is exactly ``hp``."""
        if self.private:
            self.publish()
        if self._busy is not None:
            if self._out[self.stamp_slot]:
                self.take_out()
            if self._busy[self.stamp_slot]:
                self.wait_for_repeats(hp, 1)
        i = self._index(hp)
        if i > 0 and self.entries[i - 1].begin == hp:
            return self.entries[i - 1]
        return None

    def insert(self, entry: MapEntry) -> None:
        """Put ``entry`` into the table; the stamp moves on (``entry.marks``: the stamp
        before and after, for :meth:`remove`).  Then a kernel repeat of the C side
        with rows of its own meeting the row that started between this thread's
        look-up and the stamp's move (it read the stamp before) is waited for
        (:meth:`wait_for_repeats`; its lock orders the two), so that the row's copies
        come after that construct's, as they would under libomptarget's table lock."""
        i = self._index(entry.begin)
        self.entries.insert(i, entry)
        self._begins.insert(i, entry.begin)
        entry.live = True
        self.version += 1
        stamps = self._stamps
        if stamps is not None:
            slot = self.stamp_slot
            before = stamps[slot]
            after = stamps[slot] = next(_STAMPS)
            entry.marks = (before, after)
            if self._busy is not None:
                _abi.repeat_wait(slot, entry.begin, entry.end - entry.begin)

    def remove(self, entry: MapEntry) -> bool:
        """Take ``entry`` out of the table (and the shadow pointers inside its range);
        False when it was not in it."""
        i = self._index(entry.begin) - 1          # rows with this begin end at i
        found = False
        while i >= 0 and self._begins[i] == entry.begin:
            if self.entries[i] is entry:
                del self.entries[i]
                del self._begins[i]
                found = True
                break
            i -= 1
        entry.live = False
        self.version += 1
        stamps = self._stamps
        if stamps is not None:
            # nothing moved the stamp since the row went in: the table is what it was
            # before it, and so is the stamp (the repeats remembered under it repeat
            # again: a loop of `enter data` and `exit data`, native/interposer_pair.c)
            marks = entry.marks
            slot = self.stamp_slot
            if found and marks is not None and stamps[slot] == marks[1]:
                stamps[slot] = marks[0]
            else:
                stamps[slot] = next(_STAMPS)
            entry.marks = None
        if entry.cslot >= 0:
            _drop_slot(entry)
        if self.shadow:
            for addr in [a for a in self.shadow if entry.begin <= a < entry.end]:
                del self.shadow[addr]
        if self.padded and found:
            self.padded.pop(entry.begin, None)
        return found

    def in_padding(self, hp: int, size: int) -> bool:
        """Whether host ``[hp, hp+size)`` (``hp`` itself for size 0) meets the
        padding before a row of :attr:`padded`: memory libomptarget 16 would have
        found mapped (``targetDataBegin`` moved the row's begin back by it)."""
        end = hp + (size or 1)
        return any(begin - pad < end and hp < begin for begin, pad in self.padded.items())

    def reserved(self, ranges=()):
        """A reservation of host ``ranges`` (``(k, begin, size)``) joined
        :attr:`private` (rows a look-up would publish, that the C side's repeats
        cannot see; table lock held).  The C side is told its ranges
        (:func:`~offload_shim.abi.interposer.repeat_reserve`): its kernel repeats whose
        rows of their own meet them, and its update and pair repeats, go to Python
        while it lasts.  Without room there, the first of reservations that overlap in
        time moves the stamp on instead (the version stays: the rows did not change).
        Returns what :meth:`unreserved` takes: ``(_NAMED, name)``, or ``(before,
        after)``, the stamp before and after that move; None without a stamp."""
        stamps = self._stamps
        if stamps is None:
            return None
        marks = None
        if ranges:
            name = _abi.repeat_reserve(self.stamp_slot, [(hp, size) for _k, hp, size
                                                         in ranges])
            if name:
                marks = (_NAMED, name)
        if marks is None:
            if self._nres == 0:
                slot = self.stamp_slot
                before = stamps[slot]
                self._res_marks = (before, next(_STAMPS))
                stamps[slot] = self._res_marks[1]
            self._nres += 1
            marks = self._res_marks
        # a repeat meeting the ranges that started after this thread's look-ups (no
        # repeat meeting them starts from now on) is waited for, as at an insertion
        for _k, hp, size in ranges:
            self.wait_for_repeats(hp, size)
        return marks

    def unreserved(self, marks) -> None:
        """The reservation whose :meth:`reserved` gave ``marks`` left :attr:`private`
        without being published (its construct ended, its rows never entered the
        table; table lock held).  When it was the last one out and nothing moved the
        stamp since the first one did, the table is what it was before them, and the
        stamp goes back to what it was then -- the constructs the C side remembered
        under it repeat again (a loop of an update and a kernel construct with rows
        of its own; host threads running kernel constructs with rows of their own at
        once).  A :meth:`publish` meanwhile ended every reservation made before it."""
        if marks is not None and marks[0] is _NAMED:
            _abi.repeat_unreserve(marks[1])
            return
        if marks is None or marks is not self._res_marks or self._nres == 0:
            return
        self._nres -= 1
        if self._nres == 0 and self._stamps[self.stamp_slot] == marks[1]:
            self._stamps[self.stamp_slot] = marks[0]

    def touch(self) -> None:
        """Something a look-up's result depends on changed without a row inserted or
        removed (a shadow pointer attached): the stamp moves on."""
        self.version += 1
        if self._stamps is not None:
            self._stamps[self.stamp_slot] = next(_STAMPS)

    def clear(self) -> None:
        self.touch()
        for e in self.entries:
            e.live = False
            if e.cslot >= 0:
                _drop_slot(e)
        self.entries.clear()
        self._begins.clear()
        self.shadow.clear()
        self.padded.clear()

    def __len__(self):
        return len(self.entries)


__all__ = ["MapEntry", "MappingTable", "give_slot", "slot_info", "slotted_row"]
