"""libomptarget's host entry points over a Python :class:`~offload_shim.Runtime`.

Mirrors libomptarget 16 ``interface.cpp`` (``__tgt_register_lib``,
``__tgt_target_kernel``, ``__tgt_target_data_{begin,end,update}_mapper``: each checks
its device with ``checkDeviceAndCtors``, prints its arguments under
``LIBOMPTARGET_INFO`` bit 1 and ends with ``handleTargetOutcome``) and the policy of
``omptarget.cpp``: ``OMP_TARGET_OFFLOAD`` (read from libomp's
``__kmpc_get_target_offload``) ``disabled``, or ``default`` with no device (decided at
the first construct and kept), or the host device number -> the construct returns
"fail" and the compiled code runs its host version; any other failure under an
effective ``mandatory`` policy prints libomptarget's lines (``Consult ...`` or the
mapping tables, the source location, ``Libomptarget fatal error 1: failure of target
construct while offloading is mandatory``) and aborts the process.
``checkDeviceAndCtors`` also maps the declare-target globals and runs the constructors
of declare-target globals (``initLibrary``); unregistration runs their destructors.

:class:`Interposer` dispatches each callback of the C bridge (:mod:`.bridge`) to the
module that mirrors the libomptarget source doing the work: registration and device
numbering (:mod:`.rtl`), the mapping table (:mod:`.mapping`), data directives
(:mod:`.omptarget`), the launch (:mod:`.launch`), the API routines (:mod:`.api`) and
the GCC side (:mod:`.gomp`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

from ...abi import clang as _clang
from ...abi import interposer as _abi
from ...abi.interposer import CB_FAIL, CB_FATAL, CB_OK
from ...core.images import OffloadImage
from ...errors import LifecycleError, OffloadError, UnknownLayoutError
from . import api, diag, launch, omptarget
from . import profile as _prof
from ..bridge import Bridge, guard
from ..gomp.target import GompSide
from ..library import LoadedLibrary, open_library
from .mapping import (OMP_REQ_UNIFIED_SHARED_MEMORY, TGT_DEFAULT, TGT_DISABLED,
                      TGT_MANDATORY, DeviceMapper, MapEntry, MapError,
                      usm_pointers_written)
from .plan import FastPath
from .profile import RuntimeProfile
from .rtl import Registrations, RequiresConflict

OFFLOAD_DEVICE_DEFAULT = -1
_POLICIES = {"disabled": TGT_DISABLED, "default": TGT_DEFAULT, "mandatory": TGT_MANDATORY}
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


class Interposer:
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
    registered library links (:attr:`profile`)."""

    def __init__(self, runtime, *, policy: str | None = None, gomp_host_device: bool = False,
                 profile: RuntimeProfile | None = None):
        if profile is not None and not isinstance(profile, RuntimeProfile):
            raise TypeError(f"profile must be a RuntimeProfile, not {type(profile).__name__}")
        self.runtime = runtime
        # registration, unregistration, requires, initLibrary and close (libomptarget
        # 16 RTLsMtx / TrlTblMtx / PendingGlobalsMtx); never taken by a construct that
        # finds its device ready, nor by an API routine
        self._rtl_lock = threading.RLock()
        self._lib_gen = 0                       # registrations and unregistrations
        self._mappers_lock = threading.Lock()
        # callbacks in flight (one token, the thread's id, per call) and close()
        self._calls: list[int] = []
        self._calls_cv = threading.Condition(threading.Lock())
        self._close_lock = threading.Lock()
        self._closing = False
        self._closer: int | None = None
        self._policy_override = policy
        self._decided_policy: int | None = None
        self._read_policy: int | None = None       # OMP_TARGET_OFFLOAD as read once
        self._profile: RuntimeProfile | None = profile
        self._guess: RuntimeProfile | None = None  # before the first registration
        self._registered = False
        if profile is not None:
            diag.set_profile(profile)
        self.errors: list[str] = _ErrorLog()
        self.rtls = Registrations(runtime)
        # libgomp's own locks (register_lock, devicep->lock): GCC code does not wait
        # for LLVM registrations
        self.gomp = GompSide(runtime, threading.RLock(), errors=self.errors,
                             unsupported=self.rtls.unsupported, policy=policy,
                             host_device=gomp_host_device)
        self._mappers: dict[int, DeviceMapper] = {}     # device number -> mapper
        self._loaded: list[LoadedLibrary] = []
        self._closed = False
        self._bridge = Bridge()
        # per-region plans and the cheap path of common constructs (plan.py); it calls
        # back into the general code below for everything else
        self.fast = FastPath(check_device=self._check_device,
                             default_device=self._default_device,
                             slow_kernel=self._on_kernel, slow_data=self._on_data,
                             failed=self._construct_failed,
                             requires=lambda: self.rtls.requires_flags,
                             tracing=diag.tracing_possible,
                             saw_kernel=self._saw_kernel_args)

    # -- views ------------------------------------------------------------------------
    @property
    def devices(self) -> list:
        return self.rtls.devices

    @property
    def libraries(self) -> dict[int, list[OffloadImage]]:
        return self.rtls.libraries

    @property
    def unsupported(self) -> list[tuple[int, str]]:
        return self.rtls.unsupported

    @property
    def requires_flags(self) -> int:
        return self.rtls.requires_flags

    @property
    def generations(self) -> dict[int, str]:
        """Registered ``__tgt_bin_desc`` address -> the clang generation that built
        it, as seen from its entry table and first kernel launch (``"clang 20-22
        (llvm::offloading::EntryTy v1, KernelArgs v3)"``)."""
        return dict(self.rtls.generations)

    def compilers(self) -> list[str]:
        """The clang generations of every library registered so far, unregistered
        ones included (:meth:`Registrations.compilers`)."""
        return self.rtls.compilers()

    @property
    def gomp_registrations(self) -> list[dict]:
        return self.gomp.gomp_registrations

    @property
    def gomp_constructs(self) -> dict[str, int]:
        return self.gomp.gomp_constructs

    @property
    def gomp_fallbacks(self) -> int:
        return self.gomp.gomp_fallbacks

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
            "construct": guard(live(self.fast.on_construct, CB_FAIL, _closed_construct),
                               construct),
            "api": guard(live(self._on_api, CB_FAIL), plain),
        })
        self.gomp.install(self._bridge.lib)
        self._bridge.note_plugins(self.runtime.plugins)
        # the words of the release mapped now, until a registration names its own
        diag.set_profile(self.profile)
        self._bridge.set_runtime_name(self.profile.name)
        # libraries registered before the callbacks existed (e.g. preloaded)
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
            if self._bridge.exiting() and any(d.calls_in_flight
                                               for d in self.runtime.devices):
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
                self.gomp.uninstall()
                self._closed = True
        with _active_lock:
            if _active is self:
                _active = None

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
        self._bridge.uninstall()
        self.gomp.uninstall(close_device=False)
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

    # -- policy (omptarget.cpp: isOffloadDisabled / handleTargetOutcome) ---------------
    def policy(self) -> int:
        """Effective OMP_TARGET_OFFLOAD policy: TGT_DISABLED or TGT_MANDATORY
        (``default`` becomes mandatory when there are devices, else disabled, decided
        once as libomptarget's ``handleDefaultTargetOffload`` does)."""
        if self._decided_policy is not None:
            return self._decided_policy
        p = self._raw_policy()
        if p == TGT_DEFAULT:
            p = TGT_MANDATORY if self.num_devices() > 0 else TGT_DISABLED
            self._decided_policy = p
        return p

    def _raw_policy(self) -> int:
        """``OMP_TARGET_OFFLOAD`` as libomp's ``__kmpc_get_target_offload`` gives it
        (the ``policy`` override first), read once and kept: libomptarget reads it
        once (16: ``loadRTLs``; 19.1: the ``OffloadPolicy`` static; 22.1:
        ``PluginManager::init``).  When it is read is the release's
        (``RuntimeProfile.policy_at_registration``: :meth:`_on_register` reads it at
        the first registration for 16 and 22.1, so a ``setenv`` in ``main`` is too
        late there; 19.1 reads it at the first construct)."""
        if self._policy_override is not None:
            return _POLICIES[self._policy_override.lower()]
        p = self._read_policy
        if p is not None:
            return p
        p = _abi.kmpc_target_offload(_abi.libomp())
        if p is None:
            env = os.environ.get("OMP_TARGET_OFFLOAD", "default").strip().lower()
            p = {"disabled": TGT_DISABLED, "mandatory": TGT_MANDATORY}.get(env, TGT_DEFAULT)
        self._read_policy = p
        return p

    def _outcome(self, success: bool, loc: int | None) -> int:
        """``handleTargetOutcome``: under mandatory, dump the tables (INFO bit 4) or
        say where to look, name the source location, print the fatal error and
        return CB_FATAL (the C side aborts); otherwise CB_OK / CB_FAIL."""
        policy = self.policy()
        dump = diag.info_level() & diag.INFO_DUMP_TABLE
        if policy == TGT_MANDATORY:
            if dump:
                self._dump_tables(diag.SourceInfo.of_loc(loc))
            if success:
                return CB_OK
            if not dump:
                diag.report("Consult https://openmp.llvm.org/design/Runtimes.html for "
                            "debugging options.")
            si = diag.SourceInfo.of_loc(loc)
            prefix = ""
            if si.available:
                prefix = f"{si.filename}:{si.line}:{si.column}: "
            else:
                diag.report("Source location information not present. Compile with -g "
                            "or -gline-tables-only.")
            diag.fatal(1, "failure of target construct while offloading is mandatory",
                       prefix)
            return CB_FATAL
        return CB_OK if success else CB_FAIL

    def _dump_tables(self, si: "diag.SourceInfo", at_exit: bool = False) -> None:
        """``dumpTargetPointerMappings`` of every device (``handleTargetOutcome``
        with INFO bit 4; ``at_exit``: ``~DeviceTy``, with the rows libomptarget would
        still hold).  16 dumps the tables of the devices used so far, nothing for an
        empty one; 19.1 and 22.1 dump every device of the list, ``... table empty``
        for an empty one, and at exit from the last device to the first
        (``RuntimeProfile.dump_empty_tables``, ``exit_dump_descending``)."""
        prof = self.profile
        if not prof.dump_empty_tables:
            for num in sorted(self._mappers):
                self._mappers[num].dump(si, retired=at_exit)
            return
        nums = range(self.num_devices())
        if at_exit and prof.exit_dump_descending:
            nums = reversed(nums)
        for num in nums:
            dm = self._mappers.get(num)
            if dm is None:
                diag.info(diag.INFO_ALL, num, "OpenMP Host-Device pointer mappings table empty")
            else:
                dm.dump(si, retired=at_exit)

    def _outcome_fail(self, message: str, loc: int | None = None) -> int:
        self.errors.append(message)
        return self._outcome(False, loc)

    def _default_device(self) -> int:
        omp = _abi.libomp()
        if omp is not None:
            return _abi.omp_default_device(omp)
        return int(os.environ.get("OMP_DEFAULT_DEVICE", "0") or 0)

    def _construct_failed(self, kind: int, exc: Exception, loc: int | None) -> int:
        """The return code of a construct (kind as in the frame: 0..2 data, 3 kernel)
        that failed with ``exc`` (a MapError or OffloadError) after its point of no
        return (the launch, a copy back): libomptarget's report, then
        ``handleTargetOutcome``; the general code and the cheap path (plan.py)
        report it the same way."""
        if kind == 3 and isinstance(exc, OffloadError):
            diag.report("Executing target region abort target.")
        elif isinstance(exc, OffloadError):
            diag.report("Copying data from device failed." if kind == 1
                        else "Copying data to device failed.")
        self.errors.append(f"{type(exc).__name__}: {exc}")
        return self._outcome(False, loc)

    def device_ready(self, num: int) -> bool:
        """``deviceIsReady``: ``num`` is a device of the list and initialises."""
        if not 0 <= num < len(self.devices):
            return False
        dev = self.devices[num]
        if dev.initialized:
            return True
        try:
            dev.init()
        except OffloadError as exc:
            self.errors.append(f"device {num}: {exc}")
            return False
        return True

    def _check_device(self, dev_id: int, loc: int | None, announce=None
                      ) -> DeviceMapper | int:
        """The DeviceMapper to offload to, or a callback return code (fallback /
        fatal) -- libomptarget 16 ``checkDeviceAndCtors``; 19.1 / 22.1 ``checkDevice``
        then ``PM->getDevice``, whose error for a number that is no device is one
        fatal line (``RuntimeProfile.invalid_device``).  ``announce(dev)`` prints the
        construct's arguments (INFO bit 1) where the release prints them: between
        the two checks (``RuntimeProfile.args_before_device``); otherwise the caller
        prints them after a success."""
        if self.policy() == TGT_DISABLED:
            return CB_FAIL
        if dev_id == OFFLOAD_DEVICE_DEFAULT:
            dev_id = self._default_device()
        n = self.num_devices()
        if n == 0:
            return self._outcome_fail("omp_get_num_devices() == 0 but offload is mandatory",
                                      loc)
        if dev_id == n:                       # the initial (host) device
            return CB_FAIL
        prof = self.profile
        if announce is not None and prof.args_before_device:
            announce(dev_id)
        if prof.invalid_device is not None and not 0 <= dev_id < n:
            self.errors.append(f"device {dev_id} out of range ({n} devices)")
            diag.fatal(dev_id, prof.invalid_device_text(dev_id, n))
            return CB_FATAL
        if not self.device_ready(dev_id):
            diag.report(f"Device {dev_id} is not ready.")
            return self._outcome_fail(f"device {dev_id} is not ready", loc)
        dm = self.mapper(dev_id)
        try:
            self._init_library(dm)
        except (MapError, OffloadError) as exc:
            diag.report(f"Failed to init globals on device {dev_id}")
            return self._outcome_fail(f"initLibrary: {exc}", loc)
        return dm

    def _init_library(self, dm: DeviceMapper) -> None:
        """``initLibrary``: map the declare-target globals of the images loaded in the
        device, then run the pending constructors of declare-target globals (per
        library, in ``__tgt_bin_desc`` address order as libomptarget's map).  Under
        the registration lock (libomptarget 16 holds ``TrlTblMtx`` and the device's
        ``PendingGlobalsMtx`` across it, constructors included); skipped without any
        lock while no library was registered or unregistered and the device was not
        re-initialised since it last ran for this device (``HasPendingGlobals``)."""
        dev = dm.device
        if dm.lib_key == (self._lib_gen, dev.init_count):
            return
        with self._rtl_lock:
            key = (self._lib_gen, dev.init_count)
            if dm.lib_key == key:
                return
            usm = (self.rtls.requires_flags & OMP_REQ_UNIFIED_SHARED_MEMORY
                   and usm_pointers_written(self.host_runtime, dev.plugin.generation))
            dm.map_globals(self.rtls.images(), usm_pointers=bool(usm))
            for desc in sorted(self.rtls.records):
                if desc in dm.ctors_done:
                    continue
                dm.ctors_done.add(desc)
                for rec in self.rtls.records[desc]:
                    if rec.plugin is not dm.device.plugin:
                        continue
                    for ctor in rec.ctors:
                        try:
                            launch.target(dm, dm.device.translate(ctor),
                                          _abi.MapArgs.from_lists([], [], [], []))
                        except (MapError, OffloadError, KeyError) as exc:
                            diag.report(f"Running ctor {diag.ptr(ctor)} failed.")
                            raise MapError(str(exc)) from None
            dm.lib_key = key

    # -- the release (profile.py) --------------------------------------------------------
    @property
    def profile(self) -> RuntimeProfile:
        """The :class:`~offload_shim.interposer.llvm.profile.RuntimeProfile` whose behaviour
        the interposer follows: the one given to :func:`interpose`, else the release
        of the libomptarget the first registered library links, chosen at that
        registration and kept (:func:`offload_shim.interposer.llvm.profile.detect`); before
        any registration, the one mapped into the process when first asked."""
        p = self._profile
        if p is None:
            p = self._guess
            if p is None:
                p = self._guess = _prof.detect()
        return p

    @property
    def host_runtime(self) -> int:
        """LLVM major of the release followed (``profile.major``).  A view for reports;
        behaviour that differs between releases is a field of :attr:`profile`, never a
        test of this number."""
        return self.profile.major

    def _choose_profile(self, desc: int) -> None:
        """At the first registration: keep the profile of the release the registering
        library links (``desc`` lies in it) and make its words diag's and the C
        side's (``osh_interposer_set_runtime_name``)."""
        if self._profile is None:
            self._profile = _prof.detect(desc)
        diag.set_profile(self._profile)
        self._bridge.set_runtime_name(self._profile.name)

    # -- devices ------------------------------------------------------------------------
    def num_devices(self) -> int:
        """``omp_get_num_devices()``: the devices of the plugins that accepted a
        registered image; 0 under ``OMP_TARGET_OFFLOAD=disabled`` where the release
        loads no plugin then (``RuntimeProfile.devices_when_disabled``: 16, 22.1)."""
        if not self.profile.devices_when_disabled and self._raw_policy() == TGT_DISABLED:
            return 0
        return len(self.devices)

    def check_device_number(self, dev_id: int, *, initial_ok: bool = True) -> None:
        """API routines of libomptarget 19.1 / 22.1 stop the program on a device number
        that is neither a device nor the initial device (``PluginManager::getDevice``
        -> ``FATAL_MESSAGE(DeviceNum, ...)``, then abort, -1 included;
        ``RuntimeProfile.invalid_device``); 16 returns an error instead (nothing done
        here).  ``initial_ok=False``: routines that ask the plugin manager for the
        initial device's number too (``__tgt_activate_record_replay``)."""
        prof = self.profile
        if prof.invalid_device is None:
            return
        n = self.num_devices()
        if not 0 <= dev_id <= (n if initial_ok else n - 1):
            diag.fatal(dev_id, prof.invalid_device_text(dev_id, n))
            os.abort()

    def mapper(self, num: int) -> DeviceMapper:
        """The :class:`DeviceMapper` of OpenMP device ``num`` (created on first use,
        once also when threads ask at the same time)."""
        dm = self._mappers.get(num)
        if dm is None:
            with self._mappers_lock:
                dm = self._mappers.get(num)
                if dm is None:
                    dm = self._mappers[num] = DeviceMapper(
                        self.devices[num], num, lambda: self.rtls.requires_flags,
                        profile=lambda: self.profile)
        return dm

    def has_mapper(self, num: int) -> bool:
        return num in self._mappers

    def device_mappers(self) -> list[DeviceMapper]:
        """The :class:`DeviceMapper` of every OpenMP device used so far."""
        with self._mappers_lock:
            return list(self._mappers.values())

    def fixed_upstream(self) -> dict[str, int]:
        """How many times constructs met each data-losing bug of the program's
        release that offload_shim does not reproduce (ids of
        :data:`~offload_shim.interposer.llvm.profile.FIXED_UPSTREAM`, summed over the
        devices: :meth:`DeviceMapper.note_fixed_upstream`); empty when none was
        met."""
        out: dict[str, int] = {}
        for dm in self.device_mappers():
            with dm.lock:
                for bug, n in dm.fixed_upstream.items():
                    out[bug] = out.get(bug, 0) + n
        return dict(sorted(out.items()))

    @property
    def registration_lock(self):
        """The lock every registration, unregistration and ``requires`` takes
        (libomptarget 16 ``RTLsMtx``): held, the registrations stay as they are."""
        return self._rtl_lock

    # -- registration (rtl.cpp) --------------------------------------------------------
    def _on_requires(self, flags: int) -> int:
        """``__tgt_register_requires(flags)``: 16 keeps the first value and stops the
        program when a later one disagrees on a clause it compares (rtl.cpp
        ``RTLsTy::registerRequires``: ``Libomptarget fatal error 1: '#pragma omp
        requires unified_shared_memory' not used consistently!``, abort); 19.1 and
        22.1 only print that the entry point was removed (``RuntimeProfile
        .register_requires_message``)."""
        prof = self.profile
        if prof.register_requires_message is not None:
            diag.message(prof.register_requires_message)
            return CB_OK
        with self._rtl_lock:
            try:
                self.rtls.add_requirements(int(flags), prof)
            except RequiresConflict as exc:
                self.errors.append(str(exc))
                diag.fatal(exc.number, exc.text)
                return CB_FATAL
            finally:
                self.fast.invalidate()
        return CB_OK

    def _saw_kernel_args(self, host_ptr: int, version: int) -> None:
        """:meth:`Registrations.saw_kernel_args` under the registration lock."""
        with self._rtl_lock:
            self.rtls.saw_kernel_args(host_ptr, version)

    def _on_register(self, desc: int) -> int:
        """``__tgt_register_lib`` (under the registration lock: libomptarget 16
        ``RTLsMtx``)."""
        with self._rtl_lock:
            first = not self._registered
            if first:
                self._registered = True
                self._choose_profile(desc)
            prof = self._profile
            self._lib_gen += 1
            self.fast.invalidate()
            try:
                self.rtls.register_lib(desc, prof)
            except RequiresConflict as exc:
                # 19.1 / 22.1 addRequirements: FATAL_MESSAGE(2, ...), abort
                self.errors.append(str(exc))
                diag.fatal(exc.number, exc.text)
                return CB_FATAL
            finally:
                # the image's own requires entries (clang 19+) are known only now
                self.fast.invalidate()
            if first and prof.policy_at_registration:
                self._raw_policy()          # loadRTLs / PluginManager::init read it now
            self._say_refused()
            return CB_OK

    def _say_refused(self) -> None:
        """One line ``offload_shim: not offloading ...`` on stderr for each image of the
        registration that offload_shim's own checks refused
        (:attr:`Registrations.refused`): libomptarget 16 would have given it to a
        plugin, which runs it or aborts the program when it cannot load it, and prints
        nothing at registration under any ``LIBOMPTARGET_INFO``; here its target regions
        fall back to the host (under ``OMP_TARGET_OFFLOAD=mandatory``: the fatal error
        at its first construct), so the reason is said once, in offload_shim's own words
        (never libomptarget's).  Nothing under ``OMP_TARGET_OFFLOAD=disabled``: no
        runtime offloads anything then."""
        if not self.rtls.refused:
            return
        raw = self._peek_policy()
        if raw == TGT_DISABLED:
            return
        then = ("its target regions cannot be offloaded (OMP_TARGET_OFFLOAD=mandatory)"
                if raw == TGT_MANDATORY else "its target regions run on the host")
        for why in self.rtls.refused:
            diag.own(f"not offloading {why}; {then}")

    def _peek_policy(self) -> int:
        """:meth:`_raw_policy` without reading it for good (19.1 reads it at the first
        construct, so a ``setenv`` in ``main`` still counts there)."""
        if self._policy_override is not None or self._read_policy is not None:
            return self._raw_policy()
        env = os.environ.get("OMP_TARGET_OFFLOAD", "default").strip().lower()
        return {"disabled": TGT_DISABLED, "mandatory": TGT_MANDATORY}.get(env, TGT_DEFAULT)

    def _on_unregister(self, desc: int) -> int:
        """``__tgt_unregister_lib``: the destructors of the library's declare-target
        globals run on the devices where its constructors ran; its globals leave the
        mapping tables; its images are unregistered from the runtime (which waits for
        launches of their kernels in flight).  Under the registration lock, as
        libomptarget 16 ``RTLsTy::unregisterLib`` holds ``RTLsMtx``."""
        with self._rtl_lock:
            self._lib_gen += 1
            self.fast.invalidate()
            for rec in self.rtls.records.get(desc, ()):
                for num in self.rtls.device_numbers(rec.plugin):
                    dm = self._mappers.get(num)
                    if dm is None or desc not in dm.ctors_done:
                        continue
                    for dtor in rec.dtors:
                        try:
                            launch.target(dm, dm.device.translate(dtor),
                                          _abi.MapArgs.from_lists([], [], [], []))
                        except (MapError, OffloadError, KeyError) as exc:
                            self.errors.append(f"destructor {dtor:#x}: {exc}")
            for num, dm in self._mappers.items():
                dm.ctors_done.discard(desc)
                for img in self.libraries.get(desc, ()):
                    dm.drop_image(img)
            self.rtls.unregister_lib(desc, self.errors)
            return CB_OK

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
    else).  Loads the interposer RTLD_GLOBAL (raises FileNotFoundError when
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
        ip._install()
    except BaseException:
        with _active_lock:
            _active = None
        raise
    try:
        yield ip
    finally:
        ip.close()


__all__ = ["Interposer", "OFFLOAD_DEVICE_DEFAULT", "TGT_DEFAULT", "TGT_DISABLED",
           "TGT_MANDATORY", "interpose"]
