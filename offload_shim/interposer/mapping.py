"""The mapping table of one OpenMP device: host ranges -> device memory.

Mirrors libomptarget 16 ``device.cpp`` / ``device.h``: ``HostDataToTargetTy`` (a row
with a dynamic and a hold reference count, ``decShouldRemove``), ``HostDataToTargetMap``
with ``DeviceTy::lookupMapping`` (contained / extends before / extends after; size-0
lookups), ``DeviceTy::getTargetPointer`` (allocate, copy ``to`` when new or
``always``, "explicit extension not allowed", ``present``), ``getTgtPtrBegin``
(``delete`` resets, ``release`` decrements), shadow pointers of ``ptr_and_obj`` maps
(``ShadowPtrMap``) and the permanent rows of declare-target globals (``initLibrary``:
infinite reference count).  Device memory comes from :meth:`Device.alloc` /
:meth:`Device.free` (the pool); copies go through :meth:`Device.submit_raw` /
:meth:`Device.retrieve_raw`.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_right

from ..abi import interposer as _abi
from ..errors import OffloadError

_INF = float("inf")
_ALIGN = 16     # device copies keep the host address modulo 16 (libomptarget pads by 8)


class MapError(Exception):
    """A construct cannot be performed (libomptarget ``REPORT`` + ``OFFLOAD_FAIL``)."""


class MapEntry:
    """One row (libomptarget ``HostDataToTargetTy``): host ``[begin, end)`` with
    ``base`` (``HstPtrBase``) -> device ``tgt``; ``alloc``: the device pointer to free
    (None for a global of an image); ``dyn``/``hold``: reference counts (``dyn`` is
    infinite for declare-target globals); ``owner``: the OffloadImage of a global."""
    __slots__ = ("base", "begin", "end", "tgt", "alloc", "dyn", "hold", "owner")

    def __init__(self, base, begin, end, tgt, alloc, dyn, hold, owner=None):
        self.base, self.begin, self.end, self.tgt = base, begin, end, tgt
        self.alloc = alloc
        self.dyn, self.hold = dyn, hold
        self.owner = owner

    @property
    def infinite(self) -> bool:
        return self.dyn == _INF

    def inc(self, hold: bool) -> None:
        if self.infinite:
            return
        if hold:
            self.hold += 1
        else:
            self.dyn += 1

    def dec(self, hold: bool) -> None:
        if self.infinite:
            return
        if hold:
            self.hold = max(0, self.hold - 1)
        else:
            self.dyn = max(0, self.dyn - 1)

    def should_remove(self, hold: bool, force: bool) -> bool:
        """``decShouldRemove``: would one decrement (or a reset) drop the last reference."""
        if self.infinite:
            return False
        this, other = (self.hold, self.dyn) if hold else (self.dyn, self.hold)
        if other > 0:
            return False
        return this != 0 if force else this == 1

    def __repr__(self):
        return (f"<map [{self.begin:#x},{self.end:#x}) -> {self.tgt:#x} dyn={self.dyn} "
                f"hold={self.hold}>")


class MappingTable:
    """Host -> device rows of one device, sorted by host begin address
    (libomptarget ``HostDataToTargetMap``, ``lookupMapping``), plus the shadow
    pointers (host address of an attached pointer -> (host value, device address,
    device value)).  Not thread-safe: the interposer's lock guards it."""

    def __init__(self):
        self.entries: list[MapEntry] = []
        self._begins: list[int] = []        # entries[i].begin, for bisect (O(log n))
        self.shadow: dict[int, tuple[int, int, int]] = {}

    def _index(self, hp: int) -> int:
        return bisect_right(self._begins, hp)       # upper_bound on begin

    def lookup(self, hp: int, size: int) -> tuple[MapEntry | None, bool, bool, bool]:
        """(entry, contained, extends_before, extends_after), libomptarget 16 rules
        (size 0: a pointer one past the end or inside [base, end) counts as contained)."""
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
            return (entry if contained else None), contained, False, False
        if up > 0:
            entry = self.entries[up - 1]
            contained = entry.begin <= hp < entry.end and hp + size <= entry.end
            after = hp < entry.end < hp + size
        if not (contained or after) and up < len(self.entries):
            entry = self.entries[up]
            before = hp < entry.begin < hp + size
            after = hp < entry.end < hp + size
        if not (contained or before or after):
            entry = None
        return entry, contained, before, after

    def insert(self, entry: MapEntry) -> None:
        i = self._index(entry.begin)
        self.entries.insert(i, entry)
        self._begins.insert(i, entry.begin)

    def remove(self, entry: MapEntry) -> None:
        i = self._index(entry.begin) - 1          # rows with this begin end at i
        while i >= 0 and self._begins[i] == entry.begin:
            if self.entries[i] is entry:
                del self.entries[i]
                del self._begins[i]
                break
            i -= 1
        for addr in [a for a in self.shadow if entry.begin <= a < entry.end]:
            del self.shadow[addr]

    def clear(self) -> None:
        self.entries.clear()
        self._begins.clear()
        self.shadow.clear()

    def __len__(self):
        return len(self.entries)


class DeviceMapper:
    """The mapping side of one OpenMP device (libomptarget ``DeviceTy``): its
    :class:`~offload_shim.Device` (``device``), its OpenMP device ``number``, its
    :class:`MappingTable` (``table``) and the operations of ``device.cpp`` over them.
    Raises :class:`MapError` where libomptarget reports an error and fails the
    construct."""

    def __init__(self, device, number: int = 0):
        self.device = device
        self.number = number
        self.table = MappingTable()

    # -- device.cpp: getTargetPointer / getTgtPtrBegin ----------------------------------
    def get_target_pointer(self, hp, base, size, *, to, always, implicit, update_ref,
                           close, present, hold):
        """``getTargetPointer``: returns (tgt or 0, entry or None, is_new); raises
        MapError (explicit extension, ``present`` without a mapping, allocation
        failure)."""
        table = self.table
        ent, contained, before, after = table.lookup(hp, size)
        is_new = False
        if contained or ((before or after) and implicit):
            if update_ref:
                ent.inc(hold)
            elif not ent.infinite:
                # allocated with its parent (member_of) in this construct: still new
                is_new = ent.dyn + ent.hold == 1
            tgt = ent.tgt + (hp - ent.begin)
        elif before or after:
            raise MapError(f"explicit extension not allowed: host address specified is "
                           f"{hp:#x} ({size} bytes), but device allocation maps to host at "
                           f"{ent.begin:#x} ({ent.end - ent.begin} bytes)")
        elif present:
            raise MapError("device mapping required by 'present' map type modifier does "
                           f"not exist for host address {hp:#x} ({size} bytes)")
        elif size:
            pad = hp % _ALIGN
            ptr = self.device.alloc(size + pad)
            if not ptr:
                raise MapError(f"device allocation of {size} bytes failed")
            ent = MapEntry(base, hp, hp + size, ptr + pad, ptr, 0 if hold else 1,
                           1 if hold else 0)
            table.insert(ent)
            tgt, is_new = ent.tgt, True
        else:
            return 0, None, False
        if tgt and to and (is_new or always) and size:
            self.to_device(hp, tgt, size)
        return tgt, ent, is_new

    def get_tgt_ptr_begin(self, hp, size, *, update_ref, hold, must_contain, force):
        """``getTgtPtrBegin``: (tgt, is_last, entry) or (0, False, None)."""
        ent, contained, before, after = self.table.lookup(hp, size)
        if ent is not None and (contained or (not must_contain and (before or after))):
            is_last = ent.should_remove(hold, force)
            if force and not ent.infinite:
                if hold:
                    ent.hold = 1
                else:
                    ent.dyn = 1
                ent.dec(hold)
            elif update_ref:
                ent.dec(hold)
            return ent.tgt + (hp - ent.begin), is_last, ent
        return 0, False, None

    def is_present(self, hp: int) -> bool:
        """``omp_target_is_present`` lookup (size 0)."""
        tgt, _l, _e = self.get_tgt_ptr_begin(hp, 0, update_ref=False, hold=False,
                                             must_contain=False, force=False)
        return bool(tgt)

    # -- copies with shadow pointers ----------------------------------------------------
    def to_device(self, hp, tgt, size) -> None:
        """Copy host -> device, keeping attached device pointers inside the range."""
        dev = self.device
        dev.submit_raw(tgt, hp, size)
        for addr, (_hv, taddr, tval) in self.table.shadow.items():
            if hp <= addr < hp + size:
                cell = _abi.HostCell(tval)
                dev.submit_raw(taddr, cell.address, 8)

    def from_device(self, hp, tgt, size) -> None:
        """Copy device -> host, restoring host pointer values the device copy carries
        as device addresses."""
        self.device.retrieve_raw(hp, tgt, size)
        for addr, (hval, _ta, _tv) in self.table.shadow.items():
            if hp <= addr < hp + size:
                _abi.write_pointer(addr, hval)

    def attach(self, ptr_host: int, ptr_tgt: int, host_value: int, tgt_value: int) -> None:
        """Store ``tgt_value`` in the device copy of the pointer at ``ptr_host`` (device
        address ``ptr_tgt``) unless it is already there, remembering the host value
        (a shadow pointer)."""
        old = self.table.shadow.get(ptr_host)
        if old is None or old[2] != tgt_value:
            self.table.shadow[ptr_host] = (host_value, ptr_tgt, tgt_value)
            cell = _abi.HostCell(tgt_value)
            self.device.submit_raw(ptr_tgt, cell.address, 8)

    # -- rows -----------------------------------------------------------------------
    def deallocate(self, entries) -> None:
        """Remove rows whose counts dropped to zero and free their device memory
        (``deallocTgtPtr``)."""
        for ent in entries:
            if ent in self.table.entries and (ent.dyn == 0 and ent.hold == 0):
                self.table.remove(ent)
                if ent.alloc:
                    self.device.free(ent.alloc)

    def map_globals(self, images) -> None:
        """Declare-target globals of the images loaded in the device: permanent rows
        (infinite reference count), libomptarget ``initLibrary``."""
        dev, table = self.device, self.table
        loaded = dev.loaded_images
        for img in images:
            if img not in loaded:
                continue
            if any(e.owner is img for e in table.entries):
                continue
            for entry, haddr in zip(img.entries, img.host_addresses()):
                if entry.is_kernel:
                    continue
                tgt = dev.translate(haddr)
                ent, _contained, _, _ = table.lookup(haddr, entry.size)
                if ent is None:
                    table.insert(MapEntry(haddr, haddr, haddr + entry.size, tgt, None,
                                          _INF, 0, owner=img))

    def drop_image(self, image) -> None:
        """Remove the global rows of an unregistered image."""
        for e in [e for e in self.table.entries if e.owner is image]:
            self.table.remove(e)

    def release_all(self) -> None:
        """Free the device memory of every row and empty the table (interposer close)."""
        for e in list(self.table.entries):
            if e.alloc:
                with contextlib.suppress(OffloadError):
                    self.device.free(e.alloc)
        self.table.clear()


__all__ = ["DeviceMapper", "MapEntry", "MapError", "MappingTable"]
