"""Frees put off: the cheap path's round trip through the pool.

A target region run in a loop frees the rows of its kernel construct at the end of
one construct and allocates blocks of the same sizes at the start of the next.
:meth:`ParkedFrees.park` books such a ``free_many`` without doing it, and
:meth:`ParkedFrees.reclaim` takes the blocks back when nothing else used the pool
meanwhile; any other call on the manager first does the frees as parked
(:meth:`ParkedFrees._unpark_locked`), so whoever allocates next gets the block it
would have got.  :meth:`ParkedFrees.set_before` is the same rule for blocks held outside
the pool (the interposer's kernel repeats keep a construct's blocks between its runs:
they go back before any other use of the pool).

:class:`ParkedFrees` is a part of :class:`~offload_shim.memory.MemoryManager` (a
mixin: the manager's tables and lock are its own; its locking rule holds here too).
"""

from __future__ import annotations

from collections import namedtuple

from .locking import TOKEN
from .records import HITS as _HITS


__all__ = ["ParkedFrees", "Parcel", "ParcelSums"]


class ParcelSums(namedtuple("ParcelSums", "free_lists free_step hit_step")):
    """What a parcel's blocks add up to: ``free_lists`` (their distinct free lists),
    ``free_step`` (what their frees take from the accounting word, i.e. their bytes
    ``<< SHIFT``) and ``hit_step`` (what taking them back adds: bytes and hits)."""

    __slots__ = ()


class Parcel(namedtuple("Parcel", "ptrs sums")):
    """Blocks whose free is put off: ``ptrs`` in free order and their
    :class:`ParcelSums`."""

    __slots__ = ()


_new = tuple.__new__        # a namedtuple without its Python-level __new__ (per construct)


class ParkedFrees:
    """The part of :class:`~offload_shim.memory.MemoryManager` that puts frees off."""

    __slots__ = ()

    def set_before(self, hook) -> None:
        """Call ``hook(op, args)`` (once, then forget it) before the next
        :meth:`allocate`, :meth:`allocate_many`, :meth:`free`, :meth:`free_many`,
        :meth:`park` or :meth:`reclaim` (``op``: that name, ``args``: its positional
        arguments), outside the pool's lock (the hook may use the pool, and set
        itself again).  The instance's class is a subclass whose methods call it
        until then, so a pool without a hook pays nothing on its hit path.  The hook,
        the flag and the class change together under the pool's lock (against
        :meth:`_run_before` of another thread)."""
        hooked = _hooked_class(type(self)._plain if getattr(type(self), "_hooked", False)
                               else type(self))
        with self._lock:
            self.before = hook
            self._slow = True
            self.__class__ = hooked

    def cached_alone(self, ptrs, distinct: bool = True) -> bool:
        """Whether each of ``ptrs`` (live blocks of this manager, of distinct sizes
        unless ``distinct`` is False) would be among the only cached blocks of its
        size once they are freed, so that the next allocations of those sizes get
        them back: what a caller that keeps blocks outside the pool between uses
        needs (the interposer's repeats: under libomptarget 16 a loop that frees and
        allocates blocks of some sizes gets the same blocks every time only then --
        with other blocks of a size cached, the free lists, least recently freed
        first, hand out another one each time).  A question only: nothing changes, no
        hook runs."""
        if not (self._batch and self._cacheable):
            return False
        with self._lock:
            if self._parcel is not None or self._closed:
                return False
            seen = set()
            live = self._live
            for ptr in ptrs:
                block = live.get(ptr)
                if block is None or block.free_list is None or block.free_list:
                    return False
                if distinct and id(block.free_list) in seen:
                    return False
                seen.add(id(block.free_list))
            return True

    def take_cached(self, ptrs, sizes, most: int):
        """Take the whole free list of each of ``ptrs`` (live blocks of this manager,
        ``sizes[j]`` bytes each) out of the pool, for a caller that keeps a size's free list outside the pool
        for a while (the interposer's kernel repeats: native/interposer_rotation.c)
        and frees the blocks again, in the order it keeps them, before the pool's next
        use (:meth:`set_before`).  Each block taken is booked as a hit (live, with its
        ``alloc`` event), least recently freed first, as that many :meth:`allocate`
        calls of the exact policy would take them.  No hook runs.

        Returns ``[(size, [ptr, ...]), ...]``: per distinct block size among ``ptrs``
        (first appearance order, ``size`` in bytes) the blocks taken, possibly none;
        or None, and nothing taken, when the pool cannot do it: a policy other than
        exact, a ``cache_limit`` or poisoning, parked frees, a closed pool, a pointer
        that is not a live pooled block of its size, or more than ``most`` cached
        blocks of a size."""
        if not (self._batch and self._cacheable):
            return None
        out = []
        with self._lock:
            if self._parcel is not None or self._closed:
                return None
            lists = {}                          # size -> its free list, first seen first
            live = self._live
            for ptr, size in zip(ptrs, sizes):
                block = live.get(ptr)
                if block is None or block.free_list is None or block.size != size:
                    return None
                if len(block.free_list) > most:
                    return None
                lists[size] = block.free_list
            for size, fl in lists.items():
                out.append((size, [self._reuse_locked(size) for _ in range(len(fl))]))
        if self._log is not None:
            self._log.flush()
        return out

    def _run_before(self, op=None, args=()) -> None:
        """Take the hook (:meth:`set_before`) and run it, outside the pool's lock, as
        ``hook(op, args)``: the name of the call about to run and its arguments."""
        with self._lock:
            cls = type(self)
            if getattr(cls, "_hooked", False):
                self.__class__ = cls._plain
            hook, self.before = self.before, None
            self._slow = self._parcel is not None or self._log is not None
        if hook is not None:
            hook(op, args)

    def park(self, ptrs, known=None):
        """:meth:`free_many` of ``ptrs`` (a list, in that order) put off, for a caller
        that will most likely ask for blocks of the same sizes again before anyone
        else uses the pool (a target region run in a loop: the rows of its kernel
        construct are freed at its end and allocated again at the next one).  Returns a
        :class:`Parcel` for :meth:`reclaim`, or None when the blocks were not parked
        (not live pooled blocks of this manager, another parcel is parked, a size of
        them has cached blocks already, or the policy, ``cache_limit`` or poisoning
        make the free do more than cache them); the caller then frees them itself.
        With an event log the frees are logged now, in their order (``free``, hit):
        the log reads as if :meth:`free_many` had run.  ``known``: the ``sums`` of an earlier parcel of the same blocks (or
        blocks of the same sizes, one each), which spares looking them up again.

        Parked blocks count as cached in every figure (bytes in use drop now), and any
        other call on the manager first frees them as :meth:`free_many` would have, in
        their order, so whoever allocates next gets the block it would have got; the
        parcel is then void."""
        if not (self._batch and self._cacheable):
            return None
        log = self._log
        lockq = self._lockq
        try:
            lockq.pop()
        except IndexError:
            self._lock.wait_token()
        try:
            if self._parcel is not None or self._closed:
                return None
            if known is None:
                live = self._live
                lists = {}
                freed = hit = 0
                for ptr in ptrs:
                    block = live.get(ptr)
                    if block is None or block.free_list is None:
                        return None
                    lists[id(block.free_list)] = block.free_list
                    freed += block.free_step
                    hit += block.hit_step
                if len(set(ptrs)) != len(ptrs):
                    return None
                known = _new(ParcelSums, (tuple(lists.values()), freed, hit))
            for fl in known.free_lists:
                if fl:                          # blocks of the size are cached already
                    return None
            parcel = self._parcel = _new(Parcel, (ptrs, known))
            self._slow = True
            self._acc -= known.free_step
            if log is not None:
                live = self._live
                log.record_many("free", [(live[p].size, p) for p in ptrs], True)
            return parcel
        finally:
            lockq.append(TOKEN)
            if self._lock.waiting:
                self._lock.wake()
            if log is not None:
                log.flush()

    def reclaim(self, parcel, sizes=None) -> bool:
        """Take back the blocks of ``parcel`` (:meth:`park`) when nothing else used the
        manager since: True, and the caller holds them again, as if it had allocated
        blocks of their sizes with :meth:`allocate_many` (FIFO per size: among blocks
        of one size the first parked is the first handed out; the caller orders its
        pointers accordingly), counted as that many hits.  False: the parcel was void
        (its blocks were freed as parked) and the caller allocates as usual.

        With an event log the allocations are logged (``alloc``, hit), as
        :meth:`allocate_many` of ``sizes`` (bytes, the caller's request order; None: the
        blocks' sizes in the reverse of the parked order, a lease's) would have made
        them: per size, the first parked block first."""
        log = self._log
        lockq = self._lockq
        try:
            lockq.pop()
        except IndexError:
            self._lock.wait_token()
        try:
            if self._parcel is not parcel:
                return False
            self._parcel = None
            self._slow = log is not None or self.before is not None
            self._acc = acc = self._acc + parcel.sums.hit_step
            if acc > self._peak_acc:
                self._peak_acc = acc | _HITS
            if log is not None:
                self._log_reclaim_locked(parcel.ptrs, sizes)
            return True
        finally:
            lockq.append(TOKEN)
            if self._lock.waiting:
                self._lock.wake()
            if log is not None:
                log.flush()

    def _log_reclaim_locked(self, ptrs, sizes) -> None:
        """The ``alloc`` events of a reclaim: FIFO per size (the exact policy's free
        lists, which the parked blocks would have joined in ``ptrs`` order)."""
        live = self._live
        queues: dict = {}
        for ptr in ptrs:
            size = live[ptr].size
            q = queues.get(size)
            if q is None:
                queues[size] = [ptr]
            else:
                q.append(ptr)
        if sizes is None:
            sizes = [live[ptr].size for ptr in reversed(ptrs)]
        taken = dict.fromkeys(queues, 0)
        rows = []
        for size in sizes:
            k = taken[size]
            taken[size] = k + 1
            rows.append((size, queues[size][k]))
        self._log.record_many("alloc", rows, True, True)

    def _settle(self) -> None:
        """Free the parked blocks (:meth:`park`) now, as parked."""
        with self._lock:
            if self._parcel is not None:
                self._unpark_locked()

    def _unpark_locked(self) -> None:
        """The parked blocks join their free lists, in their order, as
        :meth:`free_many` would have put them there (their bytes were booked as
        cached when they were parked)."""
        ptrs = self._parcel.ptrs
        self._parcel = None
        self._slow = self._log is not None or self.before is not None
        live = self._live
        for ptr in ptrs:
            block = live.pop(ptr, None)
            if block is not None:
                block.free_list.append(block)

    def _hit_slow_locked(self, size):
        """(Lock held.)  :meth:`MemoryManager.allocate`'s round trip while ``_slow`` (parked frees
        or an event log): the parked frees join their free lists (any request voids
        a parcel), then for an int pooled ``size`` the hit path of the policy with
        its ``alloc`` event (:meth:`_reuse_locked`).  The pointer, or 0 (no hit)."""
        if self._parcel is not None:
            self._unpark_locked()
        if type(size) is int and 0 < size <= self._pool_max:
            return self._reuse_locked(size)
        return 0

    def _free_slow_locked(self, ptr):
        """(Lock held.)  :meth:`MemoryManager.free`'s round trip while ``_slow``: the parked frees
        join their free lists, then the cached free of a live pooled block (no cap or
        poison) with its ``free`` event.  The block cached, or None (anything else:
        ``_free_other`` after the round trip)."""
        if self._parcel is not None:
            self._unpark_locked()
        block = self._live.get(ptr)
        if block is None:
            return None
        fl = block.cache_list
        if fl is None:
            return None                 # the other path books it (_live's order kept)
        del self._live[ptr]
        self._acc -= block.free_step
        fl.append(block)
        if self._log is not None:
            self._log.record("free", block.size, ptr, True)
        return block


_HOOKED: dict = {}


def _hooked_class(cls):
    """The subclass of a pool class whose entry points run :meth:`MemoryManager.set_before`'s
    hook first (made once per class)."""
    got = _HOOKED.get(cls)
    if got is not None:
        return got

    def wrap(name):
        plain = getattr(cls, name)

        def hooked(self, *a, **k):
            self._run_before(name, a)
            return plain(self, *a, **k)
        hooked.__name__ = name
        hooked.__doc__ = plain.__doc__
        return hooked
    ns = {"__slots__": (), "_hooked": True, "_plain": cls}
    for name in ("allocate", "allocate_many", "free", "free_many", "park", "reclaim"):
        ns[name] = wrap(name)
    got = _HOOKED[cls] = type(cls.__name__, (cls,), ns)
    got.__qualname__ = cls.__qualname__
    got.__module__ = cls.__module__
    return got
