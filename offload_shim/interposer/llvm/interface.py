"""libomptarget's host entry points over a Python :class:`~offload_shim.Runtime`.

Mirrors libomptarget 16 ``interface.cpp``: the entry points compiled code calls
(``__tgt_register_requires``, ``__tgt_register_lib``, ``__tgt_unregister_lib``,
``__tgt_target_kernel``, ``__tgt_target_data_{begin,end,update}[_nowait]_mapper``),
each checking its device (``checkDeviceAndCtors``), printing its arguments under
``LIBOMPTARGET_INFO`` bit 1 (``printKernelArguments``) and ending with
``handleTargetOutcome``; and the lifetime of the runtime in the process, libomptarget's
own constructor and destructor (``rtl.cpp`` ``init`` / ``deinit``: :func:`interpose`
installs the callbacks and registers the libraries whose registration came first, as
``init`` does from 17 on with ``PluginManager::registerDelayedLibraries``;
:meth:`Interposer.close` tears everything down).

:class:`Interposer` installs the callbacks of the C bridge (:mod:`..bridge`) and
dispatches each to the module that mirrors the libomptarget source doing the work:
registration, the device list and ``initLibrary`` (:mod:`.plugin_manager`, over
:mod:`.rtl`), ``OMP_TARGET_OFFLOAD``, ``checkDeviceAndCtors`` and
``handleTargetOutcome`` (:mod:`.policy`), the mapping table (:mod:`.mapping`), data
directives (:mod:`.omptarget`), the launch (:mod:`.launch`), the cheap path
(:mod:`.plan`), the API routines (:mod:`.api`) and the GCC side (:mod:`..gomp`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

from ...abi import clang as _clang
from ...abi import interposer as _abi
from ...abi.interposer import CB_FAIL, CB_OK
from ...errors import LifecycleError, OffloadError, UnknownLayoutError
from . import api, diag, launch, omptarget
from ..bridge import Bridge, guard, guarded_failure
from ..gomp.lazy import LazyGompSide
from ..library import LoadedLibrary, open_library
from .mapping import TGT_DEFAULT, TGT_DISABLED, TGT_MANDATORY, MapEntry, MapError
from .plan import FastPath
from .plugin_manager import PluginManager
from .policy import OFFLOAD_DEVICE_DEFAULT, OffloadPolicy
from .profile import RuntimeProfile

#: ``KernelArgsTy::Flags`` bit 1, ``IsCUDA`` (LLVM 20+ omptarget.h): a kernel-language
#: launch whose arguments are one packed buffer
KERNEL_FLAG_IS_CUDA = 0x2
DATA_NOWAIT = _abi.DATA_NOWAIT


class _ErrorLog(list):
    """The interposer's error messages; echoed to stderr as ``offload_shim: ...`` when
    ``OFFLOAD_SHIM_DEBUG`` is set (libomptarget's own lines are printed regardless)."""

    def append(self, msg) -> None:
        super().append(msg)
        if os.environ.get("OFFLOAD_SHIM_DEBUG"):
            import sys
            sys.stderr.write(f"offload_shim: {msg}\n")
            sys.stderr.flush()


_active: "Interposer | None" = None
_active_lock = threading.Lock()


def _no_alloc(size, dev_id, kind, out) -> int:
    """``target_alloc`` after :meth:`Interposer.close`: NULL."""
    out[0] = None
    return CB_OK


def _closed_construct(addr: int) -> int:
    """The ``construct`` callback after :meth:`Interposer.close`: a kernel runs on
    the host (CB_FAIL), a data construct does nothing."""
    kind = _abi.frame_view(addr)[_abi.FRAME_KIND]
    return CB_FAIL if kind == _abi.FRAME_KERNEL else CB_OK


def _print_arguments(loc: int, dev: int, m: _abi.MapArgs, region: str,
                     profile: RuntimeProfile) -> None:
    """``printKernelArguments`` (INFO bit 1): ``region`` and one line per argument
    with its map kind (``attach`` for an ``ATTACH`` map where the release names it,
    ``RuntimeProfile.attach_kind``)."""
    si = diag.SourceInfo.of_loc(loc)
    diag.info(diag.INFO_ALL, dev, f"{region} at {si.filename}:{si.line}:{si.column} with "
                                  f"{m.n} arguments:")
    for i in range(m.n):
        t, size = m.types[i], m.sizes[i]
        if profile.attach_kind and t & omptarget.MAP_ATTACH:
            kind = "attach"
        elif t & omptarget.MAP_TO and t & omptarget.MAP_FROM:
            kind = "tofrom"
        elif t & omptarget.MAP_TO:
            kind = "to"
        elif t & omptarget.MAP_FROM:
            kind = "from"
        elif t & omptarget.MAP_PRIVATE:
            kind = "private"
        elif t & omptarget.MAP_LITERAL:
            kind = "firstprivate"
        elif size != 0:
            kind = "alloc"
        else:
            kind = "use_address"
        implicit = "(implicit)" if t & omptarget.MAP_IMPLICIT else ""
        name = diag.name_of(m.names[i] if m.names else 0)
        diag.info(diag.INFO_ALL, dev, f"{kind}({name})[{size}] {implicit}")


class Interposer(PluginManager, OffloadPolicy):
    """libomptarget's host side for compiled code, over ``runtime``.  Create with
    :func:`interpose`; only one is active per process (the native table is global).

    ``devices``: the libomptarget device list (OpenMP device numbers 0..n-1);
    ``libraries``: per registered ``__tgt_bin_desc`` address, its images;
    ``unsupported``: images no plugin accepted; ``gomp_registrations``: libgomp
    ``(version, host table, target type, target data, funcs, vars)`` records with the
    host function addresses and ``(address, size)`` variable pairs read from the table;
    ``errors``: messages of constructs that failed.

    ``profile``: the :class:`~offload_shim.interposer.llvm.profile.RuntimeProfile` of the
    libomptarget release whose behaviour to follow; by default the one the first
    registered library links (:attr:`profile`).

    One object in three parts: this class holds the entry points, the callbacks'
    lifetime and the views; registration, the device list and ``initLibrary`` are the
    part :class:`~offload_shim.interposer.llvm.plugin_manager.PluginManager`;
    ``OMP_TARGET_OFFLOAD``, ``checkDeviceAndCtors`` and ``handleTargetOutcome`` the
    part :class:`~offload_shim.interposer.llvm.policy.OffloadPolicy`."""

    def __init__(self, runtime, *, policy: str | None = None, gomp_host_device: bool = False,
                 profile: RuntimeProfile | None = None):
        if profile is not None and not isinstance(profile, RuntimeProfile):
            raise TypeError(f"profile must be a RuntimeProfile, not {type(profile).__name__}")
        from ...core.runtime import Runtime
        if not isinstance(runtime, Runtime):
            # refused before anything is installed (it used to be an AttributeError
            # from the runtime's use registry, or later, inside a region)
            raise TypeError(f"interpose() needs an offload_shim.Runtime, not "
                            f"{type(runtime).__name__}")
        self.runtime = runtime
        # callbacks in flight (one token, the thread's id, per call) and close()
        self._calls: list[int] = []
        self._calls_cv = threading.Condition(threading.Lock())
        self._close_lock = threading.Lock()
        self._closing = False
        self._closer: int | None = None
        self._init_policy(policy)
        self._init_manager(runtime, profile)
        self.errors: list[str] = _ErrorLog()
        # libgomp's own locks (register_lock, devicep->lock): GCC code does not wait
        # for LLVM registrations
        # for GCC code; built at its first GOMP_* call (gomp/lazy.py: a clang
        # program's start-up does not import it)
        self._gomp = LazyGompSide(runtime, threading.RLock(), errors=self.errors,
                                  unsupported=self.rtls.unsupported, policy=policy,
                                  host_device=gomp_host_device)
        self._loaded: list[LoadedLibrary] = []
        self._closed = False
        self._bridge = Bridge()
        # per-region plans and the cheap path of common constructs (plan.py); it calls
        # back into the general code (the entry points below, policy.py) for the rest
        self.fast = FastPath(check_device=self._check_device,
                             default_device=self._default_device,
                             slow_kernel=self._on_kernel, slow_data=self._on_data,
                             failed=self._construct_failed,
                             requires=lambda: self.rtls.requires_flags,
                             tracing=diag.tracing_possible,
                             saw_kernel=self._saw_kernel_args,
                             repeats=lambda: self._bridge.repeats,
                             closing=lambda: self._closing)

    # -- views ------------------------------------------------------------------------
    @property
    def gomp(self):
        """The GCC side (:class:`~offload_shim.interposer.gomp.target.GompSide`), built
        now when no GCC code needed it yet."""
        return self._gomp.side()

    @property
    def gomp_registrations(self) -> list[dict]:
        side = self._gomp.built
        return side.gomp_registrations if side is not None else []

    @property
    def gomp_constructs(self) -> dict[str, int]:
        return self.gomp.gomp_constructs

    @property
    def gomp_fallbacks(self) -> int:
        side = self._gomp.built
        return side.gomp_fallbacks if side is not None else 0

    def gomp_devices(self) -> list:
        """The device list of GCC code (:meth:`GompSide.devices`)."""
        return self.gomp.devices()

    def mappings(self, device: int = 0) -> list[MapEntry]:
        """The mapping table rows of OpenMP device ``device`` (for tests and tools):
        a copy of the list, taken under the table's lock (with the rows of kernel
        constructs in flight)."""
        dm = self._mappers.get(device)
        return dm.snapshot() if dm is not None else []

    def leaks(self) -> dict[str, dict[str, tuple[int, int]]]:
        """Device memory the program still holds, per initialised device:
        ``{device label: {"mapped": (rows, bytes), "allocated": (blocks, bytes)}}``
        (bytes as requested), only devices that hold some.  ``mapped``: the device
        memory of mapping-table rows left behind (``target enter data`` without its
        ``exit data``); ``allocated``: every other live allocation of the device's
        pool (``omp_target_alloc`` and the ``llvm_omp_target_alloc_*`` routines
        without their free).  Call it before :meth:`close`, which frees the rows'
        memory (libomptarget 16 ``DeviceTy::deinit``/``~DeviceTy`` frees both
        silently; ``offload-shim run --report`` counts them from here)."""
        out: dict[str, dict[str, tuple[int, int]]] = {}
        rows: dict[object, set[int]] = {}
        for dm in self.device_mappers():
            rows.setdefault(dm.device, set()).update(
                e.alloc for e in dm.snapshot() if e.alloc and not e.leased)
        for dev in self.devices:
            pool = dev.pool if dev.initialized else None
            live = pool.live_allocations() if pool is not None else []
            if not live:
                continue
            mapped = rows.get(dev, set())
            kinds = {"mapped": [0, 0], "allocated": [0, 0]}
            for ptr, size in live:
                k = kinds["mapped" if ptr in mapped else "allocated"]
                k[0] += 1
                k[1] += size
            out[dev.label] = {k: tuple(v) for k, v in kinds.items()}
        return out

    # -- lifecycle ------------------------------------------------------------------
    def _install(self) -> None:
        construct = self._construct_error
        plain = self._plain_error
        live = self._while_open
        self._bridge.install({
            "register_lib": guard(live(self._on_register, CB_OK), plain),
            "unregister_lib": guard(self._exit_guard(live(self._on_unregister, CB_OK)),
                                    plain),
            "register_requires": guard(live(self._on_requires, CB_OK), plain),
            "target_kernel": guard(live(self._on_kernel, CB_FAIL), construct),
            "target_data": guard(live(self._on_data, CB_OK), construct),
            "target_alloc": guard(live(self._on_alloc, CB_OK, _no_alloc), plain),
            "target_free": guard(live(self._on_free, CB_OK), plain),
            "target_memcpy": guard(live(self._on_memcpy, CB_FAIL), plain),
            "target_is_present": guard(live(self._on_is_present, 0), plain, fail=0),
            "num_devices": guard(live(self.num_devices, 0), plain, fail=0),
            "construct": self._construct_callback(),
            "api": guard(live(self._on_api, CB_FAIL), plain),
        })
        self._gomp.install(self._bridge.lib)
        self._bridge.note_plugins(self.runtime.plugins)
        # the words of the release mapped now, until a registration names its own
        diag.set_profile(self.profile)
        self._bridge.set_runtime_name(self.profile.name)
        self.fast.invalidate()              # the C side's repeats: on (plan.py, repeat.py)
        # a requires a deferred boot recorded (offload-shim run: the program's
        # constructors ran before its first construct started CPython), then the
        # libraries registered before the callbacks existed (e.g. preloaded), in the
        # order the program made them
        flags = self._bridge.pending_requires()
        if flags is not None:
            self._on_requires(flags)
        for desc in self._bridge.registered():
            if desc not in self.libraries:
                self._on_register(desc)

    def _exit_guard(self, unregister):
        """``__tgt_unregister_lib`` while the process exits and a plugin call of another
        thread is still running (``exit()`` from a thread while another one's kernel
        runs): left registered -- unloading the image would wait for that kernel for
        ever -- for the exit-time stop, which then abandons the runtime
        (:meth:`abandon`).  libomptarget's own unregistration does not wait for
        kernels either."""
        def call(desc):
            if self._bridge.exiting() and (any(d.calls_in_flight
                                                for d in self.runtime.devices)
                                            or self.kernels_repeating()):
                return CB_OK
            return unregister(desc)
        return call

    def _while_open(self, fn, closed_rc: int, closed=None):
        """``fn`` as a callback that, once :meth:`close` has begun, does nothing and
        returns ``closed_rc`` (``closed(*args)`` when given): what the C side answers
        with no callback table (a kernel runs on the host, a data construct does
        nothing) -- except on the thread that closes (its libraries' destructors
        unregister through it).  Another thread may have fetched a callback just
        before the table was removed -- a Python program's daemon thread that keeps
        offloading while the main thread exits: it must not reach the closed
        devices (libomptarget 16 keeps its devices until the process ends;
        offload_shim's teardown runs from Python's ``atexit``, while daemon threads
        still run).  Each call holds a token (its thread's id) while it runs;
        :meth:`close` waits until the other threads' calls are over.  No lock is
        taken: callbacks of any number of threads run at once."""
        calls = self._calls
        get_ident = threading.get_ident

        def call(*args):
            me = get_ident()
            calls.append(me)
            try:
                if self._closing and (self._closed or self._closer != me):
                    return closed(*args) if closed is not None else closed_rc
                return fn(*args)
            finally:
                calls.remove(me)
                if self._closing:
                    with self._calls_cv:
                        self._calls_cv.notify_all()
        call.__name__ = getattr(fn, "__name__", "callback")
        return call

    def _construct_callback(self):
        """The ``construct`` callback: ``guard(_while_open(fast.on_construct, CB_FAIL,
        _closed_construct), _construct_error)`` in one Python frame instead of three
        (it runs once per construct: docs/interpose.md "Cost per construct")."""
        calls = self._calls
        get_ident = threading.get_ident
        serve = self.fast.on_construct
        on_error = self._construct_error

        def construct(addr):
            try:
                me = get_ident()
                calls.append(me)
                try:
                    if self._closing and (self._closed or self._closer != me):
                        return _closed_construct(addr)
                    rc = serve(addr)
                finally:
                    calls.remove(me)
                    if self._closing:
                        with self._calls_cv:
                            self._calls_cv.notify_all()
                return CB_OK if rc is None else int(rc)
            except BaseException as exc:  # noqa: BLE001 - must not propagate into C
                return guarded_failure("on_construct", exc, on_error, CB_FAIL)
        return construct

    def _wait_for_calls(self) -> None:
        """Wait until no other thread is inside a callback (:meth:`close`)."""
        me = threading.get_ident()
        with self._calls_cv:
            while any(t != me for t in list(self._calls)):
                self._calls_cv.wait(0.05)       # the timeout is only a safety net

    def close(self) -> None:
        """Close libraries loaded through :meth:`load_library` (newest first),
        unregister what is still registered (destructors of declare-target globals
        run), free the device memory of every remaining mapping, uninstall the
        callbacks.  Idempotent.  The runtime stays open (its owner closes it).
        Callbacks other threads are running finish first; those they start
        meanwhile answer as without a device."""
        global _active
        with self._close_lock:
            if self._closed:
                return
            self._closer = threading.get_ident()
            self._closing = True
            # the C side's repeats of `target update` stop (and those in flight end)
            # before the devices' memory is freed: from now on the other threads'
            # updates reach Python, which does nothing for them (_closed_construct)
            self.fast.invalidate()
            self._wait_for_calls()
            with self._rtl_lock:
                for lib in reversed(self._loaded):
                    try:
                        lib.close()
                    except OSError as exc:
                        self.errors.append(str(exc))
                self._loaded.clear()
                for desc in list(self.libraries):
                    self._on_unregister(desc)
                if diag.info_level() & diag.INFO_DUMP_TABLE:
                    # ~DeviceTy when libomptarget is unloaded
                    self._dump_tables(diag.SourceInfo(";libomptarget;libomptarget;0;0;;"),
                                      at_exit=True)
                for dm in self._mappers.values():
                    dm.release_all()
                self.fast.invalidate()
                self._bridge.uninstall()
                self._gomp.uninstall()
                self._closed = True
        self.runtime._detach_user(self)
        with _active_lock:
            if _active is self:
                _active = None

    def kernels_repeating(self) -> int:
        """Kernel constructs the C side is repeating now, all threads
        (:meth:`~.repeat.Repeats.kernels_in_flight`; plugin calls that
        :attr:`~offload_shim.core.device.Device.calls_in_flight` does not count)."""
        rp = self._bridge.repeats
        return rp.kernels_in_flight() if rp is not None else 0

    def abandon(self) -> None:
        """Uninstall the callbacks and refuse every later callback, without
        unregistering, running destructors or freeing mappings: the process is
        exiting while a plugin call is still running (``exit()`` from inside a target
        region, or from another thread while a kernel runs), and a teardown would wait
        for that call for ever.  Under ``offload-shim run`` the plugins' own exit
        handlers are then skipped too (they would unload the running kernel's image).
        The process's exit releases the memory.  Idempotent."""
        global _active
        self._closed = True
        self._bridge.keep_plugins()
        self._bridge.uninstall(wait=False)
        self._gomp.uninstall(close_device=False)
        self.runtime._detach_user(self)
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
        if self._closed:
            raise LifecycleError("interposer is closed")
        lib = open_library(path)
        self._loaded.append(lib)
        return lib

    def unload_library(self, lib: LoadedLibrary) -> None:
        """``dlclose`` (its destructors call ``__tgt_unregister_lib``)."""
        lib.close()
        with contextlib.suppress(ValueError):
            self._loaded.remove(lib)

    # -- errors crossing the bridge ---------------------------------------------------
    def _plain_error(self, msg: str) -> None:
        self.errors.append(msg)

    def _construct_error(self, msg: str) -> int:
        """An unexpected error inside a target construct is a failed construct (fatal
        under an effective mandatory policy)."""
        self.errors.append(msg)
        try:
            return self._outcome(False, None)
        except BaseException:  # noqa: BLE001 - never into C
            return CB_FAIL

    # -- constructs (interface.cpp) ------------------------------------------------------
    def _on_data(self, kind, loc, dev_id, n, bases, args, sizes, types, names, mappers):
        """``__tgt_target_data_{begin,end,update}[_nowait]_mapper`` (kind 0, 1, 2).
        No lock is held across it: the mapping table's lock is taken per look-up
        (:mod:`.mapping`)."""
        nowait = bool(kind & DATA_NOWAIT)
        kind &= ~DATA_NOWAIT
        prof = self.profile
        m = _abi.MapArgs(n, bases, args, sizes, types, names, mappers)
        region = prof.region_name(kind, nowait) if kind in (0, 1, 2) else ""

        def announce(dev):
            # LIBOMPTARGET_INFO is read here, after the policy checks, as upstream
            if diag.info_level() & diag.INFO_KERNEL_ARGS:
                _print_arguments(loc, dev, m, region, prof)
        chk = self._check_device(dev_id, loc, announce)
        if isinstance(chk, int):
            return chk
        if not prof.args_before_device:
            announce(chk.number)
        fn = (omptarget.target_data_begin, omptarget.target_data_end,
              omptarget.target_data_update)[kind]
        try:
            fn(chk, m)
        except (MapError, OffloadError) as exc:
            self.errors.append(f"{fn.__name__}: {exc}")
            return self._outcome(False, loc)
        return self._outcome(True, loc)

    def _on_kernel(self, loc, dev_id, teams, threads, host_ptr, kargs) -> int:
        """``__tgt_target_kernel``: map, launch, unmap (omptarget.cpp ``target``),
        with no lock held across the launch."""
        prof = self.profile
        parsed = []

        def announce(dev):
            # only a record of a known version is read (below); LIBOMPTARGET_INFO is
            # read here, after the policy checks, as upstream
            if diag.info_level() & diag.INFO_KERNEL_ARGS:
                try:
                    _clang.kernel_args_version(_abi.kernel_args_version(kargs))
                except UnknownLayoutError:
                    return
                parsed.append(dev)
                _print_arguments(loc, dev, _abi.kernel_map_args(kargs)[0],
                                 "Entering OpenMP kernel", prof)
        chk = self._check_device(dev_id, loc, announce)
        if isinstance(chk, int):
            return chk
        # the record's version first: an unknown one (clang > 22) is refused before
        # any other field is read; the construct fails (fatal under mandatory)
        try:
            kv = _clang.kernel_args_version(_abi.kernel_args_version(kargs))
        except UnknownLayoutError as exc:
            # not a libomptarget situation: say why in one line of our own
            sys.stderr.write(f"offload_shim: UnknownLayoutError: {exc}\n")
            sys.stderr.flush()
            return self._outcome_fail(f"UnknownLayoutError: {exc}", loc)
        self._saw_kernel_args(host_ptr or 0, kv.version)
        m, _ka = _abi.kernel_map_args(kargs)
        implicit = (_clang.DYN_PTR_HOST,) if kv.implicit_dyn_ptr else ()
        if not parsed and diag.info_level() & diag.INFO_KERNEL_ARGS:
            _print_arguments(loc, chk.number, m, "Entering OpenMP kernel", prof)
        try:
            entry = chk.device.translate(host_ptr or 0)
        except KeyError:
            diag.report(f"Host ptr {diag.ptr(host_ptr)} does not have a matching target "
                        "pointer.")
            return self._outcome_fail(f"no kernel for {host_ptr or 0:#x}", loc)
        if kv.version >= 3 and _ka.Flags & KERNEL_FLAG_IS_CUDA:
            # llvmLaunchKernel (CUDA/HIP on OpenMP, LLVM 20+ KernelLanguage/API.cpp):
            # the arguments are one packed buffer, which no LLVM 16 plugin takes
            sys.stderr.write("offload_shim: CUDA-style kernel launches (llvmLaunchKernel, "
                             "KernelArgsTy Flags.IsCUDA) are not supported: the LLVM 16 "
                             "plugins take no packed argument buffer\n")
            sys.stderr.flush()
            return self._outcome_fail(f"IsCUDA launch of {host_ptr or 0:#x}", loc)
        try:
            launch.target(chk, entry, m, implicit)
        except (MapError, OffloadError) as exc:
            self.errors.append(f"target: {type(exc).__name__}: {exc}")
            return self._outcome(False, loc)
        return self._outcome(True, loc)

    # -- API routines (api.cpp) -----------------------------------------------------------
    # No lock of the interposer: libomptarget 16's routines take RTLsMtx for the device
    # count only and the table's DataMapMtx per look-up; these may run on the threads of
    # a kernel in flight (a parallel loop of a target region calling them).
    def _on_alloc(self, size, dev_id, kind, out) -> int:
        return api.target_alloc(self, size, dev_id, kind, out)

    def _on_free(self, ptr, dev_id, kind) -> int:
        return api.target_free(self, ptr, dev_id, kind)

    def _on_memcpy(self, dst, src, length, dst_off, src_off, dst_dev, src_dev) -> int:
        return api.target_memcpy(self, dst, src, length, dst_off, src_off, dst_dev,
                                 src_dev)

    def _on_is_present(self, ptr, dev_id) -> int:
        return api.target_is_present(self, ptr, dev_id)

    def _on_api(self, which, args, nargs, result) -> int:
        result[0] = api.dispatch(self, int(which), _abi.api_args(args, int(nargs))) \
            & 0xFFFFFFFFFFFFFFFF
        return CB_OK


@contextlib.contextmanager
def interpose(runtime, *, policy: str | None = None, gomp_host_device: bool = False,
              profile: RuntimeProfile | None = None) -> Iterator[Interposer]:
    """Route compiled OpenMP code to ``runtime`` for the duration of the block::

        with osh.Runtime([plugin]) as rt, osh.interpose(rt) as ip:
            lib = ip.load_library("libomp_regions.so")   # constructors register
            lib.call("osh_region_saxpy")                  # regions run on rt's devices
            lib.close()                                   # destructors unregister

    ``policy`` overrides ``OMP_TARGET_OFFLOAD`` (``"disabled"``, ``"default"``,
    ``"mandatory"``).  ``gomp_host_device``: GCC-built code gets a device with separate
    host memory and libgomp's mapping, and its API routines answer from this device list
    (:mod:`offload_shim.interposer.gomp.target`); otherwise GCC code runs on its own libgomp.
    ``profile``: the libomptarget release to follow
    (:class:`~offload_shim.interposer.llvm.profile.RuntimeProfile`; default: the one the
    first registered library links, :attr:`Interposer.profile`; TypeError for anything
    else).  TypeError when ``runtime`` is not a :class:`~offload_shim.Runtime`.  Loads
    the interposer RTLD_GLOBAL (raises FileNotFoundError when
    not built, LifecycleError when another libomptarget wins symbol resolution or
    another interposer is active).  On exit: libraries loaded through it are closed,
    images unregistered, mapping memory freed, callbacks removed."""
    global _active
    with _active_lock:
        if _active is not None:
            raise LifecycleError("another offload_shim interposer is active in this process")
        ip = Interposer(runtime, policy=policy, gomp_host_device=gomp_host_device,
                        profile=profile)
        _active = ip
    try:
        # Runtime.close() refuses while this is active (RuntimeInUseError)
        runtime._attach_user("an active interposer", ip)
        ip._install()
    except BaseException:
        # what _install() installed before it failed (building the GCC host device, in
        # host-device mode, comes after the LLVM table): the C side must not go on
        # calling an interposer that never was
        ip._bridge.uninstall()
        ip._gomp.uninstall()
        runtime._detach_user(ip)                # (a no-op when it never attached)
        with _active_lock:
            _active = None
        raise
    try:
        yield ip
    finally:
        ip.close()


__all__ = ["Interposer", "OFFLOAD_DEVICE_DEFAULT", "TGT_DEFAULT", "TGT_DISABLED",
           "TGT_MANDATORY", "interpose"]
