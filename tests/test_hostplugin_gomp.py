"""The bundled host plugin through the GCC 12 ABI (``GOMP_OFFLOAD_*``), raw ctypes in
child processes."""

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

def child_gomp_roundtrip():
    c = ctl()
    api = Api(hostplugin.bundled_plugin_path())
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [c_void_p]
    assert api.gomp_version() == 1
    assert api.gomp_get_name() == b"osh_host"
    assert api.gomp_get_caps() == 1 << 2
    assert api.gomp_get_type() == 2
    assert api.gomp_get_num_devices() == 4
    assert api.gomp_init_device(0)
    assert c.is_device_initialized(hostplugin.ABI_GOMP, 0)
    assert not c.is_device_initialized(hostplugin.ABI_LLVM, 0)

    data = hostplugin.sample_image_path().read_bytes()
    ibuf = ctypes.create_string_buffer(data, len(data))
    fnames = [b"vec_add", b"axpy", b"increment", b"scale_by_global"]
    fn_arr = (ctypes.c_char_p * 4)(*fnames)
    nargs = (ctypes.c_uint32 * 4)(4, 4, 2, 2)
    vn_arr = (ctypes.c_char_p * 1)(b"osh_scale")
    td = GompTargetData(OSH_GOMP_TARGET_DATA_MAGIC, 1, ctypes.addressof(ibuf), len(data),
                        ctypes.addressof(fn_arr), ctypes.addressof(nargs), 4, 0,
                        ctypes.addressof(vn_arr), 1, 0)
    table = ctypes.POINTER(AddrPair)()
    before = tmp_images()
    n = api.gomp_load_image(0, GOMP_IMAGE_VERSION, ctypes.byref(td), ctypes.byref(table))
    assert n == 5, c.last_error()
    assert tmp_images() - before == set()
    pairs = [(table[i].start, table[i].end) for i in range(n)]
    for s, e in pairs[:4]:
        assert e == s + 1
    gs, ge = pairs[4]
    assert ge - gs == 8
    libc.free(ctypes.cast(table, c_void_p))
    g = ctypes.c_double()
    assert api.gomp_dev2host(0, ctypes.byref(g), gs, 8) and g.value == 3.0

    m = 257
    nb = 8 * m
    a = doubles([float(i) for i in range(m)])
    b = doubles([10.0] * m)
    out = (ctypes.c_double * m)()
    da, db, dc = (api.gomp_alloc(0, nb) for _ in range(3))
    assert da and db and dc
    assert api.gomp_host2dev(0, da, a, nb) and api.gomp_host2dev(0, db, b, nb)
    vars_ = (c_void_p * 4)(da, db, dc, m)
    tv = api.gomp_alloc(0, ctypes.sizeof(vars_))
    assert api.gomp_host2dev(0, tv, vars_, ctypes.sizeof(vars_))
    api.gomp_run(0, pairs[0][0], tv, None)
    assert api.gomp_dev2host(0, out, dc, nb)
    assert list(out) == [i + 10.0 for i in range(m)]
    # dev2dev then scale_by_global with osh_scale = 3
    assert api.gomp_dev2dev(0, db, dc, nb)
    vars2 = (c_void_p * 2)(db, m)
    assert api.gomp_host2dev(0, tv, vars2, ctypes.sizeof(vars2))
    api.gomp_run(0, pairs[3][0], tv, None)
    assert api.gomp_dev2host(0, out, db, nb)
    assert list(out) == [3.0 * (i + 10.0) for i in range(m)]
    # alloc(0) is a unique live block
    z = api.gomp_alloc(0, 0)
    assert z and api.gomp_free(0, z)

    assert c.violation_count() == 0, c.violations()
    assert api.gomp_unload_image(0, GOMP_IMAGE_VERSION, ctypes.byref(td))
    for p in (da, db, dc, tv):
        assert api.gomp_free(0, p)
    assert c.live_allocs() == 0
    assert api.gomp_fini_device(0)
    # init after fini is legal; images were dropped by unload
    assert api.gomp_init_device(0)
    assert api.gomp_fini_device(0)

    # bad magic / format
    td.magic = 0
    assert api.gomp_load_image(0, GOMP_IMAGE_VERSION, ctypes.byref(td), ctypes.byref(table)) == -1
    assert c.violation_count("after_deinit_device") == 1  # device 0 was finalised
    assert api.gomp_init_device(1)
    assert api.gomp_load_image(1, GOMP_IMAGE_VERSION, ctypes.byref(td), ctypes.byref(table)) == -1
    assert "bad target_data" in c.last_error()
    td.magic = OSH_GOMP_TARGET_DATA_MAGIC
    td.format_version = 2
    assert api.gomp_load_image(1, GOMP_IMAGE_VERSION, ctypes.byref(td), ctypes.byref(table)) == -1
    assert api.gomp_fini_device(1)
    assert c.violation_count() == 1


@pytest.mark.parametrize("scenario", [
    "child_gomp_roundtrip",
])
def test_host_plugin(native_built, scenario):
    run_child("test_hostplugin_gomp", scenario)


def test_num_devices_env(native_built):
    code = ("import ctypes,sys; from offload_shim import hostplugin as h;"
            "lib = ctypes.CDLL(str(h.bundled_plugin_path()));"
            "print(lib.GOMP_OFFLOAD_get_num_devices())")
    env = dict(os.environ, OFFLOAD_SHIM_HOST_NUM_DEVICES="7")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "7"
