"""The native repeat path of ``target update``: what Python hands the C side.

A ``target update`` (libomptarget 16 ``omptarget.cpp`` ``targetDataUpdate``) looks its
items up in the device's mapping table without taking a reference and copies each one
it finds with the plugin's ``__tgt_rtl_data_submit`` / ``__tgt_rtl_data_retrieve``.
Programs run the same update again and again (a loop around a ``target data``
region); while the table has the same rows, the same arguments give the same look-ups
and so the same copies.  ``native/interposer_repeat.c`` repeats them without the
crossing into Python: :func:`~.plan_data.update` (the cheap path) does the construct
the first times and, when it runs a second time with the same words under the same
stamp (:meth:`Repeats.offer`) and every copy it made can be made by the C side alone,
hands the copies over (:meth:`Repeats.put`) with the table's *stamp* -- a per-device word
(:attr:`~.maptable.MappingTable.stamp`, unique over the process, moved on by every row
inserted or removed and every shadow pointer attached) read under the table lock before
its look-ups.  The C side repeats a construct only while the stamp is still the one
it was handed.

What the C side can do alone: the device's plugin is an LLVM plugin
(:class:`~offload_shim.plugins.llvm.LLVMPlugin` itself, not a subclass, whose copies
nothing wraps: a recorder or a test double makes the constructs come to Python), the
device number is below the C side's limit and the construct has at most its number of
items.  Everything that changes what an update means resets the C side
(:meth:`Repeats.reset`, from :meth:`~.plan.FastPath.invalidate`: registration,
unregistration, ``requires``, ``__tgt_set_info_flag``, close; one at a time) and waits
for the repeats in flight, so none of their copies runs once an image is unloaded or a
device torn down; from the start of a close they stay off (the other threads' updates
reach Python, which does nothing for them, before the rows' device memory is freed).  ``OFFLOAD_SHIM_NO_PLAN=1``
turns it off with the cheap path; ``OFFLOAD_SHIM_NO_REPEAT=1`` turns off only this.

``tests/test_repeat.py`` runs update loops of a compiled program with and without it
(the same output, the same copies) and from several threads while other threads map
and unmap.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading

from ...abi import interposer as _abi
from ...errors import OffloadError
from ...plugins.llvm import LLVMPlugin
from . import pairs as _pairs
from .maptable import _STAMPS, give_slot, slot_info

#: environment variable that turns the repeat path off (``1``)
NO_REPEAT_VAR = "OFFLOAD_SHIM_NO_REPEAT"
_HEAD = _abi.FRAME_HEAD
#: most sets of update words a plan remembers for :meth:`Repeats.offer`
_MAX_SEEN = 64
#: most kernel arguments of a construct the C side repeats (OSH_REPEAT_MAXARGS)
_MAX_KERNEL_ARGS = 32
#: most bytes of device memory one kernel construct the C side repeats keeps between
#: its repeats (its rows of its own); larger ones are left to Python (whose pool can
#: free them when memory runs out)
MAX_HELD_BYTES = 1 << 16
_U64 = (1 << 64) - 1
#: the names of the leases the C side keeps (pairs): unique over the process, as
#: :data:`~.pairs.PAIRS` is
_TOKENS = itertools.count(1)
#: most blocks of one size a rotation holds (OSH_ROT_CAP, native/interposer_internal.h)
ROTATION_CAP = 256
_DRAIN_BATCH = 128
#: states of a rotation (osh_interposer_rotation_state)
_OPEN, _CLOSED = 1, 2


def seen_before(plan, key: bytes, mark) -> bool:
    """Whether ``plan`` (a :class:`~.plan.Plan`) ran a construct with the words
    ``key`` under the stamps ``mark`` before -- the construct repeats while the table
    stands still, so it is worth handing over --; if not, that it did now is noted in
    ``plan.seen`` (at most :data:`_MAX_SEEN` word sets: a loop that maps or unmaps
    between its constructs never pays for a hand-over that no repeat would use)."""
    seen = plan.seen
    if seen.get(key) != mark:
        if len(seen) >= _MAX_SEEN:
            seen.clear()
        seen[key] = mark
        return False
    return True


class Repeats:
    """The repeat path of one installed callback table (``lib``: the bound
    ``libosh_interposer.so``).  Thread-safe: its state is the C side's, under the C
    side's lock."""

    def __init__(self, lib):
        self._lib = lib
        view = _abi.repeat_stamps()
        #: the stamps (a view of ``devices + 1`` words: per device, then the epoch),
        #: how many devices have one, most items of a repeated construct
        self.stamps, self.devices, self.max_items = view
        self._fns: dict[int, tuple | None] = {}     # id(Device) -> (device, fns)
        self.wanted = os.environ.get(NO_REPEAT_VAR, "") in ("", "0")
        #: OpenMP device number -> (Device, init_count) of the rotations opened there
        #: (native/interposer_rotation.c: the pool's cached blocks of a size that kernel
        #: repeats take and put back)
        self._rot_devs: dict[int, tuple] = {}
        self._leases_lock = threading.Lock()
        self._tokens = _TOKENS

    def on_device_teardown(self, dev) -> None:
        """A device is torn down (a deinit, possibly while this interposer is active:
        :data:`offload_shim.core.device.TEARDOWN_HOOKS`): forget everything and wait
        for the repeats in flight before its memory is freed; they stay on."""
        self._lib.osh_interposer_repeat_reset(2)
        self._give_back(self._take_leases(keep_out=True))
        self._drain_all()

    def reset(self, on: bool, wait: bool = True) -> None:
        """Forget every remembered construct, turn repeats on (``on`` and wanted) or
        off, and return once no repeat of another thread is in flight (the GIL is
        released meanwhile: the repeats need nothing of Python); ``wait=False``: at
        once (the runtime is abandoned at exit: nothing is unloaded or freed)."""
        self._fns.clear()
        self._lib.osh_interposer_repeat_reset((1 if on and self.wanted else 0)
                                              | (0 if wait else 4))
        if wait:
            # the constructs' device memory goes back to the pool (without waiting, a
            # repeat may still use it: an abandoned runtime frees nothing); the rows of
            # an `enter data` the C side repeated hold the program's data: they stay
            # out until a look-up takes them in (MappingTable.take_out)
            self._give_back(self._take_leases(keep_out=True))
            self._drain_all()

    def mark(self, table) -> tuple[int, int] | None:
        """``(stamp, epoch)`` to read under the table lock before an update's look-ups;
        None when the table has no stamp (see :attr:`~.maptable.MappingTable.stamp`)."""
        slot = table.stamp_slot
        if slot < 0:
            return None
        s = self.stamps
        return s[slot], s[self.devices]

    def _copy_fns(self, dev) -> tuple[int, int, int] | None:
        """``(data_submit, data_retrieve, plugin device id)`` of a Device whose copies
        the C side may make itself, else None."""
        got = self._fns.get(id(dev))
        if got is not None and got[0] is dev:
            return got[1]
        fns = None
        plugin = dev.plugin
        if (type(plugin) is LLVMPlugin and "submit" not in vars(plugin)
                and "retrieve" not in vars(plugin)
                and not {"submit_in", "retrieve_in", "submit_raw", "retrieve_raw",
                         "submit_many", "retrieve_many"} & vars(dev).keys()):
            sub, ret = plugin.raw_entry("data_submit"), plugin.raw_entry("data_retrieve")
            if sub and ret:
                fns = (sub, ret, dev.index)
        self._fns[id(dev)] = (dev, fns)
        return fns

    def offer(self, plan, v, n: int, dm, items, mark) -> bool:
        """An update the cheap path has just done (arguments as :meth:`put`'s; ``plan``
        its :class:`~.plan.Plan`): handed to the C side (:meth:`put`) when the plan saw
        the same words under the same stamp before -- the update repeats while the
        table stands still --, else only noted in ``plan.seen`` (a loop that maps or
        unmaps between its updates never pays for a hand-over that no repeat would
        use).  Whether it was handed over and kept.  (:func:`~.plan_data.update`
        inlines it, and :meth:`mark`.)"""
        if not seen_before(plan, v[_HEAD:_HEAD + 4 * n].tobytes(), mark):
            return False
        return self.put(v, n, dm, items, mark)

    def put(self, v, n: int, dm, items, mark) -> bool:
        """Hand the C side an update construct the cheap path has just done: ``v`` its
        frame, ``n`` its items, ``items`` the copies it made, in order, as
        :func:`~.plan_data.update` lists them (``(block, tgt, hp, size, to, from)``),
        ``mark`` :meth:`mark` read before its look-ups.  Whether the C side kept it."""
        if n > self.max_items or not 0 <= dm.number < self.devices:
            return False
        fns = self._copy_fns(dm.device)
        if fns is None:
            return False
        sub, ret, index = fns
        ops = (ctypes.c_uint64 * (5 * len(items) or 1))()
        k = 0
        for _block, tgt, hp, size, to, _frm in items:
            if to:
                ops[k:k + 5] = (sub, index, tgt, hp, size)
            else:
                ops[k:k + 5] = (ret, index, hp, tgt, size)
            k += 5
        words = (ctypes.c_uint64 * (4 * n)).from_buffer_copy(v[_HEAD:_HEAD + 4 * n])
        return bool(self._lib.osh_interposer_repeat_put(
            dm.number, n, words, v[_abi.FRAME_TYPES_P], mark[0], mark[1], len(items), ops))

    def kernels_in_flight(self) -> int:
        """Kernel constructs the C side is repeating now (all threads): a process
        that exits meanwhile is abandoned, as with a launch of Python's in flight."""
        return self._lib.osh_interposer_repeat_kernels()

    def leases_held(self) -> int:
        """How many device-memory leases the C side keeps now: ``enter``/``exit data``
        pairs, and blocks its rotations hold (cached blocks that kernel constructs
        with rows of their own take in turn)."""
        return len(_pairs.PAIRS) + self._lib.osh_interposer_rotation_blocks(-1)

    def _take_leases(self, tokens=None, keep_out: bool = False) -> list:
        """Take the leases the C side held under ``tokens`` (None: all; ``keep_out``:
        not those of pairs whose rows are out, :mod:`.pairs`) out of the registry;
        the caller gives them back to the pool."""
        pairs = _pairs.PAIRS
        got = []
        with self._leases_lock:
            if tokens is None:
                tokens = list(pairs)
                if keep_out:
                    buf = (ctypes.c_uint64 * 64)()
                    out = set(buf[:self._lib.osh_interposer_repeat_out_tokens(buf, 64)])
                    tokens = [t for t in tokens if t not in out]
            for t in tokens:
                pair = pairs.pop(t, None)
                if pair is not None:
                    got.append(pair.lease)
        return got

    def offer_pair(self, plan, key: bytes, dm, made, v, n: int, back) -> bool:
        """An ``exit data`` that removed exactly the rows of the ``enter data``
        ``made`` (a :class:`~.pairs.Made`), item for item, with the stamp back where it
        was before that enter (:func:`~.pairs.offer`): ``key`` the pair's words, ``v``
        / ``n`` the exit's frame and items, ``back`` its copies back ``(block, tgt, hp,
        size)`` in order.  On the pair's second run under the same stamp
        (:func:`seen_before`, noted in the exit's ``plan``) it is handed to the C side
        (``osh_interposer_repeat_put_pair``) with the rows' blocks as a lease the C side
        keeps between its repeats (given back before any other use of the device's
        pool).  Whether it was kept: then the caller must not free the blocks."""
        if not seen_before(plan, key, made.mark):
            return False
        if (n > self.max_items or made.n > self.max_items
                or not 0 <= dm.number < self.devices):
            return False
        dev = dm.device
        fns = self._copy_fns(dev)
        if fns is None:
            return False
        sub, ret, index = fns
        rows = made.rows
        if any(e.alloc != e.tgt or e.leased or e.cslot >= 0 for e in rows):
            return False
        sizes = [e.end - e.begin for e in rows]
        pool = dev._pool
        ptrs = [e.alloc for e in rows]
        if sum(sizes) > MAX_HELD_BYTES or pool is None or not pool.cached_alone(ptrs):
            return False
        # (blocks of those sizes in a rotation are cached blocks too: the pair's
        # blocks would not come back to it)
        if any(self._rotation(dm.number, pool.size_of(p, None) or 0)[0] for p in ptrs):
            return False
        lease = dev.lease_of(ptrs, sizes)
        if lease is None:
            return False
        to_ops = []
        for e, to in zip(rows, made.to):
            if to:
                to_ops += (sub, index, e.tgt, e.begin, e.end - e.begin)
        back_ops = []
        for _block, tgt, hp, size in back:
            back_ops += (ret, index, hp, tgt, size)
        token = next(self._tokens)
        mid = next(_STAMPS)
        _pairs.PAIRS[token] = _pairs.Pair(
            lease, [(e.base, e.begin, e.end, e.name) for e in rows], made.mark[0], mid,
            made.plan)
        x0 = _HEAD
        words = (ctypes.c_uint64 * (4 * made.n)).from_buffer_copy(made.key)
        xwords = (ctypes.c_uint64 * (4 * n)).from_buffer_copy(v[x0:x0 + 4 * n])
        evicted = ctypes.c_uint64()
        kept = bool(self._lib.osh_interposer_repeat_put_pair(
            dm.number, made.n, words, made.types_p, n, xwords, v[_abi.FRAME_TYPES_P],
            made.mark[0], made.mark[1], mid, token, len(to_ops) // 5,
            (ctypes.c_uint64 * (len(to_ops) or 1))(*to_ops), len(back_ops) // 5,
            (ctypes.c_uint64 * (len(back_ops) or 1))(*back_ops), ctypes.byref(evicted)))
        if not kept:
            _pairs.PAIRS.pop(token, None)
            lease.detach()              # the caller frees the blocks as always
            return False
        pool.set_before(self._evictor(dm.number, pool))
        if evicted.value:
            self._give_back(self._take_leases([evicted.value]))
        return True

    def _evictor(self, number: int, pool):
        """The hook a device's pool calls before its next allocation, free, park or
        reclaim (:meth:`~offload_shim.memory.manager.MemoryManager.set_before`) while the
        C side keeps blocks of OpenMP device ``number``: under libomptarget 16 the
        blocks of the pairs went back to the pool at the end of their last repeats
        (``targetDataEnd``), and the blocks the kernel repeats take in turn are the
        pool's free lists, so every other use of the pool must find them there -- the
        same block, with what the last repeat left in it, for a ``map(from:)`` or
        ``alloc`` row that reads before it writes (tests/programs/
        kernel_repeated_reuse.c, repeat_pool_other_uses.c).  Forgets those pairs (their
        next run goes to Python) and gives their leases back; a pair whose rows are
        out stays.  Before an allocation (``allocate``, ``allocate_many``) whose
        sizes all have a block in an open rotation, the least recently freed block
        of each leaves its rotation for the pool (the allocation gets it, a hit, as
        libomptarget's would; the rotations stay open and the hook with them); before
        anything else -- an allocation that may reach the backend and its
        out-of-memory ladder included -- the device's rotations close and their
        blocks are freed in their order (blocks that repeats in flight hold come back
        later: the hook stays)."""
        def evict(op=None, args=()) -> None:
            buf = (ctypes.c_uint64 * 64)()
            busy = ctypes.c_int32()
            got = self._lib.osh_interposer_repeat_drop_held(number, buf, 64,
                                                            ctypes.byref(busy))
            self._give_back(self._take_leases(buf[:got]))
            sizes = _asked(op, args)
            if sizes is not None:
                again = self._lend(number, sizes)
            else:
                again = self._drain(number)
            if again or busy.value or got == 64:
                pool.set_before(evict)
        return evict

    def _rotation(self, number: int, size: int) -> tuple[int, int, int]:
        """``(state, resident, out)`` of OpenMP device ``number``'s rotation of
        ``size``-byte blocks (``osh_interposer_rotation_state``): state 0 none,
        :data:`_OPEN`, :data:`_CLOSED`; the blocks in it, those repeats in flight
        hold."""
        resident, out = ctypes.c_int32(), ctypes.c_int32()
        state = self._lib.osh_interposer_rotation_state(number, size, ctypes.byref(resident),
                                                        ctypes.byref(out))
        return state, resident.value, out.value

    def _lend(self, number: int, sizes) -> bool:
        """Before the pool of OpenMP device ``number`` allocates ``sizes`` (bytes):
        for each, the least recently freed block of its open rotation is freed into
        the pool, whose free list of the size is otherwise empty (the rotation took
        it), so that the allocation gets it.  When a size has none, the rotations are
        drained (:meth:`_drain`) after the blocks lent: the allocation may reach the
        backend, whose out-of-memory ladder must see every cached block (the blocks
        lent were the oldest of their rotations, so the order holds).  Whether blocks
        are left in rotations (the hook must stay)."""
        lib = self._lib
        ptr = ctypes.c_uint64()
        lent = []
        short = False
        for size in sizes:
            if lib.osh_interposer_rotation_lend(number, size, ctypes.byref(ptr)):
                lent.append(ptr.value)
            else:
                short = True
        if lent:
            self._free_rotated(number, lent)
        if short:
            return self._drain(number)
        return lib.osh_interposer_rotation_blocks(number) > 0

    def free_into(self, dm, lease) -> bool:
        """A kernel construct with rows of its own ended without being handed to the
        C side (``lease``: its blocks, argument order): when the rotations of all its
        sizes are open, its blocks are freed into them (at their ends, in reverse
        argument order, with any blocks of those sizes the pool cached meanwhile) --
        where the pool's free would have put them, while the C side's repeats of
        other constructs go on taking from them.  Whether it did (the lease is
        detached then); else the caller frees the blocks."""
        number = dm.number
        if number not in self._rot_devs or not lease.valid:
            return False
        if not all(self._rotation(number, s)[0] == _OPEN for s in set(lease.sizes)):
            return False
        if self._rotate(dm, lease) is None:
            return False
        lease.detach()
        return True

    def _drain(self, number: int) -> bool:
        """Close OpenMP device ``number``'s rotations and free the blocks they hold,
        each rotation's least recently freed first (``osh_interposer_rotation_drain``):
        the pool's free lists are what libomptarget's would be.  Whether blocks stay
        out (repeats in flight hold them: a later drain frees them)."""
        lib = self._lib
        buf = (ctypes.c_uint64 * (2 * _DRAIN_BATCH))()
        busy = ctypes.c_int32()
        while True:
            got = lib.osh_interposer_rotation_drain(number, buf, _DRAIN_BATCH,
                                                    ctypes.byref(busy))
            if got:
                self._free_rotated(number, buf[1:2 * got:2])
            if got < _DRAIN_BATCH:
                return bool(busy.value)

    def _free_rotated(self, number: int, ptrs) -> None:
        """Free blocks that left OpenMP device ``number``'s rotations into its pool, in
        order (none once the device was torn down since: its memory is gone)."""
        dev_ic = self._rot_devs.get(number)
        if dev_ic is not None and dev_ic[0].init_count == dev_ic[1]:
            try:
                dev_ic[0].free_many(ptrs)
            except OffloadError:
                pass                    # torn down meanwhile

    def _drain_all(self) -> None:
        """:meth:`_drain` of every device with rotations (a reset, a teardown: no
        repeat is in flight then)."""
        for number in list(self._rot_devs):
            self._drain(number)

    @staticmethod
    def _give_back(leases) -> None:
        for lease in leases:
            try:
                lease.release()
            except OffloadError:
                pass

    def put_kernel(self, v, n: int, dm, launcher, args, offsets, found, maps, mark,
                   rec=None, prep=None, params=()) -> bool:
        """Hand the C side a kernel construct the cheap path has just done
        (:func:`~.plan_target.target`): ``v`` its frame, ``n`` its maps, ``launcher``
        its :class:`~offload_shim.core.compiled.KernelLauncher`, ``args`` / ``offsets``
        the launch's arguments, ``found`` the row of each plain map (in ``maps`` order,
        :attr:`~.plan.Plan.maps`; None for a row of its own), ``mark`` read under the
        table lock before its look-ups.  Each row with a finite count gets a slot
        (:func:`~.maptable.give_slot`) for the repeats' holds.  Whether the C side
        kept it (no: the plugin's launch is not one the C side can call, a row is
        being prepared or belongs to another construct's lease, too many maps or
        arguments, no free slot, the stamp moved on).

        ``rec`` / ``prep`` / ``params``: the construct's rows of its own (its
        :class:`~.plan_target._Reservation`, ended unpublished, what
        ``plan_target._prepare`` made for them, :attr:`~.plan.Plan.params`).  Their
        blocks (at most :data:`MAX_HELD_BYTES` bytes) are freed into rotations
        (native/interposer_rotation.c) together with the pool's cached blocks of their
        sizes (:meth:`~offload_shim.memory.manager.MemoryManager.take_cached`): each
        repeat takes the least recently freed block of each size, as libomptarget
        16's memory manager hands them out, and puts it back at the end; the pool's
        next use gets them back in that order (:meth:`_evictor`).  Returns True also
        when the rotations took the blocks but the construct was not kept: the
        caller must not free ``rec``'s blocks then (they are freed as they would be)."""
        nargs = len(args)
        if (n > self.max_items or nargs > _MAX_KERNEL_ARGS or not 0 <= dm.number < self.devices
                or not launcher.valid):
            return False
        raw = launcher.raw
        plugin = dm.device.plugin
        if (raw is None or type(plugin) is not LLVMPlugin
                or {"launch", "launcher"} & vars(plugin).keys()
                or {"launch_entry", "kernel_launcher"} & vars(dm.device).keys()):
            return False
        fn, index, entry, ka = raw
        fresh = ()
        sub = ret = 0
        freshw = arg_row = tos = backs = ()
        cargs_l = [a & _U64 for a in args]
        if rec is not None:
            lease = rec.lease
            fns = self._copy_fns(dm.device)
            if fns is None or not lease.valid or sum(lease.sizes) > MAX_HELD_BYTES:
                return False
            sub, ret, _index = fns
            fresh = rec.fresh
            _sizes, to_ops, back_ops, places = prep
            arg_row = [-1] * nargs
            first = nargs - len(params)
            where = {k: p for p, (_i, k) in enumerate(params) if k >= 0}
            for k, j, pad in places:
                p = where.get(k)
                if p is None:
                    return False
                arg_row[first + p] = j
                cargs_l[first + p] = pad
            rots = self._rotate(dm, lease)
            if rots is None:
                return False
            lease.detach()                      # the rotations hold the blocks now
            if rots is False:
                return True
            freshw = []
            for (_k, hp, size), (q, gen) in zip(fresh, rots):
                freshw += (hp, size, q, gen)
            tos = [w for op in to_ops for w in op]
            backs = [w for op in back_ops for w in op]
        rows = []
        table = dm.table
        with dm.lock:
            for k, ent in enumerate(found):
                if ent is None:
                    continue
                if not ent.live or ent.pending or ent.leased:
                    return rec is not None
                if ent.infinite and not ent.hold:
                    continue                    # never at its last reference
                if not give_slot(ent, table):
                    return rec is not None
                i, _to, frm, _imp = maps[k]
                slot, gen = slot_info(ent)
                rows += (slot, gen, v[_HEAD + n + i], v[_HEAD + 2 * n + i], int(frm))
            words = (ctypes.c_uint64 * (4 * n or 1)).from_buffer_copy(
                v[_HEAD:_HEAD + 4 * n].tobytes() or bytes(8))
            cargs = (ctypes.c_uint64 * (nargs or 1))(*cargs_l)
            coffs = (ctypes.c_int64 * (nargs or 1))(*offsets)
            crows = (ctypes.c_uint64 * (len(rows) or 1))(*rows)
            kept = bool(self._lib.osh_interposer_repeat_put_kernel(
                dm.number, v[_abi.FRAME_HOST_PTR], v[_abi.FRAME_KARGS_VERSION], n, words,
                v[_abi.FRAME_TYPES_P], mark[0], mark[1], fn, index, entry, nargs, cargs,
                coffs, ka, len(rows) // 5, crows, sub, ret, len(fresh),
                (ctypes.c_uint64 * (len(freshw) or 1))(*freshw),
                (ctypes.c_int32 * (len(arg_row) or 1))(*arg_row), len(tos) // 4,
                (ctypes.c_uint64 * (len(tos) or 1))(*tos), len(backs) // 4,
                (ctypes.c_uint64 * (len(backs) or 1))(*backs)))
        return kept or rec is not None

    def _rotate(self, dm, lease):
        """Free a kernel construct's blocks (``lease``, one per row of its own, in
        argument order) into OpenMP device ``dm.number``'s rotations, each size's
        joined by the pool's cached blocks of that size.  Per block of the lease
        ``(rotation slot, generation)``; None when nothing was taken (the pool cannot
        give its free lists away: :meth:`~offload_shim.memory.manager.MemoryManager.
        take_cached`); False when the blocks were freed but the construct cannot be
        repeated (a rotation could not be opened: its blocks went back to the pool, as
        the construct's frees would have put them there)."""
        dev = dm.device
        pool = dev._pool
        ptrs, sizes = lease.ptrs, lease.sizes
        if pool is None:
            return None
        own = {}
        for size in sizes:
            own[size] = own.get(size, 0) + 1
        number = dm.number
        for size in own:
            state, resident, _out = self._rotation(number, size)
            if state == _CLOSED and resident:
                # blocks came back to a closed rotation (repeats that were in flight
                # at its drain): freed after the pool's cached blocks of their size,
                # they join its free list behind them before it is taken
                self._drain(number)
                break
        taken = pool.take_cached(ptrs, sizes, ROTATION_CAP - max(own.values()))
        if taken is None:
            return None
        self._rot_devs[number] = (dev, dev.init_count)
        lib = self._lib
        got = {}
        back = []
        for size, blocks in taken:
            # the construct's blocks freed after them, in reverse argument order
            blocks = blocks + [p for p, s in zip(reversed(ptrs), reversed(sizes))
                               if s == size]
            gen = ctypes.c_uint32()
            q = lib.osh_interposer_rotation_open(
                number, size, len(blocks), (ctypes.c_uint64 * len(blocks))(*blocks),
                ctypes.byref(gen))
            if q < 0:
                back += blocks
            else:
                got[size] = (q, gen.value)
        pool.set_before(self._evictor(number, pool))
        if back:
            dev.free_many(back)                 # (the hook drains the rotations first)
            return False
        return [got[s] for s in sizes]


def _asked(op, args):
    """The sizes (bytes) a pool call ``op(*args)`` allocates, when it is an allocation
    of int sizes; else None."""
    if op == "allocate" and len(args) == 1 and type(args[0]) is int:
        return (args[0],)
    if op == "allocate_many" and len(args) == 1:
        sizes = tuple(args[0])
        if all(type(x) is int for x in sizes):
            return sizes
    return None


__all__ = ["MAX_HELD_BYTES", "NO_REPEAT_VAR", "Repeats", "seen_before"]
