"""GCC-built programs through offload_shim: the three-way comparison.

Every ``tests/gcc_programs/*.c`` (``*.cpp``) is built by ``gcc-12`` (``g++-12``)
``-fopenmp -foffload=nvptx-none`` (so it registers a real GCC offload image) and run
three ways:

* natively: libgomp 12, which finds no device on this machine and takes its host
  fallback;
* under ``offload-shim run``: the interposer hands every call to that same libgomp
  (libgomp mode) -- stdout, stderr and the exit status must equal the native run;
* under ``offload-shim run --gomp-host-device``: the regions run on offload_shim's device
  with separate memory and libgomp 12's mapping.  For a correct program (``osh-expect:
  same``) the result must equal the native run; a program with a deliberate mapping bug
  (``osh-expect: bug``) must print the wrong line its header names
  (``osh-host-device-line:``), which the native run hides.

The ``--report`` of each run must count the executable's registration and its
unregistration (which happens in its destructor, after the exit handlers) and say where
each construct ran and why; on the host device it lists every mapping.  The header line
``osh-expect:`` of each program says which test uses it.  Skipped without gcc-12 and
gcc-12-offload-nvptx (mkoffload), or without a shared libpython for ``run``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = Path(__file__).resolve().parent / "gcc_programs"
MKOFFLOAD = Path("/usr/lib/gcc/x86_64-linux-gnu/12/accel/nvptx-none/mkoffload")
MANDATORY = "\nlibgomp: OMP_TARGET_OFFLOAD is set to MANDATORY, but device not found\n"


def _header(src: Path) -> dict:
    text = src.read_text()
    head = text[:text.find("*/")]
    expect = re.search(r"osh-expect:\s*(\S+)", head)
    lines = re.findall(r"osh-host-device-line:\s*(.+)", head)
    return {"expect": expect.group(1) if expect else None,
            "host_device_lines": [ln.strip() for ln in lines]}


def _sources() -> list[Path]:
    return sorted([*PROGRAMS.glob("*.c"), *PROGRAMS.glob("*.cpp")])


def _programs(expect: str) -> list[str]:
    return sorted(p.stem for p in _sources() if _header(p)["expect"] == expect)


def _gcc_env() -> dict:
    """PATH without any CUDA ``ptxas`` (GCC 12's nvptx-as would run it to verify the PTX,
    and a newer ptxas rejects GCC 12's output)."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not (Path(d) / "ptxas").exists()]
    return dict(os.environ, PATH=os.pathsep.join(dirs))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, str]:
    """Every program and the library, built once (two compilers at a time)."""
    gcc, gxx = shutil.which("gcc-12"), shutil.which("g++-12")
    if gcc is None:
        pytest.skip("gcc-12 not installed")
    if not MKOFFLOAD.exists():
        pytest.skip("GCC 12 nvptx offloading missing: apt-get install gcc-12-offload-nvptx")
    from offload_shim.cli.run import libpython_path
    try:
        libpython_path()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    out = tmp_path_factory.mktemp("gcc_programs")
    env = _gcc_env()
    jobs = []
    for src in _sources():
        if src.suffix == ".cpp" and gxx is None:
            continue                          # its tests skip (see _exe)
        lib = _header(src)["expect"] == "library"
        dst = out / (f"lib{src.stem}.so" if lib else src.stem)
        extra = ["-shared", "-fPIC"] if lib else ["-no-pie"]
        jobs.append((src, dst, [gxx if src.suffix == ".cpp" else gcc, "-fopenmp", "-foffload=nvptx-none",
                                "-foffload-options=nvptx-none=-misa=sm_80", "-O1", *extra,
                                str(src), "-o", str(dst)]))

    def build(job):
        src, dst, cmd = job
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        return src.stem, dst, cmd, proc

    result = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for stem, dst, cmd, proc in pool.map(build, jobs):
            if proc.returncode != 0:
                pytest.fail(f"cannot build {stem}: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
            result[stem] = str(dst)
    return result


def _exe(built: dict, name: str) -> str:
    """The built program ``name``; skips when its compiler is missing (g++-12)."""
    if name not in built:
        pytest.skip(f"{name}: g++-12 not installed")
    return built[name]


def _run(argv, env_extra=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_TARGET_OFFLOAD", "OMP_DEFAULT_DEVICE")}
    env.update(env_extra or {})
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=180, env=env,
                          stdin=subprocess.DEVNULL)


def _shim(argv, report: Path, *, host_device: bool, env_extra=None):
    opts = ["--gomp-host-device"] if host_device else []
    return _run([sys.executable, "-P", "-m", "offload_shim.cli", "run", "--report",
                 str(report), *opts, *argv], env_extra)


def _same(a: subprocess.CompletedProcess, b: subprocess.CompletedProcess) -> bool:
    return (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr)


def _show(**runs) -> str:
    return "\n".join(f"--- {k}: status {r.returncode}\n{r.stdout}{r.stderr}"
                     for k, r in runs.items())


def _check_report(path: Path, *, host_device: bool, registrations: int | None = 1) -> dict:
    """``registrations``: how many images the executable registers (None: any number;
    GCC registers none for a program without target regions)."""
    rep = json.loads(path.read_text())
    g = rep["gomp"]
    assert g["mode"] == ("host-device" if host_device else "libgomp")
    if registrations is None:
        registrations = g["registrations"]
    # the executable's registration and its unregistration (its destructor runs after
    # the exit handlers wrote the report once) are both counted
    assert g["registrations"] == registrations
    assert g["unregistrations"] == registrations, g
    assert rep["calls"]["gomp_register"] == rep["calls"]["gomp_unregister"] == registrations
    assert g["registered"] == 0
    assert sum(g["constructs"].values()) == len(g["regions"]) + g["dropped_regions"] > 0
    for r in g["regions"]:
        assert r["outcome"] in ("host-device", "host-fallback") and r["reason"], r
    if not host_device:
        assert g["outcomes"]["host-device"] == 0
        assert rep["calls"]["gomp_device"] == 0
    return rep


@pytest.mark.parametrize("name", _programs("same"))
def test_three_way(built, tmp_path, name):
    """native == run == run --gomp-host-device, and on the host device every region ran
    on the device with its mappings in the report."""
    exe = _exe(built, name)
    native = _run([exe])
    run = _shim([exe], tmp_path / "run.json", host_device=False)
    hd = _shim([exe], tmp_path / "hd.json", host_device=True)
    assert native.returncode == 0, _show(native=native)
    assert _same(native, run), _show(native=native, run=run)
    assert _same(native, hd), _show(native=native, host_device=hd)
    rep = _check_report(tmp_path / "run.json", host_device=False)
    assert rep["gomp"]["outcomes"]["host-fallback"] == len(rep["gomp"]["regions"])
    rep = _check_report(tmp_path / "hd.json", host_device=True)
    g = rep["gomp"]
    assert rep["errors"] == [] and g["outcomes"]["fatal"] == 0
    assert g["outcomes"]["host-device"] > 0
    assert rep["calls"]["gomp_device"] == g["outcomes"]["host-device"]
    assert g["mappings"], "no mapping reported"
    for m in g["mappings"]:
        assert re.fullmatch(r"0x[0-9a-f]+|\(nil\)", m["device"]), m
        if m["op"] in ("map", "copy_to", "copy_from", "firstprivate", "update"):
            assert re.fullmatch(r"0x[0-9a-f]+", m["host"]) and m["size"] >= 0, m
    assert any(m["op"] in ("map", "present") and m["kind"] for m in g["mappings"])


@pytest.mark.parametrize("name", _programs("bug"))
def test_mapping_bug_shown_by_host_device(built, tmp_path, name):
    """The deliberate bug: hidden natively and under run (same output), shown on the host
    device (the header's line)."""
    exe = built[name]
    want = _header(PROGRAMS / f"{name}.c")["host_device_lines"]
    assert want
    native = _run([exe])
    run = _shim([exe], tmp_path / "run.json", host_device=False)
    hd = _shim([exe], tmp_path / "hd.json", host_device=True)
    assert _same(native, run), _show(native=native, run=run)
    assert hd.returncode == native.returncode == 0, _show(native=native, host_device=hd)
    for line in want:
        assert line in hd.stdout.splitlines(), _show(host_device=hd)
        assert line not in native.stdout.splitlines()
    _check_report(tmp_path / "hd.json", host_device=True, registrations=None)


def test_target_maps_report_lists_each_mapping(built, tmp_path):
    """``--report`` on the host device names every list item of a region with its host
    address, size and map kind, and the reference counts libgomp gives them."""
    hd = _shim([built["target_maps"]], tmp_path / "hd.json", host_device=True)
    assert hd.returncode == 0, hd.stderr
    maps = json.loads((tmp_path / "hd.json").read_text())["gomp"]["mappings"]
    first = [m for m in maps if m["construct"] == "target" and m["op"] == "map"][:4]
    # map(to: a, b) map(from: c) map(tofrom: sum): 64 doubles, one double
    assert sorted((m["kind"], m["size"]) for m in first) == [
        ("from", 512), ("to", 512), ("to", 512), ("tofrom", 8)]
    assert all(m["refcount"] == 1 for m in first)
    assert [m["kind"] for m in maps if m["op"] == "firstprivate"] == ["firstprivate"]
    # map(tofrom: p[8:16]): 16 ints starting 32 bytes into p
    sec = [m for m in maps if m["op"] == "map" and m["size"] == 64 and m["kind"] == "tofrom"]
    assert len(sec) == 1
    copies = [m for m in maps if m["op"] == "copy_from" and m["host"] == sec[0]["host"]]
    assert copies and copies[0]["size"] == 64
    # every mapping made was removed again (nothing left mapped at exit)
    made = {m["host"] for m in maps if m["op"] == "map" and m["construct"] == "target"}
    gone = {m["host"] for m in maps if m["op"] == "unmap"}
    assert made <= gone


def _device_lines(out: str) -> dict[str, str]:
    return dict(ln.split("=", 1) for ln in out.splitlines() if "=" in ln)


@pytest.mark.parametrize("policy", [None, "disabled"])
def test_device_list_agrees(built, tmp_path, policy):
    """The program's omp_get_num_devices / omp_get_initial_device equal what the report
    says, in libgomp mode (libgomp's own list: here no device) and on the host device
    (one device, the initial device is 1; none under OMP_TARGET_OFFLOAD=disabled)."""
    exe = built["api_device_list"]
    env = {"OMP_TARGET_OFFLOAD": policy} if policy else None
    native = _run([exe], env)
    run = _shim([exe], tmp_path / "run.json", host_device=False, env_extra=env)
    hd = _shim([exe], tmp_path / "hd.json", host_device=True, env_extra=env)
    assert _same(native, run), _show(native=native, run=run)
    assert hd.returncode == 0, hd.stderr
    for res, rep_path, n in ((run, "run.json", 0), (hd, "hd.json", 0 if policy else 1)):
        seen = _device_lines(res.stdout)
        g = json.loads((tmp_path / rep_path).read_text())["gomp"]
        assert int(seen["num_devices"]) == g["devices"] == n
        assert int(seen["initial_device"]) == g["initial_device"] == n
        assert int(seen["device_num"]) == n                    # on the host
        assert seen["default_device"] == "0"
        # omp_target_alloc: NULL for -1, memory for 0..n (the devices and the host)
        assert seen["alloc(-1)"] == "NULL"
        assert all(seen[f"alloc({d})"] == "ok" for d in range(n + 1))
        # documented limit: the region's code is the host's
        assert seen["is_initial_device in region"] == "1"
    g = json.loads((tmp_path / "hd.json").read_text())["gomp"]
    if policy:
        assert g["outcomes"]["host-device"] == 0 and g["outcomes"]["host-fallback"] > 0
        assert "disabled" in g["regions"][0]["reason"]
    else:
        assert g["api_calls"]["omp_get_num_devices"] == 1
        assert g["outcomes"]["host-device"] == 1


def test_mandatory_same_bytes_exit_status(built, tmp_path):
    """OMP_TARGET_OFFLOAD=mandatory: a region on device 0 runs (libgomp 12 counts device
    0 as the initial device when it has none), a missing device is fatal with libgomp's
    exact bytes (leading newline) and status 1 -- natively, under run and on the host
    device."""
    exe = built["mandatory_fatal"]
    env = {"OMP_TARGET_OFFLOAD": "mandatory"}
    native = _run([exe], env)
    run = _shim([exe], tmp_path / "run.json", host_device=False, env_extra=env)
    hd = _shim([exe], tmp_path / "hd.json", host_device=True, env_extra=env)
    assert native.returncode == 1 and native.stdout == "x=42\n"
    assert native.stderr == MANDATORY
    assert _same(native, run), _show(native=native, run=run)
    assert _same(native, hd), _show(native=native, host_device=hd)
    for rep, first in (("run.json", "host-fallback"), ("hd.json", "host-device")):
        g = json.loads((tmp_path / rep).read_text())["gomp"]
        assert [r["outcome"] for r in g["regions"]] == [first, "fatal"]
        assert "MANDATORY" in g["regions"][1]["reason"]
        assert g["unregistrations"] == 1


def test_disabled_policy_three_way(built, tmp_path):
    """OMP_TARGET_OFFLOAD=disabled: no device anywhere, every construct falls back, the
    results are the native ones."""
    exe = built["enter_exit_refcount"]
    env = {"OMP_TARGET_OFFLOAD": "disabled"}
    native = _run([exe], env)
    run = _shim([exe], tmp_path / "run.json", host_device=False, env_extra=env)
    hd = _shim([exe], tmp_path / "hd.json", host_device=True, env_extra=env)
    assert _same(native, run) and _same(native, hd), _show(native=native, run=run, hd=hd)
    g = json.loads((tmp_path / "hd.json").read_text())["gomp"]
    assert g["devices"] == 0 and g["outcomes"]["host-device"] == 0
    assert all("disabled" in r["reason"] or "end of" in r["reason"] for r in g["regions"])


def test_library_python_host_three_way(built, tmp_path):
    """A GCC library loaded with ctypes by a Python program: the same three runs."""
    lib = built["lib_regions"]
    host = [sys.executable, "-P", str(PROGRAMS / "lib_host.py"), lib]
    native = _run(host)
    run = _shim(host, tmp_path / "run.json", host_device=False)
    hd = _shim(host, tmp_path / "hd.json", host_device=True)
    assert native.returncode == 0 and "lib_teams=499500" in native.stdout, native.stderr
    assert _same(native, run), _show(native=native, run=run)
    assert _same(native, hd), _show(native=native, host_device=hd)


@pytest.mark.parametrize("host_device", [False, True], ids=["libgomp", "host-device"])
def test_run_library(built, host_device):
    """``offload-shim run-library [--gomp-host-device]`` on the GCC library: the values of
    the native Python host, registration and unregistration on dlclose, and on the host
    device every construct there."""
    lib = built["lib_regions"]
    native = _run([sys.executable, "-P", str(PROGRAMS / "lib_host.py"), lib])
    want = _device_lines(native.stdout)
    calls = [a for n in ("lib_saxpy", "lib_enter_exit", "lib_teams") for a in ("--call", n)]
    opts = ["--gomp-host-device"] if host_device else []
    proc = _run([sys.executable, "-P", "-m", "offload_shim.cli", "run-library", "--library",
                 lib, *calls, *opts, "--json"])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {k: str(v) for k, v in out["results"].items()} == want
    g = out["gomp"]
    assert g["registrations"] == g["unregistrations"] == 1 and g["registered"] == 0
    assert out["errors"] == []
    if host_device:
        assert g["outcomes"]["host-device"] == sum(g["constructs"].values()) == 5
        assert g["live_mappings"] == []
    else:
        assert g["outcomes"]["host-fallback"] == 5


_LIB_IN_PROCESS = """
import json, os, sys
import offload_shim as osh
rt = osh.Runtime([], bundled=True, abi="gomp")     # the bundled plugin's GOMP view: 4 devices
with rt, osh.interpose(rt, gomp_host_device=sys.argv[2] == "1") as ip:
    lib = ip.load_library(sys.argv[1])
    out = {"devices": lib.call("lib_devices"), "saxpy": lib.call("lib_saxpy"),
           "gomp_devices": len(ip.gomp_devices()), "report": ip.gomp.report()["devices"],
           "runtime_gomp_devices": len(rt.devices)}
    ip.unload_library(lib)
print(json.dumps(out))
"""


@pytest.mark.parametrize("policy", [None, "mandatory"])
@pytest.mark.parametrize("host_device", [False, True], ids=["libgomp", "host-device"])
def test_device_list_with_the_bundled_gomp_view_loaded(built, host_device, policy):
    """A Python runtime that holds the bundled plugin's GOMP view (4 devices) does not
    change the GCC device list: libgomp's own (0 here) without the option, one device with
    it -- the library, the interposer and the report agree, and under mandatory the
    region runs (libgomp 12: device 0 is the initial device when there is none)."""
    env = {"OMP_TARGET_OFFLOAD": policy} if policy else None
    proc = _run([sys.executable, "-P", "-c", _LIB_IN_PROCESS, built["lib_regions"],
                 "1" if host_device else "0"], env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    n = 1 if host_device else 0
    assert out["runtime_gomp_devices"] == 4
    assert out["devices"] == 100 * n + n
    assert out["gomp_devices"] == out["report"] == n
    assert out["saxpy"] == 65536
