"""Programs and libraries built by clang 16, 19 and 22 under ``offload-shim run`` and
``run-library``, against each compiler's own libomptarget (16, 19.1, 22.1), and the
entry / kernel-argument layout tables of every generation (abi/clang.py).

The programs (tests/data/clang/*.c and native/samples/omp_prog.c) are built with each
compiler once per session (cached by content under $TMPDIR/osh-clang); the reference
is the program run as it is, under the runtime of its own release.  Tests that need a
compiler or its unpacked runtime skip with the reason (scripts/setup.sh installs them).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from clang_toolchains import CLANG16, CLANG19, CLANG22, COMPILERS, ROOT
from offload_shim.abi import clang as abi
from offload_shim.errors import InvalidImageError, UnknownLayoutError

DATA = Path(__file__).resolve().parent / "data" / "clang"
CURRENT = DATA / "current_clang.c"
ATTACH = DATA / "attach_struct.c"
OMP_PROG = ROOT / "native" / "samples" / "omp_prog.c"
CLASSIC = "/usr/lib/llvm-16/lib/libomptarget.rtl.x86_64.so.16"
NEXTGEN = "/usr/lib/llvm-16/lib/libomptarget.rtl.x86_64.nextgen.so.16"
OSH = [sys.executable, "-m", "offload_shim"]
#: what each compiler's programs are reported as (rtl.generation_text after a launch)
GENERATION = {16: "clang 16-17 (__tgt_offload_entry, KernelArgs v2)",
              19: "clang 18-19 (__tgt_offload_entry, KernelArgs v3)",
              22: "clang 20-22 (llvm::offloading::EntryTy v1, KernelArgs v3)"}
IMAGE_GENERATION = {16: "clang 16-17", 19: "clang 18-19", 22: "clang 21-22"}


# -- the tables (no compiler needed) ----------------------------------------------------
def _legacy(addr, name, size=0, flags=0, data=0) -> bytes:
    return struct.pack("<QQQiI", addr, name, size, flags, data)


def _v1(addr, name, size=0, flags=0, data=0, version=1, kind=1, reserved=0) -> bytes:
    return struct.pack("<QHHIQQQQQ", reserved, version, kind, flags, addr, name, size,
                       data, 0)


def test_entry_layouts_detected_from_the_records():
    legacy = _legacy(0x1000, 0x2000) + _legacy(0x1010, 0x2010, 64)
    assert abi.detect_entry_layout(legacy) is abi.TGT_OFFLOAD_ENTRY
    # LLVM 19: the requires entry has no address; its flags are in the last field
    req = legacy + _legacy(0, 0x2020, 0, abi.OMP_REGISTER_REQUIRES, 0x8)
    assert abi.detect_entry_layout(req) is abi.TGT_OFFLOAD_ENTRY
    f = abi.TGT_OFFLOAD_ENTRY.decode(req[64:96])
    assert f.is_requires and f.data == 8 and f.addr == 0
    new = _v1(0x1000, 0x2000) + _v1(0, 0x2020, flags=0x10, data=0x8) + _v1(0x1, 0x2, kind=2)
    assert abi.detect_entry_layout(new) is abi.ENTRY_TY_V1
    f = abi.ENTRY_TY_V1.decode(new[56:112])
    assert (f.is_requires, f.data, f.kind) == (True, 8, abi.OFK_OPENMP)
    assert abi.ENTRY_TY_V1.decode(new[112:]).kind == 2              # a CUDA entry
    # 224 bytes: 7 legacy records or 4 of 56 -- the records decide
    seven = b"".join(_legacy(0x1000 + 16 * k, 0x2000 + k) for k in range(7))
    assert abi.detect_entry_layout(seven) is abi.TGT_OFFLOAD_ENTRY
    assert abi.detect_entry_layout(b"") is abi.TGT_OFFLOAD_ENTRY


@pytest.mark.parametrize("table, why", [
    (_v1(0x1000, 0x2000, version=2), "Version 2"),
    (_v1(0x1000, 0x2000, kind=16), "Kind 16"),
    (b"\x01" * 40, "not a multiple"),
    (_legacy(0x1000, 0), "null name pointer"),
], ids=["entry-version-2", "unknown-kind", "40-byte-records", "no-name"])
def test_unknown_entry_layout_is_one_typed_line(table, why):
    with pytest.raises(UnknownLayoutError) as ei:
        abi.detect_entry_layout(table)
    msg = str(ei.value)
    assert "\n" not in msg and why in msg and "newer than LLVM 22" in msg
    assert isinstance(ei.value, InvalidImageError)


def test_kernel_args_versions():
    assert not abi.kernel_args_version(2).implicit_dyn_ptr
    assert not abi.kernel_args_version(1).implicit_dyn_ptr
    assert abi.kernel_args_version(3).implicit_dyn_ptr
    for v, hint in ((4, "LLVM 23"), (0, "version 0"), (99, "version 99")):
        with pytest.raises(UnknownLayoutError, match=hint):
            abi.kernel_args_version(v)


def test_generations_named_from_what_was_seen():
    name = abi.describe_generations
    assert name(abi.generations_of(abi.ENTRY_TY_V1)) == "clang 20-22"
    assert name(abi.generations_of(abi.ENTRY_TY_V1, section="llvm_offload_entries")) \
        == "clang 21-22"
    assert name(abi.generations_of(abi.TGT_OFFLOAD_ENTRY)) == "clang 16-19"
    assert name(abi.generations_of(abi.TGT_OFFLOAD_ENTRY, kernel_args=2)) == "clang 16-17"
    assert name(abi.generations_of(abi.TGT_OFFLOAD_ENTRY, kernel_args=3)) == "clang 18-19"
    assert name(abi.generations_of(abi.TGT_OFFLOAD_ENTRY, requires_entry=True)) == "clang 19"
    assert name(abi.generations_of(abi.ENTRY_TY_V1, kernel_args=2)) == "unknown compiler"


# -- real compilers ----------------------------------------------------------------------
def _need(cc):
    why = cc.missing()
    if why:
        pytest.skip(why)


def _run(argv, env=None, timeout=180):
    e = dict(os.environ)
    e.pop("OMP_TARGET_OFFLOAD", None)
    e.update(env or {})
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                          timeout=timeout, env=e)


def _shim_run(prog, plugin, tmp_path, env=None):
    report = tmp_path / "report.json"
    proc = _run(OSH + ["run", "--plugin", plugin, "--report", report, prog], env)
    rep = json.loads(report.read_text()) if report.exists() else {}
    return proc, rep


@pytest.fixture(scope="module")
def bundled():
    from offload_shim.hostplugin import bundled_plugin_path
    return str(bundled_plugin_path())


MEMSET = DATA / "target_memset.c"
INVALID = DATA / "invalid_device.c"
#: programs an older compiler cannot build (an API its omp.h does not declare)
TOO_NEW = {(16, "target_memset"): "clang-16's omp.h has no omp_target_memset (OpenMP 6.0, "
                                  "LLVM 18+)"}
PROGRAMS = ((CURRENT, ("classic", "nextgen", "bundled")), (ATTACH, ("nextgen",)),
            (OMP_PROG, ("classic",)), (MEMSET, ("bundled",)), (INVALID, ("nextgen",)))
CASES = [pytest.param(cc, src, plugin, id=f"{cc.name}-{src.stem}-{plugin}",
                      marks=[pytest.mark.skip(reason=TOO_NEW[cc.version, src.stem])]
                      if (cc.version, src.stem) in TOO_NEW else [])
         for cc in COMPILERS for src, plugins in PROGRAMS for plugin in plugins]


@pytest.mark.parametrize("cc, src, plugin", CASES)
def test_program_under_run_equals_its_own_runtime(cc, src, plugin, bundled, tmp_path):
    """stdout and exit status of ``offload-shim run`` equal the program's under the
    libomptarget of its own release; every kernel ran on a Python-runtime device of the
    LLVM 16 plugin / bundled plugin, no error, the generation reported."""
    _need(cc)
    prog = cc.build(src)
    ref = _run([prog])
    if src in (CURRENT, MEMSET):
        expect = "ndev=4 a[7]=21" if src == CURRENT else "memset 1010101 1010101 kernel " \
                                                          "16843009 host 7"
        assert ref.stdout == expect + "\n", ref.stderr
    path = {"classic": CLASSIC, "nextgen": NEXTGEN, "bundled": bundled}[plugin]
    ours, rep = _shim_run(prog, path, tmp_path)
    assert (ours.returncode, ours.stdout) == (ref.returncode, ref.stdout), ours.stderr
    fatal = [[l for l in p.stderr.splitlines() if "omptarget fatal error" in l]
             for p in (ref, ours)]
    assert fatal[0] == fatal[1]
    if src == INVALID:     # libomptarget 16 answers, 19.1 / 22.1 stop the program
        assert (ref.returncode == -6) == (cc.version >= 19)
        return
    assert rep["errors"] == [] and rep["unsupported"] == [] and rep["initialised"]
    assert rep["compilers"] == [GENERATION[cc.version]]
    assert rep["calls"]["fallback"] == 0 and rep["calls"]["target_kernel"] > 0
    assert "Segmentation" not in ours.stderr and "Libomptarget" not in ours.stderr
    if src == MEMSET:      # the fill went to the Python runtime's device, not to 19.1/22.1's
        assert rep["calls"]["target_memcpy"] == 2 and rep["calls"]["target_alloc"] == 1


@pytest.mark.parametrize("cc", COMPILERS, ids=[c.name for c in COMPILERS])
def test_library_through_run_library(cc):
    """The same program built as a library (main renamed) through ``run-library``
    prints the reference line and unregisters on dlclose."""
    _need(cc)
    lib = cc.build(CURRENT, shared=True, defines=("main=osh_main",))
    ref = _run([cc.build(CURRENT)])
    out = _run(OSH + ["run-library", "--library", lib, "--call", "osh_main", "--plugin",
                      CLASSIC])
    lines = out.stdout.splitlines()
    assert out.returncode == 0, out.stdout + out.stderr
    assert lines[0] == ref.stdout.strip() == "ndev=4 a[7]=21"
    assert "osh_main = 0" in lines and "after dlclose: 0 images registered" in lines
    assert f"built by: {GENERATION[cc.version]}" in lines
    js = _run(OSH + ["run-library", "--library", lib, "--call", "osh_main", "--json",
                     "--plugin", NEXTGEN])
    rec = json.loads(js.stdout.splitlines()[-1])
    assert rec["compilers"] == [GENERATION[cc.version]] and rec["errors"] == []


@pytest.mark.parametrize("cc", COMPILERS, ids=[c.name for c in COMPILERS])
def test_info_image_lists_entries_of_every_generation(cc):
    _need(cc)
    from offload_shim.elf.imageinfo import describe
    info = describe(cc.build(OMP_PROG))
    names = [e["name"] for e in info["omp_offloading_entries"]]
    assert len(names) == 10 and "dev_counter" in names
    assert sum(n.startswith("__omp_offloading_") for n in names) == 9
    assert info["compiler"] == IMAGE_GENERATION[cc.version]
    assert info["entry_layout"] == ("llvm::offloading::EntryTy v1" if cc.version == 22
                                    else "__tgt_offload_entry")
    out = _run(OSH + ["info", "--image", cc.build(CURRENT)])
    assert out.returncode == 0 and "_main_l12  (kernel" in out.stdout
    assert f"built by {IMAGE_GENERATION[cc.version]}" in out.stdout


def _patched(prog: Path, tmp_path: Path, section: str, offset: int, value: bytes) -> Path:
    from elftools.elf.elffile import ELFFile
    data = bytearray(prog.read_bytes())
    with open(prog, "rb") as f:
        off = ELFFile(f).get_section_by_name(section)["sh_offset"]
    data[off + offset:off + offset + len(value)] = value
    out = tmp_path / (prog.name + ".patched")
    out.write_bytes(bytes(data))
    out.chmod(0o755)
    return out


def test_unknown_entry_layout_refused_in_one_line_then_fallback(tmp_path):
    """A clang-22 program whose first entry record has a non-zero ``Reserved`` field (a
    record of no known layout: 22.1 would take the table for 32-byte records):
    registration is refused with one typed line; the program runs on the host (0
    devices), or stops with libomptarget's fatal message under
    OMP_TARGET_OFFLOAD=mandatory; never a crash."""
    _need(CLANG22)
    bad = _patched(CLANG22.build(CURRENT), tmp_path, "llvm_offload_entries", 0,
                   struct.pack("<Q", 7))
    proc, rep = _shim_run(bad, NEXTGEN, tmp_path)
    assert (proc.returncode, proc.stdout) == (0, "ndev=0 a[7]=21\n")
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "UnknownLayoutError" in lines[0] \
        and "Reserved is not 0" in lines[0]
    assert rep["devices"] == [] and rep["calls"]["target_kernel"] == 1
    proc, _ = _shim_run(bad, NEXTGEN, tmp_path, {"OMP_TARGET_OFFLOAD": "mandatory"})
    assert proc.returncode == -6                                 # abort(), not SIGSEGV
    assert "omptarget fatal error 1: failure of target construct while offloading is " \
           "mandatory" in proc.stderr.splitlines()               # libomptarget 22's words
    out = _run(OSH + ["info", "--image", bad])
    assert out.returncode == 0 and "no known offload-entry layout" in out.stdout


@pytest.mark.parametrize("version", [0, 7])
def test_entry_version_read_as_libomptarget_22_reads_it(version, tmp_path):
    """A clang-22 program whose entry records claim another ``Version``: libomptarget
    22.1 reads them as version 1 (``PluginManager::upgradeLegacyEntries`` looks at
    ``Reserved`` only), so the program offloads; under ``offload-shim run`` too (the
    22.1 profile's ``any_entry_version``), with the same output and no line of
    offload_shim's own."""
    _need(CLANG22)
    prog = _patched(CLANG22.build(CURRENT), tmp_path, "llvm_offload_entries", 8,
                    struct.pack("<H", version))
    ref = _run([prog])
    assert (ref.returncode, ref.stdout) == (0, "ndev=4 a[7]=21\n"), ref.stderr
    proc, rep = _shim_run(prog, NEXTGEN, tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, ref.stdout, "")
    assert rep["errors"] == [] and rep["calls"]["fallback"] == 0


_KERNEL_ARGS_DRIVER = r"""
import ctypes, json, sys
import offload_shim as osh
from offload_shim.abi import tgt_rtl
from offload_shim.hostplugin import bundled_plugin_path
lib_path, req_path, version = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = {}
with osh.Runtime([str(bundled_plugin_path())]) as rt, osh.interpose(rt) as ip:
    lib = ip.load_library(lib_path)
    img = [i for imgs in ip.libraries.values() for i in imgs][0]
    region = img.host_addresses()[0]
    a = (ctypes.c_int * 8)(*range(8))
    base = (ctypes.c_void_p * 1)(ctypes.addressof(a))
    sizes = (ctypes.c_int64 * 1)(32)
    types = (ctypes.c_int64 * 1)(0x23)                 # to | from | target_param
    ka = tgt_rtl.KernelArgs(Version=version, NumArgs=1)
    ka.ArgBasePtrs = ctypes.cast(base, ctypes.POINTER(ctypes.c_void_p))
    ka.ArgPtrs = ctypes.cast(base, ctypes.POINTER(ctypes.c_void_p))
    ka.ArgSizes = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int64))
    ka.ArgTypes = ctypes.cast(types, ctypes.POINTER(ctypes.c_int64))
    kern = ctypes.CDLL(None).__tgt_target_kernel
    kern.restype = ctypes.c_int
    kern.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32,
                     ctypes.c_void_p, ctypes.c_void_p]
    out["rc"] = kern(None, -1, -1, 0, region, ctypes.addressof(ka))
    out["a"] = list(a)
    out["errors"] = list(ip.errors)
    out["generations"] = sorted(set(ip.generations.values()))
    ip.unload_library(lib)
    req = ip.load_library(req_path)
    out["requires"] = ip.requires_flags
    out["req_generation"] = sorted(set(ip.generations.values()) - set(out["generations"]))
    ip.unload_library(req)
print(json.dumps(out))
"""

REQUIRES_SRC = """
#pragma omp requires unified_shared_memory
int osh_requires(void) { int x = 1;
#pragma omp target map(tofrom: x)
  x += 1;
  return x; }
"""


@pytest.mark.parametrize("cc", [CLANG19, CLANG22], ids=["clang-19", "clang-22"])
@pytest.mark.parametrize("version", [3, 4])
def test_kernel_args_version_and_requires_entries(cc, version, tmp_path):
    """A kernel launched with KernelArgsTy version 3 gets the implicit dyn_ptr (the
    region runs, a[] tripled).  Version 4 (no supported clang emits it) is refused with
    one typed line before any other field is read; with a device present the default
    policy is mandatory, so the construct ends as libomptarget ends a failed one
    (fatal message, abort), not in a crash.  A ``requires unified_shared_memory``
    library registers its flags through the LLVM 19+ requires entry (0x8 =
    OMP_REQ_UNIFIED_SHARED_MEMORY)."""
    _need(cc)
    lib = cc.build(CURRENT, shared=True, defines=("main=osh_main",))
    src = tmp_path / "requires_lib.c"
    src.write_text(REQUIRES_SRC)
    req = cc.build(src, shared=True)
    proc = _run([sys.executable, "-c", _KERNEL_ARGS_DRIVER, lib, req, version])
    if version == 4:
        assert proc.returncode == -6, proc.stdout + proc.stderr        # abort()
        err = [l for l in proc.stderr.splitlines() if "KernelArgsTy version 4" in l]
        assert len(err) == 1 and "UnknownLayoutError" in err[0]
        assert any(l.startswith("omptarget fatal error 1: ")
                   for l in proc.stderr.splitlines())            # 19.1's / 22.1's words
        return
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert (out["rc"], out["errors"], out["a"]) == (0, [], [3 * i for i in range(8)])
    assert out["generations"] == [GENERATION[cc.version]]
    assert out["requires"] == 0x8
    if cc is CLANG19:
        assert out["req_generation"] == ["clang 19 (__tgt_offload_entry)"]
