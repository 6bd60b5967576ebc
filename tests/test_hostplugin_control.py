"""The bundled host plugin's own parts: where it is, its ``osh_host_*`` control API,
contract-violation log (both ABIs), capacity, fault injection, counters, latency
emulation, many blocks from many threads; raw ctypes in child processes."""

from __future__ import annotations

import ctypes
import glob
import os
import pathlib
import subprocess
import sys
import threading
import time

import pytest

from offload_shim import hostplugin
from hostplugin_raw import *  # noqa: F401,F403  (raw ABI structs, prototypes, helpers)
from hostplugin_raw import native_built, run_child  # noqa: F401  (fixture)

def child_violations():
    """Every violation kind is counted and answered with an error value."""
    c = ctl()
    api = Api(hostplugin.bundled_plugin_path())
    img = SampleImage()
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [c_void_p]

    def expect(kind, delta=1):
        got = c.violation_count(kind)
        assert got == expect.counts.get(kind, 0) + delta, (kind, got, c.violations())
        expect.counts[kind] = got
    expect.counts = {}

    host = (ctypes.c_char * 64)()
    # before init_plugin
    assert api.number_of_devices() == 0
    expect("before_init_plugin")
    assert api.is_valid_binary(img.ptr) == 0
    expect("before_init_plugin")
    assert api.data_alloc(0, 8, None, 0) is None
    expect("before_init_plugin")
    assert api.init_device(0) == -1
    expect("before_init_plugin")
    # deinit without init (plugin)
    assert api.deinit_plugin() == -1
    expect("deinit_without_init")

    assert api.init_plugin() == 0
    assert api.init_plugin() == -1
    expect("double_init")
    assert api.init_device(4) == -1
    expect("bad_device")
    assert api.data_alloc(-1, 8, None, 0) is None
    expect("bad_device")
    assert api.data_alloc(1, 8, None, 0) is None
    expect("before_init_device")
    assert api.deinit_device(2) == -1
    expect("deinit_without_init")
    assert api.init_device(0) == 0
    assert api.init_device(0) == -1
    expect("double_init")

    # unknown pointers
    p = api.data_alloc(0, 64, None, 0)
    assert api.data_delete(0, ctypes.addressof(host), 0) == -1
    expect("unknown_pointer")
    assert api.data_submit(0, ctypes.addressof(host), host, 8) == -1
    expect("unknown_pointer")
    assert api.data_submit(0, p + 60, host, 8) == -1  # runs past the allocation
    expect("unknown_pointer")
    assert api.data_retrieve(0, host, p + 1, 64) == -1
    expect("unknown_pointer")
    assert api.data_unlock(0, host) == -1
    expect("unknown_pointer")
    assert api.data_submit(0, ctypes.addressof(host), host, 0) == 0  # size 0 is fine
    assert api.data_delete(0, p, 0) == 0
    assert api.data_delete(0, p, 0) == -1  # double free
    expect("unknown_pointer")
    assert api.data_alloc(0, 0, None, 0) is None  # not a violation
    assert api.data_alloc(0, 8, None, 4) is None  # bad kind: not a violation

    # unknown kernel
    entries = read_table(api.load_binary(0, img.ptr))
    own = ctypes.CDLL(str(hostplugin.sample_image_path()))
    assert launch(api, 0, ctypes.cast(own.vec_add, c_void_p).value, [0, 0, 0, 0]) == -1
    expect("unknown_kernel")
    assert launch(api, 0, entries[0].addr + 8, [0, 0, 0, 0]) == -1
    expect("unknown_kernel")
    assert launch(api, 0, None, []) == -1
    expect("unknown_kernel")
    # too many arguments: error, not a violation
    assert launch(api, 0, entries[2].addr, [0] * 17) == -1
    assert "at most 16" in c.last_error()

    # after deinit_device
    assert api.deinit_device(0) == 0
    assert api.data_alloc(0, 8, None, 0) is None
    expect("after_deinit_device")
    assert launch(api, 0, entries[0].addr, [0, 0, 0, 0]) == -1
    expect("after_deinit_device")
    assert api.deinit_device(0) == -1
    expect("double_deinit")
    assert api.init_device(0) == 0  # legal again

    # deinit_plugin with live devices (allocation counted as leaked)
    q = api.data_alloc(0, 100, None, 0)
    assert q and c.live_allocs() == 1
    assert api.deinit_plugin() == -1
    expect("deinit_plugin_with_live_devices")
    assert c.live_allocs() == 0 and c.leaked_allocs() == 1
    assert not c.is_device_initialized(0, 0)
    # after deinit_plugin
    assert api.number_of_devices() == 0
    expect("after_deinit_plugin")
    assert api.data_alloc(0, 8, None, 0) is None
    expect("after_deinit_plugin")
    assert api.deinit_plugin() == -1
    expect("double_deinit")
    # a fresh cycle is legal
    assert api.init_plugin() == 0
    assert api.number_of_devices() == 4
    assert api.init_device(0) == 0 and api.deinit_device(0) == 0
    assert api.deinit_plugin() == 0

    # GOMP side
    assert api.gomp_alloc(0, 8) is None
    expect("before_init_device")
    assert api.gomp_alloc(7, 8) is None
    expect("bad_device")
    assert not api.gomp_fini_device(3)
    expect("deinit_without_init")
    assert api.gomp_init_device(3)
    assert not api.gomp_init_device(3)
    expect("double_init")
    data = img.data
    fn_arr = (ctypes.c_char_p * 1)(b"increment")
    nargs = (ctypes.c_uint32 * 1)(2)
    td = GompTargetData(OSH_GOMP_TARGET_DATA_MAGIC, 1, ctypes.addressof(img.buf), len(data),
                        ctypes.addressof(fn_arr), ctypes.addressof(nargs), 1, 0, None, 0, 0)
    table = ctypes.POINTER(AddrPair)()
    assert api.gomp_load_image(3, GOMP_IMAGE_VERSION, ctypes.byref(td), ctypes.byref(table)) == 1
    kfn = table[0].start
    libc.free(ctypes.cast(table, c_void_p))
    assert api.gomp_load_image(3, GOMP_IMAGE_VERSION, ctypes.byref(td), ctypes.byref(table)) == -1
    expect("double_load")
    other = GompTargetData()
    assert not api.gomp_unload_image(3, GOMP_IMAGE_VERSION, ctypes.byref(other))
    expect("unknown_image")
    api.gomp_run(3, ctypes.addressof(host), None, None)
    expect("unknown_kernel")
    api.gomp_run(2, kfn, None, None)
    expect("before_init_device")
    assert not api.gomp_free(3, ctypes.addressof(host))
    expect("unknown_pointer")
    assert not api.gomp_host2dev(3, ctypes.addressof(host), host, 8)
    expect("unknown_pointer")
    assert api.gomp_unload_image(3, GOMP_IMAGE_VERSION, ctypes.byref(td))
    api.gomp_run(3, kfn, None, None)  # image gone: kernel unknown
    expect("unknown_kernel")
    assert not api.gomp_unload_image(3, GOMP_IMAGE_VERSION, ctypes.byref(td))
    expect("unknown_image")
    assert api.gomp_fini_device(3)
    assert not api.gomp_fini_device(3)
    expect("double_deinit")
    assert api.gomp_alloc(3, 8) is None
    expect("after_deinit_device")

    # every kind was exercised (those of the ol* view only there: tests/test_liboffload.py)
    kinds = [k for k in c.violation_kinds()
             if k not in ("host_device", "unknown_queue", "shutdown_with_live_objects")]
    assert all(c.violation_count(k) > 0 for k in kinds), \
        {k: c.violation_count(k) for k in kinds}
    log = c.violations()
    assert len(log) == c.violation_count()
    assert log[0][:2] == ("before_init_plugin", "__tgt_rtl_number_of_devices")
    assert log[-1][:2] == ("after_deinit_device", "GOMP_OFFLOAD_alloc")
    assert c.live_allocs() == 0
    c.reset_counters()
    assert c.violation_count() == 0 and c.violations() == []


def child_capacity_failnth_counters():
    c = ctl()
    api = Api(hostplugin.bundled_plugin_path())
    with pytest.raises(ValueError):
        c.set_capacity(9, 10)
    c.set_capacity(0, 4096)
    assert api.init_plugin() == 0 and api.init_device(0) == 0 and api.init_device(1) == 0
    p = api.data_alloc(0, 4000, None, 0)
    assert p
    assert api.data_alloc(0, 200, None, 0) is None
    assert "out of memory" in c.last_error()
    assert api.data_alloc(1, 200, None, 0)  # device 1 unlimited
    assert api.data_delete(0, p, 0) == 0
    p = api.data_alloc(0, 4096, None, 0)
    assert p
    # the GOMP device 0 shares the setting, with its own accounting
    assert api.gomp_init_device(0)
    g = api.gomp_alloc(0, 4096)
    assert g and api.gomp_alloc(0, 1) is None
    assert api.gomp_free(0, g) and api.gomp_fini_device(0)
    c.set_capacity(-1, 0)
    q = api.data_alloc(0, 1 << 20, None, 0)
    assert q
    assert c.violation_count() == 0

    # fail_nth
    with pytest.raises(ValueError):
        c.fail_nth("__tgt_rtl_no_such_entry", 1)
    with pytest.raises(ValueError):
        c.call_count("data_alloc")
    c.reset_counters()
    c.fail_nth("__tgt_rtl_data_alloc", 2)
    r1 = api.data_alloc(0, 8, None, 0)
    r2 = api.data_alloc(0, 8, None, 0)
    r3 = api.data_alloc(0, 8, None, 0)
    assert r1 and r2 is None and r3
    assert "injected" in c.last_error()
    c.fail_nth("__tgt_rtl_launch_kernel", 1)
    assert launch(api, 0, 0, []) == -1
    assert c.violation_count() == 0  # injected failures do nothing else
    c.fail_nth("__tgt_rtl_data_delete", 1)
    c.fail_nth("__tgt_rtl_data_delete", 0)  # cleared
    assert api.data_delete(0, r1, 0) == 0 and api.data_delete(0, r3, 0) == 0
    c.fail_nth("GOMP_OFFLOAD_version", 1)
    assert api.gomp_version() == 0 and api.gomp_version() == 1
    counts = c.call_counts(["__tgt_rtl_data_alloc", "__tgt_rtl_data_delete",
                            "__tgt_rtl_launch_kernel", "GOMP_OFFLOAD_version"])
    assert counts == {"__tgt_rtl_data_alloc": 3, "__tgt_rtl_data_delete": 2,
                      "__tgt_rtl_launch_kernel": 1, "GOMP_OFFLOAD_version": 2}
    everything = c.call_counts()
    assert len(everything) == 31 + 22 and everything["GOMP_OFFLOAD_run"] == 0   # + ol* view
    c.reset_counters()
    assert c.call_count("__tgt_rtl_data_alloc") == 0

    # set_num_devices refused while initialised
    with pytest.raises(ValueError):
        c.set_num_devices(2)
    for p_ in (p, q):
        assert api.data_delete(0, p_, 0) == 0
    assert api.deinit_plugin() == -1  # devices 0 and 1 still live (one block leaked)
    assert c.leaked_allocs() == 1
    c.set_num_devices(2)
    with pytest.raises(ValueError):
        c.set_num_devices(100000)
    assert api.init_plugin() == 0
    assert api.number_of_devices() == 2
    assert api.gomp_get_num_devices() == 2
    assert api.init_device(2) == -1
    assert c.violation_count("bad_device") == 1
    assert api.deinit_plugin() == 0


def child_latency():
    c = ctl()
    api = Api(hostplugin.bundled_plugin_path())
    assert api.init_plugin() == 0 and api.init_device(0) == 0
    c.set_latency(200_000, 100_000)
    t0 = time.perf_counter_ns()
    p = api.data_alloc(0, 64, None, 0)
    t1 = time.perf_counter_ns()
    assert api.data_delete(0, p, 0) == 0
    t2 = time.perf_counter_ns()
    assert t1 - t0 >= 200_000
    assert t2 - t1 >= 100_000
    assert api.gomp_init_device(0)
    t0 = time.perf_counter_ns()
    g = api.gomp_alloc(0, 64)
    assert time.perf_counter_ns() - t0 >= 200_000
    assert api.gomp_free(0, g) and api.gomp_fini_device(0)
    c.set_latency(0, 0)
    assert api.deinit_device(0) == 0 and api.deinit_plugin() == 0


def child_many_blocks_and_threads():
    c = ctl()
    api = Api(hostplugin.bundled_plugin_path())
    assert api.init_plugin() == 0
    for d in range(4):
        assert api.init_device(d) == 0
    # 100,000 live blocks stay fast (ordered table)
    t0 = time.perf_counter()
    ptrs = [api.data_alloc(0, 16, None, 0) for _ in range(100_000)]
    assert all(ptrs)
    assert c.live_allocs(0) == 100_000
    buf = (ctypes.c_char * 16)()
    for p in ptrs[::997]:
        assert api.data_submit(0, p + 4, buf, 12) == 0
    for p in reversed(ptrs):
        assert api.data_delete(0, p, 0) == 0
    assert time.perf_counter() - t0 < 30
    assert c.live_allocs() == 0

    errors = []

    def worker(tid):
        try:
            dev = tid % 4
            src = (ctypes.c_long * 32)(*range(32))
            dst = (ctypes.c_long * 32)()
            for i in range(2000):
                if tid % 2:
                    p = api.data_alloc(dev, 256, None, 0)
                    assert p
                    assert api.data_submit(dev, p, src, 256) == 0
                    assert api.data_retrieve(dev, dst, p, 256) == 0
                    assert api.data_delete(dev, p, 0) == 0
                else:
                    p = api.gomp_alloc(dev, 256)
                    assert p
                    assert api.gomp_host2dev(dev, p, src, 256)
                    assert api.gomp_dev2host(dev, dst, p, 256)
                    assert api.gomp_free(dev, p)
            assert list(dst) == list(range(32))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    for d in range(4):
        assert api.gomp_init_device(d)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert c.live_allocs() == 0 and c.violation_count() == 0
    for d in range(4):
        assert api.gomp_fini_device(d)
        assert api.deinit_device(d) == 0
    assert api.deinit_plugin() == 0


def test_bundled_paths(native_built):
    d = hostplugin.bundled_native_dir()
    assert hostplugin.bundled_plugin_path() == d / "libosh_hostplugin.so"
    assert hostplugin.sample_image_path() == d / "libosh_sample_kernels.so"


def test_bundled_paths_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("OFFLOAD_SHIM_NATIVE_DIR", str(tmp_path))
    assert hostplugin.bundled_native_dir() == tmp_path
    with pytest.raises(FileNotFoundError, match="pip install"):
        hostplugin.bundled_plugin_path()
    with pytest.raises(FileNotFoundError, match="OFFLOAD_SHIM_NATIVE_DIR"):
        hostplugin.sample_image_path()
    monkeypatch.delenv("OFFLOAD_SHIM_NATIVE_DIR")
    assert hostplugin.bundled_native_dir() == pathlib.Path(hostplugin.__file__).resolve().parent / "_native"


def test_control_wrapper_in_process(native_built):
    c = ctl()
    # same handle as a plain ctypes load of the same path
    other = ctypes.CDLL(str(hostplugin.bundled_plugin_path()), mode=os.RTLD_NOW)
    other.osh_host_call_count.restype = ctypes.c_int64
    other.osh_host_call_count.argtypes = [ctypes.c_char_p]
    other.GOMP_OFFLOAD_get_name.restype = ctypes.c_char_p
    before = c.call_count("GOMP_OFFLOAD_get_name")
    assert other.GOMP_OFFLOAD_get_name() == b"osh_host"
    assert c.call_count("GOMP_OFFLOAD_get_name") == before + 1
    assert len(c.entry_points()) == 31 + 22                     # LLVM + GOMP + ol* view
    assert set(c.violation_kinds()) == {
        "before_init_plugin", "after_deinit_plugin", "bad_device", "before_init_device",
        "after_deinit_device", "double_init", "double_deinit", "deinit_without_init",
        "unknown_pointer", "unknown_kernel", "unknown_image", "double_load",
        "deinit_plugin_with_live_devices", "host_device", "unknown_queue",
        "shutdown_with_live_objects"}
    with pytest.raises(ValueError):
        c.violation_count("no_such_kind")
    with pytest.raises(ValueError):
        c.call_count("no_such_entry")
    with pytest.raises(ValueError):
        c.is_device_initialized(5, 0)
    with pytest.raises(ValueError):
        c.live_allocs(-7)
    assert c.live_allocs() == 0 and c.live_bytes() == 0
    assert isinstance(c.last_error(), str)
    assert repr(c).startswith("HostPluginControl(")


@pytest.mark.parametrize("scenario", [
    "child_violations",
    "child_capacity_failnth_counters",
    "child_latency",
    "child_many_blocks_and_threads",
])
def test_host_plugin(native_built, scenario):
    run_child("test_hostplugin_control", scenario)
