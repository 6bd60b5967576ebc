"""``offload-shim bench``: device alloc/free through the pool against every
peer, side by side, in one run (issue 5).

Backends (rows).  On every machine:

* ``pool:exact`` / ``pool:binned`` / ``pool:exact,stats=off``: a
  :class:`~offload_shim.memory.MemoryManager` over the bundled host plugin,
  called as ``MemoryManager.allocate/free``;
* ``device:exact`` / ``device:binned``: the same pool through
  ``Device.alloc/free`` (the user path: lifecycle checks and the live table);
* ``direct:bundled``: the bundled host plugin's ``plugin.alloc/free``;
* ``+lat`` rows: the bundled plugin with injected latencies emulating a GPU
  driver (``HostPluginControl.set_latency``; defaults 5 us per alloc, 14 us per
  free, the published ``cudaMalloc``/device-synchronising ``cudaFree`` costs of
  docs/prior-art.md section 2).  **Emulation**: a busy-wait in the plugin,
  not a GPU;
* ``llvm16-nextgen``: the LLVM 16 x86_64 nextgen plugin called through ctypes
  (``__tgt_rtl_data_alloc``/``data_delete``), its C++ ``MemoryManagerTy`` on
  (the peer, seed 004) and off (``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD=0``,
  measured in a child process because the plugin reads the variable once);
* ``llvm16-classic``: the LLVM 16 x86_64 classic plugin (no memory manager).

With a CUDA driver and device (cuda-python): ``cuMemAlloc/cuMemFree``,
``cuMemAllocAsync/cuMemFreeAsync`` (the driver's stream-ordered pool), the
LLVM 16 CUDA nextgen plugin, the GCC 12 nvptx plugin, the pool over each, and
CuPy's ``MemoryPool`` when CuPy imports.  Without them these rows are skipped
with the reason printed.

Workloads: ``hot`` (one size, backends interleaved batch by batch),
``llvm-mm`` (16 threads, every power of two 4 B..32 KiB), ``random`` (a seeded
trace, many small sizes and a few above the 8 KiB threshold), ``growth``
(pool-hit cost with 10..100,000 cached blocks) and ``replay`` (an event log
written by ``MemoryManager(event_log=...)``, replayed on every backend).

Figures (per backend and workload): median and p99 ns per alloc+free pair
(each pair timed on its own with ``time.perf_counter_ns``, the timer's own
cost measured at start and subtracted), throughput (pairs per second of wall
time), hit rate and peak cached bytes (pools), speedup over the direct row,
and the targets of issue 5 with PASS/MISS.  Nothing here asserts a timing.

``benchmarks/run.py`` runs the ``full`` profile and writes JSON, Markdown and
PNG plots; ``offload-shim bench`` runs ``quick`` (< 1 minute) and prints the
table.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import functools
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from itertools import repeat
from pathlib import Path

__all__ = ["PROFILES", "WORKLOADS", "run", "format_markdown", "write_outputs",
           "update_docs", "machine_info", "register_cli", "main"]

LLVM16_DIR = Path("/usr/lib/llvm-16/lib")
NEXTGEN16 = LLVM16_DIR / "libomptarget.rtl.x86_64.nextgen.so.16"
CLASSIC16 = LLVM16_DIR / "libomptarget.rtl.x86_64.so.16"
CUDA16 = LLVM16_DIR / "libomptarget.rtl.cuda.nextgen.so.16"
NVPTX12 = Path("/usr/lib/x86_64-linux-gnu/libgomp-plugin-nvptx.so.1")

#: Emulated GPU-driver latencies (ns): ~5 us cudaMalloc, ~14 us device-synchronising
#: cudaFree (docs/prior-art.md section 2, "published costs").
DEFAULT_ALLOC_LATENCY_NS = 5_000
DEFAULT_FREE_LATENCY_NS = 14_000

WORKLOADS = ("hot", "llvm-mm", "random", "growth", "replay")

#: Iteration counts.  ``hot_rounds`` x ``hot_pairs``: pairs per backend of the
#: hot loop; ``mm_threads`` x ``mm_rounds`` x 14 sizes: pairs of the LLVM
#: pattern; ``trace_ops`` / ``replay_ops``: operations (half of them allocs);
#: ``growth_points``: cached blocks; ``growth_pairs``: timed hits per point;
#: ``lat_div``: the latency rows run ``1/lat_div`` of the iterations.
PROFILES = {
    "tiny": dict(hot_size=1024, hot_rounds=2, hot_pairs=20, mm_threads=2, mm_rounds=1,
                 trace_ops=200, replay_ops=200, growth_points=(10, 100), growth_pairs=50,
                 lat_div=2, stats_rounds=2),
    "quick": dict(hot_size=1024, hot_rounds=15, hot_pairs=400, mm_threads=16, mm_rounds=3,
                  trace_ops=20_000, replay_ops=20_000,
                  growth_points=(10, 100, 1_000, 10_000, 100_000), growth_pairs=3_000,
                  lat_div=4, stats_rounds=30),
    "full": dict(hot_size=1024, hot_rounds=40, hot_pairs=1_000, mm_threads=16, mm_rounds=20,
                 trace_ops=200_000, replay_ops=100_000,
                 growth_points=(10, 100, 1_000, 10_000, 100_000), growth_pairs=20_000,
                 lat_div=4, stats_rounds=100),
}

#: Targets of issue 5 (checked and printed, never asserted in tests).
TARGETS = {
    "hit_vs_nextgen": 0.5,      # pool hit pair <= 0.5 x nextgen (C++ pool on) pair
    "latency_speedup": 10.0,    # pool >= 10x direct on the latency-emulating plugin
    "growth_flatness": 1.2,     # hit cost max/min over 10..100,000 cached blocks
    "stats_overhead": 0.05,     # stats=True vs stats=False, hot hit
}

pc = time.perf_counter_ns


# -- machine -----------------------------------------------------------------------

def machine_info() -> dict:
    """CPU model (``/proc/cpuinfo``), logical cores, Python, OS, date (UTC)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "os": f"{platform.system()} {platform.release()}",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def _timer_overhead_ns(n: int = 20_000) -> int:
    """Median ns of an empty ``t0 = pc(); ... pc() - t0`` region (subtracted)."""
    samples = []
    app = samples.append
    for _ in repeat(None, n):
        t0 = pc()
        app(pc() - t0)
    return int(statistics.median(samples))


# -- progress ------------------------------------------------------------------------

class _Progress:
    """A one-line progress bar on stderr (``\\r`` updates on a terminal, a line
    per step otherwise)."""

    def __init__(self, total: int, enabled: bool = True, width: int = 28):
        self.total = max(total, 1)
        self.done = 0
        self.enabled = enabled
        self.width = width
        self.tty = enabled and sys.stderr.isatty()

    def step(self, label: str, advance: int = 1) -> None:
        self.done = min(self.done + advance, self.total)
        if not self.enabled:
            return
        fill = self.width * self.done // self.total
        bar = "#" * fill + "-" * (self.width - fill)
        text = f"[{bar}] {self.done:3d}/{self.total} {label}"
        if self.tty:
            sys.stderr.write("\r" + text[:110].ljust(110))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


# -- backends --------------------------------------------------------------------------

class Skip(Exception):
    """A backend that cannot run here; the message is the reason."""


class Backend:
    """One row: ``alloc(size) -> ptr`` and ``free(ptr)``.

    ``group``: ``pool`` (has a MemoryManager), ``direct``, ``peer``, ``gpu``.
    ``baseline``: the row the speedup column divides by.  ``pool_of()``
    returns the MemoryManager(s) whose stats give hit rate and cached bytes.
    ``enter()``/``leave()`` run around every timed batch (latency on/off).
    """

    def __init__(self, name, group, description, alloc=None, free=None, *, baseline=None,
                 pools=(), close=(), enter=None, leave=None, threaded=True, growth=False,
                 trim=None):
        self.name = name
        self.group = group
        self.description = description
        self.alloc = alloc
        self.free = free
        self.baseline = baseline
        self._pools = pools
        self._close = list(close)
        self.enter = enter or (lambda: None)
        self.leave = leave or (lambda: None)
        self.threaded = threaded
        self.growth = growth
        self.trim = trim or (lambda: None)
        self.latency = False

    def pools(self):
        return self._pools() if callable(self._pools) else list(self._pools)

    def snapshot(self):
        """(hits, misses, cached bytes) summed over the pools, or None."""
        ps = self.pools()
        if not ps:
            return None
        h = m = c = 0
        for p in ps:
            s = p.stats
            h += s.hits
            m += s.misses
            c += s.bytes_cached
        return h, m, c

    def close(self) -> None:
        errors = []
        for fn in reversed(self._close):
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - close everything, report the first
                errors.append(exc)
        self._close = []
        if errors:
            raise errors[0]


def _raw_llvm16(plugin, dev: int):
    """ctypes ``data_alloc``/``data_delete`` of an LLVM 16 plugin, bound once
    (the same dlopen handle the plugin layer uses)."""
    lib = ctypes.CDLL(plugin.path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    fa = lib.__tgt_rtl_data_alloc
    fa.restype = ctypes.c_void_p
    fa.argtypes = [ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int32]
    fd = lib.__tgt_rtl_data_delete
    fd.restype = ctypes.c_int32
    fd.argtypes = [ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32]

    def alloc(size, _fa=fa, _d=dev):
        return _fa(_d, size, None, 0) or 0

    def free(ptr, _fd=fd, _d=dev):
        if _fd(_d, ptr, 0):
            raise RuntimeError(f"__tgt_rtl_data_delete({ptr:#x}) failed")

    return alloc, free


def _llvm_plugin_backend(name, path, description, *, growth=False):
    from ..plugins.plugin import load_plugin
    if not Path(path).exists():
        raise Skip(f"{path} not installed")
    plugin = load_plugin(path)
    plugin.acquire()
    try:
        if plugin.num_devices < 1:
            raise Skip(f"{plugin.name}: 0 devices")
        plugin.acquire_device(0)
    except BaseException:
        plugin.release()
        raise
    alloc, free = _raw_llvm16(plugin, 0)
    return Backend(name, "peer", description, alloc, free, growth=growth,
                   close=[plugin.release, functools.partial(plugin.release_device, 0)])


def _mm_backend(name, description, balloc, bfree, *, policy="exact", stats=True,
                baseline=None, growth=False):
    from ..memory import MemoryManager
    mm = MemoryManager(balloc, bfree, threshold=8192, policy=policy, stats=stats,
                       debug="", device_label=name)
    return Backend(name, "pool", description, mm.allocate, mm.free, baseline=baseline,
                   pools=[mm], close=[mm.drain], growth=growth, trim=mm.release_all)


def host_backends(alloc_ns: int, free_ns: int) -> tuple[list, dict]:
    """The CPU rows; returns (backends, {name: skip reason})."""
    from ..plugins.hostplugin import HostPluginControl, bundled_plugin_path
    from ..plugins.plugin import load_plugin
    from ..core.runtime import Runtime
    backends, skipped = [], {}
    try:
        path = bundled_plugin_path()
    except FileNotFoundError as exc:
        return [], {"bundled": str(exc)}
    ctl = HostPluginControl(path)
    plugin = load_plugin(path, abi="llvm")
    plugin.acquire()
    plugin.acquire_device(0)
    ndev = plugin.num_devices
    balloc = functools.partial(plugin.alloc, 0)
    bfree = functools.partial(plugin.free, 0)
    lat_on = functools.partial(ctl.set_latency, alloc_ns, free_ns)
    lat_off = functools.partial(ctl.set_latency, 0, 0)
    lat_txt = f"emulated latency {alloc_ns / 1000:g} us alloc / {free_ns / 1000:g} us free"

    direct = Backend("direct:bundled", "direct", "bundled host plugin, plugin.alloc/free",
                     balloc, bfree,
                     close=[plugin.release, functools.partial(plugin.release_device, 0)])
    backends.append(direct)
    for pol in ("exact", "binned"):
        backends.append(_mm_backend(f"pool:{pol}", f"MemoryManager({pol}) over the bundled plugin",
                                    balloc, bfree, policy=pol, baseline="direct:bundled",
                                    growth=True))
    backends.append(_mm_backend("pool:exact,stats=off", "MemoryManager(exact, stats=False)",
                                balloc, bfree, stats=False, baseline="direct:bundled"))
    runtimes = []
    for i, pol in enumerate(("exact", "binned")):
        rt = Runtime([plugin], pool={"policy": pol, "threshold": 8192, "debug": ""})
        runtimes.append(rt)
        dv = rt.device((1 + i) % ndev, plugin=plugin.name)
        dv.init()
        backends.append(Backend(f"device:{pol}", "pool",
                                f"Device.alloc/free, pool {pol} (the user path)",
                                dv.alloc, dv.free, baseline="direct:bundled",
                                pools=[dv.pool], close=[rt.close], growth=True,
                                trim=dv.pool.release_all))
    # latency-emulating rows
    d = Backend("direct:bundled+lat", "direct", f"bundled plugin, {lat_txt}", balloc, bfree,
                enter=lat_on, leave=lat_off)
    p = _mm_backend("pool:exact+lat", f"MemoryManager(exact), {lat_txt}", balloc, bfree,
                    baseline="direct:bundled+lat")
    p.enter, p.leave = lat_on, lat_off
    rt = Runtime([plugin], pool={"policy": "exact", "threshold": 8192, "debug": ""})
    dv = rt.device(3 % ndev, plugin=plugin.name)
    dv.init()
    dl = Backend("device:exact+lat", "pool", f"Device.alloc/free (exact), {lat_txt}", dv.alloc,
                 dv.free, baseline="direct:bundled+lat", pools=[dv.pool], close=[rt.close],
                 enter=lat_on, leave=lat_off, trim=dv.pool.release_all)
    for b in (d, p, dl):
        b.latency = True
        b._close.append(lat_off)
        backends.append(b)

    for name, path, desc, growth in (
            ("llvm16-nextgen", NEXTGEN16,
             "LLVM 16 x86_64 nextgen via ctypes, its C++ memory manager on (the peer)", True),
            ("llvm16-classic", CLASSIC16, "LLVM 16 x86_64 classic via ctypes (no pool)", False)):
        try:
            backends.append(_llvm_plugin_backend(name, path, desc, growth=growth))
        except Skip as exc:
            skipped[name] = str(exc)
        except Exception as exc:  # noqa: BLE001 - a plugin that fails is a skipped row
            skipped[name] = f"{type(exc).__name__}: {exc}"
    return backends, skipped


def _cuda_driver():
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        try:
            from cuda import cuda as cu  # cuda-python 12
        except ImportError:
            raise Skip("cuda-python not installed (pip install cuda-python)") from None
    try:
        (err,) = cu.cuInit(0)
    except Exception as exc:  # noqa: BLE001 - no libcuda.so.1
        raise Skip(f"no CUDA driver: {type(exc).__name__}: {str(exc)[:120]}") from None
    if err != cu.CUresult.CUDA_SUCCESS:
        raise Skip(f"cuInit failed: {err.name}")
    err, n = cu.cuDeviceGetCount()
    if err != cu.CUresult.CUDA_SUCCESS or n < 1:
        raise Skip(f"no CUDA device ({getattr(err, 'name', err)}, count {n})")
    return cu


def _check(cu, res, what):
    err = res[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what}: {err.name}")
    return res[1] if len(res) > 1 else None


def gpu_backends() -> tuple[list, dict]:
    """The GPU rows (cuda-python); every one skipped with a reason when there
    is no driver or device."""
    names = ("cuda:cuMemAlloc", "pool:exact/cuMemAlloc", "cuda:cuMemAllocAsync",
             "pool:exact/cuMemAllocAsync", "llvm16-cuda", "pool:exact/llvm16-cuda",
             "gcc12-nvptx", "pool:exact/gcc12-nvptx", "cupy:MemoryPool")
    try:
        cu = _cuda_driver()
    except Skip as exc:
        return [], {n: str(exc) for n in names}
    backends, skipped = [], {}
    dev = _check(cu, cu.cuDeviceGet(0), "cuDeviceGet")
    ctx = _check(cu, cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    _check(cu, cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    release_ctx = lambda: cu.cuDevicePrimaryCtxRelease(dev)  # noqa: E731
    ok = cu.CUresult.CUDA_SUCCESS

    def set_ctx():
        cu.cuCtxSetCurrent(ctx)     # the context is per thread

    def m_alloc(size, _a=cu.cuMemAlloc):
        err, p = _a(size)
        return int(p) if err == ok else 0

    def m_free(ptr, _f=cu.cuMemFree):
        (err,) = _f(ptr)
        if err != ok:
            raise RuntimeError(f"cuMemFree: {err.name}")

    backends.append(Backend("cuda:cuMemAlloc", "gpu", "cuMemAlloc/cuMemFree (cuda-python)",
                            m_alloc, m_free, close=[release_ctx], enter=set_ctx))
    b = _mm_backend("pool:exact/cuMemAlloc", "MemoryManager(exact) over cuMemAlloc",
                    m_alloc, m_free, baseline="cuda:cuMemAlloc", growth=True)
    b.enter = set_ctx
    backends.append(b)

    stream = _check(cu, cu.cuStreamCreate(0), "cuStreamCreate")

    def a_alloc(size, _a=cu.cuMemAllocAsync, _s=stream):
        err, p = _a(size, _s)
        return int(p) if err == ok else 0

    def a_free(ptr, _f=cu.cuMemFreeAsync, _s=stream):
        (err,) = _f(ptr, _s)
        if err != ok:
            raise RuntimeError(f"cuMemFreeAsync: {err.name}")

    def a_sync():
        cu.cuStreamSynchronize(stream)

    backends.append(Backend("cuda:cuMemAllocAsync", "gpu",
                            "cuMemAllocAsync/cuMemFreeAsync, the driver's stream-ordered pool "
                            "(one stream, synchronised after each batch)", a_alloc, a_free,
                            baseline="cuda:cuMemAlloc", enter=set_ctx, leave=a_sync,
                            close=[lambda: cu.cuStreamDestroy(stream)], threaded=False))
    b = _mm_backend("pool:exact/cuMemAllocAsync", "MemoryManager(exact) over cuMemAllocAsync",
                    a_alloc, a_free, baseline="cuda:cuMemAllocAsync")
    b.enter, b.leave, b.threaded = set_ctx, a_sync, False
    backends.append(b)

    try:
        ll = _llvm_plugin_backend("llvm16-cuda", CUDA16,
                                  "LLVM 16 CUDA nextgen via ctypes, its C++ memory manager on")
        ll.group = "gpu"
        backends.append(ll)
        backends.append(_mm_backend("pool:exact/llvm16-cuda", "MemoryManager(exact) over the "
                                    "LLVM 16 CUDA plugin", ll.alloc, ll.free,
                                    baseline="llvm16-cuda"))
    except Exception as exc:  # noqa: BLE001
        skipped["llvm16-cuda"] = skipped["pool:exact/llvm16-cuda"] = \
            f"{type(exc).__name__}: {exc}"
    try:
        from ..plugins.plugin import load_plugin
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
        backends.append(_mm_backend("pool:exact/gcc12-nvptx", "MemoryManager(exact) over the "
                                    "GCC 12 nvptx plugin", ga, gf, baseline="gcc12-nvptx"))
    except Exception as exc:  # noqa: BLE001
        skipped["gcc12-nvptx"] = skipped["pool:exact/gcc12-nvptx"] = \
            f"{type(exc).__name__}: {exc}"
    try:
        import cupy
        mp = cupy.cuda.MemoryPool()
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
    except Exception as exc:  # noqa: BLE001 - ImportError or a CuPy/driver mismatch
        skipped["cupy:MemoryPool"] = f"CuPy unavailable: {type(exc).__name__}: {exc}"
    return backends, skipped


# -- workloads ---------------------------------------------------------------------------

def _summary(samples, wall_ns, pairs, overhead=0):
    """Figures from per-pair samples (ns, timer overhead already removed)."""
    if not samples:
        return {"pairs": 0}
    s = sorted(samples)
    n = len(s)
    return {"pairs": pairs, "median_ns": float(s[n // 2]) if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2,
            "p99_ns": float(s[min(n - 1, int(n * 0.99))]),
            "mean_ns": sum(s) / n,
            "throughput_per_s": pairs * 1e9 / wall_ns if wall_ns > 0 else None}


class _Meter:
    """Hit rate and peak cached bytes of a backend over one workload
    (stats deltas; cached bytes sampled between timed batches)."""

    def __init__(self, b: Backend):
        self.b = b
        self.first = b.snapshot()
        self.peak = self.first[2] if self.first else None

    def sample(self):
        if self.first is not None:
            c = self.b.snapshot()[2]
            if c > self.peak:
                self.peak = c

    def result(self):
        if self.first is None:
            return {"hit_rate": None, "peak_cached_bytes": None}
        h, m, c = self.b.snapshot()
        self.peak = max(self.peak, c)
        dh, dm = h - self.first[0], m - self.first[1]
        if self.b.name.endswith("stats=off"):
            return {"hit_rate": None, "peak_cached_bytes": self.peak}
        return {"hit_rate": dh / (dh + dm) if dh + dm else None, "peak_cached_bytes": self.peak}


def _scaled(b, n, prm):
    return max(1, n // prm["lat_div"]) if b.latency else n


def wl_hot(backends, prm, ovh, progress):
    """One size (``hot_size`` bytes), ``free(alloc(size))``; backends
    interleaved round by round so machine noise hits them alike."""
    size = prm["hot_size"]
    res = {b.name: ([], 0, 0) for b in backends}
    meters = {b.name: _Meter(b) for b in backends}
    for b in backends:                       # warm: first block, caches, specialisation
        b.enter()
        try:
            for _ in range(20):
                b.free(b.alloc(size))
        finally:
            b.leave()
    for r in range(prm["hot_rounds"]):
        for b in backends:
            samples, wall, pairs = res[b.name]
            n = _scaled(b, prm["hot_pairs"], prm)
            alloc, free, app = b.alloc, b.free, samples.append
            b.enter()
            try:
                w0 = pc()
                for _ in repeat(None, n):
                    t0 = pc()
                    free(alloc(size))
                    app(pc() - t0 - ovh)
                wall += pc() - w0
            finally:
                b.leave()
            res[b.name] = (samples, wall, pairs + n)
            meters[b.name].sample()
        progress.step(f"hot: round {r + 1}/{prm['hot_rounds']}", 0)
    out = {}
    for b in backends:
        samples, wall, pairs = res[b.name]
        out[b.name] = {**_summary(samples, wall, pairs), **meters[b.name].result(),
                       "size": size}
    progress.step("hot")
    return out


def _stats_overhead(backends, prm, ovh):
    """stats=True vs stats=False hit cost: ``pool:exact`` and
    ``pool:exact,stats=off`` in alternating short batches; per batch the
    median pair, then the median over batches of each."""
    by = {b.name: b for b in backends}
    on, off = by.get("pool:exact"), by.get("pool:exact,stats=off")
    if on is None or off is None:
        return None
    size = prm["hot_size"]
    med = {on.name: [], off.name: []}
    for r in range(prm["stats_rounds"]):
        for b in ((on, off) if r % 2 == 0 else (off, on)):
            alloc, free = b.alloc, b.free
            s = []
            app = s.append
            for _ in repeat(None, 200):
                t0 = pc()
                free(alloc(size))
                app(pc() - t0 - ovh)
            med[b.name].append(statistics.median(s))
    m_on, m_off = statistics.median(med[on.name]), statistics.median(med[off.name])
    return {"stats_on_ns": m_on, "stats_off_ns": m_off,
            "overhead": (m_on - m_off) / m_off if m_off > 0 else None}


def _llvm_mm_thread(alloc, free, rounds, sizes, out, enter, barrier):
    enter()
    barrier.wait()
    app = out.append
    for _ in range(rounds):
        held = []
        for s in sizes:
            t0 = pc()
            p = alloc(s)
            held.append((p, pc() - t0))
        for p, ta in held:
            t0 = pc()
            free(p)
            app(ta + pc() - t0)


def wl_llvm_mm(backends, prm, ovh, progress):
    """LLVM's memory-manager test pattern: ``mm_threads`` threads at once,
    each round allocating every power of two 4 B..32 KiB, then freeing them
    (32 KiB and 16 KiB are above the 8 KiB threshold).  Per-pair samples
    include waits for the GIL; throughput is all threads' pairs / wall."""
    sizes = [1 << k for k in range(2, 16)]
    out = {}
    for b in backends:
        if not b.threaded:
            continue
        m = _Meter(b)
        rounds = _scaled(b, prm["mm_rounds"], prm)
        nthr = prm["mm_threads"]
        samples = []
        barrier = threading.Barrier(nthr + 1)
        ths = [threading.Thread(target=_llvm_mm_thread,
                                args=(b.alloc, b.free, rounds, sizes, samples, b.enter, barrier))
               for _ in range(nthr)]
        b.enter()
        try:
            for t in ths:
                t.start()
            barrier.wait()
            w0 = pc()
            for t in ths:
                t.join()
            wall = pc() - w0
        finally:
            b.leave()
        out[b.name] = {**_summary([x - 2 * ovh for x in samples], wall, len(samples)),
                       **m.result(), "threads": nthr}
        b.trim()
        progress.step(f"llvm-mm: {b.name}")
    return out


# size mix of the random trace: (weight, sizes); exact sizes repeat, as in real programs
_SMALL = [8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 640, 768, 1024]
_MEDIUM = [1536, 2048, 3072, 4000, 4096, 5000, 6144, 8000, 8192]
_LARGE = [12288, 16384, 32768, 65536, 131072, 262144, 1 << 20]


def random_trace(n_ops: int, seed: int = 1, live_target: int = 256) -> list:
    """A seeded trace of ``(slot, size)`` operations: ``size > 0`` allocates
    ``size`` bytes into ``slot``, ``size == 0`` frees it.  Size mix: ~80 %
    small (8 B..1 KiB), ~15 % medium (1.5..8 KiB), ~5 % above the 8 KiB
    threshold (12 KiB..1 MiB); sizes drawn with a Zipf-like skew so some
    repeat often.  The live set wanders around ``live_target`` blocks; the
    trace ends with every block freed."""
    rng = random.Random(seed)

    def pick():
        r = rng.random()
        pool = _SMALL if r < 0.80 else (_MEDIUM if r < 0.95 else _LARGE)
        i = min(int(rng.paretovariate(1.2)) - 1, len(pool) - 1)
        base = pool[(i * 7 + len(pool) // 3) % len(pool)] if rng.random() < 0.5 else rng.choice(pool)
        # a few odd sizes next to the common ones (binned can reuse, exact cannot)
        return base + (rng.randrange(1, 8) * 8 if rng.random() < 0.2 else 0)

    ops, live, free_slots, nslots = [], [], [], 0
    while len(ops) < n_ops - len(live):
        p_alloc = 0.5 + 0.3 * (1 - len(live) / live_target)
        if live and rng.random() > p_alloc:
            i = rng.randrange(len(live))
            live[i], live[-1] = live[-1], live[i]
            slot = live.pop()
            ops.append((slot, 0))
            free_slots.append(slot)
        else:
            slot = free_slots.pop() if free_slots else nslots
            if slot == nslots:
                nslots += 1
            ops.append((slot, pick()))
            live.append(slot)
    for slot in live:
        ops.append((slot, 0))
    return ops


def _run_trace(b: Backend, ops, ovh, chunk=512):
    """Run a ``(slot, size)`` trace; each pair's alloc and free are timed and
    added.  Cached bytes are sampled between chunks (not timed)."""
    nslots = 1 + max((s for s, _ in ops), default=0)
    ptrs = [0] * nslots
    ta = [0] * nslots
    samples = []
    app = samples.append
    alloc, free = b.alloc, b.free
    m = _Meter(b)
    wall = 0
    ovh2 = 2 * ovh
    b.enter()
    try:
        for c in range(0, len(ops), chunk):
            w0 = pc()
            for slot, size in ops[c:c + chunk]:
                if size:
                    t0 = pc()
                    ptrs[slot] = alloc(size)
                    ta[slot] = pc() - t0
                else:
                    t0 = pc()
                    free(ptrs[slot])
                    app(ta[slot] + pc() - t0 - ovh2)
            wall += pc() - w0
            m.sample()
    finally:
        b.leave()
    return {**_summary(samples, wall, len(samples)), **m.result()}


def wl_trace(backends, ops, ovh, progress, label, prm):
    out = {}
    for b in backends:
        use = ops
        if b.latency and prm["lat_div"] > 1:
            use = _prefix_closed(ops, len(ops) // prm["lat_div"])
        out[b.name] = {**_run_trace(b, use, ovh), "ops": len(use)}
        b.trim()
        progress.step(f"{label}: {b.name}")
    return out


def _prefix_closed(ops, n):
    """The first ``n`` operations plus the frees that close their allocations."""
    head = ops[:n]
    live = {}
    for slot, size in head:
        if size:
            live[slot] = True
        else:
            live.pop(slot, None)
    return head + [(s, 0) for s in live]


def _growth_sizes(n):
    return [16 + 16 * (i % 64) for i in range(n)]     # 16..1024 B, mean 520 B


def wl_growth(backends, prm, ovh, progress):
    """Pool-hit cost against the number of cached blocks: for each N, N
    blocks of 64 sizes (16..1024 B) are allocated and freed (so cached), then
    ``growth_pairs`` pairs of 256 B (one of those sizes) are timed; the cache
    is then trimmed (LLVM's cannot be: its blocks stay cached, so its N-th
    point has at least N cached blocks)."""
    out = {}
    size = 256
    for b in backends:
        if not b.growth:
            continue
        pts = {}
        alloc, free = b.alloc, b.free
        for npts in prm["growth_points"]:
            held = [alloc(s) for s in _growth_sizes(npts)]
            for p in held:
                free(p)
            del held
            snap = b.snapshot()
            samples = []
            app = samples.append
            for _ in range(20):
                free(alloc(size))
            w0 = pc()
            for _ in repeat(None, prm["growth_pairs"]):
                t0 = pc()
                free(alloc(size))
                app(pc() - t0 - ovh)
            wall = pc() - w0
            pts[npts] = {**_summary(samples, wall, len(samples)),
                         "cached_blocks": sum(p.stats.cached_blocks for p in b.pools())
                         if snap else None}
            b.trim()
        meds = [p["median_ns"] for p in pts.values()]
        out[b.name] = {"points": pts, "flatness": max(meds) / min(meds) if min(meds) > 0 else None}
        progress.step(f"growth: {b.name}")
    return out


def record_replay_log(path, n_ops: int, seed: int = 7) -> int:
    """Write an event log with ``MemoryManager(event_log=path)`` over a fake
    backend, running a phased trace: iterations that allocate a set of arrays
    (sizes drift between phases), temporaries, and free them at the end of
    the iteration.  Returns the number of events written."""
    from ..memory import MemoryManager
    from ..memory.fake import FakeBackend
    rng = random.Random(seed)
    fb = FakeBackend()
    with open(path, "w", encoding="utf-8") as f:
        mm = MemoryManager(fb.alloc, fb.free, threshold=8192, policy="exact",
                           event_log=f, debug="", device_label="replay-source")
        ops = 0
        phase_sizes = [rng.choice(_SMALL + _MEDIUM) for _ in range(12)]
        while ops < n_ops:
            if rng.random() < 0.05:     # a new phase: some array sizes change
                phase_sizes = [s if rng.random() < 0.7 else rng.choice(_SMALL + _MEDIUM + _LARGE)
                               for s in phase_sizes]
            held = [mm.allocate(s) for s in phase_sizes]
            tmp = [mm.allocate(rng.choice(_SMALL)) for _ in range(rng.randrange(0, 6))]
            for p in tmp:
                mm.free(p)
            for p in reversed(held):
                mm.free(p)
            ops += 2 * (len(held) + len(tmp))
        mm.drain()
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def replay_ops(path) -> list:
    """The caller operations of an event log as a ``(slot, size)`` trace
    (``alloc`` with a pointer, ``free`` of a live one; pointers matched by
    ``(dev, ptr)`` as in :func:`offload_shim.memory.replay`)."""
    from ..memory._replay import read_events
    ops, live, free_slots, nslots = [], {}, [], 0
    for ev in read_events(path):
        op = ev.get("op")
        if op == "alloc" and ev.get("ptr"):
            slot = free_slots.pop() if free_slots else nslots
            if slot == nslots:
                nslots += 1
            live[(ev.get("dev", ""), ev["ptr"])] = slot
            ops.append((slot, int(ev["size"])))
        elif op == "free":
            slot = live.pop((ev.get("dev", ""), ev.get("ptr")), None)
            if slot is not None:
                ops.append((slot, 0))
                free_slots.append(slot)
    return ops + [(s, 0) for s in live.values()]


# -- the run ------------------------------------------------------------------------------

def _worker_backends(kind):
    if kind == "llvm16-nextgen-off":
        b = _llvm_plugin_backend("llvm16-nextgen,pool=off", NEXTGEN16,
                                 "LLVM 16 x86_64 nextgen via ctypes, "
                                 "LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD=0 (child process)")
        return [b]
    raise ValueError(f"unknown worker {kind!r}")


def _run_workloads(backends, prm, ovh, progress, log_path, workloads):
    results = {}
    if "hot" in workloads:
        results["hot"] = wl_hot(backends, prm, ovh, progress)
    if "llvm-mm" in workloads:
        results["llvm-mm"] = wl_llvm_mm(backends, prm, ovh, progress)
    if "random" in workloads:
        results["random"] = wl_trace(backends, random_trace(prm["trace_ops"], seed=1), ovh,
                                     progress, "random", prm)
    if "growth" in workloads:
        results["growth"] = wl_growth(backends, prm, ovh, progress)
    if "replay" in workloads and log_path:
        results["replay"] = wl_trace(backends, replay_ops(log_path), ovh, progress, "replay", prm)
    return results


def _child(kind, profile, log_path, workloads, timeout=600):
    """Run one backend's workloads in a fresh interpreter (``python -P -m
    offload_shim.bench --worker``), with the environment it needs."""
    env = dict(os.environ)
    env["LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD"] = "0"
    cmd = [sys.executable, "-P", "-m", "offload_shim.bench", "--worker", kind,
           "--profile", profile, "--workloads", ",".join(workloads), "--no-progress"]
    if log_path:
        cmd += ["--replay-log", str(log_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        raise RuntimeError(f"worker {kind} exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()[-400:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(profile: str = "quick", *, alloc_ns: int = DEFAULT_ALLOC_LATENCY_NS,
        free_ns: int = DEFAULT_FREE_LATENCY_NS, gpu: bool = True, child: bool = True,
        only=None, progress: bool = True, workloads=WORKLOADS, params=None) -> dict:
    """Run the benchmark; returns the JSON-ready result dict (see
    ``docs/benchmarks.md``).  ``profile``: a key of :data:`PROFILES`;
    ``alloc_ns``/``free_ns``: emulated latencies (ns); ``gpu``: try the CUDA
    rows; ``child``: run the nextgen pool-off row in a child process;
    ``only``: substrings selecting rows; ``params``: overrides of the
    profile's counts."""
    prm = dict(PROFILES[profile])
    prm.update(params or {})
    workloads = tuple(w for w in WORKLOADS if w in workloads)
    t_start = time.monotonic()
    ovh = _timer_overhead_ns()
    backends, skipped = host_backends(alloc_ns, free_ns)
    if gpu:
        gb, gs = gpu_backends()
        backends += gb
        skipped.update(gs)
    else:
        skipped["gpu rows"] = "disabled (--no-gpu)"
    opened = list(backends)          # closed in reverse order: plugins last
    if only:
        backends = [b for b in backends if any(o in b.name for o in only)]
    rows = {b.name: {"group": b.group, "description": b.description, "baseline": b.baseline,
                     "latency": b.latency} for b in backends}
    n_steps = (("hot" in workloads) + len(backends) * (("llvm-mm" in workloads)
               + ("random" in workloads) + ("replay" in workloads))
               + sum(b.growth for b in backends) * ("growth" in workloads) + child + 1)
    bar = _Progress(n_steps, progress)
    tmp = tempfile.TemporaryDirectory(prefix="osh-bench-")
    log_path = None
    results = {}
    stats_ovh = None
    replay_info = None
    try:
        if "replay" in workloads:
            log_path = Path(tmp.name) / "events.jsonl"
            n_ev = record_replay_log(log_path, prm["replay_ops"])
            from ..memory import replay as pool_replay
            pol = pool_replay(log_path, ("exact", "binned"))
            replay_info = {"events": n_ev, "ops": len(replay_ops(log_path)),
                           "replay_stats": {p: {"hit_rate": s.hit_rate,
                                                "peak_bytes_total": s.peak_bytes_total}
                                            for p, s in pol.items()}}
        try:
            results = _run_workloads(backends, prm, ovh, bar, log_path, workloads)
            stats_ovh = _stats_overhead(backends, prm, ovh)
            bar.step("stats overhead")
        finally:
            errs = []
            for b in reversed(opened):
                try:
                    b.close()
                except Exception as exc:  # noqa: BLE001
                    errs.append(f"{b.name}: {exc}")
            if errs:
                skipped["close errors"] = "; ".join(errs)
        if child and (not only or any(o in "llvm16-nextgen,pool=off" for o in only)):
            name = "llvm16-nextgen,pool=off"
            try:
                sub = _child("llvm16-nextgen-off", profile, log_path,
                             [w for w in workloads if w != "growth"])
                for w, per in sub["results"].items():
                    results.setdefault(w, {}).update(per)
                rows.update(sub["rows"])
                skipped.update(sub["skipped"])
            except Exception as exc:  # noqa: BLE001
                skipped[name] = f"{type(exc).__name__}: {exc}"
            bar.step(name)
    finally:
        bar.close()
        tmp.cleanup()
    # speedup over the baseline row, per workload
    for w, per in results.items():
        if w == "growth":
            continue
        for name, r in per.items():
            base = rows.get(name, {}).get("baseline")
            if base is None and name == "llvm16-nextgen":
                base = "llvm16-nextgen,pool=off"
            bm = per.get(base, {}).get("median_ns")
            r["speedup"] = (bm / r["median_ns"]) if bm and r.get("median_ns") else None
            r["speedup_over"] = base if r["speedup"] is not None else None
    out = {"meta": {"machine": machine_info(), "profile": profile, "params": prm,
                    "timer_overhead_ns": ovh,
                    "emulated_latency_ns": {"alloc": alloc_ns, "free": free_ns},
                    "seconds": round(time.monotonic() - t_start, 1)},
           "rows": rows, "skipped": skipped, "results": results,
           "stats_overhead": stats_ovh, "replay": replay_info}
    out["targets"] = check_targets(out)
    return out


def check_targets(out) -> list:
    """The four targets of issue 5 as ``{"target", "value", "limit",
    "status"}`` rows; ``status``: PASS, MISS or N/A (a row is missing)."""
    res = out["results"]
    hot = res.get("hot", {})
    rows = []

    def add(target, value, limit, ok, text):
        status = "N/A" if value is None else ("PASS" if ok(value, limit) else "MISS")
        rows.append({"target": target, "value": value, "limit": limit, "status": status,
                     "detail": text})

    peer = hot.get("llvm16-nextgen", {}).get("median_ns")
    for name, what in (("pool:exact", "MemoryManager.allocate/free"),
                       ("device:exact", "Device.alloc/free (user path)")):
        mine = hot.get(name, {}).get("median_ns")
        v = mine / peer if mine and peer else None
        add(f"pool-hit pair via {what} <= 0.5 x LLVM 16 nextgen pair (C++ pool on)", v,
            TARGETS["hit_vs_nextgen"], lambda v, l: v <= l,
            f"{mine:.0f} ns vs {peer:.0f} ns" if v is not None else "row missing")
    for name in ("pool:exact+lat", "device:exact+lat"):
        v = hot.get(name, {}).get("speedup")
        add(f"{name} >= 10 x direct on the latency-emulating plugin", v,
            TARGETS["latency_speedup"], lambda v, l: v >= l,
            f"{hot[name]['median_ns']:.0f} ns vs "
            f"{hot['direct:bundled+lat']['median_ns']:.0f} ns" if v is not None else "row missing")
    g = res.get("growth", {})
    for name in ("pool:exact", "pool:binned", "device:exact"):
        v = g.get(name, {}).get("flatness")
        pts = g.get(name, {}).get("points", {})
        add(f"{name} hit cost flat from {min(pts, default='?')} to {max(pts, default='?')} "
            f"cached blocks (max/min <= 1.2)", v, TARGETS["growth_flatness"],
            lambda v, l: v <= l,
            " / ".join(f"{p['median_ns']:.0f}" for p in pts.values()) + " ns" if pts else "")
    so = out.get("stats_overhead") or {}
    v = so.get("overhead")
    add("statistics overhead (stats=True vs stats=False) <= 5 %", v, TARGETS["stats_overhead"],
        lambda v, l: v <= l,
        f"{so['stats_on_ns']:.0f} ns vs {so['stats_off_ns']:.0f} ns" if v is not None else "")
    return rows


# -- output -------------------------------------------------------------------------------

def _fmt_ns(v):
    return "–" if v is None else (f"{v:,.0f}" if v >= 10 else f"{v:.1f}")


def _fmt_rate(v):
    if v is None:
        return "–"
    return f"{v / 1e6:.2f} M/s" if v >= 1e6 else f"{v / 1e3:.0f} k/s"


def _fmt_bytes(v):
    if v is None:
        return "–"
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= div:
            return f"{v / div:.1f} {unit}"
    return f"{v} B"


_WL_TITLES = {
    "hot": "Hot loop (one size, backends interleaved)",
    "llvm-mm": "LLVM memory-manager pattern (threads x every power of two 4 B..32 KiB)",
    "random": "Random trace (realistic size mix)",
    "replay": "Replay of a pool event log",
}


def format_markdown(out) -> str:
    """The result as Markdown: machine, targets, one table per workload,
    the growth table, skipped rows."""
    m = out["meta"]["machine"]
    lat = out["meta"]["emulated_latency_ns"]
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores, {m['implementation']} {m['python']}, "
             f"{m['os']}; {m['date']}; profile `{out['meta']['profile']}` "
             f"({out['meta']['seconds']} s); timer overhead {out['meta']['timer_overhead_ns']} ns "
             f"subtracted; emulated latency {lat['alloc']} ns alloc / {lat['free']} ns free.", ""]
    lines += ["### Targets", "", "| target | value | limit | status | detail |",
              "|---|---:|---:|---|---|"]
    for t in out["targets"]:
        v = t["value"]
        vs = "–" if v is None else (f"{v:.1%}" if "overhead" in t["target"] else f"{v:.2f}")
        ls = f"{t['limit']:.0%}" if "overhead" in t["target"] else f"{t['limit']:g}"
        lines.append(f"| {t['target']} | {vs} | {ls} | **{t['status']}** | {t['detail']} |")
    for w in ("hot", "llvm-mm", "random", "replay"):
        per = out["results"].get(w)
        if not per:
            continue
        lines += ["", f"### {_WL_TITLES[w]}", ""]
        if w == "replay" and out.get("replay"):
            r = out["replay"]
            lines += [f"{r['events']} events, {r['ops']} caller operations.", ""]
        lines += ["| backend | median ns/pair | p99 ns/pair | throughput | hit rate | "
                  "peak cached | speedup | over |", "|---|---:|---:|---:|---:|---:|---:|---|"]
        order = sorted(per, key=lambda n: per[n].get("median_ns") or 0)
        for name in order:
            r = per[name]
            hr = r.get("hit_rate")
            sp = r.get("speedup")
            lines.append(
                f"| {name} | {_fmt_ns(r.get('median_ns'))} | {_fmt_ns(r.get('p99_ns'))} | "
                f"{_fmt_rate(r.get('throughput_per_s'))} | {'–' if hr is None else f'{hr:.1%}'} | "
                f"{_fmt_bytes(r.get('peak_cached_bytes'))} | "
                f"{'–' if sp is None else f'{sp:.1f}x'} | {r.get('speedup_over') or ''} |")
    g = out["results"].get("growth")
    if g:
        npts = sorted({n for r in g.values() for n in r["points"]}, key=int)
        lines += ["", "### Pool-hit cost against cached blocks (median ns/pair)", "",
                  "| backend | " + " | ".join(f"{int(n):,}" for n in npts) + " | max/min |",
                  "|---|" + "---:|" * (len(npts) + 1)]
        for name, r in g.items():
            cells = [_fmt_ns(r["points"].get(n, r["points"].get(str(n), {})).get("median_ns"))
                     for n in npts]
            fl = r.get("flatness")
            lines.append(f"| {name} | " + " | ".join(cells)
                         + f" | {'–' if fl is None else f'{fl:.2f}'} |")
    so = out.get("stats_overhead")
    if so:
        lines += ["", f"Statistics overhead (hot hit, alternating batches): stats on "
                  f"{so['stats_on_ns']:.0f} ns, off {so['stats_off_ns']:.0f} ns "
                  f"({so['overhead']:+.1%})."]
    if out["skipped"]:
        lines += ["", "### Skipped", ""]
        for name, why in sorted(out["skipped"].items()):
            lines.append(f"* `{name}`: {why}")
    rows = out["rows"]
    lines += ["", "### Rows", ""]
    for name, r in rows.items():
        lines.append(f"* `{name}` ({r['group']}): {r['description']}")
    return "\n".join(lines) + "\n"


def plot(out, directory) -> list:
    """PNG plots (matplotlib, Agg): ``workloads.png`` (median ns/pair per
    backend and workload, p99 as whisker) and ``growth.png``.  Returns the
    paths written ([] when matplotlib is missing)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    directory = Path(directory)
    paths = []
    wls = [w for w in ("hot", "llvm-mm", "random", "replay") if out["results"].get(w)]
    if wls:
        fig, axes = plt.subplots(len(wls), 1, figsize=(9, 3.2 * len(wls)), squeeze=False)
        for ax, w in zip(axes[:, 0], wls):
            per = out["results"][w]
            names = sorted(per, key=lambda n: per[n].get("median_ns") or 0)
            med = [per[n].get("median_ns") or 0 for n in names]
            p99 = [max((per[n].get("p99_ns") or 0) - md, 0) for n, md in zip(names, med)]
            colors = ["tab:green" if out["rows"].get(n, {}).get("group") == "pool" else
                      "tab:orange" if "nextgen" in n else "tab:gray" for n in names]
            ax.barh(names, med, xerr=[[0] * len(p99), p99], color=colors, capsize=2)
            ax.set_xscale("log")
            ax.set_title(_WL_TITLES[w], fontsize=9)
            ax.set_xlabel("ns per alloc+free pair (median, whisker to p99)", fontsize=8)
            ax.tick_params(labelsize=7)
        fig.tight_layout()
        p = directory / "workloads.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    g = out["results"].get("growth")
    if g:
        fig, ax = plt.subplots(figsize=(7, 4))
        for name, r in g.items():
            xs = sorted(r["points"], key=int)
            ax.plot([int(x) for x in xs], [r["points"][x]["median_ns"] for x in xs], "o-",
                    label=name)
        ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("cached blocks")
        ax.set_ylabel("ns per hit pair (median)")
        ax.set_title("Pool-hit cost against cached blocks")
        ax.legend(fontsize=8)
        fig.tight_layout()
        p = directory / "growth.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


def write_outputs(out, directory) -> dict:
    """``results.json``, ``results.md`` and the PNG plots under ``directory``
    (created).  Returns ``{"json", "markdown", "plots"}`` paths."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    jp = d / "results.json"
    jp.write_text(json.dumps(out, indent=1, default=str) + "\n", encoding="utf-8")
    mp = d / "results.md"
    mp.write_text(format_markdown(out), encoding="utf-8")
    return {"json": jp, "markdown": mp, "plots": plot(out, d)}


BEGIN_MARK = "<!-- bench:begin (written by benchmarks/run.py) -->"
END_MARK = "<!-- bench:end -->"


def update_docs(out, doc_path) -> None:
    """Replace the text between :data:`BEGIN_MARK` and :data:`END_MARK` of
    ``doc_path`` with the latest table (appended when the marks are absent)."""
    p = Path(doc_path)
    text = p.read_text(encoding="utf-8") if p.exists() else "# Benchmarks\n"
    block = f"{BEGIN_MARK}\n{format_markdown(out)}{END_MARK}"
    if BEGIN_MARK in text and END_MARK in text:
        a = text.index(BEGIN_MARK)
        b = text.index(END_MARK) + len(END_MARK)
        text = text[:a] + block + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    p.write_text(text, encoding="utf-8")


def format_text(out) -> str:
    """What ``offload-shim bench`` prints: the Markdown table."""
    return format_markdown(out)


# -- command line -------------------------------------------------------------------------

def _add_arguments(p: argparse.ArgumentParser, default_profile: str) -> None:
    p.add_argument("--profile", choices=sorted(PROFILES), default=default_profile,
                   help=f"iteration counts (default {default_profile})")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--out", metavar="DIR", help="also write results.json/.md and PNG plots here")
    p.add_argument("--latency-alloc-ns", type=int, default=DEFAULT_ALLOC_LATENCY_NS,
                   help="emulated driver alloc latency, ns (default %(default)s)")
    p.add_argument("--latency-free-ns", type=int, default=DEFAULT_FREE_LATENCY_NS,
                   help="emulated device-synchronising free latency, ns (default %(default)s)")
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help="comma-separated subset of " + ",".join(WORKLOADS))
    p.add_argument("--only", action="append", help="rows whose name contains this (repeatable)")
    p.add_argument("--no-gpu", action="store_true", help="do not try the CUDA rows")
    p.add_argument("--no-child", action="store_true",
                   help="skip the nextgen pool-off row (it needs a child process)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _cmd(args, on_result=None) -> int:
    wls = tuple(w.strip() for w in args.workloads.split(",") if w.strip())
    bad = [w for w in wls if w not in WORKLOADS]
    if bad:
        print(f"bench: unknown workload(s) {bad}; choose from {WORKLOADS}", file=sys.stderr)
        return 2
    out = run(args.profile, alloc_ns=args.latency_alloc_ns, free_ns=args.latency_free_ns,
              gpu=not args.no_gpu, child=not args.no_child, only=args.only,
              progress=not args.no_progress, workloads=wls)
    if on_result is not None:
        on_result(out)
    if args.out:
        paths = write_outputs(out, args.out)
        print(f"bench: wrote {paths['json']}, {paths['markdown']}"
              + "".join(f", {p}" for p in paths["plots"]), file=sys.stderr)
    if args.json:
        print(json.dumps(out, indent=1, default=str))
    else:
        print(format_text(out))
    return 0


def register_cli(subparsers) -> None:
    """``offload-shim bench``: the quick profile, prints the table."""
    p = subparsers.add_parser("bench", help="benchmark alloc/free: the pool against every peer",
                              description=__doc__.split("\n\n")[0])
    _add_arguments(p, "quick")
    p.set_defaults(func=_cmd)


def _worker_main(args) -> int:
    """Child process: run one backend's workloads, print one JSON line."""
    prm = dict(PROFILES[args.profile])
    ovh = _timer_overhead_ns()
    wls = tuple(w for w in args.workloads.split(",") if w)
    skipped = {}
    try:
        backends = _worker_backends(args.worker)
    except Skip as exc:
        print(json.dumps({"results": {}, "rows": {}, "skipped": {args.worker: str(exc)}}))
        return 0
    try:
        res = _run_workloads(backends, prm, ovh, _Progress(1, False), args.replay_log, wls)
    finally:
        for b in backends:
            b.close()
    rows = {b.name: {"group": b.group, "description": b.description, "baseline": b.baseline,
                     "latency": False} for b in backends}
    print(json.dumps({"results": res, "rows": rows, "skipped": skipped}))
    return 0


def main(argv=None, default_profile: str = "quick", on_result=None) -> int:
    """``python -m offload_shim.bench`` (and ``benchmarks/run.py``, which
    passes ``on_result(out)`` to receive the result dict)."""
    ap = argparse.ArgumentParser(prog="python -m offload_shim.bench",
                                 description=__doc__.split("\n\n")[0])
    _add_arguments(ap, default_profile)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--replay-log", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker_main(args)
    return _cmd(args, on_result)
