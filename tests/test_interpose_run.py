"""Issue 7: ``offload-shim run PROGRAM`` -- an unmodified clang-16 offload executable
with the Python runtime (embedded CPython in the program) in place of libomptarget.

``native/samples/omp_prog.c`` is built with ``-fopenmp-targets=x86_64-pc-linux-gnu``
and run twice: plainly (libomptarget.so.16 and its x86_64 plugin) and under
``offload-shim run``; stdout and the exit status (3) must be equal, every target region
must have run on a device of the Python runtime (report), and libomptarget itself must
have done nothing (its ``LIBOMPTARGET_INFO`` lines are absent).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLASSIC16, NEXTGEN16

ROOT = Path(__file__).resolve().parent.parent
PROG_SRC = ROOT / "native" / "samples" / "omp_prog.c"


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    from test_interpose import _clang
    from offload_shim.cli.run import libpython_path
    clang = _clang()
    try:
        libpython_path()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    exe = tmp_path_factory.mktemp("omp_prog") / "omp_prog"
    cmd = [clang, "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-O1", str(PROG_SRC),
           "-Xoffload-linker", "-Bsymbolic", "-Wl,-rpath,/usr/lib/llvm-16/lib", "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        # the toolchain is there (_clang): the project's own sample must build
        pytest.fail(f"cannot build the sample ({' '.join(cmd)}): {proc.stderr[-2000:]}")
    return str(exe)


def _real(exe, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([exe], capture_output=True, text=True, timeout=120, env=env)


def _ours(exe, report, opts=(), env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    cmd = [sys.executable, "-P", "-m", "offload_shim.cli", "run", "--report", str(report),
           *opts, exe]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


RUNS = [pytest.param([], id="discovered-host-plugins"),
        pytest.param(["--plugin", str(CLASSIC16)], id="llvm16-classic", marks=pytest.mark.llvm16),
        pytest.param(["--plugin", str(NEXTGEN16)], id="llvm16-nextgen", marks=pytest.mark.llvm16),
        pytest.param(["--bundled", "--plugin", "BUNDLED"], id="bundled")]


@pytest.mark.parametrize("opts", RUNS)
def test_run_matches_libomptarget(prog, tmp_path, opts):
    from offload_shim.hostplugin import bundled_plugin_path
    opts = [str(bundled_plugin_path()) if o == "BUNDLED" else o for o in opts]
    for o in opts:
        if o.startswith("/") and not Path(o).exists():
            pytest.skip(f"{o} not installed (libomp5-16)")
    info = {"LIBOMPTARGET_INFO": "-1"}
    real = _real(prog, info)
    ours = _ours(prog, tmp_path / "report.json", opts, info)
    assert real.returncode == 3, real.stderr
    assert ours.returncode == real.returncode, ours.stderr
    assert ours.stdout == real.stdout
    assert "on_device 1" in ours.stdout
    # libomptarget.so.16 is mapped (DT_NEEDED) but never sees a call: the INFO trace of
    # each kernel is printed once, by offload_shim, as libomptarget prints it (the real
    # runtime's lines from 4 threads may interleave, so only ours are counted exactly)
    kernels = "Libomptarget device 0 info: Entering OpenMP kernel"
    assert ours.stderr.count(kernels) == 12, ours.stderr
    assert 0 < real.stderr.count(kernels) <= 12
    rep = json.loads((tmp_path / "report.json").read_text())
    calls = rep["calls"]
    assert calls["register_lib"] == 1 and calls["target_kernel"] == 12
    assert calls["fallback"] == 0, rep
    assert rep["initialised"] and rep["errors"] == [] and rep["leaks"] == {}
    # the program's destructor unregistered its image, then the runtime went down
    # (libomptarget 16's order at exit)
    assert calls["unregister_lib"] == 1 and rep["libraries"] == 0


def test_run_offload_disabled(prog, tmp_path):
    env = {"OMP_TARGET_OFFLOAD": "disabled"}
    real = _real(prog, env)
    ours = _ours(prog, tmp_path / "r.json", ["--bundled"], env)
    assert (ours.returncode, ours.stdout) == (real.returncode, real.stdout)
    assert "on_device 0" in ours.stdout
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["calls"]["fallback"] == rep["calls"]["target_kernel"] == 12
    assert rep["initialised"] == []


def test_run_reports_a_missing_program(tmp_path):
    proc = subprocess.run([sys.executable, "-P", "-m", "offload_shim.cli", "run",
                           str(tmp_path / "nope")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 127 and "cannot execute" in proc.stderr


_MAPPING_LEAK = r"""
#include <stdio.h>
int main(void) {
  static int kept[50];
  for (int i = 0; i < 50; i++) kept[i] = i;
#pragma omp target enter data map(to : kept)
  int v = -1;
#pragma omp target map(from : v)
  v = kept[7];
  printf("v=%d\n", v);
  return 0;
}
"""


@pytest.mark.parametrize("opts", [pytest.param([], id="discovered-host-plugins"),
                                  pytest.param(["--bundled", "--plugin", "BUNDLED"],
                                               id="bundled")])
@pytest.mark.parametrize("program, kinds", [
    # two omp_target_alloc blocks (400 + 3000 bytes) and a 16-double array left mapped
    # by `enter data`
    pytest.param("api_target_alloc_leak.c", {"mapped": [1, 128], "allocated": [2, 3400]},
                 id="target_alloc-and-mapping"),
    # only a 50-int array left mapped (its row is freed when the image is unregistered:
    # it must be counted before)
    pytest.param(None, {"mapped": [1, 200], "allocated": [0, 0]}, id="mapping-only")])
def test_run_counts_memory_never_freed_in_the_report_only(tmp_path, opts, program, kinds):
    """A program that never frees its omp_target_alloc memory or leaves data mapped:
    freed at exit with no line on its stderr (no runtime prints one), counted in the
    report's ``leaks`` (per device: allocations, bytes) and ``leaks_by_kind``, before
    the clean-up at exit frees them."""
    import clang_toolchains as ct
    from offload_shim.hostplugin import bundled_plugin_path
    why = ct.CLANG16.missing()
    if why:
        pytest.skip(why)
    opts = [str(bundled_plugin_path()) if o == "BUNDLED" else o for o in opts]
    if program is None:
        src = tmp_path / "mapping_leak.c"
        src.write_text(_MAPPING_LEAK)
    else:
        src = ROOT / "tests" / "programs" / program
    exe = ct.CLANG16.build(src)
    real = _real(str(exe))
    ours = _ours(str(exe), tmp_path / "r.json", opts)
    assert (ours.returncode, ours.stdout, ours.stderr) == (real.returncode, real.stdout, "")
    assert real.stderr == "" and real.returncode == 0
    rep = json.loads((tmp_path / "r.json").read_text())
    dev = rep["initialised"][0]
    total = [kinds["mapped"][0] + kinds["allocated"][0], kinds["mapped"][1] + kinds["allocated"][1]]
    assert rep["leaks"] == {dev: total}, rep
    assert rep["leaks_by_kind"] == {dev: kinds}, rep


def _flip_embedded_section_headers(exe: str, out: Path) -> Path:
    """A copy of ``exe`` whose embedded device image (the second ELF in the file) has
    every byte of its section header table flipped: ld.so and the x86_64 plugin read
    only program headers and run it; offload_shim's ELF checks refuse it."""
    import struct
    b = bytearray(Path(exe).read_bytes())
    at = b.find(b"\x7fELF", 1)
    assert at > 0, "no embedded device image"
    shoff, = struct.unpack_from("<Q", b, at + 0x28)
    shentsize, shnum = struct.unpack_from("<HH", b, at + 0x3A)
    for i in range(at + shoff, at + shoff + shentsize * shnum):
        b[i] ^= 0xA5
    out.write_bytes(bytes(b))
    out.chmod(0o755)
    return out


@pytest.mark.parametrize("policy", ["default", "mandatory", "disabled"])
def test_a_refused_image_is_said_in_one_line(prog, tmp_path, policy):
    """Issue 28 item 6: an image offload_shim's own checks refuse, which libomptarget 16
    hands to its plugin (and runs), falls back to the host with one line of
    offload_shim's own on stderr naming the reason -- not silently, the reason only in
    the report.  Under ``mandatory`` the construct's fatal error follows; under
    ``disabled`` nothing is offloaded anyway and nothing is said.  The intact program
    gets no such line."""
    bad = _flip_embedded_section_headers(prog, tmp_path / "flipped")
    env = {"OMP_TARGET_OFFLOAD": policy}
    real = _real(str(bad), env)
    assert real.returncode == 3 and real.stderr == "", real.stderr
    if policy != "disabled":
        assert "on_device 1" in real.stdout           # the real runtime ran the image
    ours = _ours(str(bad), tmp_path / "r.json", (), env)
    lines = [ln for ln in ours.stderr.splitlines() if ln.startswith("offload_shim:")]
    if policy != "mandatory":                    # (an abort writes no report)
        rep = json.loads((tmp_path / "r.json").read_text())
        assert len(rep["unsupported"]) == 1 and "corrupt ELF image" in rep["unsupported"][0]
    if policy == "disabled":
        assert ours.stderr == "" and ours.returncode == 3
        return
    assert len(lines) == 1, ours.stderr
    assert lines[0].startswith("offload_shim: not offloading image 'desc@"), lines
    assert "corrupt ELF image" in lines[0]
    if policy == "default":
        assert lines[0].endswith("its target regions run on the host")
        assert ours.stderr == lines[0] + "\n"
        assert ours.returncode == 3 and "on_device 0" in ours.stdout
    else:
        assert ours.returncode == -6
        assert "fatal error 1: failure of target construct while offloading is mandatory" \
            in ours.stderr
    good = _ours(prog, tmp_path / "g.json", (), env)
    assert "offload_shim:" not in good.stderr and good.returncode == 3
