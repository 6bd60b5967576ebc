"""Tests of the bundled C host plugin (native/host_plugin.c) through raw ctypes.

Run through ``make test`` (the package installed into .venv), or with the native
libraries built elsewhere and ``OFFLOAD_SHIM_NATIVE_DIR`` pointing at them.

Every scenario that drives plugin entry points runs in a fresh child process (``child_*``
functions below, started with ``subprocess``), so plugin state never leaks between tests and
a crash shows up as a signal instead of killing pytest.
"""

from __future__ import annotations

import ctypes
import glob
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent

from offload_shim.plugins import hostplugin  # noqa: E402

LLVM16_DIR = pathlib.Path("/usr/lib/llvm-16/lib")
LLVM16_PLUGINS = {
    "nextgen": LLVM16_DIR / "libomptarget.rtl.x86_64.nextgen.so.16",
    "classic": LLVM16_DIR / "libomptarget.rtl.x86_64.so.16",
}

SAMPLE_HOST_ENTRIES = [  # (name, size) in the order of the image's omp_offloading_entries
    ("vec_add", 0),
    ("axpy", 0),
    ("increment", 0),
    ("scale_by_global", 0),
    ("osh_scale", 8),
]

c_void_p, c_int32, c_int64, c_size_t = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_size_t


# ----------------------------------------------------------------------------------------
# raw ctypes ABI definitions (x86-64)
# ----------------------------------------------------------------------------------------

class OffloadEntry(ctypes.Structure):
    _fields_ = [("addr", c_void_p), ("name", ctypes.c_char_p), ("size", c_size_t),
                ("flags", c_int32), ("reserved", c_int32)]


class DeviceImage(ctypes.Structure):
    _fields_ = [("ImageStart", c_void_p), ("ImageEnd", c_void_p),
                ("EntriesBegin", c_void_p), ("EntriesEnd", c_void_p)]


class TargetTable(ctypes.Structure):
    _fields_ = [("EntriesBegin", c_void_p), ("EntriesEnd", c_void_p)]


class KernelArgs(ctypes.Structure):
    _fields_ = [("Version", ctypes.c_uint32), ("NumArgs", ctypes.c_uint32),
                ("ArgBasePtrs", c_void_p), ("ArgPtrs", c_void_p), ("ArgSizes", c_void_p),
                ("ArgTypes", c_void_p), ("ArgNames", c_void_p), ("ArgMappers", c_void_p),
                ("Tripcount", ctypes.c_uint64), ("Flags", ctypes.c_uint64),
                ("NumTeams", ctypes.c_uint32 * 3), ("ThreadLimit", ctypes.c_uint32 * 3),
                ("DynCGroupMem", ctypes.c_uint32)]


class AddrPair(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint64), ("end", ctypes.c_uint64)]


class GompTargetData(ctypes.Structure):
    _fields_ = [("magic", ctypes.c_uint32), ("format_version", ctypes.c_uint32),
                ("image", c_void_p), ("image_size", ctypes.c_uint64),
                ("func_names", c_void_p), ("func_num_args", c_void_p),
                ("num_funcs", ctypes.c_uint32), ("pad0", ctypes.c_uint32),
                ("var_names", c_void_p), ("num_vars", ctypes.c_uint32),
                ("pad1", ctypes.c_uint32)]


assert ctypes.sizeof(OffloadEntry) == 32
assert ctypes.sizeof(DeviceImage) == 32
assert ctypes.sizeof(KernelArgs) == 104
assert ctypes.sizeof(GompTargetData) == 64

OSH_GOMP_TARGET_DATA_MAGIC = 0x4748534F

LLVM_PROTOS = {
    "__tgt_rtl_init_plugin": (c_int32, []),
    "__tgt_rtl_deinit_plugin": (c_int32, []),
    "__tgt_rtl_number_of_devices": (c_int32, []),
    "__tgt_rtl_init_requires": (c_int64, [c_int64]),
    "__tgt_rtl_init_device": (c_int32, [c_int32]),
    "__tgt_rtl_deinit_device": (c_int32, [c_int32]),
    "__tgt_rtl_is_valid_binary": (c_int32, [c_void_p]),
    "__tgt_rtl_load_binary": (c_void_p, [c_int32, c_void_p]),
    "__tgt_rtl_data_alloc": (c_void_p, [c_int32, c_int64, c_void_p, c_int32]),
    "__tgt_rtl_data_delete": (c_int32, [c_int32, c_void_p, c_int32]),
    "__tgt_rtl_data_submit": (c_int32, [c_int32, c_void_p, c_void_p, c_int64]),
    "__tgt_rtl_data_retrieve": (c_int32, [c_int32, c_void_p, c_void_p, c_int64]),
    "__tgt_rtl_data_lock": (c_int32, [c_int32, c_void_p, c_int64, ctypes.POINTER(c_void_p)]),
    "__tgt_rtl_data_unlock": (c_int32, [c_int32, c_void_p]),
    "__tgt_rtl_launch_kernel": (c_int32, [c_int32, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p]),
    "__tgt_rtl_print_device_info": (None, [c_int32]),
}

GOMP_PROTOS = {
    "GOMP_OFFLOAD_version": (ctypes.c_uint, []),
    "GOMP_OFFLOAD_get_name": (ctypes.c_char_p, []),
    "GOMP_OFFLOAD_get_caps": (ctypes.c_uint, []),
    "GOMP_OFFLOAD_get_type": (ctypes.c_int, []),
    "GOMP_OFFLOAD_get_num_devices": (ctypes.c_int, []),
    "GOMP_OFFLOAD_init_device": (ctypes.c_bool, [ctypes.c_int]),
    "GOMP_OFFLOAD_fini_device": (ctypes.c_bool, [ctypes.c_int]),
    "GOMP_OFFLOAD_load_image": (ctypes.c_int, [ctypes.c_int, ctypes.c_uint, c_void_p, c_void_p]),
    "GOMP_OFFLOAD_unload_image": (ctypes.c_bool, [ctypes.c_int, ctypes.c_uint, c_void_p]),
    "GOMP_OFFLOAD_alloc": (c_void_p, [ctypes.c_int, c_size_t]),
    "GOMP_OFFLOAD_free": (ctypes.c_bool, [ctypes.c_int, c_void_p]),
    "GOMP_OFFLOAD_host2dev": (ctypes.c_bool, [ctypes.c_int, c_void_p, c_void_p, c_size_t]),
    "GOMP_OFFLOAD_dev2host": (ctypes.c_bool, [ctypes.c_int, c_void_p, c_void_p, c_size_t]),
    "GOMP_OFFLOAD_dev2dev": (ctypes.c_bool, [ctypes.c_int, c_void_p, c_void_p, c_size_t]),
    "GOMP_OFFLOAD_run": (None, [ctypes.c_int, c_void_p, c_void_p, c_void_p]),
}

GOMP_IMAGE_VERSION = 0x00010000  # GOMP_VERSION_PACK(1, 0)


class Api:
    """Raw entry points of one loaded plugin, by short name (``data_alloc``, ``gomp_alloc``)."""

    def __init__(self, path, mode=os.RTLD_NOW):
        self.lib = ctypes.CDLL(str(path), mode=mode)
        for name, (res, args) in {**LLVM_PROTOS, **GOMP_PROTOS}.items():
            try:
                fn = getattr(self.lib, name)
            except AttributeError:
                continue  # optional in the real LLVM plugins
            fn.restype, fn.argtypes = res, args
            short = (name.replace("__tgt_rtl_", "") if name.startswith("__tgt_rtl_")
                     else "gomp_" + name[len("GOMP_OFFLOAD_"):])
            setattr(self, short, fn)


class SampleImage:
    """The sample image bytes + host entries, kept alive together."""

    def __init__(self, path=None):
        path = path or hostplugin.sample_image_path()
        self.data = pathlib.Path(path).read_bytes()
        self.buf = ctypes.create_string_buffer(self.data, len(self.data))
        self.dummy = (ctypes.c_char * 64)()  # non-NULL host addresses
        self.names = [ctypes.create_string_buffer(n.encode()) for n, _ in SAMPLE_HOST_ENTRIES]
        self.entries = (OffloadEntry * len(SAMPLE_HOST_ENTRIES))()
        for i, (_, size) in enumerate(SAMPLE_HOST_ENTRIES):
            e = self.entries[i]
            e.addr = ctypes.addressof(self.dummy) + 8 * i
            e.name = ctypes.cast(self.names[i], ctypes.c_char_p)
            e.size = size
        begin = ctypes.addressof(self.entries)
        start = ctypes.addressof(self.buf)
        self.image = DeviceImage(start, start + len(self.data), begin,
                                 begin + ctypes.sizeof(self.entries))

    @property
    def ptr(self):
        return ctypes.byref(self.image)


def read_table(table_ptr):
    t = TargetTable.from_address(table_ptr)
    n = (t.EntriesEnd - t.EntriesBegin) // ctypes.sizeof(OffloadEntry)
    return list((OffloadEntry * n).from_address(t.EntriesBegin))


def kernel_args(n):
    ka = KernelArgs()
    ka.Version = 2
    ka.NumArgs = n
    ka.NumTeams[0] = 1
    ka.ThreadLimit[0] = 1
    return ka


def launch(api, dev, entry, args, offsets=None):
    """``args``: ints (device pointers or pointer-sized values)."""
    n = len(args)
    arr = (c_void_p * max(n, 1))(*args)
    offs = None if offsets is None else (ctypes.c_ssize_t * max(n, 1))(*offsets)
    ka = kernel_args(n)
    return api.launch_kernel(dev, entry, arr, offs, ctypes.byref(ka), None)


def doubles(values):
    return (ctypes.c_double * len(values))(*values)


def ctl():
    return hostplugin.HostPluginControl(hostplugin.bundled_plugin_path())


def tmp_images():
    """The plugin's temp copies of images (``$TMPDIR/tmposh_image_*``) of this process:
    :func:`run_child` gives every child its own ``TMPDIR``, so only the files of the
    process under test are counted, never those of another test run on the machine."""
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "tmposh_image_*")))


# ----------------------------------------------------------------------------------------
# child-process runner
# ----------------------------------------------------------------------------------------

def run_child(name, *args, env=None, timeout=180):
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(HERE)!r})
        import test_hostplugin as t
        t.{name}(*{args!r})
        print("CHILD-OK", flush=True)
    """)
    tmpdir = tempfile.mkdtemp(prefix="osh-hostplugin-test-")   # this child's TMPDIR only
    full_env = dict(os.environ, TMPDIR=tmpdir)
    full_env.update(env or {})
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=timeout, env=full_env)
        detail = f"rc={p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
        assert p.returncode == 0, f"child {name} failed ({detail})"
        assert "CHILD-OK" in p.stdout, detail
        left = glob.glob(os.path.join(tmpdir, "tmposh_image_*"))
        assert not left, f"child {name} left image copies behind: {left}"
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    return p


@pytest.fixture(scope="module")
def native_built():
    try:
        hostplugin.bundled_plugin_path()
        hostplugin.sample_image_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))


# ----------------------------------------------------------------------------------------
# child scenarios (run in a fresh process)
# ----------------------------------------------------------------------------------------

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


def child_llvm16_plugin(which):
    path = LLVM16_PLUGINS[which]
    img = SampleImage()
    snapshot = set(glob.glob("/tmp/tmpfile_*"))
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
        # the LLVM 16 plugins leave /tmp/tmpfile_* copies of the image: remove ours only
        for f in set(glob.glob("/tmp/tmpfile_*")) - snapshot:
            try:
                if pathlib.Path(f).read_bytes() == img.data:
                    os.unlink(f)
            except OSError:
                pass


# ----------------------------------------------------------------------------------------
# tests
# ----------------------------------------------------------------------------------------

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
    assert hostplugin.bundled_native_dir() == pathlib.Path(hostplugin.__file__).resolve().parent.parent / "_native"


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
    "child_llvm_roundtrip",
    "child_llvm_images_per_device",
    "child_gomp_roundtrip",
    "child_violations",
    "child_capacity_failnth_counters",
    "child_latency",
    "child_many_blocks_and_threads",
])
def test_host_plugin(native_built, scenario):
    run_child(scenario)


def test_num_devices_env(native_built):
    code = ("import ctypes,sys; from offload_shim.plugins import hostplugin as h;"
            "lib = ctypes.CDLL(str(h.bundled_plugin_path()));"
            "print(lib.GOMP_OFFLOAD_get_num_devices())")
    env = dict(os.environ, OFFLOAD_SHIM_HOST_NUM_DEVICES="7")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "7"


@pytest.mark.parametrize("which", sorted(LLVM16_PLUGINS))
def test_llvm16_x86_64_plugins_load_sample(native_built, which):
    if not LLVM16_PLUGINS[which].exists():
        pytest.skip(f"{LLVM16_PLUGINS[which]} not installed")
    run_child("child_llvm16_plugin", which)
