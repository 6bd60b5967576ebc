"""The plugin interface: one loaded plugin library seen through one ABI family.

:class:`Plugin` is the base of the three families -- :class:`~.llvm.LLVMPlugin`
(libomptarget plugins, ``__tgt_rtl_*``), :class:`~.gomp.GompPlugin` (libgomp
plugins, ``GOMP_OFFLOAD_*``) and :class:`~.liboffload.LiboffloadPlugin` (LLVM
liboffload, ``ol*``).  All offer the same methods (``init_device``,
``deinit_device``, ``load_image``, ``unload_image``, ``alloc``, ``free``,
``submit``, ``retrieve``, ``launch``...) so that the layers above never branch on
the ABI family.  Loading a file, and choosing the family, is :mod:`.loader`'s.

The same file is loaded once per process and never ``dlclose``\\ d (a handle
closed under another user: cuda-python #1011): plugins are shared between
runtimes.  Lifecycle calls are reference counted here: ``init_plugin`` runs for
the first user and ``deinit_plugin`` after the last (nothing reaches a plugin
after its ``deinit_plugin``: LLVM D130712); ``init_device`` runs exactly once for
the first user of a device, also under concurrent first use (LLVM
``DeviceTy::initOnce``; aomp #23, LLVM #49284), and ``deinit_device`` after its
last user.
"""

from __future__ import annotations

import ctypes
import os
import threading
from array import array
from collections import namedtuple
from collections.abc import Sequence

from ..abi import gomp as _gomp
from ..abi import tgt_rtl as _tgt
from ..errors import (LifecycleError, MissingEntryPointError, NotAPluginError, OffloadError,
                      PluginCallError)
from ..records import FieldsRepr

MAX_KERNEL_ARGS = 64


class TargetEntry(namedtuple("TargetEntry", "name addr size")):
    """One entry of a loaded image's target table: ``addr`` is what the plugin
    returned (a kernel handle for functions, a device address for
    variables), ``size`` in bytes (0 = function)."""
    __slots__ = ()


class LoadedImage(FieldsRepr):
    """What ``load_image`` returns: target entries in host-entry order, and
    the ctypes objects that must outlive the load (the plugin keeps pointers
    into them, docs/references.md, plugin contracts)."""
    _fields = ("entries",)

    def __init__(self, entries: list[TargetEntry], keepalive: list | None = None) -> None:
        self.entries = entries
        self.keepalive = [] if keepalive is None else keepalive


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

    def raw_entry(self, name: str) -> int:
        """The address of the bound entry point ``name`` (short name, e.g.
        ``data_submit``), 0 when the plugin does not have it: for C code that calls it
        itself (the interposer's repeat path, ``native/interposer_repeat.c``)."""
        fn = self._fn.get(name)
        return ctypes.cast(fn, ctypes.c_void_p).value or 0 if fn is not None else 0

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
        device it initialised has been deinitialised (D130712, DeviceTy::initOnce)."""
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

    # -- the per-device entry points ----------------------------------------------------
    # Each public method below is the one ready guard (_ready), then the family's
    # *_impl, as LLVM's PluginInterface.h does it (the public GenericDeviceTy::dataSubmit
    # makes the common checks and calls dataSubmitImpl).  libomptarget and libgomp
    # call these entry points only on devices they initialised; the real plugins do not
    # defend themselves (the LLVM 16 nextgen plugins dereference a device they never
    # initialised, GCC 12's nvptx plugin one it does not have: SIGSEGV).

    def _ready(self, dev) -> None:
        """The ready guard: returns when :meth:`acquire_device` initialised ``dev``
        and no :meth:`release_device` deinitialised it since; raises what
        :meth:`_not_ready` builds otherwise (ValueError for an index the plugin does
        not have, LifecycleError), before any plugin call."""
        if not self._dev_users.get(dev):
            raise self._not_ready(dev)

    def load_image(self, dev: int, image) -> LoadedImage:
        """Load the :class:`~offload_shim.core.images.OffloadImage` ``image`` into
        device ``dev``; returns its :class:`LoadedImage` (target entries in host-entry
        order).  Raises InvalidImageError (refused), TableMismatchError (target and
        host tables of different lengths: libgomp's "Cannot map target functions or
        variables", GCC PR 68463), PluginCallError."""
        self._ready(dev)
        return self._load_image_impl(dev, image)

    def unload_image(self, dev: int, loaded: LoadedImage) -> None:
        """Unload what :meth:`load_image` returned (LLVM <= 18 plugins have no
        unload entry point: the image stays in them until ``deinit_device``).
        Raises PluginCallError."""
        self._ready(dev)
        self._unload_image_impl(dev, loaded)

    def alloc(self, dev: int, size: int, kind: int | None = None) -> int:
        """``size`` bytes of device memory; the device address, or 0 when the plugin
        has no memory (the memory manager's out-of-memory signal).  ``kind``: the
        family's allocation kind (LLVM ``TargetAllocTy``, liboffload
        ``ol_alloc_type_t``; None: :attr:`default_alloc_kind`).  Raises
        PluginCallError for other failures."""
        self._ready(dev)
        return self._alloc_impl(dev, size, self.default_alloc_kind if kind is None else kind)

    def free(self, dev: int, ptr: int, kind: int | None = None) -> None:
        """Free the device address ``ptr`` (``kind`` as for :meth:`alloc`).  Raises
        PluginCallError."""
        self._ready(dev)
        self._free_impl(dev, ptr, self.default_alloc_kind if kind is None else kind)

    def submit(self, dev: int, tgt: int, host_addr: int, size: int) -> None:
        """Copy ``size`` bytes from the host address ``host_addr`` to the device
        address ``tgt``; synchronous.  Raises PluginCallError."""
        self._ready(dev)
        self._submit_impl(dev, tgt, host_addr, size)

    def retrieve(self, dev: int, host_addr: int, tgt: int, size: int) -> None:
        """Copy ``size`` bytes from the device address ``tgt`` to the host address
        ``host_addr``; synchronous.  Raises PluginCallError."""
        self._ready(dev)
        self._retrieve_impl(dev, host_addr, tgt, size)

    def submit_many(self, dev: int, ops) -> None:
        """:meth:`submit` of each ``(tgt, host_addr, size)`` in order; stops at the
        first failure (raised).  ``ops``: a list of triples, or an ``array('Q')`` of
        them one after the other.  A plugin family may do them with less
        overhead."""
        self._ready(dev)
        self._submit_many_impl(dev, ops)

    def retrieve_many(self, dev: int, ops) -> None:
        """:meth:`retrieve` of each ``(host_addr, tgt, size)`` in order (see
        :meth:`submit_many`)."""
        self._ready(dev)
        self._retrieve_many_impl(dev, ops)

    def lock(self, dev: int, host_addr: int, size: int) -> int:
        """Page-lock ``size`` bytes at ``host_addr`` for transfers with device ``dev``
        (the entry point :attr:`host_lock_entry_point` names); returns the address to
        use for transfers.  Raises MissingEntryPointError (the plugin has none),
        PluginCallError."""
        self._ready(dev)
        return self._lock_impl(dev, host_addr, size)

    def unlock(self, dev: int, host_addr: int) -> None:
        """Undo :meth:`lock`.  Raises MissingEntryPointError, PluginCallError."""
        self._ready(dev)
        self._unlock_impl(dev, host_addr)

    def launch(self, dev: int, entry: int, args: Sequence[int],
               offsets: Sequence[int] | None = None) -> None:
        """Run the kernel whose target-table address is ``entry`` with
        pointer-sized ``args`` (argument i = args[i] + offsets[i], libomptarget's
        ``TgtArgs``/``TgtOffsets``); synchronous, one team of one thread.  Raises
        ValueError (more than :data:`MAX_KERNEL_ARGS` arguments), PluginCallError."""
        self._ready(dev)
        self._launch_impl(dev, entry, args, offsets)

    def launcher(self, dev: int, entry: int, nargs: int):
        """A callable ``launch(args, offsets)`` for repeated synchronous launches of
        the kernel ``entry`` of device ``dev`` with ``nargs`` pointer-sized
        arguments: what :meth:`launch` does, for callers that launch the same kernel
        many times (compiled code's target regions).  A plugin family may prepare
        its argument blocks once.  ``args``/``offsets``: lists of ``nargs`` ints
        within 64 bits (not checked again per item: the caller validates).  Raises
        like :meth:`launch`."""
        self._ready(dev)
        return self._launcher_impl(dev, entry, nargs)

    def print_device_info(self, dev: int) -> None:
        """The plugin prints what it knows of device ``dev`` to the process's
        stdout (LLVM ``__tgt_rtl_print_device_info``; nothing where the plugin has
        no such entry point)."""
        self._ready(dev)
        self._print_device_info_impl(dev)

    # -- what a family implements (called after the ready guard) -------------------------
    default_alloc_kind = 0

    def _load_image_impl(self, dev: int, image) -> LoadedImage:
        raise NotImplementedError

    def _unload_image_impl(self, dev: int, loaded: LoadedImage) -> None:
        raise NotImplementedError

    def _alloc_impl(self, dev: int, size: int, kind: int) -> int:
        raise NotImplementedError

    def _free_impl(self, dev: int, ptr: int, kind: int) -> None:
        raise NotImplementedError

    def _submit_impl(self, dev: int, tgt: int, host_addr: int, size: int) -> None:
        raise NotImplementedError

    def _retrieve_impl(self, dev: int, host_addr: int, tgt: int, size: int) -> None:
        raise NotImplementedError

    def _submit_many_impl(self, dev: int, ops) -> None:
        for tgt, host_addr, size in _triples(ops):
            self._submit_impl(dev, tgt, host_addr, size)

    def _retrieve_many_impl(self, dev: int, ops) -> None:
        for host_addr, tgt, size in _triples(ops):
            self._retrieve_impl(dev, host_addr, tgt, size)

    def _lock_impl(self, dev: int, host_addr: int, size: int) -> int:
        raise MissingEntryPointError(f"{self.name}: plugin has no entry point that "
                                     "page-locks host memory", function="")

    def _unlock_impl(self, dev: int, host_addr: int) -> None:
        raise MissingEntryPointError(f"{self.name}: plugin has no entry point that "
                                     "page-locks host memory", function="")

    def _launch_impl(self, dev: int, entry: int, args, offsets) -> None:
        raise NotImplementedError

    def _launcher_impl(self, dev: int, entry: int, nargs: int):
        def launch(args, offsets, _launch=self.launch):
            _launch(dev, entry, args, offsets)
        # it goes through :meth:`launch` (the trace recorder, trace/record.py, hooks both
        # and must log such a launch once)
        launch.calls_plugin_launch = True
        return launch

    def _print_device_info_impl(self, dev: int) -> None:
        return None

    # -- capabilities: what the layers above ask instead of branching on ``abi`` ------
    #: the plugin leaves a copy of every image it loads in /tmp (the LLVM x86_64
    #: plugins' ``/tmp/tmpfile_*``: :mod:`offload_shim.safety.leftovers`)
    leaves_image_copies = False
    #: its device numbers are CUDA ordinals (the LLVM CUDA plugins, GCC's nvptx plugin)
    cuda_devices = False
    #: its "device memory" is ordinary host memory of this process: the bundled
    #: plugin (``malloc``, native/host_plugin.c) and the LLVM x86_64 plugins
    #: (``__tgt_rtl_data_alloc`` is ``malloc``: LLVM 16
    #: plugins-nextgen/host/src/rtl.cpp ``GenELF64DeviceTy::allocate``,
    #: plugins/generic-elf-64bit/src/rtl.cpp ``__tgt_rtl_data_alloc``), so the
    #: host may read and write a device address directly (a
    #: :class:`~offload_shim.core.array.DeviceArray` exports it as ``kDLCPU``
    #: memory for a zero-copy ``numpy.from_dlpack``).  False for GPU plugins and
    #: wherever it is not known.
    device_memory_is_host = False
    #: the full name of the entry point behind :meth:`lock`, or None when it has none
    host_lock_entry_point: str | None = None

    @property
    def own_memory_manager(self) -> str | None:
        """When the plugin sets up a device-memory cache of its own from
        ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD`` (LLVM's ``MemoryManagerTy``, which
        would keep the blocks the Python pool releases): ``"device-init"`` (each
        device's, made in ``init_device``), ``"load"`` (made when the plugin was
        loaded) or None."""
        return None

    def info(self) -> dict:
        """Static facts (no plugin call beyond the probes of the ABI)."""
        return {"path": self.path, "name": self.name, "abi": self.abi,
                "generation": self.generation, "bundled": self.bundled,
                "symbols": sorted(self.symbols)}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.generation} {self.path}>"

    # -- what a family implements: the lifecycle hooks ---------------------------------
    def _init_plugin(self) -> None: ...
    def _deinit_plugin(self) -> None: ...
    def _query_num_devices(self) -> int: raise NotImplementedError
    def _init_device(self, dev: int, flags: int) -> None: raise NotImplementedError
    def _deinit_device(self, dev: int) -> None: raise NotImplementedError
