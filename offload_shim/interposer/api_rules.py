"""How the API routines differ between the libomptarget releases programs link.

The one place where the answers of libomptarget 16, 19.1 and 22.1 to the same API call
are told apart, as data: :data:`RULES` (one :class:`ApiRules` per release) and
:func:`rules_for`, chosen by :attr:`Interposer.host_runtime` (the ``libomptarget.so.N``
mapped into the process).  A stand-in until ``interposer/profile.py``'s
``RuntimeProfile`` (chosen once per process from the same library) takes these fields
over.

Every field was checked against the Debian builds (16.0.6, 19.1.7, 22.1.8) by running
programs built by clang-16, -19 and -22 as they are (tests/programs/api_*), and is read
from the upstream sources named on it.
"""

from __future__ import annotations

from collections import namedtuple

#: ``ApiRules.interop`` values: what ``__tgt_interop_init`` & co. do
INTEROP_FORWARD = "forward"          # 16: the program's libomptarget does it
INTEROP_DEVICE_INFO = "device-info"  # 19.1: the plugin's init_device_info, else none
INTEROP_PREFERENCE = "preference"    # 22.1: the plugin's interop preference, else none


class ApiRules(namedtuple("ApiRules", "llvm fatal_device devices_when_disabled interop")):
    """What the API routines of one libomptarget release answer where releases differ
    (immutable; a namedtuple: ``dataclasses`` would cost the embedded runtime's
    start-up the import of ``inspect``).

    ``llvm``: the LLVM major it describes.
    ``fatal_device``: the text of the fatal error an API routine stops the program with
    when given a device number that is neither a device nor the initial device
    (``PluginManager::getDevice`` -> ``FATAL_MESSAGE(DeviceNum, "%s", ...)``, 19.1/22.1
    ``OpenMP/API.cpp``); ``{dev}`` and ``{n}`` are filled in.  None: the release returns
    an error instead (16 ``api.cpp``: ``deviceIsReady`` / ``DevicesSize``).
    ``devices_when_disabled``: ``omp_get_num_devices()`` reports the devices under
    ``OMP_TARGET_OFFLOAD=disabled`` (19.1 loads its plugins whatever the policy; 16
    ``RTLsTy::loadRTLs`` and 22.1 report 0).
    ``interop``: :data:`INTEROP_FORWARD` (16: the objects are made and read by the
    program's own libomptarget, whose plugin manager exists from its constructor on;
    libomp's ``omp_get_interop_*`` reach that library with ``dlsym(RTLD_NEXT)``
    whatever offload_shim exports), :data:`INTEROP_DEVICE_INFO` (19.1
    ``OpenMP/InteropAPI.cpp`` ``__tgt_interop_init``: targetsync waits for the depend
    clauses, the device's plugin is asked for its device info -- the LLVM 16 nextgen
    plugin prints ``Failure to initialize device info`` -- and the object is
    ``omp_interop_none``), :data:`INTEROP_PREFERENCE` (22.1 ``__tgt_interop_get``,
    llvm-project PR #143491, its 5.1 wrappers PR #161429: nothing under ``disabled``,
    targetsync waits for its depend clauses, ``omp_interop_none`` unless the plugin
    selects a foreign runtime, which the LLVM 16 plugins cannot).
    """

    __slots__ = ()

    def fatal_device_text(self, dev: int, n: int) -> str | None:
        """The fatal line for device number ``dev`` with ``n`` devices (no newline), or
        None when this release does not stop the program."""
        if self.fatal_device is None:
            return None
        return self.fatal_device.format(dev=dev, n=n)


RULES: dict[int, ApiRules] = {
    16: ApiRules(16, None, False, INTEROP_FORWARD),
    19: ApiRules(19, "omptarget fatal error {dev}: Device number '{dev}' out of range, "
                     "only {n} devices available", True, INTEROP_DEVICE_INFO),
    22: ApiRules(22, "omptarget fatal error {dev}: \"invalid value\" device number '{dev}' "
                     "out of range, only {n} devices available", False, INTEROP_PREFERENCE),
}


def rules_for(llvm_major: int) -> ApiRules:
    """The rules of libomptarget ``llvm_major``: 16-18 answer as 16, 19 as 19.1, 20 and
    later as 22.1 (17, 18, 20 and 21 are not installed here: untested, as the
    interposer answered them before these rules were data); raises ValueError for a
    release older than 16 or a major that is not an int."""
    if not isinstance(llvm_major, int) or isinstance(llvm_major, bool):
        raise ValueError(f"LLVM major must be an int, not {llvm_major!r}")
    if llvm_major < 16:
        raise ValueError(f"no API rules for libomptarget {llvm_major} (16 is the oldest)")
    return RULES[16 if llvm_major < 19 else 19 if llvm_major == 19 else 22]


__all__ = ["ApiRules", "INTEROP_DEVICE_INFO", "INTEROP_FORWARD", "INTEROP_PREFERENCE",
           "RULES", "rules_for"]
