"""The API routines libomptarget 19.1 and 22.1 added, piece by piece: the per-release
answers (the runtime profile, offload_shim/interposer/llvm/profile.py), the device UIDs, the interop plans and a
CUDA-style launch (llvmLaunchKernel).  The differential tests of the same routines --
compiled programs run as they are and under ``offload-shim run`` -- are the api_*
programs of tests/programs/ (tests/test_conformance_clang.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from offload_shim.abi import interposer as abi
from offload_shim.interposer.llvm import api
from offload_shim.interposer.llvm.profile import (INTEROP_DEVICE_INFO, INTEROP_FORWARD,
                                            INTEROP_PREFERENCE, LIBOMPTARGET_16,
                                            LIBOMPTARGET_19, LIBOMPTARGET_22, profile_for)
from offload_shim.interposer.llvm.interface import TGT_DISABLED, TGT_MANDATORY


# -- the answers per release -------------------------------------------------------------
def test_what_differs_between_the_releases():
    r16, r19, r22 = LIBOMPTARGET_16, LIBOMPTARGET_19, LIBOMPTARGET_22
    assert r16.invalid_device is None                    # 16 returns an error
    with pytest.raises(ValueError):
        r16.invalid_device_text(-1, 4)
    assert f"{r19.name} fatal error -1: {r19.invalid_device_text(-1, 4)}" == \
        "omptarget fatal error -1: Device number '-1' out of range, only 4 devices available"
    assert f"{r22.name} fatal error 7: {r22.invalid_device_text(7, 0)}" == (
        "omptarget fatal error 7: \"invalid value\" device number '7' out of range, only 0 "
        "devices available")
    assert (r16.devices_when_disabled, r19.devices_when_disabled,
            r22.devices_when_disabled) == (False, True, False)
    assert (r16.interop, r19.interop, r22.interop) == (INTEROP_FORWARD,
                                                       INTEROP_DEVICE_INFO,
                                                       INTEROP_PREFERENCE)


# -- a stand-in Interposer ----------------------------------------------------------------
class _Plugin:
    def __init__(self, name):
        self.name = name
        self.asked = []

    def init_device_info(self, dev):
        self.asked.append(dev)
        return False


class _Ip:
    """What the API functions use of an Interposer: the device list, the number of
    devices the program sees, the policy, the rules of its runtime."""

    def __init__(self, llvm, devices, *, policy=TGT_MANDATORY, visible=None):
        self.profile = profile_for(llvm)
        self.devices = devices
        self._visible = len(devices) if visible is None else visible
        self._policy = policy
        self.errors = []
        self.fatal = []

    def num_devices(self):
        return self._visible

    def policy(self):
        return self._policy

    def device_ready(self, num):
        return 0 <= num < len(self.devices)

    def check_device_number(self, dev, *, initial_ok=True):
        top = self._visible if initial_ok else self._visible - 1
        if not 0 <= dev <= top:
            p = self.profile
            self.fatal.append(f"{p.name} fatal error {dev}: "
                              f"{p.invalid_device_text(dev, self._visible)}")
            raise SystemExit("aborted")


def _devices(*spec):
    """[(plugin, count), ...] -> Device stand-ins numbered as libomptarget appends them."""
    out = []
    for plugin, count in spec:
        out += [SimpleNamespace(plugin=plugin, index=i) for i in range(count)]
    return out


def _text(addr):
    try:
        return abi.read_cstring(addr).decode()
    finally:
        abi.free(addr)


def test_device_uids_name_the_plugin_family_and_stay_unique():
    nextgen, classic = _Plugin("x86_64.nextgen"), _Plugin("x86_64")
    cuda, bundled = _Plugin("cuda.nextgen"), _Plugin("osh_hostplugin")
    ip = _Ip(22, _devices((nextgen, 2), (classic, 2), (cuda, 1), (bundled, 1)))
    uids = [api.device_uid(ip, n) for n in range(len(ip.devices))]
    # the second x86_64 plugin is x86_64.1, so every UID is its device's
    assert uids == [b"x86_64-0", b"x86_64-1", b"x86_64.1-0", b"x86_64.1-1", b"CUDA-0",
                    b"osh_host-0"]
    with pytest.raises(IndexError):
        api.device_uid(ip, len(ip.devices))
    with pytest.raises(IndexError):
        api.device_uid(ip, -1)


def test_uid_routines_round_trip_and_refuse_what_is_no_device():
    ip = _Ip(22, _devices((_Plugin("x86_64.nextgen"), 3)))
    assert _text(api.uid_from_device(ip, 3)) == "HOST"            # the initial device
    assert api.uid_from_device(ip, api.OMP_INVALID_DEVICE) == 0    # NULL, no fatal
    for n in range(3):
        uid = abi.c_string_copy(api.device_uid(ip, n))
        try:
            assert api.device_from_uid(ip, uid) == n
        finally:
            abi.free(uid)
    for text, want in ((b"HOST", 3), (b"host", -2), (b"", -2), (b"x86_64-3", -2)):
        addr = abi.c_string_copy(text)
        try:
            assert api.device_from_uid(ip, addr) == want, text
        finally:
            abi.free(addr)
    assert api.device_from_uid(ip, 0) == api.OMP_INVALID_DEVICE
    with pytest.raises(SystemExit):
        api.uid_from_device(ip, -1)
    with pytest.raises(SystemExit):
        api.uid_from_device(ip, 4)
    assert ip.fatal[-1].startswith("omptarget fatal error 4: \"invalid value\"")
    # OMP_TARGET_OFFLOAD=disabled: no device is seen, the host is device 0
    off = _Ip(22, _devices((_Plugin("x86_64.nextgen"), 3)), visible=0)
    assert _text(api.uid_from_device(off, 0)) == "HOST"
    addr = abi.c_string_copy(b"x86_64-0")
    try:
        assert api.device_from_uid(off, addr) == api.OMP_INVALID_DEVICE
    finally:
        abi.free(addr)


def test_is_accessible_as_libomptarget_22():
    ip = _Ip(22, _devices((_Plugin("x86_64.nextgen"), 2)))
    assert api.is_accessible(ip, 0, 8, 99) == 0          # NULL first: no fatal
    assert api.is_accessible(ip, 0x1000, 8, 2) == 1      # the initial device
    assert api.is_accessible(ip, 0x1000, 8, api.OMP_INITIAL_DEVICE) == 1
    assert api.is_accessible(ip, 0x1000, 8, 0) == 0      # no device says it reaches it
    with pytest.raises(SystemExit):
        api.is_accessible(ip, 0x1000, 8, 3)
    assert ip.fatal == ["omptarget fatal error 3: \"invalid value\" device number '3' out "
                        "of range, only 2 devices available"]


def test_interop_plans_follow_the_program_runtime():
    plugin = _Plugin("x86_64.nextgen")
    devs = _devices((plugin, 2))
    i16, i19, i22 = _Ip(16, devs), _Ip(19, devs), _Ip(22, devs)
    init = abi.IOP_OP_INIT
    # 16: the program's own libomptarget does init, use and destroy
    assert all(api.interop(i16, op, 1, 0, 0) == abi.IOP_FORWARD
               for op in (init, abi.IOP_OP_USE, abi.IOP_OP_DESTROY))
    # 19.1: targetsync waits; the device's plugin is asked for its device info
    assert api.interop(i19, init, 1, 0, 0) == abi.IOP_WAIT | abi.IOP_DEVICE_INFO
    assert api.interop(i19, init, 0, 1, 0) == abi.IOP_DEVICE_INFO
    assert api.interop(i19, init, 0, 5, 0) == 0          # no device: none, no question
    assert api.interop(i19, abi.IOP_OP_DEVICE_INFO, 0, 1, 0) == 0 and plugin.asked == [1]
    assert api.interop(i19, abi.IOP_OP_USE, 0, 1, 0) == 0
    # 22.1: targetsync waits only for depend clauses it has; nothing when disabled
    assert api.interop(i22, init, 1, 0, 2) == abi.IOP_WAIT
    assert api.interop(i22, init, 1, 0, 0) == 0
    assert api.interop(_Ip(22, devs, policy=TGT_DISABLED), init, 1, 0, 2) == 0
    # the OpenMP 6.0 entry points answer as 22.1 whatever the program links
    assert api.interop(i16, abi.IOP_OP_GET, 1, 0, 1) == abi.IOP_WAIT
    assert api.interop(i16, abi.IOP_OP_USE60, 0, 0, 0) == -1
    assert api.interop(i22, abi.IOP_OP_RELEASE, 0, 0x1234, 0) == -1
    assert api.interop(i22, abi.IOP_OP_CALLBACK, 0, 0, 0) == api.OMP_IRC_OTHER
    with pytest.raises(ValueError, match="unknown interop operation 99"):
        api.interop(i22, 99, 0, 0, 0)


def test_dispatch_refuses_an_unknown_routine():
    with pytest.raises(ValueError, match="unknown API routine 99"):
        api.dispatch(_Ip(22, []), 99, [])


def test_c_string_copy_refuses_a_nul():
    with pytest.raises(ValueError, match="NUL"):
        abi.c_string_copy(b"a\0b")
    assert _text(abi.c_string_copy(b"x86_64-0")) == "x86_64-0"


# -- a CUDA-style launch through the interposer ------------------------------------------
_LAUNCH_DRIVER = r"""
import ctypes, json, sys
import offload_shim as osh
from offload_shim.hostplugin import bundled_plugin_path
lib_path, policy = sys.argv[1], sys.argv[2]
class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]
with osh.Runtime([str(bundled_plugin_path())]) as rt, osh.interpose(rt, policy=policy) as ip:
    lib = ip.load_library(lib_path)
    img = [i for imgs in ip.libraries.values() for i in imgs][0]
    region = img.host_addresses()[0]
    launch = ctypes.CDLL(None).llvmLaunchKernel
    launch.restype = ctypes.c_uint
    launch.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t,
                       ctypes.c_void_p]
    rc = launch(region, Dim3(1, 1, 1), Dim3(1, 1, 1), None, 0, None)
    print(json.dumps({"rc": rc, "errors": list(ip.errors)}))
    sys.stdout.flush()
    ip.unload_library(lib)
"""


@pytest.mark.parametrize("policy", ["mandatory", "disabled"])
def test_a_cuda_style_launch_of_a_kernel_is_refused_by_name(policy):
    """llvmLaunchKernel of a real kernel (KernelArgsTy Flags.IsCUDA: one packed argument
    buffer) is refused in one line and fails as a construct does: fatal under a
    mandatory policy (libomptarget's line, abort), the host fallback's -1 when
    offloading is disabled (the device is never asked)."""
    from clang_toolchains import CLANG22, ROOT
    why = CLANG22.missing()
    if why:
        pytest.skip(why)
    lib = CLANG22.build(ROOT / "tests" / "data" / "clang" / "current_clang.c", shared=True,
                        defines=("main=osh_main",))
    proc = subprocess.run([sys.executable, "-c", _LAUNCH_DRIVER, str(lib), policy],
                          capture_output=True, text=True, timeout=180)
    refused = [l for l in proc.stderr.splitlines() if "llvmLaunchKernel" in l]
    if policy == "mandatory":
        assert proc.returncode == -6, proc.stdout + proc.stderr
        assert len(refused) == 1 and "not supported" in refused[0]
        assert "omptarget fatal error 1: failure of target construct while offloading is "                "mandatory" in proc.stderr.splitlines()
    else:
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.splitlines()[-1]) == {"rc": 0xFFFFFFFF, "errors": []}
        assert refused == []
