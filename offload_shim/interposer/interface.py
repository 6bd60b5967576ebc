"""libomptarget's host entry points over a Python :class:`~offload_shim.Runtime`.

Mirrors libomptarget 16 ``interface.cpp`` (``__tgt_register_lib``,
``__tgt_target_kernel``, ``__tgt_target_data_{begin,end,update}_mapper``; each checks
its device with ``checkDeviceAndCtors`` and ends with ``handleTargetOutcome``) and the
policy of ``omptarget.cpp`` / ``private.h``: ``OMP_TARGET_OFFLOAD`` (read from libomp's
``__kmpc_get_target_offload``) ``disabled``, or ``default`` with no device, or the host
device number -> the construct returns "fail" and the compiled code runs its host
version; any other failure under an effective ``mandatory`` policy prints
libomptarget's fatal message and aborts the process.

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
from typing import Iterator

from ..abi import clang as _clang
from ..abi import interposer as _abi
from ..abi.interposer import CB_FAIL, CB_FATAL, CB_OK
from ..core.images import OffloadImage
from ..errors import LifecycleError, OffloadError, UnknownLayoutError
from . import api, launch, omptarget
from .bridge import Bridge, guard
from .gomp import GompSide
from .library import LoadedLibrary, open_library
from .mapping import DeviceMapper, MapEntry, MapError
from .plan import FastPath
from .rtl import Registrations

OFFLOAD_DEVICE_DEFAULT = -1
#: libomp ``kmp_target_offload_kind``
TGT_DISABLED, TGT_DEFAULT, TGT_MANDATORY = 0, 1, 2
_POLICIES = {"disabled": TGT_DISABLED, "default": TGT_DEFAULT, "mandatory": TGT_MANDATORY}

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

    def __init__(self, runtime, *, policy: str | None = None, gomp_host_device: bool = False):
        self.runtime = runtime
        self._lock = threading.RLock()
        self._policy_override = policy
        self.errors: list[str] = []
        self.rtls = Registrations(runtime)
        self.gomp = GompSide(runtime, self._lock, errors=self.errors,
                             unsupported=self.rtls.unsupported, policy=policy,
                             host_device=gomp_host_device)
        self._mappers: dict[int, DeviceMapper] = {}     # device number -> mapper
        self._loaded: list[LoadedLibrary] = []
        self._closed = False
        self._bridge = Bridge()
        self._host_runtime: int | None = None
        # per-region plans and the cheap path of common constructs (plan.py); it calls
        # back into the general code below for everything else
        self.fast = FastPath(lock=self._lock, check_device=self._check_device,
                             default_device=self._default_device,
                             slow_kernel=self._on_kernel, slow_data=self._on_data,
                             failed=self._construct_failed,
                             requires=lambda: self.rtls.requires_flags,
                             saw_kernel=self.rtls.saw_kernel_args)

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
        """``__tgt_bin_desc`` address -> the clang generation that built it, as seen
        from its entry table and first kernel launch (``"clang 20-22
        (llvm::offloading::EntryTy v1, KernelArgs v3)"``)."""
        return dict(self.rtls.generations)

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
        """The mapping table rows of OpenMP device ``device`` (for tests and tools)."""
        with self._lock:
            dm = self._mappers.get(device)
            return list(dm.table.entries) if dm is not None else []

    # -- lifecycle ------------------------------------------------------------------
    def _install(self) -> None:
        construct = self._construct_error
        plain = self._plain_error
        self._bridge.install({
            "register_lib": guard(self._on_register, plain),
            "unregister_lib": guard(self._on_unregister, plain),
            "register_requires": guard(self._on_requires, plain),
            "target_kernel": guard(self._on_kernel, construct),
            "target_data": guard(self._on_data, construct),
            "target_alloc": guard(self._on_alloc, plain),
            "target_free": guard(self._on_free, plain),
            "target_memcpy": guard(self._on_memcpy, plain),
            "target_is_present": guard(self._on_is_present, plain, fail=0),
            "num_devices": guard(self.num_devices, plain, fail=0),
            "construct": guard(self.fast.on_construct, construct),
        })
        self.gomp.install(self._bridge.lib)
        # libraries registered before the callbacks existed (e.g. preloaded)
        for desc in self._bridge.registered():
            if desc not in self.libraries:
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
            for dm in self._mappers.values():
                dm.release_all()
            self.fast.invalidate()
            self._bridge.uninstall()
            self.gomp.uninstall()
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
        """An error inside a target construct is a failed construct (fatal under an
        effective mandatory policy)."""
        try:
            return self._outcome_fail(msg)
        except BaseException:  # noqa: BLE001 - never into C
            self.errors.append(msg)
            return CB_FAIL

    # -- policy (interface.cpp: checkDeviceAndCtors / handleTargetOutcome) ---------------
    def policy(self) -> int:
        """Effective OMP_TARGET_OFFLOAD policy: TGT_DISABLED or TGT_MANDATORY
        (``default`` becomes mandatory when there is a device, else disabled)."""
        p = self._raw_policy()
        if p == TGT_DEFAULT:
            p = TGT_MANDATORY if self.num_devices() > 0 else TGT_DISABLED
        return p

    def _raw_policy(self) -> int:
        if self._policy_override is not None:
            return _POLICIES[self._policy_override.lower()]
        p = _abi.kmpc_target_offload(_abi.libomp())
        if p is None:
            env = os.environ.get("OMP_TARGET_OFFLOAD", "default").strip().lower()
            p = {"disabled": TGT_DISABLED, "mandatory": TGT_MANDATORY}.get(env, TGT_DEFAULT)
        return p

    def _outcome_fail(self, message: str, loc: int | None = None) -> int:
        """A construct failed: fatal under mandatory (libomptarget 16 aborts), else
        host fallback.  The fatal line names the runtime as the program's own does:
        ``Libomptarget fatal error 1`` (16), ``omptarget fatal error 1`` (19.1, 22.1:
        their messages say ``omptarget``)."""
        src = _abi.ident_source(loc)
        full = message + (f" (at {src})" if src else "")
        self.errors.append(full)
        if self.policy() == TGT_MANDATORY:
            sys.stdout.flush()
            who = "omptarget" if self.host_runtime >= 19 else "Libomptarget"
            sys.stderr.write(f"offload_shim: {full}\n"
                             f"{who} fatal error 1: failure of target construct "
                             "while offloading is mandatory\n")
            sys.stderr.flush()
            return CB_FATAL
        return CB_FAIL

    def _default_device(self) -> int:
        omp = _abi.libomp()
        if omp is not None:
            return _abi.omp_default_device(omp)
        return int(os.environ.get("OMP_DEFAULT_DEVICE", "0") or 0)

    def _construct_failed(self, kind: int, exc: Exception, loc: int | None) -> int:
        """The return code of a construct (kind as in the frame: 0..2 data, 3 kernel)
        that failed with ``exc`` (a MapError or OffloadError): the general code and
        the cheap path (plan.py) report it the same way."""
        if kind == 3:
            return self._outcome_fail(f"{type(exc).__name__}: {exc}", loc)
        return self._outcome_fail(str(exc), loc)

    def _check_device(self, dev_id: int, loc: int | None) -> DeviceMapper | int:
        """The DeviceMapper to offload to, or a callback return code (fallback /
        fatal) -- libomptarget 16 ``checkDeviceAndCtors``."""
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
        if not 0 <= dev_id < n:
            return self._outcome_fail(f"Device {dev_id} is not ready", loc)
        dev = self.devices[dev_id]
        fresh = not dev.initialized
        try:
            dev.init()
        except OffloadError as exc:
            return self._outcome_fail(f"Device {dev_id} is not ready: {exc}", loc)
        if fresh:
            self._bridge.rearm_exit()
        dm = self.mapper(dev_id)
        dm.map_globals(self.rtls.images())
        return dm

    # -- devices ------------------------------------------------------------------------
    @property
    def host_runtime(self) -> int:
        """LLVM major of the libomptarget the compiled code links (16 when none is
        loaded): the API routines answer as that release does where releases differ
        (``abi.interposer.loaded_libomptarget``, read once a library registered)."""
        if self._host_runtime is None:
            found = _abi.loaded_libomptarget()
            if found is None or not self.libraries:
                return found[0] if found else 16
            self._host_runtime = found[0]
        return self._host_runtime

    def num_devices(self) -> int:
        """``omp_get_num_devices()``: 0 under OMP_TARGET_OFFLOAD=disabled (libomptarget
        16 ``RTLsTy::loadRTLs`` loads no plugin then; 22.1 also reports 0), else the
        devices of the plugins that accepted a registered image.  libomptarget 19.1
        reports its devices under ``disabled`` too (checked on Debian 19.1.7), so code
        linked against it gets them."""
        if self._raw_policy() == TGT_DISABLED and self.host_runtime != 19:
            return 0
        return len(self.devices)

    def check_device_number(self, dev_id: int) -> None:
        """API routines of libomptarget 19+ stop the program on a device number that
        is neither a device nor the initial device (``PluginManager::getDevice`` ->
        ``FATAL_MESSAGE(DeviceNum, ...)``, then abort; the text as Debian 19.1.7 and
        22.1.8 print it, -1 included); libomptarget 16 returns an error instead
        (nothing done here)."""
        n = self.num_devices()
        if self.host_runtime >= 19 and not 0 <= dev_id <= n:
            what = ("Device number" if self.host_runtime == 19
                    else '"invalid value" device number')
            sys.stderr.write(f"omptarget fatal error {dev_id}: {what} '{dev_id}' out of "
                             f"range, only {n} devices available\n")
            sys.stderr.flush()
            os.abort()

    def mapper(self, num: int) -> DeviceMapper:
        """The :class:`DeviceMapper` of OpenMP device ``num`` (created on first use)."""
        dm = self._mappers.get(num)
        if dm is None:
            dm = self._mappers[num] = DeviceMapper(self.devices[num], num)
        return dm

    def has_mapper(self, num: int) -> bool:
        return num in self._mappers

    def device_or_host(self, dev_id: int):
        """The initialised Device of OpenMP device ``dev_id``, or None for the
        initial (host) device.  Raises MapError for another number."""
        self.check_device_number(dev_id)
        n = self.num_devices()
        if dev_id == n:
            return None
        if not 0 <= dev_id < n:
            raise MapError(f"invalid device number {dev_id} ({n} devices)")
        dev = self.devices[dev_id]
        if not dev.initialized:
            dev.init()
            self._bridge.rearm_exit()
        return dev

    # -- registration (rtl.cpp) --------------------------------------------------------
    def _on_requires(self, flags: int) -> int:
        self.rtls.requires_flags = int(flags)
        self.fast.invalidate()
        return CB_OK

    def _on_register(self, desc: int) -> int:
        """``__tgt_register_lib``."""
        with self._lock:
            self.fast.invalidate()
            try:
                self.rtls.register_lib(desc)
            finally:
                self._bridge.rearm_exit()
            return CB_OK

    def _on_unregister(self, desc: int) -> int:
        """``__tgt_unregister_lib``: the images' declare-target rows leave the mapping
        tables, then the images are unregistered from the runtime."""
        with self._lock:
            self.fast.invalidate()
            for img in self.libraries.get(desc, ()):
                for dm in self._mappers.values():
                    dm.drop_image(img)
            self.rtls.unregister_lib(desc, self.errors)
            return CB_OK

    # -- constructs (interface.cpp) ------------------------------------------------------
    def _on_data(self, kind, loc, dev_id, n, bases, args, sizes, types, names, mappers):
        """``__tgt_target_data_{begin,end,update}[_nowait]_mapper`` (kind 0, 1, 2)."""
        with self._lock:
            chk = self._check_device(dev_id, loc)
            if isinstance(chk, int):
                return chk
            m = _abi.MapArgs(n, bases, args, sizes, types, names, mappers)
            try:
                if kind == 0:
                    omptarget.target_data_begin(chk, m)
                elif kind == 1:
                    omptarget.target_data_end(chk, m)
                else:
                    omptarget.target_data_update(chk, m)
            except (MapError, OffloadError) as exc:
                return self._construct_failed(kind, exc, loc)
            return CB_OK

    def _on_kernel(self, loc, dev_id, teams, threads, host_ptr, kargs) -> int:
        """``__tgt_target_kernel``: map, launch, unmap (omptarget.cpp ``target``)."""
        with self._lock:
            chk = self._check_device(dev_id, loc)
            if isinstance(chk, int):
                return chk
            # the record's version first: an unknown one (clang > 22) is refused before
            # any other field is read; the construct fails (fatal under mandatory)
            try:
                kv = _clang.kernel_args_version(_abi.kernel_args_version(kargs))
            except UnknownLayoutError as exc:
                return self._outcome_fail(f"UnknownLayoutError: {exc}", loc)
            self.rtls.saw_kernel_args(host_ptr or 0, kv.version)
            m, _ka = _abi.kernel_map_args(kargs)
            implicit = (_clang.DYN_PTR_HOST,) if kv.implicit_dyn_ptr else ()
            try:
                entry = chk.device.translate(host_ptr or 0)
            except KeyError:
                return self._outcome_fail(f"host ptr {host_ptr or 0:#x} does not have a "
                                          f"matching target pointer on device "
                                          f"{chk.number}", loc)
            try:
                launch.target(chk, entry, m, implicit)
            except (MapError, OffloadError) as exc:
                return self._construct_failed(3, exc, loc)
            return CB_OK

    # -- API routines (api.cpp) -----------------------------------------------------------
    def _on_alloc(self, size, dev_id, out) -> int:
        with self._lock:
            return api.target_alloc(self, size, dev_id, out)

    def _on_free(self, ptr, dev_id) -> int:
        with self._lock:
            return api.target_free(self, ptr, dev_id)

    def _on_memcpy(self, dst, src, length, dst_off, src_off, dst_dev, src_dev) -> int:
        with self._lock:
            return api.target_memcpy(self, dst, src, length, dst_off, src_off, dst_dev,
                                     src_dev)

    def _on_is_present(self, ptr, dev_id) -> int:
        with self._lock:
            return api.target_is_present(self, ptr, dev_id)


@contextlib.contextmanager
def interpose(runtime, *, policy: str | None = None,
              gomp_host_device: bool = False) -> Iterator[Interposer]:
    """Route compiled OpenMP code to ``runtime`` for the duration of the block::

        with osh.Runtime([plugin]) as rt, osh.interpose(rt) as ip:
            lib = ip.load_library("libomp_regions.so")   # constructors register
            lib.call("osh_region_saxpy")                  # regions run on rt's devices
            lib.close()                                   # destructors unregister

    ``policy`` overrides ``OMP_TARGET_OFFLOAD`` (``"disabled"``, ``"default"``,
    ``"mandatory"``).  ``gomp_host_device``: GCC-built code gets a device with separate
    host memory and libgomp's mapping, and its API routines answer from this device list
    (:mod:`offload_shim.interposer.gomp`); otherwise GCC code runs on its own libgomp.
    Loads the interposer RTLD_GLOBAL (raises FileNotFoundError when
    not built, LifecycleError when another libomptarget wins symbol resolution or
    another interposer is active).  On exit: libraries loaded through it are closed,
    images unregistered, mapping memory freed, callbacks removed."""
    global _active
    with _active_lock:
        if _active is not None:
            raise LifecycleError("another offload_shim interposer is active in this process")
        ip = Interposer(runtime, policy=policy, gomp_host_device=gomp_host_device)
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
