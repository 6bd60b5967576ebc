"""ctypes layer of the libgomp side of ``libosh_interposer.so`` (native/interposer_gomp.c)
and of the real libgomp routines the Python side asks.

The C side forwards GCC's offload entry points (``GOMP_offload_register_ver``,
``GOMP_target_ext`` & co.) and, in host-device mode, GCC's ``omp_*`` device API routines
to one table of callbacks, ``struct osh_gomp_callbacks``; :class:`GompCallbacks` is its
ctypes twin (``size`` is checked by ``osh_gomp_set_callbacks``).

Return codes (interposer_gomp.c): :data:`OK` (0), :data:`FALLBACK` (1: libgomp's host
fallback, the real entry point with device ``GOMP_DEVICE_HOST_FALLBACK``), :data:`DEVICE`
(2: Python's host device does the construct), :data:`PASSTHROUGH` (3: the real entry point
with the program's own arguments; libgomp will run it on the host),
:data:`PASSTHROUGH_DEVICE` (4: the same, on one of libgomp's own devices), :data:`FATAL`
(-3: Python printed libgomp's ``gomp_fatal`` text; the C side exits with status 1).

Everything is bound lazily on first use, never at import (docs/style.md).
"""

from __future__ import annotations

import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_int, c_int32, c_int64, c_uint16,
                    c_uint32, c_uint64, c_void_p)

OK, FALLBACK, DEVICE, PASSTHROUGH, PASSTHROUGH_DEVICE, FATAL = 0, 1, 2, 3, 4, -3

#: construct kinds of the decide and map callbacks (interposer_gomp.c K_*)
K_TARGET, K_DATA, K_END_DATA, K_UPDATE, K_ENTER_EXIT = range(5)
#: api callback operations (interposer_gomp.c API_*), with the C routine each stands for
API_OPS = ("omp_get_num_devices", "omp_get_initial_device", "omp_get_device_num",
           "omp_target_alloc", "omp_target_free", "omp_target_is_present",
           "omp_target_memcpy", "omp_target_memcpy_rect", "omp_target_associate_ptr",
           "omp_target_disassociate_ptr", "omp_pause_resource")

# int (*)(int32_t unregister, uint32_t version, const void *host_table, int32_t type,
#         const void *target_data)
REG_CB = CFUNCTYPE(c_int, c_int32, c_uint32, c_void_p, c_int32, c_void_p)
# int (*)(int32_t kind, int32_t device, void *fn, uint64_t mapnum, void **hostaddrs,
#         uint64_t *sizes, uint16_t *kinds, uint32_t flags, void **depend, void **args)
DECIDE_CB = CFUNCTYPE(c_int, c_int32, c_int32, c_void_p, c_uint64, c_void_p, c_void_p,
                      c_void_p, c_uint32, c_void_p, c_void_p)
# int (*)(int32_t kind, uint64_t mapnum, void **hostaddrs, uint64_t *sizes,
#         uint16_t *kinds, uint32_t flags, uint64_t *out)
MAP_CB = CFUNCTYPE(c_int, c_int32, c_uint64, c_void_p, c_void_p, c_void_p, c_uint32,
                   POINTER(c_uint64))
# int (*)(uint64_t handle)
UNMAP_CB = CFUNCTYPE(c_int, c_uint64)
# int (*)(int32_t op, uint64_t *args, int32_t nargs, uint64_t *result)
API_CB = CFUNCTYPE(c_int, c_int32, c_void_p, c_int32, POINTER(c_uint64))

CALLBACK_FIELDS = (("reg", REG_CB), ("decide", DECIDE_CB), ("map", MAP_CB),
                   ("unmap", UNMAP_CB), ("api", API_CB))


class GompCallbacks(Structure):
    """``struct osh_gomp_callbacks`` (native/interposer_gomp.c)."""
    _fields_ = [("size", c_uint64), ("host_device", c_int64), *CALLBACK_FIELDS]


def make_callbacks(handlers: dict, *, host_device: bool) -> GompCallbacks:
    """A filled :class:`GompCallbacks`: ``handlers`` maps each name of
    :data:`CALLBACK_FIELDS` to a callable with that prototype's arguments (pointers as
    ints, ``out``/``result`` as ctypes pointers).  Keep the result alive while
    installed."""
    cb = GompCallbacks()
    cb.size = ctypes.sizeof(GompCallbacks)
    cb.host_device = 1 if host_device else 0
    for name, proto in CALLBACK_FIELDS:
        setattr(cb, name, proto(handlers[name]))
    return cb


_bound: set[int] = set()


def bind(lib) -> None:
    """Set the prototypes of the libgomp-side control API on the interposer ``lib`` (once
    per library): ``int osh_gomp_set_callbacks(const struct osh_gomp_callbacks *)`` (NULL
    uninstalls, -1 on a size mismatch), ``int osh_gomp_registered(uint64_t *out, int
    max)``."""
    if id(lib) in _bound:
        return
    _bound.add(id(lib))
    lib.osh_gomp_set_callbacks.argtypes = [POINTER(GompCallbacks)]
    lib.osh_gomp_set_callbacks.restype = c_int
    lib.osh_gomp_registered.argtypes = [POINTER(c_uint64), c_int]
    lib.osh_gomp_registered.restype = c_int


def set_callbacks(lib, table: GompCallbacks | None) -> int:
    """``osh_gomp_set_callbacks(table or NULL)``: 0, or -1 on a size mismatch."""
    bind(lib)
    return int(lib.osh_gomp_set_callbacks(ctypes.byref(table) if table is not None
                                          else None))


def registered(lib) -> list[tuple[int, int, int, int]]:
    """GCC registrations the interposer saw and no unregistration removed, oldest first:
    ``(version, host_table, target_type, target_data)``."""
    bind(lib)
    n = lib.osh_gomp_registered(None, 0)
    if n <= 0:
        return []
    buf = (c_uint64 * (4 * n))()
    n = min(n, lib.osh_gomp_registered(buf, n))
    return [(int(buf[4 * i]), int(buf[4 * i + 1]), ctypes.c_int64(buf[4 * i + 2]).value,
             int(buf[4 * i + 3])) for i in range(n)]


# -- host memory the mapping reads and writes ---------------------------------------------
def read_u64s(addr: int, n: int) -> list[int]:
    """``n`` uint64 (pointers, ``size_t``) at ``addr``; [] for NULL or n == 0."""
    if not addr or n <= 0:
        return []
    return list((c_uint64 * n).from_address(addr))


def read_u16s(addr: int, n: int) -> list[int]:
    """``n`` ``unsigned short`` map kinds at ``addr``."""
    if not addr or n <= 0:
        return []
    return list((c_uint16 * n).from_address(addr))


def write_u64(addr: int, value: int) -> None:
    """Store the 64-bit ``value`` (e.g. a pointer) at the host address ``addr``."""
    c_uint64.from_address(addr).value = value & 0xFFFFFFFFFFFFFFFF


def read_u64(addr: int) -> int:
    """The 64-bit value (e.g. a pointer) at the host address ``addr``."""
    return int(c_uint64.from_address(addr).value)


def host_memmove(dst: int, src: int, n: int) -> None:
    """``memmove(dst, src, n)`` between host addresses (``omp_target_memcpy`` between two
    host pointers)."""
    if n > 0:
        ctypes.memmove(dst, src, n)


def read_target_args(addr: int) -> list[int]:
    """The NULL-terminated ``void **args`` vector of ``GOMP_target_ext`` (at most 64
    words)."""
    out = []
    if not addr:
        return out
    for i in range(64):
        v = int(c_uint64.from_address(addr + 8 * i).value)
        if v == 0:
            break
        out.append(v)
    return out


class ScratchBuffer:
    """``n`` bytes of host memory at ``.address`` (argument blocks, pointer cells)."""
    __slots__ = ("_b",)

    def __init__(self, n: int):
        self._b = ctypes.create_string_buffer(max(int(n), 1))

    @property
    def address(self) -> int:
        return ctypes.addressof(self._b)

    @classmethod
    def of(cls, data: bytes) -> "ScratchBuffer":
        """A buffer holding ``data``."""
        b = cls(len(data))
        ctypes.memmove(b.address, data, len(data))
        return b

    def set_u64s(self, values) -> None:
        for i, v in enumerate(values):
            c_uint64.from_address(self.address + 8 * i).value = v & 0xFFFFFFFFFFFFFFFF


# -- the real libgomp ----------------------------------------------------------------------
def host_malloc(size: int) -> int:
    """libc ``malloc(size)`` (what libgomp returns for the initial device); 0 on failure."""
    from .interposer import malloc
    return malloc(size)


def host_free(ptr: int) -> None:
    """libc ``free(ptr)``."""
    from .interposer import free
    if ptr:
        free(ptr)


class RealLibgomp:
    """The routines of the ``libgomp.so.1`` already mapped in this process, looked up in
    that library itself (handle-scoped ``dlsym``), so never the interposer's copies.
    Raises OSError when libgomp is not loaded."""

    def __init__(self):
        self._lib = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)
        for name in ("omp_get_num_devices", "omp_get_default_device",
                     "omp_get_initial_device"):
            getattr(self._lib, name).restype = c_int
            getattr(self._lib, name).argtypes = []
        self._lib.omp_pause_resource.restype = c_int
        self._lib.omp_pause_resource.argtypes = [c_int, c_int]

    def num_devices(self) -> int:
        """``omp_get_num_devices()``: libgomp's own device count (starts its plugins
        once, as its first construct would)."""
        return int(self._lib.omp_get_num_devices())

    def default_device(self) -> int:
        """``omp_get_default_device()``: the calling task's ``default-device-var``."""
        return int(self._lib.omp_get_default_device())

    def pause_resource(self, kind: int, device: int) -> int:
        """``omp_pause_resource(kind, device)``."""
        return int(self._lib.omp_pause_resource(kind, device))


_real: RealLibgomp | None = None


def real_libgomp() -> RealLibgomp:
    """The process's :class:`RealLibgomp` (OSError when libgomp is not loaded)."""
    global _real
    if _real is None:
        _real = RealLibgomp()
    return _real


__all__ = ["API_OPS", "CALLBACK_FIELDS", "DEVICE", "FALLBACK", "FATAL", "GompCallbacks",
           "K_DATA", "K_END_DATA", "K_ENTER_EXIT", "K_TARGET", "K_UPDATE", "OK",
           "PASSTHROUGH", "PASSTHROUGH_DEVICE", "RealLibgomp", "ScratchBuffer", "bind",
           "host_free", "host_malloc", "host_memmove", "make_callbacks", "read_target_args", "read_u16s",
           "read_u64", "read_u64s", "real_libgomp", "registered", "set_callbacks",
           "write_u64"]
