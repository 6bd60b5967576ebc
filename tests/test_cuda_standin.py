"""The CUDA paths through their control flow, in CI, on the CUDA driver stand-in.

STAND-IN, NOT A GPU: ``tests/cuda_standin/cuda_standin.c`` is a ``libcuda.so.1``
over host memory that records every call and answers with the driver's control
flow and error codes.  The real LLVM 16 CUDA plugins (nextgen, classic), the real
GCC 12 nvptx plugin and cuda-python run against it, each scenario in a child
process of its own (``tests/gpu_scenarios.py``, the same scenarios
``tests/test_gpu.py`` runs against a real driver).  Nothing here is a GPU
result: the device is named "offload_shim CUDA driver stand-in (no GPU)",
kernels are recorded and never run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cuda_standin
import gpu_scenarios as gs
from conftest import need

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def standin_dir(tmp_path_factory) -> Path:
    if cuda_standin.compiler() is None:
        pytest.skip("no C compiler to build the CUDA driver stand-in")
    return cuda_standin.build(tmp_path_factory.mktemp("cuda-standin"))


@pytest.fixture
def run_on_standin(standin_dir, tmp_path):
    """``run(name, *args, fail=None) -> (result, call log)`` on the stand-in."""
    def run(name, *args, fail=None, env=None):
        log = tmp_path / f"calls-{name}-{len(list(tmp_path.iterdir()))}.log"
        e = cuda_standin.env(standin_dir, log=log, fail=fail, base=env)
        res = gs.run(name, *args, env=e)
        assert res["returncode"] == 0 or "second_ok" in res, res["stderr"]
        return res, cuda_standin.read_log(log)
    return run


def _plugin(name: str) -> str:
    return need(gs.PLUGINS[name], f"the {name} CUDA plugin")


def _cuda_python():
    try:
        from cuda.bindings import driver  # noqa: F401
    except ImportError:
        try:
            from cuda import cuda  # noqa: F401
        except ImportError:
            pytest.skip("cuda-python not installed (pip install .[cuda])")


def _calls(log, fn):
    return [c for c in log if c[0] == fn]


def test_the_stand_in_says_what_it_is(run_on_standin):
    res, log = run_on_standin("identity")
    assert res["stand_in"] and res["name"] == cuda_standin.DEVICE_NAME
    assert res["devices"] == 1 and log[0][0] == "cuInit"


# -- item: LLVM 16 CUDA plugins open only libcuda.so -------------------------------------------

def test_llvm_cuda_plugins_find_the_driver_through_a_private_link(standin_dir, tmp_path):
    """A driver folder with ``libcuda.so.1`` but no ``libcuda.so`` (NVIDIA
    containers, Debian ``libcuda1``): the LLVM 16 CUDA plugin sees no driver
    (0 devices) while cuda-python does; :func:`gpu_scenarios.driver_env` puts
    a ``libcuda.so`` link in a private folder on the library path and the
    plugin finds the same driver."""
    _plugin("nextgen")
    only_so1 = tmp_path / "driver"
    only_so1.mkdir()
    shutil.copy(standin_dir / "libcuda.so.1", only_so1 / "libcuda.so.1")
    base = cuda_standin.env(only_so1)
    bare = gs.run("data_path", "nextgen", env=base)
    assert bare["returncode"] == 0, bare["stderr"]
    assert bare["devices"] == 1 and bare["num_devices"] == 0    # driver there, plugin blind

    env, why = gs.driver_env(tmp_path / "work", base=base)
    assert env is not None, why
    link = tmp_path / "work" / "cuda-link" / "libcuda.so"
    assert link.resolve() == (only_so1 / "libcuda.so.1").resolve()
    res = gs.run("data_path", "nextgen", env=env)
    assert res["returncode"] == 0, res["stderr"]
    assert res["num_devices"] == 1 and res["roundtrip"]

    nothing = dict(base, LD_LIBRARY_PATH=str(tmp_path / "empty"))
    env, why = gs.driver_env(tmp_path / "none", base=nothing)
    if env is None:           # (a machine with a system libcuda.so.1 finds that one)
        assert why.startswith("no CUDA driver library: dlopen(libcuda.so.1) failed")


# -- every plugin family through init, data path, pool, teardown -------------------------------

@pytest.mark.parametrize("plugin", ["nextgen", "classic", "nvptx"])
def test_cuda_plugins_run_their_control_flow_on_the_stand_in(run_on_standin, plugin):
    _plugin(plugin)
    res, log = run_on_standin("data_path", plugin)
    assert res["stand_in"] and res["num_devices"] == 1
    assert res["roundtrip"] and res["pooled_again"] and res["pool_hits"] >= 1
    names = [c[0] for c in log]
    allocs = [c for c in log if c[0] == "cuMemAlloc_v2" and c[2] == 0]
    frees = [c for c in log if c[0] == "cuMemFree_v2" and c[2] == 0]
    assert allocs
    if plugin == "classic":
        # LLVM 16 classic keeps freed small blocks in its own MemoryManagerTy (8 KiB
        # threshold) and drops them with the context, without cuMemFree
        assert len(frees) == len(allocs) - 1
    else:
        assert len(allocs) == len(frees)              # everything given back to the driver
    assert not [c for c in log if c[0] in ("cuMemAlloc", "cuMemFree", "cuMemcpyHtoD")], \
        "a 32-bit (CUDA 3.1 ABI) entry point was called"
    errors = [c for c in log if c[2] != 0]
    if plugin == "nvptx":
        # GCC: no context current at init (201) -> its own context, destroyed at fini
        assert [c[:1] + c[2:] for c in errors] == [("cuCtxGetDevice", 201)]
        assert "cuCtxCreate_v2" in names and names[-1] == "cuCtxDestroy_v2"
        assert "cuMemcpyHtoD_v2" in names and "cuMemGetAddressRange_v2" in names
    else:
        # LLVM: the primary context, retained at init and released at deinit
        assert errors == []
        assert "cuDevicePrimaryCtxRetain" in names
        assert names[-1] == "cuDevicePrimaryCtxRelease_v2"
        assert "cuMemcpyHtoDAsync_v2" in names and "cuStreamSynchronize" in names
        assert names.count("cuStreamCreate") == names.count("cuStreamDestroy_v2") > 0


@pytest.fixture(scope="session")
def fake_cubin(tmp_path_factory) -> str:
    """An ELF object with the symbol ``osh_increment`` whose e_machine says
    EM_CUDA (190): what the LLVM CUDA plugins accept as an image.  The
    stand-in loads any image and never runs code."""
    d = tmp_path_factory.mktemp("fake-cubin")
    src, obj = d / "k.c", d / "k.o"
    src.write_text("void osh_increment(long *p, long n) { for (long i = 0; i < n; i++) p[i]++; }\n")
    proc = subprocess.run([cuda_standin.compiler() or "cc", "-c", "-o", str(obj), str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    data = bytearray(obj.read_bytes())
    data[18:20] = (190).to_bytes(2, "little")          # e_machine = EM_CUDA
    out = d / "osh_kernel.cubin"
    out.write_bytes(bytes(data))
    return str(out)


@pytest.mark.parametrize("plugin", ["nextgen", "classic"])
def test_kernel_launch_control_flow_on_the_stand_in(run_on_standin, fake_cubin, plugin):
    """register an image, launch a kernel, read back, unregister: the launch
    reaches cuLaunchKernel and is recorded, never run (the data comes back
    unchanged).  LLVM 16 classic takes its stream from the async info (NULL
    crashed it): the launch passes one and synchronizes on it."""
    _plugin(plugin)
    res, log = run_on_standin("kernel", plugin, fake_cubin, "1000")
    assert res["correct"] is False and res["first"] == [0, 1, 2, 3]   # not run: stand-in
    names = [c[0] for c in log]
    launches = _calls(log, "cuLaunchKernel")
    assert len(launches) == 1 and "osh_increment" in launches[0][1] and launches[0][2] == 0
    assert "NOT RUN" in launches[0][1]
    assert names.index("cuModuleLoadDataEx") < names.index("cuLaunchKernel") \
        < names.index("cuModuleUnload")
    after = names[names.index("cuLaunchKernel") + 1:]
    assert "cuStreamSynchronize" in after[:3]


# -- item: one process per plugin family ------------------------------------------------------

def test_llvm_shutdown_leaves_a_destroyed_context_for_gcc_in_the_same_process(run_on_standin):
    """After an LLVM 16 CUDA plugin shuts down, the primary context it
    released stays current on the thread; the GCC nvptx plugin's device init
    in the same process then fails with 709 (context is destroyed).  The other
    order works (GCC destroys and pops its own context).  So tests/test_gpu.py
    runs each plugin family in a child process of its own."""
    _plugin("nextgen")
    _plugin("nvptx")
    res, log = run_on_standin("families_in_one_process", "nextgen", "nvptx")
    assert res["first_ok"] and not res["second_ok"]
    assert "GOMP_OFFLOAD_init_device failed" in res["second_error"]
    assert "context is destroyed" in res["stderr"]
    assert res["current_after_first"] > 0              # still current after the release
    assert ("cuCtxGetDevice", 709) in [(c[0], c[2]) for c in log]
    res, _ = run_on_standin("families_in_one_process", "nvptx", "nextgen")
    assert res["first_ok"] and res["second_ok"] and res["current_after_first"] == 0


# -- items: cuMemHostRegister backend (chosen for CUDA plugins, per page, context kept) ----------

@pytest.mark.parametrize("plugin", ["nextgen", "classic", "nvptx"])
def test_mapped_pinning_on_cuda_plugins_registers_with_the_driver(run_on_standin, plugin):
    """pinned='mapped' on a CUDA plugin pins with cuMemHostRegister (LLVM
    16's CUDA ``data_lock`` returns the pointer and pins nothing); two
    buffers on one page are both pinned (one driver registration, counted
    per page); the thread's current context is the same before and after each
    pinned copy (GCC's own context on nvptx, the primary one on LLVM)."""
    _plugin(plugin)
    _cuda_python()
    res, log = run_on_standin("pinned", plugin)
    assert res["backend"] == "cuda"
    assert res["warnings"] == [] and res["skipped"] == 0
    assert res["ranges"] == 2 and res["bytes_pinned"] == {"cuda": 256}
    assert res["driver_registrations"] == 1
    assert res["ranges_after_one_free"] == 1 and res["driver_registrations_after_one_free"] == 1
    assert res["ranges_after_frees"] == 0 and res["driver_registrations_after_frees"] == 0
    assert res["context_kept"]
    reg = _calls(log, "cuMemHostRegister_v2")
    assert len(reg) == 1 and reg[0][2] == 0
    assert len(_calls(log, "cuMemHostUnregister")) == 1
    # every driver call of the backend runs between a push and a pop of the primary context
    for i, c in enumerate(log):
        if c[0] in ("cuMemHostRegister_v2", "cuMemHostUnregister"):
            assert log[i - 1][0] == "cuCtxPushCurrent_v2" and log[i + 1][0] == "cuCtxPopCurrent_v2"
    # the backend's own retain of the primary context is released before the device goes
    retains = len(_calls(log, "cuDevicePrimaryCtxRetain"))
    releases = len(_calls(log, "cuDevicePrimaryCtxRelease_v2"))
    assert retains == releases >= 1


# -- item 9 of issue 28: device arrays on a CUDA device -------------------------------------------

@pytest.mark.parametrize("plugin", ["nextgen", "classic", "nvptx"])
def test_device_arrays_on_cuda_plugins_export_cuda_memory(run_on_standin, plugin):
    """On a CUDA plugin a device array is kDLCUDA memory (device 0), never viewed by
    NumPy: ``numpy.from_dlpack`` refuses, ``numpy.asarray`` and ``get`` copy back
    through ``cuMemcpyDtoH``; ``__cuda_array_interface__`` names the device address,
    and its reader holds the memory (the close is refused while the array lives)."""
    _plugin(plugin)
    res, log = run_on_standin("arrays", plugin)
    assert res["num_devices"] == 1 and res["memory_is_host"] is False
    assert res["dlpack_device"] == [2, 0]
    assert res["roundtrip"] and res["asarray_copies"] and res["from_dlpack_cpu_copy"]
    assert res["numpy_from_dlpack"] != "viewed"
    assert res["cai"] == {"data": True, "typestr": "<f8", "shape": [10, 100], "version": 3}
    assert res["views_after_cai"] == 1 and res["close_with_cai_reader"] == "ExportedMemoryError"
    assert res["views_after_del"] == 0
    assert res["books"] == {"bytes_in_use": 0, "live_blocks": 0, "balanced": True}
    assert any(c[0].startswith("cuMemcpyDtoH") for c in log)


def test_cuda_backend_counts_registrations_per_page(run_on_standin):
    _cuda_python()
    res, log = run_on_standin("backend_pages")
    ps = res["page"]
    want = [
        ["lock [0, 100)", [[0, ps, 1]]],
        ["lock [200, 300)", [[0, ps, 2]]],                        # same page: counted
        ["lock [ps-10, ps+10)", [[0, ps, 3], [ps, 2 * ps, 1]]],   # only page 1 is new
        ["unlock [0, 100)", [[0, ps, 2], [ps, 2 * ps, 1]]],
        ["unlock [ps-10, ps+10)", [[0, ps, 1]]],
        ["unlock [200, 300)", []],
        ["lock [ps, ps+8)", [[ps, 2 * ps, 1]]],
        ["lock [0, 3 ps)", [[0, ps, 1], [ps, 2 * ps, 2], [2 * ps, 3 * ps, 1]]],
        ["unlock [0, 3 ps)", [[ps, 2 * ps, 1]]],
        ["unlock [ps, ps+8)", []],
        ["close", []],
    ]
    assert [s[:2] for s in res["steps"]] == want
    assert all(s[2] for s in res["steps"])                      # no context left behind
    assert all(c[2] == 0 for c in log if c[0].startswith("cuMemHost"))
    # unregister only ever what was registered (starts), each once
    regs = [c[1].split(",")[0].strip("(") for c in _calls(log, "cuMemHostRegister_v2")]
    unregs = [c[1].strip("()") for c in _calls(log, "cuMemHostUnregister")]
    assert sorted(regs) == sorted(unregs)


def test_cuda_backend_rolls_back_a_failed_registration(run_on_standin):
    """The 5th cuMemHostRegister (page 2 of a lock that needs pages 0 and 2)
    fails: the error carries the CUresult, page 0 is unregistered again, the
    page run that was there before stays."""
    _cuda_python()
    res, log = run_on_standin("backend_pages", fail="cuMemHostRegister_v2:5:2")
    ps = res["page"]
    assert res["error"] == {"type": "PinnedMemoryError", "code": 2, "function": "cuMemHostRegister"}
    steps = {s[0]: s[1] for s in res["steps"]}
    assert steps["failed lock [0, 3 ps)"] == [[ps, 2 * ps, 1]]
    assert steps["close"] == []
    regs = [c for c in _calls(log, "cuMemHostRegister_v2") if c[2] == 0]
    assert len(regs) == len(_calls(log, "cuMemHostUnregister"))


# -- the prepared GPU check, dry run ------------------------------------------------------------

def _documented_dry_run() -> str:
    """The dry-run command of docs/testing.md ("GPU check"), as written there."""
    text = (ROOT / "docs" / "testing.md").read_text()
    lines = [ln for ln in text.splitlines()
             if "gpu-check.sh --bundle none --stand-in" in ln and ln.startswith("OUT=")]
    assert len(lines) == 1, lines
    return lines[0].split("#")[0].strip()


def test_gpu_check_dry_run_on_the_stand_in(standin_dir, tmp_path):
    """The documented dry run, ``OUT=... PYTHON=.venv/bin/python bash scripts/gpu-check.sh
    --bundle none --stand-in`` from the checkout (what a lent GPU machine runs, with the
    stand-in for the driver and what is installed here for the bundle; PYTHON a path
    relative to the checkout, as written), passes, writes at most 8 files under $OUT,
    each labelled STAND-IN, counts the tests (every file with a test marked gpu,
    liboffload's included) and every GPU benchmark row, and exits 0; a failing test
    makes it exit non-zero."""
    _plugin("nextgen")
    _cuda_python()
    cmd = _documented_dry_run()
    assert "PYTHON=.venv/bin/python" in cmd, cmd
    # this run's interpreter, by a path relative to the checkout as the docs give it
    # (.venv/bin/python in a checkout set up by scripts/setup.sh)
    rel = os.path.relpath(sys.executable, ROOT)
    cmd = cmd.replace("PYTHON=.venv/bin/python", f"PYTHON={rel}")
    out = tmp_path / "out"
    cmd = re.sub(r"^OUT=\S+", f"OUT={out}", cmd)
    env = dict(os.environ, OSH_CUDA_STANDIN_DIR=str(standin_dir))
    env.pop("PYTHON", None)
    proc = subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    files = sorted(p.name for p in out.iterdir())
    assert 0 < len(files) <= 8 and all(p.is_file() for p in out.iterdir())
    for f in out.iterdir():
        assert "STAND-IN" in f.read_text(errors="replace")[:400], f.name
    summary = (out / "summary.txt").read_text()
    assert "RESULT: PASS" in summary and "STAND-IN" in summary
    assert "passed" in (out / "pytest-gpu.txt").read_text()
    # every file with a gpu test ran, and every GPU row of the benchmark was asked for
    head = (out / "pytest-gpu.txt").read_text().splitlines()[1]
    assert all(f in head for f in ("test_gpu.py", "test_pinned.py", "test_liboffload_gpu.py"))
    from offload_shim.bench.gpu import GPU_ROWS
    for row in GPU_ROWS:
        assert re.search(rf"^  {re.escape(row)}: (measured|skipped: )", summary, re.M), row
    assert "missing" in summary and " 0 missing" in summary

    out2 = tmp_path / "out2"
    out2.mkdir()
    # the first host-to-device copy of each process fails (999): the data path tests fail
    env.update(OUT=str(out2), PYTHON=sys.executable,
               OSH_CUDA_STANDIN_FAIL="cuMemcpyHtoDAsync_v2:1:999,cuMemcpyHtoD_v2:1:999")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--bundle", "none",
                           "--stand-in"], env=env, capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert proc.returncode != 0
    assert "RESULT: FAIL" in (out2 / "summary.txt").read_text()


def _tally():
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_check_tally",
                                                  ROOT / "scripts" / "gpu_check_tally.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _junit(path, cases):
    inner = {"pass": "", "fail": '<failure message="boom"/>', "error": '<error message="boom"/>'}
    body = "".join(
        f'<testcase classname="tests.test_gpu" name="t{i}">'
        + (inner[kind] if kind in inner else f'<skipped type="pytest.skip" message="{kind}"/>')
        + "</testcase>" for i, kind in enumerate(cases))
    path.write_text(f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite>{body}'
                    "</testsuite></testsuites>")
    return str(path)


@pytest.mark.parametrize("cases,stand_in,rc", [
    (["pass"] + ["CUDA driver present but no device (cuInit 100)"] * 10, False, 1),
    (["pass", "clang-16 not installed (apt-get install clang-16)",
      "liboffload 22 not unpacked (scripts/setup.sh)"], False, 0),
    (["pass", "the CUDA driver stand-in records kernel launches and never runs them"],
     False, 1),
    (["pass", "the CUDA driver stand-in records kernel launches and never runs them"],
     True, 0),
    (["pass", "fail"], False, 1), (["pass", "error"], False, 1),
    (["clang-16 not installed"], False, 5), ([], False, 5)])
def test_gpu_check_passes_only_when_the_hardware_tests_ran(tmp_path, cases, stand_in, rc):
    """"1 passed, 10 skipped" is no PASS: a skip passes only with a reason the lent
    machine gives by design (no clang-16 there, no liboffload 22 in the bundle)."""
    t = _tally()
    lines, got = t.tally_tests(_junit(tmp_path / "r.xml", cases), str(tmp_path / "none"),
                               stand_in)
    assert got == rc, lines
    skipped = sum(1 for c in cases if c not in ("pass", "fail", "error"))
    assert lines[0].startswith(f"{cases.count('pass')} passed, {skipped} skipped")


def test_gpu_check_counts_tests_from_the_text_when_pytest_was_cut_short(tmp_path):
    t = _tally()
    txt = tmp_path / "p.txt"
    txt.write_text("test_gpu.py::test_a PASSED [ 10%]\ntest_gpu.py::test_b SKIPPED (x)\n"
                   "test_pinned.py::test_c FAILED [ 30%]\n")
    lines, rc = t.tally_tests(str(tmp_path / "missing.xml"), str(txt), False)
    assert rc == 1 and lines[0].startswith("1 passed, 1 skipped, 1 failed, 0 errors (from")


def test_gpu_check_finds_every_gpu_bench_row(tmp_path):
    """Each row of GPU_ROWS is asked for by its full name, and the tally says which are
    measured, skipped (with the reason) or missing; no GPU row name selects a CPU row."""
    from offload_shim.bench.backends import CPU_ROWS
    from offload_shim.bench.gpu import GPU_ROWS
    for row in GPU_ROWS:
        assert not [c for c in CPU_ROWS if row in c], row
    t = _tally()
    txt = tmp_path / "b.txt"
    txt.write_text("| cuda:cuMemAlloc [STAND-IN, not a GPU] | 1 |\n"
                   "| pool:exact/cuMemAlloc | 2 |\n"
                   "* `cupy:MemoryPool`: CuPy unavailable\n")
    lines, rc = t.tally_bench(str(txt), ["cuda:cuMemAlloc", "pool:exact/cuMemAlloc",
                                         "cupy:MemoryPool", "pool:exact/cuMemAllocAsync"])
    assert rc == 1 and lines[0] == "2 of 4 GPU rows measured, 1 skipped, 1 missing"
    assert "  pool:exact/cuMemAllocAsync: MISSING (not in the output)" in lines
    assert "  cupy:MemoryPool: skipped: CuPy unavailable" in lines
