"""ctypes layer of ``libosh_interposer.so`` (native/interposer.c) and of the host memory
the interposer reads: the callback table, its prototypes, the control API, and the few
libc / libdl / libomp functions the interposer needs.

The C side forwards libomptarget 16's host entry points (``VERS1.0``) and libgomp's
offload entry points to one table of callbacks, ``struct osh_interposer_callbacks``;
:class:`Callbacks` is its ctypes twin (``size`` is checked by
``osh_interposer_set_callbacks``).  Return protocol of every callback (interposer.c):
:data:`CB_OK` (0), :data:`CB_FAIL` (-1, host fallback where libomptarget falls back),
:data:`CB_FATAL` (-2, Python printed the fatal message; the C side aborts).  The libgomp
side has its own table: :mod:`offload_shim.abi.gomp_interposer`.

Everything is bound lazily on first use, never at import (docs/style.md).
"""

from __future__ import annotations

import ctypes
import os
import struct
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_int32, c_int64,
                    c_uint32, c_uint64, c_void_p)

from . import libc as _libc

# -- return protocol (native/interposer.c) ----------------------------------------------
CB_OK, CB_FAIL, CB_FATAL = 0, -1, -2

# -- callback prototypes (native/interposer.c typedefs) ---------------------------------
# int (*)(void *desc)                                  register_lib / unregister_lib
DESC_CB = CFUNCTYPE(c_int, c_void_p)
# int (*)(int64_t flags)
REQ_CB = CFUNCTYPE(c_int, c_int64)
# int (*)(void *loc, int64_t dev, int32_t teams, int32_t threads, void *host_ptr, void *kargs)
KERNEL_CB = CFUNCTYPE(c_int, c_void_p, c_int64, c_int32, c_int32, c_void_p, c_void_p)
# int (*)(int32_t kind, void *loc, int64_t dev, int32_t n, void **bases, void **args,
#         int64_t *sizes, int64_t *types, void **names, void **mappers)
DATA_CB = CFUNCTYPE(c_int, c_int32, c_void_p, c_int64, c_int32, POINTER(c_void_p),
                    POINTER(c_void_p), POINTER(c_int64), POINTER(c_int64),
                    POINTER(c_void_p), POINTER(c_void_p))
# int (*)(uint64_t size, int32_t dev, int32_t kind, void **out)      kind: TargetAllocTy
ALLOC_CB = CFUNCTYPE(c_int, c_uint64, c_int32, c_int32, POINTER(c_void_p))
# int (*)(void *ptr, int32_t dev, int32_t kind)
FREE_CB = CFUNCTYPE(c_int, c_void_p, c_int32, c_int32)
# int (*)(void *dst, const void *src, uint64_t len, uint64_t dst_off, uint64_t src_off,
#         int32_t dst_dev, int32_t src_dev)
MEMCPY_CB = CFUNCTYPE(c_int, c_void_p, c_void_p, c_uint64, c_uint64, c_uint64, c_int32,
                      c_int32)
# int (*)(const void *ptr, int32_t dev)                returns 0/1
PRESENT_CB = CFUNCTYPE(c_int, c_void_p, c_int32)
# int (*)(void)
NUMDEV_CB = CFUNCTYPE(c_int)
# int (*)(void *frame)                                 one construct (FRAME_* layout)
CONSTRUCT_CB = CFUNCTYPE(c_int, c_void_p)

# int (*)(int32_t which, const uint64_t *args, int32_t nargs, uint64_t *result)
API_CB = CFUNCTYPE(c_int, c_int32, POINTER(c_uint64), c_int32, POINTER(c_uint64))
#: ``which`` of the ``api`` callback (native/interposer.c OSH_API_*)
API_ASSOCIATE, API_DISASSOCIATE, API_MAPPED_PTR, API_LOCK, API_UNLOCK, \
    API_PRINT_DEVICE_INFO, API_SET_INFO_FLAG = range(1, 8)
#: the routines libomptarget 19.1 / 22.1 added (native/interposer_internal.h OSH_API_*,
#: native/interposer_api.c)
API_IS_ACCESSIBLE, API_UID_FROM_DEVICE, API_DEVICE_FROM_UID, API_DUMP_TABLES, \
    API_RECORD_REPLAY, API_INTEROP = range(8, 14)
#: ``API_INTEROP``'s first argument (interposer_api.c IOP_OP_*) and the bits of the plan
#: it answers for the init / use / destroy / get routines (IOP_WAIT ...)
IOP_OP_INIT, IOP_OP_USE, IOP_OP_DESTROY, IOP_OP_GET, IOP_OP_DEVICE_INFO, IOP_OP_USE60, \
    IOP_OP_RELEASE, IOP_OP_CALLBACK = range(1, 9)
IOP_WAIT, IOP_DEVICE_INFO, IOP_FORWARD = 1, 2, 4

#: (field, prototype) of ``struct osh_interposer_callbacks`` after ``size``, in order
CALLBACK_FIELDS = (
    ("register_lib", DESC_CB), ("unregister_lib", DESC_CB), ("register_requires", REQ_CB),
    ("target_kernel", KERNEL_CB), ("target_data", DATA_CB), ("target_alloc", ALLOC_CB),
    ("target_free", FREE_CB), ("target_memcpy", MEMCPY_CB),
    ("target_is_present", PRESENT_CB), ("num_devices", NUMDEV_CB),
    ("construct", CONSTRUCT_CB), ("api", API_CB))


class Callbacks(Structure):
    """``struct osh_interposer_callbacks`` (native/interposer.c)."""
    _fields_ = [("size", c_uint64), *CALLBACK_FIELDS]


def make_callbacks(handlers: dict) -> Callbacks:
    """A filled :class:`Callbacks` table: ``handlers`` maps each field name of
    :data:`CALLBACK_FIELDS` to a Python callable with that prototype's arguments
    (ctypes converts; pointer arrays arrive as ctypes pointers).  Raises KeyError for a
    missing handler.  Keep the returned object alive while the table is installed."""
    cb = Callbacks()
    cb.size = ctypes.sizeof(Callbacks)
    for name, proto in CALLBACK_FIELDS:
        setattr(cb, name, proto(handlers[name]))
    return cb


#: osh_interposer_calls() counter indices (native/interposer_internal.h enum C_*)
CALL_COUNTERS = ("register_lib", "unregister_lib", "register_requires", "target_kernel",
                 "target_data", "target_alloc", "target_free", "target_memcpy",
                 "target_is_present", "num_devices", "gomp_register", "gomp_unregister",
                 "fallback", "gomp_target", "gomp_data", "gomp_fallback", "gomp_device",
                 "api", "update_repeated", "kernel_repeated", "kernel_orphaned",
                 "kernel_waited", "enter_repeated", "exit_repeated")


def bind_interposer(path: str) -> ctypes.CDLL:
    """``dlopen(path, RTLD_NOW | RTLD_GLOBAL)`` and set the control API's prototypes:

    * ``int osh_interposer_set_callbacks(const struct osh_interposer_callbacks *)``
      (NULL uninstalls; -1 on a size mismatch)
    * ``int osh_interposer_registered(void **out, int max)`` (descriptors registered and
      not unregistered, in order; returns the total)
    * ``uint64_t osh_interposer_calls(int which)``
    * ``int64_t osh_interposer_requires(void)``
    * ``int osh_interposer_pending_requires(int64_t *flags)`` (a ``__tgt_register_requires``
      recorded by a deferred boot and not yet delivered: 1 and its flags, once)
    * ``void osh_interposer_note_plugin(const void *addr)`` (the object holding
      ``addr`` is one of the runtime's plugins: ``offload-shim run`` stops the runtime
      before an exit handler of that object runs)
    * ``int osh_interposer_exiting(void)`` (``offload-shim run``: the process has begun
      to finalise its objects, ``_dl_fini``)
    * ``void osh_interposer_keep_plugins(void)`` (``offload-shim run``: the plugins' own
      exit handlers must not run: a kernel is still running at exit)
    * ``void osh_interposer_set_runtime_name(const char *)`` (the runtime's name in the
      lines the C side prints itself: ``Libomptarget`` or ``omptarget``)

    Raises OSError (dlopen)."""
    lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    lib.osh_interposer_set_callbacks.argtypes = [POINTER(Callbacks)]
    lib.osh_interposer_set_callbacks.restype = c_int
    lib.osh_interposer_registered.argtypes = [POINTER(c_void_p), c_int]
    lib.osh_interposer_registered.restype = c_int
    lib.osh_interposer_calls.argtypes = [c_int]
    lib.osh_interposer_calls.restype = c_uint64
    lib.osh_interposer_requires.restype = c_int64
    lib.osh_interposer_pending_requires.argtypes = [POINTER(c_int64)]
    lib.osh_interposer_pending_requires.restype = c_int
    lib.osh_interposer_note_plugin.restype = None
    lib.osh_interposer_exiting.restype = c_int
    lib.osh_interposer_exiting.argtypes = []
    lib.osh_interposer_keep_plugins.restype = None
    lib.osh_interposer_keep_plugins.argtypes = []
    lib.osh_interposer_set_runtime_name.restype = None
    lib.osh_interposer_set_runtime_name.argtypes = [c_char_p]
    lib.osh_interposer_note_plugin.argtypes = [c_void_p]
    lib.osh_mapper_components_new.restype = c_void_p
    lib.osh_mapper_components_new.argtypes = []
    lib.osh_mapper_components_get.restype = c_int64
    lib.osh_mapper_components_get.argtypes = [c_void_p, POINTER(c_void_p)]
    lib.osh_mapper_components_free.restype = None
    lib.osh_mapper_components_free.argtypes = [c_void_p]
    lib.osh_interposer_repeat_put.restype = c_int
    lib.osh_interposer_repeat_put.argtypes = [c_int64, c_int32, c_void_p, c_uint64, c_uint64,
                                              c_uint64, c_int32, c_void_p]
    lib.osh_interposer_repeat_reset.restype = None
    lib.osh_interposer_repeat_reset.argtypes = [c_int]
    lib.osh_interposer_repeat_put_kernel.restype = c_int
    lib.osh_interposer_repeat_put_kernel.argtypes = [
        c_int64, c_uint64, ctypes.c_uint32, c_int32, c_void_p, c_uint64, c_uint64, c_uint64,
        c_uint64, c_int32, c_uint64, c_int32, c_void_p, c_void_p, c_void_p, c_int32,
        c_void_p, c_uint64, c_uint64, c_int32, c_void_p, c_void_p, c_int32, c_void_p,
        c_int32, c_void_p]
    lib.osh_interposer_rotation_open.restype = c_int32
    lib.osh_interposer_rotation_open.argtypes = [c_int64, c_uint64, c_int32, c_void_p,
                                                 POINTER(ctypes.c_uint32)]
    lib.osh_interposer_rotation_drain.restype = c_int32
    lib.osh_interposer_rotation_drain.argtypes = [c_int64, c_void_p, c_int32, POINTER(c_int32)]
    lib.osh_interposer_repeat_reserve.restype = c_uint64
    lib.osh_interposer_repeat_reserve.argtypes = [c_int64, c_int32, c_void_p]
    lib.osh_interposer_repeat_unreserve.restype = None
    lib.osh_interposer_repeat_unreserve.argtypes = [c_uint64]
    lib.osh_interposer_rotation_state.restype = c_int
    lib.osh_interposer_rotation_state.argtypes = [c_int64, c_uint64, POINTER(c_int32),
                                                  POINTER(c_int32)]
    lib.osh_interposer_rotation_lend.restype = c_int
    lib.osh_interposer_rotation_lend.argtypes = [c_int64, c_uint64, POINTER(c_uint64)]
    lib.osh_interposer_rotation_blocks.restype = c_int64
    lib.osh_interposer_rotation_blocks.argtypes = [c_int64]
    lib.osh_interposer_repeat_wait.restype = c_int
    lib.osh_interposer_repeat_wait.argtypes = [c_int64, c_uint64, c_int64, c_int64]
    lib.osh_interposer_repeat_drop_held.restype = c_int32
    lib.osh_interposer_repeat_drop_held.argtypes = [c_int64, c_void_p, c_int32,
                                                     POINTER(c_int32)]
    lib.osh_interposer_repeat_busy.restype = c_void_p
    lib.osh_interposer_repeat_busy.argtypes = []
    lib.osh_interposer_repeat_slot_new.restype = c_int32
    lib.osh_interposer_repeat_slot_new.argtypes = [POINTER(ctypes.c_uint32)]
    lib.osh_interposer_repeat_slot_drop.restype = None
    lib.osh_interposer_repeat_slot_drop.argtypes = [c_int32]
    lib.osh_interposer_repeat_claim.restype = c_int
    lib.osh_interposer_repeat_claim.argtypes = [c_int32, c_int64, c_uint64]
    lib.osh_interposer_repeat_held.restype = c_int
    lib.osh_interposer_repeat_held.argtypes = [c_int32]
    lib.osh_interposer_repeat_steal.restype = c_int
    lib.osh_interposer_repeat_steal.argtypes = [c_int32]
    lib.osh_interposer_repeat_kernels.restype = c_int64
    lib.osh_interposer_repeat_kernels.argtypes = []
    lib.osh_interposer_repeat_stamps.restype = c_void_p
    lib.osh_interposer_repeat_stamps.argtypes = [POINTER(c_int32), POINTER(c_int32)]
    lib.osh_interposer_repeat_put_pair.restype = c_int
    lib.osh_interposer_repeat_put_pair.argtypes = [
        c_int64, c_int32, c_void_p, c_uint64, c_int32, c_void_p, c_uint64, c_uint64,
        c_uint64, c_uint64, c_uint64, c_int32, c_void_p, c_int32, c_void_p,
        POINTER(c_uint64)]
    lib.osh_interposer_repeat_take.restype = c_uint64
    lib.osh_interposer_repeat_take.argtypes = [c_int64]
    lib.osh_interposer_repeat_out.restype = c_void_p
    lib.osh_interposer_repeat_out.argtypes = []
    lib.osh_interposer_repeat_out_tokens.restype = c_int32
    lib.osh_interposer_repeat_out_tokens.argtypes = [c_void_p, c_int32]
    global _bound
    _bound = lib
    return lib


_bound = None
_stamps = None
_busy = None
_out = None


def repeat_slot_new() -> tuple[int, int]:
    """A slot of the C side's kernel repeats for a mapping-table row
    (``osh_interposer_repeat_slot_new``): ``(slot, generation)``, slot -1 when none is
    free or no interposer is bound."""
    if _bound is None:
        return -1, 0
    gen = ctypes.c_uint32()
    return _bound.osh_interposer_repeat_slot_new(ctypes.byref(gen)), gen.value


def repeat_slot_drop(slot: int) -> None:
    """The row of ``slot`` left its table (``osh_interposer_repeat_slot_drop``)."""
    if _bound is not None:
        _bound.osh_interposer_repeat_slot_drop(slot)


def repeat_claim(slot: int, dev: int, stamp: int) -> bool:
    """``osh_interposer_repeat_claim``: Python drops what it counts as the last
    reference of ``slot``'s row of device ``dev``, whose stamp becomes ``stamp``;
    whether a kernel repeat holds the row (then the reference was not the last)."""
    return _bound is not None and _bound.osh_interposer_repeat_claim(slot, dev, stamp) != 0


def _device_words(getter: str) -> memoryview:
    """The C side's per-device words that ``getter`` (a function of the bound
    interposer) returns the address of, as a view of signed 64-bit words (as many as
    :func:`repeat_stamps` has devices)."""
    addr = getattr(_bound, getter)()
    words = (ctypes.c_int64 * repeat_stamps()[1]).from_address(addr)
    return memoryview(words).cast("B").cast("q")


def repeat_busy() -> memoryview | None:
    """Per OpenMP device number (as many as :func:`repeat_stamps` has), how many kernel
    repeats of the C side with rows of their own are in flight
    (``osh_interposer_repeat_busy``): a read-only view of signed 64-bit words; None
    while no interposer is bound."""
    global _busy
    if _busy is None and _bound is not None:
        _busy = _device_words("osh_interposer_repeat_busy")
    return _busy


def repeat_out() -> memoryview | None:
    """Per OpenMP device number (as many as :func:`repeat_stamps` has), 1 while rows of
    an ``enter data`` the C side repeated are out of Python's table
    (``native/interposer_pair.c`` ``osh_interposer_repeat_out``): a read-only view of
    signed 64-bit words; None while no interposer is bound."""
    global _out
    if _out is None and _bound is not None:
        _out = _device_words("osh_interposer_repeat_out")
    return _out


def repeat_take(dev: int) -> int:
    """``osh_interposer_repeat_take``: the token of the pair whose rows are out on device
    ``dev`` (waiting for the C side's copies on them first; the pair is forgotten), 0
    when none are (or no interposer is bound)."""
    return _bound.osh_interposer_repeat_take(dev) if _bound is not None else 0


def repeat_wait(dev: int, hp: int, size: int, timeout_ns: int = 1_000_000_000) -> bool:
    """Wait while host ``[hp, hp+size)`` meets a row of its own of a kernel repeat in
    flight on device ``dev`` (``osh_interposer_repeat_wait``; the GIL is released);
    True when it gave up after ``timeout_ns``."""
    return _bound is not None and _bound.osh_interposer_repeat_wait(
        dev, hp & 0xFFFFFFFFFFFFFFFF, size, timeout_ns) != 0


def repeat_held(slot: int) -> bool:
    """``osh_interposer_repeat_held``: whether a kernel repeat holds ``slot``'s row now
    (a question only: no stamp moves, nothing is orphaned)."""
    return _bound is not None and _bound.osh_interposer_repeat_held(slot) != 0


def repeat_steal(slot: int) -> int:
    """``osh_interposer_repeat_steal``: Python drops a reference of ``slot``'s row
    while its own count is zero (one of the references the kernel repeats holding it
    stand for): 1 when it was the last, 0 when not, -1 when no repeat holds the row
    (or no interposer is bound)."""
    return _bound.osh_interposer_repeat_steal(slot) if _bound is not None else -1


def repeat_reserve(dev: int, ranges) -> int:
    """Tell the C side's repeats that host ranges ``ranges`` (``(begin, size)`` pairs,
    bytes) of OpenMP device ``dev`` are reserved by a construct Python runs now
    (``osh_interposer_repeat_reserve``): the repeats that could meet them go to
    Python until :func:`repeat_unreserve`.  The reservation's name, or 0 (no room, or
    no interposer bound)."""
    if _bound is None:
        return 0
    flat = [w for r in ranges for w in r]
    return _bound.osh_interposer_repeat_reserve(dev, len(flat) // 2,
                                                (c_uint64 * (len(flat) or 1))(*flat))


def repeat_unreserve(name: int) -> None:
    """The reservation :func:`repeat_reserve` named ``name`` ended."""
    if _bound is not None:
        _bound.osh_interposer_repeat_unreserve(name)


def repeat_kernels() -> int:
    """Kernel repeats of the C side in flight now, all threads
    (``osh_interposer_repeat_kernels``); 0 with no interposer bound."""
    return _bound.osh_interposer_repeat_kernels() if _bound is not None else 0


def repeat_stamps() -> tuple[memoryview, int, int] | None:
    """The repeat path's stamps of the bound interposer (``native/interposer_repeat.c``
    ``osh_interposer_repeat_stamps``): ``(words, devices, max_items)``, ``words`` a
    writable view of ``devices + 1`` unsigned 64-bit words (one per OpenMP device
    number below ``devices``, then the epoch); None while no interposer is bound."""
    global _stamps
    if _stamps is None and _bound is not None:
        devs, maxn = c_int32(), c_int32()
        addr = _bound.osh_interposer_repeat_stamps(ctypes.byref(devs), ctypes.byref(maxn))
        words = (c_uint64 * (devs.value + 1)).from_address(addr)
        _stamps = (memoryview(words).cast("B").cast("Q"), devs.value, maxn.value)
    return _stamps
# void (*)(void *handle, void *base, void *begin, int64_t size, int64_t type, void *name)
MAPPER_FN = CFUNCTYPE(None, c_void_p, c_void_p, c_void_p, c_int64, c_int64, c_void_p)
_COMPONENT = struct.Struct("<QQqqQ")       # MapComponentInfoTy, 40 bytes


def call_mapper(fn: int, base: int, begin: int, size: int, type_: int, name: int
                ) -> list[tuple[int, int, int, int, int]]:
    """Call the user-defined mapper function at ``fn`` (generated by clang) with a
    fresh component handle and return the components it pushed through
    ``__tgt_push_mapper_component``: ``(base, begin, size, type, name)``
    (LLVM 16 omptarget.cpp ``targetDataMapper``).  The handle is laid out as
    libomptarget's ``MapperComponentsTy``, an ``llvm::SmallVector`` with one element
    inline (native/interposer.c, "the component handle"); raises MemoryError when it
    cannot be allocated."""
    lib = _bound
    h = lib.osh_mapper_components_new()
    if not h:
        raise MemoryError("osh_mapper_components_new")
    try:
        MAPPER_FN(fn)(h, base or None, begin or None, size, _s64(type_), name or None)
        out = c_void_p()
        n = lib.osh_mapper_components_get(h, ctypes.byref(out))
        raw = read_bytes(out.value or 0, n * _COMPONENT.size)
        return [(b, p, sz, t & 0xFFFFFFFFFFFFFFFF, nm)
                for b, p, sz, t, nm in _COMPONENT.iter_unpack(raw)]
    finally:
        lib.osh_mapper_components_free(h)


def _s64(v: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    return v - (1 << 64) if v >> 63 else v


_NON_CONTIG = struct.Struct("<QQQ")        # __tgt_target_non_contig {offset, count, stride}


def read_non_contig(addr: int, ndims: int) -> list[tuple[int, int, int]]:
    """The ``__tgt_target_non_contig`` descriptors of a non-contiguous update
    argument: (offset, count, stride) per dimension, outermost first."""
    raw = read_bytes(addr, ndims * _NON_CONTIG.size)
    return list(_NON_CONTIG.iter_unpack(raw))


def api_args(args, n: int) -> list[int]:
    """The ``n`` 64-bit arguments of an ``api`` callback."""
    return [int(args[i]) for i in range(n)]


def set_callbacks(lib, table: Callbacks | None) -> int:
    """``osh_interposer_set_callbacks(table or NULL)``: 0, or -1 on a size mismatch."""
    return int(lib.osh_interposer_set_callbacks(ctypes.byref(table) if table is not None
                                                else None))


def registered_descriptors(lib) -> list[int]:
    """``__tgt_bin_desc`` addresses registered with the interposer and not unregistered,
    in registration order (``osh_interposer_registered``)."""
    n = lib.osh_interposer_registered(None, 0)
    if not n:
        return []
    arr = (c_void_p * n)()
    lib.osh_interposer_registered(arr, n)
    return [int(d) for d in arr if d]


def symbol_address(lib: ctypes.CDLL, name: str) -> int:
    """Address of ``name`` in ``lib`` (AttributeError when absent)."""
    return ctypes.cast(getattr(lib, name), c_void_p).value or 0


# -- libdl, libc (bound once in abi/libc.py), libomp --------------------------------------

def dlsym_default(name: str) -> int:
    """``dlsym(RTLD_DEFAULT, name)`` (0 when not found)."""
    return _libc.dlsym_default(name)


def malloc(size: int) -> int:
    """libc ``malloc(size)`` (bytes); 0 on failure."""
    return _libc.malloc(size)


def free(ptr: int) -> None:
    """libc ``free(ptr)``."""
    _libc.free(ptr)


def loaded_libomptarget() -> tuple[int, str] | None:
    """(LLVM major, path) of the ``libomptarget.so.<N>`` mapped into this process (the
    runtime a compiled program or library links; ``/proc/self/maps``), the newest when
    several are; None when there is none."""
    best = None
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libomptarget.so." in line:
                    found = _libomptarget_in_maps_line(line)
                    if found and (best is None or found[0] > best[0]):
                        best = found
    except OSError:
        return None
    return best


def _libomptarget_in_maps_line(line: str) -> tuple[int, str] | None:
    """(major, path) when a ``/proc/PID/maps`` line ends in a path
    ``/...libomptarget.so.<N>[.<digits and dots>]``, else None -- what the pattern
    ``(/\\S*libomptarget\\.so\\.(\\d+)[.\\d]*)$`` finds, read without compiling it (the
    embedded runtime asks at every start)."""
    parts = line.split()
    if not parts:
        return None
    tok = parts[-1]
    slash = tok.find("/")
    k = tok.rfind("libomptarget.so.")
    if slash < 0 or k < slash:
        return None
    rest = tok[k + len("libomptarget.so."):]
    n = 0
    while n < len(rest) and "0" <= rest[n] <= "9":
        n += 1
    if n == 0 or any(not ("0" <= c <= "9" or c == ".") for c in rest[n:]):
        return None
    return int(rest[:n]), tok[slash:]


def libomptarget_needed_by(addr: int) -> int | None:
    """LLVM major of the ``libomptarget.so.<N>`` that the loaded object holding
    ``addr`` names in ``DT_NEEDED`` (what a clang-built program or library links:
    ``libomptarget.so.16``, ``.19.1``, ``.22.1``); None when it names none or no
    loaded object holds ``addr``."""
    for name in _libc.needed_of(addr) or ():
        major = _libomptarget_soname_major(name)
        if major is not None:
            return major
    return None


def _libomptarget_soname_major(name: str) -> int | None:
    """N of a ``libomptarget.so.N[.M...]`` name, None for any other: what the pattern
    ``libomptarget\\.so\\.(\\d+)(?:\\.\\d+)*`` matched in full, read without ``re``
    (every registration asks; tests/test_run_startup.py compares the two)."""
    if not name.startswith("libomptarget.so."):
        return None
    parts = name[len("libomptarget.so."):].split(".")
    if not all(p.isdecimal() for p in parts):     # ("" is not: no empty part)
        return None
    return int(parts[0])


_libomp = None


def libomp() -> ctypes.CDLL | None:
    """``libomp.so.5`` if it is already loaded (``RTLD_NOLOAD``), else None.  The
    handle is kept once found (ctypes never closes one; asked per construct)."""
    global _libomp
    if _libomp is not None:
        return _libomp
    try:
        _libomp = ctypes.CDLL("libomp.so.5", mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
    except OSError:
        return None
    return _libomp


def kmpc_target_offload(omp) -> int | None:
    """libomp's ``__kmpc_get_target_offload()`` (``kmp_target_offload_kind``: 0
    disabled, 1 default, 2 mandatory), None when ``omp`` lacks it."""
    fn = getattr(omp, "__kmpc_get_target_offload", None) if omp is not None else None
    if fn is None:
        return None
    fn.restype = c_int
    return int(fn())


def omp_default_device(omp) -> int:
    """``omp_get_default_device()`` of the runtime library ``omp`` (libomp or libgomp)."""
    omp.omp_get_default_device.restype = c_int
    return int(omp.omp_get_default_device())


def libgomp() -> ctypes.CDLL:
    """``libgomp.so.1`` if loaded (``RTLD_NOLOAD``); raises OSError otherwise."""
    return ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)


# -- host memory ------------------------------------------------------------------------
def read_bytes(addr: int, n: int) -> bytes:
    """``n`` bytes at the host address ``addr``."""
    return ctypes.string_at(addr, n) if n > 0 else b""


def read_cstring(addr: int) -> bytes:
    """The NUL-terminated string at ``addr`` (without the NUL)."""
    return ctypes.string_at(addr)


def c_string_copy(text: bytes) -> int:
    """A ``malloc``'ed NUL-terminated copy of ``text`` (the C side frees it, or keeps
    it for the process); raises MemoryError when ``malloc`` fails, ValueError when
    ``text`` holds a NUL byte."""
    if b"\0" in text:
        raise ValueError("a C string cannot hold a NUL byte")
    addr = malloc(len(text) + 1)
    if not addr:
        raise MemoryError(f"malloc({len(text) + 1})")
    ctypes.memmove(addr, text + b"\0", len(text) + 1)
    return addr


def read_pointer(addr: int) -> int:
    """The pointer stored at the host address ``addr`` (0 for NULL)."""
    return c_void_p.from_address(addr).value or 0


def write_pointer(addr: int, value: int) -> None:
    """Store the pointer ``value`` at the host address ``addr``."""
    c_void_p.from_address(addr).value = value or None


def read_pointers(addr: int, n: int) -> list[int]:
    """``n`` pointers starting at ``addr`` (0 for NULL)."""
    if n <= 0:
        return []
    return [int(x or 0) for x in (c_void_p * n).from_address(addr)]


def host_memmove(dst: int, src: int, n: int) -> None:
    """``memmove(dst, src, n)`` between host addresses."""
    ctypes.memmove(dst, src, n)


class HostCell:
    """A pointer-sized host buffer (``.address``) holding ``value``: what the device
    copy of an attached pointer is sent from."""
    __slots__ = ("_v",)

    def __init__(self, value: int):
        self._v = c_void_p(value or None)

    @property
    def address(self) -> int:
        return ctypes.addressof(self._v)


class HostBuffer:
    """``n`` bytes of host scratch memory at ``.address`` (device-to-device copies)."""
    __slots__ = ("_b",)

    def __init__(self, n: int):
        self._b = ctypes.create_string_buffer(n)

    @property
    def address(self) -> int:
        return ctypes.addressof(self._b)


def ident_source(loc: int | None) -> str:
    """``ident_t.psource`` (``;file;function;line;col;;``) of a construct, or ''
    (libomp kmp.h: ``ident_t`` = 4 x int32 then ``char const *psource``)."""
    if not loc:
        return ""
    try:
        p = read_pointer(loc + 16)
        return read_cstring(p).decode(errors="replace") if p else ""
    except (ValueError, OSError):
        return ""


class MapArgs:
    """The argument arrays of one construct (``__tgt_target_data_*_mapper``,
    ``__tgt_kernel_arguments``), read into lists: ``bases``, ``args`` (host
    addresses, 0 for NULL), ``sizes`` (bytes), ``types`` (``OMP_TGT_MAPTYPE_*``, as
    unsigned 64-bit), ``names`` and ``mappers`` (addresses or 0).  ``set_base(i, v)``
    writes a base pointer back (``return_param``)."""
    __slots__ = ("n", "bases", "args", "sizes", "types", "names", "mappers", "_bases_ptr")

    def __init__(self, n, bases_ptr, args_ptr, sizes_ptr, types_ptr, names_ptr,
                 mappers_ptr):
        self.n = n = int(n)
        self._bases_ptr = bases_ptr
        self.bases = [int(bases_ptr[i] or 0) for i in range(n)] if bases_ptr else [0] * n
        self.args = [int(args_ptr[i] or 0) for i in range(n)] if args_ptr else [0] * n
        self.sizes = [int(sizes_ptr[i]) for i in range(n)] if sizes_ptr else [0] * n
        # int64 sizes arrive signed; libomptarget uses them as int64_t
        self.types = ([int(types_ptr[i]) & 0xFFFFFFFFFFFFFFFF for i in range(n)]
                      if types_ptr else [0] * n)
        self.names = _maybe_list(names_ptr, n)
        self.mappers = _maybe_list(mappers_ptr, n)

    @classmethod
    def from_lists(cls, bases, args, sizes, types, names=None) -> "MapArgs":
        """Arguments built in Python (a mapper's components); ``set_base`` only
        updates the list."""
        m = cls.__new__(cls)
        m.n = len(bases)
        m._bases_ptr = None
        m.bases, m.args = [int(b or 0) for b in bases], [int(a or 0) for a in args]
        m.sizes = [int(x) for x in sizes]
        m.types = [int(t) & 0xFFFFFFFFFFFFFFFF for t in types]
        m.names = [int(x or 0) for x in names] if names else None
        m.mappers = None
        return m

    def set_base(self, i: int, value: int) -> None:
        self.bases[i] = value
        if self._bases_ptr:
            self._bases_ptr[i] = value or None


def _maybe_list(ptr, n) -> list[int] | None:
    if not ptr or not ctypes.cast(ptr, c_void_p).value:
        return None
    return [int(ptr[i] or 0) for i in range(n)]


def kernel_args_version(kargs: int) -> int:
    """``KernelArgsTy.Version`` (the first ``uint32_t``) of the record at ``kargs``:
    read alone, before anything else, so a layout this runtime does not know is never
    decoded (abi/clang.py ``KERNEL_ARGS``)."""
    return int(c_uint32.from_address(kargs).value)


def kernel_map_args(kargs: int) -> tuple[MapArgs, "object"]:
    """(:class:`MapArgs`, the ``KernelArgsTy`` struct) of ``__tgt_target_kernel``'s
    ``__tgt_kernel_arguments *`` (LLVM 16 ``KernelArgsTy``, abi/tgt_rtl.py)."""
    from .tgt_rtl import KernelArgs
    ka = KernelArgs.from_address(kargs)
    return MapArgs(ka.NumArgs, ka.ArgBasePtrs, ka.ArgPtrs, ka.ArgSizes, ka.ArgTypes,
                   ka.ArgNames, ka.ArgMappers), ka


def unpack(fmt: str, addr: int) -> tuple:
    """``struct.unpack(fmt, bytes at addr)`` (little-endian formats)."""
    return struct.unpack(fmt, read_bytes(addr, struct.calcsize(fmt)))




# -- user libraries -----------------------------------------------------------------------
C_INT64 = c_int64     # default restype of LoadedLibrary.call (int64_t f(void))


def dlopen_local(path: str) -> tuple[int, str | None]:
    """``dlopen(path, RTLD_NOW | RTLD_LOCAL)``: (handle, None) or (0, dlerror text)."""
    return _libc.dlopen(path, os.RTLD_NOW | os.RTLD_LOCAL)


def dlclose(handle: int) -> str | None:
    """``dlclose(handle)``: None on success, else the dlerror text ('' if none)."""
    return _libc.dlclose(handle)


def cdll_from_handle(path: str, handle: int) -> ctypes.CDLL:
    """A ``ctypes.CDLL`` over an already opened ``handle`` (functions looked up with
    ``dlsym`` on it)."""
    return ctypes.CDLL(path, handle=handle)


# -- the construct frame (declared in native/interposer_frame.h) ------------------------
# Each FRAME_<NAME> is the header's OSH_FRAME_<NAME>; tests/test_frame_layout.py parses
# the header and fails when a value here differs.
#: word indices of the frame header (enum osh_frame_word)
FRAME_KIND = 0
FRAME_N = 1
FRAME_DEV = 2
FRAME_LOC = 3
FRAME_HOST_PTR = 4
FRAME_KARGS = 5
FRAME_TEAMS = 6
FRAME_THREADS = 7
FRAME_BASES_P = 8
FRAME_ARGS_P = 9
FRAME_SIZES_P = 10
FRAME_TYPES_P = 11
FRAME_NAMES_P = 12
FRAME_MAPPERS_P = 13
FRAME_KARGS_VERSION = 14
FRAME_COPIED = 15
FRAME_HEAD = 16
#: most arguments copied into a frame (OSH_FRAME_MAX)
FRAME_MAX = 256
FRAME_WORDS = FRAME_HEAD + 4 * FRAME_MAX
#: frame kinds (enum osh_frame_kind): data begin / end / update
#: (``__tgt_target_data_*_mapper``), kernel (``__tgt_target_kernel``)
FRAME_BEGIN = 0
FRAME_END = 1
FRAME_UPDATE = 2
FRAME_KERNEL = 3
#: crossings of the C side's repeat path of kernel constructs (never a construct of the
#: program; ``native/interposer_repeat.c``): ``FRAME_N`` rows of 5 words after the header
#: (slot, generation, host begin, size, FROM): rows the last repeat holding them dropped
#: after Python left them to it, and a failed repeated launch (``FRAME_KARGS``: the
#: plugin's return code)
FRAME_REPEAT_END = 4
FRAME_REPEAT_FAILED = 5
#: added to a data construct's kind by its ``_nowait`` entry points in the per-kind
#: callback; in a frame, word ``FRAME_HOST_PTR`` of a data construct is 1 for them
#: (OSH_DATA_NOWAIT)
DATA_NOWAIT = 0x10


def frame_view(addr: int) -> memoryview:
    """The ``uint64_t`` words of the construct frame at ``addr`` as a memoryview of
    format ``Q`` (the frame stays valid for the thread's life; keep the view)."""
    return memoryview((ctypes.c_uint64 * FRAME_WORDS).from_address(addr)).cast("B").cast("Q")


def frame_pointer_args(v: memoryview) -> tuple:
    """(bases, args, sizes, types, names, mappers) of a frame as the ctypes pointer
    objects the ``target_data`` callback receives (NULL as a NULL pointer)."""
    protos = (c_void_p, c_void_p, c_int64, c_int64, c_void_p, c_void_p)
    return tuple(ctypes.cast(v[FRAME_BASES_P + k] or 0, POINTER(t))
                 for k, t in enumerate(protos))


__all__ = ["API_ASSOCIATE", "API_DEVICE_FROM_UID", "API_DISASSOCIATE", "API_DUMP_TABLES",
           "API_INTEROP", "API_IS_ACCESSIBLE", "API_LOCK", "API_MAPPED_PTR",
           "API_RECORD_REPLAY", "API_UID_FROM_DEVICE", "IOP_DEVICE_INFO", "IOP_FORWARD",
           "IOP_OP_CALLBACK", "IOP_OP_DESTROY", "IOP_OP_DEVICE_INFO", "IOP_OP_GET",
           "IOP_OP_INIT", "IOP_OP_RELEASE", "IOP_OP_USE", "IOP_OP_USE60", "IOP_WAIT",
           "c_string_copy",
           "API_PRINT_DEVICE_INFO", "API_SET_INFO_FLAG", "API_UNLOCK", "api_args",
           "call_mapper", "read_non_contig", "CALLBACK_FIELDS", "CALL_COUNTERS", "CONSTRUCT_CB", "DATA_NOWAIT",
           "FRAME_ARGS_P", "FRAME_BASES_P", "FRAME_BEGIN", "FRAME_COPIED", "FRAME_DEV",
           "FRAME_END", "FRAME_HEAD", "FRAME_HOST_PTR", "FRAME_KARGS", "FRAME_KARGS_VERSION",
           "FRAME_KERNEL", "FRAME_KIND", "FRAME_LOC", "FRAME_MAPPERS_P", "FRAME_MAX",
           "FRAME_N", "FRAME_NAMES_P", "FRAME_REPEAT_END", "FRAME_REPEAT_FAILED",
           "FRAME_SIZES_P", "FRAME_TEAMS", "FRAME_THREADS",
           "FRAME_TYPES_P", "FRAME_UPDATE", "FRAME_WORDS",
           "frame_pointer_args", "frame_view", "CB_FAIL", "CB_FATAL", "CB_OK", "C_INT64",
           "Callbacks", "cdll_from_handle", "dlclose", "dlopen_local",
           "HostBuffer", "HostCell", "MapArgs",
           "bind_interposer", "dlsym_default", "free", "host_memmove", "ident_source",
           "kernel_args_version", "kernel_map_args", "kmpc_target_offload",
           "libgomp", "libomp", "libomptarget_needed_by", "loaded_libomptarget",
           "make_callbacks", "malloc", "omp_default_device", "read_bytes", "read_cstring",
           "read_pointer", "read_pointers", "registered_descriptors", "set_callbacks",
           "symbol_address", "unpack", "write_pointer"]
