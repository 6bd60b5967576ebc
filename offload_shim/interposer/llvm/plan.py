"""Per-region plans: the cheap path of the constructs compiled code runs most.

Every ``__tgt_target_kernel`` / ``__tgt_target_data_*_mapper`` reaches Python once, as
a frame of 64-bit words that the C bridge fills (``native/interposer.c``, "one crossing
per construct"; layout declared in ``native/interposer_frame.h``, named in
:mod:`offload_shim.abi.interposer` ``FRAME_*``).  This
module serves the frames (the constructs themselves: :mod:`.plan_data` for
``targetDataBegin`` / ``targetDataEnd`` / ``targetDataUpdate``, :mod:`.plan_target` for
``target``):

* **plans**: the constant arrays of a construct (map types, and whether it has
  mappers) are decoded once into a :class:`Plan` kept per construct identity (the
  frame kind, the address of its map-type array, its argument count, whether it passes
  mappers and, for a kernel, the region's host pointer).  A plan is only reused while the map types it
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
  would count as mapped: ``MappingTable.padded``), ``requires`` without unified
  shared memory -- with the semantics of :mod:`.omptarget` / :mod:`.launch` /
  :mod:`.mapping` (libomptarget 16 ``targetDataBegin`` / ``targetDataEnd`` /
  ``targetDataUpdate`` / ``target``).  Anything else, and any construct whose
  lookups or allocations do not go the plain way (an extension of a mapping, a
  failed allocation or copy before the launch), runs the general code of those
  modules instead: the cheap path first undoes what
  it did (reference counts, new rows and their device memory) and hands the whole
  construct over.  A failure after the point of no return (the launch itself, a copy
  back) is reported exactly like the general code reports it.

Threads.  Nothing here is held across a plugin call: the mapping table's lock
(:attr:`~.mapping.DeviceMapper.lock`, libomptarget 16 ``DeviceTy::DataMapMtx``) is
taken for the look-ups and the reference counts of a construct and released before its
allocations, copies and launch, as libomptarget does.  A kernel construct's new rows
stay out of the table while it runs (its :class:`~.plan_target._Reservation` in the
table's ``private`` list): the first look-up of any other thread publishes them as ordinary
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
else used the pool meanwhile, and anything else that uses the pool first frees them.
The per-device "ready" check and the plans are dropped on registration, unregistration
and requires (``generation``); a check made before such an event is never kept after
it.

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
from . import plan_data, plan_target
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
#: most plans kept (distinct constant map-type arrays of a program are far fewer)
MAX_PLANS = 4096
_KERNEL_ARGS = _clang.KERNEL_ARGS
_U64 = 1 << 64
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
    ``append`` are atomic); ``replay``: the words of a kernel construct's bases,
    pointers and sizes (bytes) -> ``(table, version, found, tgts, fresh)``, what its
    look-ups found while the table had that ``version``
    (:attr:`~.maptable.MappingTable.version`: no row inserted or removed since, so
    the same look-ups find the same rows); ``args``: the same words -> ``(tgts,
    implicit, args, offsets)``, the launch arguments made from them (dicts: their
    ``get`` and item assignment are atomic; at most ``plan_target.MAX_REPLAYS``
    each); ``seen``: an update's words -> the table stamp its last run in Python
    had (:meth:`~.repeat.Repeats.offer`: handed to the C side on its second run under
    the same stamp; an ``exit data``'s: its pairs with an ``enter data``,
    :func:`~.pairs.offer`); ``taken``: how many times the rows of this ``enter
    data``, repeated by the C side, were taken back in (:meth:`~.maptable.MappingTable.take_out`)."""
    __slots__ = ("types", "simple", "maps", "params", "launch", "parked", "replay", "args",
                 "seen", "taken")

    def __init__(self, kind: int, types: list[int], has_mappers: bool):
        self.types = types
        self.launch = None
        self.parked = []
        self.replay = {}
        self.args = {}
        self.seen = {}
        self.taken = 0
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
    version)`` (a region's first launch showed this ``KernelArgsTy`` version),
    ``repeats()`` (the :class:`~.repeat.Repeats` of the installed callback table, or
    None) and ``closing()`` (True once the interposer closes: :meth:`invalidate` turns
    the C side's repeats off for good then).
    Thread-safe: any number of threads may call :meth:`on_construct` at once."""

    def __init__(self, *, check_device, default_device, slow_kernel, slow_data,
                 failed, requires=lambda: 0, tracing=lambda: False,
                 saw_kernel=lambda host_ptr, version: None, repeats=lambda: None,
                 closing=lambda: False):
        self._check_device = check_device
        self._default_device = default_device
        self._slow_kernel = slow_kernel
        self._slow_data = slow_data
        self._failed = failed
        self._requires = requires
        self._tracing = tracing
        self._saw_kernel = saw_kernel
        self._repeats = repeats
        self._closing = closing
        #: the :class:`~.repeat.Repeats` update constructs are handed to, or None
        self._repeat = None
        self._views: dict[int, memoryview] = {}
        self._plans: dict[tuple, Plan] = {}
        self._ready: dict[int, tuple] = {}      # device number -> (gen, mapper, init count)
        # guards generation and the counter below; never held across a plugin call
        self._count_lock = threading.Lock()
        # one invalidate() at a time; held across the C side's reset, which waits for
        # the repeats in flight (they take no Python lock)
        self._invalidate_lock = threading.Lock()
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
        are kept now, and how many device-memory leases the C side's kernel repeats
        keep (``leases``: one per construct repeated with rows of its own, at most
        :data:`~.repeat.MAX_HELD_BYTES` bytes each, given back when the repeats are
        forgotten: :meth:`invalidate`); the cheap path itself holds no device memory
        between constructs."""
        rp = self._repeat
        return {"plans": len(self._plans), "frames": len(self._views),
                "leases": rp.leases_held() if rp is not None else 0}

    def invalidate(self) -> None:
        """Forget what depends on registrations and device state (called on
        register, unregister, requires, ``__tgt_set_info_flag``, close).  Constructs in
        flight finish with what they hold; the C side's repeats (:mod:`.repeat`) are
        forgotten and waited for.  One invalidation at a time (``_invalidate_lock``):
        the state read and the C side's reset are one step, so the later state wins."""
        with self._invalidate_lock:
            with self._count_lock:
                self.generation += 1
            self._enabled = (self._wanted and not self._tracing()
                             and not self._requires() & REQ_USM)
            self._ready.clear()
            self._plans.clear()
            rp = self._repeats()
            if rp is not None:
                # (a recorder wraps _serve: every construct must reach it; once the
                # interposer closes, the other threads' constructs must reach Python,
                # which does nothing for them, before the devices' memory is freed)
                on = (self._enabled and rp.wanted and "_serve" not in vars(self)
                      and not self._closing())
                self._repeat = rp if on else None
                rp.reset(on)            # waits for the repeats in flight
            else:
                self._repeat = None

    # -- the bridge callback ---------------------------------------------------------
    def on_construct(self, addr: int) -> int:
        """The ``construct`` callback: one construct described by the frame at
        ``addr``; returns the bridge's code (CB_OK / CB_FAIL / CB_FATAL)."""
        v = self._views.get(addr)
        if v is None:
            v = self._views[addr] = _abi.frame_view(addr)
        kind = v[W_KIND]
        if v[W_COPIED] and self._enabled and (kind != KERNEL
                                              or v[W_KARGS_VERSION] in _KERNEL_ARGS):
            n = v[W_N]
            plan = self._plans.get((kind, v[W_TYPES_P], n, v[W_HOST_PTR],
                                    v[W_MAPPERS_P] != 0))
            t0 = HEAD + 3 * n
            if plan is None or (v[t0] != plan.types[0] if n == 1
                                else v[t0:t0 + n].tolist() != plan.types):
                plan = self._plan(v, kind, n)
            if plan.simple:
                rc = self._serve(v, kind, n, plan)
                if rc is not None:
                    return rc
        if kind > KERNEL:
            return self._repeat_crossing(v, kind)
        with self._count_lock:
            self.general += 1
        return self._general(v, kind)

    def _repeat_crossing(self, v, kind: int) -> int:
        """A crossing of the C side's kernel repeats (never a construct of the
        program: ``FRAME_REPEAT_END``, ``FRAME_REPEAT_FAILED``, see
        :mod:`.plan_target`); its bridge code."""
        dev = v[W_DEV] - _U64 if v[W_DEV] > _I64_MAX else v[W_DEV]
        loc = v[W_LOC]
        dm = self._mapper(dev, loc)
        if isinstance(dm, int):
            return _abi.CB_OK if kind == _abi.FRAME_REPEAT_END else dm
        rows = plan_target.repeat_rows(v)
        if kind == _abi.FRAME_REPEAT_END:
            try:
                plan_target.end_orphans(dm, rows)
            except OffloadError as exc:
                return self._failed(KERNEL, exc, loc)
            return _abi.CB_OK
        # word FRAME_KARGS: the plugin's return code, and above it the call that gave
        # it (1: a copy to the device, 2: the launch, 3: a copy back)
        plan_target.keep_failed(dm, rows)
        rc = v[W_KARGS] & 0xFFFFFFFF
        call = ("data_submit", "launch_kernel", "data_retrieve")[
            min(max((v[W_KARGS] >> 32) - 1, 0), 2)]
        try:
            dm.device.plugin._check_int32(rc - (1 << 32) if rc & 0x80000000 else rc,
                                          call, dm.device.index)
        except OffloadError as exc:
            return self._failed(KERNEL, exc, loc)
        return self._failed(KERNEL, OffloadError(f"{dm.device.label}: {call} "
                                                 f"failed ({rc})"), loc)

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
        """A new plan for the construct (the one kept for its identity, if any, was
        made from other map types)."""
        # the mappers word is part of the identity: a compiler merges equal constant
        # map-type arrays (clang: `.offload_maptypes` are unnamed_addr), so a construct with
        # a declare mapper can share its type array with one without (`target data
        # map(to: m0)` through a mapper, `enter data map(to: a[2:6])`: both {TO}) and must
        # not be served by the other's simple plan
        key = (kind, v[W_TYPES_P], n, v[W_HOST_PTR], v[W_MAPPERS_P] != 0)
        t0 = HEAD + 3 * n
        if len(self._plans) >= MAX_PLANS:
            self._plans.clear()
        plan = self._plans[key] = Plan(kind, v[t0:t0 + n].tolist(), bool(v[W_MAPPERS_P]))
        return plan

    def _serve(self, v, kind: int, n: int, plan: Plan):
        """The construct through the cheap path (``plan`` simple): its return code,
        or None when the general code must do it (nothing of it done yet)."""
        dev = v[W_DEV] - _U64 if v[W_DEV] > _I64_MAX else v[W_DEV]
        gen = self.generation
        hit = self._ready.get(dev) if dev != -1 else None
        if hit is not None and hit[0] == gen and hit[1].device.initialized \
                and hit[1].device.init_count == hit[2]:
            dm = hit[1]                     # _mapper's answer, without the call
        else:
            dm = self._mapper(dev, v[W_LOC])
            if isinstance(dm, int):
                return dm                   # host fallback or fatal: decided by the check
        table = dm.table
        if table.shadow or table.padded:
            return None
        if table.out():
            # rows of an `enter data` the C side repeated: a kernel's replay would not
            # look them up (MappingTable.take_out)
            with dm.lock:
                table.take_out()
        if kind == KERNEL:
            got = plan.launch
            d = dm.device
            key = got[0] if got is not None else None
            if key is None or key[0] != gen or key[1] is not d \
                    or key[2] != d.init_count or key[3] != v[W_KARGS_VERSION]:
                got = self._launcher(plan, dm, v[W_HOST_PTR], v[W_KARGS_VERSION])
                if got is None:
                    return None
            return plan_target.target(v, n, plan, dm, got, self._failed, self._repeat)
        if kind == BEGIN:
            try:
                plan_data.begin(v, n, plan, dm, self._repeat)
            except plan_data.Fallback:
                return None
            return _abi.CB_OK
        try:
            done = (plan_data.end(v, n, plan, dm, self._repeat) if kind == END
                    else plan_data.update(v, n, plan, dm, self._repeat))
        except OffloadError as exc:
            return self._failed(kind, exc, v[W_LOC])
        return _abi.CB_OK if done else None

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


def _s32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


__all__ = ["FastPath", "NO_PLAN_VAR", "Plan", "SIMPLE_BITS"]
