"""What compiled code's runtime needs from a device, beyond the Python API.

libomptarget maps sub-ranges of allocations and moves a construct's data in runs
(``omptarget.cpp`` ``targetDataBegin``/``targetDataEnd``), and a program launches
the same kernels again and again.  The interposer (:mod:`offload_shim.interposer`)
therefore uses these forms of a :class:`~offload_shim.core.device.Device`, which the
Python API does not need:

=====================  ==============================================  =====================
form                   what                                            used by
=====================  ==============================================  =====================
``submit_raw``,        a copy to/from anywhere inside a live           rows without a block
``retrieve_raw``       allocation or global (the range is searched     of their own (globals,
                       among every block of the device)                associated and shadow
                                                                       pointers), libgomp
``submit_in``,         the same for a range known to lie in the        the mapping table's
``retrieve_in``        allocation ``block``: checked against that      rows (``mapping.py``)
                       block only, O(1)
``alloc_many``,        several allocations / frees at once             the cheap path
``free_many``                                                          (``plan.py``)
``submit_many``,       several copies ``(block, tgt, host, nbytes)``   the cheap path
``retrieve_many``      with one in-flight round trip and the plugin's
                       calls batched
``lease``              a :class:`DeviceLease`: blocks kept by one      the cheap path's
                       caller for repeated copies that need no         kernel constructs
                       pointer-table lookup
``kernel_launcher``    a :class:`KernelLauncher`: one kernel launched  the cheap path
                       again and again without the lookup
=====================  ==============================================  =====================

(``Device.launch_entry``, a launch by target-table address, and
``Device.calls_in_flight`` serve the interposer too.)  Every form takes the device's
in-flight token like the Python API's copies do, so ``deinit``/``close`` wait for it.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from ..errors import KernelNotFoundError, LifecycleError, UnknownPointerError
from .device_state import (DeviceState as _DeviceState, OWN_LAUNCHES as _OWN_LAUNCHES,
                           READY as _READY, check_size)

__all__ = ["CompiledCodeForms", "DeviceLease", "KernelLauncher"]


class CompiledCodeForms:
    """The interposer's forms of :class:`~offload_shim.core.device.Device` (a part of
    it: the device's state, pool and in-flight accounting are its own)."""

    __slots__ = ()

    # -- copies inside a block (libomptarget maps sub-ranges) ------------------------
    def _check_inside(self, tgt: int, nbytes: int) -> None:
        """``[tgt, tgt+nbytes)`` must lie inside one live allocation or global."""
        blocks = self._pool.live_allocations()
        blocks += list(self._globals.items())
        for base, size in blocks:
            if base <= tgt and tgt + nbytes <= base + max(size, 0):
                return
        raise UnknownPointerError(f"{self.label}: [{tgt:#x}, +{nbytes}) is not inside an "
                                  "allocation or global of this device", device=self.label)

    def submit_raw(self, tgt: int, host_addr: int, nbytes: int) -> None:
        """Copy ``nbytes`` from the host address ``host_addr`` to the device
        address ``tgt``, which may point anywhere inside an allocation or a
        global (libomptarget maps sub-ranges).  Raises UnknownPointerError,
        LifecycleError, PluginCallError."""
        if nbytes <= 0:
            return
        self._enter()
        try:
            self._check_inside(tgt, nbytes)
            self.plugin.submit(self.index, tgt, host_addr, nbytes)
        finally:
            self._exit()

    def retrieve_raw(self, host_addr: int, tgt: int, nbytes: int) -> None:
        """Copy ``nbytes`` from the device address ``tgt`` (inside an allocation
        or global) to the host address ``host_addr``.  Same errors as
        :meth:`submit_raw`."""
        if nbytes <= 0:
            return
        self._enter()
        try:
            self._check_inside(tgt, nbytes)
            self.plugin.retrieve(self.index, host_addr, tgt, nbytes)
        finally:
            self._exit()

    def _check_block(self, block: int, tgt: int, nbytes: int) -> None:
        size = self._pool.size_of(block, None) if self._pool is not None else None
        if size is None or not block <= tgt or tgt + nbytes > block + size:
            # the words of _check_inside: the same copy fails the same way on both paths
            raise UnknownPointerError(f"{self.label}: [{tgt:#x}, +{nbytes}) is not inside an "
                                      "allocation or global of this device", device=self.label)

    def submit_in(self, block: int, tgt: int, host_addr: int, nbytes: int) -> None:
        """:meth:`submit_raw` for a ``tgt`` known to lie in the live allocation
        ``block`` (an :meth:`alloc` result): checked against that block only (O(1),
        the pool's pointer table) instead of a search of every allocation.  For the
        interposer's mapping rows, which remember their block.  Same errors."""
        if nbytes <= 0:
            return
        self._enter()
        try:
            self._check_block(block, tgt, nbytes)
            self.plugin.submit(self.index, tgt, host_addr, nbytes)
        finally:
            self._exit()

    def retrieve_in(self, block: int, host_addr: int, tgt: int, nbytes: int) -> None:
        """:meth:`retrieve_raw` for a ``tgt`` inside the live allocation ``block``
        (see :meth:`submit_in`)."""
        if nbytes <= 0:
            return
        self._enter()
        try:
            self._check_block(block, tgt, nbytes)
            self.plugin.retrieve(self.index, host_addr, tgt, nbytes)
        finally:
            self._exit()

    # -- several at once, for the interposer's constructs -------------------------------
    def alloc_many(self, sizes: Sequence[int]) -> list[int]:
        """:meth:`alloc` of each of ``sizes`` (bytes) in order: the device pointers.
        On an error the ones already allocated are freed again and the error is
        raised (same errors as :meth:`alloc`)."""
        if self._state is not _READY:
            for size in sizes:
                check_size(size)               # the size checks before a lazy init
            self._ready()
        # the pool's batch: the blocks that many alloc() calls would get, its cache
        # hits in one lock round trip
        return self._pool.allocate_many(sizes)

    def free_many(self, ptrs: Sequence[int]) -> None:
        """:meth:`free` of each of ``ptrs`` in order; stops at the first error, which
        is raised (same errors as :meth:`free`).  The pool gets them in that order
        (the last one freed is the first its size reuses), its cached frees in one
        lock round trip."""
        if self._state is not _READY or self._pin_mapped_policy:
            free = self.free
            for ptr in ptrs:
                free(ptr)
            return
        try:
            self._pool.free_many(ptrs)
        except LifecycleError:
            # as free(): a concurrent teardown drained the pool (the block is freed)
            if self._state is _DeviceState.CLOSED or self._closing:
                raise self._free_after_close() from None
            raise UnknownPointerError(
                f"{self.label}: a pointer of {[f'{p:#x}' for p in ptrs]} was freed by a "
                f"deinit that ran concurrently (the device drains its pool before "
                f"deinit_device)", device=self.label) from None

    def submit_many(self, ops: Sequence[tuple[int, int, int, int]]) -> None:
        """:meth:`submit_in` of each ``(block, tgt, host_addr, nbytes)`` in order, with
        one in-flight round trip; every range is checked against its block before
        the first copy.  Same errors."""
        self._copy_many(ops, self.plugin.submit_many, True)

    def retrieve_many(self, ops: Sequence[tuple[int, int, int, int]]) -> None:
        """:meth:`retrieve_in` of each ``(block, tgt, host_addr, nbytes)`` in order
        (see :meth:`submit_many`)."""
        self._copy_many(ops, self.plugin.retrieve_many, False)

    def _copy_many(self, ops, plugin_many, to_device: bool) -> None:
        self._enter()
        try:
            sizes = self._pool.sizes_of([op[0] for op in ops])
            todo = []
            for (block, tgt, host, n), size in zip(ops, sizes):
                if n > 0:
                    if size is None or not block <= tgt or tgt + n > block + size:
                        self._check_block(block, tgt, n)        # raises
                    todo.append((tgt, host, n) if to_device else (host, tgt, n))
            if todo:
                plugin_many(self.index, todo)
        finally:
            self._exit()

    def lease(self, sizes: Sequence[int]) -> "DeviceLease":
        """A :class:`DeviceLease`: one allocation per size (bytes,
        :meth:`alloc_many`, in order), used by the caller until
        :meth:`DeviceLease.release` (the interposer's cheap path: the device memory
        of a kernel construct's temporary rows).  Same errors as :meth:`alloc`."""
        if self._state is not _READY:
            for size in sizes:
                check_size(size)               # the size checks before a lazy init
            self._ready()
        return DeviceLease(self, self._pool.allocate_many(sizes), list(sizes),
                           self.init_count)

    def lease_of(self, ptrs: Sequence[int], sizes: Sequence[int]) -> "DeviceLease | None":
        """A :class:`DeviceLease` of blocks the caller allocated from this device and
        hands over (``ptrs[j]`` holds ``sizes[j]`` bytes; :meth:`DeviceLease.release`
        frees them, the last one first); None when the device is not ready."""
        if self._state is not _READY:
            return None
        return DeviceLease(self, list(ptrs), list(sizes), self.init_count)

    def kernel_launcher(self, entry: int, nargs: int) -> "KernelLauncher":
        """A :class:`KernelLauncher` of the kernel whose target-table address is
        ``entry``, for repeated launches with ``nargs`` arguments (what
        :meth:`launch_entry` does, the lookup and the plugin's argument blocks done
        once).  Raises KernelNotFoundError when ``entry`` is not a kernel of a
        loaded image, LifecycleError, ValueError (too many arguments)."""
        self._enter()
        try:
            with self._launch_cv:
                img = self._kernel_image_locked(entry)
                rec = self._images[img.id]
            return KernelLauncher(self, img.id, rec, self.init_count,
                                  self.plugin.launcher(self.index, entry, nargs), nargs)
        finally:
            self._exit()


_REVERSED = object()   # _fifo_refill: every block has the same size


def _fifo_refill(sizes):
    """The order in which blocks of ``sizes`` come back from a pool that reuses the
    least recently freed block of a size first, after they were freed the last one
    first (:meth:`DeviceLease.park`): index ``i`` of the new order holds the old block
    ``perm[i]`` -- within each size the order reverses.  ``[]`` when nothing moves (no
    two sizes alike), :data:`_REVERSED` when all sizes are alike."""
    distinct = len(set(sizes))
    if distinct == len(sizes):
        return []
    if distinct == 1:
        return _REVERSED
    groups: dict[int, list[int]] = {}
    for i, size in enumerate(sizes):
        groups.setdefault(size, []).append(i)
    perm = [0] * len(sizes)
    for idx in groups.values():
        for r, i in enumerate(idx):
            perm[i] = idx[len(idx) - 1 - r]
    return perm


class DeviceLease:
    """Device memory leased by one caller (:meth:`Device.lease`): ``ptrs[j]`` holds
    ``sizes[j]`` bytes.  Copies name a block and an offset, ``(j, offset,
    host_addr, nbytes)``, checked against ``sizes[j]`` only (the blocks are live
    allocations of the device while the lease is :attr:`valid`), so a run of copies
    needs no pointer-table lookup.  Not thread-safe: one user at a time (the
    interposer's plans hand each lease to one construct at a time)."""
    __slots__ = ("_dev", "device", "ptrs", "sizes", "_init_count", "_released", "_parcel",
                 "_known", "_refill")

    def __init__(self, dev, ptrs, sizes, init_count):
        self._dev, self.ptrs, self.sizes = dev, ptrs, sizes
        self.device = dev                   # the Device the blocks belong to
        self._init_count = init_count
        self._released = False
        self._parcel = None                 # MemoryManager.park's, while parked
        self._known = None                  # the sums of the first parcel (MemoryManager.park)
        self._refill = None                 # how reclaim() reorders ptrs (_fifo_refill)

    @property
    def valid(self) -> bool:
        """Not released, and the device was not deinitialised since (a deinit frees
        every allocation, these too)."""
        dev = self._dev
        return (not self._released and dev._state is _READY
                and dev.init_count == self._init_count)

    def _ops(self, ops, to_device: bool) -> array:
        """The plugin's copies as flat ``(a, b, size)`` triples (Plugin.submit_many)."""
        if not self.valid:
            raise LifecycleError(f"{self._dev.label}: device memory lease used after its "
                                 "release or a deinit", device=self._dev.label)
        ptrs, sizes = self.ptrs, self.sizes
        out = array("Q")
        add = out.extend
        for j, off, host, n in ops:
            if n > 0:
                if off < 0 or off + n > sizes[j]:
                    raise ValueError(f"{self._dev.label}: copy of {n} bytes at offset {off} "
                                     f"exceeds the leased block of {sizes[j]} bytes")
                add((ptrs[j] + off, host, n) if to_device else (host, ptrs[j] + off, n))
        return out

    def _one(self, op, to_device: bool) -> None:
        """One copy ``(j, offset, host_addr, nbytes)``: what :meth:`submit_many` /
        :meth:`retrieve_many` do for a single one, without the batch's array (the
        plugin's ``submit`` / ``retrieve``, the same checks and errors)."""
        j, off, host, n = op
        dev = self._dev
        if not self.valid:
            raise LifecycleError(f"{dev.label}: device memory lease used after its "
                                 "release or a deinit", device=dev.label)
        if n <= 0:
            return
        if off < 0 or off + n > self.sizes[j]:
            raise ValueError(f"{dev.label}: copy of {n} bytes at offset {off} "
                             f"exceeds the leased block of {self.sizes[j]} bytes")
        dev._enter()
        try:
            if to_device:
                dev.plugin.submit(dev.index, self.ptrs[j] + off, host, n)
            else:
                dev.plugin.retrieve(dev.index, host, self.ptrs[j] + off, n)
        finally:
            dev._exit()

    def submit_many(self, ops) -> None:
        """Host -> device copies ``(j, offset, host_addr, nbytes)``, in order (one
        in-flight round trip, the plugin's calls batched).  Raises LifecycleError
        (lease no longer valid), ValueError (outside the block), PluginCallError."""
        if len(ops) == 1:
            self._one(ops[0], True)
            return
        dev = self._dev
        todo = self._ops(ops, True)
        if todo:
            dev._enter()
            try:
                dev.plugin.submit_many(dev.index, todo)
            finally:
                dev._exit()

    def retrieve_many(self, ops) -> None:
        """Device -> host copies ``(j, offset, host_addr, nbytes)`` (see
        :meth:`submit_many`)."""
        if len(ops) == 1:
            self._one(ops[0], False)
            return
        dev = self._dev
        todo = self._ops(ops, False)
        if todo:
            dev._enter()
            try:
                dev.plugin.retrieve_many(dev.index, todo)
            finally:
                dev._exit()

    def detach(self) -> None:
        """End the lease without freeing: the caller took the blocks over (they are
        ordinary allocations of the device again, to be freed with
        :meth:`Device.free`)."""
        self._released = True

    def park(self) -> bool:
        """End the use as :meth:`release` does (every block freed, the last one first),
        with the frees put off in the device's pool (:meth:`MemoryManager.park`), so
        that :meth:`reclaim` can take the same blocks back without a round trip
        through the pool's tables -- what a loop running one target region asks for.
        Whoever uses the pool first gets the blocks the frees would have left it.
        False (nothing done: call :meth:`release`) when the pool does not park them.
        Not thread-safe, as the lease itself."""
        if self._released:
            return False
        dev = self._dev
        if (dev._state is not _READY or dev.init_count != self._init_count
                or dev._pin_mapped_policy):
            return False
        parcel = dev._pool.park(self.ptrs[::-1], self._known)
        if parcel is None:
            return False
        self._released = True
        self._parcel = parcel
        self._known = parcel.sums
        return True

    def reclaim(self, sizes) -> bool:
        """Use the lease again for blocks of ``sizes`` (bytes, the same list it has):
        True when the parked blocks (:meth:`park`) were still the pool's last
        business -- ``ptrs`` then holds them in the order ``alloc_many(sizes)`` would
        have returned them (among blocks of one size the pool hands out the least
        recently freed first, and :meth:`park` freed the last one first: within
        each size the order reverses), booked as that many allocations.  False when
        the lease was not parked, ``sizes`` differ or the blocks went back to the
        pool meanwhile: allocate anew."""
        parcel = self._parcel
        if parcel is None or sizes != self.sizes:
            return False
        self._parcel = None
        # a deinit meanwhile drained the pool, which voided the parcel (and a device
        # initialised again has another pool)
        pool = self._dev._pool
        if pool is None or not pool.reclaim(parcel, self.sizes):
            return False
        refill = self._refill
        if refill is None:
            refill = self._refill = _fifo_refill(self.sizes)
        ptrs = self.ptrs
        if refill is _REVERSED:
            self.ptrs = ptrs[::-1]
        elif refill:
            self.ptrs = [ptrs[j] for j in refill]
        self._released = False
        return True

    def release(self, keep=()) -> None:
        """Free the blocks, the last one first (as libomptarget 16 ``targetDataEnd``
        frees a construct's rows, in reverse argument order; so the pool's reuse is
        the one the general code would get), except those whose indices are in
        ``keep``: the caller took them over, as :meth:`detach` does for all.  Nothing
        when the device was deinitialised meanwhile (its pool freed them).
        Idempotent.  Raises what :meth:`Device.free` raises."""
        if self._released:
            return
        self._released = True
        dev = self._dev
        if dev._state is _READY and dev.init_count == self._init_count:
            ptrs = self.ptrs
            if keep:
                dev.free_many([ptrs[j] for j in range(len(ptrs) - 1, -1, -1)
                               if j not in keep])
            else:
                dev.free_many(ptrs[::-1])


class KernelLauncher:
    """Launches one kernel of one device again and again (:meth:`Device.kernel_launcher`):
    ``launcher(args, offsets)`` is :meth:`Device.launch_entry` without the lookup.
    Each call checks that the device is still in the same initialisation and the
    image still loaded (KernelNotFoundError otherwise: make a new launcher), holds
    the image against an unload while the kernel runs, and checks that the values
    fit in 64 bits (ValueError).  ``args``/``offsets``: lists of ``nargs`` ints."""
    __slots__ = ("_dev", "_image_id", "_rec", "_init_count", "_launch", "nargs")

    def __init__(self, dev, image_id, rec, init_count, launch, nargs):
        self._dev, self._image_id, self._rec = dev, image_id, rec
        self._init_count, self._launch, self.nargs = init_count, launch, nargs

    @property
    def valid(self) -> bool:
        """The device is in the initialisation this launcher was made in and the
        image is still loaded."""
        dev = self._dev
        return (dev._state is _READY and dev.init_count == self._init_count
                and dev._images.get(self._image_id) is self._rec)

    @property
    def raw(self) -> tuple[int, int, int, bytes] | None:
        """``(launch function address, plugin device id, kernel entry, KernelArgsTy
        bytes)`` when the plugin's launcher calls LLVM 16's
        ``__tgt_rtl_launch_kernel(id, entry, args, offsets, kernel_args, NULL)`` as
        it is (the C side's repeat path may call it: interposer/llvm/repeat.py),
        else None."""
        return getattr(self._launch, "raw", None)

    def fits(self, args: list, offsets: list) -> bool:
        """Whether ``args``/``offsets`` are ``nargs`` ints each and fit in 64 bits
        (what :meth:`__call__` checks; :meth:`run` takes them without the check)."""
        if len(args) != self.nargs or len(offsets) != self.nargs:
            return False
        if not self.nargs:
            return True
        for x in args:
            if type(x) is not int:
                return False
        for x in offsets:
            if type(x) is not int:
                return False
        return (min(args) >= -(1 << 63) and max(args) < 1 << 64
                and min(offsets) >= -(1 << 63) and max(offsets) < 1 << 64)

    def __call__(self, args: list, offsets: list) -> None:
        if not self.fits(args, offsets):
            label = self._dev.label
            if len(args) != self.nargs or len(offsets) != self.nargs:
                raise ValueError(f"{label}: {self.nargs} arguments and offsets expected")
            for x in (*args, *offsets):
                if type(x) is not int:
                    raise TypeError(f"{label}: kernel arguments and offsets must be ints "
                                    f"(addresses, values), not {type(x).__name__}")
            raise ValueError(f"{label}: a kernel argument or offset does not fit in "
                             "64 bits")
        self.run(args, offsets)

    def run(self, args: list, offsets: list) -> None:
        """The launch of :meth:`__call__` for arguments a caller checked once with
        :meth:`fits` and launches again unchanged (compiled code's replayed regions:
        ``interposer/llvm/plan_target.py``); values that do not fit are undefined
        behaviour here."""
        dev = self._dev
        dev._enter()
        try:
            rec = self._rec
            tokens = rec.launches
            tokens.append(None)         # atomic under the GIL; an unload waits for it
            mine = _OWN_LAUNCHES.__dict__
            mine[self._image_id] = mine.get(self._image_id, 0) + 1
            try:
                if dev._images.get(self._image_id) is not rec or \
                        dev.init_count != self._init_count:
                    raise KernelNotFoundError(f"{dev.label}: the kernel's image is no longer "
                                              "loaded", device=dev.label)
                self._launch(args, offsets)
            finally:
                mine[self._image_id] -= 1
                tokens.pop()
                if not tokens and dev._unload_waiting:
                    with dev._launch_cv:
                        dev._launch_cv.notify_all()
        finally:
            dev._exit()
