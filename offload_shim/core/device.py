"""One device of one plugin, as a runtime sees it: its lifecycle, in-flight accounting
and launches -- libomptarget's ``DeviceTy`` (``openmp/libomptarget/src/device.cpp``,
LLVM 16: ``initOnce``, ``deinit``, ``launchKernel``) over the nextgen plugins'
``GenericDeviceTy`` (``PluginInterface.cpp``: ``init``, ``deinit``).  The rest of
:class:`Device` lives in rooms of its own, mixed in: :mod:`.device_memory`
(allocation, frees, device arrays, ``submit``/``retrieve``), :mod:`.device_images`
(loaded images, kernels, globals, the address map) and :mod:`.compiled` (the forms
only the interposer needs).

State machine (LLVM DeviceTy::initOnce, LLVM D120089)::

    UNINIT --first use / init()--> READY --deinit()--> UNINIT
       |                             |
       +--init_device failed--> FAILED (sticky, like LLVM's call_once)
    any --runtime close()--> CLOSED (every later call raises LifecycleError)

* Lazy init exactly once, also when many threads touch the device first at
  the same time (LLVM ``DeviceTy::initOnce``; llvm-project #49284).  Init loads every
  registered image the plugin accepts (the pending list, libgomp GOMP_offload_register_ver).
* Every data/launch call checks the state in Python first: a call before init
  initialises, a call after close raises :class:`LifecycleError` and never
  reaches the plugin (real plugins segfault there, docs/references.md, plugin contracts).
* Frees and copies of pointers this device did not hand out raise
  :class:`UnknownPointerError` before the plugin sees them.
* Allocation goes through the device's memory manager (LLVM D81054); the pool
  is drained before ``deinit_device`` (LLVM GenericDeviceTy::deinit).  A cache hit or a cached
  free calls no plugin and takes no in-flight token: the pool's lock orders
  it against the drain.  The pool's paths that call the plugin run inside
  the in-flight guard (:class:`_PluginCallGuard`).

What the device needs from its owner (the :class:`~offload_shim.Runtime`)
comes in as collaborators at construction: the pool options, the images to
load at init, the owner's open check and the pinning hooks.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence

from ..errors import (DeviceInitError, KernelNotFoundError, LifecycleError, OffloadError,
                     OutOfDeviceMemoryError)
from .compiled import CompiledCodeForms, DeviceLease, KernelLauncher
from .device_state import OWN_LAUNCHES as _OWN_LAUNCHES, READY as _READY, DeviceState
from .device_images import DeviceImages, _LoadedOnDevice
from .device_memory import DeviceMemory
from .images import AddressMap, OffloadImage

from ..lazylog import log  # logging.getLogger("offload_shim"), imported on first use



#: callables ``hook(device)`` run when a device is torn down (deinit, shutdown), after
#: its calls in flight finished and before its memory is freed: code outside the
#: Python layer that copies into a device's memory stops there (the interposer's
#: repeat path, offload_shim/interposer/llvm/repeat.py).  ``list.append`` / ``remove``.
TEARDOWN_HOOKS: list = []


def _pointer_args(args, what: str = "argument") -> list[int]:
    """Kernel arguments (or offsets) as pointer-sized ints (device addresses
    or scalars).  TypeError for non-ints, ValueError beyond 64 bits."""
    out = []
    for i, a in enumerate(args):
        if isinstance(a, bool) or not isinstance(a, int):
            raise TypeError(f"kernel {what} {i} must be an int (device address or "
                            f"integer scalar), not {type(a).__name__}")
        if not -(1 << 63) <= a < (1 << 64):
            raise ValueError(f"kernel {what} {i} = {a} does not fit in 64 bits")
        out.append(int(a))
    return out


def _no_images() -> list:
    return []


def _always_open() -> None:
    return None




class _PluginCallGuard:
    """The in-flight guard around the pool's paths that call the plugin
    (misses, bypassed frees, releases, poisoning): entering takes a token
    without initialising the device and raises LifecycleError when the
    device is not ready, so a deinit waits for those paths and they never
    reach a deinitialised device.  Reusable by any number of threads."""

    __slots__ = ("_device",)

    def __init__(self, device):
        self._device = device

    def __enter__(self):
        self._device._hold()

    def __exit__(self, *exc):
        self._device._exit()


class Device(DeviceMemory, DeviceImages, CompiledCodeForms):
    """A device of a plugin.  Created by :class:`~offload_shim.Runtime`; do not
    construct directly.

    ``label``: ``"<plugin>:<index>"``; ``index``: the plugin-local device id;
    ``plugin``: the :class:`~offload_shim.plugins.plugin.Plugin`.

    Collaborators (keyword arguments, given by the owner):

    * ``pool_options``: keyword options of the device's
      :class:`~offload_shim.memory.MemoryManager` (checked by the owner).
    * ``images() -> list[OffloadImage]``: the registered images this
      device's plugin accepts, in registration order; loaded at every init
      (the pending list, libgomp GOMP_offload_register_ver).
    * ``check_open()``: raises LifecycleError once the owner is closed.
    * ``pinned``: the owner's :class:`~offload_shim.memory.pinned.PinnedRegistry`
      (or None): told of every first copy of a host range and of every free
      when its policy is ``"mapped"`` (gcc-patches -foffload-memory=pinned), and of the teardown.

    Two faces.  The Python API: here the lifecycle and launches (``state``,
    ``initialized``, ``init``, ``deinit``, ``in_use``, ``exported_views``, ``launch``);
    in :class:`~.device_memory.DeviceMemory` memory and copies (``pool``, ``alloc``,
    ``free``, ``allocations``, ``empty``, ``asarray``, ``submit``, ``retrieve``); in
    :class:`~.device_images.DeviceImages` the images (``kernels``, ``loaded_images``,
    ``global_address``, ``translate``, ``address_map``); ``shutdown``,
    ``load_registered`` and ``unload_registered`` are the owner's.  The forms compiled
    code needs, for the interposer (:mod:`offload_shim.interposer`) only, are
    :class:`~.compiled.CompiledCodeForms` (``core/compiled.py``, whose docstring has
    the table): ``submit_raw``/``retrieve_raw`` (a range anywhere in a block, searched),
    ``submit_in``/``retrieve_in`` (a range in a known block: the mapping table's rows),
    ``alloc_many``/``free_many``, ``submit_many``/``retrieve_many``, ``lease``,
    ``kernel_launcher``; and here ``launch_entry`` and ``calls_in_flight``.
    """

    def __init__(self, plugin, index: int, *, pool_options: dict | None = None,
                 images: Callable[[], list] = _no_images,
                 check_open: Callable[[], None] = _always_open, pinned=None,
                 label: str | None = None):
        self.plugin = plugin
        self.index = index
        # ``<plugin name>:<index>``; a runtime passes ``label`` when two of its plugins
        # share a name (Runtime._plugin_labels)
        self.label = label or f"{plugin.name}:{index}"
        self._images_to_load = images
        self._check_open = check_open
        self._pinned = pinned
        self._pin_mapped_policy = pinned is not None and pinned.policy == "mapped"
        self._state = DeviceState.UNINIT
        self._init_error: DeviceInitError | None = None
        self._life = threading.RLock()            # lifecycle transitions
        # in-flight accounting: one token per call in flight, pushed and
        # popped with list.append/list.pop, which are atomic under the GIL,
        # so no lock is taken.  Enter pushes, then checks the state;
        # teardown sets the state (under _flight), then waits for no tokens:
        # a call either sees the new state and backs off, or its token is
        # seen by the teardown, which waits for it.  The condition is only
        # notified when _wait_idle is waiting.
        self._flight_lock = threading.Lock()
        self._flight = threading.Condition(self._flight_lock)
        self._tokens: list = []
        self._idle_waiters = 0
        self._plugin_calls = _PluginCallGuard(self)
        self._images: dict[int, _LoadedOnDevice] = {}
        self._kernels: dict[str, list[tuple[int, int | None, OffloadImage]]] = {}
        # launches in flight per image id; an unload waits for them (a kernel of an
        # image being unloaded must not run, and on GOMP plugins would run unloaded code)
        self._launch_cv = threading.Condition(threading.Lock())
        self._launching: dict[int, int] = {}
        self._unload_waiting = 0                    # unloads waiting on _launch_cv
        self._globals: dict[int, int] = {}          # tgt addr -> size
        self.address_map = AddressMap()
        # the live allocations are the pool's pointer table (no copy here)
        self._pool_options = dict(pool_options or {})
        self._pool = None
        # the pool while the state is READY, None otherwise and under the pinning policy
        # "mapped": alloc/free's one test before their inline hit path (device_memory.py)
        self._hit_pool = None
        self._closing = False                       # the owner's shutdown() has begun
        # live exports of this device's arrays (offload_shim.core.array: DLPack capsules
        # not yet ended, arrays whose __cuda_array_interface__ was read); a teardown
        # refuses while any is live.  Written by that module under its lock.
        self._views_exported = 0
        self._exports_frozen = False                # the owner's close is checking them
        # {address: block} of the live blocks of this device's arrays (same module): a
        # plain free() of one is refused (the array, and any view of it, would dangle)
        self._array_blocks: dict = {}
        self.init_count = 0                         # how often this device was initialised

    # -- state -----------------------------------------------------------------
    @property
    def state(self) -> DeviceState:
        return self._state

    @property
    def initialized(self) -> bool:
        return self._state is DeviceState.READY

    @property
    def calls_in_flight(self) -> int:
        """How many calls into the plugin for this device are running now (copies,
        launches, allocations, any thread).  :meth:`deinit` and :meth:`shutdown` wait
        for them; a teardown at process exit that must not wait (the exit may come
        from inside a kernel) asks first."""
        return len(self._tokens)

    def __repr__(self) -> str:
        return f"<Device {self.label} {self._state.value}>"

    def _enter(self) -> None:
        """Lazy init + in-flight accounting (close waits for calls in flight)."""
        if self._state is not _READY:
            self._ready()
        self._tokens.append(None)
        if self._state is not _READY:
            self._lost_race()

    def _hold(self) -> None:
        """In-flight accounting without lazy init: LifecycleError unless ready."""
        self._tokens.append(None)
        if self._state is not _READY:
            self._lost_race()

    def _lost_race(self):
        """A token was pushed but the device is not ready (a deinit/close
        began, or it was never initialised)."""
        self._exit()
        if self._state is DeviceState.CLOSED:
            raise LifecycleError(f"{self.label}: device used after close", device=self.label)
        raise LifecycleError(f"{self.label}: device deinitialised during the call",
                             device=self.label)

    def _exit(self) -> None:
        tokens = self._tokens
        tokens.pop()
        if not tokens and self._idle_waiters:
            with self._flight:
                self._flight.notify_all()

    def _wait_idle(self) -> None:
        with self._flight:
            self._idle_waiters += 1
            try:
                while self._tokens:
                    self._flight.wait(0.1)      # the timeout is only a safety net
            finally:
                self._idle_waiters -= 1

    @contextlib.contextmanager
    def in_use(self):
        """``with device.in_use():`` the device is initialised (lazily) and
        stays so until the block ends: deinit and close wait for the block,
        like for a copy in flight.  Raises DeviceInitError, LifecycleError."""
        self._enter()
        try:
            yield self
        finally:
            self._exit()

    def init(self) -> None:
        """Initialise now (explicit init; otherwise first use does it).
        Idempotent.  Raises DeviceInitError, LifecycleError after close,
        ValueError for a bad ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD`` or
        ``OFFLOAD_SHIM_POOL_DEBUG`` (checked before the plugin can read them)
        and for a debug mode the plugin's own cache would defeat
        (:mod:`offload_shim.memory.plugin_cache`)."""
        self._ready()

    def _ready(self) -> None:
        with self._life:
            st = self._state
            if st is DeviceState.READY:
                return
            if st is DeviceState.CLOSED:
                raise LifecycleError(f"{self.label}: device used after close", device=self.label)
            if st is DeviceState.FAILED:
                raise DeviceInitError(f"{self.label}: device initialisation failed earlier: "
                                      f"{self._init_error}", device=self.label)
            self._check_open()
            from ..memory import MemoryManager, plugin_cache, read_threshold_env
            from ..memory.config import resolve_debug
            options = dict(self._pool_options)
            # the environment is read here, before init_device: the LLVM nextgen
            # plugins read the threshold there with std::stoul, which aborts on garbage
            env_threshold = read_threshold_env()
            options.setdefault("threshold", env_threshold)
            options["debug"] = mode = resolve_debug(options.get("debug")) or ""
            try:
                plugin_cache.acquire_device(self.plugin, self.index, mode or None)
            except DeviceInitError as exc:
                self._state = DeviceState.FAILED
                self._init_error = exc
                raise
            self.init_count += 1
            try:
                self._pool = MemoryManager(
                    self._backend_alloc, self._backend_free, device_label=self.label,
                    poison=self._poison, strict=True, guard=self._plugin_calls,
                    backend_key=(self.plugin, self.index), **options)
                for image in self._images_to_load():
                    self._load(image)
            except BaseException:
                # leave nothing half set up: unload what was loaded, release the device
                for rec in list(self._images.values()):
                    self._unload(rec.image, quiet=True)
                if self._pool is not None:
                    self._pool.drain()
                self._pool = None
                self.plugin.release_device(self.index)
                raise
            self._state = DeviceState.READY
            self._hit_pool = None if self._pin_mapped_policy else self._pool
            log.debug("%s: initialised (%d images loaded)", self.label, len(self._images))

    def deinit(self) -> tuple[int, int]:
        """Explicit deinit (LLVM D120089): drain the pool (every cached block and
        every allocation still held is freed through the plugin, LLVM
        GenericDeviceTy::deinit), unload
        the images, ``deinit_device``.  The device can be used again (it
        re-initialises on next use).  Returns (leaked allocation count, bytes).
        Raises LifecycleError if not initialised, ExportedMemoryError (a
        LifecycleError; nothing torn down) while exported views of the device's
        arrays are live (:attr:`exported_views`; views only a reference cycle keeps
        are collected first)."""
        if self._views_exported:
            import gc
            gc.collect()
        with self._life:
            if self._state is not DeviceState.READY:
                raise LifecycleError(f"{self.label}: deinit of a device that is not "
                                     f"initialised ({self._state.value})", device=self.label)
            return self._teardown(DeviceState.UNINIT)

    def shutdown(self) -> tuple[int, int]:
        """The owner's final teardown (``Runtime.close``): like :meth:`deinit`
        when initialised; then every later call raises LifecycleError.
        Idempotent.  Returns (leaked allocation count, bytes)."""
        self._closing = True        # a free racing the teardown is a free after close
        with self._life:
            if self._state is DeviceState.READY:
                return self._teardown(DeviceState.CLOSED)
            self._state = DeviceState.CLOSED
            return (0, 0)

    @property
    def exported_views(self) -> int:
        """Live exports of this device's arrays (:mod:`offload_shim.core.array`:
        DLPack capsules and the arrays made from them, NumPy views, arrays whose
        ``__cuda_array_interface__`` was read); :meth:`deinit` and the owner's close
        refuse while it is not 0."""
        return self._views_exported

    def _freeze_exports(self, frozen: bool) -> None:
        """The owner's close, before it tears anything down: ``True`` makes new exports
        of this device's arrays raise LifecycleError and waits for the calls in flight
        (an export books itself inside one), so :attr:`exported_views` is final;
        ``False`` (the close refused) allows them again."""
        self._exports_frozen = frozen
        # an export in flight belongs to a live array, whose block is in _array_blocks
        # from its creation on: with none, there is nothing to wait for -- and waiting
        # for every call in flight would never end while other threads keep allocating
        # (the device is still READY here: nothing refuses their calls yet)
        if frozen and (self._array_blocks or self._views_exported):
            self._wait_idle()

    def _refuse_if_viewed(self) -> None:
        n = self._views_exported
        if n:
            from ..errors import ExportedMemoryError
            raise ExportedMemoryError(
                f"{self.label}: {n} exported view(s) of device arrays still hold device "
                f"memory (DLPack/NumPy views, __cuda_array_interface__ readers); the "
                f"teardown would free it under them -- drop the views first",
                device=self.label, views=n)

    def _teardown(self, final: DeviceState) -> tuple[int, int]:
        with self._flight:
            self._hit_pool = None
            self._state = DeviceState.UNINIT  # refuse new calls
        self._wait_idle()
        for hook in list(TEARDOWN_HOOKS):
            hook(self)
        if self._views_exported:
            # an export books itself while holding the device, so none begins now;
            # nothing was torn down yet: the device stays as it was
            with self._flight:
                self._state = DeviceState.READY
                self._hit_pool = None if self._pin_mapped_policy else self._pool
            self._closing = False
            self._refuse_if_viewed()
        if self._pinned is not None:
            self._pinned.on_device_teardown(self)   # unpin before deinit_device
        errors = []
        leaked = (0, 0)
        try:
            leaked = self._pool.drain()
            self._array_blocks.clear()          # the drain freed them; their arrays know
        except OffloadError as exc:
            errors.append(exc)
        if leaked[0]:
            # INFO, not WARNING: no runtime prints a line for it (libomptarget frees what
            # a program never freed without a word: its memory manager's destructor, the
            # plugins' deinit), so it must not reach the stderr of a program under
            # `offload-shim run`; the count is the return value (Runtime.close(), the
            # report's "leaks").  docs/usage.md, "Allocations still held at teardown".
            log.info("%s: %d allocation(s), %d bytes still held at deinit; freed "
                     "before deinit_device", self.label, leaked[0], leaked[1])
        for image_id in list(self._images):
            try:
                self._unload(self._images[image_id].image)
            except OffloadError as exc:
                errors.append(exc)
        try:
            self.plugin.release_device(self.index)
        except OffloadError as exc:
            errors.append(exc)
        self._state = final
        if errors:
            raise errors[0]
        return leaked

    # -- launch ------------------------------------------------------------------
    def launch(self, kernel: str, args: Sequence[int], *, image: OffloadImage | None = None,
               offsets: Sequence[int] | None = None) -> None:
        """Run kernel ``kernel`` synchronously with pointer-sized ``args``
        (device pointers or integer scalars; argument i = args[i] +
        offsets[i], LLVM ``TgtArgs``/``TgtOffsets``).  Raises
        KernelNotFoundError, ValueError (wrong arity when the image declares
        it, ambiguous name across images, a value outside 64 bits), TypeError
        (a non-integer argument), LifecycleError, PluginCallError."""
        args = _pointer_args(args)
        if offsets is not None and len(offsets) != len(args):
            raise ValueError("offsets must have one entry per argument")
        if offsets is not None:
            offsets = _pointer_args(offsets, "offset")
        self._enter()
        try:
            with self._launch_cv:
                cands = self._kernels.get(kernel, [])
                if image is not None:
                    if image.id not in self._images:
                        raise KernelNotFoundError(
                            f"{self.label}: image {image.name!r} is not loaded on this "
                            f"device (not registered with its runtime, or unregistered)",
                            device=self.label)
                    cands = [c for c in cands if c[2] is image]
                    if not cands:
                        own = [e.name for e in image.entries if e.is_kernel]
                        raise KernelNotFoundError(
                            f"{self.label}: image {image.name!r} has no kernel {kernel!r} "
                            f"(its kernels: {', '.join(own) or 'none'})", device=self.label)
                if not cands:
                    raise KernelNotFoundError(
                        f"{self.label}: no loaded image has a kernel {kernel!r} "
                        f"(kernels: {', '.join(self.kernels) or 'none'})", device=self.label)
                if len(cands) > 1:
                    raise ValueError(f"{self.label}: kernel {kernel!r} is in several images; "
                                     "pass image=")
                entry, nargs, img = cands[0]
                if nargs is not None and nargs != len(args):
                    raise ValueError(f"{self.label}: kernel {kernel!r} takes {nargs} "
                                     f"arguments, got {len(args)}")
                self._launching[img.id] = self._launching.get(img.id, 0) + 1
            self._launch_held(img.id, entry, args, offsets)
        finally:
            self._exit()

    def _launch_held(self, image_id: int, entry: int, args, offsets) -> None:
        """Launch with a hold on the image (taken by the caller); an unload of
        that image waits until the hold is released."""
        mine = _OWN_LAUNCHES.__dict__
        mine[image_id] = mine.get(image_id, 0) + 1
        try:
            self.plugin.launch(self.index, entry, args, offsets)
        finally:
            mine[image_id] -= 1
            with self._launch_cv:
                n = self._launching[image_id] - 1
                if n:
                    self._launching[image_id] = n
                else:
                    del self._launching[image_id]
                    self._launch_cv.notify_all()

    def launch_entry(self, entry: int, args: Sequence[int],
                     offsets: Sequence[int] | None = None) -> None:
        """Launch the kernel whose *target table* address is ``entry`` (e.g.
        ``translate(host_region_id)``) with pointer-sized ``args``; argument i
        = args[i] + offsets[i] (libomptarget ``TgtArgs``/``TgtOffsets``).
        Raises KernelNotFoundError when ``entry`` is not a kernel of a loaded
        image (TypeError when it is not an int), TypeError/ValueError for
        arguments that are not 64-bit ints,
        LifecycleError, PluginCallError."""
        args = _pointer_args(args)
        if offsets is not None:
            if len(offsets) != len(args):
                raise ValueError("offsets must have one entry per argument")
            offsets = _pointer_args(offsets, "offset")
        self._enter()
        try:
            with self._launch_cv:
                img = self._kernel_image_locked(entry)
                self._launching[img.id] = self._launching.get(img.id, 0) + 1
            self._launch_held(img.id, entry, args, offsets)
        finally:
            self._exit()


__all__ = ["Device", "DeviceLease", "DeviceState", "KernelLauncher", "OutOfDeviceMemoryError"]
