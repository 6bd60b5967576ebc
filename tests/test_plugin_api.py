"""The plugin layer's public surface and the abi/ door to native code:
raw entry points, one error check per return convention, the optional GOMP
page-locked host memory entry points, libc bound once, buffer addresses."""

from __future__ import annotations

import errno
import subprocess
import textwrap
from array import array

import pytest

import offload_shim as osh
from offload_shim.abi import buffers, gomp, hostctl, libc
from offload_shim.errors import MissingEntryPointError, PluginCallError


# -- raw entry points ---------------------------------------------------------------

def test_entry_point_is_the_raw_unchecked_function(bundled_path, ctl):
    p = osh.load_plugin(bundled_path)
    fa = p.entry_point("data_alloc")
    fd = p.entry_point("data_delete")
    with osh.Runtime([p]) as rt:
        rt.devices[0].init()
        ptr = fa(0, 64, None, 0)
        assert ptr
        assert fd(0, ptr, 0) == 0
        # unchecked: a failure comes back as the plugin's own return value, no exception
        ctl.fail_nth("__tgt_rtl_data_delete", 1)
        ptr = fa(0, 64, None, 0)
        assert fd(0, ptr, 0) != 0
        assert fd(0, ptr, 0) == 0


def test_entry_point_missing_is_typed(bundled_path):
    p = osh.load_plugin(bundled_path)
    with pytest.raises(MissingEntryPointError) as ei:
        p.entry_point("run_target_team_region")          # LLVM 14 only
    assert ei.value.function == "__tgt_rtl_run_target_team_region"
    assert not p.has("run_target_team_region")


# -- one check per return convention --------------------------------------------------

def test_llvm_int32_failure_carries_code_function_device(bundled_path, ctl):
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[1]
        ptr = dev.alloc(64)
        ctl.fail_nth("__tgt_rtl_data_submit", 1)
        with pytest.raises(PluginCallError) as ei:
            dev.submit(ptr, bytearray(64))
        e = ei.value
        assert e.code == -1                               # OFFLOAD_FAIL
        assert e.function == "__tgt_rtl_data_submit"
        assert e.device == f"{dev.plugin.name}:1"
        assert str(e).startswith(f"{dev.plugin.name}:1: __tgt_rtl_data_submit failed (-1): ")
        assert "injected failure" in str(e)                 # the bundled plugin's own text
        dev.free(ptr)


def test_gomp_bool_failure_has_no_code(bundled_path, ctl):
    with osh.Runtime([bundled_path], abi="gomp") as rt:
        dev = rt.devices[0]
        ptr = dev.alloc(64)
        ctl.fail_nth("GOMP_OFFLOAD_dev2host", 1)
        with pytest.raises(PluginCallError) as ei:
            dev.retrieve(bytearray(64), ptr)
        e = ei.value
        assert e.code is None
        assert e.function == "GOMP_OFFLOAD_dev2host"
        assert e.device == f"{dev.plugin.name}:0"
        assert str(e).startswith(f"{dev.plugin.name}:0: GOMP_OFFLOAD_dev2host failed: ")
        dev.free(ptr)


def test_init_device_failure_is_device_init_error_in_both_conventions(bundled_path, ctl):
    for abi, entry in (("llvm", "__tgt_rtl_init_device"), ("gomp", "GOMP_OFFLOAD_init_device")):
        with osh.Runtime([bundled_path], abi=abi) as rt:
            dev = rt.devices[2]
            ctl.fail_nth(entry, 1)
            with pytest.raises(osh.DeviceInitError) as ei:
                dev.init()
            assert ei.value.function == entry
            assert ei.value.device == f"{dev.plugin.name}:2"
            assert (ei.value.code == -1) if abi == "llvm" else (ei.value.code is None)


# -- GOMP page-locked host memory (GCC trunk entry points) ------------------------------

_FAKE_GOMP = r"""
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
unsigned GOMP_OFFLOAD_version(void) { return 1; }
const char *GOMP_OFFLOAD_get_name(void) { return "fakepl"; }
unsigned GOMP_OFFLOAD_get_caps(void) { return 0; }
int GOMP_OFFLOAD_get_type(void) { return 5; }
int GOMP_OFFLOAD_get_num_devices(unsigned mask) { (void)mask; return 0; }
bool GOMP_OFFLOAD_init_device(int n) { (void)n; return false; }
bool GOMP_OFFLOAD_fini_device(int n) { (void)n; return false; }
int GOMP_OFFLOAD_load_image(int n, unsigned v, const void *d, void **t) { return -1; }
bool GOMP_OFFLOAD_unload_image(int n, unsigned v, const void *d) { return false; }
void *GOMP_OFFLOAD_alloc(int n, size_t s) { return NULL; }
bool GOMP_OFFLOAD_free(int n, void *p) { return false; }
bool GOMP_OFFLOAD_dev2host(int n, void *d, const void *s, size_t l) { return false; }
bool GOMP_OFFLOAD_host2dev(int n, void *d, const void *s, size_t l) { return false; }
static int live;
bool GOMP_OFFLOAD_page_locked_host_alloc(void **ptr, size_t size) {
  if (size > (1u << 20)) return false;             /* the plugin's own refusal */
  *ptr = malloc(size ? size : 1);
  if (*ptr) live++;
  return *ptr != NULL;
}
bool GOMP_OFFLOAD_page_locked_host_free(void *ptr) {
  if (!ptr || live == 0) return false;
  live--;
  free(ptr);
  return true;
}
int fakepl_live(void) { return live; }
"""


@pytest.fixture(scope="module")
def fake_gomp_plugin(tmp_path_factory):
    d = tmp_path_factory.mktemp("fakepl")
    src = d / "fakepl.c"
    src.write_text(_FAKE_GOMP)
    so = d / "libgomp-plugin-fakepl.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(so), str(src)], check=True)
    return str(so)


def test_page_locked_host_memory_of_a_gomp_plugin(fake_gomp_plugin):
    p = osh.load_plugin(fake_gomp_plugin)
    assert p.abi == "gomp" and p.has_page_locked_host_memory
    assert {"page_locked_host_alloc", "page_locked_host_free"} <= p.symbols
    addr = p.page_locked_host_alloc(4096)
    assert addr
    libc.memmove(addr, buffers.new_buffer(b"x" * 16)[0], 16)   # it is real host memory
    assert buffers.read_bytes(addr, 16) == b"x" * 16
    p.page_locked_host_free(addr)
    with pytest.raises(PluginCallError) as ei:                 # bool false -> typed error
        p.page_locked_host_alloc(2 << 20)
    assert ei.value.function == "GOMP_OFFLOAD_page_locked_host_alloc"
    assert ei.value.code is None and ei.value.device is None
    with pytest.raises(PluginCallError) as ei:
        p.page_locked_host_free(addr + 4096)                   # live == 0 -> false
    assert ei.value.function == "GOMP_OFFLOAD_page_locked_host_free"


def test_page_locked_host_memory_missing(bundled_path, nextgen16):
    for p in (osh.load_plugin(bundled_path, abi="gomp"), osh.load_plugin(nextgen16)):
        assert not p.has_page_locked_host_memory
        with pytest.raises(MissingEntryPointError):
            p.page_locked_host_alloc(64)
        with pytest.raises(MissingEntryPointError):
            p.page_locked_host_free(0x1000)


def test_gomp_page_locked_prototypes_match_gcc_trunk():
    """``bool (void **, size_t)`` and ``bool (void *)`` (GCC trunk libgomp-plugin.h)."""
    import ctypes
    table = gomp.PROTOTYPES[1]
    assert table["page_locked_host_alloc"] == (ctypes.c_bool, [ctypes.POINTER(ctypes.c_void_p),
                                                               ctypes.c_size_t])
    assert table["page_locked_host_free"] == (ctypes.c_bool, [ctypes.c_void_p])
    assert "page_locked_host_alloc" not in gomp.REQUIRED_BASE


# -- libc, bound once -------------------------------------------------------------------

def test_libc_bound_once_and_lazily():
    code = textwrap.dedent("""
        import ctypes
        calls = []
        real = ctypes.CDLL
        class Spy(real):
            def __init__(self, name, *a, **k):
                calls.append(name)
                super().__init__(name, *a, **k)
        ctypes.CDLL = Spy
        from offload_shim.abi import libc
        assert calls == [], calls                  # nothing at import
        p = libc.malloc(32); libc.free(p); libc.free(0); libc.fflush_all()
        libc.munlock(p, 0)
        assert calls == [None], calls              # dlopen(NULL) once
        print("OK")
    """)
    import sys
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr


def test_libc_mlock_returns_errno():
    addr, keep = buffers.new_buffer(4096)
    assert libc.munlock(addr, 4096) == 0
    assert libc.mlock(0x10, 1 << 62) in (errno.ENOMEM, errno.EPERM, errno.EINVAL)
    assert libc.dlsym_default("malloc") != 0
    assert libc.dlsym_default("no_such_symbol_anywhere_osh") == 0


def test_buffer_address_is_the_buffer_itself():
    a = array("q", range(4))
    addr, keep = buffers.buffer_address(memoryview(a))
    assert addr == a.buffer_info()[0]
    with pytest.raises(TypeError):
        buffers.buffer_address(memoryview(b"abc"))
    with pytest.raises(ValueError):
        buffers.buffer_address(memoryview(bytearray()))
    addr, keep = buffers.new_buffer(b"abc")
    assert buffers.read_bytes(addr, 3) == b"abc"


def test_control_api_binding(bundled_path):
    api = hostctl.ControlAPI(bundled_path)
    assert api.call("entry_point_name", 0).startswith("__tgt_rtl_")
    assert api.call("entry_point_name", 10_000) is None
    assert api.call("call_count", "__tgt_rtl_no_such") < 0
    assert isinstance(api.violation_log(), str)


# -- runtime: which plugin takes an image --------------------------------------------

def test_runtime_accepts_is_public(bundled_path):
    img = osh.OffloadImage.sample()
    with osh.Runtime([bundled_path]) as rt:
        p = rt.plugins[0]
        rt.devices
        assert rt.accepts(p, img)
        assert rt.accepted_images(p) == []
        rt.register_image(img)
        assert rt.accepted_images(p) == [img]
        rt.unregister_image(img)
