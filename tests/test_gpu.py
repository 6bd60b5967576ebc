"""GPU paths (issues 5, 6, 7): run only when cuda-python finds a driver and a device.

On machines without one every test here is skipped with the reason.  Run them on a GPU
machine with ``scripts/gpu-check.sh`` (one prepared command; output goes to docs/).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from array import array
from pathlib import Path

import pytest

import offload_shim as osh
from offload_shim.plugins.plugin import load_plugin

pytestmark = pytest.mark.gpu

CUDA16_NEXTGEN = Path("/usr/lib/llvm-16/lib/libomptarget.rtl.cuda.nextgen.so.16")
CUDA16_CLASSIC = Path("/usr/lib/llvm-16/lib/libomptarget.rtl.cuda.so.16")
NVPTX12 = Path("/usr/lib/x86_64-linux-gnu/libgomp-plugin-nvptx.so.1")


def _driver():
    try:
        from cuda.bindings import driver          # cuda-python >= 12.6 / 13
    except ImportError:
        try:
            from cuda import cuda as driver       # older cuda-python
        except ImportError:
            return None
    return driver


def cuda_devices() -> tuple[int, str]:
    """(device count, reason when 0)."""
    drv = _driver()
    if drv is None:
        return 0, "cuda-python is not installed (pip install .[cuda])"
    try:
        err, = drv.cuInit(0)
    except Exception as exc:  # libcuda.so missing
        return 0, f"no CUDA driver: {exc}"
    if int(err) != 0:
        return 0, f"cuInit failed ({err}): no CUDA driver or device"
    err, n = drv.cuDeviceGetCount()
    if int(err) != 0 or n == 0:
        return 0, "CUDA driver present but no device"
    return n, ""


@pytest.fixture(scope="module", autouse=True)
def _need_gpu():
    n, why = cuda_devices()
    if not n:
        pytest.skip(why)


@pytest.mark.parametrize("path", [CUDA16_NEXTGEN, CUDA16_CLASSIC], ids=["nextgen", "classic"])
def test_cuda_plugin_data_path_and_pool(path):
    if not path.exists():
        pytest.skip(f"{path} not installed")
    with osh.Runtime([str(path)]) as rt:
        assert rt.devices, "the CUDA plugin reports no device although the driver has one"
        dev = rt.devices[0]
        src = array("q", range(4096))
        p = dev.alloc(len(src) * 8)
        dev.submit(p, src)
        out = array("q", bytes(len(src) * 8))
        dev.retrieve(out, p)
        assert out == src
        dev.free(p)
        q = dev.alloc(len(src) * 8)            # above the 8 KiB threshold: not pooled
        dev.free(q)
        small = dev.alloc(256)
        dev.free(small)
        assert dev.alloc(256) == small         # pooled: the same block again
        dev.free(small)
        assert dev.pool.stats.hits >= 1


def test_gcc_nvptx_plugin_initialises_a_device():
    if not NVPTX12.exists():
        pytest.skip("libgomp-plugin-nvptx1 not installed")
    with osh.Runtime([str(NVPTX12)]) as rt:
        assert rt.devices
        dev = rt.devices[0]
        p = dev.alloc(1 << 20)
        dev.submit(p, bytearray(b"\x5a" * (1 << 20)))
        out = bytearray(1 << 20)
        dev.retrieve(out, p)
        assert out == bytearray(b"\x5a" * (1 << 20))
        dev.free(p)


def test_pinned_memory_cuda_backend():
    if not CUDA16_NEXTGEN.exists():
        pytest.skip("LLVM 16 CUDA plugin not installed")
    with osh.Runtime([str(CUDA16_NEXTGEN)], pinned="mapped") as rt:
        dev = rt.devices[0]
        buf = bytearray(1 << 16)
        p = dev.alloc(len(buf))
        dev.submit(p, buf)
        assert sum(rt.pinned_memory.bytes_pinned().values()) > 0
        dev.free(p)


def test_clang_nvptx_library_through_the_cuda_plugin(tmp_path):
    """Issue 7 item 6: -fopenmp-targets=nvptx64-nvidia-cuda through the LLVM 16 CUDA
    plugin via the Python runtime gives the results of the real libomptarget."""
    import test_interpose as ti
    clang = ti._clang()
    lib = tmp_path / "libomp_regions_nvptx.so"
    cmd = [clang, "-fopenmp", "-fopenmp-targets=nvptx64-nvidia-cuda", "-shared", "-fPIC",
           "-O1", "-Wl,-Bsymbolic", str(ti.SAMPLE), "-o", str(lib)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot build for nvptx64 ({' '.join(cmd)}): {proc.stderr[-1500:]}")
    ref = ti._plain(str(lib), {"OMP_TARGET_OFFLOAD": "mandatory"})
    run, data = ti._run_library(str(lib), [str(CUDA16_NEXTGEN)], policy="mandatory")
    assert run.returncode == 0, run.stdout + run.stderr
    assert data["results"] == ref
