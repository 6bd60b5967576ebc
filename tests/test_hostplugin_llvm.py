"""The bundled host plugin through the LLVM ABI (``__tgt_rtl_*``, LLVM 16 nextgen shape),
raw ctypes in child processes; and the same scenario against the real LLVM 16 x86_64
plugins (the reference the bundled plugin follows)."""

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

def child_llvm_roundtrip():
    c = ctl()
    api = Api(hostplugin.bundled_plugin_path())
    img = SampleImage()
    assert api.init_plugin() == 0
    assert api.number_of_devices() == 4
    assert api.init_requires(1) == 1
    assert api.is_valid_binary(img.ptr) == 1
    assert api.init_device(0) == 0
    before = tmp_images()
    tbl = api.load_binary(0, img.ptr)
    assert tbl, c.last_error()
    assert tmp_images() - before == set(), "load_binary left temp files"
    entries = read_table(tbl)
    assert [(e.name.decode(), e.size) for e in entries] == SAMPLE_HOST_ENTRIES
    assert all(e.addr for e in entries)
    k = {e.name.decode(): e.addr for e in entries}

    n = 1000
    a = doubles([float(i) for i in range(n)])
    b = doubles([2.0 * i for i in range(n)])
    out = (ctypes.c_double * n)()
    nb = 8 * n
    da, db, dc = (api.data_alloc(0, nb, None, 0) for _ in range(3))
    assert da and db and dc
    assert c.live_allocs(0) == 3 and c.live_bytes(0) == 3 * nb
    assert api.data_submit(0, da, a, nb) == 0
    assert api.data_submit(0, db, b, nb) == 0
    assert launch(api, 0, k["vec_add"], [da, db, dc, n]) == 0
    assert api.data_retrieve(0, out, dc, nb) == 0
    assert list(out) == [3.0 * i for i in range(n)]

    # TgtOffsets: base - 8 and offset + 8
    alpha = api.data_alloc(0, 8, None, 3)
    assert api.data_submit(0, alpha, doubles([0.5]), 8) == 0
    assert launch(api, 0, k["axpy"], [dc - 8, da, alpha, n], offsets=[8, 0, 0, 0]) == 0
    assert api.data_retrieve(0, out, dc, nb) == 0
    assert list(out) == [3.5 * i for i in range(n)]

    # interior-pointer copies
    assert api.data_retrieve(0, out, dc + 8 * 10, 8 * 5) == 0
    assert list(out[:5]) == [3.5 * i for i in range(10, 15)]

    # global: read, launch, overwrite through the table's device address
    g = ctypes.c_double()
    assert api.data_retrieve(0, ctypes.byref(g), k["osh_scale"], 8) == 0
    assert g.value == 3.0
    assert api.data_submit(0, k["osh_scale"], ctypes.byref(ctypes.c_double(2.0)), 8) == 0
    assert launch(api, 0, k["scale_by_global"], [da, n]) == 0
    assert api.data_retrieve(0, out, da, nb) == 0
    assert list(out) == [2.0 * i for i in range(n)]

    # increment with long data
    dl = api.data_alloc(0, 8 * 4, None, 1)
    assert api.data_submit(0, dl, (ctypes.c_long * 4)(1, 2, 3, 4), 32) == 0
    assert launch(api, 0, k["increment"], [dl, 4]) == 0
    lo = (ctypes.c_long * 4)()
    assert api.data_retrieve(0, lo, dl, 32) == 0
    assert list(lo) == [2, 3, 4, 5]

    # data_lock / unlock
    host = (ctypes.c_char * 4096)()
    locked = c_void_p()
    assert api.data_lock(0, host, 4096, ctypes.byref(locked)) == 0
    assert locked.value == ctypes.addressof(host)
    assert api.data_unlock(0, host) == 0

    api.print_device_info(0)
    for p in (da, db, dc, alpha, dl):
        assert api.data_delete(0, p, 0) == 0
    assert c.live_allocs() == 0 and c.live_bytes() == 0
    assert api.deinit_device(0) == 0
    assert api.deinit_plugin() == 0
    assert c.violation_count() == 0, c.violations()
    assert c.leaked_allocs() == 0
    assert not c.is_plugin_initialized()


def child_llvm_images_per_device():
    """Second image on a device accumulates; the same image on two devices has its own
    globals; a missing symbol fails the whole load; dlopen failure keeps the message."""
    c = ctl()
    api = Api(hostplugin.bundled_plugin_path())
    img = SampleImage()
    assert api.init_plugin() == 0
    assert api.init_device(0) == 0 and api.init_device(1) == 0
    before = tmp_images()
    t0 = read_table(api.load_binary(0, img.ptr))
    t0b = read_table(api.load_binary(0, img.ptr))  # accumulate
    t1 = read_table(api.load_binary(1, img.ptr))
    g0, g0b, g1 = t0[4].addr, t0b[4].addr, t1[4].addr
    assert len({g0, g0b, g1}) == 3
    assert api.data_submit(1, g1, ctypes.byref(ctypes.c_double(7.0)), 8) == 0
    v = ctypes.c_double()
    assert api.data_retrieve(0, ctypes.byref(v), g0, 8) == 0 and v.value == 3.0
    assert api.data_retrieve(1, ctypes.byref(v), g1, 8) == 0 and v.value == 7.0
    # a kernel of device 1 is unknown on device 0
    assert launch(api, 0, t1[0].addr, [0, 0, 0, 0]) == -1
    assert c.violation_count("unknown_kernel") == 1
    # a global of device 1 is not device memory of device 0
    assert api.data_retrieve(0, ctypes.byref(v), g1, 8) == -1
    assert c.violation_count("unknown_pointer") == 1

    # missing symbol
    img.entries[2].name = b"no_such_kernel"
    assert not api.load_binary(0, img.ptr)
    assert "symbol 'no_such_kernel' not found in image" in c.last_error()
    img.entries[2].name = b"increment"
    # not loadable: ELF header fine, rest garbage
    junk = bytearray(img.data[:64]) + bytes(4096)
    jbuf = ctypes.create_string_buffer(bytes(junk), len(junk))
    jimg = DeviceImage(ctypes.addressof(jbuf), ctypes.addressof(jbuf) + len(junk), None, None)
    assert api.is_valid_binary(ctypes.byref(jimg)) == 1
    assert not api.load_binary(0, ctypes.byref(jimg))
    assert "dlopen failed" in c.last_error()
    # not an x86-64 ELF
    bad = bytearray(img.data[:4096])
    bad[18:20] = (183).to_bytes(2, "little")
    bbuf = ctypes.create_string_buffer(bytes(bad), len(bad))
    bimg = DeviceImage(ctypes.addressof(bbuf), ctypes.addressof(bbuf) + len(bad), None, None)
    assert api.is_valid_binary(ctypes.byref(bimg)) == 0
    assert not api.load_binary(0, ctypes.byref(bimg))
    assert tmp_images() - before == set(), "temp files left behind"
    assert api.deinit_device(0) == 0 and api.deinit_device(1) == 0
    assert api.deinit_plugin() == 0


def child_llvm16_plugin(which):
    path = LLVM16_PLUGINS[which]
    img = SampleImage()
    api = Api(path)
    try:
        if hasattr(api, "init_plugin"):
            assert api.init_plugin() == 0
        assert api.number_of_devices() == 4
        assert api.is_valid_binary(img.ptr) == 1
        assert api.init_device(0) == 0
        tbl = api.load_binary(0, img.ptr)
        assert tbl
        entries = read_table(tbl)
        assert [(e.name.decode(), e.size) for e in entries] == SAMPLE_HOST_ENTRIES
        vec_add = entries[0].addr
        n = 100
        nb = 8 * n
        a = doubles([float(i) for i in range(n)])
        b = doubles([1.0] * n)
        out = (ctypes.c_double * n)()
        da, db, dc = (api.data_alloc(0, nb, None, 0) for _ in range(3))
        assert da and db and dc
        assert api.data_submit(0, da, a, nb) == 0 and api.data_submit(0, db, b, nb) == 0
        # the LLVM plugins always read TgtOffsets[i]: pass zeros, never NULL
        assert launch(api, 0, vec_add, [da, db, dc, n], offsets=[0, 0, 0, 0]) == 0
        assert api.data_retrieve(0, out, dc, nb) == 0
        assert list(out) == [i + 1.0 for i in range(n)]
        for p in (da, db, dc):
            assert api.data_delete(0, p, 0) == 0
        if hasattr(api, "deinit_device"):
            assert api.deinit_device(0) == 0
        if hasattr(api, "deinit_plugin"):
            assert api.deinit_plugin() == 0
    finally:
        # the LLVM 16 plugins leave /tmp/tmpfile_* copies of the image: remove ours only,
        # the ones this process maps (a copy another process is loading is never touched)
        from offload_shim.safety import leftovers
        leftovers.unlink_mapped_copies()


@pytest.mark.parametrize("scenario", [
    "child_llvm_roundtrip",
    "child_llvm_images_per_device",
])
def test_host_plugin(native_built, scenario):
    run_child("test_hostplugin_llvm", scenario)


@pytest.mark.parametrize("which", sorted(LLVM16_PLUGINS))
def test_llvm16_x86_64_plugins_load_sample(native_built, which):
    if not LLVM16_PLUGINS[which].exists():
        pytest.skip(f"{LLVM16_PLUGINS[which]} not installed")
    run_child("test_hostplugin_llvm", "child_llvm16_plugin", which)
