"""Load one offload plugin ``.so`` and drive it through ctypes.

A :class:`Plugin` is one loaded plugin library seen through one ABI:
``LLVMPlugin`` for libomptarget plugins (``__tgt_rtl_*``), ``GompPlugin`` for
libgomp plugins (``GOMP_OFFLOAD_*``).  Both offer the same uniform methods
(``init_device``, ``deinit_device``, ``load_image``, ``unload_image``,
``alloc``, ``free``, ``submit``, ``retrieve``, ``launch``...) so that the
layers above never branch on the ABI family (docs/architecture.md).

Loading (:func:`load_plugin`):

* classifies the ABI family and generation from the exported symbols only:
  loading makes **no** plugin call (prior-art I6, B2);
* binds every entry point once into the plugin object;
* applies libomptarget 16's and libgomp 12's required/optional rules
  (abi-reference 1.6 and 2.4);
* tells apart a missing file (:class:`PluginNotFoundError`), a failed
  ``dlopen`` (:class:`PluginDlopenError`, with the dlerror text) and a library
  that is not a plugin (:class:`NotAPluginError`, naming the missing symbols).

The same file is loaded once per process and never ``dlclose``\\ d (prior-art
I7, B10): plugins are shared between runtimes.  Lifecycle calls are
reference counted here: ``init_plugin`` runs for the first user and
``deinit_plugin`` after the last (I1); ``init_device`` runs exactly once for
the first user of a device, also under concurrent first use (I2, LLVM
``DeviceTy::initOnce``), and ``deinit_device`` after its last user.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from array import array
from collections import namedtuple
from ctypes import POINTER, byref, c_char_p, c_void_p, cast
from collections.abc import Sequence

from ..abi import gomp as _gomp
from ..abi import libc as _libc
from ..abi import tgt_rtl as _tgt
from ..errors import (ABIMismatchError, DeviceInitError, InvalidImageError,
                     LifecycleError, MissingEntryPointError, NotAPluginError,
                     OffloadError, PluginCallError, PluginDlopenError,
                     PluginNotFoundError, TableMismatchError, WrongArchitectureError)
from ..records import FieldsRepr
from ..safety import leftovers

MAX_KERNEL_ARGS = 64

# process-wide registry (the only module-level mutable state, lock-protected)
_REGISTRY_LOCK = threading.Lock()
_HANDLES: dict[str, ctypes.CDLL] = {}
_PLUGINS: dict[tuple[str, str], "Plugin"] = {}


class TargetEntry(namedtuple("TargetEntry", "name addr size")):
    """One entry of a loaded image's target table: ``addr`` is what the plugin
    returned (a kernel handle for functions, a device address for
    variables), ``size`` in bytes (0 = function)."""
    __slots__ = ()


class LoadedImage(FieldsRepr):
    """What ``load_image`` returns: target entries in host-entry order, and
    the ctypes objects that must outlive the load (the plugin keeps pointers
    into them, abi-reference 4.3)."""
    _fields = ("entries",)

    def __init__(self, entries: list[TargetEntry], keepalive: list | None = None) -> None:
        self.entries = entries
        self.keepalive = [] if keepalive is None else keepalive


def _dlerror_text(exc: OSError) -> str:
    return str(exc).strip()


def _open_library(path: str) -> ctypes.CDLL:
    """dlopen once per process (RTLD_NOW|RTLD_LOCAL); never closed."""
    with _REGISTRY_LOCK:
        lib = _HANDLES.get(path)
        if lib is None:
            try:
                lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
            except OSError as exc:
                raise PluginDlopenError(
                    f"{path}: found but dlopen failed: {_dlerror_text(exc)}",
                    path=path, dlerror=_dlerror_text(exc)) from None
            _HANDLES[path] = lib
        return lib


def _exported(lib: ctypes.CDLL, prefix: str, names) -> set[str]:
    found = set()
    for name in names:
        try:
            getattr(lib, prefix + name)
        except AttributeError:
            continue
        found.add(name)
    return found


def _path_text(path) -> str:
    """``path`` as ``str``: ``str``, ``bytes`` (decoded as the file system
    does) or ``os.PathLike``; TypeError naming what was given otherwise."""
    if isinstance(path, (str, bytes)) or hasattr(path, "__fspath__"):
        try:
            text = os.fsdecode(path)
        except TypeError:                        # __fspath__ returned something else
            text = None
        if isinstance(text, str):
            return text
    raise TypeError(f"plugin path must be str, bytes or os.PathLike, not "
                    f"{type(path).__name__}")


# e_machine of the process (what dlopen accepts), by CPU as os.uname() names it
_HOST_MACHINE = {"x86_64": 62, "aarch64": 183, "ppc64le": 21, "ppc64": 21, "s390x": 22,
                 "riscv64": 243}


def _machine_name(value: int) -> str:
    try:
        from elftools.elf.enums import ENUM_E_MACHINE
    except ImportError:  # pragma: no cover - dependency declared
        return f"e_machine {value}"
    for name, v in ENUM_E_MACHINE.items():
        if v == value and name.startswith("EM_"):
            return name
    return f"e_machine {value}"


def _check_architecture(given: str, real: str) -> None:
    """WrongArchitectureError for an ELF file built for another machine or
    ELF class, read from its header (20 bytes) before any dlopen (glibc would
    say only "cannot open shared object file: No such file or directory").
    Files that are not ELF are left to dlopen, which names the problem."""
    try:
        with open(real, "rb") as f:
            head = f.read(20)
    except OSError:
        return                                   # dlopen reports it
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return
    order = "little" if head[5] == 1 else "big"
    machine = int.from_bytes(head[18:20], order)
    want = _HOST_MACHINE.get(os.uname().machine)
    if want is None:
        return                                   # a CPU without a table entry: dlopen says
    cls64 = head[4] == 2
    if machine != want or not cls64 or (order != "little" and want in (62, 183, 243)):
        got = _machine_name(machine) + ("" if cls64 else " ELFCLASS32")
        exp = _machine_name(want)
        raise WrongArchitectureError(
            f"{given}: wrong architecture ({got}): this process runs {exp} code and "
            "can only load plugins built for it", path=real, machine=got, expected=exp)


def _resolve(path: str) -> str:
    if not path:
        raise ValueError("empty plugin path")
    if os.path.exists(path) and not os.path.isdir(path):
        return os.path.realpath(path)   # the usual case, without importing pathlib
    from pathlib import Path            # pathlib's reading of the path ("lib.so/" is lib.so)
    p = Path(path)
    if not p.exists():
        raise PluginNotFoundError(f"plugin not found: {p}", path=str(p))
    if p.is_dir():
        raise NotAPluginError(f"{p} is a directory, not a plugin library",
                              path=str(p), missing=[])
    return os.path.realpath(p)


# Host runtimes that sit next to the plugins but are not plugins: their
# constructors (libomptarget's registers itself, looks for plugins, reads the
# environment) run at dlopen and may crash or hang the interpreter.
_HOST_RUNTIMES = (
    (re.compile(r"^libomptarget\.so(\.|$)"), "libomptarget, the host runtime",
     "libomptarget.rtl.*.so"),
    (re.compile(r"^libgomp\.so(\.|$)"), "libgomp, the GCC OpenMP host runtime",
     "libgomp-plugin-*.so.1"),
    (re.compile(r"^lib(omp|iomp5)\.so(\.|$)"), "libomp, the LLVM OpenMP CPU runtime",
     "libomptarget.rtl.*.so"),
)


def _refuse_host_runtime(given: str, real: str) -> None:
    """NotAPluginError for a known host runtime, by name, before any dlopen."""
    for base in (os.path.basename(given), os.path.basename(real)):
        for pat, what, plugins in _HOST_RUNTIMES:
            if pat.match(base):
                raise NotAPluginError(
                    f"{given} is {what}, not a plugin (plugins are {plugins})",
                    path=real, missing=[])


def _bundled_real() -> str | None:
    try:
        from ..abi.native import PLUGIN_FILENAME, native_dir
    except ImportError:
        return None
    p = os.path.join(native_dir(), PLUGIN_FILENAME)      # bundled_plugin_path(), as a str
    return os.path.realpath(p) if os.path.isfile(p) else None


def _needs_probe(real: str, probe: bool | None) -> bool:
    if probe is False:
        return False
    with _REGISTRY_LOCK:
        if real in _HANDLES:
            return False                       # already dlopen'ed by us
    if probe is None:
        if real == _bundled_real():
            return False                       # built with the package: trusted
        from ..safety.isolation import mapped_in_process
        if mapped_in_process(real):
            return False                       # constructors already ran here
    return True


def probe(path: str | os.PathLike) -> dict:
    """Classify a library without keeping a Plugin: returns
    ``{"path", "abi", "generation"}`` or raises like :func:`load_plugin`."""
    plugin = load_plugin(path)
    return {"path": plugin.path, "abi": plugin.abi, "generation": plugin.generation}


def load_plugin(path: str | bytes | os.PathLike, *, abi: str | None = None,
                probe: bool | None = None, timeout: float | None = None) -> "Plugin":
    """Load the plugin at ``path`` and return the process-wide Plugin for it.

    ``abi``: ``"llvm"``, ``"gomp"`` or ``"liboffload"`` to pick a view of a
    library that exports several (the bundled host plugin); default: LLVM if
    its required symbols are present, else GOMP, else liboffload (``ol*``,
    ``libLLVMOffload.so``: :mod:`offload_shim.plugins.liboffload`).

    Known host runtimes (``libomptarget.so*``, ``libgomp.so*``,
    ``libomp.so*``) are refused by name before any
    ``dlopen`` (NotAPluginError).  ``probe``: a library's constructors run at
    ``dlopen`` and can crash the interpreter, so before the first in-process
    ``dlopen`` of a file the same load is tried in a child process
    (:func:`offload_shim.safety.isolation.probe_plugin`; verdicts cached per
    ``(realpath, size, mtime)`` for the process).  ``None`` (default): probe
    unless the file is the bundled plugin or is already loaded in this
    process; ``True``: probe unless already ``dlopen``-ed here; ``False``:
    never.  The probe costs one interpreter start plus the package import
    and the library's own dlopen: measured 0.04-0.06 s for the GCC 12 and
    LLVM 16 plugins (libLLVM included), once per file per process; loading
    the bundled plugin costs nothing extra.

    Raises PluginNotFoundError, PluginDlopenError (also when the probe
    crashed: ``.dlerror`` is the signal name, e.g. ``"SIGSEGV"``),
    NotAPluginError, ABIMismatchError (a known family in an unsupported
    generation), ValueError for an empty path or an unknown ``abi``.

    ``path``: ``str``, ``bytes`` or ``os.PathLike`` (TypeError otherwise).
    Before any ``dlopen`` the ELF header is read: a file built for another
    machine raises WrongArchitectureError ("wrong architecture
    (EM_AARCH64)"), a PluginDlopenError.  ``timeout``: seconds the
    child-process probe may take (default
    :data:`~offload_shim.safety.isolation.PLUGIN_TIMEOUT_S`); a plugin
    whose constructors run longer is refused as hung (``.dlerror ==
    "hung"``); a ``timeout`` that is not a number (TypeError) or not > 0
    (ValueError) is refused whether or not a probe runs.
    """
    if abi not in (None, "llvm", "gomp", "liboffload"):
        raise ValueError(f"abi must be 'llvm', 'gomp', 'liboffload' or None, not {abi!r}")
    path = _path_text(path)
    if timeout is not None:            # refused also when no probe would run
        from ..safety.children import check_timeout
        timeout = check_timeout(timeout)
    real = _resolve(path)
    with _REGISTRY_LOCK:
        # abi None: the default view chosen before (not any view loaded explicitly)
        if (real, abi) in _PLUGINS:
            return _PLUGINS[(real, abi)]
    _refuse_host_runtime(path, real)
    _check_architecture(path, real)
    if _needs_probe(real, probe):
        from ..safety.isolation import probe_plugin
        probe_plugin(real, abi, timeout=timeout)
    lib = _open_library(real)
    llvm_syms = _exported(lib, _tgt.PREFIX, _tgt.all_names())
    gomp_syms = _exported(lib, _gomp.PREFIX, _gomp.PROTOTYPES[_gomp.GOMP_VERSION_GCC12])
    llvm_gen = _tgt.classify(llvm_syms)
    candidates = []
    if abi in (None, "llvm") and llvm_gen is not None:
        candidates.append("llvm")
    if abi in (None, "gomp") and "version" in gomp_syms | set():
        candidates.append("gomp")
    ol_syms: set = set()
    if abi == "liboffload" or (abi is None and not candidates):
        # the third family (plugins/liboffload.py), looked at only when it could be
        # the one chosen (its tables are large: start-up of every run)
        from ..abi import liboffload as _olabi
        ol_syms = _exported(lib, "", _olabi.all_names())
        if _olabi.classify(ol_syms) is not None:
            candidates.append("liboffload")
    if not candidates and abi == "liboffload":
        missing = _olabi.missing(ol_syms)
        raise NotAPluginError(f"{real} is not a liboffload (ol*): it lacks {', '.join(missing)}",
                              path=real, missing=missing)
    if not candidates:
        # say what is missing for the closest ABI
        llvm_missing = [_tgt.PREFIX + n for n in _tgt.GENERATIONS["llvm16-classic"][1]
                        if n not in llvm_syms]
        gomp_missing = [_gomp.PREFIX + n for n in _gomp.REQUIRED_BASE if n not in gomp_syms]
        if abi == "gomp" or (abi is None and len(gomp_missing) < len(llvm_missing)):
            missing, family = gomp_missing, "libgomp (GOMP_OFFLOAD_*)"
        else:
            missing, family = llvm_missing, "libomptarget (__tgt_rtl_*)"
        raise NotAPluginError(
            f"{real} is not an offload plugin: as a {family} plugin it lacks "
            f"{', '.join(missing)}", path=real, missing=missing)
    kind = candidates[0]
    if kind == "liboffload":
        from .liboffload import LiboffloadPlugin
        plugin = LiboffloadPlugin(real, lib, ol_syms)
    else:
        cls = LLVMPlugin if kind == "llvm" else GompPlugin
        plugin = cls(real, lib, llvm_syms if kind == "llvm" else gomp_syms)
    with _REGISTRY_LOCK:
        got = _PLUGINS.setdefault((real, kind), plugin)
        if abi is None:
            _PLUGINS.setdefault((real, None), got)
        return got


def loaded_plugins() -> list["Plugin"]:
    """Every Plugin loaded in this process so far (one per file and ABI view)."""
    with _REGISTRY_LOCK:
        return list({id(p): p for p in _PLUGINS.values()}.values())


def _triples(ops):
    """``ops`` as ``(a, b, size)`` triples: a list of them as it is, an ``array('Q')``
    of them one after the other cut into threes."""
    if isinstance(ops, array):
        return zip(ops[0::3], ops[1::3], ops[2::3])
    return ops


def _plugin_name(path: str) -> str:
    base = os.path.basename(path)
    for pre in ("libomptarget.rtl.", "libgomp-plugin-", "lib"):
        if base.startswith(pre):
            base = base[len(pre):]
            break
    return base.split(".so")[0]


class Plugin:
    """One loaded plugin seen through one ABI (base class).

    Attributes: ``path`` (real path), ``name`` (``"x86_64.nextgen"``,
    ``"nvptx"``...), ``abi`` (``"llvm"``/``"gomp"``), ``generation``,
    ``symbols`` (exported short entry-point names), ``bundled`` (the host
    plugin built from ``native/``).
    """

    abi = ""
    prefix = ""

    def __init__(self, path: str, lib: ctypes.CDLL, symbols: set[str]):
        self.path = path
        self.name = _plugin_name(path)
        self.symbols = frozenset(symbols)
        self.bundled = os.path.basename(path) == "libosh_hostplugin.so"
        self._lib = lib
        self._fn: dict[str, object] = {}
        self._lock = threading.RLock()           # lifecycle transitions only
        self._users = 0
        self._initialized = False
        self._num_devices: int | None = None
        self._dev_users: dict[int, int] = {}
        self._dev_locks: dict[int, threading.Lock] = {}
        self._keepalive: list = []               # buffers the plugin may still point into
        self._control = None                     # bundled plugin: its control API (lazy)
        self.generation = ""

    # -- binding -------------------------------------------------------------
    def _bind(self, protos: dict, required: Sequence[str]) -> None:
        missing = [self.prefix + n for n in required if n not in self.symbols]
        if missing:
            raise NotAPluginError(
                f"{self.path} looks like a {self.generation} plugin but lacks the "
                f"required entry points {', '.join(missing)}", path=self.path,
                missing=missing)
        for name, (restype, argtypes) in protos.items():
            if name not in self.symbols:
                continue
            fn = getattr(self._lib, self.prefix + name)
            fn.restype = restype
            fn.argtypes = argtypes
            self._fn[name] = fn

    @property
    def object_address(self) -> int:
        """An address inside the plugin's loaded shared object (one of its entry
        points): what ``dladdr`` needs to name the object (the interposer tells the
        exit handlers of the plugin's object apart by it)."""
        name = min(self._fn) if self._fn else min(self.symbols)
        return ctypes.cast(getattr(self._lib, self.prefix + name), ctypes.c_void_p).value

    @property
    def kept_alive(self) -> int:
        """How many sets of buffers this plugin was given that it may still point into
        for its whole lifetime (those of loads that failed half-way; a successful
        load's go with its LoadedImage)."""
        with self._lock:
            return len(self._keepalive)

    def has(self, name: str) -> bool:
        """True if the entry point ``name`` (short, e.g. ``"data_lock"``) is bound."""
        return name in self._fn

    def entry_point(self, name: str):
        """The bound ctypes function of entry point ``name`` (short, e.g.
        ``"data_alloc"``), with the prototype of ``abi/`` for this plugin's
        generation.  **Unchecked**: a call through it bypasses every check
        of this class (lifecycle, device range, return code, size limits)
        and reaches the plugin as given; for benchmarks that time the bare
        call and for probes that must reach the plugin.  Raises
        :class:`MissingEntryPointError` if the plugin does not export it."""
        return self._need(name)

    def submit_many(self, dev: int, ops) -> None:
        """:meth:`submit` of each ``(tgt, host_addr, size)`` in order; stops at the
        first failure (raised).  ``ops``: a list of triples, or an ``array('Q')`` of
        them one after the other.  A plugin family may do them with less
        overhead."""
        for tgt, host_addr, size in _triples(ops):
            self.submit(dev, tgt, host_addr, size)

    def retrieve_many(self, dev: int, ops) -> None:
        """:meth:`retrieve` of each ``(host_addr, tgt, size)`` in order (see
        :meth:`submit_many`)."""
        for host_addr, tgt, size in _triples(ops):
            self.retrieve(dev, host_addr, tgt, size)

    def launcher(self, dev: int, entry: int, nargs: int):
        """A callable ``launch(args, offsets)`` for repeated synchronous launches of
        the kernel ``entry`` of device ``dev`` with ``nargs`` pointer-sized
        arguments: what :meth:`launch` does, for callers that launch the same kernel
        many times (compiled code's target regions).  This base version calls
        :meth:`launch`; a plugin family may prepare its argument blocks once.
        ``args``/``offsets``: lists of ``nargs`` ints within 64 bits (not checked
        again per item: the caller validates).  Raises like :meth:`launch`."""
        def launch(args, offsets, _launch=self.launch):
            _launch(dev, entry, args, offsets)
        return launch

    def _need(self, name: str):
        fn = self._fn.get(name)
        if fn is None:
            raise MissingEntryPointError(
                f"{self.name}: plugin has no {self.prefix}{name}",
                function=self.prefix + name)
        return fn

    def _label(self, dev: int | None = None) -> str:
        return self.name if dev is None else f"{self.name}:{dev}"

    def _detail(self) -> str:
        """Extra failure text: the bundled plugin keeps its last error."""
        if not self.bundled:
            return ""
        if self._control is None:
            from ..abi.hostctl import ControlAPI
            try:
                self._control = ControlAPI(self.path)
            except (OSError, AttributeError):
                self._control = False
        msg = self._control.call("last_error") if self._control else None
        return f": {msg}" if msg else ""

    # -- return conventions -> typed errors ---------------------------------------
    def _error(self, cls: type[OffloadError], function: str, dev: int | None = None, *,
               code: int | None = None, args: str = "", tail: str = "", head: str = "",
               detail: bool = True) -> OffloadError:
        """The typed error of a failed entry point ``function`` (short name):
        ``"<plugin>[:<dev>]: <prefix><function><args> failed[ (<code>)]<tail>"``
        (``head`` replaces everything after the label), plus the bundled
        plugin's last error text when ``detail``; ``code``, ``function`` (the
        full name) and ``device`` (the label; None for plugin-wide calls) set."""
        full = self.prefix + function
        if not head:
            head = f"{full}{args} failed" + (f" ({code})" if code is not None else "") + tail
        msg = f"{self._label(dev)}: {head}" + (self._detail() if detail else "")
        return cls(msg, code=code, function=full,
                   device=None if dev is None else self._label(dev))

    def _check_int32(self, rc: int, function: str, dev: int | None = None, *,
                     error: type[OffloadError] = PluginCallError, **kw) -> None:
        """LLVM convention: ``int32_t`` ``OFFLOAD_SUCCESS`` (0) or a failure
        code (``OFFLOAD_FAIL`` = ~0), libomptarget ``omptarget.h``; raises
        ``error`` built by :meth:`_error` with the code."""
        if rc != _tgt.OFFLOAD_SUCCESS:
            raise self._error(error, function, dev, code=rc, **kw)

    def _check_bool(self, ok: bool, function: str, dev: int | None = None, *,
                    error: type[OffloadError] = PluginCallError, **kw) -> None:
        """GOMP convention: ``bool``, true on success, no code (libgomp
        ``libgomp-plugin.h``); raises ``error`` built by :meth:`_error`."""
        if not ok:
            raise self._error(error, function, dev, **kw)

    # -- page-locked host memory (optional; GCC trunk ``libgomp-plugin.h``) -----------
    @property
    def has_page_locked_host_memory(self) -> bool:
        """True when the plugin exports ``page_locked_host_alloc`` and ``_free``."""
        return self.has("page_locked_host_alloc") and self.has("page_locked_host_free")

    def page_locked_host_alloc(self, size: int) -> int:
        """``GOMP_OFFLOAD_page_locked_host_alloc(&ptr, size)``: ``size`` bytes of
        page-locked host memory allocated by the plugin; returns the address.
        Raises MissingEntryPointError (not exported: GCC 12, every LLVM
        plugin), PluginCallError (the plugin returned false or a NULL pointer)."""
        addr, ok = _gomp.call_out_pointer(self._need("page_locked_host_alloc"), size)
        self._check_bool(ok and bool(addr), "page_locked_host_alloc", args=f"({size})")
        return addr

    def page_locked_host_free(self, addr: int) -> None:
        """``GOMP_OFFLOAD_page_locked_host_free(addr)`` of an address from
        :meth:`page_locked_host_alloc`.  Raises MissingEntryPointError,
        PluginCallError (the plugin returned false)."""
        self._check_bool(self._need("page_locked_host_free")(addr), "page_locked_host_free",
                         args=f"({addr:#x})")

    # -- plugin lifecycle (reference counted, process wide) -----------------
    @property
    def initialized(self) -> bool:
        return self._initialized

    @property
    def users(self) -> int:
        return self._users

    def acquire(self) -> None:
        """Take a user reference; the first runs ``init_plugin`` (if exported)
        and reads the device count.  Raises PluginCallError if init fails."""
        with self._lock:
            if self._users == 0 and not self._initialized:
                self._init_plugin()
                self._initialized = True
                self._num_devices = max(0, int(self._query_num_devices()))
            self._users += 1

    def release(self) -> None:
        """Drop a user reference; the last runs ``deinit_plugin`` after every
        device it initialised has been deinitialised (I1, I2)."""
        with self._lock:
            if self._users <= 0:
                raise LifecycleError(f"{self.name}: release without acquire")
            self._users -= 1
            if self._users == 0 and self._initialized:
                for dev, n in sorted(self._dev_users.items()):
                    if n:
                        # a device still held means a caller skipped deinit: do it now,
                        # in order, rather than call deinit_plugin under it
                        self._dev_users[dev] = 0
                        self._deinit_device(dev)
                self._initialized = False
                self._deinit_plugin()

    @property
    def num_devices(self) -> int:
        """Device count reported by the plugin (read after each init_plugin)."""
        if self._num_devices is None:
            raise LifecycleError(f"{self.name}: device count unknown before acquire()")
        return self._num_devices

    def _dev_lock(self, dev: int) -> threading.Lock:
        with self._lock:
            lk = self._dev_locks.get(dev)
            if lk is None:
                lk = self._dev_locks[dev] = threading.Lock()
            return lk

    def _check_dev(self, dev: int) -> None:
        if not self._initialized:
            raise LifecycleError(f"{self.name}: plugin not initialised "
                                 "(call after deinit_plugin or before init_plugin)",
                                 device=self._label(dev))
        if not isinstance(dev, int) or not 0 <= dev < (self._num_devices or 0):
            raise ValueError(f"{self.name}: device {dev!r} out of range "
                             f"0..{(self._num_devices or 0) - 1}")

    def acquire_device(self, dev: int, requires_flags: int = _tgt.OMP_REQ_NONE) -> bool:
        """Take a user reference on device ``dev``; the first user runs
        ``init_requires`` (if exported) then ``init_device``, exactly once even
        under concurrent first use.  Returns True if this call initialised it.
        Raises DeviceInitError (no reference taken) or LifecycleError."""
        self._check_dev(dev)
        with self._dev_lock(dev):
            if self._dev_users.get(dev, 0) == 0:
                self._init_device(dev, requires_flags)
                self._dev_users[dev] = 1
                return True
            self._dev_users[dev] += 1
            return False

    def release_device(self, dev: int) -> bool:
        """Drop a reference; the last runs ``deinit_device`` (if exported).
        Returns True if the device was deinitialised."""
        with self._dev_lock(dev):
            n = self._dev_users.get(dev, 0)
            if n <= 0:
                raise LifecycleError(f"{self._label(dev)}: deinit of a device that "
                                     "is not initialised", device=self._label(dev))
            self._dev_users[dev] = n - 1
            if n == 1:
                self._deinit_device(dev)
                return True
            return False

    def device_initialized(self, dev: int) -> bool:
        return self._dev_users.get(dev, 0) > 0

    def _not_ready(self, dev) -> OffloadError:
        """The error for a data, image or launch call on device ``dev`` that this
        plugin layer has not initialised (:meth:`acquire_device`): an index out of
        range (ValueError, as :meth:`acquire_device`), a plugin not initialised
        or a device never initialised / already deinitialised (LifecycleError).
        libomptarget and libgomp call these entry points only on initialised
        devices; the LLVM 16 nextgen plugins dereference the missing device
        (SIGSEGV), as GCC's nvptx plugin does when it has no device."""
        self._check_dev(dev)
        return LifecycleError(f"{self._label(dev)}: device not initialised (acquire_device "
                              "first; or it was deinitialised)", device=self._label(dev))

    def info(self) -> dict:
        """Static facts (no plugin call beyond the probes of the ABI)."""
        return {"path": self.path, "name": self.name, "abi": self.abi,
                "generation": self.generation, "bundled": self.bundled,
                "symbols": sorted(self.symbols)}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.generation} {self.path}>"

    # ABI-specific hooks ------------------------------------------------------
    def _init_plugin(self) -> None: ...
    def _deinit_plugin(self) -> None: ...
    def _query_num_devices(self) -> int: raise NotImplementedError
    def _init_device(self, dev: int, flags: int) -> None: raise NotImplementedError
    def _deinit_device(self, dev: int) -> None: raise NotImplementedError


class LLVMPlugin(Plugin):
    """A libomptarget plugin (``__tgt_rtl_*``), LLVM 14 / 16 classic / 16
    nextgen (17/18 are recognised and refused with ABIMismatchError)."""

    abi = "llvm"
    prefix = _tgt.PREFIX

    def __init__(self, path, lib, symbols):
        super().__init__(path, lib, symbols)
        self.generation = _tgt.classify(set(symbols)) or "unknown"
        if self.generation not in _tgt.SUPPORTED:
            raise ABIMismatchError(
                f"{path}: {self.generation} plugins are recognised but not supported "
                f"(supported: {', '.join(_tgt.SUPPORTED)})")
        protos, required = _tgt.GENERATIONS[self.generation]
        self._bind(protos, required)
        self._addr: dict[str, int] = {}         # entry point -> address (batched calls)

    # lifecycle -------------------------------------------------------------
    def _init_plugin(self):
        fn = self._fn.get("init_plugin")
        if fn is not None:
            self._check_int32(fn(), "init_plugin")

    def _deinit_plugin(self):
        fn = self._fn.get("deinit_plugin")
        if fn is not None:
            self._check_int32(fn(), "deinit_plugin", detail=False)

    def _query_num_devices(self) -> int:
        return self._fn["number_of_devices"]()

    def _init_device(self, dev, flags):
        req = self._fn.get("init_requires")
        if req is not None:
            req(flags)                          # libomptarget: init_requires before init_device
        self._check_int32(self._fn["init_device"](dev), "init_device", dev,
                          error=DeviceInitError)

    def _deinit_device(self, dev):
        fn = self._fn.get("deinit_device")
        if fn is None:
            return                               # B7: optional, degrade silently
        self._check_int32(fn(dev), "deinit_device", dev, detail=False)

    # images ----------------------------------------------------------------
    def _device_image(self, image) -> tuple[_tgt.DeviceImage, list]:
        """``__tgt_device_image`` of ``image`` and what it points into (the image's
        own bytes, no copy; the entry table and its names), to keep referenced while
        the plugin may read them."""
        data = image.data
        start = image.data_address()
        n = len(image.entries)
        arr = (_tgt.OffloadEntry * max(n, 1))()
        names = []
        for i, (entry, host_addr) in enumerate(zip(image.entries, image.host_addresses())):
            nm = entry.name.encode()
            names.append(nm)
            arr[i].addr = host_addr
            arr[i].name = nm
            arr[i].size = entry.size
            arr[i].flags = entry.flags
        base = ctypes.addressof(arr)
        dimg = _tgt.DeviceImage()
        dimg.ImageStart = start
        dimg.ImageEnd = start + len(data)
        dimg.EntriesBegin = cast(base, _tgt.OffloadEntryP)
        dimg.EntriesEnd = cast(base + n * ctypes.sizeof(_tgt.OffloadEntry), _tgt.OffloadEntryP)
        return dimg, [data, arr, names, dimg]

    def is_valid_binary(self, image) -> bool:
        """``is_valid_binary`` on the image bytes (needs an initialised plugin).  The
        ``__tgt_device_image`` has the image's bytes and an empty entry table: the
        entry point judges the image (``omptargetplugin.h``: "the provided device image
        can be supported"; the LLVM 14-18 x86_64, CUDA and AMDGPU plugins and the
        bundled one read ``ImageStart``/``ImageEnd`` only)."""
        if not self._initialized:
            raise LifecycleError(f"{self.name}: is_valid_binary before init_plugin")
        if getattr(image, "gomp_target_type", None) is not None:
            return False                 # a GCC (libgomp) image: not for __tgt_rtl_*
        data = image.data                # referenced across the call
        start = image.data_address()
        dimg = _tgt.DeviceImage()
        dimg.ImageStart = start
        dimg.ImageEnd = start + len(data)
        return bool(self._fn["is_valid_binary"](byref(dimg)))

    def load_image(self, dev: int, image) -> LoadedImage:
        """``load_binary`` into device ``dev``; returns the target table in host
        entry order.  Raises InvalidImageError (NULL table) or
        TableMismatchError (I5).

        What the plugin was given (the image's bytes, the ``__tgt_device_image``, the
        entry table and its names) is kept by the returned LoadedImage, so it is
        released when the runtime drops that (the image's unregistration): these
        plugins have no unload entry point and keep the image loaded, but libomptarget
        16 gives them no more than that either -- after ``__tgt_unregister_lib`` the
        library is ``dlclose``-d, unmapping the image bytes and the entry table its
        ``__tgt_device_image`` points into (openmp/libomptarget/src/rtl.cpp,
        ``RTLsTy::unregisterLib``, LLVM 16), so the plugins read neither after the
        load.  After a failed load they stay referenced for the plugin's lifetime."""
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        self._check_dev(dev)
        dimg, keep = self._device_image(image)
        # the LLVM x86_64 plugins leave a /tmp/tmpfile_* copy of each image: the copies
        # that appear during the load are looked at afterwards
        before = None if self.bundled else leftovers.before_load()
        table = None
        try:
            table = self._fn["load_binary"](dev, byref(dimg))
        finally:
            if not table:                        # a partial load may point into them
                with self._lock:
                    self._keepalive.append(keep)
            if before is not None:
                leftovers.unlink_new_copies(before)
        if not table:
            raise self._error(InvalidImageError, "load_binary", dev,
                              head=f"__tgt_rtl_load_binary rejected image {image.name!r}")
        t = table.contents
        begin = cast(t.EntriesBegin, c_void_p).value or 0
        end = cast(t.EntriesEnd, c_void_p).value or 0
        esz = ctypes.sizeof(_tgt.OffloadEntry)
        count = (end - begin) // esz if end >= begin else -1
        if count != len(image.entries):
            with self._lock:
                self._keepalive.append(keep)     # loaded, never unloaded
            raise TableMismatchError(
                f"{self._label(dev)}: host and target tables mismatch for image "
                f"{image.name!r}: expected {len(image.entries)} entries, have {count}",
                expected=len(image.entries), got=count,
                function="__tgt_rtl_load_binary", device=self._label(dev))
        raw = []
        for i in range(count):
            e = _tgt.OffloadEntry.from_address(begin + i * esz)
            raw.append(TargetEntry(e.name.decode(errors="replace") if e.name else "",
                                   e.addr or 0, e.size))
        entries = _match_by_name(image.entries, raw)
        return LoadedImage(entries, keep)

    def unload_image(self, dev: int, loaded: LoadedImage) -> None:
        """LLVM <= 18 plugins have no unload entry point: the image stays in
        the plugin until ``deinit_device``; the runtime drops its mappings."""
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        self._check_dev(dev)

    # data ------------------------------------------------------------------
    def alloc(self, dev: int, size: int, kind: int = _tgt.TARGET_ALLOC_DEFAULT) -> int:
        """``data_alloc``; returns the device address or 0 (out of memory)."""
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        return self._fn["data_alloc"](dev, size, None, kind) or 0

    def free(self, dev: int, ptr: int, kind: int = _tgt.TARGET_ALLOC_DEFAULT) -> None:
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        if self.generation == "llvm14":
            rc = self._fn["data_delete"](dev, ptr)
        else:
            rc = self._fn["data_delete"](dev, ptr, kind)
        self._check_int32(rc, "data_delete", dev, args=f"({ptr:#x})")

    def submit(self, dev: int, tgt: int, host_addr: int, size: int) -> None:
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        self._check_int32(self._fn["data_submit"](dev, tgt, host_addr, size), "data_submit", dev)

    def retrieve(self, dev: int, host_addr: int, tgt: int, size: int) -> None:
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        self._check_int32(self._fn["data_retrieve"](dev, host_addr, tgt, size),
                          "data_retrieve", dev)

    def submit_many(self, dev: int, ops) -> None:
        """:meth:`Plugin.submit_many`: the ``data_submit`` calls in one foreign call
        (:mod:`offload_shim.abi.batch`), or one by one without it."""
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        self._many(dev, ops, "data_submit")

    def retrieve_many(self, dev: int, ops) -> None:
        """:meth:`Plugin.retrieve_many`: the ``data_retrieve`` calls in one foreign
        call (:mod:`offload_shim.abi.batch`), or one by one without it."""
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        self._many(dev, ops, "data_retrieve")

    def _many(self, dev: int, ops, name: str) -> None:
        fn = self._fn[name]
        count = len(ops) // 3 if isinstance(ops, array) else len(ops)
        if count > 1:
            from ..abi import batch
            addr = self._addr.get(name)
            if addr is None:
                addr = self._addr[name] = batch.function_address(fn)
            res = batch.call4(addr, dev, ops)
            if res is not None:
                done, rc = res
                if done != count:
                    raise self._error(PluginCallError, name, dev, code=rc)
                return
        ok = _tgt.OFFLOAD_SUCCESS
        for a, b, size in _triples(ops):
            rc = fn(dev, a, b, size)
            if rc != ok:
                self._check_int32(rc, name, dev)

    def lock(self, dev: int, host_addr: int, size: int) -> int:
        """``data_lock`` (LLVM 16+: ``int32_t (ID, HstPtr, Size, void **LockedPtr)``,
        verified against the Debian 16.0.6 plugins): returns the locked address.
        Raises MissingEntryPointError if absent, PluginCallError when the plugin
        fails (e.g. the bundled plugin's mlock hit RLIMIT_MEMLOCK)."""
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        fn = self._need("data_lock")
        locked = c_void_p()
        rc = fn(dev, host_addr, size, byref(locked))
        if rc == _tgt.OFFLOAD_SUCCESS and not locked.value:
            raise self._error(PluginCallError, "data_lock", dev, code=rc)   # success, NULL
        self._check_int32(rc, "data_lock", dev)
        return locked.value

    def unlock(self, dev: int, host_addr: int) -> None:
        """``data_unlock`` (``int32_t (ID, HstPtr)``); PluginCallError on failure."""
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        self._check_int32(self._need("data_unlock")(dev, host_addr), "data_unlock", dev)

    # launch ------------------------------------------------------------------
    def launch(self, dev: int, entry: int, args: Sequence[int],
               offsets: Sequence[int] | None = None) -> None:
        """Launch the kernel whose table address is ``entry`` with pointer-sized
        ``args`` (argument i = args[i] + offsets[i]); synchronous.  LLVM 14:
        ``run_target_team_region`` (1 team, 1 thread); 16: ``launch_kernel``
        with a version-2 ``KernelArgsTy`` (abi-reference 4.7)."""
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        n = len(args)
        if n > MAX_KERNEL_ARGS:
            raise ValueError(f"at most {MAX_KERNEL_ARGS} kernel arguments")
        argv = (c_void_p * max(n, 1))(*[a or None for a in args])
        offs = (_tgt.c_ptrdiff_t * max(n, 1))(*(offsets or [0] * n))
        if self.generation == "llvm14":
            rc = self._fn["run_target_team_region"](dev, entry, argv, offs, n, 1, 1, 0)
            fname = "run_target_team_region"
        else:
            ka = _tgt.KernelArgs()
            ka.Version = _tgt.KERNEL_ARGS_VERSION
            ka.NumArgs = n
            ka.ArgBasePtrs = argv
            ka.ArgPtrs = argv
            ka.NumTeams[0] = 1
            ka.ThreadLimit[0] = 1
            sync = self._fn.get("synchronize") if self.generation == "llvm16-classic" else None
            if sync is None:
                rc = self._fn["launch_kernel"](dev, entry, argv, offs, byref(ka), None)
                fname = "launch_kernel"
            else:
                # LLVM 16 classic CUDA/AMDGPU take the stream from the async info and
                # crash on NULL; libomptarget passes one and synchronizes on it
                ai = (ctypes.c_char * _tgt.ASYNC_INFO_BYTES)()
                rc = self._fn["launch_kernel"](dev, entry, argv, offs, byref(ka), ai)
                fname = "launch_kernel"
                if rc == _tgt.OFFLOAD_SUCCESS:
                    rc = sync(dev, ai)
                    fname = "synchronize"
        self._check_int32(rc, fname, dev)

    def launcher(self, dev: int, entry: int, nargs: int):
        """:meth:`Plugin.launcher`: for the LLVM 16 plugins that take a NULL async
        info (nextgen; classic host plugins) the argument and offset arrays and the
        ``KernelArgsTy`` are made once, and each launch fills them and calls
        ``__tgt_rtl_launch_kernel``, as :meth:`launch` does (one team, one thread).
        The blocks are a free list: a launch takes one (``list.pop``, atomic), makes
        another when all are in use by launches of other threads, and gives it back
        after the call, so concurrent launches of one kernel neither share a block
        nor wait for each other (no lock is held across the plugin's launch).  Other
        generations use :meth:`launch`."""
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        if nargs > MAX_KERNEL_ARGS:
            raise ValueError(f"at most {MAX_KERNEL_ARGS} kernel arguments")
        if self.generation == "llvm14" or (self.generation == "llvm16-classic"
                                           and self._fn.get("synchronize") is not None):
            return super().launcher(dev, entry, nargs)
        n = max(nargs, 1)

        def blocks():
            argv = (c_void_p * n)()
            offs = (_tgt.c_ptrdiff_t * n)()
            ka = _tgt.KernelArgs()
            ka.Version = _tgt.KERNEL_ARGS_VERSION
            ka.NumArgs = nargs
            ka.ArgBasePtrs = argv
            ka.ArgPtrs = argv
            ka.NumTeams[0] = 1
            ka.ThreadLimit[0] = 1
            return (argv, offs, ctypes.addressof(argv), ctypes.addressof(offs),
                    ctypes.addressof(ka), ka)
        # the same entry point through a prototype of plain addresses: the blocks are
        # fixed, so each call converts ints only
        call = _tgt.LAUNCH_BY_ADDRESS(cast(self._fn["launch_kernel"], c_void_p).value)
        free = [blocks()]
        made = [free[0]]                        # every block made, alive with the function
        ok = _tgt.OFFLOAD_SUCCESS
        check = self._check_int32

        def launch(args, offsets):
            try:
                blk = free.pop()
            except IndexError:                  # every block is in another launch
                blk = blocks()
                made.append(blk)
            try:
                if nargs:
                    blk[0][:nargs] = args
                    blk[1][:nargs] = offsets
                rc = call(dev, entry, blk[2], blk[3], blk[4], None)
            finally:
                free.append(blk)
            if rc != ok:
                check(rc, "launch_kernel", dev)
        launch.keep = (made, call)              # the blocks live as long as the function
        return launch

    def print_device_info(self, dev: int) -> None:
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        fn = self._fn.get("print_device_info")
        if fn is not None:
            fn(dev)


def _match_by_name(host_entries, raw: list[TargetEntry]) -> list[TargetEntry]:
    """Target entries in host-entry order.  Tables are matched by index
    (libomptarget); LLVM 14 returns the image's own records, whose order may
    differ (abi-reference 1.8), so when the names are a permutation of the
    host names, match by name instead."""
    host_names = [e.name for e in host_entries]
    tgt_names = [e.name for e in raw]
    if tgt_names != host_names and sorted(tgt_names) == sorted(host_names) \
            and len(set(host_names)) == len(host_names):
        by = {e.name: e for e in raw}
        return [by[n] for n in host_names]
    return [TargetEntry(h.name, r.addr, r.size if r.size else h.size)
            for h, r in zip(host_entries, raw)]


class GompPlugin(Plugin):
    """A libgomp plugin (``GOMP_OFFLOAD_*``), GCC 12 shape (GOMP_VERSION 1).
    Plugins reporting another version are recognised (``version`` is read,
    the only call made while loading) and refused with ABIMismatchError."""

    abi = "gomp"
    prefix = _gomp.PREFIX

    def __init__(self, path, lib, symbols):
        super().__init__(path, lib, symbols)
        vfn = getattr(lib, self.prefix + "version")
        vfn.restype = ctypes.c_uint
        vfn.argtypes = []
        self.version = int(vfn())                # probe call, as libgomp does
        self.generation = _gomp.generation(self.version)
        if self.version not in _gomp.SUPPORTED_VERSIONS:
            raise ABIMismatchError(
                f"{path}: GOMP_OFFLOAD_version() = {self.version} "
                f"({_gomp.GCC_FOR_VERSION.get(self.version, 'unknown GCC')}); "
                f"supported: {_gomp.SUPPORTED_VERSIONS}")
        self._bind(_gomp.PROTOTYPES[self.version], _gomp.REQUIRED_BASE)
        self.caps = int(self._fn["get_caps"]())
        self.target_type = int(self._fn["get_type"]())
        self.target_name = (self._fn["get_name"]() or b"").decode()
        if self.caps & _gomp.GOMP_OFFLOAD_CAP_OPENMP_400:
            missing = [self.prefix + n for n in _gomp.REQUIRED_OPENMP if n not in symbols]
            if missing:
                raise NotAPluginError(f"{path}: OpenMP-capable GOMP plugin lacks "
                                      f"{', '.join(missing)}", path=path, missing=missing)
        self._images: dict[tuple[int, int], object] = {}

    def info(self) -> dict:
        d = super().info()
        d.update(gomp_version=self.version, caps=self.caps, target_type=self.target_type,
                 target_name=self.target_name)
        return d

    def _query_num_devices(self) -> int:
        return self._fn["get_num_devices"](0)

    def _init_device(self, dev, flags):
        self._check_bool(self._fn["init_device"](dev), "init_device", dev, error=DeviceInitError)

    def _deinit_device(self, dev):
        self._check_bool(self._fn["fini_device"](dev), "fini_device", dev, detail=False)

    # images ----------------------------------------------------------------
    def image_version(self) -> int:
        return _gomp.version_pack(self.version, 0 if self.target_type == 2 else 1)

    def _target_data(self, image):
        """The bundled plugin's ``osh_gomp_target_data`` for an OffloadImage, or the
        compiler's own ``target_data`` of a GCC library's image (an image with a
        ``gomp_target_data`` address, made by :mod:`offload_shim.interposer` at
        ``GOMP_offload_register_ver``: functions first, then variables)."""
        gomp_td = getattr(image, "gomp_target_data", None)
        if gomp_td:
            return ctypes.c_char.from_address(gomp_td), [image], list(image.entries)
        if not self.bundled:
            raise InvalidImageError(
                f"{self.name}: building target_data for {self.target_name} images is not "
                "supported (only the bundled host plugin's format)")
        data = image.data
        funcs = [e for e in image.entries if e.size == 0]
        vars_ = [e for e in image.entries if e.size > 0]
        fnames = (c_char_p * max(len(funcs), 1))(*[e.name.encode() for e in funcs])
        nargs = (ctypes.c_uint32 * max(len(funcs), 1))(*[image.num_args(e.name) for e in funcs])
        vnames = (c_char_p * max(len(vars_), 1))(*[e.name.encode() for e in vars_])
        td = _gomp.OshGompTargetData()
        td.magic = _gomp.OSH_GOMP_TARGET_DATA_MAGIC
        td.format_version = 1
        td.image = image.data_address()
        td.image_size = len(data)
        td.func_names = fnames
        td.func_num_args = nargs
        td.num_funcs = len(funcs)
        td.var_names = vnames
        td.num_vars = len(vars_)
        return td, [data, fnames, nargs, vnames, td], funcs + vars_

    def is_valid_binary(self, image) -> bool:
        """GOMP has no such entry point: an image is for this plugin when its
        target type matches (x86-64 ELF -> host type, bundled plugin only; a GCC
        library's image -> the ``target_type`` it was registered with)."""
        gomp_type = getattr(image, "gomp_target_type", None)
        if gomp_type is not None:
            return gomp_type == self.target_type
        return self.bundled and image.machine == "EM_X86_64"

    def load_image(self, dev: int, image) -> LoadedImage:
        """``load_image``; returns target entries in host order (functions
        first then variables, libgomp's table order, mapped back to the
        image's entry order).  GCC 12 allows one extra trailing entry (I5).
        The ``target_data`` given to the plugin (and the image bytes it points to)
        is kept by the returned LoadedImage: the plugin keys the image by that
        pointer until ``unload_image`` (libgomp 12 ``target.c``,
        ``gomp_unload_image_from_device``), after which the runtime drops it."""
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        self._check_dev(dev)
        td, keep, order = self._target_data(image)
        table = POINTER(_gomp.AddrPair)()
        n = -1
        try:
            n = self._fn["load_image"](dev, self.image_version(), byref(td), byref(table),
                                       None)
        finally:
            if n < 0:                            # a partial load may point into them
                with self._lock:
                    self._keepalive.append(keep)
        if n < 0:      # int: the table's length, -1 on failure (libgomp-plugin.h)
            raise self._error(InvalidImageError, "load_image", dev, tail=f" for {image.name!r}")
        expected = len(order)
        try:
            if n not in (expected, expected + 1):
                # the image is loaded in the plugin: unload it again so nothing is
                # left behind (libgomp makes this fatal; we raise and roll back)
                self._fn["unload_image"](dev, self.image_version(), byref(td))
                raise TableMismatchError(
                    f"{self._label(dev)}: Cannot map target functions or variables "
                    f"(expected {expected}, have {n})", expected=expected, got=n,
                    function="GOMP_OFFLOAD_load_image", device=self._label(dev))
            got = {}
            for i, e in enumerate(order):
                pair = table[i]
                got[e.name] = TargetEntry(e.name, pair.start,
                                          pair.end - pair.start if e.size else 0)
        finally:
            _libc.free(_gomp.table_address(table))   # malloc'ed by the plugin (target.c)
        loaded = LoadedImage([got[e.name] for e in image.entries], keep)
        loaded.target_data = ctypes.addressof(td)  # type: ignore[attr-defined]
        return loaded

    def unload_image(self, dev: int, loaded: LoadedImage) -> None:
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        self._check_dev(dev)
        ok = self._fn["unload_image"](dev, self.image_version(), loaded.target_data)
        if not ok:                               # still loaded: the plugin keeps its key
            with self._lock:
                self._keepalive.append(loaded.keepalive)
        self._check_bool(ok, "unload_image", dev)

    # data ------------------------------------------------------------------
    def alloc(self, dev: int, size: int, kind: int = 0) -> int:
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        return self._fn["alloc"](dev, size) or 0

    def free(self, dev: int, ptr: int, kind: int = 0) -> None:
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        self._check_bool(self._fn["free"](dev, ptr), "free", dev, args=f"({ptr:#x})")

    def submit(self, dev: int, tgt: int, host_addr: int, size: int) -> None:
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        self._check_bool(self._fn["host2dev"](dev, tgt, host_addr, size), "host2dev", dev)

    def retrieve(self, dev: int, host_addr: int, tgt: int, size: int) -> None:
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        self._check_bool(self._fn["dev2host"](dev, host_addr, tgt, size), "dev2host", dev)

    def launch(self, dev: int, entry: int, args: Sequence[int],
               offsets: Sequence[int] | None = None) -> None:
        """``run(dev, fn, vars, args)``: ``vars`` is a device block holding the
        argument values (the GOMP convention: the target function receives the
        device address of its variable block); ``args`` is an empty GOMP
        target-argument vector."""
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)
        vals = [int(a or 0) + int(o) for a, o in zip(args, offsets or [0] * len(args))]
        n = len(vals)
        block = 0
        if n:
            block = self.alloc(dev, 8 * n)
            if not block:
                raise PluginCallError(f"{self._label(dev)}: no device memory for the "
                                      "argument block", function="GOMP_OFFLOAD_alloc")
        try:
            if n:
                host = (ctypes.c_uint64 * n)(*[v & 0xFFFFFFFFFFFFFFFF for v in vals])
                self.submit(dev, block, ctypes.addressof(host), 8 * n)
            targs = (c_void_p * 1)(None)
            self._fn["run"](dev, entry, block or None, targs)
        finally:
            if block:
                self.free(dev, block)

