"""The mapping side of one OpenMP device: the operations over its mapping table.

Mirrors libomptarget 16 ``device.cpp`` / ``device.h`` (``DeviceTy``):
``DeviceTy::getTargetPointer`` (allocate, copy ``to`` when new or ``always``, "explicit
extension not allowed", ``present``, unified shared memory), ``getTgtPtrBegin``
(``delete`` resets, ``release`` decrements; a pointer that is not mapped keeps its host
value, OpenMP 5.1/5.2), ``associatePtr`` / ``disassociatePtr``, ``eraseMapEntry``, the
permanent rows of declare-target globals (``initLibrary``: infinite reference count)
and the INFO traces (``Mapping exists``, ``Creating new map entry``, ``Removing map
entry``, the table dump) in the words of the program's release (19.1 and 22.1 add
``TgtAllocBegin=``, a line for unified shared memory and ``table empty``:
:class:`~offload_shim.interposer.llvm.profile.RuntimeProfile`).  The rows and the
table (``HostDataToTargetTy``, ``HostDataToTargetMap``, ``lookupMapping``) are
:mod:`.maptable`'s; the copies (``submitData`` / ``retrieveData``, the shadow
pointers) :mod:`.transfer`'s.  Device memory comes from :meth:`Device.alloc` /
:meth:`Device.free` (the pool).

Threads (libomptarget 16 ``DeviceTy::DataMapMtx``, the ``HostDataToTargetMap``
accessor of ``device.h``, and the per-entry states of ``HostDataToTargetTy``): each
:class:`DeviceMapper` has one lock, :attr:`DeviceMapper.lock`, held for the look-ups,
the reference counts, the insertion and the removal of rows and the shadow pointers --
never across a plugin call.  Allocations and copies run after it is released, as
``getTargetPointer`` releases the table before ``submitData``; a row whose device
memory or first ``to`` copy is still being made by the thread that created it is
``pending``, and any other thread that needs its device copy waits for it (on
:attr:`DeviceMapper.cv`) and then looks the range up again (libomptarget: the entry's
own lock, taken before the table lock is dropped).  A row whose last reference a
construct dropped stays in the table while that construct copies it back (``ends``,
libomptarget's delayed deletion, ``HostDataToTargetTy::setDeleteThreadId`` /
``DataEndThreadCount``); the last construct out removes it, unless another thread took
a new reference meanwhile, which keeps it (and its device data).  Look-ups that only
ask (``omp_target_is_present``) never wait.
"""

from __future__ import annotations

import contextlib
import threading

from ...abi import clang as _clang
from ...abi import interposer as _abi
from ...errors import OffloadError
from ...records import FieldsRepr
from . import diag
from .maptable import _INF, MapEntry, MappingTable
from .profile import LIBOMPTARGET_16
from .transfer import DataTransfers
OMP_REQ_UNIFIED_SHARED_MEMORY = 0x008
#: the offload policy, libomptarget 16 device.h / libomp kmp.h ``kmp_target_offload_kind``
#: (``tgt_disabled``, ``tgt_default``, ``tgt_mandatory``)
TGT_DISABLED, TGT_DEFAULT, TGT_MANDATORY = 0, 1, 2


def usm_pointers_written(host_runtime: int, plugin_generation: str) -> bool:
    """Whether, under ``requires unified_shared_memory``, the device reference pointer
    of each declare-target global is pointed at the host global when the image is
    loaded (:meth:`DeviceMapper.map_globals`), for a program linking libomptarget
    ``host_runtime`` (16, 19, 22) on a plugin of ``plugin_generation``
    (``Plugin.generation``).  libomptarget 19.1 and 22.1 do it themselves
    (``PluginManager::loadImagesOntoDevice``), whatever the plugin; libomptarget 16
    leaves it to the plugin: the LLVM 16 nextgen plugins do it in ``load_binary``
    (``GenericDeviceTy::registerGlobalOffloadEntry``, with the ``init_requires``
    flags), the classic x86_64 plugin (and LLVM 14's) never does, so such a program's
    first kernel that reads a global follows a null pointer (SIGSEGV under
    ``LIBOMPTARGET_NEXTGEN_PLUGINS=0``, checked on Debian 16.0.6).  The bundled
    plugin's LLVM view stands for a nextgen one.

    A per-release difference: to move into the runtime profile
    (``offload_shim/interposer/llvm/profile.py``) when it lands."""
    if host_runtime >= 19:
        return True
    return plugin_generation not in ("llvm16-classic", "llvm14")


class MapError(Exception):
    """A construct cannot be performed (libomptarget returned ``OFFLOAD_FAIL``; its
    diagnostic lines are already printed)."""


class TargetPointer(FieldsRepr):
    """``TargetPointerResultTy``: ``tgt`` (device address, or the host address for
    unified shared memory and pointers that are not mapped; 0 = none), ``entry``,
    ``is_new``, ``is_host`` (unified shared memory), ``present``, ``is_last``."""
    _fields = ("tgt", "entry", "is_new", "is_host", "present", "is_last")
    __slots__ = _fields

    def __init__(self, tgt: int = 0, entry: MapEntry | None = None, is_new: bool = False,
                 is_host: bool = False, present: bool = True,
                 is_last: bool = False) -> None:
        self.tgt = tgt
        self.entry = entry
        self.is_new = is_new
        self.is_host = is_host
        self.present = present
        self.is_last = is_last


class DeviceMapper(DataTransfers):
    """The mapping side of one OpenMP device (libomptarget ``DeviceTy``): its
    :class:`~offload_shim.Device` (``device``), its OpenMP device ``number``, its
    :class:`MappingTable` (``table``) and the operations of ``device.cpp`` over them.
    ``requires`` returns the ``__tgt_register_requires`` flags in force; ``profile``
    the :class:`~offload_shim.interposer.llvm.profile.RuntimeProfile` of the program's
    release (its INFO lines).

    ``lock`` (an RLock, libomptarget 16 ``DeviceTy::DataMapMtx``) guards ``table``,
    the rows' counts and states, ``retired`` and ``ctors_done``' readers; it is held
    only while those change, never across a plugin call (allocations, copies, frees
    and launches run without it).  ``cv`` (a Condition on ``lock``) wakes the threads
    that wait for a ``pending`` row; ``waiting`` counts them.  ``lib_key``: what
    ``initLibrary`` last ran for (the interposer's, under its registration lock)."""

    def __init__(self, device, number: int = 0, requires=lambda: 0,
                 profile=lambda: LIBOMPTARGET_16):
        self.device = device
        self.number = number
        self.table = MappingTable(number)
        self.retired: list[MapEntry] = []       # global rows of unregistered images
        self._requires = requires
        self._profile = profile
        self.ctors_done: set[int] = set()       # descriptors whose ctors ran here
        self.lock = threading.RLock()
        self.cv = threading.Condition(self.lock)
        self.waiting = 0
        self.lib_key = None
        #: id of a :data:`~offload_shim.interposer.llvm.profile.FIXED_UPSTREAM` bug -> how
        #: many times a construct met it (:meth:`note_fixed_upstream`)
        self.fixed_upstream: dict[str, int] = {}

    @property
    def usm(self) -> bool:
        return bool(self._requires() & OMP_REQ_UNIFIED_SHARED_MEMORY)

    @property
    def profile(self):
        """The :class:`~offload_shim.interposer.llvm.profile.RuntimeProfile` in force."""
        return self._profile()

    def _info(self, flags: int, text: str) -> None:
        diag.info(flags, self.number, text)

    def note_fixed_upstream(self, bug: str) -> bool:
        """A construct met ``bug`` (an id of
        :data:`~offload_shim.interposer.llvm.profile.FIXED_UPSTREAM`), where this mapper
        follows the upstream fix: counted in :attr:`fixed_upstream` when the
        program's release has the bug (its profile's ``fixed_upstream``), so that
        ``offload-shim run --report`` and ``offload-shim compare`` can name why the
        program's own runtime gives another result.  Prints nothing.  Returns
        whether it was counted."""
        if bug not in self.profile.fixed_upstream:
            return False
        with self.lock:
            self.fixed_upstream[bug] = self.fixed_upstream.get(bug, 0) + 1
        return True

    # -- row states ------------------------------------------------------------------
    def wait_ready(self, ent: MapEntry) -> None:
        """Wait (``lock`` held, released meanwhile) until ``ent`` is no longer pending;
        the caller then looks its range up again (the row may have been withdrawn).
        Counts itself in :attr:`waiting` before it reads ``pending`` (see
        :meth:`settle`)."""
        self.waiting += 1
        try:
            while ent.pending:
                self.cv.wait()
        finally:
            self.waiting -= 1

    def settle(self, entries) -> None:
        """The rows ``entries`` (made pending by this thread) are ready: clear their
        ``pending`` state and wake the threads that wait for them.  Without the lock
        unless someone waits: a waiter counts itself (:attr:`waiting`, under the lock)
        before it reads ``pending``, this clears ``pending`` before it reads
        ``waiting`` -- under the GIL one of the two sees the other's write."""
        for ent in entries:
            ent.pending = False
        if self.waiting:
            with self.lock:
                self.cv.notify_all()

    def withdraw(self, entries) -> None:
        """Remove the pending rows ``entries`` this thread created (their allocation
        or first copy failed before anyone could use them) and wake their waiters."""
        with self.lock:
            for ent in entries:
                if ent.live:
                    self.table.remove(ent)
                ent.pending = False
            if self.waiting:
                self.cv.notify_all()

    # -- device.cpp: getTargetPointer / getTgtPtrBegin ----------------------------------
    def get_target_pointer(self, hp, base, size, *, to=False, always=False, implicit=False,
                           update_ref=True, close=False, present=False, hold=False,
                           padding=0, name=0) -> TargetPointer:
        """``getTargetPointer``: look up ``[hp, hp+size)``, take a reference, allocate
        (``padding`` extra bytes before it) and copy ``to`` as libomptarget 16 does.
        ``TargetPointer.tgt`` is 0 when the mapping failed (its MESSAGE printed).
        The look-up, the count and a new row happen under :attr:`lock`; the
        allocation and the copy after it is released, the row ``pending`` meanwhile
        (another thread that finds it waits, then looks again).  Raises what
        :meth:`Device.alloc` raises (OffloadError), the new row withdrawn."""
        table = self.table
        mine = None                             # the row this call made pending
        new = False
        with self.lock:
            while True:
                ent, contained, before, after = table.lookup(hp, size)
                if ent is not None and ent.pending and (contained or implicit):
                    self.wait_ready(ent)
                    continue
                break
            r = TargetPointer(entry=ent)
            if table.padded and not (contained or before or after) \
                    and table.in_padding(hp, size):
                self.note_fixed_upstream("partial-struct-padding")
            if contained or ((before or after) and implicit):
                if update_ref:
                    ent.inc(hold)
                    action = " (incremented)"
                else:
                    r.is_new = ent.total == 1
                    action = " (update suppressed)"
                r.tgt = ent.tgt + (hp - ent.begin)
                self._info(diag.INFO_MAPPING_EXISTS,
                           f"Mapping exists{' (implicit)' if implicit else ''} with "
                           f"HstPtrBegin={diag.ptr(hp)}, TgtPtrBegin={diag.ptr(r.tgt)}, "
                           f"Size={size}, DynRefCount={MapEntry.count_str(ent.dyn)}"
                           f"{'' if hold else action}, HoldRefCount="
                           f"{MapEntry.count_str(ent.hold)}{action if hold else ''}, "
                           f"Name={diag.name_of(name)}")
                if r.tgt and to and (r.is_new or always) and size:
                    ent.pending = True          # the copy below: others wait for it
                    mine = ent
            elif before or after:
                diag.message(f"explicit extension not allowed: host address specified is "
                             f"{diag.ptr(hp)} ({size} bytes), but device allocation maps to "
                             f"host at {diag.ptr(ent.begin)} ({ent.end - ent.begin} bytes)")
                if present:
                    diag.message("device mapping required by 'present' map type modifier "
                                 f"does not exist for host address {diag.ptr(hp)} "
                                 f"({size} bytes)")
            elif self.usm and not close:
                if size:
                    r.present, r.is_host, r.tgt = False, True, hp
                    if self.profile.usm_info:
                        self._info(diag.INFO_MAPPING_CHANGED,
                                   f"Return HstPtrBegin {diag.ptr(hp)} Size={size} for "
                                   "unified shared memory")
            elif present:
                diag.message("device mapping required by 'present' map type modifier does "
                             f"not exist for host address {diag.ptr(hp)} ({size} bytes)")
            elif size:
                r.is_new = new = True
                ent = mine = MapEntry(base, hp, hp + size, 0, 0, 0 if hold else 1,
                                      1 if hold else 0, name=name)
                ent.pending = True
                if padding and "partial-struct-padding" in self.profile.fixed_upstream:
                    # libomptarget 16 registers [hp - padding, hp + size): a row in
                    # the padding would make it fail ("explicit extension")
                    if any(table.lookup(hp - padding, padding)[1:]):
                        self.note_fixed_upstream("partial-struct-padding")
                    table.padded[hp] = padding
                table.insert(ent)
                r.entry = ent
            else:
                r.present = False
                r.entry = None
        try:
            if new:
                try:
                    ptr = self.device.alloc(size + padding)
                except BaseException:
                    self.withdraw((ent,))
                    raise
                if not ptr:
                    self.withdraw((ent,))
                    return TargetPointer(present=True)
                ent.alloc, ent.tgt = ptr, ptr + padding
                r.tgt = ent.tgt
                alloc = (f"TgtAllocBegin={diag.ptr(ptr)}, "
                         if self.profile.alloc_begin_info else "")
                self._info(diag.INFO_MAPPING_CHANGED,
                           f"Creating new map entry with HstPtrBase={diag.ptr(base)}, "
                           f"HstPtrBegin={diag.ptr(hp)}, {alloc}"
                           f"TgtPtrBegin={diag.ptr(ent.tgt)}, "
                           f"Size={size}, DynRefCount={MapEntry.count_str(ent.dyn)}, "
                           f"HoldRefCount={MapEntry.count_str(ent.hold)}, "
                           f"Name={diag.name_of(name)}")
            if r.tgt and not r.is_host and to and (r.is_new or always) and size:
                try:
                    if self.to_device(hp, r.tgt, size, r.entry):
                        # attached pointers written again after the copy: the
                        # release may leave the host pointer there (profile)
                        self.note_fixed_upstream(
                            "always-pointer-member-reattach" if always
                            else "struct-copy-over-attached-pointer")
                except OffloadError:
                    diag.report("Copying data to device failed.")
                    r.tgt = 0
        finally:
            if mine is not None:
                self.settle((mine,))
        return r

    def get_tgt_ptr_begin(self, hp, size, *, update_ref=False, hold=False,
                          must_contain=False, force=False, wait=True) -> TargetPointer:
        """``getTgtPtrBegin``: the device address of ``[hp, hp+size)``; with
        ``update_ref`` drop a reference (``force``: reset first, the ``delete`` map
        type).  Not mapped: ``present`` False and ``tgt`` = ``hp`` (the host value).
        When this drops the last reference the row's ``ends`` grows by one: the
        caller ends it (:meth:`end_rows`) -- libomptarget's delayed deletion.
        ``wait``: wait for a pending row first (False: answer at once, for
        ``omp_target_is_present``)."""
        with self.lock:
            while True:
                ent, contained, before, after = self.table.lookup(hp, size)
                hit = ent is not None and (contained or (not must_contain
                                                         and (before or after)))
                if hit and wait and ent.pending:
                    self.wait_ready(ent)
                    continue
                break
            if hit:
                r = TargetPointer(entry=ent)
                r.is_last = ent.should_remove(hold, after_reset=force,
                                              claim=update_ref)
                if force:
                    ent.reset(hold)
                if not update_ref:
                    action = " (update suppressed)"
                elif r.is_last:
                    ent.dec(hold)
                    ent.ends += 1
                    action = " (reset, delayed deletion)" if force else \
                        " (decremented, delayed deletion)"
                else:
                    ent.dec(hold)
                    action = " (decremented)"
                r.tgt = ent.tgt + (hp - ent.begin)
                self._info(diag.INFO_MAPPING_EXISTS,
                           f"Mapping exists with HstPtrBegin={diag.ptr(hp)}, "
                           f"TgtPtrBegin={diag.ptr(r.tgt)}, Size={size}, DynRefCount="
                           f"{MapEntry.count_str(ent.dyn)}{'' if hold else action}, "
                           f"HoldRefCount={MapEntry.count_str(ent.hold)}"
                           f"{action if hold else ''}")
                return r
            if self.table.padded and self.table.in_padding(hp, size):
                self.note_fixed_upstream("partial-struct-padding")
        if self.usm:
            return TargetPointer(tgt=hp, is_host=True, present=False)
        return TargetPointer(tgt=hp, present=False)

    def end_rows(self, counted) -> None:
        """The rows whose last reference a construct dropped (one item per ``ends``
        it added) are no longer being ended by it (``postProcessingTargetDataEnd``
        after an error: nothing is removed)."""
        if counted:
            with self.lock:
                for ent in counted:
                    ent.ends -= 1

    def is_present(self, hp: int) -> bool:
        """``omp_target_is_present`` / ``omp_get_mapped_ptr`` lookup (1 byte); never
        waits."""
        return self.get_tgt_ptr_begin(hp, 1, wait=False).present

    # -- device.cpp: associatePtr / disassociatePtr ----------------------------------------
    def associate(self, hp: int, tgt: int, size: int) -> bool:
        """``associatePtr``: a row with an infinite count; re-associating the same
        range with the same device address is a no-op.  False (REPORT printed) for a
        different association of the same host address."""
        with self.lock:
            ent = self.table.find(hp)
            if ent is not None:
                if ent.end == hp + size and ent.tgt == tgt:
                    return True
                diag.report("Not allowed to re-associate a different device ptr+offset "
                            "with the same host ptr")
                return False
            self.table.insert(MapEntry(hp, hp, hp + size, tgt, None, _INF, 0))
            return True

    def disassociate(self, hp: int) -> bool:
        """``disassociatePtr``: remove a row made by :meth:`associate`.  False
        (REPORT printed) when there is none or it is not an association."""
        with self.lock:
            ent = self.table.find(hp)
            if ent is None:
                diag.report("Association not found")
                return False
            if ent.hold:
                diag.report("Trying to disassociate a pointer with a non-zero hold "
                            "reference count")
                return False
            if ent.infinite and ent.owner is None:
                self.table.remove(ent)
                return True
            diag.report("Trying to disassociate a pointer which was not mapped via "
                        "omp_target_associate_ptr")
            return False

    # -- rows -----------------------------------------------------------------------
    def remove_row(self, ent: MapEntry, size: int) -> int:
        """``eraseMapEntry`` (``lock`` held): the INFO line, the row out of the table;
        returns the device pointer the caller frees after releasing the lock
        (``deallocTgtPtrAndEntry``; 0 for a row without memory of its own)."""
        self._info(diag.INFO_MAPPING_CHANGED,
                   f"Removing map entry with HstPtrBegin={diag.ptr(ent.begin)}, "
                   f"TgtPtrBegin={diag.ptr(ent.tgt)}, Size={size}, "
                   f"Name={diag.name_of(ent.name)}")
        self.table.remove(ent)
        return ent.alloc if ent.alloc and not ent.leased else 0

    def erase(self, ent: MapEntry, size: int) -> None:
        """``eraseMapEntry`` + ``deallocTgtPtrAndEntry``: remove the row, free its
        device memory (not for unified shared memory host pointers)."""
        with self.lock:
            ptr = self.remove_row(ent, size)
        if ptr:
            self.device.free(ptr)

    def map_globals(self, images, usm_pointers: bool = False) -> None:
        """Declare-target globals of the images loaded in the device that have no rows
        yet: permanent rows (infinite reference count), libomptarget ``initLibrary``
        (16, omptarget.cpp) / ``PluginManager::loadImagesOntoDevice`` (19.1, 22.1).

        * an indirect function entry (flag ``OMP_DECLARE_TARGET_INDIRECT``, 0x8:
          ``begin declare target indirect``, clang 19+) names a device global that
          holds the device function's address: the row maps the host function to that
          address, read from the device (libomptarget 19.1 / 22.1 "follow the
          indirection and map the actual target", llvm-project PR #71462, LLVM 18), so
          a function pointer passed to a region as a pointer (clang 19's ``firstprivate``
          of a function pointer: map type ``target_param``, size 0) is translated to
          the device function, not to the global holding it;
        * ``usm_pointers`` (``requires unified_shared_memory`` in force and the
          runtime the program links sets them, :func:`usm_pointers_written`): every
          other global's ``size`` bytes are copied from the host entry to the device
          global before its row is made.  Under unified shared memory clang makes a
          declare-target global a reference pointer (``NAME_decl_tgt_ref_ptr``, whose
          host copy holds the host global's address), so the device's reference
          pointer then points at the host global (libomptarget 19.1 / 22.1
          ``loadImagesOntoDevice`` "Failed to write symbol for USM"; LLVM 16 nextgen
          plugins ``GenericDeviceTy::registerGlobalOffloadEntry``).  Indirect entries
          are left alone, as libomptarget 22.1 does: 19.1 writes them too, which
          faults on the read-only global (the program dies at its first construct).

        The plugin calls (the reads and writes) run before the table's lock is taken;
        the caller holds the interposer's registration lock (``initLibrary`` runs under
        libomptarget's ``PendingGlobalsMtx``).  Raises OffloadError (a copy failed) and
        NotMappedError (an entry the device did not load)."""
        dev = self.device
        loaded = dev.loaded_images
        with self.lock:
            owners = {id(e.owner) for e in self.table.rows() if e.owner is not None}
        todo = [img for img in images if img in loaded and id(img) not in owners]
        rows = []
        for img in todo:
            for entry, haddr in zip(img.entries, img.host_addresses()):
                if entry.is_kernel:
                    continue
                tgt = dev.translate(haddr)
                if entry.flags & _clang.OMP_DECLARE_TARGET_INDIRECT:
                    cell = _abi.HostCell(0)
                    dev.retrieve_raw(cell.address, tgt, 8)
                    tgt = _abi.read_pointer(cell.address)
                elif usm_pointers:
                    dev.submit_raw(tgt, haddr, entry.size)
                rows.append((img, entry, haddr, tgt))
        if not rows:
            return
        with self.lock:
            table = self.table
            for img, entry, haddr, tgt in rows:
                ent, _contained, _, _ = table.lookup(haddr, entry.size)
                if ent is None:
                    table.insert(MapEntry(haddr, haddr, haddr + entry.size, tgt, None,
                                          _INF, 0, owner=img, name=entry.name))

    def drop_image(self, image) -> None:
        """Remove the global rows of an unregistered image.  libomptarget 16 keeps
        them (``RTLsTy::unregisterLib`` erases no ``HostDataToTargetMap`` row), which
        shows only in the table dump at exit: when INFO lines may be printed
        (:func:`diag.tracing_possible`) they are remembered in :attr:`retired` for
        that dump, without their image (whose bytes go with the unregistration);
        otherwise nothing is kept."""
        keep = diag.tracing_possible()
        with self.lock:
            for e in [e for e in self.table.rows() if e.owner is image]:
                self.table.remove(e)
                if keep:
                    e.owner = None
                    self.retired.append(e)

    def snapshot(self) -> list[MapEntry]:
        """The rows now (a copy of the list; the rows themselves are live)."""
        with self.lock:
            return list(self.table.rows())

    def table_lines(self, loc_info: "diag.SourceInfo", retired: bool = False) -> list[str]:
        """``dumpTargetPointerMappings``'s lines for this table, without the ``... device
        N info: `` prefix: the heading with ``loc_info``'s place, the column titles, one
        line per row (host and device address, size, dynamic and hold counts, the
        declaration); ``[]`` when the table is empty.  ``retired``: with the rows
        libomptarget would still hold (the ``~DeviceTy`` dump at exit)."""
        with self.lock:
            rows = list(self.table.rows())
            if retired and self.retired:
                rows = sorted(rows + self.retired, key=lambda e: e.begin)
        if not rows:
            return []
        out = [f"OpenMP Host-Device pointer mappings after block at {loc_info.filename}:"
               f"{loc_info.line}:{loc_info.column}:",
               f"{'Host Ptr':<18} {'Target Ptr':<18} Size (B) DynRefCount HoldRefCount "
               "Declaration"]
        for e in rows:
            si = diag.SourceInfo.of_name(e.name)
            out.append(f"{diag.ptr(e.begin)} {diag.ptr(e.tgt)} {e.end - e.begin:<8} "
                       f"{MapEntry.count_str(e.dyn):<11} {MapEntry.count_str(e.hold):<12} "
                       f"{si.name} at {si.filename}:{si.line}:{si.column}")
        return out

    def dump(self, loc_info: "diag.SourceInfo", retired: bool = False) -> None:
        """``dumpTargetPointerMappings``: the table as INFO lines (:meth:`table_lines`);
        an empty table prints nothing (16) or ``OpenMP Host-Device pointer mappings
        table empty`` (19.1, 22.1: ``RuntimeProfile.dump_empty_tables``)."""
        lines = self.table_lines(loc_info, retired)
        if not lines and self.profile.dump_empty_tables:
            lines = ["OpenMP Host-Device pointer mappings table empty"]
        for text in lines:
            diag.info(diag.INFO_ALL, self.number, text)

    def release_all(self) -> None:
        """Free the device memory of every row and empty the table (interposer close;
        no construct is in flight then)."""
        with self.lock:
            ptrs = [e.alloc for e in self.table.rows() if e.alloc and not e.leased]
            self.table.clear()
        for p in ptrs:
            with contextlib.suppress(OffloadError):
                self.device.free(p)


__all__ = ["DeviceMapper", "MapError", "TargetPointer", "usm_pointers_written"]
