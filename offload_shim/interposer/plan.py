"""Per-region plans: the cheap path of the constructs compiled code runs most.

Every ``__tgt_target_kernel`` / ``__tgt_target_data_*_mapper`` reaches Python once, as
a frame of 64-bit words that the C bridge fills (``native/interposer.c``, "one crossing
per construct"; layout in :mod:`offload_shim.abi.interposer`, ``FRAME_*``).  This
module serves the frames:

* **plans**: the constant arrays of a construct (map types, and whether it has
  mappers) are decoded once into a :class:`Plan` kept per construct identity (the
  frame kind, the address of its map-type array, its argument count and, for a
  kernel, the region's host pointer).  A plan is only reused while the map types it
  was made from are still the ones passed (compared on every call), so a caller that
  builds its arrays on the stack gets a correct plan too.  The kernel's device entry
  (``Device.translate`` of the region id) is kept in the plan while no library was
  registered or unregistered and the device was not re-initialised.
* **the device check** (libomptarget 16 ``checkDeviceAndCtors``) is the interposer's
  own; its successful answer is kept per device number until a registration, an
  unregistration, ``__tgt_register_requires`` or a re-initialisation of the device.
* **the cheap path** handles the maps compilers emit most -- ``to``, ``from``,
  ``tofrom``, ``alloc``/``release``, ``implicit``, ``target_param`` and by-value
  literals, sizes above 0, no user-defined mapper, no shadow (attached) pointer in
  the device's table, ``requires`` without unified shared memory -- with the
  semantics of :mod:`.omptarget` / :mod:`.launch` / :mod:`.mapping` (libomptarget 16
  ``targetDataBegin`` / ``targetDataEnd`` / ``targetDataUpdate`` / ``target``).
  Anything else, and any construct whose lookups or allocations do not go the plain
  way (an extension of a mapping, a failed allocation or copy before the launch),
  runs the general code of those modules instead: the cheap path first undoes what
  it did (reference counts, new rows and their device memory) and hands the whole
  construct over.  A failure after the point of no return (the launch itself, a copy
  back) is reported exactly like the general code reports it.

Nothing here logs or counts per construct.  ``tests/test_plan.py`` runs the cheap
path and the general code on the same random constructs and compares the tables,
the device memory and the host results.
"""

from __future__ import annotations

import os

from ..abi import clang as _clang
from ..abi import interposer as _abi
from ..errors import OffloadError
from .mapping import MapEntry
from .omptarget import (MAP_FROM, MAP_IMPLICIT, MAP_LITERAL, MAP_MEMBER_OF,
                        MAP_TARGET_PARAM, MAP_TO)

HEAD = _abi.FRAME_HEAD
KERNEL, BEGIN, END, UPDATE = (_abi.FRAME_KERNEL, _abi.FRAME_BEGIN, _abi.FRAME_END,
                              _abi.FRAME_UPDATE)
#: environment variable that turns the cheap path off (``1``)
NO_PLAN_VAR = "OFFLOAD_SHIM_NO_PLAN"
#: map-type bits the cheap path handles; any other bit sends the construct to the
#: general code
SIMPLE_BITS = MAP_TO | MAP_FROM | MAP_TARGET_PARAM | MAP_IMPLICIT | MAP_LITERAL
#: ``requires unified_shared_memory`` (omptarget.h ``OMP_REQ_UNIFIED_SHARED_MEMORY``)
REQ_USM = 0x008
#: libomptarget 16 pads a new allocation only for the combined entry of a partially
#: mapped struct (``getPartialStructRequiredAlignment``; those carry MEMBER_OF members
#: and never take the cheap path): a plain row's device copy starts at its allocation
#: (checked against libomptarget 16: tests/programs/map_alignment.c), so no padding
ALIGN = 1
#: most plans kept (distinct constant map-type arrays of a program are far fewer)
MAX_PLANS = 4096
#: a kernel plan keeps the device memory of its new rows when each block is at most
#: this many bytes (the pool's default threshold), and all plans together at most
#: LEASE_TOTAL bytes; larger rows get and free their memory per construct
LEASE_MAX = 8192
LEASE_TOTAL = 64 << 20
_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1


class Plan:
    """The decoded constant part of one construct.

    ``types``: the map types it was made from (a list, compared on every use);
    ``simple``: the cheap path applies; ``maps``: ``(i, to, from, implicit)`` of
    every argument that is mapped (not a literal), in argument order; ``params``:
    ``(i, k)`` of every kernel argument (``target_param``, not ``member_of``), in
    order, ``k`` its position in ``maps`` (-1 for a literal); ``launcher`` /
    ``entry_key`` / ``implicit``: the kernel's
    :class:`~offload_shim.core.device.KernelLauncher`, what it is valid for and the
    leading arguments of its ``KernelArgsTy`` version; ``lease``: the device memory
    of the rows the kernel creates (:meth:`FastPath._lease`)."""
    __slots__ = ("types", "simple", "maps", "params", "launcher", "entry_key", "implicit",
                 "lease", "lease_dev")

    def __init__(self, kind: int, types: list[int], has_mappers: bool):
        self.types = types
        self.launcher = None
        self.entry_key = None
        self.implicit = ()                      # leading kernel arguments (dyn_ptr)
        self.lease = None                       # device memory of the new rows (kernels)
        self.lease_dev = None
        simple = not has_mappers
        maps, params = [], []
        for i, t in enumerate(types):
            if t & ~SIMPLE_BITS:
                simple = False
            literal = bool(t & MAP_LITERAL)
            if literal and t & (MAP_TO | MAP_FROM):
                simple = False
            if kind == UPDATE and (t & MAP_TO) and (t & MAP_FROM):
                simple = False              # one motion clause per item
            if t & MAP_TARGET_PARAM and not t & MAP_MEMBER_OF:
                params.append((i, -1 if literal else len(maps)))
            if not literal:
                maps.append((i, bool(t & MAP_TO), bool(t & MAP_FROM),
                             bool(t & MAP_IMPLICIT)))
        self.simple = simple
        self.maps = tuple(maps)
        self.params = tuple(params)


class Fallback(Exception):
    """The cheap path cannot serve this construct (nothing of it is left done)."""


class FastPath:
    """Serves construct frames for one :class:`~.interface.Interposer`.

    Wired by the interposer with: ``lock`` (its lock), ``check_device(dev_id, loc)``
    (``checkDeviceAndCtors``: a DeviceMapper or a callback return code),
    ``default_device()``, ``slow_kernel(loc, dev, teams, threads, host_ptr, kargs)``
    and ``slow_data(kind, loc, dev, n, bases, args, sizes, types, names, mappers)``
    (the general code, same signatures as the bridge callbacks), ``failed(kind, exc,
    loc)`` (the return code of a construct that failed after the point of no
    return, as the general code reports it), ``requires()`` (the
    ``__tgt_register_requires`` flags), ``tracing()`` (True while diagnostics are
    printed per construct: the general code prints them) and ``saw_kernel(host_ptr,
    version)`` (a region's first launch showed this ``KernelArgsTy`` version)."""

    def __init__(self, *, lock, check_device, default_device, slow_kernel, slow_data,
                 failed, requires=lambda: 0, tracing=lambda: False,
                 saw_kernel=lambda host_ptr, version: None):
        self._lock = lock
        self._check_device = check_device
        self._default_device = default_device
        self._slow_kernel = slow_kernel
        self._slow_data = slow_data
        self._failed = failed
        self._requires = requires
        self._tracing = tracing
        self._saw_kernel = saw_kernel
        self._views: dict[int, memoryview] = {}
        self._plans: dict[tuple, Plan] = {}
        self._ready: dict[int, tuple] = {}      # device number -> (gen, mapper, init count)
        self._leased: dict[int, Plan] = {}      # plans that keep a DeviceLease
        self._leased_bytes = 0
        self.generation = 0
        self._wanted = os.environ.get(NO_PLAN_VAR, "") in ("", "0")
        self._enabled = self._wanted and not tracing()   # requires(): invalidate()
        #: constructs handed to the general code (the others took the cheap path:
        #: the bridge counts every construct, ``call_counts()``)
        self.general = 0

    @property
    def enabled(self) -> bool:
        """Whether the cheap path is used (False: every construct runs the general
        code; ``OFFLOAD_SHIM_NO_PLAN=1`` in the environment turns it off)."""
        return self._wanted

    @enabled.setter
    def enabled(self, on: bool) -> None:
        self._wanted = bool(on)
        self.invalidate()

    def invalidate(self) -> None:
        """Forget what depends on registrations and device state (called on
        register, unregister, requires, close)."""
        self.generation += 1
        self._enabled = (self._wanted and not self._tracing()
                         and not self._requires() & REQ_USM)
        self._ready.clear()
        self.release_leases()
        self._plans.clear()

    # -- the bridge callback ---------------------------------------------------------
    def on_construct(self, addr: int) -> int:
        """The ``construct`` callback: one construct described by the frame at
        ``addr``; returns the bridge's code (CB_OK / CB_FAIL / CB_FATAL)."""
        v = self._views.get(addr)
        if v is None:
            v = self._views[addr] = _abi.frame_view(addr)
        kind = v[0]
        with self._lock:
            if v[15] and self._enabled and (kind != KERNEL or v[14] in _clang.KERNEL_ARGS):
                rc = self._serve(v, kind)
                if rc is not None:
                    return rc
            self.general += 1
            return self._general(v, kind)

    def _general(self, v, kind: int) -> int:
        dev = v[2] - _U64 if v[2] > _I64_MAX else v[2]
        if kind == KERNEL:
            return self._slow_kernel(v[3], dev, _s32(v[6]), _s32(v[7]), v[4], v[5])
        return self._slow_data(kind, v[3], dev, v[1], *_abi.frame_pointer_args(v))

    # -- the cheap path ----------------------------------------------------------------
    def _mapper(self, dev: int, loc: int):
        """checkDeviceAndCtors, its success kept while nothing it depends on changed."""
        if dev == -1:
            dev = self._default_device()
        hit = self._ready.get(dev)
        if hit is not None and hit[0] == self.generation:
            dm = hit[1]
            if dm.device.initialized and dm.device.init_count == hit[2]:
                return dm
        chk = self._check_device(dev, loc)
        if not isinstance(chk, int):
            self._ready[dev] = (self.generation, chk, chk.device.init_count)
        return chk

    def _plan(self, v, kind: int, n: int) -> Plan:
        key = (kind, v[11], n, v[4])
        plan = self._plans.get(key)
        t0 = HEAD + 3 * n
        if plan is not None:
            if n == 1:
                if v[t0] == plan.types[0]:
                    return plan
            elif v[t0:t0 + n].tolist() == plan.types:
                return plan
        if plan is not None:
            self._drop_lease(plan)
        if len(self._plans) >= MAX_PLANS:
            self.release_leases()
            self._plans.clear()
        plan = self._plans[key] = Plan(kind, v[t0:t0 + n].tolist(), bool(v[13]))
        return plan

    def _serve(self, v, kind: int):
        """The construct through the cheap path: its return code, or None when the
        general code must do it (nothing of it done yet)."""
        n = v[1]
        plan = self._plan(v, kind, n)
        if not plan.simple:
            return None
        dev = v[2] - _U64 if v[2] > _I64_MAX else v[2]
        dm = self._mapper(dev, v[3])
        if isinstance(dm, int):
            return dm                       # host fallback or fatal: decided by the check
        if dm.table.shadow:
            return None
        if kind == KERNEL:
            launch = self._launcher(plan, dm, v[4], v[14])
            if launch is None:
                return None
            return self._kernel(v, n, plan, dm, launch)
        if kind == BEGIN:
            try:
                self._begin(v, n, plan, dm)
            except Fallback:
                return None
            return _abi.CB_OK
        try:
            if kind == END:
                self._end(v, n, plan, dm)
            else:
                self._update(v, n, plan, dm)
        except OffloadError as exc:
            return self._failed(kind, exc, v[3])
        return _abi.CB_OK

    def _kernel(self, v, n: int, plan: Plan, dm, launch):
        """``target()``: map, launch, unmap, for a plan on the cheap path.

        The rows a kernel construct creates live exactly as long as the construct:
        created with a reference count of 1 by its begin, dropped to 0 by its end,
        and nothing else sees the table in between (the interposer's lock is held
        and device code cannot call the runtime).  So they are kept outside the
        table: their device memory comes from one
        :meth:`~offload_shim.Device.alloc_many` and goes back with one
        :meth:`~offload_shim.Device.free_many`, their ``to`` / ``from`` copies are
        one :meth:`~offload_shim.Device.submit_many` / ``retrieve_many`` each, and
        the table sees only the reference counts of the rows that existed before.
        Two new rows that overlap would see each other in the general code: such a
        construct goes there.  If the launch fails the new rows enter the table
        as the general code leaves them (reference count 1)."""
        lookup = dm.table.lookup
        a0 = HEAD + n
        s0 = a0 + n
        maps = plan.maps
        nm = len(maps)
        tgts = [0] * nm
        found = [None] * nm                     # per map: the row that existed, or None
        fresh = None                            # (k, hp, size) of the new rows
        for k in range(nm):
            i, _to, _frm, implicit = maps[k]
            hp = v[a0 + i]
            size = v[s0 + i]
            if 0 < size <= _I64_MAX:
                ent, contained, before, after = lookup(hp, size)
                if contained or (implicit and (before or after)):
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
            _undo(found)                        # explicit extension, size 0: general code
            return None
        if fresh is not None and len(fresh) > 1 and not _disjoint(fresh):
            _undo(found)
            return None
        dev = dm.device
        lease = None
        kept = True
        slot = None
        if fresh is not None:
            slot = [0] * nm                     # lease block of each new row
            try:
                lease, kept = self._lease(plan, dev, fresh)
                ptrs = lease.ptrs
                ops = []
                for j, (k, hp, size) in enumerate(fresh):
                    pad = hp % ALIGN
                    tgts[k] = ptrs[j] + pad
                    slot[k] = j
                    if maps[k][1]:
                        ops.append((j, pad, hp, size))
                if ops:
                    lease.submit_many(ops)
            except OffloadError:
                _undo(found)
                if lease is not None and not kept:
                    try:
                        lease.release()
                    except OffloadError:
                        pass
                return None
        args = list(plan.implicit)
        offsets = [0] * len(args)
        for i, k in plan.params:
            if k < 0:                           # a literal: the value itself
                args.append(v[HEAD + i])        # HstPtrBase, as processDataBefore
                offsets.append(0)
            else:
                args.append(tgts[k])
                offsets.append(v[HEAD + i] - v[a0 + i])
        try:
            launch(args, offsets)
        except OffloadError as exc:
            # the general code leaves the construct's rows mapped (no targetDataEnd):
            # the new rows enter the table and own their blocks from now on
            if fresh is not None:
                table = dm.table
                for k, hp, size in fresh:
                    table.insert(MapEntry(v[HEAD + maps[k][0]], hp, hp + size, tgts[k],
                                          lease.ptrs[slot[k]], 1, 0))
                if kept:
                    self._drop_lease(plan, detach=True)
                else:
                    lease.detach()
            return self._failed(KERNEL, exc, v[3])
        # targetDataEnd, in reverse order: the new rows are at their last reference;
        # a row that existed before keeps at least the reference it had
        try:
            back = None
            removed = None
            for k in range(nm - 1, -1, -1):
                ent = found[k]
                if ent is None:
                    i, _to, frm, _implicit = maps[k]
                    if frm:
                        j = slot[k]
                        if back is None:
                            back = []
                        back.append((j, tgts[k] - lease.ptrs[j], v[a0 + i], v[s0 + i]))
                elif ent.should_remove(False, False):
                    if removed is None:
                        removed = []
                    removed.append((k, ent))
                else:
                    ent.dec(False)
            if back is not None:
                lease.retrieve_many(back)
            if removed is not None:
                self._end_rows(v, a0, s0, maps, tgts, removed, dm)
            if not kept:
                lease.release()
        except OffloadError as exc:
            return self._failed(KERNEL, exc, v[3])
        return _abi.CB_OK

    @staticmethod
    def _end_rows(v, a0, s0, maps, tgts, removed, dm) -> None:
        """The rows that existed before the construct and reach their last reference
        in it (not seen with clang's constructs: such a row was kept by another
        reference): copy back, remove, free, as targetDataEnd does."""
        dev = dm.device
        back, doomed = [], []
        for k, ent in removed:
            ent.dec(False)
            i, _to, frm, _implicit = maps[k]
            if frm:
                back.append((ent.alloc, tgts[k], v[a0 + i], v[s0 + i]))
            if ent not in doomed:
                doomed.append(ent)
        if back:
            dev.retrieve_many(back)
        table = dm.table
        ptrs = []
        for ent in doomed:
            if ent.dyn == 0 and ent.hold == 0:
                table.remove(ent)
                if ent.alloc:
                    ptrs.append(ent.alloc)
        if ptrs:
            dev.free_many(ptrs)

    def _lease(self, plan: Plan, dev, fresh):
        """Device memory for the new rows of a kernel construct: the plan's lease
        when it still fits (same number of rows, each block large enough for the
        row and its padding), else a new one, kept in the plan when every block is
        small (at most :data:`LEASE_MAX` bytes, :data:`LEASE_TOTAL` in all plans).
        Returns (lease, kept)."""
        lease = plan.lease
        if lease is not None:
            sizes = lease.sizes
            if lease.valid and plan.lease_dev is dev and len(sizes) == len(fresh):
                for (_k, hp, size), cap in zip(fresh, sizes):
                    if size + hp % ALIGN > cap:
                        break
                else:
                    return lease, True
            self._drop_lease(plan)
        caps = [size + ALIGN - 1 for _k, _hp, size in fresh]
        total = sum(caps)
        if max(caps) <= LEASE_MAX and self._leased_bytes + total <= LEASE_TOTAL:
            lease = dev.lease(caps)
            plan.lease, plan.lease_dev = lease, dev
            self._leased[id(plan)] = plan
            self._leased_bytes += total
            return lease, True
        return dev.lease([size + hp % ALIGN for _k, hp, size in fresh]), False

    def _drop_lease(self, plan: Plan, detach: bool = False) -> None:
        lease = plan.lease
        if lease is None:
            return
        plan.lease = plan.lease_dev = None
        self._leased.pop(id(plan), None)
        self._leased_bytes -= sum(lease.sizes)
        if detach:
            lease.detach()
        else:
            try:
                lease.release()
            except OffloadError:
                pass

    def release_leases(self) -> None:
        """Free the device memory every plan keeps (on invalidation and close)."""
        for plan in list(self._leased.values()):
            self._drop_lease(plan)

    def _launcher(self, plan: Plan, dm, host_ptr: int, version: int):
        """The region's KernelLauncher (Device.translate of its id, then
        Device.kernel_launcher), kept in the plan with the implicit leading arguments
        of its ``KernelArgsTy`` version (clang 18-22: ``dyn_ptr``, abi/clang.py); None
        when there is none (the general code reports why).  Made once per plan, when
        the launch is also reported (``saw_kernel``)."""
        dev = dm.device
        key = (self.generation, dev, dev.init_count, version)
        if plan.entry_key != key:
            kv = _clang.KERNEL_ARGS[version]
            implicit = (_clang.DYN_PTR_HOST,) if kv.implicit_dyn_ptr else ()
            try:
                plan.launcher = dev.kernel_launcher(dev.translate(host_ptr),
                                                    len(implicit) + len(plan.params))
            except (KeyError, ValueError, OffloadError):
                return None
            plan.implicit = implicit
            plan.entry_key = key
            self._saw_kernel(host_ptr, version)
        return plan.launcher

    def _begin(self, v, n: int, plan: Plan, dm) -> list:
        """targetDataBegin for the plan's maps: one ``(row, hp)`` per map, in order.
        Lookups first (new rows go into the table at once, so later arguments see
        them, as in the general code), then the new rows' device memory in one
        :meth:`~offload_shim.Device.alloc_many` (same sizes, same order) and their
        ``to`` copies in one :meth:`~offload_shim.Device.submit_many`.  Raises
        Fallback with everything undone."""
        table = dm.table
        lookup = table.lookup
        a0, s0 = HEAD + n, HEAD + 2 * n
        rows = []
        incs = []
        new = []                                # (row, bytes to allocate, pad, to)
        ptrs = ()
        try:
            for i, to, _frm, implicit in plan.maps:
                hp = v[a0 + i]
                size = v[s0 + i]
                if not 0 < size <= _I64_MAX:
                    raise Fallback
                ent, contained, before, after = lookup(hp, size)
                if contained or (implicit and (before or after)):
                    ent.inc(False)
                    incs.append(ent)
                elif before or after:
                    raise Fallback              # explicit extension: reported there
                else:
                    pad = hp % ALIGN
                    ent = MapEntry(v[HEAD + i], hp, hp + size, 0, 0, 1, 0)
                    table.insert(ent)
                    new.append((ent, size + pad, pad, to))
                rows.append((ent, hp))
            if new:
                dev = dm.device
                ptrs = dev.alloc_many([x[1] for x in new])
                ops = []
                for (ent, _nb, pad, to), ptr in zip(new, ptrs):
                    if not ptr:
                        raise Fallback
                    ent.alloc = ptr
                    ent.tgt = ptr + pad
                    if to:
                        ops.append((ptr, ent.tgt, ent.begin, ent.end - ent.begin))
                if ops:
                    dev.submit_many(ops)
        except (Fallback, OffloadError):
            for ent in incs:
                ent.dec(False)
            for ent, _nb, _pad, _to in new:
                table.remove(ent)
            if ptrs:
                try:
                    dm.device.free_many([p for p in ptrs if p])
                except OffloadError:
                    pass
            raise Fallback from None
        return rows

    def _end(self, v, n: int, plan: Plan, dm, rows=None) -> None:
        """targetDataEnd for the plan's maps: in reverse order drop a reference;
        on the last one copy back (``from``) and remove the row.  ``rows``: what
        :meth:`_begin` found for the same construct (a kernel: the table cannot have
        changed in between), else each map is looked up.  The copies back go in one
        :meth:`~offload_shim.Device.retrieve_many` after the loop, the frees in one
        :meth:`~offload_shim.Device.free_many` (a copy that fails is raised after
        every reference was dropped, where the general code stops at once)."""
        lookup = dm.table.lookup
        a0, s0 = HEAD + n, HEAD + 2 * n
        back = []
        doomed = []
        maps = plan.maps
        for k in range(len(maps) - 1, -1, -1):
            i, _to, frm, implicit = maps[k]
            if rows is not None:
                ent, hp = rows[k]
                size = v[s0 + i]
            else:
                hp = v[a0 + i]
                size = v[s0 + i]
                if size > _I64_MAX:
                    size -= _U64                # int64_t, as the general code reads it
                ent, contained, before, after = lookup(hp, size)
                if ent is None or not (contained or (implicit and (before or after))):
                    continue
            if ent.should_remove(False, False):
                ent.dec(False)
                if frm and size > 0:
                    back.append((ent.alloc, ent.tgt + (hp - ent.begin), hp, size))
                if ent not in doomed:
                    doomed.append(ent)
            else:
                ent.dec(False)
        if back:
            dm.device.retrieve_many(back)
        if doomed:
            table = dm.table
            ptrs = []
            for ent in doomed:
                if ent.dyn == 0 and ent.hold == 0:
                    table.remove(ent)
                    if ent.alloc:
                        ptrs.append(ent.alloc)
            if ptrs:
                dm.device.free_many(ptrs)

    def _update(self, v, n: int, plan: Plan, dm) -> None:
        """targetDataUpdate: copy each mapped item from / to the device (runs of
        items in the same direction in one call)."""
        lookup = dm.table.lookup
        dev = dm.device
        a0, s0 = HEAD + n, HEAD + 2 * n
        run, run_from = [], True
        for i, to, frm, _implicit in plan.maps:
            hp = v[a0 + i]
            size = v[s0 + i]
            if size > _I64_MAX:
                size -= _U64
            ent, contained, _b, _a = lookup(hp, size)
            if not contained or size <= 0:
                continue
            tgt = ent.tgt + (hp - ent.begin)
            if not ent.alloc:                   # a global of an image
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
            run.append((ent.alloc, tgt, hp, size))
        _flush(dev, run, run_from)


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


def _flush(dev, run: list, from_device: bool) -> None:
    if run:
        if from_device:
            dev.retrieve_many(run)
        else:
            dev.submit_many(run)


def _s32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


__all__ = ["FastPath", "NO_PLAN_VAR", "Plan", "SIMPLE_BITS"]
