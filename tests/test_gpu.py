"""GPU tests: the CUDA plugins, cuMemHostRegister pinning and kernels on a real GPU.

They run only where a CUDA driver with a device is found, and are skipped with
the reason everywhere else.  On a lent GPU machine run them with
``scripts/gpu-check.sh`` (docs/testing.md, "GPU check").  Every scenario runs in a
child process of its own (``tests/gpu_scenarios.py``):

* the child's library path starts with a private folder holding a ``libcuda.so``
  link to the ``libcuda.so.1`` found, because the LLVM 16 CUDA plugins open only
  ``libcuda.so`` (NVIDIA containers and Debian's ``libcuda1`` ship ``libcuda.so.1``);
* each plugin family has its own process: after the LLVM CUDA plugins shut down,
  the primary context they released stays current and the GCC nvptx plugin's
  device init in the same process fails (709);
  ``test_gcc_after_llvm_in_one_process`` checks that claim on the real driver.

The same scenarios run in CI against the CUDA driver stand-in
(``tests/test_cuda_standin.py``).  Here the stand-in is refused unless
``OSH_GPU_CHECK_STAND_IN=1`` (the labelled dry run of ``scripts/gpu-check.sh``);
tests that need kernels to run skip on it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

import gpu_scenarios as gs

pytestmark = pytest.mark.gpu


@dataclass
class Gpu:
    env: dict
    identity: dict

    @property
    def stand_in(self) -> bool:
        return bool(self.identity.get("stand_in"))


@pytest.fixture(scope="module")
def gpu(tmp_path_factory) -> Gpu:
    env, why = gs.driver_env(tmp_path_factory.mktemp("cuda"))
    if env is None:
        pytest.skip(why)
    ident = gs.run("identity", env=env)
    if ident["returncode"] != 0:
        pytest.skip(f"libcuda.so.1 loads but cannot be queried: {ident['stderr'][-400:]}")
    if ident["init"] != 0 or ident["devices"] < 1:
        pytest.skip(f"CUDA driver present but no device (cuInit {ident['init']}, "
                    f"{ident['devices']} devices)")
    if ident["stand_in"] and os.environ.get("OSH_GPU_CHECK_STAND_IN") != "1":
        pytest.skip("the CUDA driver on the library path is the offload_shim stand-in, not a "
                    "GPU (OSH_GPU_CHECK_STAND_IN=1 runs these tests against it, labelled)")
    return Gpu(env, ident)


def _run(gpu: Gpu, name: str, *args: str) -> dict:
    res = gs.run(name, *args, env=gpu.env)
    assert res["returncode"] == 0, res["stderr"]
    assert res["stand_in"] == gpu.stand_in and res["name"] == gpu.identity["name"]
    return res


def _plugin(name: str) -> str:
    path = gs.PLUGINS[name]
    if not path.exists():
        pytest.skip(f"{path} not installed (libomp5-16 / libgomp-plugin-nvptx1, or "
                    "OSH_LLVM16_LIB / OSH_GOMP_PLUGIN_DIR)")
    return str(path)


def _kernels_run(gpu: Gpu) -> None:
    if gpu.stand_in:
        pytest.skip("the CUDA driver stand-in records kernel launches and never runs them")


@pytest.mark.parametrize("plugin", ["nextgen", "classic"])
def test_cuda_plugin_data_path_and_pool(gpu, plugin):
    _plugin(plugin)
    res = _run(gpu, "data_path", plugin)
    assert res["num_devices"] >= 1, "the CUDA plugin reports no device although the driver has one"
    assert res["roundtrip"] and res["pooled_again"] and res["pool_hits"] >= 1


def test_gcc_nvptx_plugin_data_path(gpu):
    _plugin("nvptx")
    res = _run(gpu, "data_path", "nvptx", str(1 << 20))
    assert res["num_devices"] >= 1 and res["roundtrip"] and res["pooled_again"]


def test_gcc_after_llvm_in_one_process(gpu):
    """The reason for one process per plugin family, on the real driver: after
    the LLVM 16 CUDA plugin shut down, its released primary context is still
    current, and the GCC nvptx plugin's device init fails with 709 (the
    stand-in answers the same; this is the check that it mimics the driver)."""
    _plugin("nextgen")
    _plugin("nvptx")
    res = _run(gpu, "families_in_one_process", "nextgen", "nvptx")
    assert res["first_ok"] and res["current_after_first"] > 0
    assert not res["second_ok"] and "context is destroyed" in res["stderr"]


@pytest.mark.parametrize("plugin", ["nextgen", "classic", "nvptx"])
def test_device_arrays_on_the_gpu(gpu, plugin):
    """Device arrays in GPU memory (issue 28 item 9): kDLCUDA with the CUDA ordinal,
    ``__cuda_array_interface__`` on the device address, copies back through the
    plugin, the close refused while a CAI reader may hold the array; with CuPy
    installed, ``cupy.from_dlpack`` views the same device address."""
    _plugin(plugin)
    res = _run(gpu, "arrays", plugin)
    assert res["num_devices"] >= 1 and res["memory_is_host"] is False
    assert res["dlpack_device"] == [2, 0]
    assert res["roundtrip"] and res["asarray_copies"] and res["from_dlpack_cpu_copy"]
    assert res["numpy_from_dlpack"] != "viewed"
    assert res["cai"] == {"data": True, "typestr": "<f8", "shape": [10, 100], "version": 3}
    assert res["close_with_cai_reader"] == "ExportedMemoryError" and res["views_after_del"] == 0
    assert res["books"] == {"bytes_in_use": 0, "live_blocks": 0, "balanced": True}
    if "cupy_same_address" in res:
        assert res["cupy_same_address"] and res["cupy_roundtrip"]


@pytest.mark.parametrize("plugin", ["nextgen", "nvptx"])
def test_pinned_memory_cuda_backend(gpu, plugin):
    """pinned='mapped': cuMemHostRegister for CUDA plugins, two buffers on one
    page both pinned (one driver registration), the thread's context kept."""
    _plugin(plugin)
    res = _run(gpu, "pinned", plugin)
    assert res["backend"] == "cuda"
    assert res["warnings"] == [] and res["skipped"] == 0 and res["ranges"] == 2
    assert res["driver_registrations"] == 1 and res["driver_registrations_after_frees"] == 0
    assert res["context_kept"]


def test_cuda_host_register_counts_pages(gpu):
    res = _run(gpu, "backend_pages")
    assert "error" not in res
    assert [s[1] for s in res["steps"]][-1] == [] and all(s[2] for s in res["steps"])
    ps = res["page"]
    assert res["steps"][2][1] == [[0, ps, 3], [ps, 2 * ps, 1]]


@pytest.mark.parametrize("plugin", ["nextgen", "classic"])
def test_kernel_through_the_llvm_cuda_plugin(gpu, plugin, tmp_path):
    """A cubin built here with nvcc, registered as an image, its kernel
    launched through the Python runtime and the LLVM 16 CUDA plugin."""
    _plugin(plugin)
    _kernels_run(gpu)
    cubin, why = gs.build_cubin(tmp_path)
    if cubin is None:
        pytest.skip(why)
    res = _run(gpu, "kernel", plugin, cubin)
    assert res["correct"], res["first"]


def test_clang_nvptx_library_through_the_cuda_plugin(gpu, tmp_path):
    """-fopenmp-targets=nvptx64-nvidia-cuda through the LLVM 16 CUDA plugin via
    the Python runtime gives the results of the real libomptarget."""
    import subprocess

    import test_interpose as ti
    _plugin("nextgen")
    _kernels_run(gpu)
    clang = ti._clang()
    lib = tmp_path / "libomp_regions_nvptx.so"
    cmd = [clang, "-fopenmp", "-fopenmp-targets=nvptx64-nvidia-cuda", "-shared", "-fPIC",
           "-O1", "-Wl,-Bsymbolic", str(ti.SAMPLE), "-o", str(lib)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot build for nvptx64 ({' '.join(cmd)}): {proc.stderr[-1500:]}")
    extra = {"LD_LIBRARY_PATH": gpu.env["LD_LIBRARY_PATH"]}
    ref = ti._plain(str(lib), dict(extra, OMP_TARGET_OFFLOAD="mandatory"))
    run, data = ti._run_library(str(lib), [str(gs.PLUGINS["nextgen"])], policy="mandatory",
                                env_extra=extra)
    assert run.returncode == 0, run.stdout + run.stderr
    assert data["results"] == ref
