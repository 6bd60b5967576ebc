"""Whether a construct offloads, and what its failure does: libomptarget's offload policy.

Mirrors libomptarget 16 ``omptarget.cpp``: ``isOffloadDisabled`` and
``handleDefaultTargetOffload`` (``OMP_TARGET_OFFLOAD``, read from libomp's
``__kmpc_get_target_offload``: ``disabled``; ``default`` decided at the first construct --
mandatory with a device, else disabled -- and kept; ``mandatory``), ``checkDeviceAndCtors``
(the device to offload to: none when offload is disabled or the number is the host
device's; a device that does not initialise, or whose declare-target globals cannot be
mapped, fails the construct) and ``handleTargetOutcome`` (under ``mandatory`` a failed
construct prints ``Consult ...`` or the mapping tables under ``LIBOMPTARGET_INFO`` bit 4,
the source location, ``Libomptarget fatal error 1: failure of target construct while
offloading is mandatory`` and the process aborts).  19.1 and 22.1 read the policy in
``OffloadPolicy.h`` ``OffloadPolicy::get`` and check the device in ``interface.cpp``
``checkDevice`` then ``PluginManager::getDevice`` (a number that is no device: one fatal
line); the differences are fields of the
:class:`~offload_shim.interposer.llvm.profile.RuntimeProfile`.

:class:`OffloadPolicy` is a part of
:class:`~offload_shim.interposer.llvm.interface.Interposer` (a mixin): the policy's own
state is set by :meth:`OffloadPolicy._init_policy`; the device list, the mapping tables
and ``initLibrary`` are the plugin manager's
(:class:`~offload_shim.interposer.llvm.plugin_manager.PluginManager`).
"""

from __future__ import annotations

import os

from ...abi import interposer as _abi
from ...abi.interposer import CB_FAIL, CB_FATAL, CB_OK
from ...errors import OffloadError
from . import diag
from .mapping import TGT_DEFAULT, TGT_DISABLED, TGT_MANDATORY, DeviceMapper, MapError

#: ``device_id`` of a construct that names no device (``omptarget.h``)
OFFLOAD_DEVICE_DEFAULT = -1
_POLICIES = {"disabled": TGT_DISABLED, "default": TGT_DEFAULT, "mandatory": TGT_MANDATORY}


def _environment_policy() -> int:
    """``OMP_TARGET_OFFLOAD`` from the environment, where libomp's own value is not at
    hand: as libomp parses it (``kmp_settings.cpp`` ``__kmp_stg_parse_target_offload``:
    anything but ``mandatory`` or ``disabled`` is ``default``)."""
    env = os.environ.get("OMP_TARGET_OFFLOAD", "default").strip().lower()
    return {"disabled": TGT_DISABLED, "mandatory": TGT_MANDATORY}.get(env, TGT_DEFAULT)


class OffloadPolicy:
    """The offload-policy part of :class:`~offload_shim.interposer.llvm.interface
    .Interposer`: ``OMP_TARGET_OFFLOAD``, ``checkDeviceAndCtors`` and
    ``handleTargetOutcome``."""

    # -- OMP_TARGET_OFFLOAD (isOffloadDisabled, handleDefaultTargetOffload) --------------
    def _init_policy(self, policy: str | None) -> None:
        """``policy``: the override of ``OMP_TARGET_OFFLOAD`` (``"disabled"``,
        ``"default"``, ``"mandatory"``) or None to read it."""
        self._policy_override = policy
        self._decided_policy: int | None = None
        self._read_policy: int | None = None       # OMP_TARGET_OFFLOAD as read once

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
        (``RuntimeProfile.policy_at_registration``: ``__tgt_register_lib``
        (:meth:`~offload_shim.interposer.llvm.plugin_manager.PluginManager._on_register`)
        reads it at the first registration for 16 and 22.1, so a ``setenv`` in ``main``
        is too late there; 19.1 reads it at the first construct)."""
        if self._policy_override is not None:
            return _POLICIES[self._policy_override.lower()]
        p = self._read_policy
        if p is not None:
            return p
        p = _abi.kmpc_target_offload(_abi.libomp())
        if p is None:
            p = _environment_policy()
        self._read_policy = p
        return p

    def _peek_policy(self) -> int:
        """:meth:`_raw_policy` without reading it for good (19.1 reads it at the first
        construct, so a ``setenv`` in ``main`` still counts there)."""
        if self._policy_override is not None or self._read_policy is not None:
            return self._raw_policy()
        return _environment_policy()

    # -- checkDeviceAndCtors --------------------------------------------------------
    def _default_device(self) -> int:
        """``omp_get_default_device()`` of libomp (``OMP_DEFAULT_DEVICE`` when libomp
        is not loaded): the device of a construct that names none."""
        omp = _abi.libomp()
        if omp is not None:
            return _abi.omp_default_device(omp)
        return int(os.environ.get("OMP_DEFAULT_DEVICE", "0") or 0)

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

    # -- handleTargetOutcome ---------------------------------------------------------
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
        """``message`` kept in ``errors``, then ``handleTargetOutcome`` of a failure."""
        self.errors.append(message)
        return self._outcome(False, loc)

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
        return self._outcome_fail(f"{type(exc).__name__}: {exc}", loc)


__all__ = ["OFFLOAD_DEVICE_DEFAULT", "OffloadPolicy"]
