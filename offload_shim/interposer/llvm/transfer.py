"""The copies of one OpenMP device's mapping side: ``submitData`` / ``retrieveData``
(libomptarget 16 ``device.cpp``, with their DATA_TRANSFER trace) and the shadow
pointers of ``ptr_and_obj`` maps (libomptarget 16 ``omptarget.cpp`` ``targetDataBegin``
"Update pointer", ``targetDataEnd`` / ``targetDataUpdate`` restoring the host values:
``ShadowPtrMap`` of ``HostDataToTargetTy``).

A copy for a row goes through the row's block (:meth:`Device.submit_in` /
:meth:`Device.retrieve_in`: checked against that block only), any other (a global's
row, an associated pointer, a shadow pointer) through :meth:`Device.submit_raw` /
:meth:`Device.retrieve_raw`.
"""

from __future__ import annotations

from ...abi import interposer as _abi
from . import diag


def _row_block(entry, tgt: int, size: int) -> int:
    """The device block (``entry.alloc``) a copy of ``size`` bytes at ``tgt`` goes
    through when it lies in the device range of the row ``entry`` (which lies in the
    row's allocation); 0 otherwise: no row, a row without memory of its own (a global,
    an associated pointer), or a copy outside the row (the trace's row is not always
    the copied one)."""
    if entry is None or not entry.alloc:
        return 0
    if entry.tgt <= tgt and tgt + size <= entry.tgt + (entry.end - entry.begin):
        return entry.alloc
    return 0



class DataTransfers:
    """The copy operations of :class:`~.mapping.DeviceMapper` (its base): they use its
    ``device``, ``table``, ``lock`` (held only for the look-ups, never across a
    copy) and ``_info``."""

    def _copy_info(self, h2d: bool, src: int, dst: int, size: int, entry) -> None:
        """The DATA_TRANSFER line of ``submitData``/``retrieveData`` (LLVM 16
        device.cpp): the name is that of the row ``lookupMapping`` of the host range
        ends on (:meth:`~.maptable.MappingTable.lookup_raw`), whatever row the caller copies
        for."""
        if not diag.info_level() & diag.INFO_DATA_TRANSFER:
            return
        with self.lock:
            entry = self.table.lookup_raw(src if h2d else dst, size)[0]
            name = diag.name_of(entry.name if entry is not None else 0)
        if h2d:
            text = (f"Copying data from host to device, HstPtr={diag.ptr(src)}, "
                    f"TgtPtr={diag.ptr(dst)}, Size={size}, Name={name}")
        else:
            text = (f"Copying data from device to host, TgtPtr={diag.ptr(src)}, "
                    f"HstPtr={diag.ptr(dst)}, Size={size}, Name={name}")
        self._info(diag.INFO_DATA_TRANSFER, text)

    def submit(self, tgt: int, hp: int, size: int, entry=None) -> None:
        """``submitData`` (with its DATA_TRANSFER trace).  Through the block of
        ``entry`` when the copy lies in that row (:func:`_row_block`), else through
        a search of the device's blocks."""
        self._copy_info(True, hp, tgt, size, entry)
        block = _row_block(entry, tgt, size)
        if block:
            self.device.submit_in(block, tgt, hp, size)
        else:
            self.device.submit_raw(tgt, hp, size)

    def retrieve(self, hp: int, tgt: int, size: int, entry=None) -> None:
        """``retrieveData`` (with its DATA_TRANSFER trace); the block as :meth:`submit`."""
        self._copy_info(False, tgt, hp, size, entry)
        block = _row_block(entry, tgt, size)
        if block:
            self.device.retrieve_in(block, hp, tgt, size)
        else:
            self.device.retrieve_raw(hp, tgt, size)

    def _shadows_in(self, hp: int, size: int) -> list:
        """The shadow pointers inside ``[hp, hp+size)``: (host address, (host value,
        device address, device value))."""
        shadow = self.table.shadow
        if not shadow:
            return []
        with self.lock:
            return [(a, v) for a, v in shadow.items() if hp <= a < hp + size]

    def to_device(self, hp, tgt, size, entry=None) -> int:
        """Copy host -> device, keeping attached device pointers inside the range
        (written again after the copy); returns how many there were."""
        self.submit(tgt, hp, size, entry)
        shadows = self._shadows_in(hp, size)
        for _addr, (_hv, taddr, tval) in shadows:
            cell = _abi.HostCell(tval)
            self.submit(taddr, cell.address, 8)
        return len(shadows)

    def from_device(self, hp, tgt, size, entry=None) -> None:
        """Copy device -> host, restoring host pointer values the device copy carries
        as device addresses."""
        self.retrieve(hp, tgt, size, entry)
        self.restore_shadows(hp, size)

    def restore_shadows(self, hp: int, size: int) -> None:
        """Write the host values of the attached pointers inside ``[hp, hp+size)``
        back (a copy from the device brought their device values)."""
        for addr, (hval, _ta, _tv) in self._shadows_in(hp, size):
            _abi.write_pointer(addr, hval)

    def attach(self, ptr_host: int, ptr_tgt: int, host_value: int, tgt_value: int,
               entry=None) -> None:
        """Store ``tgt_value`` in the device copy of the pointer at ``ptr_host`` (device
        address ``ptr_tgt``) unless it is already there, remembering the host value
        (a shadow pointer)."""
        with self.lock:
            old = self.table.shadow.get(ptr_host)
            if old is not None and old[2] == tgt_value:
                return
            self.table.shadow[ptr_host] = (host_value, ptr_tgt, tgt_value)
            self.table.touch()
        cell = _abi.HostCell(tgt_value)
        self.submit(ptr_tgt, cell.address, 8, entry)


__all__ = ["DataTransfers"]
