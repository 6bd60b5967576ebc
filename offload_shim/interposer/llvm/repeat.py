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
#: the names of the leases the C side keeps (kernel constructs, pairs): unique over the
#: process, as :data:`~.pairs.PAIRS` is
_TOKENS = itertools.count(1)


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
        #: token -> DeviceLease of the kernel constructs the C side keeps with rows
        #: of their own (their device memory stays with the construct between repeats)
        self._leases: dict[int, object] = {}
        self._leases_lock = threading.Lock()
        self._tokens = _TOKENS

    def on_device_teardown(self, dev) -> None:
        """A device is torn down (a deinit, possibly while this interposer is active:
        :data:`offload_shim.core.device.TEARDOWN_HOOKS`): forget everything and wait
        for the repeats in flight before its memory is freed; they stay on."""
        self._lib.osh_interposer_repeat_reset(2)
        self._give_back(self._take_leases(keep_out=True))

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
        """How many device-memory leases the C side keeps now (constructs repeated
        with rows of their own, ``enter``/``exit data`` pairs)."""
        return len(self._leases) + len(_pairs.PAIRS)

    def _take_leases(self, tokens=None, keep_out: bool = False) -> list:
        """Take the leases the C side held under ``tokens`` (None: all; ``keep_out``:
        not those of pairs whose rows are out, :mod:`.pairs`) out of the registries;
        the caller gives them back to the pool."""
        pairs = _pairs.PAIRS
        with self._leases_lock:
            if tokens is None:
                got = list(self._leases.values())
                self._leases.clear()
                tokens = list(pairs)
                if keep_out:
                    buf = (ctypes.c_uint64 * 64)()
                    out = set(buf[:self._lib.osh_interposer_repeat_out_tokens(buf, 64)])
                    tokens = [t for t in tokens if t not in out]
            else:
                got = [self._leases.pop(t) for t in tokens if t in self._leases]
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
        C side keeps leases of OpenMP device ``number``: under libomptarget 16 their
        blocks went back to the pool at the end of their constructs' last repeats
        (``targetDataEnd``), so every other use of the pool must find them there --
        the same block, with what the last repeat left in it, for a ``map(from:)`` or
        ``alloc`` row that reads before it writes (tests/programs/
        kernel_repeated_reuse.c).  Forgets those constructs (their next run goes to
        Python) and gives their leases back; one that a repeat of another thread uses
        now stays, and the hook with it."""
        def evict() -> None:
            buf = (ctypes.c_uint64 * 64)()
            busy = ctypes.c_int32()
            got = self._lib.osh_interposer_repeat_drop_held(number, buf, 64,
                                                            ctypes.byref(busy))
            self._give_back(self._take_leases(buf[:got]))
            if busy.value or got == 64:
                pool.set_before(evict)
        return evict

    @staticmethod
    def _give_back(leases) -> None:
        for lease in leases:
            try:
                lease.release()
            except OffloadError:
                pass

    def put_kernel(self, v, n: int, dm, launcher, args, offsets, found, maps, mark,
                   rec=None, prep=None) -> bool:
        """Hand the C side a kernel construct the cheap path has just done whose maps
        all found rows (:func:`~.plan_target.target`): ``v`` its frame, ``n`` its maps,
        ``launcher`` its :class:`~offload_shim.core.compiled.KernelLauncher`, ``args``
        / ``offsets`` the launch's arguments, ``found`` the row of each plain map (in
        ``maps`` order, :attr:`~.plan.Plan.maps`), ``mark`` read under the table lock
        before its look-ups.  Each row with a finite count gets a slot
        (:func:`~.maptable.give_slot`) for the repeats' holds.  Whether the C side
        kept it (no: the plugin's launch is not one the C side can call, a row is
        being prepared or belongs to another construct's lease, too many maps or
        arguments, no free slot, the stamp moved on).

        ``rec`` / ``prep``: the construct's rows of its own (its
        :class:`~.plan_target._Reservation`, ended unpublished, and what
        ``plan_target._prepare`` made for them): the C side keeps their lease (at most
        :data:`MAX_HELD_BYTES` bytes) and makes their copies to and from the device
        itself; the lease comes back to the pool when the construct is forgotten
        (:meth:`reset`, or another construct takes its place: the put then names
        it); only where the pool would hand it the same blocks again
        (:func:`_blocks_stay`)."""
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
        lease = None
        fresh = ()
        sub = ret = 0
        if rec is not None:
            lease = rec.lease
            fns = self._copy_fns(dm.device)
            if fns is None or not lease.valid or sum(lease.sizes) > MAX_HELD_BYTES:
                return False
            sub, ret, _index = fns
            fresh = rec.fresh
            if not _blocks_stay(dm.device, lease, fresh, maps):
                return False
        rows = []
        table = dm.table
        with dm.lock:
            for k, ent in enumerate(found):
                if ent is None:
                    continue
                if not ent.live or ent.pending or ent.leased:
                    return False
                if ent.infinite and not ent.hold:
                    continue                    # never at its last reference
                if not give_slot(ent, table):
                    return False
                i, _to, frm, _imp = maps[k]
                slot, gen = slot_info(ent)
                rows += (slot, gen, v[_HEAD + n + i], v[_HEAD + 2 * n + i], int(frm))
            words = (ctypes.c_uint64 * (4 * n or 1)).from_buffer_copy(
                v[_HEAD:_HEAD + 4 * n].tobytes() or bytes(8))
            cargs = (ctypes.c_uint64 * (nargs or 1))(*[a & _U64 for a in args])
            coffs = (ctypes.c_int64 * (nargs or 1))(*offsets)
            crows = (ctypes.c_uint64 * (len(rows) or 1))(*rows)
            token = 0
            ranges, tos, backs = [], [], []
            if lease is not None:
                _sizes, to_ops, back_ops, _places = prep
                ptrs = lease.ptrs
                for _k, hp, size in fresh:
                    ranges += (hp, size)
                for j, pad, hp, size in to_ops:
                    tos += (ptrs[j] + pad, hp, size)
                for j, pad, hp, size in back_ops:
                    backs += (hp, ptrs[j] + pad, size)
                token = next(self._tokens)
            evicted = ctypes.c_uint64()
            kept = bool(self._lib.osh_interposer_repeat_put_kernel(
                dm.number, v[_abi.FRAME_HOST_PTR], v[_abi.FRAME_KARGS_VERSION], n, words,
                v[_abi.FRAME_TYPES_P], mark[0], mark[1], fn, index, entry, nargs, cargs,
                coffs, ka, len(rows) // 5, crows, sub, ret, token, len(fresh),
                (ctypes.c_uint64 * (len(ranges) or 1))(*ranges), len(tos) // 3,
                (ctypes.c_uint64 * (len(tos) or 1))(*tos), len(backs) // 3,
                (ctypes.c_uint64 * (len(backs) or 1))(*backs), ctypes.byref(evicted)))
            if kept and lease is not None:
                with self._leases_lock:
                    self._leases[token] = lease
                pool = dm.device._pool
                if pool is not None:
                    pool.set_before(self._evictor(dm.number, pool))
        if evicted.value:
            self._give_back(self._take_leases([evicted.value]))
        return kept


def _blocks_stay(dev, lease, fresh, maps) -> bool:
    """Whether repeating a kernel construct with rows of its own on the same blocks
    (``lease``, one per row of ``fresh``, ``(k, hp, size)``) shows what libomptarget 16
    shows: its memory manager hands the construct the blocks its previous run freed
    only while no other block of their sizes is cached (else the free lists, least
    recently freed first, rotate through them, and a block read before it is written
    after the loop holds another run's data: tests/programs/repeat_pool_other_uses.c;
    also after host threads ran the construct with other arguments); and among blocks
    of one size the construct's next run gets them in the
    reverse order (freed last argument first, handed out least recently freed
    first), so a map that does not copy to its block (``from``, ``alloc``) would read
    another map's block every other run (tests/programs/kernel_repeated_reuse.c):
    such a construct is left to Python, whose lease follows that order
    (``DeviceLease.reclaim``)."""
    pool = dev._pool
    if pool is None or not pool.cached_alone(lease.ptrs, distinct=False):
        return False
    sizes = lease.sizes
    if len(set(sizes)) == len(sizes):
        return True
    count: dict[int, int] = {}
    for size in sizes:
        count[size] = count.get(size, 0) + 1
    return all(maps[k][1] or count[sizes[j]] == 1 for j, (k, _hp, _size) in enumerate(fresh))


__all__ = ["MAX_HELD_BYTES", "NO_REPEAT_VAR", "Repeats", "seen_before"]
