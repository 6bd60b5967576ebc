"""The liboffload (ol*) family: ABI tables against the release header, the bundled plugin's
ol* view end to end through the runtime, errors with liboffload's code and message, pinned
memory through olMemRegister, the lifecycle machine and the misuse probes, and the real
liboffload 22 (unpacked by scripts/setup.sh; skipped with the reason when absent)."""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
from array import array
from pathlib import Path

import pytest

import offload_shim as osh
from offload_shim.abi import liboffload as L
from offload_shim.hostplugin import ABI_LIBOFFLOAD
from offload_shim.plugins.liboffload import LiboffloadPlugin
from offload_shim.plugins.loader import load_plugin

from conftest import liboffload22_path


@pytest.fixture(scope="module")
def ol(bundled_path):
    return load_plugin(bundled_path, abi="liboffload")


# -- abi/liboffload.py against OffloadAPI.h of the release ---------------------------------

def test_struct_layouts():
    assert ctypes.sizeof(L.ErrorStruct) == 16 and L.ErrorStruct.Details.offset == 8
    assert ctypes.sizeof(L.Dimensions) == 12
    assert ctypes.sizeof(L.KernelLaunchSizeArgs) == 40
    assert [getattr(L.KernelLaunchSizeArgs, f).offset for f in
            ("Dimensions", "NumGroups", "GroupSize", "DynSharedMemory")] == [0, 8, 20, 32]
    assert ctypes.sizeof(L.CodeLocation) == 24
    buf = L.pack_arguments([1, -1, 1 << 63])
    assert bytes(buf) == (1).to_bytes(8, "little") + b"\xff" * 8 + (1 << 63).to_bytes(8, "little")


def test_handles_are_distinct_types(ol, ctl):
    """A queue passed where a device is expected fails in ctypes, not in the library."""
    n = ctl.call_count("olCreateQueue")
    with pytest.raises(ctypes.ArgumentError):
        ol.entry_point("olCreateQueue")(L.ol_queue_handle_t(), ctypes.byref(L.ol_queue_handle_t()))
    assert ctl.call_count("olCreateQueue") == n


def _header() -> str:
    p = liboffload22_path()
    if p is None:
        pytest.skip("liboffload 22 not unpacked (scripts/setup.sh)")
    h = p.parent.parent / "include/offload/OffloadAPI.h"
    if not h.exists():
        pytest.skip(f"{h} missing (liboffload-22-dev)")
    return h.read_text()


def test_enums_match_the_release_header():
    text = _header()
    blocks = {m.group(1): m.group(2)
              for m in re.finditer(r"typedef enum (\w+) \{(.*?)\} \1;", text, re.S)}
    enums = {"ol_errc_t": (L.Errc, "OL_ERRC_"), "ol_alloc_type_t": (L.AllocType, "OL_ALLOC_TYPE_"),
             "ol_device_type_t": (L.DeviceType, "OL_DEVICE_TYPE_"),
             "ol_platform_backend_t": (L.PlatformBackend, "OL_PLATFORM_BACKEND_"),
             "ol_platform_info_t": (L.PlatformInfo, "OL_PLATFORM_INFO_"),
             "ol_device_info_t": (L.DeviceInfo, "OL_DEVICE_INFO_"),
             "ol_mem_info_t": (L.MemInfo, "OL_MEM_INFO_"),
             "ol_queue_info_t": (L.QueueInfo, "OL_QUEUE_INFO_"),
             "ol_event_info_t": (L.EventInfo, "OL_EVENT_INFO_"),
             "ol_symbol_kind_t": (L.SymbolKind, "OL_SYMBOL_KIND_"),
             "ol_symbol_info_t": (L.SymbolInfo, "OL_SYMBOL_INFO_")}
    for cname, (cls, prefix) in enums.items():
        header = {k: int(v) for k, v in re.findall(rf"\b{prefix}(\w+) = (\d+),", blocks[cname])
                  if k not in ("LAST",)}
        assert {e.name: e.value for e in cls} == header, cname


def test_prototype_arity_matches_the_release_header():
    text = _header()
    decls = {}
    for m in re.finditer(r"OL_APIEXPORT ol_result_t OL_APICALL\s+(ol\w+)\((.*?)\);", text, re.S):
        params = "\n".join(ln for ln in m.group(2).splitlines()
                           if not ln.strip().startswith("//")).strip()
        decls[m.group(1)] = 0 if not params else params.count(",") + 1
    for name, (_, argtypes) in L.PROTOTYPES.items():
        if name == "olGetKernel":                      # the 21 shape: not in 22
            assert name not in decls
            continue
        assert decls[name] == len(argtypes), name
    assert set(L.REQUIRED) <= set(decls)


def test_classify_by_exported_names():
    req = set(L.REQUIRED)
    assert L.classify(req | {"olGetSymbol", "olGetSymbolInfo"}) == "liboffload22"
    assert L.classify(req | {"olGetKernel"}) == "liboffload21"
    assert L.classify({"olGetPlatformCount", "olGetPlatform", "olGetDeviceInfo"}) == "liboffload20"
    assert L.classify({"__tgt_rtl_init_device", "GOMP_OFFLOAD_version"}) is None
    assert L.missing(req | {"olGetSymbol"}) == ["olGetSymbolInfo"]


# -- the bundled plugin's ol* view through the runtime ---------------------------------------

def test_bundled_exports_the_view(ol, bundled_path):
    assert isinstance(ol, LiboffloadPlugin) and ol.abi == "liboffload"
    assert ol.generation == "liboffload22"
    assert load_plugin(bundled_path).abi == "llvm"          # default view unchanged
    assert {"olInit", "olMemRegister", "olGetSymbolInfo"} <= ol.symbols


def _recording(plugin, names, log):
    """Wrap bound entry points so their calls are logged in order."""
    saved = {}
    for n in names:
        fn = plugin._fn[n]
        saved[n] = fn

        def wrap(*a, _fn=fn, _n=n):
            log.append(_n)
            return _fn(*a)
        plugin._fn[n] = wrap
    return saved


def test_end_to_end_and_teardown_order(ol, ctl):
    n = 256
    log: list[str] = []
    calls0 = ctl.call_counts(["olInit", "olShutDown", "olCreateQueue", "olDestroyQueue"])
    saved = _recording(ol, ["olMemFree", "olDestroyProgram", "olDestroyQueue", "olShutDown"], log)
    try:
        with osh.Runtime([ol]) as rt:
            assert len(rt.devices) == ctl.ol_refcount() * 4 == 4
            assert ol.host_device.is_host and not any(d.is_host for d in ol.compute_devices)
            img = osh.OffloadImage.sample()
            rt.register_image(img)
            dev = rt.devices[1]
            a, b, c = (dev.alloc(8 * n) for _ in range(3))
            dev.submit(a, array("d", range(n)))
            dev.submit(b, array("d", (2.0 * i for i in range(n))))
            dev.launch("vec_add", [a, b, c, n])
            dev.launch("scale_by_global", [c, n])
            out = array("d", bytes(8 * n))
            dev.retrieve(out, c)
            assert list(out) == [9.0 * i for i in range(n)]
            g = dev.global_address("osh_scale")
            assert dev.translate(img.host_address("osh_scale")) == g
            gv = array("d", [0.0])
            dev.retrieve(gv, g)
            assert gv[0] == 3.0
            assert ctl.ol_live_queues(1) == 1 and ctl.ol_live_programs(1) == 1
            assert ctl.is_device_initialized(ABI_LIBOFFLOAD, 1)
            assert not ctl.is_device_initialized(ABI_LIBOFFLOAD, 0)
            for p in (a, b):
                dev.free(p)
            held = c                                     # freed by the teardown
            del held
        # pool -> programs -> queues -> olShutDown
        assert log.index("olDestroyProgram") > max(i for i, x in enumerate(log) if x == "olMemFree")
        assert log.index("olDestroyQueue") > log.index("olDestroyProgram")
        assert log[-1] == "olShutDown" and log.count("olShutDown") == 1
    finally:
        ol._fn.update(saved)
    calls = ctl.call_counts(list(calls0))
    assert {k: calls[k] - calls0[k] for k in calls} == {
        "olInit": 1, "olShutDown": 1, "olCreateQueue": 1, "olDestroyQueue": 1}
    assert ctl.ol_refcount() == 0 and ctl.ol_live_queues() == 0 and ctl.ol_live_programs() == 0


def test_olinit_once_for_runtimes_sharing_the_plugin(ol, ctl):
    c0 = ctl.call_counts(["olInit", "olShutDown"])
    rt1 = osh.Runtime([ol])
    rt2 = osh.Runtime([ol])
    rt1.devices, rt2.devices
    assert ctl.ol_refcount() == 1
    with pytest.raises(ValueError, match="liboffload"):
        ctl.set_num_devices(2)                          # refused while olInit holds
    rt1.close()
    assert ctl.ol_refcount() == 1 and ol.initialized
    rt2.close()
    assert ctl.ol_refcount() == 0 and not ol.initialized
    with osh.Runtime([ol]) as rt3:                       # initialised again after 0
        d = rt3.devices[0]
        d.free(d.alloc(64))
    c1 = ctl.call_counts(["olInit", "olShutDown"])
    assert c1 == {"olInit": c0["olInit"] + 2, "olShutDown": c0["olShutDown"] + 2}


def test_errors_carry_liboffload_code_and_details(ol, ctl):
    with osh.Runtime([ol]) as rt:
        img = osh.OffloadImage.sample()
        rt.register_image(img)
        d0, d1, d2 = rt.devices[:3]
        ctl.fail_nth("olCreateQueue", 1)
        try:
            with pytest.raises(osh.DeviceInitError) as ei:
                d0.init()
        finally:
            ctl.fail_nth("olCreateQueue", 0)
        e = ei.value
        assert (e.code, e.function, e.device) == (L.Errc.UNKNOWN, "olCreateQueue",
                                                   "osh_hostplugin:0")
        assert "UNKNOWN (1)" in str(e) and "injected failure" in str(e)
        ctl.fail_nth("olCreateProgram", 1)
        try:
            with pytest.raises(osh.InvalidImageError) as ei:
                d1.init()
        finally:
            ctl.fail_nth("olCreateProgram", 0)
        assert ei.value.code == L.Errc.UNKNOWN and ei.value.function == "olCreateProgram"
        assert d1.state is osh.DeviceState.UNINIT and ctl.ol_live_queues(1) == 0
        p = d2.alloc(64)
        ctl.fail_nth("olMemcpy", 1)
        try:
            with pytest.raises(osh.PluginCallError) as ei:
                d2.submit(p, bytes(64))
        finally:
            ctl.fail_nth("olMemcpy", 0)
        assert ei.value.code == 1 and ei.value.function == "olMemcpy"
        ctl.set_capacity(2, 4096)
        try:
            with pytest.raises(osh.OutOfDeviceMemoryError):
                d2.alloc(8192)                          # OUT_OF_RESOURCES -> the OOM ladder
        finally:
            ctl.set_capacity(-1, 0)
        d2.free(p)


def test_missing_symbol_is_not_found(ol, sample_path):
    data = Path(sample_path).read_bytes()
    img = osh.OffloadImage(data, [osh.HostEntry("no_such_kernel", 0)], name="bad")
    with osh.Runtime([ol]) as rt:
        dev = rt.devices[0]
        dev.init()
        with pytest.raises(osh.InvalidImageError) as ei:
            rt.register_image(img)
        assert ei.value.code == L.Errc.NOT_FOUND and ei.value.function == "olGetSymbol"
        assert "olGetSymbol('no_such_kernel') failed: NOT_FOUND (6)" in str(ei.value)
        assert img not in rt.images


def test_pinned_memory_through_olmemregister(ol, ctl):
    from offload_shim.memory import pinned as pm
    page = pm.PAGE
    buf = bytearray(2 * page)
    v0 = pm.vmlck_bytes()
    with osh.Runtime([ol], pinned="mapped") as rt:
        dev = rt.devices[0]
        t = dev.alloc(2 * page)
        dev.submit(t, buf)
        (r,) = rt.pinned_memory.ranges(dev)
        assert r.backend == "olMemRegister" and r.size == 2 * page
        assert pm.vmlck_bytes() > v0                     # the ol* view mlocks
        dev.free(t)
        assert rt.pinned_memory.ranges(dev) == []
    assert pm.vmlck_bytes() == v0


def test_lifecycle_machine_on_the_view(bundled_path):
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    from offload_shim.testing import make_lifecycle_machine
    m = make_lifecycle_machine(bundled_path, "liboffload")
    assert m.faults and m.threads
    run_state_machine_as_test(m, settings=settings(
        max_examples=150, stateful_step_count=20, deadline=None, derandomize=True,
        database=None, suppress_health_check=list(HealthCheck)))


def test_probes_of_the_view_all_answered(bundled_path):
    from offload_shim.testing.probes import run_probes
    rows = {r["probe"]: r for r in run_probes(bundled_path, "liboffload", timeout=60)}
    assert len(rows) >= 20
    bad = {k: r["outcome"] for k, r in rows.items()
           if not r["outcome"].startswith(("error", "returned"))}
    assert bad == {}
    assert rows["alloc_on_host_device"]["outcome"] == "error (UNSUPPORTED 13)"
    assert "host_device in olMemAlloc" in rows["alloc_on_host_device"]["detail"]
    assert rows["iterate_devices_before_init"]["outcome"] == "error (UNINITIALIZED 18)"
    assert "unknown_queue in olDestroyQueue" in rows["destroy_queue_unknown"]["detail"]
    assert "shutdown_with_live_objects" in rows["shutdown_with_live_queue"]["detail"]


# -- the real liboffload 22 ----------------------------------------------------------------------

def test_real_liboffload22_loads_and_enumerates(liboffload22, sample_path):
    p = load_plugin(liboffload22)
    assert isinstance(p, LiboffloadPlugin) and p.generation == "liboffload22"
    assert p.name == "LLVMOffload"
    for _ in range(2):                                  # olShutDown to 0, then olInit again
        with osh.Runtime([p]) as rt:
            rt_devices = rt.devices                      # acquires: olInit
            devs = p.devices_info()
            hosts = [d for d in devs if d["type"] == "HOST"]
            assert len(hosts) == 1 and hosts[0]["index"] is None
            assert hosts[0]["name"] == "Virtual Host Device" and hosts[0]["backend"] == "HOST"
            assert len(rt_devices) == len(devs) - 1       # the host device is no Device
            assert all(pl["name"] for pl in p.platforms_info())
            if not rt.devices:                            # no GPU here: nothing accepts x86-64
                with pytest.raises(osh.InvalidImageError):
                    rt.register_image(osh.OffloadImage.from_file(sample_path))
                # the host device (olMemAlloc/olCreateQueue segfault on it) is no device
                # number: refused in Python
                for call in (lambda: p.alloc(0, 64), lambda: p.acquire_device(0),
                             lambda: p.lock(0, 4096, 64)):
                    with pytest.raises(ValueError, match="out of range"):
                        call()
        with pytest.raises(osh.LifecycleError):           # after olShutDown: nothing reaches it
            p.alloc(0, 64)


def test_real_liboffload22_misuse_differs_from_the_view(liboffload22):
    """Differential rows of the conformance table: the real library segfaults where the
    bundled view records a violation, and both answer UNINITIALIZED before olInit."""
    from offload_shim.testing.probes import run_probe
    crash = run_probe(liboffload22, None, "alloc_on_host_device", timeout=60)
    assert crash["outcome"] == "crash SIGSEGV in olMemAlloc"
    uninit = run_probe(liboffload22, None, "iterate_devices_before_init", timeout=60)
    assert uninit["outcome"] == "error (UNINITIALIZED 18)"
    assert "please call olInit" in uninit["detail"]


def test_info_and_check_cli_on_real_liboffload22(liboffload22):
    proc = subprocess.run([sys.executable, "-P", "-m", "offload_shim.cli", "info", "--json",
                           "--no-system", liboffload22], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    # `info` names the file it loaded (symlinks resolved: the runtime folder may be one)
    want = os.path.realpath(liboffload22)
    rec = next(r for r in json.loads(proc.stdout) if os.path.realpath(r["path"]) == want)
    assert rec["abi"] == "liboffload" and rec["generation"] == "liboffload22"
    assert [d["name"] for d in rec["ol_devices"] if d["type"] == "HOST"] == ["Virtual Host Device"]
    assert [pl["backend"] for pl in rec["ol_platforms"]].count("HOST") == 1
    from offload_shim.cli.check import run_check
    res = run_check(liboffload22, max_examples=30, steps=15, timeout=300)
    assert res["ok"], res["findings"]


def test_demo_runs_the_view(bundled_path):
    proc = subprocess.run([sys.executable, "-P", "-m", "offload_shim.cli", "demo", "--one",
                           bundled_path, "--abi", "liboffload"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(liboffload, liboffload22)" in proc.stdout and "VERIFIED" in proc.stdout


_STUB_21 = r"""
/* the liboffload 21 shape (olGetKernel, no olGetSymbol/olGetSymbolInfo): one host device */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
typedef struct { int32_t Code; const char *Details; } err_t;
static err_t unsupported = {13, "stub"};
static int host_device, host_platform;
typedef bool (*cb_t)(void *, void *);
const err_t *olInit(void) { return NULL; }
const err_t *olShutDown(void) { return NULL; }
const err_t *olIterateDevices(cb_t cb, void *ud) { cb(&host_device, ud); return NULL; }
static const err_t *put(const void *v, size_t n, size_t size, void *out, size_t *ret) {
  if (ret) { *ret = n; return NULL; }
  memcpy(out, v, n < size ? n : size);
  return NULL;
}
static const err_t *dev_info(void *d, uint32_t p, size_t size, void *out, size_t *ret) {
  uint32_t type = 4; void *plat = &host_platform;
  (void)d;
  if (p == 0) return put(&type, 4, size, out, ret);
  if (p == 1) return put(&plat, 8, size, out, ret);
  if (p == 2) return put("stub host", 10, size, out, ret);
  return &unsupported;
}
const err_t *olGetDeviceInfo(void *d, uint32_t p, size_t s, void *v) { return dev_info(d, p, s, v, NULL); }
const err_t *olGetDeviceInfoSize(void *d, uint32_t p, size_t *r) { return dev_info(d, p, 0, NULL, r); }
static const err_t *plat_info(uint32_t p, size_t size, void *out, size_t *ret) {
  uint32_t backend = 4;
  if (p == 3) return put(&backend, 4, size, out, ret);
  if (p == 0) return put("stub", 5, size, out, ret);
  return &unsupported;
}
const err_t *olGetPlatformInfo(void *pl, uint32_t p, size_t s, void *v) { (void)pl; return plat_info(p, s, v, NULL); }
const err_t *olGetPlatformInfoSize(void *pl, uint32_t p, size_t *r) { (void)pl; return plat_info(p, 0, NULL, r); }
#define UNSUPPORTED(name) const err_t *name(void) { return &unsupported; }
UNSUPPORTED(olMemAlloc) UNSUPPORTED(olMemFree) UNSUPPORTED(olMemcpy) UNSUPPORTED(olCreateQueue)
UNSUPPORTED(olDestroyQueue) UNSUPPORTED(olSyncQueue) UNSUPPORTED(olCreateProgram)
UNSUPPORTED(olDestroyProgram) UNSUPPORTED(olLaunchKernel) UNSUPPORTED(olGetKernel)
"""


def test_the_21_shape_binds_and_enumerates(tmp_path):
    """A library with olGetKernel instead of olGetSymbol classifies as liboffload21, binds
    the 21 prototypes (ol_kernel_handle_t) and runs a runtime cycle (no 21 build exists
    here: a stub with one host device)."""
    import shutil
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler")
    src = tmp_path / "stub21.c"
    src.write_text(_STUB_21)
    lib = tmp_path / "libLLVMOffload.so.21.1"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    p = load_plugin(lib)
    assert isinstance(p, LiboffloadPlugin) and p.generation == "liboffload21"
    assert p.entry_point("olLaunchKernel").argtypes[2] is L.ol_kernel_handle_t
    with osh.Runtime([p]) as rt:
        assert rt.devices == []
        assert [(d["type"], d["name"], d["backend"]) for d in p.devices_info()] == [
            ("HOST", "stub host", "HOST")]
