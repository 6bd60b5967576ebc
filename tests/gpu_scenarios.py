"""CUDA scenarios, each run in a child process of its own against a CUDA driver.

The driver is the real one (``tests/test_gpu.py`` on a GPU machine) or the
CUDA driver stand-in (``tests/test_cuda_standin.py`` in CI, labelled so);
the scenario code is the same.  A child per scenario:

* the LLVM 16 CUDA plugins open ``libcuda.so`` only, the GCC plugin and
  cuda-python ``libcuda.so.1``; :func:`driver_env` finds ``libcuda.so.1`` and
  puts a ``libcuda.so`` link to it in a private folder first on the child's
  library path (glibc reads ``LD_LIBRARY_PATH`` once, at process start);
* after an LLVM CUDA plugin shuts down, the primary context it released stays
  current on the thread, and the driver answers 709 (context is destroyed)
  to the GCC nvptx plugin's device init in the same process: each plugin
  family runs in its own process.

Run one by hand: ``python tests/gpu_scenarios.py NAME [ARGS...]`` (prints one
JSON line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

LLVM16_DIR = Path(os.environ.get("OSH_LLVM16_LIB", "/usr/lib/llvm-16/lib"))
GOMP_DIR = Path(os.environ.get("OSH_GOMP_PLUGIN_DIR", "/usr/lib/x86_64-linux-gnu"))
PLUGINS = {
    "nextgen": LLVM16_DIR / "libomptarget.rtl.cuda.nextgen.so.16",
    "classic": LLVM16_DIR / "libomptarget.rtl.cuda.so.16",
    "nvptx": GOMP_DIR / "libgomp-plugin-nvptx.so.1",
}
STAND_IN_NAME = "offload_shim CUDA driver stand-in (no GPU)"


# -- parent side ------------------------------------------------------------------------

def locate_driver(env: dict) -> tuple[str | None, str]:
    """(path of the ``libcuda.so.1`` a process started with ``env`` loads, or
    None; the reason when None)."""
    code = ("import ctypes, os\n"
            "try:\n"
            "    ctypes.CDLL('libcuda.so.1')\n"
            "except OSError as e:\n"
            "    print('ERR', e); raise SystemExit(0)\n"
            "for line in open('/proc/self/maps'):\n"
            "    p = line.split()[-1]\n"
            "    if '/libcuda.so' in p:\n"
            "        print('OK', os.path.realpath(p)); break\n")
    proc = subprocess.run([sys.executable, "-P", "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)
    out = proc.stdout.strip()
    if out.startswith("OK "):
        return out[3:], ""
    return None, (f"no CUDA driver library: dlopen(libcuda.so.1) failed "
                  f"({out[4:] or proc.stderr.strip()[-300:]})")


def driver_env(workdir: str | os.PathLike, base: dict | None = None) -> tuple[dict | None, str]:
    """(environment for scenario children, ""), or (None, reason) when no
    ``libcuda.so.1`` can be loaded.  The environment has a private folder
    ``workdir/cuda-link`` holding ``libcuda.so`` -> the driver first on
    ``LD_LIBRARY_PATH``, so the LLVM 16 CUDA plugins (which open only
    ``libcuda.so``) find the same driver as cuda-python and the GCC plugin."""
    env = dict(os.environ if base is None else base)
    path, why = locate_driver(env)
    if path is None:
        return None, why
    link_dir = Path(workdir) / "cuda-link"
    link_dir.mkdir(parents=True, exist_ok=True)
    link = link_dir / "libcuda.so"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(path)
    old = env.get("LD_LIBRARY_PATH", "")
    env["LD_LIBRARY_PATH"] = str(link_dir) + (os.pathsep + old if old else "")
    return env, ""


def run(name: str, *args: str, env: dict, timeout: float = 180) -> dict:
    """Run scenario ``name`` in a child with ``env``; its JSON result plus
    ``returncode`` and ``stderr`` (last 3,000 characters)."""
    proc = subprocess.run([sys.executable, "-P", str(Path(__file__).resolve()), name, *args],
                          env=env, capture_output=True, text=True, timeout=timeout)
    res: dict = {}
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            res = json.loads(line)
            break
    res["returncode"] = proc.returncode
    res["stderr"] = proc.stderr[-3000:]
    return res


# -- child side ---------------------------------------------------------------------------

def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:
        from cuda import cuda as driver           # older cuda-python
    return driver


def driver_identity() -> dict:
    """``{"devices", "name", "stand_in"}`` of the driver this process loads
    (ctypes, so cuda-python is not needed)."""
    import ctypes
    lib = ctypes.CDLL("libcuda.so.1")
    n, name = ctypes.c_int(0), ctypes.create_string_buffer(256)
    rc = lib.cuInit(0)
    if rc == 0:
        lib.cuDeviceGetCount(ctypes.byref(n))
    if n.value:
        lib.cuDeviceGetName(name, 256, 0)
    return {"init": rc, "devices": n.value, "name": name.value.decode(errors="replace"),
            "stand_in": hasattr(lib, "osh_cuda_standin_marker")}


def _current_context() -> int:
    drv = _driver()
    err, ctx = drv.cuCtxGetCurrent()
    return int(ctx) if int(err) == 0 and ctx is not None else -int(err)


def scenario_identity() -> dict:
    return driver_identity()


def scenario_data_path(plugin: str, nbytes: str = "32768") -> dict:
    """Init, alloc, submit, retrieve, free through the pool, teardown."""
    from array import array

    import offload_shim as osh
    n = int(nbytes) // 8
    out: dict = {"plugin": plugin, **driver_identity()}
    with osh.Runtime([str(PLUGINS[plugin])]) as rt:
        out["num_devices"] = len(rt.devices)
        if not rt.devices:
            return out
        dev = rt.devices[0]
        src = array("q", range(n))
        p = dev.alloc(len(src) * 8)
        dev.submit(p, src)
        back = array("q", bytes(len(src) * 8))
        dev.retrieve(back, p)
        out["roundtrip"] = back == src
        dev.free(p)
        small = dev.alloc(256)
        dev.free(small)
        out["pooled_again"] = dev.alloc(256) == small
        dev.free(small)
        out["pool_hits"] = dev.pool.stats.hits
    return out


def scenario_families_in_one_process(first: str = "nextgen", second: str = "nvptx") -> dict:
    """Two plugin families one after the other in this process: the second
    one's device init, and the thread's context in between."""
    import offload_shim as osh
    out: dict = {"first": first, "second": second, **driver_identity()}
    for key, plugin in (("first_ok", first), ("second_ok", second)):
        try:
            with osh.Runtime([str(PLUGINS[plugin])]) as rt:
                dev = rt.devices[0]
                dev.free(dev.alloc(64))
            out[key] = True
        except osh.OffloadError as exc:
            out[key] = False
            out[key.replace("ok", "error")] = f"{type(exc).__name__}: {exc}"
        if key == "first_ok":
            out["current_after_first"] = _current_context()
    return out


def scenario_pinned(plugin: str) -> dict:
    """pinned='mapped' on a CUDA plugin: the backend, two buffers sharing a
    page, the thread's context around each pinned copy, teardown."""
    import mmap

    import offload_shim as osh
    from offload_shim.memory import pinned as pm
    out: dict = {"plugin": plugin, **driver_identity()}
    page = mmap.mmap(-1, mmap.PAGESIZE)            # two 128-byte buffers on one page
    a, b = memoryview(page)[0:128], memoryview(page)[256:384]
    with osh.Runtime([str(PLUGINS[plugin])], pinned="mapped") as rt:
        dev = rt.devices[0]
        reg = rt.pinned_memory
        out["backend"] = reg.backend_for(dev)
        ta, tb = dev.alloc(128), dev.alloc(128)
        before = _current_context()
        import warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            dev.submit(ta, a)
            dev.submit(tb, b)
        out["context_kept"] = _current_context() == before
        out["warnings"] = [str(x.message) for x in w]
        out["skipped"] = reg.skipped
        out["ranges"] = len(reg.ranges(dev))
        out["bytes_pinned"] = reg.bytes_pinned()
        be = reg.pin_backend(dev) if out["backend"] == "cuda" else None
        out["driver_registrations"] = len(be.registrations()) if be is not None else None
        dev.free(ta)
        out["ranges_after_one_free"] = len(reg.ranges(dev))
        out["driver_registrations_after_one_free"] = (len(be.registrations())
                                                      if be is not None else None)
        dev.free(tb)
        out["ranges_after_frees"] = len(reg.ranges(dev))
        out["driver_registrations_after_frees"] = (len(be.registrations())
                                                   if be is not None else None)
    del a, b
    return out


#: a CUDA kernel for :func:`scenario_kernel`, built with ``nvcc -cubin`` where nvcc exists
KERNEL_CU = r"""
extern "C" __global__ void osh_increment(long *p, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
       i += (long)blockDim.x * gridDim.x)
    p[i] += 1;
}
"""


def build_cubin(dest: str | os.PathLike, arch: str = "sm_90") -> tuple[str | None, str]:
    """(path of a cubin of :data:`KERNEL_CU` built with nvcc, "") or (None, why)."""
    import shutil
    nvcc = shutil.which("nvcc") or next(
        (str(p) for p in (Path("/usr/local/cuda/bin/nvcc"),) if p.exists()), None)
    if nvcc is None:
        return None, "nvcc not found (the CUDA kernel is built on the GPU machine)"
    d = Path(dest)
    d.mkdir(parents=True, exist_ok=True)
    src, out = d / "osh_kernel.cu", d / "osh_kernel.cubin"
    src.write_text(KERNEL_CU)
    proc = subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-o", str(out), str(src)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return None, f"nvcc -cubin failed: {proc.stderr[-800:]}"
    return str(out), ""


def scenario_kernel(plugin: str, cubin: str, n: str = "100000") -> dict:
    """Register a cubin image with one kernel, launch it through the plugin,
    read the result back."""
    from array import array

    import offload_shim as osh
    from offload_shim.core.images import HostEntry
    out: dict = {"plugin": plugin, **driver_identity()}
    count = int(n)
    img = osh.OffloadImage(Path(cubin).read_bytes(), [HostEntry("osh_increment", 0, 0, 2)],
                           name="osh_kernel.cubin")
    with osh.Runtime([str(PLUGINS[plugin])]) as rt:
        rt.register_image(img)
        dev = rt.devices[0]
        src = array("q", range(count))
        p = dev.alloc(len(src) * 8)
        dev.submit(p, src)
        dev.launch("osh_increment", [p, count])
        back = array("q", bytes(len(src) * 8))
        dev.retrieve(back, p)
        out["correct"] = all(b == a + 1 for a, b in zip(src, back))
        out["first"] = list(back[:4])
        dev.free(p)
        rt.unregister_image(img)
    return out


def scenario_backend_pages() -> dict:
    """The cuMemHostRegister backend alone: ranges sharing pages, the
    thread's context around each call, a driver error, close."""
    import mmap

    import offload_shim as osh
    from offload_shim.abi.buffers import buffer_address
    from offload_shim.memory import pinned as pm
    ps = mmap.PAGESIZE
    buf = mmap.mmap(-1, 3 * ps)
    base, keep = buffer_address(buf)
    out: dict = driver_identity()
    out["context_before"] = _current_context()
    be = pm.CudaHostRegisterBackend(0)
    steps = []

    def step(what):
        steps.append([what, [(s - base, e - base, n) for s, e, n in be.registrations()],
                      _current_context() == out["context_before"]])

    be.lock(base, 100)
    step("lock [0, 100)")
    be.lock(base + 200, 100)                      # same page: no second registration
    step("lock [200, 300)")
    be.lock(base + ps - 10, 20)                   # last bytes of page 0 + first of page 1
    step("lock [ps-10, ps+10)")
    be.unlock(base, 100)
    step("unlock [0, 100)")
    be.unlock(base + ps - 10, 20)                 # page 1 goes, page 0 still used
    step("unlock [ps-10, ps+10)")
    be.unlock(base + 200, 100)
    step("unlock [200, 300)")
    be.lock(base + ps, 8)
    step("lock [ps, ps+8)")
    try:                                          # two gaps: page 0 and page 2
        be.lock(base, 3 * ps)                     # OSH_CUDA_STANDIN_FAIL=...:5:2 fails page 2
        step("lock [0, 3 ps)")
        be.unlock(base, 3 * ps)
        step("unlock [0, 3 ps)")
    except osh.PinnedMemoryError as exc:
        out["error"] = {"type": type(exc).__name__, "code": exc.code, "function": exc.function}
        step("failed lock [0, 3 ps)")
    be.unlock(base + ps, 8)
    step("unlock [ps, ps+8)")
    be.lock(base + 2 * ps, 8)
    be.close()                                    # unregisters what is left, releases
    step("close")
    out["steps"] = steps
    out["page"] = ps
    del keep
    return out


def scenario_arrays(plugin: str) -> dict:
    """Device arrays on a CUDA device (offload_shim/core/array.py): the DLPack device
    is kDLCUDA with the device's ordinal, ``__cuda_array_interface__`` names the
    device address, ``get``/``numpy.asarray`` copy back, a CAI reader holds the
    memory (the close is refused until the array dies), books balance.  With CuPy
    installed (a real GPU), ``cupy.from_dlpack`` views the same device address."""
    import gc

    import numpy

    import offload_shim as osh
    out: dict = {"plugin": plugin, **driver_identity()}
    rt = osh.Runtime([str(PLUGINS[plugin])])
    try:
        out["num_devices"] = len(rt.devices)
        if not rt.devices:
            return out
        dev = rt.devices[0]
        out["memory_is_host"] = dev.plugin.device_memory_is_host
        src = numpy.arange(1000.0).reshape(10, 100)
        a = dev.asarray(src)
        out["dlpack_device"] = list(a.__dlpack_device__())
        out["roundtrip"] = bool((a.get() == src).all())
        back = numpy.asarray(a)
        out["asarray_copies"] = (bool((back == src).all())
                                 and back.__array_interface__["data"][0] != a.ptr)
        try:
            numpy.from_dlpack(a)
            out["numpy_from_dlpack"] = "viewed"
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:
            out["numpy_from_dlpack"] = type(exc).__name__
        host = numpy.from_dlpack(a, device="cpu")      # dl_device=(kDLCPU, 0): a copy
        out["from_dlpack_cpu_copy"] = bool((host == src).all())
        try:
            import cupy
        except ImportError:
            cupy = None
        if cupy is not None:
            c = cupy.from_dlpack(a)
            out["cupy_same_address"] = c.data.ptr == a.ptr
            out["cupy_roundtrip"] = bool((cupy.asnumpy(c) == src).all())
            del c
            gc.collect()
        cai = a.__cuda_array_interface__
        out["cai"] = {"data": cai["data"][0] == a.ptr, "typestr": cai["typestr"],
                      "shape": list(cai["shape"]), "version": cai["version"]}
        out["views_after_cai"] = dev.exported_views
        try:
            rt.close()
            out["close_with_cai_reader"] = "closed"
        except osh.ExportedMemoryError:
            out["close_with_cai_reader"] = "ExportedMemoryError"
        del a
        out["views_after_del"] = dev.exported_views
        st = dev.pool.stats
        out["books"] = {"bytes_in_use": st.bytes_in_use, "live_blocks": st.live_blocks,
                        "balanced": st.backend_allocs - st.backend_frees
                        == st.live_blocks + st.cached_blocks}
    finally:
        rt.close()
    return out


def main(argv: list[str]) -> int:
    fn = globals().get("scenario_" + argv[0]) if argv else None
    if fn is None:
        names = sorted(k[9:] for k in globals() if k.startswith("scenario_"))
        print(f"usage: gpu_scenarios.py NAME [ARGS...]; NAME one of {names}", file=sys.stderr)
        return 2
    print(json.dumps(fn(*argv[1:])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
