"""The plugin manager: registration of compiled libraries, the device list, their order.

Mirrors libomptarget 16 ``rtl.cpp`` ``RTLsTy::registerRequires``,
``RTLsTy::registerLib`` and ``RTLsTy::unregisterLib`` as they run under the
``PluginManager`` locks of ``device.h`` (``RTLsMtx`` for every registration,
unregistration and ``requires``; ``TrlTblMtx`` and the device's ``PendingGlobalsMtx``
across ``omptarget.cpp`` ``initLibrary``), and 19.1 / 22.1 ``PluginManager.cpp``
``PluginManager::registerLib`` / ``unregisterLib`` with ``PluginManager.h``
``addRequirements`` (``Shared/Requirements.h`` ``RequirementCollection``).  The order of
initialisation is upstream's: the release's profile and (16, 22.1) the
``OMP_TARGET_OFFLOAD`` policy are fixed at the first ``__tgt_register_lib``
(``loadRTLs`` / ``PluginManager::init``); a device initialises at its first construct or
API routine (``device.cpp`` ``deviceIsReady``), then ``initLibrary`` maps the
declare-target globals of the images registered so far and runs the constructors of
their declare-target globals, per library in ``__tgt_bin_desc`` address order;
``__tgt_unregister_lib`` runs the destructors on the devices where the constructors ran
before its images leave.  Decoding ``__tgt_bin_desc`` and choosing the plugin of each
image is :mod:`.rtl`'s (:class:`~offload_shim.interposer.llvm.rtl.Registrations`); the
mapping table per device is :mod:`.mapping`'s.

:class:`PluginManager` is a part of
:class:`~offload_shim.interposer.llvm.interface.Interposer` (a mixin): its state is set by
:meth:`PluginManager._init_manager`; the callbacks' bridge (``_bridge``), the error list
(``errors``), the cheap path (``fast``) and the policy (:mod:`.policy`) are the
interposer's.
"""

from __future__ import annotations

import os
import threading

from ...abi import interposer as _abi
from ...abi.interposer import CB_FATAL, CB_OK
from ...core.images import OffloadImage
from ...errors import OffloadError
from . import diag, launch
from . import profile as _prof
from .mapping import (OMP_REQ_UNIFIED_SHARED_MEMORY, TGT_DISABLED, TGT_MANDATORY,
                      DeviceMapper, MapError, usm_pointers_written)
from .profile import RuntimeProfile
from .rtl import Registrations, RequiresConflict


def _run_global_function(dm: DeviceMapper, host_ptr: int) -> None:
    """Run the constructor or destructor entry ``host_ptr`` of a declare-target global
    on ``dm``'s device, with no arguments (16 ``omptarget.cpp`` ``initLibrary`` /
    ``rtl.cpp`` ``RTLsTy::unregisterLib``: ``target(..., Ctor, CTorDTorKernelArgs,
    ...)``).  Raises KeyError (no such entry in the device's images), MapError,
    OffloadError."""
    no_args = _abi.MapArgs.from_lists([], [], [], [])
    launch.target(dm, dm.device.translate(host_ptr), no_args)


class PluginManager:
    """The plugin-manager part of :class:`~offload_shim.interposer.llvm.interface
    .Interposer`: registrations (``rtls``), the release followed (:attr:`profile`), the
    device list and one :class:`DeviceMapper` per OpenMP device used."""

    def _init_manager(self, runtime, profile: RuntimeProfile | None) -> None:
        """``runtime``: the :class:`~offload_shim.Runtime` whose plugins take the
        images; ``profile``: the release to follow, None to detect it at the first
        registration."""
        # registration, unregistration, requires, initLibrary and close (libomptarget
        # 16 RTLsMtx / TrlTblMtx / PendingGlobalsMtx); never taken by a construct that
        # finds its device ready, nor by an API routine
        self._rtl_lock = threading.RLock()
        self._lib_gen = 0                       # registrations and unregistrations
        self._mappers_lock = threading.Lock()
        self._mappers: dict[int, DeviceMapper] = {}     # device number -> mapper
        self._profile: RuntimeProfile | None = profile
        self._guess: RuntimeProfile | None = None  # before the first registration
        self._registered = False
        if profile is not None:
            diag.set_profile(profile)
        self.rtls = Registrations(runtime)

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

    # -- the release (profile.py) ------------------------------------------------------
    @property
    def profile(self) -> RuntimeProfile:
        """The :class:`~offload_shim.interposer.llvm.profile.RuntimeProfile` whose behaviour
        the interposer follows: the one given to
        :func:`~offload_shim.interposer.llvm.interface.interpose`, else the release
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

    # -- devices (device.cpp deviceIsReady; 19.1 PluginManager::getDevice) -------------
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
        """Whether OpenMP device ``num`` has been used (its mapper exists)."""
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

    # -- registration (rtl.cpp RTLsTy, under RTLsMtx) ----------------------------------
    @property
    def registration_lock(self):
        """The lock every registration, unregistration and ``requires`` takes
        (libomptarget 16 ``RTLsMtx``): held, the registrations stay as they are."""
        return self._rtl_lock

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
                return self._requires_conflict(exc)
            finally:
                self.fast.invalidate()
        return CB_OK

    def _requires_conflict(self, exc: RequiresConflict) -> int:
        """libomptarget's fatal line for ``exc`` (``FATAL_MESSAGE``), kept in
        ``errors``; CB_FATAL: the C side aborts the process."""
        self.errors.append(str(exc))
        diag.fatal(exc.number, exc.text)
        return CB_FATAL

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
                return self._requires_conflict(exc)
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
                            _run_global_function(dm, dtor)
                        except (MapError, OffloadError, KeyError) as exc:
                            self.errors.append(f"destructor {dtor:#x}: {exc}")
            for num, dm in self._mappers.items():
                dm.ctors_done.discard(desc)
                for img in self.libraries.get(desc, ()):
                    dm.drop_image(img)
            self.rtls.unregister_lib(desc, self.errors)
            return CB_OK

    # -- declare-target globals (omptarget.cpp initLibrary) ----------------------------
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
                            _run_global_function(dm, ctor)
                        except (MapError, OffloadError, KeyError) as exc:
                            diag.report(f"Running ctor {diag.ptr(ctor)} failed.")
                            raise MapError(str(exc)) from None
            dm.lib_key = key

__all__ = ["PluginManager"]
