"""Run compiler output through the Python runtime (issue 7).

``libosh_interposer.so`` (native/interposer.c) exports libomptarget 16's host entry
points under version node ``VERS1.0``.  Loaded ``RTLD_GLOBAL`` before a library built by
``clang-16 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu``, it receives that library's
``__tgt_register_lib`` (from its constructor), ``__tgt_target_kernel``,
``__tgt_target_data_{begin,end,update}_mapper``, ``omp_target_*`` calls and forwards them
here, where :class:`Interposer` implements libomptarget's host side over a
:class:`~offload_shim.Runtime`:

* registration (seed 000, prior-art I4): every ``__tgt_device_image`` of a
  ``__tgt_bin_desc`` becomes an :class:`~offload_shim.OffloadImage` whose host entries
  carry the library's *real* host addresses (region ids, globals) and is registered with
  :meth:`Runtime.register_image`; ``__tgt_unregister_lib`` (from ``dlclose``)
  unregisters it.  Images no plugin accepts are skipped, like libomptarget does.
* device numbers: a plugin's devices are appended the first time one of its plugins
  accepts a registered image (libomptarget 16 ``RTLsTy::registerLib``); the host is
  device ``omp_get_num_devices()``.
* the mapping table (libomptarget 16 ``DeviceTy::getTargetPointer`` /
  ``getTgtPtrBegin`` / ``targetDataBegin`` / ``targetDataEnd`` / ``targetDataUpdate``,
  ``omptarget.cpp``): per device, host range -> device range with a dynamic and a hold
  reference count, ``OMP_TGT_MAPTYPE_*`` bits of LLVM 16 ``omptarget.h`` (to, from,
  always, delete, ptr_and_obj, target_param, return_param, private, literal, implicit,
  close, present, ompx_hold, member_of), shadow pointers for ptr_and_obj, declare-target
  globals mapped with an infinite count.  Device memory comes from
  :meth:`Device.alloc` / :meth:`Device.free` (the pool).
* kernel launch: arguments computed like libomptarget's ``processDataBefore``: target
  parameter i is ``TgtPtrBegin`` with offset ``HstPtrBase - HstPtrBegin``; literals are
  passed by value; privates get a device copy for the duration of the launch.
* host fallback exactly where libomptarget 16 falls back (``checkDeviceAndCtors`` /
  ``handleTargetOutcome`` in interface.cpp + omptarget.cpp): ``OMP_TARGET_OFFLOAD`` (read
  from libomp's ``__kmpc_get_target_offload``) ``disabled``, or ``default`` with no
  device, or the host device number -> the construct returns "fail" and the compiled code
  runs its host version; any other failure under an effective ``mandatory`` policy
  prints libomptarget's fatal message and aborts the process.

GCC libraries (libgomp): ``GOMP_offload_register_ver`` / ``_unregister_ver`` register a
:class:`GompImage` (real host table + mkoffload's nvptx target data) with the runtime;
``GOMP_target_ext`` & co. are decided here like libgomp 12 (``resolve_device``) and, with
no usable device, run libgomp's own host fallback (the interposer calls the real entry
point with device -2).  See docs/interpose.md.

Not implemented (the construct fails, i.e. fatal under ``mandatory``): user-defined
mappers, non-contiguous ``target update``, ``requires unified_shared_memory``; GCC images
on a device (always the host fallback).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import threading
from ctypes import (CFUNCTYPE, POINTER, Structure, c_int, c_int32, c_int64, c_uint32,
                    c_uint64, c_void_p)
from pathlib import Path
from typing import Iterator

from ..abi import tgt_rtl as _tgt
from ..errors import InvalidImageError, LifecycleError, MissingEntryPointError, OffloadError
from ..core.images import HostEntry, OffloadImage
from ..elf.imageinfo import unwrap_image

log = logging.getLogger("offload_shim")

INTERPOSER_FILENAME = "libosh_interposer.so"

# OMP_TGT_MAPTYPE_* (LLVM 16 openmp/libomptarget/include/omptarget.h)
MAP_TO = 0x001
MAP_FROM = 0x002
MAP_ALWAYS = 0x004
MAP_DELETE = 0x008
MAP_PTR_AND_OBJ = 0x010
MAP_TARGET_PARAM = 0x020
MAP_RETURN_PARAM = 0x040
MAP_PRIVATE = 0x080
MAP_LITERAL = 0x100
MAP_IMPLICIT = 0x200
MAP_CLOSE = 0x400
MAP_PRESENT = 0x1000
MAP_OMPX_HOLD = 0x2000
MAP_NON_CONTIG = 0x100000000000
MAP_MEMBER_OF = 0xFFFF000000000000

OFFLOAD_DEVICE_DEFAULT = -1
#: libomp ``kmp_target_offload_kind``
TGT_DISABLED, TGT_DEFAULT, TGT_MANDATORY = 0, 1, 2

_CB_OK, _CB_FAIL, _CB_FATAL = 0, -1, -2
_INF = float("inf")
_ALIGN = 16     # device copies keep the host address modulo 16 (libomptarget pads by 8)

# callback prototypes: native/interposer.c
_DESC_CB = CFUNCTYPE(c_int, c_void_p)
_REQ_CB = CFUNCTYPE(c_int, c_int64)
_KERNEL_CB = CFUNCTYPE(c_int, c_void_p, c_int64, c_int32, c_int32, c_void_p, c_void_p)
_DATA_CB = CFUNCTYPE(c_int, c_int32, c_void_p, c_int64, c_int32, POINTER(c_void_p),
                     POINTER(c_void_p), POINTER(c_int64), POINTER(c_int64),
                     POINTER(c_void_p), POINTER(c_void_p))
_ALLOC_CB = CFUNCTYPE(c_int, c_uint64, c_int32, POINTER(c_void_p))
_FREE_CB = CFUNCTYPE(c_int, c_void_p, c_int32)
_MEMCPY_CB = CFUNCTYPE(c_int, c_void_p, c_void_p, c_uint64, c_uint64, c_uint64, c_int32,
                       c_int32)
_PRESENT_CB = CFUNCTYPE(c_int, c_void_p, c_int32)
_NUMDEV_CB = CFUNCTYPE(c_int)
_GOMP_CB = CFUNCTYPE(c_int, c_int32, c_uint32, c_void_p, c_int32, c_void_p)
_GOMP_TARGET_CB = CFUNCTYPE(c_int, c_int32, c_int32, c_void_p, c_uint64, c_void_p, c_void_p,
                            c_void_p, c_uint32)


class _Callbacks(Structure):
    _fields_ = [("size", c_uint64), ("register_lib", _DESC_CB), ("unregister_lib", _DESC_CB),
                ("register_requires", _REQ_CB), ("target_kernel", _KERNEL_CB),
                ("target_data", _DATA_CB), ("target_alloc", _ALLOC_CB),
                ("target_free", _FREE_CB), ("target_memcpy", _MEMCPY_CB),
                ("target_is_present", _PRESENT_CB), ("num_devices", _NUMDEV_CB),
                ("gomp_register", _GOMP_CB), ("gomp_target", _GOMP_TARGET_CB)]


#: osh_interposer_calls() counter indices (native/interposer.c)
CALL_COUNTERS = ("register_lib", "unregister_lib", "register_requires", "target_kernel",
                 "target_data", "target_alloc", "target_free", "target_memcpy",
                 "target_is_present", "num_devices", "gomp_register", "gomp_unregister",
                 "fallback", "gomp_target", "gomp_data", "gomp_fallback")

# libgomp (GCC 12 gomp-constants.h / target.c)
GOMP_DEVICE_ICV = -1
GOMP_DEVICE_HOST_FALLBACK = -2
GOMP_CONSTRUCTS = ("target", "target_data", "target_end_data", "target_update",
                   "target_enter_exit_data")
_GOMP_FALLBACK, _GOMP_FATAL = 1, -3

_native = None
_native_lock = threading.Lock()


def interposer_path() -> Path:
    """Path of the bundled ``libosh_interposer.so``; FileNotFoundError when not built."""
    from ..plugins.hostplugin import bundled_native_dir
    p = bundled_native_dir() / INTERPOSER_FILENAME
    if not p.is_file():
        raise FileNotFoundError(f"{p} is not built: install the package (pip install .) "
                                "or set OFFLOAD_SHIM_NATIVE_DIR")
    return p


def _libdl():
    lib = ctypes.CDLL(None)
    lib.dlopen.restype = c_void_p
    lib.dlopen.argtypes = [ctypes.c_char_p, c_int]
    lib.dlclose.restype = c_int
    lib.dlclose.argtypes = [c_void_p]
    lib.dlerror.restype = ctypes.c_char_p
    lib.dlsym.restype = c_void_p
    lib.dlsym.argtypes = [c_void_p, ctypes.c_char_p]
    return lib


def load_interposer() -> ctypes.CDLL:
    """Load ``libosh_interposer.so`` RTLD_GLOBAL (once per process) and check that
    the process resolves ``__tgt_register_lib`` to it (not to a libomptarget.so loaded
    into the global scope earlier).  Raises FileNotFoundError, OSError (dlopen),
    LifecycleError (another definition wins)."""
    global _native
    with _native_lock:
        if _native is not None:
            return _native
        lib = ctypes.CDLL(str(interposer_path()), mode=os.RTLD_NOW | os.RTLD_GLOBAL)
        lib.osh_interposer_set_callbacks.argtypes = [POINTER(_Callbacks)]
        lib.osh_interposer_set_callbacks.restype = c_int
        lib.osh_interposer_registered.argtypes = [POINTER(c_void_p), c_int]
        lib.osh_interposer_registered.restype = c_int
        lib.osh_interposer_calls.argtypes = [c_int]
        lib.osh_interposer_calls.restype = c_uint64
        lib.osh_interposer_requires.restype = c_int64
        dl = _libdl()
        ours = ctypes.cast(lib.__tgt_register_lib, c_void_p).value
        seen = dl.dlsym(None, b"__tgt_register_lib")  # RTLD_DEFAULT
        if seen != ours:
            raise LifecycleError(
                "__tgt_register_lib resolves to another library (a libomptarget.so was "
                "loaded RTLD_GLOBAL before the interposer): compiled libraries would "
                "bypass offload_shim")
        _native = lib
        return lib


def call_counts() -> dict[str, int]:
    """How often each interposed entry point was called in this process
    (``fallback``: kernels answered "run on the host")."""
    lib = load_interposer()
    return {name: int(lib.osh_interposer_calls(i)) for i, name in enumerate(CALL_COUNTERS)}


def _libomp():
    """libomp if already loaded (RTLD_NOLOAD), else None."""
    try:
        return ctypes.CDLL("libomp.so.5", mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
    except OSError:
        return None


def _ident_source(loc: int | None) -> str:
    """``ident_t.psource`` (``;file;function;line;col;;``) of a construct, or ''."""
    if not loc:
        return ""
    try:
        p = c_void_p.from_address(loc + 16).value
        return ctypes.string_at(p).decode(errors="replace") if p else ""
    except (ValueError, OSError):
        return ""


class _MapError(Exception):
    """A construct cannot be performed (libomptarget REPORT + OFFLOAD_FAIL)."""


class _Entry:
    """One row of a device's mapping table (libomptarget ``HostDataToTargetTy``)."""
    __slots__ = ("base", "begin", "end", "tgt", "alloc", "dyn", "hold", "owner")

    def __init__(self, base, begin, end, tgt, alloc, dyn, hold, owner=None):
        self.base, self.begin, self.end, self.tgt = base, begin, end, tgt
        self.alloc = alloc          # device pointer to free (None: a global of an image)
        self.dyn, self.hold = dyn, hold
        self.owner = owner          # OffloadImage for declare-target globals

    @property
    def infinite(self) -> bool:
        return self.dyn == _INF

    def inc(self, hold: bool) -> None:
        if self.infinite:
            return
        if hold:
            self.hold += 1
        else:
            self.dyn += 1

    def dec(self, hold: bool) -> None:
        if self.infinite:
            return
        if hold:
            self.hold = max(0, self.hold - 1)
        else:
            self.dyn = max(0, self.dyn - 1)

    def should_remove(self, hold: bool, force: bool) -> bool:
        """``decShouldRemove``: would one decrement (or a reset) drop the last reference."""
        if self.infinite:
            return False
        this, other = (self.hold, self.dyn) if hold else (self.dyn, self.hold)
        if other > 0:
            return False
        return this != 0 if force else this == 1

    def __repr__(self):
        return (f"<map [{self.begin:#x},{self.end:#x}) -> {self.tgt:#x} dyn={self.dyn} "
                f"hold={self.hold}>")


class MappingTable:
    """Host -> device mappings of one device, sorted by host begin address
    (libomptarget ``HostDataToTargetMap``, ``lookupMapping``).  Not thread-safe:
    the :class:`Interposer` lock guards it."""

    def __init__(self):
        self.entries: list[_Entry] = []
        self.shadow: dict[int, tuple[int, int, int]] = {}  # host ptr addr -> (host val, tgt addr, tgt val)

    def _index(self, hp: int) -> int:
        lo, hi = 0, len(self.entries)
        while lo < hi:                      # upper_bound on begin
            mid = (lo + hi) // 2
            if self.entries[mid].begin <= hp:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def lookup(self, hp: int, size: int) -> tuple[_Entry | None, bool, bool, bool]:
        """(entry, contained, extends_before, extends_after), libomptarget 16 rules
        (size 0: a pointer one past the end or inside [base, end) counts as contained)."""
        if not self.entries:
            return None, False, False, False
        up = self._index(hp)
        entry, contained, before, after = None, False, False, False
        if size == 0:
            if up > 0:
                entry = self.entries[up - 1]
                contained = hp < entry.end or hp < entry.base
            if not contained and up < len(self.entries):
                entry = self.entries[up]
                contained = hp >= entry.base
            return (entry if contained else None), contained, False, False
        if up > 0:
            entry = self.entries[up - 1]
            contained = entry.begin <= hp < entry.end and hp + size <= entry.end
            after = hp < entry.end < hp + size
        if not (contained or after) and up < len(self.entries):
            entry = self.entries[up]
            before = hp < entry.begin < hp + size
            after = hp < entry.end < hp + size
        if not (contained or before or after):
            entry = None
        return entry, contained, before, after

    def insert(self, entry: _Entry) -> None:
        i = self._index(entry.begin)
        self.entries.insert(i, entry)

    def remove(self, entry: _Entry) -> None:
        with contextlib.suppress(ValueError):
            self.entries.remove(entry)
        for addr in [a for a in self.shadow if entry.begin <= a < entry.end]:
            del self.shadow[addr]

    def __len__(self):
        return len(self.entries)


class LoadedLibrary:
    """A shared library ``dlopen``ed (RTLD_NOW | RTLD_LOCAL) while an
    :class:`Interposer` is active, so its constructors register its images with
    the Python runtime.  ``call(name)`` calls ``int64_t name(void)``;
    ``function(name, restype, argtypes)`` returns a ctypes function.  ``close()``
    ``dlclose``s it (destructors unregister); idempotent; also a context manager."""

    def __init__(self, path: str, handle: int):
        self.path = path
        self.handle = handle
        self._cdll = ctypes.CDLL(path, handle=handle)
        self._closed = False

    def function(self, name: str, restype=c_int64, argtypes=()):
        """The ctypes function ``name``.  Raises TypeError for a name that is not a
        str, MissingEntryPointError (an OffloadError; ``.function`` = ``name``) when
        the library exports no such symbol, LifecycleError after close."""
        if self._closed:
            raise LifecycleError(f"{self.path}: library is closed")
        if not isinstance(name, str):
            raise TypeError(f"function name must be a str, not {type(name).__name__}")
        try:
            fn = getattr(self._cdll, name)
        except AttributeError:
            raise MissingEntryPointError(f"{self.path}: no function {name!r} (the library "
                                         "does not export that symbol)",
                                         function=name) from None
        fn.restype = restype
        fn.argtypes = list(argtypes)
        return fn

    def call(self, name: str, *args, restype=c_int64):
        return self.function(name, restype)(*args)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        dl = _libdl()
        if dl.dlclose(self.handle) != 0:
            msg = dl.dlerror()
            raise OSError(f"dlclose({self.path}): {msg.decode() if msg else 'failed'}")

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<LoadedLibrary {self.path} {'closed' if self._closed else 'open'}>"


class GompImage(OffloadImage):
    """A GCC library's offload image as ``GOMP_offload_register_ver`` hands it over
    (issue 7).  ``gomp_version`` (packed, abi-reference 2.1), ``gomp_target_type``
    (``enum offload_target_type``: 5 = nvptx, 8 = gcn), ``gomp_target_data`` (address
    of mkoffload's target data, what ``GOMP_OFFLOAD_load_image`` takes),
    ``host_table``; entries: the functions then the variables of the host table, in
    libgomp's table order, named from the nvptx target data when it decodes
    (``device_data``: :func:`~offload_shim.elf.imageinfo.parse_nvptx_target_data`'s
    dict), else ``func<i>`` / ``var<j>``; host addresses: the library's real ones.
    ``data``: the PTX texts, NUL-separated (nvptx), else empty; ``machine`` is the
    target name.  Valid while the library stays loaded."""

    def __init__(self, data, entries, *, name, host_addresses, version, target_type,
                 target_data, host_table, device_data=None):
        from ..elf.imageinfo import GOMP_TARGET_TYPES
        super().__init__(data, entries, name=name, host_addresses=host_addresses,
                         machine=GOMP_TARGET_TYPES.get(target_type, f"gomp-{target_type}"))
        self.gomp_version = version
        self.gomp_target_type = target_type
        self.gomp_target_data = target_data
        self.host_table = host_table
        self.device_data = device_data

    @classmethod
    def from_registration(cls, version, host_table, target_type, target_data, funcs,
                          vars_) -> "GompImage":
        """Build from the arguments of ``GOMP_offload_register_ver`` and the decoded
        host table.  Raises ValueError (NULL host addresses, duplicate names)."""
        from ..elf.imageinfo import parse_nvptx_target_data
        dd = None
        data = b""
        fnames = [f"func{i}" for i in range(len(funcs))]
        vnames = [f"var{j}" for j in range(len(vars_))]
        if target_type == 5 and target_data:
            try:
                dd = parse_nvptx_target_data(lambda a, n: ctypes.string_at(a, n),
                                             target_data,
                                             cstring=lambda a: ctypes.string_at(a).decode(
                                                 errors="replace"))
            except InvalidImageError:
                dd = None
            if dd is not None:
                data = b"\0".join(ctypes.string_at(o["addr"], o["size"]).rstrip(b"\0")
                                  for o in dd["ptx_objs"])
                if len(dd["fn_names"]) == len(funcs):
                    fnames = list(dd["fn_names"])
                if len(dd["var_names"]) == len(vars_):
                    vnames = list(dd["var_names"])
        entries = [HostEntry(n, 0) for n in fnames]
        entries += [HostEntry(n, size & ~(1 << 63), 1 if size >> 63 else 0)
                    for n, (_a, size) in zip(vnames, vars_)]
        addrs = list(funcs) + [a for a, _s in vars_]
        return cls(data, entries, name=f"gomp@{target_data:#x}", host_addresses=addrs,
                   version=version, target_type=target_type, target_data=target_data,
                   host_table=host_table, device_data=dd)


_active: "Interposer | None" = None
_active_lock = threading.Lock()


class Interposer:
    """libomptarget's host side for compiled code, over ``runtime``.  Create with
    :func:`interpose`; only one is active per process (the native table is global).

    ``devices``: the libomptarget device list (OpenMP device numbers 0..n-1);
    ``libraries``: per registered ``__tgt_bin_desc`` address, its images;
    ``unsupported``: images no plugin accepted; ``gomp_registrations``: libgomp
    ``(version, host table, target type, target data, funcs, vars)`` records with the
    host function addresses and ``(address, size)`` variable pairs read from the table;
    ``errors``: messages of constructs that failed."""

    def __init__(self, runtime, *, policy: str | None = None):
        self.runtime = runtime
        self._lock = threading.RLock()
        self._policy_override = policy
        self.devices: list = []
        self._used_plugins: list = []
        self._tables: dict[int, MappingTable] = {}     # device number -> table
        self.libraries: dict[int, list[OffloadImage]] = {}
        self.unsupported: list[tuple[int, str]] = []
        self.gomp_registrations: list[dict] = []
        self.gomp_constructs: dict[str, int] = {k: 0 for k in GOMP_CONSTRUCTS}
        self.gomp_fallbacks = 0
        self.requires_flags = 0
        self.errors: list[str] = []
        self._loaded: list[LoadedLibrary] = []
        self._closed = False
        self._cb = None
        self._lib = None

    # -- lifecycle ------------------------------------------------------------------
    def _install(self) -> None:
        lib = load_interposer()
        cb = _Callbacks()
        cb.size = ctypes.sizeof(_Callbacks)
        cb.register_lib = _DESC_CB(self._guard(self._on_register))
        cb.unregister_lib = _DESC_CB(self._guard(self._on_unregister))
        cb.register_requires = _REQ_CB(self._guard(self._on_requires))
        cb.target_kernel = _KERNEL_CB(self._guard(self._on_kernel, construct=True))
        cb.target_data = _DATA_CB(self._guard(self._on_data, construct=True))
        cb.target_alloc = _ALLOC_CB(self._guard(self._on_alloc))
        cb.target_free = _FREE_CB(self._guard(self._on_free))
        cb.target_memcpy = _MEMCPY_CB(self._guard(self._on_memcpy))
        cb.target_is_present = _PRESENT_CB(self._guard(self._on_is_present, fail=0))
        cb.num_devices = _NUMDEV_CB(self._guard(self._num_devices, fail=0))
        cb.gomp_register = _GOMP_CB(self._guard(self._on_gomp))
        cb.gomp_target = _GOMP_TARGET_CB(self._guard(self._on_gomp_target,
                                                     fail=_GOMP_FALLBACK))
        if lib.osh_interposer_set_callbacks(ctypes.byref(cb)) != 0:
            raise LifecycleError("osh_interposer_set_callbacks rejected the table "
                                 "(struct size mismatch: rebuild the native library)")
        self._cb, self._lib = cb, lib
        # libraries registered before the callbacks existed (e.g. preloaded)
        n = lib.osh_interposer_registered(None, 0)
        if n:
            arr = (c_void_p * n)()
            lib.osh_interposer_registered(arr, n)
            for desc in arr:
                if desc and desc not in self.libraries:
                    self._on_register(desc)

    def close(self) -> None:
        """Close libraries loaded through :meth:`load_library` (newest first),
        unregister what is still registered, free the device memory of every
        remaining mapping, uninstall the callbacks.  Idempotent.  The runtime
        stays open (its owner closes it)."""
        global _active
        with self._lock:
            if self._closed:
                return
            for lib in reversed(self._loaded):
                try:
                    lib.close()
                except OSError as exc:
                    self.errors.append(str(exc))
            self._loaded.clear()
            for desc in list(self.libraries):
                self._on_unregister(desc)
            for num, table in self._tables.items():
                dev = self.devices[num]
                for e in list(table.entries):
                    if e.alloc:
                        with contextlib.suppress(OffloadError):
                            dev.free(e.alloc)
                table.entries.clear()
                table.shadow.clear()
            if self._lib is not None:
                self._lib.osh_interposer_set_callbacks(None)
            self._closed = True
        with _active_lock:
            if _active is self:
                _active = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def load_library(self, path: str | os.PathLike) -> LoadedLibrary:
        """``dlopen`` a compiled library (RTLD_NOW | RTLD_LOCAL); its constructors
        call ``__tgt_register_lib`` into this interposer.  Raises FileNotFoundError
        (no such file), IsADirectoryError, OSError with the dlerror text (not a shared
        library, a missing dependency...), LifecycleError after close."""
        import errno
        if self._closed:
            raise LifecycleError("interposer is closed")
        p = str(Path(path).resolve())
        if not os.path.exists(p):
            raise FileNotFoundError(errno.ENOENT, f"{path}: no such library file", str(path))
        if os.path.isdir(p):
            raise IsADirectoryError(errno.EISDIR, f"{path}: is a directory, not a shared "
                                    "library", str(path))
        dl = _libdl()
        h = dl.dlopen(p.encode(), os.RTLD_NOW | os.RTLD_LOCAL)
        if not h:
            msg = dl.dlerror()
            raise OSError(f"cannot load {path} as a shared library: "
                          f"{msg.decode(errors='replace') if msg else 'dlopen failed'}")
        lib = LoadedLibrary(p, h)
        self._loaded.append(lib)
        return lib

    def unload_library(self, lib: LoadedLibrary) -> None:
        """``dlclose`` (its destructors call ``__tgt_unregister_lib``)."""
        lib.close()
        with contextlib.suppress(ValueError):
            self._loaded.remove(lib)

    # -- callback plumbing ------------------------------------------------------------
    def _guard(self, fn, fail: int = _CB_FAIL, construct: bool = False):
        """Never let an exception cross into C (ctypes would return 0 = success).
        ``construct``: an error inside a target construct is a failed construct
        (fatal under an effective mandatory policy)."""
        def wrapper(*args):
            try:
                rc = fn(*args)
                return _CB_OK if rc is None else int(rc)
            except BaseException as exc:  # noqa: BLE001 - must not propagate into C
                msg = f"offload_shim interposer: {fn.__name__}: {type(exc).__name__}: {exc}"
                log.error("%s", msg)
                if construct:
                    try:
                        return self._outcome_fail(msg)
                    except BaseException:  # noqa: BLE001
                        pass
                self.errors.append(msg)
                return fail
        wrapper.__name__ = fn.__name__
        return wrapper

    # -- policy (interface.cpp: checkDeviceAndCtors / handleTargetOutcome) ---------------
    def policy(self) -> int:
        """Effective OMP_TARGET_OFFLOAD policy: TGT_DISABLED or TGT_MANDATORY
        (``default`` becomes mandatory when there is a device, else disabled)."""
        p = self._raw_policy()
        if p == TGT_DEFAULT:
            p = TGT_MANDATORY if self._num_devices() > 0 else TGT_DISABLED
        return p

    def _raw_policy(self) -> int:
        if self._policy_override is not None:
            p = {"disabled": TGT_DISABLED, "default": TGT_DEFAULT,
                 "mandatory": TGT_MANDATORY}[self._policy_override.lower()]
        else:
            omp = _libomp()
            fn = getattr(omp, "__kmpc_get_target_offload", None) if omp is not None else None
            if fn is not None:
                fn.restype = c_int
                p = fn()
            else:
                env = os.environ.get("OMP_TARGET_OFFLOAD", "default").strip().lower()
                p = {"disabled": TGT_DISABLED, "mandatory": TGT_MANDATORY}.get(env, TGT_DEFAULT)
        return p

    def _outcome_fail(self, message: str, loc: int | None = None) -> int:
        """A construct failed: fatal under mandatory (libomptarget 16 aborts), else
        host fallback."""
        src = _ident_source(loc)
        full = message + (f" (at {src})" if src else "")
        self.errors.append(full)
        if self.policy() == TGT_MANDATORY:
            sys.stdout.flush()
            sys.stderr.write(f"offload_shim: {full}\n"
                             "Libomptarget fatal error 1: failure of target construct "
                             "while offloading is mandatory\n")
            sys.stderr.flush()
            return _CB_FATAL
        return _CB_FAIL

    def _default_device(self) -> int:
        omp = _libomp()
        if omp is not None:
            omp.omp_get_default_device.restype = c_int
            return int(omp.omp_get_default_device())
        return int(os.environ.get("OMP_DEFAULT_DEVICE", "0") or 0)

    def _check_device(self, dev_id: int, loc: int | None) -> tuple[int, object] | int:
        """(device number, Device) to offload to, or a callback return code
        (fallback / fatal) -- libomptarget 16 ``checkDeviceAndCtors``."""
        if self.policy() == TGT_DISABLED:
            return _CB_FAIL
        if dev_id == OFFLOAD_DEVICE_DEFAULT:
            dev_id = self._default_device()
        n = self._num_devices()
        if n == 0:
            return self._outcome_fail("omp_get_num_devices() == 0 but offload is mandatory",
                                      loc)
        if dev_id == n:                       # the initial (host) device
            return _CB_FAIL
        if not 0 <= dev_id < n:
            return self._outcome_fail(f"Device {dev_id} is not ready", loc)
        dev = self.devices[dev_id]
        try:
            dev.init()
        except OffloadError as exc:
            return self._outcome_fail(f"Device {dev_id} is not ready: {exc}", loc)
        self._map_globals(dev_id, dev)
        return dev_id, dev

    # -- registration (seed 000) -----------------------------------------------------------
    def _num_devices(self) -> int:
        """``omp_get_num_devices()``: 0 under OMP_TARGET_OFFLOAD=disabled (libomptarget
        16 ``RTLsTy::loadRTLs`` loads no plugin then), else the devices of the plugins
        that accepted a registered image."""
        if self._raw_policy() == TGT_DISABLED:
            return 0
        return len(self.devices)

    def _on_requires(self, flags: int) -> int:
        self.requires_flags = int(flags)
        return _CB_OK

    def _decode(self, desc: int) -> list[tuple[bytes, list[HostEntry], list[int]]]:
        d = _tgt.BinDesc.from_address(desc)
        out = []
        esz = ctypes.sizeof(_tgt.OffloadEntry)
        imgs = ctypes.cast(d.DeviceImages, c_void_p).value
        for i in range(d.NumDeviceImages):
            img = _tgt.DeviceImage.from_address(imgs + i * ctypes.sizeof(_tgt.DeviceImage))
            start, end = img.ImageStart or 0, img.ImageEnd or 0
            data = ctypes.string_at(start, end - start) if end > start else b""
            # clang 16: ImageStart points at an OffloadBinary wrapping the linked image
            # (libomptarget 16 getExecutableImage unwraps it)
            data, _strings = unwrap_image(data)
            b = ctypes.cast(img.EntriesBegin, c_void_p).value or 0
            e = ctypes.cast(img.EntriesEnd, c_void_p).value or 0
            entries, addrs = [], []
            for k in range((e - b) // esz):
                rec = _tgt.OffloadEntry.from_address(b + k * esz)
                entries.append(HostEntry(rec.name.decode(errors="replace"), int(rec.size),
                                         int(rec.flags)))
                addrs.append(int(rec.addr or 0))
            out.append((data, entries, addrs))
        return out

    def _on_register(self, desc: int) -> int:
        """``__tgt_register_lib``: one OffloadImage per device image; register each
        with the runtime (pending or loaded at once, seed 000)."""
        with self._lock:
            if desc in self.libraries:
                return _CB_OK
            images = []
            for i, (data, entries, addrs) in enumerate(self._decode(desc)):
                label = f"desc@{desc:#x}#{i}"
                try:
                    # trusted: the bytes are part of a library this process just loaded
                    img = OffloadImage(data, entries, name=label, host_addresses=addrs,
                                       trusted=True)
                except (InvalidImageError, ValueError) as exc:
                    self.unsupported.append((desc, f"{label}: {exc}"))
                    continue
                try:
                    self.runtime.register_image(img)
                except InvalidImageError as exc:
                    self.unsupported.append((desc, f"{label}: {exc}"))
                    continue
                images.append(img)
                for p in self.runtime.plugins:
                    if p not in self._used_plugins and self.runtime._accepts(p, img):
                        self._used_plugins.append(p)
                        self.devices.extend(d for d in self.runtime.devices if d.plugin is p)
            self.libraries[desc] = images
            return _CB_OK

    def _on_unregister(self, desc: int) -> int:
        """``__tgt_unregister_lib``: unregister the images (unloaded from every
        initialised device, mappings removed, dropped from pending: seed 000) and drop
        their declare-target globals from the mapping tables."""
        with self._lock:
            images = self.libraries.pop(desc, None)
            if images is None:
                return _CB_OK
            for img in images:
                for table in self._tables.values():
                    for e in [e for e in table.entries if e.owner is img]:
                        table.remove(e)
                try:
                    self.runtime.unregister_image(img)
                except OffloadError as exc:
                    self.errors.append(f"unregister {img.name}: {exc}")
            return _CB_OK

    def _map_globals(self, num: int, dev) -> None:
        """Declare-target globals of loaded images: permanent mappings (infinite
        reference count), libomptarget ``initLibrary``."""
        table = self._tables.setdefault(num, MappingTable())
        for images in self.libraries.values():
            for img in images:
                if img not in dev.loaded_images:
                    continue
                if any(e.owner is img for e in table.entries):
                    continue
                for entry, haddr in zip(img.entries, img.host_addresses()):
                    if entry.is_kernel:
                        continue
                    tgt = dev.translate(haddr)
                    ent, contained, _, _ = table.lookup(haddr, entry.size)
                    if ent is None:
                        table.insert(_Entry(haddr, haddr, haddr + entry.size, tgt, None,
                                            _INF, 0, owner=img))

    def _on_gomp(self, unregister: int, version: int, host_table: int, target_type: int,
                 target_data: int) -> int:
        """``GOMP_offload_register_ver`` / ``_unregister_ver`` (libgomp target.c, seed
        000): read the real host table (``{func_begin, func_end, var_begin, var_end}``:
        host function addresses, ``(address, size)`` variable pairs, top size bit =
        ``declare target link``), decode mkoffload's ``target_data`` (nvptx: PTX
        objects, function and variable names, abi-reference 2.6), record both in
        :attr:`gomp_registrations` and register a :class:`GompImage` with the runtime:
        pending for the plugins of that target type (e.g. the GCC 12 nvptx plugin; with
        0 devices nothing is ever loaded), :attr:`unsupported` when no plugin takes it.
        Unregistration (the library's destructor, ``dlclose``) unregisters it again."""
        with self._lock:
            if unregister:
                keep = []
                for r in self.gomp_registrations:
                    if r["target_data"] != target_data or r["host_table"] != host_table:
                        keep.append(r)
                        continue
                    img = r.get("image")
                    if img is not None and img in self.runtime.images:
                        try:
                            self.runtime.unregister_image(img)
                        except OffloadError as exc:
                            self.errors.append(f"unregister {img.name}: {exc}")
                self.gomp_registrations = keep
                return _CB_OK
            tab = (c_void_p * 4).from_address(host_table)
            fb, fe, vb, ve = (int(x or 0) for x in tab)
            funcs = [int(x or 0) for x in (c_void_p * ((fe - fb) // 8)).from_address(fb)] \
                if fe > fb else []
            raw = [int(x or 0) for x in (c_void_p * ((ve - vb) // 8)).from_address(vb)] \
                if ve > vb else []
            vars_ = list(zip(raw[0::2], raw[1::2]))
            rec = {"version": int(version), "host_table": host_table,
                   "target_type": int(target_type), "target_data": target_data,
                   "funcs": funcs, "vars": vars_, "device_data": None, "image": None}
            self.gomp_registrations.append(rec)
            try:
                img = GompImage.from_registration(int(version), host_table, int(target_type),
                                                  target_data, funcs, vars_)
            except (InvalidImageError, ValueError) as exc:
                self.unsupported.append((target_data, f"GOMP image: {exc}"))
                return _CB_OK
            rec["device_data"] = img.device_data
            try:
                self.runtime.register_image(img)
            except InvalidImageError as exc:
                self.unsupported.append((target_data, f"{img.name}: {exc}"))
                return _CB_OK
            rec["image"] = img
            return _CB_OK

    def gomp_devices(self) -> list:
        """libgomp's device list (GCC 12 ``gomp_target_init``): the devices of the
        runtime's OpenMP-capable GOMP plugins, OpenMP device numbers 0..n-1
        (0 under ``OMP_TARGET_OFFLOAD=disabled``)."""
        if self._gomp_policy() == "disabled":
            return []
        return [d for d in self.runtime.devices
                if getattr(d.plugin, "abi", None) == "gomp"
                and getattr(d.plugin, "caps", 0) & 0x4]

    def _gomp_policy(self) -> str:
        if self._policy_override is not None:
            return self._policy_override.lower()
        env = os.environ.get("OMP_TARGET_OFFLOAD", "default").strip().lower()
        return env if env in ("disabled", "mandatory") else "default"

    def _on_gomp_target(self, kind, device, fn, mapnum, hostaddrs, sizes, kinds,
                        flags) -> int:
        """A GCC construct (``GOMP_target_ext``, ``_data_ext``, ``_end_data``,
        ``_update_ext``, ``_enter_exit_data``): decide like libgomp 12
        (``resolve_device``, ``gomp_target_fallback``).  The device number (``-1`` =
        the ``default-device-var`` ICV) outside ``0..n-1`` -> host fallback, except
        under ``OMP_TARGET_OFFLOAD=mandatory`` for a number that is neither the
        fallback (-2) nor the initial device (n): fatal "OMP_TARGET_OFFLOAD is set to
        MANDATORY, but device not found".  A usable device -> still the host
        fallback (running GCC images on a device is not implemented), fatal under
        mandatory for ``target`` ("... but device cannot be used for offloading").
        Returns 1 (libgomp host fallback, run by the interposer through libgomp with
        device -2) or -3 (fatal: message printed, the process exits with status 1)."""
        with self._lock:
            name = GOMP_CONSTRUCTS[kind] if 0 <= kind < len(GOMP_CONSTRUCTS) else str(kind)
            self.gomp_constructs[name] = self.gomp_constructs.get(name, 0) + 1
            n = len(self.gomp_devices())
            mandatory = self._gomp_policy() == "mandatory"
            dev = int(device)
            if dev == GOMP_DEVICE_ICV:
                dev = self._gomp_default_device()
            if not 0 <= dev < n:
                if mandatory and dev not in (GOMP_DEVICE_HOST_FALLBACK, n) and kind != 2:
                    return self._gomp_fatal("OMP_TARGET_OFFLOAD is set to MANDATORY, but "
                                            "device not found")
            elif kind == 0 and mandatory:
                return self._gomp_fatal("OMP_TARGET_OFFLOAD is set to MANDATORY, but device "
                                        "cannot be used for offloading")
            self.gomp_fallbacks += 1
            return _GOMP_FALLBACK

    def _gomp_default_device(self) -> int:
        """libgomp's ``omp_get_default_device()`` (the ICV), else ``OMP_DEFAULT_DEVICE``."""
        try:
            gomp = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)
            gomp.omp_get_default_device.restype = c_int
            return int(gomp.omp_get_default_device())
        except (OSError, AttributeError):
            return int(os.environ.get("OMP_DEFAULT_DEVICE", "0") or 0)

    def _gomp_fatal(self, message: str) -> int:
        """libgomp ``gomp_fatal``: "libgomp: MESSAGE" on stderr, then exit(1) (C side)."""
        self.errors.append(message)
        sys.stdout.flush()
        sys.stderr.write(f"libgomp: {message}\n")
        sys.stderr.flush()
        return _GOMP_FATAL

    # -- mapping (omptarget.cpp: getTargetPointer / getTgtPtrBegin) ----------------------
    def _get_target_pointer(self, num, dev, hp, base, size, *, to, always, implicit,
                            update_ref, close, present, hold, loc=None):
        """Returns (tgt or 0, entry or None, is_new); raises _MapError."""
        table = self._tables[num]
        ent, contained, before, after = table.lookup(hp, size)
        is_new = False
        if contained or ((before or after) and implicit):
            if update_ref:
                ent.inc(hold)
            elif not ent.infinite:
                # allocated with its parent (member_of) in this construct: still new
                is_new = ent.dyn + ent.hold == 1
            tgt = ent.tgt + (hp - ent.begin)
        elif before or after:
            raise _MapError(f"explicit extension not allowed: host address specified is "
                            f"{hp:#x} ({size} bytes), but device allocation maps to host at "
                            f"{ent.begin:#x} ({ent.end - ent.begin} bytes)")
        elif present:
            raise _MapError("device mapping required by 'present' map type modifier does "
                            f"not exist for host address {hp:#x} ({size} bytes)")
        elif size:
            pad = hp % _ALIGN
            ptr = dev.alloc(size + pad)
            if not ptr:
                raise _MapError(f"device allocation of {size} bytes failed")
            ent = _Entry(base, hp, hp + size, ptr + pad, ptr, 0 if hold else 1,
                         1 if hold else 0)
            table.insert(ent)
            tgt, is_new = ent.tgt, True
        else:
            return 0, None, False
        if tgt and to and (is_new or always) and size:
            self._to_device(num, dev, hp, tgt, size)
        return tgt, ent, is_new

    def _to_device(self, num, dev, hp, tgt, size):
        dev.submit_raw(tgt, hp, size)
        # keep attached device pointers inside the copied range (shadow pointers)
        for addr, (_hv, taddr, tval) in self._tables[num].shadow.items():
            if hp <= addr < hp + size:
                v = c_void_p(tval)
                dev.submit_raw(taddr, ctypes.addressof(v), 8)

    def _from_device(self, num, dev, hp, tgt, size):
        dev.retrieve_raw(hp, tgt, size)
        # restore host pointer values the device copy carries as device addresses
        for addr, (hval, _ta, _tv) in self._tables[num].shadow.items():
            if hp <= addr < hp + size:
                c_void_p.from_address(addr).value = hval

    def _data_begin(self, num, dev, n, bases, args, sizes, types, mappers):
        table = self._tables[num]
        for i in range(n):
            t = types[i] & 0xFFFFFFFFFFFFFFFF
            if t & (MAP_LITERAL | MAP_PRIVATE):
                continue
            if mappers and mappers[i]:
                raise _MapError("user-defined mappers are not supported by offload_shim")
            hp, base, size = args[i] or 0, bases[i] or 0, sizes[i]
            implicit, close = bool(t & MAP_IMPLICIT), bool(t & MAP_CLOSE)
            present, hold = bool(t & MAP_PRESENT), bool(t & MAP_OMPX_HOLD)
            update_ref = not (t & MAP_MEMBER_OF)
            ptr_tgt = 0
            if t & MAP_PTR_AND_OBJ:
                ptr_tgt, _e, _n = self._get_target_pointer(
                    num, dev, base, base, 8, to=False, always=False, implicit=implicit,
                    update_ref=update_ref, close=close, present=present, hold=hold)
                if not ptr_tgt:
                    raise _MapError(f"call to getTargetPointer returned null pointer for the "
                                    f"pointer at {base:#x}")
                ptr_host = base
                base = c_void_p.from_address(base).value or 0
                update_ref = True
            tgt, ent, _new = self._get_target_pointer(
                num, dev, hp, base, size, to=bool(t & MAP_TO), always=bool(t & MAP_ALWAYS),
                implicit=implicit, update_ref=update_ref, close=close, present=present,
                hold=hold)
            if not tgt and (size or present):
                raise _MapError(f"call to getTargetPointer returned null pointer "
                                f"({'present modifier' if present else 'device failure or illegal mapping'})")
            if t & MAP_RETURN_PARAM:
                bases[i] = tgt - (hp - base) if tgt else None
            if t & MAP_PTR_AND_OBJ and tgt:
                expected = tgt - (hp - base)
                old = table.shadow.get(ptr_host)
                if old is None or old[2] != expected:
                    table.shadow[ptr_host] = (base, ptr_tgt, expected)
                    v = c_void_p(expected)
                    dev.submit_raw(ptr_tgt, ctypes.addressof(v), 8)

    def _get_tgt_ptr_begin(self, num, hp, size, *, update_ref, hold, must_contain, force):
        """(tgt, is_last, entry) or (0, False, None) -- ``getTgtPtrBegin``."""
        ent, contained, before, after = self._tables[num].lookup(hp, size)
        if ent is not None and (contained or (not must_contain and (before or after))):
            is_last = ent.should_remove(hold, force)
            if force and not ent.infinite:
                if hold:
                    ent.hold = 1
                else:
                    ent.dyn = 1
                ent.dec(hold)
            elif update_ref:
                ent.dec(hold)
            return ent.tgt + (hp - ent.begin), is_last, ent
        return 0, False, None

    def _data_end(self, num, dev, n, bases, args, sizes, types, mappers):
        table = self._tables[num]
        doomed: list[_Entry] = []
        failed = None
        for i in reversed(range(n)):
            t = types[i] & 0xFFFFFFFFFFFFFFFF
            if t & (MAP_LITERAL | MAP_PRIVATE):
                continue
            if mappers and mappers[i]:
                raise _MapError("user-defined mappers are not supported by offload_shim")
            hp, size = args[i] or 0, sizes[i]
            update_ref = (not (t & MAP_MEMBER_OF)) or bool(t & MAP_PTR_AND_OBJ)
            present, hold = bool(t & MAP_PRESENT), bool(t & MAP_OMPX_HOLD)
            tgt, is_last, ent = self._get_tgt_ptr_begin(
                num, hp, size, update_ref=update_ref, hold=hold,
                must_contain=not (t & MAP_IMPLICIT), force=bool(t & MAP_DELETE))
            if ent is None:
                if present and (size or present):
                    failed = ("device mapping required by 'present' map type modifier does "
                              f"not exist for host address {hp:#x} ({size} bytes)")
                continue
            if t & MAP_FROM and (t & MAP_ALWAYS or is_last) and size:
                self._from_device(num, dev, hp, tgt, size)
            if is_last and ent not in doomed:
                doomed.append(ent)
        for ent in doomed:
            if ent in table.entries and (ent.dyn == 0 and ent.hold == 0):
                table.remove(ent)
                if ent.alloc:
                    dev.free(ent.alloc)
        if failed:
            raise _MapError(failed)

    def _data_update(self, num, dev, n, args, sizes, types, mappers):
        for i in range(n):
            t = types[i] & 0xFFFFFFFFFFFFFFFF
            if t & (MAP_LITERAL | MAP_PRIVATE):
                continue
            if mappers and mappers[i]:
                raise _MapError("user-defined mappers are not supported by offload_shim")
            if t & MAP_NON_CONTIG:
                raise _MapError("non-contiguous target update is not supported by offload_shim")
            hp, size = args[i] or 0, sizes[i]
            tgt, _last, ent = self._get_tgt_ptr_begin(num, hp, size, update_ref=False,
                                                      hold=False, must_contain=True,
                                                      force=False)
            if ent is None:
                if t & MAP_PRESENT:
                    raise _MapError("device mapping required by 'present' motion modifier "
                                    f"does not exist for host address {hp:#x} ({size} bytes)")
                continue
            if t & MAP_FROM:
                self._from_device(num, dev, hp, tgt, size)
            if t & MAP_TO:
                self._to_device(num, dev, hp, tgt, size)

    # -- entry points ----------------------------------------------------------------------
    def _on_data(self, kind, loc, dev_id, n, bases, args, sizes, types, names, mappers):
        with self._lock:
            chk = self._check_device(dev_id, loc)
            if isinstance(chk, int):
                return chk
            num, dev = chk
            try:
                if kind == 0:
                    self._data_begin(num, dev, n, bases, args, sizes, types, mappers)
                elif kind == 1:
                    self._data_end(num, dev, n, bases, args, sizes, types, mappers)
                else:
                    self._data_update(num, dev, n, args, sizes, types, mappers)
            except (_MapError, OffloadError) as exc:
                return self._outcome_fail(str(exc), loc)
            return _CB_OK

    def _on_kernel(self, loc, dev_id, teams, threads, host_ptr, kargs) -> int:
        """``__tgt_target_kernel``: map, launch, unmap (omptarget.cpp ``target``)."""
        with self._lock:
            chk = self._check_device(dev_id, loc)
            if isinstance(chk, int):
                return chk
            num, dev = chk
            ka = _tgt.KernelArgs.from_address(kargs)
            n = ka.NumArgs
            bases, args, sizes, types = ka.ArgBasePtrs, ka.ArgPtrs, ka.ArgSizes, ka.ArgTypes
            mappers = ka.ArgMappers if ctypes.cast(ka.ArgMappers, c_void_p).value else None
            try:
                entry = dev.translate(host_ptr or 0)
            except KeyError:
                return self._outcome_fail(f"host ptr {host_ptr or 0:#x} does not have a "
                                          f"matching target pointer on device {num}", loc)
            privates = []
            try:
                self._data_begin(num, dev, n, bases, args, sizes, types, mappers)
                tgt_args, offsets = [], []
                for i in range(n):
                    t = types[i] & 0xFFFFFFFFFFFFFFFF
                    if t & MAP_MEMBER_OF or not t & MAP_TARGET_PARAM:
                        continue
                    hp, base = args[i] or 0, bases[i] or 0
                    if t & MAP_LITERAL:
                        tgt_args.append(hp)
                        offsets.append(0)
                        continue
                    if t & MAP_PRIVATE:
                        size = sizes[i]
                        p = dev.alloc(size) if size else 0
                        if size and not p:
                            raise _MapError(f"allocation of {size} bytes for a private failed")
                        if p:
                            privates.append(p)
                            if t & MAP_TO:
                                dev.submit_raw(p, hp, size)
                        tgt_args.append(p)
                        offsets.append(base - hp)
                        continue
                    if t & MAP_PTR_AND_OBJ:
                        base = c_void_p.from_address(base).value or 0
                    tgt, _l, _e = self._get_tgt_ptr_begin(num, hp, sizes[i], update_ref=False,
                                                          hold=False, must_contain=False,
                                                          force=False)
                    tgt_args.append(tgt)
                    offsets.append(base - hp)
                dev.launch_entry(entry, tgt_args, offsets)
                self._data_end(num, dev, n, bases, args, sizes, types, mappers)
            except (_MapError, OffloadError) as exc:
                return self._outcome_fail(f"{type(exc).__name__}: {exc}", loc)
            finally:
                for p in privates:
                    with contextlib.suppress(OffloadError):
                        dev.free(p)
            return _CB_OK

    def _device_for(self, dev_id: int):
        n = self._num_devices()
        if dev_id == n:
            return None
        if not 0 <= dev_id < n:
            raise _MapError(f"invalid device number {dev_id} ({n} devices)")
        dev = self.devices[dev_id]
        dev.init()
        return dev

    def _on_alloc(self, size, dev_id, out) -> int:
        """``omp_target_alloc``: host device -> malloc; else :meth:`Device.alloc`."""
        with self._lock:
            dev = self._device_for(dev_id)
            if dev is None:
                out[0] = _libc_malloc(size)
            else:
                out[0] = dev.alloc(int(size)) or None
            return _CB_OK if out[0] else _CB_FAIL

    def _on_free(self, ptr, dev_id) -> int:
        with self._lock:
            if not ptr:
                return _CB_OK
            dev = self._device_for(dev_id)
            if dev is None:
                _libc_free(ptr)
            else:
                dev.free(ptr)
            return _CB_OK

    def _on_memcpy(self, dst, src, length, dst_off, src_off, dst_dev, src_dev) -> int:
        """``omp_target_memcpy`` between any two of host / devices (0 on success)."""
        with self._lock:
            dd, sd = self._device_for(dst_dev), self._device_for(src_dev)
            d, s = (dst or 0) + dst_off, (src or 0) + src_off
            if not length:
                return _CB_OK
            if dd is None and sd is None:
                ctypes.memmove(d, s, length)
            elif dd is None:
                sd.retrieve_raw(d, s, length)
            elif sd is None:
                dd.submit_raw(d, s, length)
            else:
                tmp = ctypes.create_string_buffer(length)
                sd.retrieve_raw(ctypes.addressof(tmp), s, length)
                dd.submit_raw(d, ctypes.addressof(tmp), length)
            return _CB_OK

    def _on_is_present(self, ptr, dev_id) -> int:
        with self._lock:
            n = self._num_devices()
            if dev_id == n:
                return 1
            if not 0 <= dev_id < n or dev_id not in self._tables:
                return 0
            tgt, _l, _e = self._get_tgt_ptr_begin(dev_id, ptr or 0, 0, update_ref=False,
                                                  hold=False, must_contain=False, force=False)
            return 1 if tgt else 0

    def mappings(self, device: int = 0) -> list[_Entry]:
        """The mapping table rows of OpenMP device ``device`` (for tests and tools)."""
        with self._lock:
            return list(self._tables.get(device, MappingTable()).entries)


_libc = None


def _libc_fns():
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None)
        lib.malloc.restype = c_void_p
        lib.malloc.argtypes = [ctypes.c_size_t]
        lib.free.restype = None
        lib.free.argtypes = [c_void_p]
        _libc = lib
    return _libc


def _libc_malloc(size: int) -> int | None:
    return _libc_fns().malloc(size)


def _libc_free(ptr: int) -> None:
    _libc_fns().free(ptr)


@contextlib.contextmanager
def interpose(runtime, *, policy: str | None = None) -> Iterator[Interposer]:
    """Route compiled OpenMP code to ``runtime`` for the duration of the block::

        with osh.Runtime([plugin]) as rt, osh.interpose(rt) as ip:
            lib = ip.load_library("libomp_regions.so")   # constructors register
            lib.call("osh_region_saxpy")                  # regions run on rt's devices
            lib.close()                                   # destructors unregister

    ``policy`` overrides ``OMP_TARGET_OFFLOAD`` (``"disabled"``, ``"default"``,
    ``"mandatory"``).  Loads the interposer RTLD_GLOBAL (raises FileNotFoundError when
    not built, LifecycleError when another libomptarget wins symbol resolution or
    another interposer is active).  On exit: libraries loaded through it are closed,
    images unregistered, mapping memory freed, callbacks removed."""
    global _active
    with _active_lock:
        if _active is not None:
            raise LifecycleError("another offload_shim interposer is active in this process")
        ip = Interposer(runtime, policy=policy)
        _active = ip
    try:
        ip._install()
    except BaseException:
        with _active_lock:
            _active = None
        raise
    try:
        yield ip
    finally:
        ip.close()


__all__ = ["GompImage", "Interposer", "LoadedLibrary", "MappingTable", "call_counts",
           "interpose", "interposer_path", "load_interposer"]
