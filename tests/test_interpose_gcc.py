"""Issue 7, GCC path: a library built by ``gcc -fopenmp -foffload=nvptx-none`` through
the interposer.

Its constructor's ``GOMP_offload_register_ver`` and destructor's
``GOMP_offload_unregister_ver`` reach Python with the real host table and mkoffload's
nvptx ``target_data``; the image is registered with a Runtime over the GCC 12 nvptx
plugin (0 devices here: it stays registered, nothing is loaded); every construct
(``GOMP_target_ext`` & co.) is decided in Python and, with no usable device, runs
libgomp's own host fallback.  Results, exit status and the fatal message are compared
with the same library run under plain libgomp (which has no device either) and with a
``-foffload=disable`` build.  Every run that loads a compiled library is a child process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import NVPTX12

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "native" / "samples"
MKOFFLOAD = Path("/usr/lib/gcc/x86_64-linux-gnu/12/accel/nvptx-none/mkoffload")
REGIONS = ["osh_region_saxpy", "osh_region_tofrom", "osh_region_data_update",
           "osh_region_enter_exit", "osh_region_global", "osh_region_device_ptr",
           "osh_region_struct", "osh_region_on_device"]
GOMP_FUNCS = ["osh_gomp_level_in_target", "osh_gomp_parallel_in_target",
              "osh_gomp_nowait_depend"]


def _gcc_env() -> dict:
    """PATH without any CUDA ``ptxas`` (GCC 12's nvptx-as would run it to verify the
    PTX, and a CUDA 13 ptxas rejects GCC 12's output)."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not (Path(d) / "ptxas").exists()]
    return dict(os.environ, PATH=os.pathsep.join(dirs))


@pytest.fixture(scope="module")
def gcclibs(tmp_path_factory):
    gcc = shutil.which("gcc-12") or shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc not installed")
    if not MKOFFLOAD.exists():
        pytest.skip("GCC 12 nvptx offloading missing: apt-get install gcc-12-offload-nvptx")
    if not NVPTX12.exists():
        pytest.skip(f"{NVPTX12} missing: apt-get install libgomp-plugin-nvptx1")
    out = tmp_path_factory.mktemp("gcc_regions")
    env = _gcc_env()
    libs = {}
    builds = {
        "regions": (SAMPLES / "omp_regions.c", ["-foffload=nvptx-none",
                                                "-foffload-options=nvptx-none=-misa=sm_80"]),
        "regions_host": (SAMPLES / "omp_regions.c", ["-foffload=disable"]),
        "gomp": (SAMPLES / "gomp_regions.c", ["-foffload=nvptx-none",
                                              "-foffload-options=nvptx-none=-misa=sm_80"]),
    }
    for key, (src, extra) in builds.items():
        so = out / f"lib{key}.so"
        cmd = [gcc, "-fopenmp", *extra, "-shared", "-fPIC", "-O1", str(src), "-o", str(so)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        if proc.returncode != 0:
            # GCC 12 with nvptx offloading is there (checked above): the project's own
            # samples must build
            pytest.fail(f"cannot build {src.name} ({' '.join(cmd)}): {proc.stderr[-2000:]}")
        libs[key] = str(so)
    return libs


_PLAIN = """
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
out = {}
for name in sys.argv[2].split(","):
    fn = getattr(lib, name); fn.restype = ctypes.c_int64
    out[name] = fn()
fn = lib.osh_gomp_device if hasattr(lib, "osh_gomp_device") else None
if fn is not None:
    fn.restype = ctypes.c_int64; fn.argtypes = [ctypes.c_int64]
    for d in sys.argv[3:]:
        print("device", d, fn(int(d)), flush=True)
print(json.dumps(out), flush=True)
"""

_INTERPOSED = """
import ctypes, json, sys
import offload_shim as osh
from offload_shim.interposer import call_counts
rt = osh.Runtime([sys.argv[4]])
with rt, osh.interpose(rt) as ip:
    # the GCC side is built at the library's first GOMP_* call (gomp/lazy.py)
    side_before = "offload_shim.interposer.gomp.target" in sys.modules
    lib = ip.load_library(sys.argv[1])
    if sys.argv[3] == "devices":
        for d in sys.argv[5:]:
            fn = lib.function("osh_gomp_device", ctypes.c_int64, [ctypes.c_int64])
            print("device", d, fn(int(d)), flush=True)
    reg = ip.gomp_registrations[0]
    img = reg["image"]
    nvptx = rt.plugins[0]
    info = {
        "results": {n: lib.call(n) for n in sys.argv[2].split(",")},
        "version": reg["version"], "target_type": reg["target_type"],
        "funcs": reg["funcs"], "vars": reg["vars"],
        "fn_names": reg["device_data"]["fn_names"],
        "var_names": reg["device_data"]["var_names"],
        "ptx_objs": len(reg["device_data"]["ptx_objs"]),
        "anchor": ctypes.cast(lib.function(sys.argv[2].split(",")[0]), ctypes.c_void_p).value,
        "images": [i.name for i in rt.images], "image": img.name,
        "machine": img.machine, "entries": [[e.name, e.size] for e in img.entries],
        "host_addresses": img.host_addresses(),
        "accepted_by_nvptx": rt.accepts(nvptx, img), "plugin_devices": nvptx.num_devices,
        "devices": len(rt.devices), "gomp_devices": len(ip.gomp_devices()),
        "constructs": ip.gomp_constructs, "fallbacks": ip.gomp_fallbacks,
    }
    ip.unload_library(lib)
    info["after_close"] = {"images": len(rt.images), "registrations": len(ip.gomp_registrations)}
    info["side_before"] = side_before
    info["errors"] = ip.errors
    info["unsupported"] = [m for _, m in ip.unsupported]
info["calls"] = call_counts()
print(json.dumps(info), flush=True)
"""


def _run(code: str, args: list[str], env_extra: dict | None = None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-P", "-c", code, *args], capture_output=True,
                          text=True, timeout=180, env=env)


def _last_json(proc) -> dict:
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _symbol_value(path: str, name: str) -> int:
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        for sym in ELFFile(f).get_section_by_name(".symtab").iter_symbols():
            if sym.name == name:
                return sym["st_value"]
    raise KeyError(name)


def test_gcc_registration_fallback_and_unregistration(gcclibs):
    from offload_shim.elf.imageinfo import describe
    lib = gcclibs["regions"]
    plain = _last_json(_run(_PLAIN, [lib, ",".join(REGIONS)]))
    host = _last_json(_run(_PLAIN, [gcclibs["regions_host"], ",".join(REGIONS)]))
    data = _last_json(_run(_INTERPOSED, [lib, ",".join(REGIONS), "-", str(NVPTX12)]))
    # regions: libgomp's host fallback, same answers as plain libgomp and the host build
    assert data["results"] == plain == host
    assert data["results"]["osh_region_on_device"] == 0
    # the real host table, as the file says (link-time addresses + load base)
    info = describe(lib)
    base = data["anchor"] - _symbol_value(lib, REGIONS[0])
    assert data["funcs"] == [f["addr"] + base for f in info["gnu_offload_funcs"]]
    assert len(data["funcs"]) == 9
    assert data["vars"] == [[v["addr"] + base, v["size"]] for v in info["gnu_offload_vars"]]
    assert [v["name"] for v in info["gnu_offload_vars"]] == ["osh_omp_scale"]
    assert data["version"] == 0x10001 and data["target_type"] == 5      # GCC 12 nvptx
    # mkoffload's target_data, decoded in the process and from the file
    td = info["gomp_target_data"]
    assert data["fn_names"] == td["fn_names"] and data["var_names"] == td["var_names"]
    assert data["ptx_objs"] == len(td["ptx_objs"]) > 0
    assert [n.replace("$", ".") for n in td["fn_names"]] == \
        [f["name"] for f in info["gnu_offload_funcs"]]
    # one image, registered for the nvptx plugin, which has no device: pending, unloaded
    assert data["images"] == [data["image"]] and data["machine"] == "nvptx"
    assert data["accepted_by_nvptx"] and data["plugin_devices"] == 0
    assert data["devices"] == 0 and data["gomp_devices"] == 0
    assert data["entries"][-1] == ["osh_omp_scale", 8]
    assert data["host_addresses"] == data["funcs"] + [a for a, _ in data["vars"]]
    # every construct went through Python and fell back
    calls = data["calls"]
    assert calls["gomp_register"] == 1 and calls["gomp_unregister"] == 1
    assert calls["gomp_target"] == data["constructs"]["target"] == 9
    assert calls["gomp_fallback"] == data["fallbacks"] == calls["gomp_target"] + calls["gomp_data"]
    assert data["constructs"]["target_data"] == data["constructs"]["target_end_data"] > 0
    assert data["constructs"]["target_update"] > 0
    assert data["constructs"]["target_enter_exit_data"] > 0
    assert calls["target_kernel"] == 0 and calls["register_lib"] == 0
    # dlclose -> GOMP_offload_unregister_ver -> image unregistered
    assert data["after_close"] == {"images": 0, "registrations": 0}
    assert data["errors"] == [] and data["unsupported"] == []
    assert data["side_before"] is False         # not imported before a GOMP_* call


# a GCC library loaded (and registered: recorded by the interposer, passed to libgomp)
# before the callback table exists: interpose() builds the GCC side at once and replays
_REGISTERED_BEFORE = """
import ctypes, json, os, sys
import offload_shim as osh
from offload_shim.interposer import call_counts, load_interposer
load_interposer()
lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW | os.RTLD_LOCAL)
before = "offload_shim.interposer.gomp.target" in sys.modules
rt = osh.Runtime([sys.argv[3]])
with rt, osh.interpose(rt) as ip:
    regs = [r["target_type"] for r in ip.gomp_registrations]
    results = {}
    for n in sys.argv[2].split(","):
        fn = getattr(lib, n)
        fn.restype = ctypes.c_int64
        results[n] = fn()
    out = {"before": before, "regs": regs, "results": results,
           "constructs": ip.gomp_constructs, "fallbacks": ip.gomp_fallbacks,
           "errors": list(ip.errors)}
out["calls"] = call_counts()
print(json.dumps(out), flush=True)
"""


def test_gcc_registration_before_the_table_is_replayed(gcclibs):
    lib = gcclibs["regions"]
    plain = _last_json(_run(_PLAIN, [lib, ",".join(REGIONS)]))
    data = _last_json(_run(_REGISTERED_BEFORE, [lib, ",".join(REGIONS), str(NVPTX12)]))
    assert data["before"] is False
    assert data["regs"] == [5]                  # replayed when the table was installed
    assert data["results"] == plain
    assert data["calls"]["gomp_register"] == 1
    assert data["constructs"]["target"] == data["calls"]["gomp_target"] == 9
    assert data["fallbacks"] == data["calls"]["gomp_target"] + data["calls"]["gomp_data"]
    assert data["errors"] == []


# a GCC registration from another thread reaches the lazy table while install() asks the
# interposer for the registrations recorded before it (a ctypes call: other threads run)
_REGISTERED_DURING_INSTALL = """
import gc, json, weakref
import offload_shim as osh
from offload_shim.abi import gomp_interposer as g
from offload_shim.interposer.gomp import target

FAKE = (2, 4096, 5, 8192)           # version, host_table, target_type, target_data
recorded = []                       # what the C side recorded (osh_gomp_registered)


def on_register(self, unregister, version, host_table, ttype, tdata):
    with self._lock:                # the record only: the fake host table is no memory
        self.registrations += 1
        self.gomp_registrations.append({"host_table": host_table, "target_data": tdata})
    return g.OK


real_set, tables = g.set_callbacks, []


def set_callbacks(lib, table):
    if table is not None:
        tables.append(weakref.ref(table))
    return real_set(lib, table)


def registered(lib):
    if len(tables) == 1 and not recorded:   # the lazy table is in: the call lands now
        recorded.append(FAKE)
        tables[0]().reg(0, *FAKE)
    return list(recorded)


target.GompSide.on_register = on_register
g.set_callbacks, g.registered = set_callbacks, registered
rt = osh.Runtime(bundled=True)
with rt, osh.interpose(rt) as ip:
    gc.collect()
    out = {"alive": [w() is not None for w in tables],
           "registrations": ip.gomp.registrations, "errors": list(ip.errors)}
print(json.dumps(out), flush=True)
"""


def test_a_registration_during_install_keeps_every_table_alive():
    # the call installed the side's table; install() must not install another over it:
    # the C side copies a table before it calls (native/interposer_gomp.c live_table), so
    # a table replaced and freed could still be running another thread's call
    data = _last_json(_run(_REGISTERED_DURING_INSTALL, []))
    assert data["alive"] == [True, True] and data["registrations"] == 1
    assert data["errors"] == []


# building the GCC host device fails (here: no bundled plugin for its GOMP view), after
# _install() put in the LLVM side's table
_HOST_DEVICE_FAILS = """
import os, sys
import offload_shim as osh
from offload_shim.interposer import load_interposer
from offload_shim.interposer.llvm.interface import Interposer
lib = load_interposer()
rt = osh.Runtime(bundled=True)
Interposer.num_devices = lambda self: 7     # tells whether the C side reaches one
os.environ["OFFLOAD_SHIM_NATIVE_DIR"] = sys.argv[1]
try:
    with osh.interpose(rt, gomp_host_device=True):
        print("installed")
except FileNotFoundError:
    print("refused")
print("omp_get_num_devices", lib.omp_get_num_devices())
with osh.interpose(rt) as ip:                   # the runtime is free for another one
    print("again", ip.gomp_fallbacks)
"""


def test_a_failed_interpose_leaves_no_callbacks_installed(tmp_path):
    # interpose() that raises installed nothing the C side still calls: with no table
    # omp_get_num_devices() is 0 (native/interposer.c), not the failed interposer's 7
    proc = _run(_HOST_DEVICE_FAILS, [str(tmp_path)])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["refused", "omp_get_num_devices 0", "again 0"]


def test_gcc_fallback_is_libgomps_own(gcclibs):
    """gomp_target_fallback's fresh thread state, GOMP_parallel inside a region,
    nowait + depend, device(d): same output as plain libgomp, also under
    OMP_TARGET_OFFLOAD=mandatory where device(3) is fatal with libgomp's message."""
    lib = gcclibs["gomp"]
    for env in ({}, {"OMP_TARGET_OFFLOAD": "mandatory"}):
        plain = _run(_PLAIN, [lib, ",".join(GOMP_FUNCS), "0", "-2", "1", "3"], env)
        ours = _run(_INTERPOSED, [lib, ",".join(GOMP_FUNCS), "devices", str(NVPTX12),
                                  "0", "-2", "1", "3"], env)
        assert ours.returncode == plain.returncode, (env, ours.stderr, plain.stderr)
        devs = [ln for ln in plain.stdout.splitlines() if ln.startswith("device")]
        assert [ln for ln in ours.stdout.splitlines() if ln.startswith("device")] == devs
        if env:
            assert plain.returncode == 1 and devs == ["device 0 42", "device -2 42"]
            msg = "libgomp: OMP_TARGET_OFFLOAD is set to MANDATORY, but device not found"
            assert msg in plain.stderr and msg in ours.stderr
            continue
        assert len(devs) == 4
        ref = json.loads(plain.stdout.strip().splitlines()[-1])
        data = json.loads(ours.stdout.strip().splitlines()[-1])
        assert data["results"] == ref
        assert ref["osh_gomp_level_in_target"] == 20      # level reset in each region
        assert data["calls"]["gomp_fallback"] == data["calls"]["gomp_target"] == 4 + 2 + 1 + 2


def test_interposer_defines_only_offload_gomp_symbols():
    """GOMP_parallel & co. must keep resolving to libgomp."""
    from offload_shim.interposer import interposer_path
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("binutils nm missing")
    out = subprocess.run([nm, "-D", "--defined-only", "--with-symbol-versions",
                          str(interposer_path())], capture_output=True, text=True).stdout
    gomp = sorted(ln.split()[-1] for ln in out.splitlines()
                  if " GOMP_" in ln and "@" in ln.split()[-1])     # not the version nodes
    assert gomp == sorted([
        "GOMP_offload_register_ver@@GOMP_4.5", "GOMP_offload_unregister_ver@@GOMP_4.5",
        "GOMP_target_data_ext@@GOMP_4.5", "GOMP_target_end_data@@GOMP_4.0",
        "GOMP_target_enter_exit_data@@GOMP_4.5", "GOMP_target_ext@@GOMP_4.5",
        "GOMP_target_update_ext@@GOMP_4.5"])


def test_info_image_lists_the_gcc_library(gcclibs):
    proc = subprocess.run([sys.executable, "-P", "-m", "offload_shim.cli", "info", "--image",
                           gcclibs["regions"]], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert ".gnu.offload_funcs: 9, .gnu.offload_vars: 1" in out
    assert "var  osh_omp_scale (8 bytes)" in out
    assert "GCC nvptx target_data" in out and "9 functions, 1 variables" in out
    assert "ptx func osh_region_saxpy$_omp_fn$0" in out
    from offload_shim.elf.imageinfo import describe
    assert describe(gcclibs["regions_host"])["gomp_target_data"] is None
