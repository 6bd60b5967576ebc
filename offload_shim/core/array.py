"""Device memory as arrays: :class:`DeviceArray`, made by ``Device.empty`` and ``Device.asarray``.

A :class:`DeviceArray` is one C-contiguous block of device memory with a shape and a NumPy
dtype, allocated through the device's memory manager (the pool) and given back to it when
the array dies or :meth:`DeviceArray.free` is called.  It keeps its device and pool alive
and speaks the array ecosystem's exchange protocols:

* DLPack (``__dlpack__`` / ``__dlpack_device__``; dmlc/dlpack ``include/dlpack/dlpack.h``
  v0.8, the Python specification of the Array API standard, 2023.12).  On a device whose
  memory is host memory (``Plugin.device_memory_is_host``: the bundled plugin, the LLVM
  x86_64 plugins) the device is ``kDLCPU`` and ``numpy.from_dlpack`` views the device
  memory without a copy; on CUDA devices (``Plugin.cuda_devices``) it is ``kDLCUDA`` with
  the plugin's device number as the CUDA ordinal.  The capsule holds a DLPack 1.0
  ``DLManagedTensorVersioned`` (``"dltensor_versioned"``) for consumers that ask for it
  with ``max_version`` (NumPy 2.x, whose view is then writable), else the unversioned
  ``DLManagedTensor`` (``"dltensor"``, NumPy 1.22+).  The structures are ctypes
  (:mod:`offload_shim.abi.dlpack`); the deleter and the capsule destructor are C
  (native/dlpack.c), as a consumer may call them with an exception pending.  A consumer
  renames the capsule ``"used_..."`` and calls the deleter when the array it made dies
  (numpy ``numpy/_core/src/multiarray/dlpack.c`` ``from_dlpack``).
* ``__cuda_array_interface__`` (version 3, Numba's CUDA Array Interface) on CUDA devices.
* ``get()`` copies back into a new ``numpy.ndarray`` (CuPy ``ndarray.get``);
  ``numpy.asarray(devarray)`` copies on GPU devices and views on host-memory devices
  (``__array__``).

Exported views and frees (never a dangling view): every DLPack export is counted until
its consumer calls the ``deleter``; an array whose ``__cuda_array_interface__`` was read
counts as exported while the array object lives (the consumer holds the object, as the
interface asks).  A free -- :meth:`DeviceArray.free` or the array's death -- while exports
are live is deferred: the block goes back to the pool when the last export ends.  A
teardown cannot wait that way (``deinit_device`` would free the memory under the view), so
``Device.deinit`` and ``Runtime.close`` refuse with
:class:`~offload_shim.errors.ExportedMemoryError` while a view of the device is live.
Once the device was torn down (a ``Runtime.close`` or ``deinit`` with no live view), the
array's memory is gone: using it raises :class:`~offload_shim.errors.LifecycleError`.

A free that the garbage collector's cycle collection triggers in the collecting thread (an
array in a reference cycle) is put aside and done at the next ``Device.empty``/``asarray``
or :meth:`DeviceArray.free`, or by the device's teardown: the collector may run while that
thread holds the pool's (non-reentrant) lock.  Other threads free at once.

NumPy is needed here (``pip install 'offload-shim[arrays]'``); nothing else of the package
imports this module.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import operator
import threading
import weakref
from collections import deque

try:
    import numpy
except ModuleNotFoundError as _exc:            # pragma: no cover - numpy is a test dependency
    raise ModuleNotFoundError(
        "device arrays (Device.empty, Device.asarray) need NumPy: "
        "pip install 'offload-shim[arrays]'", name="numpy") from _exc

from ..abi import dlpack as _dl
from ..abi.dlpack import kDLCPU, kDLCUDA
from ..errors import LifecycleError, UnknownPointerError
from ..lazylog import log
from .device_state import MAX_SIZE as _MAX_BYTES   # the plugins' int64_t / size_t sizes

__all__ = ["DeviceArray", "kDLCPU", "kDLCUDA", "new_empty", "new_asarray"]

#: ``DLDataTypeCode`` of NumPy dtype kinds (dlpack.h v0.8: kDLInt 0, kDLUInt 1,
#: kDLFloat 2, kDLComplex 5, kDLBool 6)
_DL_CODE = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}


def _dlpack_dtype(dt) -> bool:
    """Whether DLPack can name the NumPy dtype ``dt``: bool/int/uint/float/complex in
    native byte order, not structured, no sub-array."""
    return (dt.kind in _DL_CODE and dt.isnative and dt.fields is None
            and dt.subdtype is None)


#: live DLPack exports: manager_ctx key -> (block, (managed tensor, shape, strides)); the
#: entry keeps the structures the consumer reads alive until the export ends
_EXPORTS: dict[int, tuple] = {}
_keys = itertools.count(1)
_books = threading.Lock()          # export counts and free states; never held across a call


def _export_ended(key: int) -> None:
    """An export ended: its consumer called the deleter, or its capsule died unconsumed
    (called from native/dlpack.c with the GIL held and no exception pending)."""
    rec = _EXPORTS.pop(key, None)
    if rec is not None:
        block, _keep_alive = rec
        _quietly(block.view_ended)


def _quietly(fn) -> None:
    """Run a free that no caller waits for (an export's end, a put-aside free): a
    failure is logged (the ``offload_shim`` logger), never raised into C or into an
    unrelated call."""
    try:
        fn()
    except Exception as exc:             # pragma: no cover - a plugin's free failed
        log.warning("a device array's block could not be freed: %s", exc)


# -- frees the cycle collector triggers -----------------------------------------------------

_collecting = None                 # the thread running a cycle collection, or None
_pending: deque = deque()          # blocks whose free waits for the end of a collection


def _gc_phase(phase: str, info: dict) -> None:
    global _collecting
    _collecting = threading.get_ident() if phase == "start" else None


gc.callbacks.append(_gc_phase)


def flush_pending() -> None:
    """Free the blocks whose free came during a cycle collection (module docstring)."""
    while _pending:
        try:
            block = _pending.popleft()
        except IndexError:
            return
        _quietly(block.free_now)


class _Block:
    """The device memory of one array and its books (shared by the array, its
    finalizer and its exports; references no array, so it never keeps one alive).
    ``views``: live exports (DLPack exports not ended, plus 1 while a
    ``__cuda_array_interface__`` reader may hold the array)."""

    __slots__ = ("device", "pool", "ptr", "nbytes", "views", "cai", "freed", "released")

    def __init__(self, device, pool, ptr: int, nbytes: int):
        self.device = device
        self.pool = pool
        self.ptr = ptr
        self.nbytes = nbytes
        self.views = 0
        self.cai = False
        self.freed = False
        self.released = False

    def add_view(self) -> None:
        with _books:
            self.views += 1
            self.device._views_exported += 1

    def view_ended(self) -> None:
        with _books:
            self.views -= 1
            self.device._views_exported -= 1
            now = self.freed and not self.views
        if now:
            self.release()

    def request_free(self) -> None:
        """A free of the array (explicit, or its death): now, or when the last view ends."""
        with _books:
            if self.freed:
                return
            self.freed = True
            now = not self.views
        if now:
            self.release()

    def array_died(self) -> None:
        """The finalizer of the array object: its ``__cuda_array_interface__`` readers
        are done (they hold the object), then the array's free."""
        with _books:
            cai, self.cai = self.cai, False
        if cai:
            self.view_ended()
        self.request_free()

    def release(self) -> None:
        with _books:
            if self.released:
                return
            self.released = True
        if not self.ptr:
            return
        if _collecting is not None and _collecting == threading.get_ident():
            _pending.append(self)           # this thread may hold the pool's lock now
            return
        self.free_now()

    def free_now(self) -> None:
        blocks = self.device._array_blocks
        with _books:
            if blocks.get(self.ptr) is self:    # (a teardown cleared it: the drain freed it)
                del blocks[self.ptr]
        try:
            self.device._free_block(self.pool, self.ptr)
        except (LifecycleError, UnknownPointerError):
            pass            # the device's teardown drained the pool: the block is freed


def _shape_of(shape) -> tuple:
    """``shape`` (an int or a sequence of ints) as a tuple of ints >= 0."""
    try:
        dims = (operator.index(shape),)
    except TypeError:
        try:
            dims = tuple(operator.index(d) for d in shape)
        except TypeError:
            raise TypeError(f"shape must be an int or a sequence of ints, not "
                            f"{shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"negative dimension in shape {dims}")
    return dims


def _dtype_of(dtype):
    try:
        dt = numpy.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"not a NumPy dtype: {dtype!r} ({exc})") from None
    if dt.hasobject:
        raise TypeError(f"dtype {dt} holds Python objects: device memory holds bytes only")
    return dt


def _nbytes(shape: tuple, dtype) -> int:
    n = dtype.itemsize
    for d in shape:
        n *= d
    if n > _MAX_BYTES:
        raise ValueError(f"an array of shape {shape} and dtype {dtype} needs {n} bytes, "
                         f"above 2**63-1")
    return n


def _allocate(device, shape, dtype) -> DeviceArray:
    flush_pending()
    nbytes = _nbytes(shape, dtype)
    with device.in_use():
        pool = device.pool
        ptr = device.alloc(nbytes)
        block = _Block(device, pool, ptr, nbytes)
        if ptr:
            device._array_blocks[ptr] = block   # under the token: no drain clears it yet
    return DeviceArray(block, shape, dtype)


def new_empty(device, shape, dtype=float) -> DeviceArray:
    """``Device.empty``'s work (see there)."""
    shape, dtype = _shape_of(shape), _dtype_of(dtype)
    return _allocate(device, shape, dtype)


def new_asarray(device, obj, dtype=None) -> DeviceArray:
    """``Device.asarray``'s work (see there)."""
    if dtype is not None:
        dtype = _dtype_of(dtype)
    src = numpy.asarray(obj, dtype=dtype)
    if src.dtype.hasobject:
        raise TypeError(f"{type(obj).__name__} converts to an array of Python objects "
                        f"(dtype object): device memory holds bytes only")
    if not src.flags.c_contiguous:              # (ascontiguousarray would make 0-d 1-d)
        src = src.copy(order="C")
    arr = _allocate(device, src.shape, src.dtype)
    if arr.nbytes:
        try:
            arr._copy_in(src)
        except BaseException:
            arr.free()
            raise
    return arr


class DeviceArray:
    """An n-dimensional, C-contiguous array in device memory (made by
    :meth:`Device.empty <offload_shim.core.device.Device.empty>` and
    :meth:`Device.asarray <offload_shim.core.device.Device.asarray>`; not
    constructed directly).

    ``ptr`` (device address, int; 0 for an empty array), ``nbytes`` (bytes),
    ``shape``, ``dtype`` (``numpy.dtype``), ``strides`` (bytes, C order), ``size``,
    ``ndim``, ``itemsize``, ``device``; ``host_memory``: the device memory is host
    memory (``Plugin.device_memory_is_host``).  The module docstring has the
    protocols and the rules for exported views.
    """

    __slots__ = ("_block", "_shape", "_dtype", "_fin", "__weakref__")

    def __init__(self, block: _Block, shape: tuple, dtype):
        self._block = block
        self._shape = shape
        self._dtype = dtype
        self._fin = weakref.finalize(self, block.array_died)
        self._fin.atexit = False        # at exit Runtime.close's drain frees the pool

    # -- attributes ---------------------------------------------------------------------
    @property
    def ptr(self) -> int:
        return self._block.ptr

    @property
    def nbytes(self) -> int:
        return self._block.nbytes

    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def dtype(self):
        return self._dtype

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self._shape:
            n *= d
        return n

    @property
    def strides(self) -> tuple:
        """Bytes between elements along each axis, C order: those of ``numpy.empty(shape,
        dtype)`` (for a zero-size array NumPy's own convention, no memory taken)."""
        if not self.size:
            return numpy.empty(self._shape, self._dtype).strides
        out, step = [], self._dtype.itemsize
        for d in reversed(self._shape):
            out.append(step)
            step *= d
        return tuple(reversed(out))

    @property
    def device(self):
        return self._block.device

    @property
    def host_memory(self) -> bool:
        return bool(self._block.device.plugin.device_memory_is_host)

    @property
    def freed(self) -> bool:
        """True after :meth:`free` (the memory may still be held by live views)."""
        return self._block.freed

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d device array")
        return self._shape[0]

    def __repr__(self) -> str:
        state = " freed" if self._block.freed else ""
        return (f"<DeviceArray {self._block.device.label} shape={self._shape} "
                f"dtype={self._dtype} ptr={self._block.ptr:#x}{state}>")

    # -- lifetime -------------------------------------------------------------------------
    def _check_usable(self) -> None:
        b = self._block
        if b.freed:
            raise LifecycleError(f"{b.device.label}: device array used after free()",
                                 device=b.device.label)
        if b.pool.closed:
            raise LifecycleError(
                f"{b.device.label}: device array used after its device was torn down "
                f"(the teardown freed its memory)", device=b.device.label)

    def _check_bookable(self) -> None:
        """Inside ``device.in_use()``, before an export is booked: the memory is still
        this array's and no close is counting the device's exports."""
        dev = self._block.device
        if dev.pool is not self._block.pool:
            raise LifecycleError(f"{dev.label}: device array used after its device was torn "
                                 "down (the teardown freed its memory)", device=dev.label)
        self._check_usable()
        if dev._exports_frozen:
            raise LifecycleError(f"{dev.label}: the runtime is closing: no new export of its "
                                 "device memory", device=dev.label)

    def free(self) -> None:
        """Give the memory back to the device's pool now; when exported views are
        live, when the last of them ends (deferred; a ``__cuda_array_interface__``
        reader counts until this object dies).  The array is unusable after
        (LifecycleError).  A second call is a no-op.  Raises LifecycleError when
        the device was torn down before (its teardown freed the memory)."""
        b = self._block
        flush_pending()
        if b.freed:
            return
        if b.pool.closed:
            self._check_usable()
        b.request_free()        # an array whose __cuda_array_interface__ was read keeps
        #                         its memory until the object dies (its readers hold it)

    # -- copies -----------------------------------------------------------------------------
    def _copy_in(self, src) -> None:
        """Copy the C-contiguous NumPy array ``src`` (``nbytes`` bytes) to the device."""
        self._transfer(src, to_device=True)

    def _transfer(self, host, to_device: bool) -> None:
        b = self._block
        self._check_usable()
        dev = b.device
        with dev.in_use():
            if dev.pool is not b.pool:          # torn down (and initialised again) meanwhile
                self._check_usable()
                raise LifecycleError(f"{dev.label}: device array used after its device was "
                                     "torn down (the teardown freed its memory)",
                                     device=dev.label)
            if to_device:
                dev.submit(b.ptr, host, nbytes=b.nbytes)
            else:
                dev.retrieve(host, b.ptr, nbytes=b.nbytes)

    def get(self):
        """A copy of the array in a new C-contiguous ``numpy.ndarray`` (CuPy
        ``ndarray.get``; ``data_retrieve``/``dev2host``).  Raises LifecycleError after
        :meth:`free` or the device's teardown."""
        out = numpy.empty(self._shape, self._dtype)
        if self._block.nbytes:
            self._transfer(out, to_device=False)
        else:
            self._check_usable()
        return out

    def set(self, obj) -> None:
        """Copy the host array ``obj`` (anything ``numpy.asarray`` takes) of the same shape
        and dtype into the array (CuPy ``ndarray.set``, which also casts nothing).
        Raises ValueError (another shape), TypeError (another dtype), LifecycleError."""
        src = numpy.asarray(obj)
        if src.shape != self._shape:
            raise ValueError(f"shape {src.shape} does not match the device array's {self._shape}")
        if src.dtype != self._dtype:
            raise TypeError(f"a {src.dtype} array cannot be set into a {self._dtype} device "
                            f"array (cast it first)")
        if not src.flags.c_contiguous:
            src = src.copy(order="C")
        if self._block.nbytes:
            self._transfer(src, to_device=True)
        else:
            self._check_usable()

    def __array__(self, dtype=None, copy=None):
        """``numpy.asarray(devarray)``: on a host-memory device a view of the device
        memory (an export: it holds the memory as ``numpy.from_dlpack`` does) unless a
        copy is asked for (``copy=True``), ``dtype`` differs or DLPack cannot name the
        array's dtype (datetime, structured, non-native byte order); else a copy
        (:meth:`get`).  ``copy=False`` where a copy is needed raises ValueError (NumPy 2
        ``__array__`` protocol)."""
        want = None if dtype is None else numpy.dtype(dtype)
        cast = want is not None and want != self._dtype
        viewable = _dlpack_dtype(self._dtype)
        if self.host_memory and not copy and not cast and viewable:
            return numpy.from_dlpack(self)
        if copy is False:
            why = ("a cast" if cast else "device memory" if not self.host_memory
                   else f"dtype {self._dtype} has no DLPack data type")
            raise ValueError(f"{self._block.device.label}: numpy.asarray of this device array "
                             f"needs a copy ({why}) but copy=False")
        out = self.get()
        return out.astype(want, copy=False) if cast else out

    # -- DLPack -------------------------------------------------------------------------------
    def __dlpack_device__(self) -> tuple:
        """``(kDLCPU, 0)`` on a host-memory device, ``(kDLCUDA, ordinal)`` on a CUDA device.
        Raises BufferError for other devices (no DLPack device type is known for them)."""
        dev = self._block.device
        if dev.plugin.device_memory_is_host:
            return (kDLCPU, 0)
        if dev.plugin.cuda_devices:
            return (kDLCUDA, dev.index)
        raise BufferError(f"{dev.label}: no DLPack device type for the memory of this "
                          f"plugin (neither host memory nor a CUDA device)")

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule over the device memory, no copy: a ``"dltensor_versioned"``
        capsule of a ``DLManagedTensorVersioned`` (DLPack 1.0, writable) when
        ``max_version`` is at least ``(1, 0)`` -- what NumPy 2.x's ``from_dlpack`` asks
        for --, else a ``"dltensor"`` capsule of the unversioned ``DLManagedTensor``
        (which NumPy 2.x views read-only).  The signature is the Array API
        standard's (2023.12).  ``copy=True`` exports a copy in new device memory of the
        same device (freed when the export ends); ``dl_device=(kDLCPU, 0)`` on a GPU
        device exports a host copy (NumPy's capsule of :meth:`get`).  ``stream``: the
        copies are synchronous, so there is nothing to order; on a CPU device it must
        be None.  The export holds the memory until the consumer calls the deleter (or
        the capsule dies unconsumed).  Raises BufferError (a dtype DLPack cannot
        express: not native byte order, or not bool/int/uint/float/complex;
        ``copy=False`` where a copy is needed; another ``dl_device``; no DLPack
        device), TypeError (a ``max_version`` that is not a pair of ints),
        LifecycleError (after :meth:`free` or the device's teardown)."""
        if max_version is not None and not (
                isinstance(max_version, tuple) and len(max_version) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in max_version)):
            raise TypeError(f"max_version must be None or a (major, minor) tuple of ints "
                            f"(the Array API's __dlpack__), not {max_version!r}")
        here = self.__dlpack_device__()
        if dl_device is not None:
            dl_device = tuple(dl_device)
        wants_host_copy = dl_device is not None and dl_device != here
        if wants_host_copy and dl_device[0] != kDLCPU:
            raise BufferError(f"cannot export to DLPack device {dl_device} (this array is on "
                              f"{here})")
        if wants_host_copy:
            if copy is False:
                raise BufferError(f"export to {dl_device} needs a copy, but copy=False")
            host = self.get()
            if max_version is None:
                return host.__dlpack__()
            return host.__dlpack__(max_version=max_version)
        if copy:                    # a copy on this device, held by its export alone
            self._check_usable()
            dup = new_asarray(self._block.device, self)
            return dup.__dlpack__(stream=stream, max_version=max_version)
        if here[0] == kDLCPU and stream is not None:
            raise BufferError(f"stream must be None for a kDLCPU export, not {stream!r}")
        dt = self._dtype
        if not _dlpack_dtype(dt):
            raise BufferError(f"dtype {dt} has no DLPack data type")
        code = _DL_CODE[dt.kind]
        b = self._block
        dev = b.device
        self._check_usable()
        ndim = len(self._shape)
        shape = (ctypes.c_int64 * max(ndim, 1))(*self._shape)
        strides = (ctypes.c_int64 * max(ndim, 1))(*(s // dt.itemsize for s in self.strides))
        versioned = max_version is not None and tuple(max_version)[:1] >= (1,)
        mt = _dl.DLManagedTensorVersioned() if versioned else _dl.DLManagedTensor()
        if versioned:
            mt.version.major, mt.version.minor = 1, 0
            mt.flags = 0            # writable, not a copy
        t = mt.dl_tensor
        t.data = b.ptr or None
        t.device.device_type, t.device.device_id = here
        t.ndim = ndim
        t.dtype.code, t.dtype.bits, t.dtype.lanes = code, dt.itemsize * 8, 1
        t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = 0
        key = next(_keys)
        mt.manager_ctx = key
        # the export is booked while the device is held, so a teardown (which waits for
        # calls in flight, then counts exports) sees it or refuses the export
        with dev.in_use():
            self._check_bookable()
            _EXPORTS[key] = (b, (mt, shape, strides))
            b.add_view()
        try:
            return _dl.new_capsule(mt, versioned, _export_ended)
        except BaseException:
            _export_ended(key)
            raise

    # -- CUDA Array Interface -----------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict:
        """Version 3 of Numba's CUDA Array Interface, on CUDA devices only
        (AttributeError elsewhere, so ``hasattr`` is False).  ``stream`` is None: the
        copies are synchronous.  While the array object lives its memory counts as
        exported (module docstring)."""
        b = self._block
        if not b.device.plugin.cuda_devices:
            raise AttributeError(f"{b.device.label}: __cuda_array_interface__ is for CUDA "
                                 f"devices only")
        self._check_usable()
        with b.device.in_use():
            self._check_bookable()
            with _books:
                first, b.cai = not b.cai, True
                if first:
                    b.views += 1
                    b.device._views_exported += 1
        return {"shape": self._shape, "typestr": self._dtype.str, "descr": self._dtype.descr,
                "data": (b.ptr, False), "strides": None, "version": 3, "stream": None}
