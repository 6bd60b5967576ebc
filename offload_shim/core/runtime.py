"""The runtime: plugins, devices, the image registry, teardown order.

``Runtime`` plays the part of libomptarget's ``PluginManager`` / libgomp's
``target.c`` over real plugins:

* **register / unregister** images with libgomp's semantics (GCC 12 target.c
  GOMP_offload_register_ver): an image registered while a device is initialised is loaded into it
  at once; otherwise it is pending and loaded when the device initialises.
  Unregister unloads it from every initialised device, removes its host ->
  target mappings and drops it from the pending list.
* **teardown** only here (docs/architecture.md): ``close()`` and the
  ``atexit`` hook run, per device, pool drain -> image unload ->
  ``deinit_device``, then ``deinit_plugin`` for plugins no other runtime
  uses (D130712, D120089).  Creating a runtime makes no plugin call (llvm-project #74507); plugins
  are initialised when devices are first listed or an image is registered,
  devices on first use.
"""

from __future__ import annotations

import atexit
import functools
import threading
from collections.abc import Iterable, Mapping

from ..plugins import discovery
from ..safety import leftovers
from .device import Device, DeviceState
from ..errors import (DeviceNotFoundError, ExportedMemoryError, ImageNotRegisteredError,
                      RuntimeInUseError,
                     InvalidImageError, LifecycleError, OffloadError, PluginLoadError)
from .images import ImageRegistry, OffloadImage
from ..plugins.loader import load_plugin, loaded_plugins
from ..plugins.plugin import Plugin

from ..lazylog import log  # logging.getLogger("offload_shim"), imported on first use

# Strong references: a runtime dropped without close() stays alive (like an
# unclosed file) until the atexit hook tears it down in order (libgomp gomp_target_fini).  A weak set
# would let it vanish with devices and the plugin still initialised.
_LIVE: "set[Runtime]" = set()
_ATEXIT_LOCK = threading.Lock()
_ATEXIT_DONE = False


def _close_all_at_exit() -> None:
    """atexit: close every live runtime (libgomp gomp_target_fini), newest first."""
    for rt in sorted(list(_LIVE), key=lambda r: -r._serial):
        if rt._users and _other_threads_alive():
            # a daemon thread may be running the interposed libraries' code right now:
            # closing the interposer would dlclose them under it (SIGSEGV), closing
            # only the runtime would fail its next region (libomptarget 16's
            # handleTargetOutcome aborts); the process's end frees the memory
            log.info("offload_shim: %r left open at exit: in use by %s while other "
                     "threads run", rt, rt._users[-1][0])
            continue
        try:
            rt._close_users()
            rt.close()
        except ExportedMemoryError as exc:
            # views of device arrays still alive at exit: the process's end frees
            # the memory; tearing down under them could crash later exit code
            log.info("offload_shim: %r left open at exit: %s", rt, exc)
        except Exception as exc:  # never raise out of atexit
            log.warning("offload_shim: error while closing %r at exit: %s", rt, exc)
    if any(p.leaves_image_copies for p in loaded_plugins()):
        leftovers.unlink_mapped_copies()        # image copies of plugins used without a Runtime


def _other_threads_alive() -> bool:
    """Whether a thread of ``threading`` other than this one still runs (at exit: a
    daemon thread; a foreign thread that once ran Python code -- ``_DummyThread``,
    always "alive" -- does not count)."""
    me = threading.current_thread()
    return any(t is not me and not isinstance(t, threading._DummyThread) and t.is_alive()
               for t in threading.enumerate())


def _ensure_atexit() -> None:
    global _ATEXIT_DONE
    with _ATEXIT_LOCK:
        if not _ATEXIT_DONE:
            atexit.register(_close_all_at_exit)
            _ATEXIT_DONE = True


_serials = iter(range(1, 1 << 62))


class Runtime:
    """A set of plugins and their devices.

    ``plugins``: paths or :class:`Plugin` objects (loaded now: ``dlopen`` and
    symbol lookup only, no plugin call).  ``bundled``: add the bundled host
    plugin.  ``abi``: view of the bundled plugin (``"llvm"`` or ``"gomp"``).
    ``pool``: keyword options for every device's MemoryManager (e.g.
    ``{"policy": "binned"}``).  ``pinned``: pinned host memory policy
    ``"none"``/``"mapped"``/``"all"`` (default ``$OFFLOAD_SHIM_PINNED`` or
    ``"none"``; gcc-patches -foffload-memory=pinned, see :mod:`offload_shim.memory.pinned`);
    ``"all"`` calls ``mlockall`` now (warns when ``ulimit -l`` is too low).

    Raises the PluginLoadError family for a plugin that cannot be loaded,
    ``ValueError`` naming the variable for a bad
    ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD`` (before any plugin is loaded:
    LLVM plugins parse it with ``std::stoul``, which aborts the process).
    Use as a context manager or call :meth:`close`; live runtimes are also
    closed at interpreter exit.
    """

    def __init__(self, plugins: Iterable = (), *, bundled: bool = False,
                 abi: str | None = None, pool: dict | None = None,
                 pinned: str | None = None):
        from ..memory.config import read_threshold_env, resolve_pin_policy
        read_threshold_env()            # ValueError before a plugin can abort on it
        self._pin_policy = resolve_pin_policy(pinned)
        # made now and handed to every Device, so the copy path reaches it without
        # the runtime lock (close() holds that lock while it waits for calls in
        # flight); its registry is built now under "mapped"/"all", on first use
        # under "none" (most runs never pin: start-up of every run)
        self._pinned = _PinnedSlot(self, self._pin_policy)
        self._serial = next(_serials)
        self._lock = threading.RLock()
        self._closed = False
        self._users: list = []              # (name, object with close()): _attach_user
        if pool is not None and not isinstance(pool, Mapping):
            raise TypeError(f"pool must be a dict of MemoryManager options (e.g. "
                            f"{{'policy': 'binned'}}), not {type(pool).__name__}")
        self._pool_options = dict(pool or {})
        if self._pool_options:
            _check_pool_options(self._pool_options)
        self._registry = ImageRegistry()
        self._plugins: list[Plugin] = []
        self._acquired: list[Plugin] = []
        self._devices: list[Device] | None = None
        self.load_errors: list[tuple[str, Exception]] = []
        if isinstance(plugins, (str, bytes, Plugin)) or hasattr(plugins, "__fspath__"):
            plugins = [plugins]             # one path, not an iterable of characters
        items = list(plugins)
        if bundled:
            from ..abi.native import bundled_plugin_path
            items.insert(0, bundled_plugin_path())
        for item in items:
            p = item if isinstance(item, Plugin) else load_plugin(
                item, abi=abi if _is_bundled_path(item) else None)
            if p not in self._plugins:
                self._plugins.append(p)
        _LIVE.add(self)
        _ensure_atexit()
        if self._pin_policy == "all":
            self._pinned.lock_all()

    @classmethod
    def discover(cls, paths: Iterable = (), *, system: bool = True, bundled: bool = True,
                 host_only: bool = False, **kw) -> "Runtime":
        """A runtime over every plugin that loads: ``paths``,
        ``$OFFLOAD_SHIM_PLUGINS``, the standard locations and the bundled
        plugin (see :mod:`offload_shim.plugins.discovery`).  Plugins that fail to
        load are skipped and listed in ``load_errors``.  ``host_only``: only
        plugins that execute on this CPU.  Raises ``ValueError`` for a bad
        ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD``, an ``$OFFLOAD_SHIM_PLUGINS``
        entry that does not exist or (with ``bundled``) an ``OFFLOAD_SHIM_NATIVE_DIR``
        without the bundled plugin (:func:`check_native_dir`), before loading any
        plugin.
        ``paths``: an iterable of paths, or one path (a str, bytes or
        os.PathLike -- not its characters, each of which would be tried as a
        file name in the current directory)."""
        from ..memory import read_threshold_env
        read_threshold_env()
        discovery.check_env_paths()
        if bundled:
            check_native_dir()
        if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
            paths = [paths]
        found = []
        errors = []
        for cand in discovery.candidates(paths, system=system, bundled=bundled):
            if host_only and not discovery.is_host_plugin(cand.path):
                continue
            try:
                found.append(load_plugin(cand.path))
            except (PluginLoadError, OSError, ValueError) as exc:
                errors.append((cand.path, exc))
        rt = cls(found, **kw)
        rt.load_errors = errors
        return rt

    # -- state -------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise LifecycleError("runtime is closed")

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except (ExportedMemoryError, RuntimeInUseError) as refused:
            # the block's own exception is the one to see; views of device arrays that
            # it left alive keep the runtime open (the exit hook closes it)
            log.info("%r stays open: %s", self, refused)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Runtime #{self._serial} {state} plugins={[p.name for p in self._plugins]}>"

    @property
    def plugins(self) -> list[Plugin]:
        return list(self._plugins)

    def _acquire_plugins(self) -> None:
        with self._lock:
            self._check_open()
            if self._devices is not None:
                return
            devices = []
            names = _plugin_labels(self._plugins)
            for p, name in zip(self._plugins, names):
                if p not in self._acquired:
                    p.acquire()
                    self._acquired.append(p)
                for i in range(p.num_devices):
                    devices.append(Device(
                        p, i, pool_options=self._pool_options,
                        images=functools.partial(self.accepted_images, p),
                        check_open=self._check_open, pinned=self._pinned,
                        label=f"{name}:{i}"))
            self._devices = devices

    @property
    def devices(self) -> "DeviceList":
        """All devices of all plugins, in plugin order (initialises the plugins,
        not the devices): a list whose out-of-range index raises
        DeviceNotFoundError (an IndexError) naming the devices there are.
        Raises LifecycleError after close."""
        if self._devices is None:
            self._acquire_plugins()
        self._check_open()
        return DeviceList(self._devices)

    def device(self, index: int = 0, plugin: str | None = None) -> Device:
        """Device ``index`` overall, or of the plugin whose name is ``plugin``.
        Raises DeviceNotFoundError."""
        devs = self.devices
        if plugin is not None:
            devs = DeviceList([d for d in devs if d.plugin.name == plugin],
                              what=f"of plugin {plugin}")
        return devs[index]

    # -- pinned host memory (gcc-patches -foffload-memory=pinned) --------------------------
    @property
    def pinned_policy(self) -> str:
        return self._pin_policy

    @property
    def pinned_memory(self):
        """This runtime's :class:`~offload_shim.memory.pinned.PinnedRegistry`
        (closed with the runtime: its methods then raise LifecycleError)."""
        return self._pinned.registry()

    # -- images --------------------------------------------------------------------
    def accepts(self, plugin: Plugin, image: OffloadImage) -> bool:
        """True when ``plugin`` takes ``image`` (``is_valid_binary``; GOMP: the
        target type), asked once per (plugin, image) and remembered with the image
        (:meth:`OffloadImage.accepted_by`).  The plugin must be initialised (any
        device list or registration did)."""
        return image.accepted_by(plugin)

    def accepted_images(self, plugin: Plugin) -> list[OffloadImage]:
        """The registered images ``plugin`` accepts, in registration order."""
        return [img for img in self._registry.snapshot() if self.accepts(plugin, img)]


    def register_image(self, image: OffloadImage) -> None:
        """Register an image (``__tgt_register_lib`` / ``GOMP_offload_register_ver``):
        loaded at once into every initialised device whose plugin accepts it,
        pending for the others (libgomp GOMP_offload_register_ver).  Registering the same image twice
        is a no-op.  Raises LifecycleError after close, InvalidImageError when
        no plugin accepts the image; a load failure
        (InvalidImageError, TableMismatchError) unregisters the image again
        and is re-raised.

        An image no plugin accepts is refused on purpose, unlike the references:
        libomptarget 16 (``RTLsTy::registerLib``, openmp/libomptarget/src/rtl.cpp:
        "No RTL found for image") keeps it without a device and the program's
        target regions run their host fallback; libgomp
        (``GOMP_offload_register_ver``) keeps it for devices of its type.  This
        API has no host fallback for a kernel, so an image that no device here can
        ever run is the caller's mistake, reported at once.  ``offload-shim run``
        (the interposer) follows libomptarget: the image is reported as
        unsupported and the program falls back to the host.

        Before any plugin sees an untrusted x86-64 shared-object image its
        bytes are ``dlopen``-ed once in a child process
        (:meth:`OffloadImage.verify_loadable`, cached per content): an image
        that crashes or aborts the dynamic loader raises InvalidImageError
        instead of killing this process inside ``load_binary``."""
        if not isinstance(image, OffloadImage):
            raise TypeError("register_image expects an OffloadImage")
        self._check_open()
        if image not in self._registry:
            image.verify_loadable()
        self._acquire_plugins()
        with self._lock:
            self._check_open()
            if image in self._registry:
                return
            if not any(self.accepts(p, image) for p in self._plugins):
                raise InvalidImageError(
                    f"image {image.name!r} ({image.machine}): no plugin of this runtime "
                    f"accepts it (is_valid_binary): {[p.name for p in self._plugins]}")
            self._registry.add(image)
            try:
                for dev in self._devices:
                    if self.accepts(dev.plugin, image):
                        dev.load_registered(image)
            except BaseException:
                self._registry.remove(image)
                for dev in self._devices:
                    dev.unload_registered(image)
                raise

    def unregister_image(self, image: OffloadImage) -> None:
        """Unregister (``__tgt_unregister_lib`` / ``GOMP_offload_unregister_ver``):
        unload from every initialised device, remove its host->target
        mappings, drop it from the pending list.  Raises
        ImageNotRegisteredError."""
        with self._lock:
            self._check_open()
            if not self._registry.remove(image):
                raise ImageNotRegisteredError(f"image {image.name!r} is not registered")
            errors = []
            for dev in self._devices or []:
                try:
                    dev.unload_registered(image)
                except OffloadError as exc:
                    errors.append(exc)
            if errors:
                raise errors[0]

    @property
    def images(self) -> list[OffloadImage]:
        """Registered images, in registration order."""
        return self._registry.snapshot()

    def pending(self, device: Device) -> list[OffloadImage]:
        """Images registered for ``device``'s plugin but not loaded in it."""
        if device.state is DeviceState.READY:
            loaded = {img.id for img in device.loaded_images}
            return [i for i in self.accepted_images(device.plugin) if i.id not in loaded]
        if device.state is DeviceState.CLOSED:
            return []
        return self.accepted_images(device.plugin)

    # -- teardown ---------------------------------------------------------------------
    def _attach_user(self, name: str, user) -> None:
        """``user`` (with a ``close()``) routes work to this runtime until
        :meth:`_detach_user`: :meth:`close` refuses meanwhile (RuntimeInUseError), the
        exit hook closes it first.  ``name`` says what it is in the error."""
        with self._lock:
            self._check_open()
            self._users.append((name, user))

    def _detach_user(self, user) -> None:
        with self._lock:
            self._users = [(n, u) for n, u in self._users if u is not user]

    def _close_users(self) -> None:
        """The exit hook: close what still routes work here, newest first, so that the
        runtime's own close is not refused (a ``with interpose(rt)`` block left open at
        exit: a generator suspended inside it, a thread)."""
        for _name, user in reversed(list(self._users)):
            try:
                user.close()
            except Exception as exc:  # noqa: BLE001 - at exit; close() reports the rest
                log.warning("offload_shim: error while closing %s at exit: %s", _name, exc)

    def _refuse_if_used(self) -> None:
        """RuntimeInUseError while a user (:meth:`_attach_user`) routes work here
        (lock held)."""
        if self._users and not self._closed:
            name = self._users[-1][0]
            raise RuntimeInUseError(
                f"{self!r} is in use by {name}: leave the `with interpose(rt)` "
                "block (Interposer.close()) before closing the runtime", user=name)

    def close(self) -> dict[str, tuple[int, int]]:
        """Tear down in order (D120089, D130712): per initialised device drain the pool
        (allocations still held are reported and freed), unload images,
        ``deinit_device``; then ``deinit_plugin`` of plugins no other runtime
        still uses.  Idempotent.  Returns ``{device label: (leaked count,
        bytes)}`` for devices that had allocations still held.  Errors from
        plugins are collected; teardown completes, then the first is raised.

        Refused with ExportedMemoryError (a LifecycleError), before anything is torn
        down, while exported views of device arrays are live (DLPack, NumPy views,
        ``__cuda_array_interface__`` readers: :mod:`offload_shim.core.array`): the
        drain would free memory under them.  Views that only a reference cycle keeps
        are collected first (``gc.collect``).

        Refused with RuntimeInUseError (a LifecycleError), before anything is torn
        down, while an :func:`~offload_shim.interpose` of this runtime is active: compiled
        code's next target region would find its devices gone (the plugin reports
        the device not ready, and libomptarget 16's ``handleTargetOutcome`` aborts the
        process).  Leave the ``with interpose(rt)`` block first."""
        with self._lock:
            self._refuse_if_used()
        if any(d.exported_views for d in self._devices or ()):
            import gc
            gc.collect()
        with self._lock:
            if self._closed:
                return {}
            # again under the lock the teardown holds: another thread's interpose(rt)
            # may have attached since the look above
            self._refuse_if_used()
            devices = list(self._devices or ())
            try:
                # no export begins from here on; one in flight is waited for and counted
                for dev in devices:
                    dev._freeze_exports(True)
                for dev in devices:
                    dev._refuse_if_viewed()
            except BaseException:
                for dev in devices:
                    dev._freeze_exports(False)
                raise
            self._closed = True
            leaks: dict[str, tuple[int, int]] = {}
            errors: list[Exception] = []
            for dev in reversed(self._devices or []):
                try:
                    n, nbytes = dev.shutdown()
                    if n:
                        leaks[dev.label] = (n, nbytes)
                except OffloadError as exc:
                    errors.append(exc)
            self._pinned.close()
            for p in reversed(self._acquired):
                try:
                    p.release()
                except OffloadError as exc:
                    errors.append(exc)
            self._acquired.clear()
            _LIVE.discard(self)
            if any(p.leaves_image_copies for p in self._plugins):
                # the LLVM x86_64 plugins' /tmp/tmpfile_* image copies (the plugin
                # layer unlinks each after its load; this catches any it missed): the
                # ones this process has mapped, from /proc/self/maps -- not a listing
                # of /tmp, which holds every other run's copies (thousands on a busy
                # machine: a stat of each cost a tenth of a second per run)
                leftovers.unlink_mapped_copies()
            if errors:
                raise errors[0]
            return leaks


class _PinnedSlot:
    """A runtime's :class:`~offload_shim.memory.pinned.PinnedRegistry`, built on first
    use: at once under the ``"mapped"`` and ``"all"`` policies, under ``"none"`` when
    something pins (:attr:`Runtime.pinned_memory`) -- until then the hooks a Device
    calls have nothing to undo, and :mod:`offload_shim.memory.pinned` is not imported
    (start-up of ``offload-shim run``).  ``policy``, ``on_map``, ``on_unmap``,
    ``on_device_teardown``, ``lock_all`` and ``close`` are the registry's."""

    __slots__ = ("policy", "_runtime", "_reg", "_lock", "_closed")

    def __init__(self, runtime, policy: str):
        self.policy = policy
        self._runtime = runtime
        self._reg = None
        self._lock = threading.Lock()
        self._closed = False
        if policy != "none":
            self.registry()

    def registry(self):
        """The registry, built now when it is not yet (closed at once when the runtime
        is: its methods then raise LifecycleError, as the registry of a closed runtime
        does)."""
        reg = self._reg
        if reg is None:
            with self._lock:
                reg = self._reg
                if reg is None:
                    from ..memory.pinned import PinnedRegistry
                    reg = PinnedRegistry(self._runtime, policy=self.policy)
                    if self._closed:
                        reg.close()
                    self._reg = reg
        return reg

    def on_map(self, device, tgt: int, host, addr: int, n: int) -> None:
        self.registry().on_map(device, tgt, host, addr, n)

    def on_unmap(self, device, tgt: int) -> None:
        reg = self._reg
        if reg is not None:
            reg.on_unmap(device, tgt)

    def on_device_teardown(self, device) -> None:
        reg = self._reg
        if reg is not None:
            reg.on_device_teardown(device)

    def lock_all(self) -> bool:
        return self.registry().lock_all()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            reg = self._reg
        if reg is not None:
            reg.close()


class DeviceList(list):
    """The devices of a runtime: a plain list, but an index it does not
    have raises DeviceNotFoundError ("no device 999: this runtime has 3
    devices (0..2)") instead of a bare IndexError."""

    def __init__(self, items=(), what: str = ""):
        super().__init__(items)
        self._what = what

    def __getitem__(self, index):
        try:
            return super().__getitem__(index)
        except IndexError:
            n = len(self)
            have = f"{n} device{'s' if n != 1 else ''}" + (f" (0..{n - 1})" if n else "")
            where = f" {self._what}" if self._what else ""
            raise DeviceNotFoundError(f"no device {index}{where}: this runtime has {have}",
                                      index=index, count=n) from None
        except TypeError:
            raise TypeError(f"device index must be an int or a slice, not "
                            f"{type(index).__name__}") from None


def check_environment() -> None:
    """Read the configuration variables a runtime reads later (when it is
    created or a device initialises) and raise ``ValueError`` naming the
    variable and its value for a bad one: ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD``
    and ``OFFLOAD_SHIM_POOL_DEBUG`` (:class:`~offload_shim.memory.MemoryManager`),
    ``OFFLOAD_SHIM_PINNED`` (:func:`offload_shim.memory.config.resolve_pin_policy`),
    ``OFFLOAD_SHIM_NATIVE_DIR`` when set (it must hold the bundled plugin:
    :func:`offload_shim.abi.native.bundled_native_dir`; otherwise
    every command would go on without the bundled plugin and report "no
    plugin with a device"), and ``OFFLOAD_SHIM_PLUGINS`` (each entry must exist:
    :func:`offload_shim.plugins.discovery.check_env_paths`).  Front ends call it
    before starting any work, so a bad setting is a configuration error, not a
    failure of the plugin."""
    from ..memory.config import read_threshold_env, resolve_debug, resolve_pin_policy
    read_threshold_env()
    resolve_debug(None)
    resolve_pin_policy(None)
    discovery.check_env_paths()
    check_native_dir()


def check_native_dir() -> None:
    """Raise ``ValueError`` naming the variable when ``OFFLOAD_SHIM_NATIVE_DIR`` is set
    and does not hold the bundled plugin (:func:`offload_shim.abi.native.native_dir`):
    an explicit setting that points nowhere is a mistake to report, not a reason to go
    on without the bundled plugin."""
    import os
    native = os.environ.get("OFFLOAD_SHIM_NATIVE_DIR")
    if native:
        from ..abi.native import PLUGIN_FILENAME
        if not os.path.isfile(os.path.join(native, PLUGIN_FILENAME)):
            raise ValueError(f"OFFLOAD_SHIM_NATIVE_DIR={native!r}: no {PLUGIN_FILENAME} "
                             f"there (the folder of the bundled native libraries; unset it "
                             f"to use the installed ones)")


def _plugin_labels(plugins) -> list[str]:
    """The name each plugin's devices are labelled with (``<name>:<index>``): its
    ``name``, or, when another plugin of the runtime has the same name (the LLVM 14
    and LLVM 16 classic x86_64 plugins are both ``x86_64``), ``name[generation]``,
    then ``#k`` for plugins still alike.  Labels key ``close()``'s leak report and
    every message: two devices may not share one."""
    from collections import Counter
    count = Counter(p.name for p in plugins)
    first = [p.name if count[p.name] == 1 else f"{p.name}[{p.generation}]" for p in plugins]
    again = Counter(first)
    seen: Counter = Counter()
    out = []
    for name in first:
        seen[name] += 1
        out.append(name if again[name] == 1 else f"{name}#{seen[name]}")
    return out


#: MemoryManager options every device sets itself (refused in ``pool=``)
_DEVICE_SET_POOL_OPTIONS = frozenset({"device_label", "poison", "strict", "guard",
                                      "backend_key"})


def _check_pool_options(options: dict) -> None:
    """Refuse bad ``pool=`` options now, not at each device's first use:
    build (and drain) a throwaway MemoryManager with them.  Raises TypeError
    (unknown keyword) or ValueError (bad value), as MemoryManager does."""
    from ..memory import MemoryManager
    reserved = _DEVICE_SET_POOL_OPTIONS & set(options)
    if reserved:
        raise TypeError(f"pool options {sorted(reserved)} are set by the device itself")
    log = options.get("event_log")
    if log is not None and not (isinstance(log, (str, bytes)) or hasattr(log, "__fspath__")
                                or hasattr(log, "write")):
        raise TypeError(f"pool option event_log must be a path or a text file, not "
                        f"{type(log).__name__}")
    if log is not None and not hasattr(log, "write"):
        import os
        parent = os.path.dirname(os.path.abspath(os.fsdecode(log))) or "."
        if not os.path.isdir(parent):
            raise FileNotFoundError(f"pool option event_log: no directory {parent!r}")
    checked = {k: v for k, v in options.items() if k != "event_log"}  # would open a file
    # the environment (OFFLOAD_SHIM_POOL_DEBUG, LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD)
    # is read when a device initialises, not here
    checked.setdefault("debug", "")
    checked.setdefault("threshold", 8192)
    bad = [k for k in checked if not isinstance(k, str)]
    if bad:
        raise TypeError(f"pool option names must be str, not {bad[0]!r}")
    try:
        mm = MemoryManager(lambda size: 0, lambda ptr: None, poison=lambda p, n: None,
                           **checked)
    except TypeError as exc:
        if "unexpected keyword argument" not in str(exc):
            raise
        import inspect
        known = sorted(n for n in inspect.signature(MemoryManager).parameters
                       if n not in _DEVICE_SET_POOL_OPTIONS | {"backend_alloc",
                                                               "backend_free"})
        unknown = sorted(set(checked) - set(known))
        raise TypeError(f"unknown pool option(s) {unknown} (options: "
                        f"{', '.join(known)})") from None
    mm.drain()


def _is_bundled_path(item) -> bool:
    import os
    return os.path.basename(str(item)) == "libosh_hostplugin.so"
