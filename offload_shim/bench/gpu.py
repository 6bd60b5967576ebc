"""The GPU rows of ``offload-shim bench`` (cuda-python): the CUDA driver's
``cuMemAlloc`` and stream-ordered pool, the LLVM 16 CUDA nextgen plugin, the
GCC 12 nvptx plugin, the pool over each, and CuPy's ``MemoryPool``.  Without
a driver or device every row is skipped with the reason."""

from __future__ import annotations

import functools
import threading

from .backends import Backend, Skip, llvm_plugin_backend, mm_backend
from .config import CUDA16, NVPTX12

#: Every GPU row, in table order.
GPU_ROWS = ("cuda:cuMemAlloc", "pool:exact/cuMemAlloc", "cuda:cuMemAllocAsync",
            "pool:exact/cuMemAllocAsync", "llvm16-cuda", "pool:exact/llvm16-cuda",
            "gcc12-nvptx", "pool:exact/gcc12-nvptx", "cupy:MemoryPool")


class CudaError(RuntimeError):
    """A CUDA driver call returned an error other than out of memory;
    ``.code`` is the ``CUresult`` name."""

    def __init__(self, what: str, err):
        self.code = getattr(err, "name", str(err))
        super().__init__(f"{what}: {self.code}")


def load_driver():
    """cuda-python's driver module (``cuda.bindings.driver``, or
    ``cuda.cuda`` of cuda-python 12).  Raises Skip when not installed."""
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        try:
            from cuda import cuda as cu  # cuda-python 12
        except ImportError:
            raise Skip("cuda-python not installed (pip install cuda-python)") from None
    return cu


def _cuda_driver(cu):
    """``cu`` initialised (``cuInit``) with at least one device; raises Skip
    with the reason otherwise."""
    try:
        (err,) = cu.cuInit(0)
    except Exception as exc:  # noqa: BLE001 - no libcuda.so.1
        raise Skip(f"no CUDA driver: {type(exc).__name__}: {str(exc)[:120]}") from None
    if err != cu.CUresult.CUDA_SUCCESS:
        raise Skip(f"cuInit failed: {getattr(err, 'name', err)}")
    err, n = cu.cuDeviceGetCount()
    if err != cu.CUresult.CUDA_SUCCESS or n < 1:
        raise Skip(f"no CUDA device ({getattr(err, 'name', err)}, count {n})")
    return cu


def _check(cu, res, what):
    err = res[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise CudaError(what, err)
    return res[1] if len(res) > 1 else None


def gpu_backends(driver=None, cupy_module=None) -> tuple[list, dict]:
    """The GPU rows (cuda-python); every one skipped with a reason when there
    is no driver or device, or when its set-up fails.  ``driver``: the
    cuda-python driver module to use (default :func:`load_driver`; tests pass
    a stand-in); ``cupy_module``: CuPy (default ``import cupy``).

    An allocation that the driver refuses for lack of memory
    (``CUDA_ERROR_OUT_OF_MEMORY``) returns pointer 0, as a plugin does, so
    the pool's OOM ladder runs; any other driver error raises
    :class:`CudaError`, and the row is then reported under *Skipped* with it
    (never counted as a pointer)."""
    names = GPU_ROWS
    try:
        cu = _cuda_driver(driver if driver is not None else load_driver())
    except Skip as exc:
        return [], {n: str(exc) for n in names}
    backends, skipped = [], {}
    try:
        return _gpu_rows(cu, backends, skipped, cupy_module)
    except BaseException as exc:
        for bk in reversed(backends):
            try:
                bk.close()
            except Exception:  # noqa: BLE001 - the set-up error is the one reported
                pass
        if not isinstance(exc, Exception):
            raise
        why = f"CUDA set-up failed: {type(exc).__name__}: {exc}"
        return [], {n: why for n in names}


def _gpu_rows(cu, backends, skipped, cupy_module):
    dev = _check(cu, cu.cuDeviceGet(0), "cuDeviceGet")
    ctx = _check(cu, cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    release_ctx = lambda: cu.cuDevicePrimaryCtxRelease(dev)  # noqa: E731
    try:
        _check(cu, cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    except BaseException:
        release_ctx()
        raise
    ok = cu.CUresult.CUDA_SUCCESS
    oom = cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY

    def set_ctx():
        _check(cu, cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")   # the context is per thread

    def m_alloc(size, _a=cu.cuMemAlloc):
        err, p = _a(size)
        if err == ok:
            return int(p)
        if err == oom:
            return 0
        raise CudaError(f"cuMemAlloc({size})", err)

    def m_free(ptr, _f=cu.cuMemFree):
        (err,) = _f(ptr)
        if err != ok:
            raise CudaError(f"cuMemFree({ptr:#x})", err)

    backends.append(Backend("cuda:cuMemAlloc", "gpu", "cuMemAlloc/cuMemFree (cuda-python)",
                            m_alloc, m_free, close=[release_ctx], enter=set_ctx))
    b = mm_backend("pool:exact/cuMemAlloc", "MemoryManager(exact) over cuMemAlloc",
                   m_alloc, m_free, baseline="cuda:cuMemAlloc", growth=True)
    b.enter = set_ctx
    backends.append(b)

    stream = _check(cu, cu.cuStreamCreate(0), "cuStreamCreate")

    def a_alloc(size, _a=cu.cuMemAllocAsync, _s=stream):
        err, p = _a(size, _s)
        if err == ok:
            return int(p)
        if err == oom:
            return 0
        raise CudaError(f"cuMemAllocAsync({size})", err)

    def a_free(ptr, _f=cu.cuMemFreeAsync, _s=stream):
        (err,) = _f(ptr, _s)
        if err != ok:
            raise CudaError(f"cuMemFreeAsync({ptr:#x})", err)

    def a_sync():
        _check(cu, cu.cuStreamSynchronize(stream), "cuStreamSynchronize")

    backends.append(Backend("cuda:cuMemAllocAsync", "gpu",
                            "cuMemAllocAsync/cuMemFreeAsync, the driver's stream-ordered pool "
                            "(one stream, synchronised after each batch)", a_alloc, a_free,
                            baseline="cuda:cuMemAlloc", enter=set_ctx, leave=a_sync,
                            close=[lambda: cu.cuStreamDestroy(stream)], threaded=False))
    b = mm_backend("pool:exact/cuMemAllocAsync", "MemoryManager(exact) over cuMemAllocAsync",
                   a_alloc, a_free, baseline="cuda:cuMemAllocAsync")
    b.enter, b.leave, b.threaded = set_ctx, a_sync, False
    backends.append(b)

    try:
        ll = llvm_plugin_backend("llvm16-cuda", CUDA16,
                                  "LLVM 16 CUDA nextgen via ctypes, its C++ memory manager on")
        ll.group = "gpu"
        backends.append(ll)
        backends.append(mm_backend("pool:exact/llvm16-cuda", "MemoryManager(exact) over the "
                                    "LLVM 16 CUDA plugin", ll.alloc, ll.free,
                                    baseline="llvm16-cuda"))
    except Exception as exc:  # noqa: BLE001
        skipped["llvm16-cuda"] = skipped["pool:exact/llvm16-cuda"] = \
            f"{type(exc).__name__}: {exc}"
    try:
        from ..plugins.loader import load_plugin
        if not NVPTX12.exists():
            raise Skip(f"{NVPTX12} not installed")
        gp = load_plugin(NVPTX12)
        gp.acquire()
        try:
            if gp.num_devices < 1:
                raise Skip("gcc12-nvptx: 0 devices")
            gp.acquire_device(0)
        except BaseException:
            gp.release()
            raise
        ga, gf = functools.partial(gp.alloc, 0), functools.partial(gp.free, 0)
        backends.append(Backend("gcc12-nvptx", "gpu", "GCC 12 nvptx plugin, GOMP_OFFLOAD_alloc/free",
                                ga, gf, close=[gp.release,
                                               functools.partial(gp.release_device, 0)]))
        backends.append(mm_backend("pool:exact/gcc12-nvptx", "MemoryManager(exact) over the "
                                    "GCC 12 nvptx plugin", ga, gf, baseline="gcc12-nvptx"))
    except Exception as exc:  # noqa: BLE001
        skipped["gcc12-nvptx"] = skipped["pool:exact/gcc12-nvptx"] = \
            f"{type(exc).__name__}: {exc}"
    try:
        if cupy_module is None:
            import cupy as cupy_module
        cupy = cupy_module
        mp = cupy.cuda.MemoryPool()
        try:
            mp.malloc(1024)          # dropped at once: back to the pool
        except Exception as exc:  # noqa: BLE001
            raise Skip(f"CuPy {getattr(cupy, '__version__', '?')} imports but its first "
                       f"allocation failed: {type(exc).__name__}: {str(exc)[:200]}") from None
        held = {}
        lock = threading.Lock()

        def c_alloc(size, _m=mp.malloc):
            m = _m(size)
            with lock:
                held[m.ptr] = m
            return m.ptr

        def c_free(ptr):
            with lock:
                del held[ptr]

        backends.append(Backend("cupy:MemoryPool", "gpu", f"CuPy {cupy.__version__} "
                                "MemoryPool.malloc / drop the MemoryPointer", c_alloc, c_free,
                                baseline="cuda:cuMemAlloc", close=[mp.free_all_blocks]))
    except Skip as exc:
        skipped["cupy:MemoryPool"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - ImportError or a CuPy/driver mismatch
        skipped["cupy:MemoryPool"] = f"CuPy unavailable: {type(exc).__name__}: {exc}"
    if _stand_in(cu, dev):
        _label_stand_in(backends, skipped)
    return backends, skipped


#: what the test suite's CUDA driver stand-in (tests/cuda_standin) calls its device
STAND_IN_DEVICE = "offload_shim CUDA driver stand-in (no GPU)"
STAND_IN_SUFFIX = " [STAND-IN, not a GPU]"


def _stand_in(cu, dev) -> bool:
    """True when the driver is the CUDA driver stand-in, whose rows time host
    memory and must never read as GPU results."""
    err, name = cu.cuDeviceGetName(128, dev)
    return err == cu.CUresult.CUDA_SUCCESS and STAND_IN_DEVICE.encode() in bytes(name)


def _label_stand_in(backends, skipped) -> None:
    """Every row name (and baseline) gets :data:`STAND_IN_SUFFIX`, its group
    ``stand-in``."""
    for b in backends:
        b.name += STAND_IN_SUFFIX
        if b.baseline:
            b.baseline += STAND_IN_SUFFIX
        if b.group == "gpu":
            b.group = "stand-in"
    for key in list(skipped):
        skipped[key + STAND_IN_SUFFIX] = skipped.pop(key)


