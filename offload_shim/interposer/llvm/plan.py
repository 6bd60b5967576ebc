"""Per-region plans: the cheap path of the constructs compiled code runs most.

Every ``__tgt_target_kernel`` / ``__tgt_target_data_*_mapper`` reaches Python once, as
a frame of 64-bit words that the C bridge fills (``native/interposer.c``, "one crossing
per construct"; layout declared in ``native/interposer_frame.h``, named in
:mod:`offload_shim.abi.interposer` ``FRAME_*``).  This
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
  the device's table (nor a partial-struct padding a libomptarget 16 program's table
  would count as mapped: ``MappingTable.padded``), ``requires`` without unified shared memory -- with the
  semantics of :mod:`.omptarget` / :mod:`.launch` / :mod:`.mapping` (libomptarget 16
  ``targetDataBegin`` / ``targetDataEnd`` / ``targetDataUpdate`` / ``target``).
  Anything else, and any construct whose lookups or allocations do not go the plain
  way (an extension of a mapping, a failed allocation or copy before the launch),
  runs the general code of those modules instead: the cheap path first undoes what
  it did (reference counts, new rows and their device memory) and hands the whole
  construct over.  A failure after the point of no return (the launch itself, a copy
  back) is reported exactly like the general code reports it.

Threads.  Nothing here is held across a plugin call: the mapping table's lock
(:attr:`~.mapping.DeviceMapper.lock`, libomptarget 16 ``DeviceTy::DataMapMtx``) is
taken for the look-ups and the reference counts of a construct and released before its
allocations, copies and launch, as libomptarget does.  A kernel construct's new rows
stay out of the table while it runs (its :class:`_Reservation` in the table's
``private`` list): the first look-up of any other thread publishes them as ordinary
rows (pending while the construct still allocates or copies to them), so what other
threads see -- ``omp_target_is_present`` from inside the kernel, another thread mapping
the same data -- is what libomptarget's table holds; a row another thread took a
reference to outlives the construct and owns its block from then on.  The device
memory of those rows comes from the device's pool and goes back to it when the
construct ends -- allocated in argument order, freed in reverse argument order, as the
general code and libomptarget 16 ``targetDataBegin`` / ``targetDataEnd`` do -- so the
pool hands the same blocks to the same requests whichever path served the constructs
before (a region that reads its ``map(from:)`` block before writing it sees what the
general code shows: the block the previous construct freed), and two threads running
the same region at once get blocks of their own.  A kernel construct's frees are put
off (:meth:`~offload_shim.core.device.DeviceLease.park`): the region's next construct
takes the same blocks back in the order the pool would have given them when nothing
else used the pool meanwhile, and anything else that uses the pool first frees them.  The per-device "ready" check and the
plans are dropped on registration, unregistration and requires (``generation``); a
check made before such an event is never kept after it.

Nothing here logs or counts per construct (the count of constructs handed to the
general code excepted).  ``tests/test_plan.py`` runs the cheap path and the general
code on the same random constructs and compares the tables, the device memory and the
host results; ``tests/test_concurrency.py`` runs them from several threads.
"""

from __future__ import annotations

import os
import threading

from ...abi import clang as _clang
from ...abi import interposer as _abi
from ...errors import OffloadError
from .mapping import MapEntry
from .omptarget import (MAP_FROM, MAP_IMPLICIT, MAP_LITERAL, MAP_MEMBER_OF,
                        MAP_TARGET_PARAM, MAP_TO)

HEAD = _abi.FRAME_HEAD
# the frame's header words (native/interposer_frame.h enum osh_frame_word)
W_KIND, W_N, W_DEV, W_LOC, W_HOST_PTR, W_KARGS, W_TEAMS, W_THREADS = (
    _abi.FRAME_KIND, _abi.FRAME_N, _abi.FRAME_DEV, _abi.FRAME_LOC, _abi.FRAME_HOST_PTR,
    _abi.FRAME_KARGS, _abi.FRAME_TEAMS, _abi.FRAME_THREADS)
W_TYPES_P, W_NAMES_P, W_MAPPERS_P, W_KARGS_VERSION, W_COPIED = (
    _abi.FRAME_TYPES_P, _abi.FRAME_NAMES_P, _abi.FRAME_MAPPERS_P, _abi.FRAME_KARGS_VERSION,
    _abi.FRAME_COPIED)
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
_U64 = 1 << 64
_new = object.__new__
_I64_MAX = (1 << 63) - 1


class Plan:
    """The decoded constant part of one construct.

    ``types``: the map types it was made from (a list, compared on every use);
    ``simple``: the cheap path applies; ``maps``: ``(i, to, from, implicit)`` of
    every argument that is mapped (not a literal), in argument order; ``params``:
    ``(i, k)`` of every kernel argument (``target_param``, not ``member_of``), in
    order, ``k`` its position in ``maps`` (-1 for a literal); ``launch``: ``(key,
    launcher, implicit)``, the kernel's
    :class:`~offload_shim.core.device.KernelLauncher`, what it is valid for and the
    leading arguments of its ``KernelArgsTy`` version; ``parked``: at most one
    :class:`~offload_shim.core.device.DeviceLease` whose blocks the kernel's last
    construct gave back to the pool with the frees put off
    (:meth:`~offload_shim.core.device.DeviceLease.park`; a list: ``pop`` and
    ``append`` are atomic)."""
    __slots__ = ("types", "simple", "maps", "params", "launch", "parked")

    def __init__(self, kind: int, types: list[int], has_mappers: bool):
        self.types = types
        self.launch = None
        self.parked = []
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
    ``ends`` count is then the construct's until it finishes).

    The owner moves ``phase`` on without the table lock and then reads ``entries``;
    :meth:`publish` (table lock held) writes ``entries`` and then reads ``phase``
    again: under the GIL one of the two sees the other's write, and whoever does
    brings the rows up to the phase (:meth:`settle`, :meth:`drop`, both idempotent;
    the owner takes the table lock for that).  Everything else changes under the
    table lock."""
    __slots__ = ("v", "maps", "fresh", "phase", "tgts", "lease", "entries", "ended")

    def __init__(self, v, maps, fresh):
        self.v, self.maps, self.fresh = v, maps, fresh
        self.phase = RESERVED
        self.entries = self.ended = None

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


class FastPath:
    """Serves construct frames for one :class:`~.interface.Interposer`.

    Wired by the interposer with: ``check_device(dev_id, loc)``
    (``checkDeviceAndCtors``: a DeviceMapper or a callback return code),
    ``default_device()``, ``slow_kernel(loc, dev, teams, threads, host_ptr, kargs)``
    and ``slow_data(kind, loc, dev, n, bases, args, sizes, types, names, mappers)``
    (the general code, same signatures as the bridge callbacks), ``failed(kind, exc,
    loc)`` (the return code of a construct that failed after the point of no
    return, as the general code reports it), ``requires()`` (the
    ``__tgt_register_requires`` flags), ``tracing()`` (True while diagnostics are
    printed per construct: the general code prints them) and ``saw_kernel(host_ptr,
    version)`` (a region's first launch showed this ``KernelArgsTy`` version).
    Thread-safe: any number of threads may call :meth:`on_construct` at once."""

    def __init__(self, *, check_device, default_device, slow_kernel, slow_data,
                 failed, requires=lambda: 0, tracing=lambda: False,
                 saw_kernel=lambda host_ptr, version: None):
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
        # guards generation and the counter below; never held across a plugin call
        self._count_lock = threading.Lock()
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

    def held(self) -> dict[str, int]:
        """How many plans and construct frames (one per host thread that offloaded)
        are kept now (no device memory: the cheap path holds none between
        constructs)."""
        return {"plans": len(self._plans), "frames": len(self._views)}

    def invalidate(self) -> None:
        """Forget what depends on registrations and device state (called on
        register, unregister, requires, close).  Constructs in flight finish with
        what they hold."""
        with self._count_lock:
            self.generation += 1
        self._enabled = (self._wanted and not self._tracing()
                         and not self._requires() & REQ_USM)
        self._ready.clear()
        self._plans.clear()

    # -- the bridge callback ---------------------------------------------------------
    def on_construct(self, addr: int) -> int:
        """The ``construct`` callback: one construct described by the frame at
        ``addr``; returns the bridge's code (CB_OK / CB_FAIL / CB_FATAL)."""
        v = self._views.get(addr)
        if v is None:
            v = self._views[addr] = _abi.frame_view(addr)
        kind = v[W_KIND]
        if v[W_COPIED] and self._enabled and (kind != KERNEL
                                              or v[W_KARGS_VERSION] in _clang.KERNEL_ARGS):
            rc = self._serve(v, kind)
            if rc is not None:
                return rc
        with self._count_lock:
            self.general += 1
        return self._general(v, kind)

    def _general(self, v, kind: int) -> int:
        dev = v[W_DEV] - _U64 if v[W_DEV] > _I64_MAX else v[W_DEV]
        if kind == KERNEL:
            return self._slow_kernel(v[W_LOC], dev, _s32(v[W_TEAMS]), _s32(v[W_THREADS]),
                                     v[W_HOST_PTR], v[W_KARGS])
        # word W_HOST_PTR of a data construct's frame: its _nowait entry point
        return self._slow_data(kind | (_abi.DATA_NOWAIT if v[W_HOST_PTR] else 0), v[W_LOC],
                               dev, v[W_N], *_abi.frame_pointer_args(v))

    # -- the cheap path ----------------------------------------------------------------
    def _mapper(self, dev: int, loc: int):
        """checkDeviceAndCtors, its success kept while nothing it depends on changed
        (a success computed before an invalidation is kept under the old generation,
        so it is never used after it)."""
        if dev == -1:
            dev = self._default_device()
        hit = self._ready.get(dev)
        if hit is not None and hit[0] == self.generation:
            dm = hit[1]
            if dm.device.initialized and dm.device.init_count == hit[2]:
                return dm
        gen = self.generation
        chk = self._check_device(dev, loc)
        if not isinstance(chk, int) and chk.lib_key is not None:
            self._ready[dev] = (gen, chk, chk.lib_key[1])
        return chk

    def _plan(self, v, kind: int, n: int) -> Plan:
        key = (kind, v[W_TYPES_P], n, v[W_HOST_PTR])
        plan = self._plans.get(key)
        t0 = HEAD + 3 * n
        if plan is not None:
            if n == 1:
                if v[t0] == plan.types[0]:
                    return plan
            elif v[t0:t0 + n].tolist() == plan.types:
                return plan
        if len(self._plans) >= MAX_PLANS:
            self._plans.clear()
        plan = self._plans[key] = Plan(kind, v[t0:t0 + n].tolist(), bool(v[W_MAPPERS_P]))
        return plan

    def _serve(self, v, kind: int):
        """The construct through the cheap path: its return code, or None when the
        general code must do it (nothing of it done yet)."""
        n = v[W_N]
        plan = self._plan(v, kind, n)
        if not plan.simple:
            return None
        dev = v[W_DEV] - _U64 if v[W_DEV] > _I64_MAX else v[W_DEV]
        dm = self._mapper(dev, v[W_LOC])
        if isinstance(dm, int):
            return dm                       # host fallback or fatal: decided by the check
        if dm.table.shadow or dm.table.padded:
            return None
        if kind == KERNEL:
            got = self._launcher(plan, dm, v[W_HOST_PTR], v[W_KARGS_VERSION])
            if got is None:
                return None
            return self._kernel(v, n, plan, dm, got)
        if kind == BEGIN:
            try:
                self._begin(v, n, plan, dm)
            except Fallback:
                return None
            return _abi.CB_OK
        try:
            done = self._end(v, n, plan, dm) if kind == END else self._update(v, n, plan, dm)
        except OffloadError as exc:
            return self._failed(kind, exc, v[W_LOC])
        return _abi.CB_OK if done else None

    def _kernel(self, v, n: int, plan: Plan, dm, got):
        """``target()``: map, launch, unmap, for a plan on the cheap path.

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
        1).  The table lock is held for the look-ups and counts only."""
        _key, launch, implicit = got
        table = dm.table
        lock = dm.lock
        a0 = HEAD + n
        s0 = a0 + n
        maps = plan.maps
        nm = len(maps)
        tgts = [0] * nm
        found = [None] * nm                     # per map: the row that existed, or None
        fresh = None                            # (k, hp, size) of the new rows
        rec = None
        lock.acquire()
        try:
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
            if fresh is not None:
                if len(fresh) > 1 and not _disjoint(fresh):
                    _undo(found)
                    return None
                rec = _new(_Reservation)         # __init__ without its call (hot path)
                rec.v = v
                rec.maps = maps
                rec.fresh = fresh
                rec.phase = RESERVED
                rec.entries = rec.ended = None
                table.private.append(rec)
        finally:
            lock.release()
        nfound = nm - len(fresh) if fresh is not None else nm
        dev = dm.device
        lease = None
        if rec is not None:
            try:
                sizes = [size + hp % ALIGN for _k, hp, size in fresh]
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
                ops = []
                for j, (k, hp, size) in enumerate(fresh):
                    pad = hp % ALIGN
                    tgts[k] = ptrs[j] + pad
                    if maps[k][1]:
                        ops.append((j, pad, hp, size))
                if ops:
                    lease.submit_many(ops)
            except BaseException as exc:
                self._withdraw(dm, rec, found)
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
        args = list(implicit)
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
        except BaseException as exc:
            # the general code leaves the construct's rows mapped (no targetDataEnd):
            # the new rows enter the table and own their blocks from now on
            if rec is not None:
                self._launch_failed(v, dm, rec, lease)
            if isinstance(exc, OffloadError):
                return self._failed(KERNEL, exc, v[W_LOC])
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
                    if ent.should_remove(False, False):
                        ent.dec(False)
                        ent.ends += 1
                        if removed is None:
                            removed = []
                        removed.append((k, ent))
                    else:
                        ent.dec(False)
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
                back = None
                ptrs = lease.ptrs
                for j in range(len(fresh) - 1, -1, -1):
                    k, hp, size = fresh[j]
                    if maps[k][2] and (last is None or last[j]):
                        if back is None:
                            back = []
                        back.append((j, tgts[k] - ptrs[j], hp, size))
                if back is not None:
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
            # reverse argument order; the frees put off while nobody else uses the pool
            # (the next run of this region takes the same blocks back: DeviceLease.park)
            if adopted or not lease.park():
                _release(lease, adopted)
            elif not plan.parked:
                plan.parked.append(lease)
        if err is not None:
            if isinstance(err, OffloadError):
                return self._failed(KERNEL, err, v[W_LOC])
            raise err
        return _abi.CB_OK

    def _withdraw(self, dm, rec, found) -> None:
        """The construct's new rows could not be prepared: give back the references
        it took, take its reservation (or the rows it was published as) out of the
        table and wake who waits for them."""
        with dm.lock:
            _undo(found)
            if rec.entries is None:
                dm.table.private.remove(rec)
            else:
                for e in rec.entries:
                    if e.live:
                        dm.table.remove(e)
                    e.pending = False
                if dm.waiting:
                    dm.cv.notify_all()

    def _launch_failed(self, v, dm, rec, lease) -> None:
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
            else:
                for j, e in enumerate(rec.entries):
                    if e.live:
                        e.leased = False
                        keep.append(j)
        _release(lease, keep)

    def _launcher(self, plan: Plan, dm, host_ptr: int, version: int):
        """``(key, launcher, implicit)``: the region's KernelLauncher
        (Device.translate of its id, then Device.kernel_launcher) with the implicit
        leading arguments of its ``KernelArgsTy`` version (clang 18-22: ``dyn_ptr``,
        abi/clang.py), kept in the plan; None when there is none (the general code
        reports why).  Made once per plan, when the launch is also reported
        (``saw_kernel``)."""
        dev = dm.device
        key = (self.generation, dev, dev.init_count, version)
        got = plan.launch
        if got is None or got[0] != key:
            kv = _clang.KERNEL_ARGS[version]
            implicit = (_clang.DYN_PTR_HOST,) if kv.implicit_dyn_ptr else ()
            try:
                launcher = dev.kernel_launcher(dev.translate(host_ptr),
                                               len(implicit) + len(plan.params))
            except (KeyError, ValueError, OffloadError):
                return None
            got = plan.launch = (key, launcher, implicit)
            self._saw_kernel(host_ptr, version)
        return got

    def _begin(self, v, n: int, plan: Plan, dm) -> list:
        """targetDataBegin for the plan's maps: one ``(row, hp)`` per map, in order.
        Lookups first (new rows go into the table at once, so later arguments see
        them, as in the general code; other threads see them pending), then the new
        rows' device memory in one :meth:`~offload_shim.Device.alloc_many` (same
        sizes, same order) and their ``to`` copies in one
        :meth:`~offload_shim.Device.submit_many`, without the table lock.  Raises
        Fallback with everything undone."""
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
            if ops:
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
        dm.settle([x[0] for x in new])
        return rows

    def _end(self, v, n: int, plan: Plan, dm) -> bool:
        """targetDataEnd for the plan's maps: in reverse order drop a reference;
        on the last one copy back (``from``) and remove the row.  The copies back go
        in one :meth:`~offload_shim.Device.retrieve_many` after the loop, the frees in
        one :meth:`~offload_shim.Device.free_many`, both without the table lock (a
        copy that fails is raised after every reference was dropped, where the
        general code stops at once).  A row that another thread re-took while this
        construct copied it back stays (libomptarget's delayed deletion).  False
        (nothing done) when a row is still being prepared by another thread."""
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
                if ent.should_remove(False, False):
                    ent.dec(False)
                    ent.ends += 1
                    counted.append(ent)
                    if frm and size > 0:
                        back.append((ent.alloc, ent.tgt + (hp - ent.begin), hp, size))
                    if ent not in doomed:
                        doomed.append(ent)
                else:
                    ent.dec(False)
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
        finally:
            lock.release()
        if counted is None:
            if ptrs:
                dm.device.free_many(ptrs)
            return True
        if not counted:
            return True
        err = None
        if back:
            try:
                dm.device.retrieve_many(back)
            except BaseException as exc:        # the counts are settled first
                err = exc
        ptrs = []
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
        finally:
            lock.release()
        if err is not None:
            raise err
        if ptrs:
            dm.device.free_many(ptrs)
        return True

    def _update(self, v, n: int, plan: Plan, dm) -> bool:
        """targetDataUpdate: copy each mapped item from / to the device (runs of
        items in the same direction in one call), the look-ups under the table lock,
        the copies without it.  False (nothing done) when a row is still being
        prepared by another thread."""
        a0, s0 = HEAD + n, HEAD + 2 * n
        items = []
        lock = dm.lock
        lock.acquire()
        try:
            lookup = dm.table.lookup
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
        return True


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
