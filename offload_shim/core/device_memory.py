"""A device's memory and the Python API's copies: allocation through the device's pool,
frees, device arrays, ``submit``/``retrieve``.  A part of
:class:`~offload_shim.core.device.Device` (a mixin: the device's lifecycle, state and
in-flight accounting are its own, in :mod:`.device`).

The forms of libomptarget's ``DeviceTy`` (``openmp/libomptarget/src/device.cpp``, LLVM
16: ``allocData``, ``deleteData``, ``submitData``, ``retrieveData``) and of the nextgen
plugins' ``GenericDeviceTy`` (``PluginInterface.cpp``: ``dataAlloc`` and ``dataDelete``
through the device's ``MemoryManager``, ``dataSubmit``, ``dataRetrieve``), with the
checks a Python API owes its caller made before the plugin is called: a free or copy of
a pointer the device did not hand out raises
:class:`~offload_shim.errors.UnknownPointerError`, a copy past the device block or the
host buffer raises ValueError.  Allocation goes through the device's
:class:`~offload_shim.memory.MemoryManager` (LLVM D81054).  Under the pinning policy
``"mapped"`` the first copy of a host range pins it and the free of its block unpins
it (:meth:`~offload_shim.memory.pinned.PinnedRegistry.on_map`/``on_unmap``;
gcc-patches -foffload-memory=pinned).  The copies compiled code needs beyond these
are :class:`~.compiled.CompiledCodeForms`.

``alloc`` and ``free`` check the device's state and call the pool's ``allocate`` and
``free``, whose hit paths run in C where the extension is built
(:mod:`offload_shim.memory.hitpath`; docs/benchmarks.md "Issue 29's pool targets").
"""

from __future__ import annotations

import operator

from ..abi.buffers import host_view as _host_view, new_buffer
from ..errors import LifecycleError, UnknownPointerError
from .device_state import READY as _READY, DeviceState, check_size as _check_size

__all__ = ["DeviceMemory"]


def _as_int(v, what: str) -> int:
    """``v`` as an ``int`` through ``operator.index`` (a NumPy integer works, docs/usage.md
    "Plugins"); TypeError naming ``what`` for anything else, ``bool`` and ``float``
    included."""
    if type(v) is int:
        return v
    if isinstance(v, bool):
        raise TypeError(f"{what} must be an int, not bool")
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"{what} must be an int, not {type(v).__name__}") from None


def _copy_size(host_len: int, offset, nbytes) -> int:
    """Bytes to copy: ``nbytes`` (default: the whole host buffer), checked
    against the host buffer so the plugin never reads or writes past it."""
    offset = _as_int(offset, "offset")
    if nbytes is not None:
        nbytes = _as_int(nbytes, "nbytes")
    if offset < 0:
        raise ValueError(f"negative offset {offset}")
    if nbytes is None:
        return host_len
    if nbytes < 0:
        raise ValueError(f"negative nbytes {nbytes}")
    if nbytes > host_len:
        raise ValueError(f"nbytes={nbytes} exceeds the host buffer of {host_len} bytes")
    return int(nbytes)


class DeviceMemory:
    """The memory and copies part of :class:`~offload_shim.core.device.Device`."""

    __slots__ = ()

    # -- memory ----------------------------------------------------------------------
    def _backend_alloc(self, size: int) -> int:
        return self.plugin.alloc(self.index, size)

    def _backend_free(self, ptr: int) -> None:
        self.plugin.free(self.index, ptr)

    def _poison(self, ptr: int, size: int) -> None:
        addr, _keep = new_buffer(b"\xdb" * size)
        self.plugin.submit(self.index, ptr, addr, size)

    @property
    def pool(self):
        """The device's MemoryManager (None before init)."""
        return self._pool

    def alloc(self, size: int) -> int:
        """Allocate ``size`` bytes of device memory through the device's memory
        manager; returns the device address (int).  ``size`` 0 returns 0
        (LLVM).  Raises TypeError (not an int), ValueError (negative or
        above 2**63-1 bytes; checked before a lazy init),
        OutOfDeviceMemoryError, LifecycleError.

        A cache hit calls no plugin, so it takes no in-flight token: the
        pool's lock orders it against a concurrent deinit's drain (after
        which the drained pool refuses with LifecycleError)."""
        pool = self._hit_pool                   # the pool when READY (not "mapped")
        if pool is None:
            if self._state is not _READY:
                _check_size(size)
                self._ready()
            pool = self._pool
        return pool.allocate(size)

    def free(self, ptr: int) -> None:
        """Free a pointer returned by :meth:`alloc`.  ``0`` (and ``None``) is a no-op;
        any other non-int (``operator.index``: a NumPy integer works) raises TypeError.
        Raises UnknownPointerError for a pointer not live on this device
        (never handed out, already freed, or drained by a ``deinit`` that ran
        concurrently), before the plugin sees it; LifecycleError after close,
        also while a close in another thread is tearing the device down (its
        drain frees every allocation: the free is one after close, never an
        unknown pointer; nothing reaches the plugin).
        Pointers are plain addresses: once the plugin hands the same address
        out again, a stale pointer is that new block (docs/usage.md).

        The pool's pointer table is the device's: the pool (strict) checks
        and frees in one lock round trip.  A deinit that drained the block
        before that closed the pool, and the re-initialised device's new pool
        does not know the pointer, so it never reaches the plugin twice.

        The block of a :class:`~offload_shim.core.array.DeviceArray` is refused
        (UnknownPointerError): it is freed with the array (``DeviceArray.free``)."""
        if type(ptr) is not int:                # (inlined: one Python frame less a free)
            if ptr is None:                     # NULL, as the memory manager takes it
                return
            ptr = _as_int(ptr, "device pointer")
        if self._array_blocks and ptr in self._array_blocks:
            raise UnknownPointerError(
                f"{self.label}: {ptr:#x} is the memory of a device array (Device.empty/"
                f"asarray); free it with DeviceArray.free(), not Device.free()",
                device=self.label)
        pool = self._hit_pool                   # the pool when READY (not "mapped")
        if pool is None:
            if not ptr:
                return
            if self._state is not _READY:
                if self._state is DeviceState.CLOSED or self._closing:
                    raise self._free_after_close()
                # not initialised: nothing is live, and a stale pointer must not
                # initialise the device
                self._unknown_pointer(ptr)
            if self._pin_mapped_policy:
                return self._free_mapped(ptr)
            pool = self._pool
        try:
            pool.free(ptr)                      # strict: the device's pool is
        except LifecycleError:
            self._freed_by_teardown(ptr)

    def _free_mapped(self, ptr):
        """:meth:`free` under the pinning policy ``"mapped"``: the free and the unpin
        inside the device's plugin-call guard."""
        if not ptr:
            return
        try:
            with self._plugin_calls:            # unpinning may call the plugin
                self._pool.free(ptr)
                self._pinned.on_unmap(self, ptr)
        except LifecycleError:
            self._freed_by_teardown(ptr)

    def _freed_by_teardown(self, ptr):
        """A free the pool refused with LifecycleError: after (or during) close, a
        free after close; else the block was drained by a concurrent deinit."""
        if self._state is DeviceState.CLOSED or self._closing:
            raise self._free_after_close() from None
        raise UnknownPointerError(
            f"{self.label}: pointer {ptr:#x} was freed by a deinit that ran "
            f"concurrently (the device drains its pool before deinit_device)",
            device=self.label) from None

    def _free_after_close(self):
        return LifecycleError(f"{self.label}: free after close (the runtime freed every "
                              "allocation when it closed)", device=self.label)

    def _unknown_pointer(self, ptr):
        raise UnknownPointerError(f"{self.label}: free of unknown or already freed "
                                  f"pointer {ptr:#x}", device=self.label) from None

    def _free_block(self, pool, ptr: int) -> None:
        """Free ``ptr`` in ``pool``, the pool that handed it out (a device array's
        block, :mod:`offload_shim.core.array`): never in a later pool of a device
        initialised again, where the address may be another block.  Raises
        LifecycleError (that pool was drained, or the device is closing),
        UnknownPointerError (not live in ``pool``)."""
        if not self._pin_mapped_policy:
            pool.free(ptr)
            return
        with self._plugin_calls:            # unpinning may call the plugin
            if self._pool is not pool:
                raise LifecycleError(f"{self.label}: the pool of {ptr:#x} was drained",
                                     device=self.label)
            pool.free(ptr)
            self._pinned.on_unmap(self, ptr)

    # -- arrays ------------------------------------------------------------------------
    def empty(self, shape, dtype=float):
        """A new uninitialised :class:`~offload_shim.core.array.DeviceArray` of
        ``shape`` (an int or a sequence of ints) and ``dtype`` (anything
        ``numpy.dtype`` takes; default float64), C-contiguous, ``nbytes`` =
        product(shape) * itemsize bytes from the device's pool (CuPy ``cupy.empty``).
        A zero-size array holds no memory (``ptr`` 0).  Raises TypeError (not a shape,
        not a dtype, a dtype holding Python objects), ValueError (a negative dimension,
        above 2**63-1 bytes), OutOfDeviceMemoryError, LifecycleError,
        ModuleNotFoundError without NumPy."""
        from .array import new_empty
        return new_empty(self, shape, dtype)

    def asarray(self, obj, dtype=None):
        """A :class:`~offload_shim.core.array.DeviceArray` holding a copy of ``obj``
        (a buffer-protocol object, a NumPy array, anything ``numpy.asarray`` takes --
        a device array too), cast to ``dtype`` when given; a non-contiguous input is
        copied to C order first (CuPy ``cupy.asarray``).  Raises what :meth:`empty`
        raises, and TypeError for an object that becomes an array of Python objects."""
        from .array import new_asarray
        return new_asarray(self, obj, dtype)

    @property
    def allocations(self) -> tuple[int, int]:
        """(count, bytes) of allocations currently held by the user."""
        pool = self._pool
        if pool is None:
            return (0, 0)
        live = pool.live_allocations()
        return len(live), sum(n for _, n in live)

    def _check_range(self, tgt: int, nbytes: int) -> None:
        tgt = _as_int(tgt, "device pointer")
        size = self._pool.size_of(tgt, None)
        if size is None:
            size = self._globals.get(tgt)
        if size is None:
            raise UnknownPointerError(f"{self.label}: {tgt:#x} is not an allocation or "
                                      "global of this device", device=self.label)
        if nbytes > size:
            raise ValueError(f"{self.label}: copy of {nbytes} bytes exceeds the "
                             f"{size}-byte block at {tgt:#x}")

    def submit(self, tgt: int, host, *, offset: int = 0, nbytes: int | None = None) -> None:
        """Copy host -> device (``data_submit``/``host2dev``).  ``tgt``: a
        pointer from :meth:`alloc` or :meth:`global_address`; ``host``: a
        buffer object; ``offset`` (bytes) into the device block; ``nbytes``
        defaults to the whole host buffer and may not exceed it.  Raises
        UnknownPointerError, ValueError (range outside the device block or the
        host buffer), TypeError (non-int offset/nbytes), LifecycleError."""
        tgt, offset = _as_int(tgt, "device pointer"), _as_int(offset, "offset")
        addr, n, keep = _host_view(host, writable=False)
        n = _copy_size(n, offset, nbytes)
        self._enter()
        try:
            self._check_range(tgt, offset + n)
            if n and self._pin_mapped_policy:   # pin on first map
                self._pinned.on_map(self, tgt, host, addr, n)
            if n:
                self.plugin.submit(self.index, tgt + offset, addr, n)
        finally:
            self._exit()
        del keep

    def retrieve(self, host, tgt: int, *, offset: int = 0, nbytes: int | None = None) -> None:
        """Copy device -> host (``data_retrieve``/``dev2host``) into the
        writable buffer ``host``.  Same rules as :meth:`submit`."""
        tgt, offset = _as_int(tgt, "device pointer"), _as_int(offset, "offset")
        addr, n, keep = _host_view(host, writable=True)
        n = _copy_size(n, offset, nbytes)
        self._enter()
        try:
            self._check_range(tgt, offset + n)
            if n and self._pin_mapped_policy:   # pin on first map
                self._pinned.on_map(self, tgt, host, addr, n)
            if n:
                self.plugin.retrieve(self.index, addr, tgt + offset, n)
        finally:
            self._exit()
        del keep
