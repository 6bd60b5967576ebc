"""The CPU rows of ``offload-shim bench``: each a :class:`Backend` with
``alloc(size) -> ptr`` and ``free(ptr)`` over the bundled host plugin, a
:class:`~offload_shim.memory.MemoryManager` or ``Device`` over it, or an
installed LLVM 16 x86_64 plugin called through its bare entry points."""

from __future__ import annotations

import functools
from pathlib import Path

from .config import CLASSIC16, NEXTGEN16

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


def raw_llvm16_pair(plugin, dev: int):
    """``alloc(size)``/``free(ptr)`` calling the plugin's ``data_alloc`` /
    ``data_delete`` through :meth:`Plugin.entry_point` (unchecked, bound
    once by the plugin layer), so the row times the bare ctypes call.
    ``free`` raises RuntimeError when ``data_delete`` fails."""
    fa = plugin.entry_point("data_alloc")
    fd = plugin.entry_point("data_delete")

    def alloc(size, _fa=fa, _d=dev):
        return _fa(_d, size, None, 0) or 0

    def free(ptr, _fd=fd, _d=dev):
        if _fd(_d, ptr, 0):
            raise RuntimeError(f"__tgt_rtl_data_delete({ptr:#x}) failed")

    return alloc, free


def llvm_plugin_backend(name, path, description, *, growth=False):
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
    alloc, free = raw_llvm16_pair(plugin, 0)
    return Backend(name, "peer", description, alloc, free, growth=growth,
                   close=[plugin.release, functools.partial(plugin.release_device, 0)])


def mm_backend(name, description, balloc, bfree, *, policy="exact", stats=True,
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
        backends.append(mm_backend(f"pool:{pol}", f"MemoryManager({pol}) over the bundled plugin",
                                    balloc, bfree, policy=pol, baseline="direct:bundled",
                                    growth=True))
    backends.append(mm_backend("pool:exact,stats=off", "MemoryManager(exact, stats=False)",
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
    p = mm_backend("pool:exact+lat", f"MemoryManager(exact), {lat_txt}", balloc, bfree,
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
            backends.append(llvm_plugin_backend(name, path, desc, growth=growth))
        except Skip as exc:
            skipped[name] = str(exc)
        except Exception as exc:  # noqa: BLE001 - a plugin that fails is a skipped row
            skipped[name] = f"{type(exc).__name__}: {exc}"
    try:
        backends.extend(liboffload_backends())
    except Exception as exc:  # noqa: BLE001 - a view that fails is a skipped row
        skipped["liboffload"] = f"{type(exc).__name__}: {exc}"
    return backends, skipped


def liboffload_backends() -> list:
    """The liboffload (``ol*``) rows over the bundled plugin's ``ol*`` view:
    ``direct:ol`` = ``LiboffloadPlugin.alloc/free`` (``olMemAlloc``/``olMemFree``
    through the ``ol_result_t`` checker), ``device:exact/ol`` = ``Device.alloc/free``
    with the pool over it (the user path of the third family)."""
    from ..core.runtime import Runtime
    from ..plugins.hostplugin import bundled_plugin_path
    from ..plugins.plugin import load_plugin
    ol = load_plugin(bundled_plugin_path(), abi="liboffload")
    rt = Runtime([ol], pool={"policy": "exact", "threshold": 8192, "debug": ""})
    try:
        dv = rt.device(0)
        dv.init()                                     # olCreateQueue
    except BaseException:
        rt.close()
        raise
    direct = Backend("direct:ol", "direct", "bundled plugin's ol* view, olMemAlloc/olMemFree "
                     "(LiboffloadPlugin.alloc/free)", functools.partial(ol.alloc, 0),
                     functools.partial(ol.free, 0))
    dev = Backend("device:exact/ol", "pool", "Device.alloc/free (exact) over the ol* view",
                  dv.alloc, dv.free, baseline="direct:ol", pools=[dv.pool], close=[rt.close],
                  growth=False, trim=dv.pool.release_all)
    return [direct, dev]


def worker_backends(kind):
    if kind == "llvm16-nextgen-off":
        b = llvm_plugin_backend("llvm16-nextgen,pool=off", NEXTGEN16,
                                 "LLVM 16 x86_64 nextgen via ctypes, "
                                 "LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD=0 (child process)")
        return [b]
    raise ValueError(f"unknown worker {kind!r}")

