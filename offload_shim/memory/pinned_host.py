"""Page-locked host allocations: the pinned host pool of one device (or the process).

:class:`PinnedHostPool` hands out :class:`PinnedHostBuffer` objects (a ctypes byte array
with ``free()`` and a context manager).  A block is one anonymous ``mmap`` (libgomp
``config/linux/allocator.c`` ``linux_memspace_alloc``, pinned path, GCC 13) locked
through the owning :class:`~offload_shim.memory.pinned.PinnedRegistry`, or, on a GOMP
plugin with ``GOMP_OFFLOAD_page_locked_host_alloc``, allocated by the plugin itself; in
both cases the registry keeps it as a host block, as LLVM's
``GenericDeviceTy::dataAlloc`` registers a ``TARGET_ALLOC_HOST`` allocation with
``PinnedAllocationMapTy::registerHostBuffer`` (``PluginInterface.cpp``, LLVM 17 on) and
``dataDelete`` unregisters it.  Freed blocks stay locked in a cache by size class
(:func:`size_class_pages`), as CuPy's ``PinnedMemoryPool`` (``cupy/cuda/pinned_memory.pyx``)
keeps them.  The pool reaches the registry only through its host-block methods
(``_host_domain``, ``_add_host_block``, ``_pin_host_block``, ``_drop_host_block``).
"""

from __future__ import annotations

import mmap
import threading
import weakref

from ..abi import buffers as _buffers
from ..errors import LifecycleError, MemlockLimitError, PinnedMemoryError
from .pin_backends import PAGE

__all__ = ["PinnedHostPool", "PinnedHostBuffer", "size_class_pages", "DEFAULT_POOL_CACHE",
           "MAX_HOST_ALLOC"]

#: default cap on bytes kept pinned in a pinned host pool's cache
DEFAULT_POOL_CACHE = 64 << 20
#: largest pinned host allocation (bytes): what ``mmap``'s ``ssize_t`` length holds
MAX_HOST_ALLOC = (1 << 63) - 1


def size_class_pages(nbytes: int) -> int:
    """Pages of the size class for ``nbytes`` (> 0): exact pages up to 15
    pages, above that 8..16 classes per power of two, so the rounding waste
    is under one page plus 1/8 of the size (CuPy's power-of-two pinned pool
    can waste half)."""
    if nbytes <= 0:
        raise ValueError(f"size must be > 0 bytes, not {nbytes}")
    pages = -(-nbytes // PAGE)
    g = 1 << max(0, pages.bit_length() - 4)
    return -(-pages // g) * g


class _Block:
    __slots__ = ("addr", "size", "mm", "gomp")

    def __init__(self, addr: int, size: int, mm, gomp: bool):
        self.addr, self.size, self.mm, self.gomp = addr, size, mm, gomp


class _PinnedHostBufferMixin:
    """Methods of :class:`PinnedHostBuffer`."""

    def free(self) -> None:
        """Give the memory back to its pool (idempotent).  Using the buffer
        afterwards is undefined, as with C ``free``."""
        fin = self.__dict__.get("_fin")
        if fin is not None:
            fin()

    @property
    def freed(self) -> bool:
        fin = self.__dict__.get("_fin")
        return fin is None or not fin.alive

    @property
    def address(self) -> int:
        """Address of the first byte."""
        return _buffers.address_of(self)

    @property
    def nbytes(self) -> int:
        """Size in bytes (as asked for; :attr:`capacity` is the block's)."""
        return len(self)

    @property
    def capacity(self) -> int:
        """Bytes of the underlying page-granular block."""
        return self.__dict__["_capacity"]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    def __repr__(self) -> str:
        return (f"<PinnedHostBuffer {self.nbytes} bytes at {self.address:#x}"
                f"{' freed' if self.freed else ''}>")


#: ``isinstance(x, PinnedHostBuffer)`` is True for every pinned host buffer
PinnedHostBuffer = _PinnedHostBufferMixin


def _buffer_type(nbytes: int):
    return _buffers.byte_array_type(nbytes, _PinnedHostBufferMixin, "PinnedHostBuffer")


class PinnedHostPool:
    """Page-locked host allocations for one device (or the process).

    One anonymous ``mmap`` per block (libgomp ``linux_memspace_alloc``
    pinned path), locked through the registry, so it appears in
    :meth:`PinnedRegistry.ranges` and the limit is checked; a GOMP plugin
    with ``page_locked_host_alloc`` allocates the block itself.  Freed blocks
    stay locked in a cache keyed by size class (:func:`size_class_pages`), up
    to ``max_cached`` bytes, so repeated allocations do not pay the lock cost
    (CuPy ``PinnedMemoryPool``).  A MemlockLimitError trims the cache and
    retries once (docs/references.md, pools compared, OOM ladder).

    ``registry``: the owning :class:`~offload_shim.memory.pinned.PinnedRegistry`
    (:meth:`~offload_shim.memory.pinned.PinnedRegistry.host_pool` makes the pools);
    ``device``: the device whose backend locks the blocks (None = process, ``mlock``);
    ``max_cached``: the cache's cap (bytes)."""

    def __init__(self, registry, device=None, *,
                 max_cached: int = DEFAULT_POOL_CACHE):
        self._reg = registry
        self._device = device
        self.max_cached = int(max_cached)
        self._lock = threading.Lock()
        self._free: dict[int, list[_Block]] = {}
        self._cached = 0
        self._in_use = 0
        self._detached = False
        self.hits = 0
        self.misses = 0

    def stats(self) -> dict:
        """``{"in_use", "cached"}`` bytes, ``"hits"``, ``"misses"``."""
        with self._lock:
            return {"in_use": self._in_use, "cached": self._cached,
                    "hits": self.hits, "misses": self.misses}

    def allocate(self, nbytes: int) -> PinnedHostBuffer:
        """A zero-filled-on-first-use pinned buffer exposing the buffer protocol
        (a ctypes ``c_ubyte`` array of ``nbytes``) with ``free()`` and a
        context manager.  Raises ValueError (nbytes <= 0, or a size whose
        page-rounded size class does not fit in ``ssize_t``), MemlockLimitError
        (the limit is why the lock failed), PinnedMemoryError (``mmap`` or
        the lock failed otherwise), LifecycleError (registry closed)."""
        if not isinstance(nbytes, int) or isinstance(nbytes, bool):
            raise TypeError("nbytes must be an int")
        if nbytes > MAX_HOST_ALLOC:
            raise ValueError(f"size {nbytes} bytes does not fit: a pinned host allocation "
                             f"is at most {MAX_HOST_ALLOC} bytes")
        cls_bytes = size_class_pages(nbytes) * PAGE
        if cls_bytes > MAX_HOST_ALLOC:
            raise ValueError(f"size {nbytes} bytes does not fit: its size class "
                             f"({cls_bytes} bytes) exceeds {MAX_HOST_ALLOC} bytes")
        with self._lock:
            if self._detached or self._reg.closed:
                raise LifecycleError("pinned host pool closed (its registry or device was "
                                     "torn down)")
            lst = self._free.get(cls_bytes)
            block = lst.pop() if lst else None
            if block is not None:
                self._cached -= block.size
                self.hits += 1
            else:
                self.misses += 1
            self._in_use += cls_bytes
        if block is None:
            try:
                try:
                    block = self._new_block(cls_bytes)
                except MemlockLimitError:
                    self.trim()
                    block = self._new_block(cls_bytes)
            except BaseException:
                with self._lock:
                    self._in_use -= cls_bytes
                raise
        if block.mm is not None:
            buf = _buffer_type(nbytes).from_buffer(block.mm)
        else:
            buf = _buffer_type(nbytes).from_address(block.addr)
        buf.__dict__["_capacity"] = block.size
        buf.__dict__["_fin"] = weakref.finalize(buf, self._release, block)
        return buf

    def _new_block(self, size: int) -> _Block:
        reg, dev = self._reg, self._device
        dom = reg._host_domain(dev)
        be = dom.backend
        if be.allocates:
            addr = be.host_alloc(size)
            block = _Block(addr, size, None, True)
            reg._add_host_block(dom, addr, size)
            return block
        try:
            mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except (OSError, OverflowError, ValueError) as exc:
            err = getattr(exc, "errno", None)
            raise PinnedMemoryError(f"pinned host allocation: mmap of {size} bytes failed: "
                                    f"{exc}", code=err, function="mmap") from exc
        addr, view = _buffers.buffer_address(mm)
        del view
        try:
            reg._pin_host_block(dev, addr, size)
        except BaseException:
            mm.close()
            raise
        return _Block(addr, size, mm, False)

    def _release(self, block: _Block) -> None:
        """Finalizer/free: back to the cache, or unlocked and unmapped."""
        with self._lock:
            self._in_use -= block.size
            if not self._detached and self._cached + block.size <= self.max_cached:
                self._free.setdefault(block.size, []).append(block)
                self._cached += block.size
                return
        self._destroy(block)

    def _destroy(self, block: _Block) -> None:
        self._reg._drop_host_block(self._device, block.addr, block.gomp)
        if block.mm is not None:
            try:
                block.mm.close()
            except BufferError:
                pass        # a buffer still points into it: unmapped when that one dies

    def trim(self) -> int:
        """Unlock and unmap every cached block; returns the bytes released."""
        with self._lock:
            blocks = [b for lst in self._free.values() for b in lst]
            self._free.clear()
            self._cached = 0
        for b in blocks:
            self._destroy(b)
        return sum(b.size for b in blocks)

    def _detach(self) -> None:
        """Registry/device teardown: release the cache; blocks still in use stay
        mapped (and are destroyed when freed) but are no longer locked."""
        with self._lock:
            self._detached = True
        self.trim()
