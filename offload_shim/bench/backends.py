"""The CPU rows of ``offload-shim bench``: each a :class:`Backend` with
``alloc(size) -> ptr`` and ``free(ptr)`` over the bundled host plugin, a
:class:`~offload_shim.memory.MemoryManager` or ``Device`` over it, or an
installed LLVM 16 x86_64 plugin called through its bare entry points."""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path

from .config import CLASSIC16, NEXTGEN16


class Skip(Exception):
    """A backend that cannot run here; the message is the reason."""


class Backend:
    """One row: ``alloc(size) -> ptr`` and ``free(ptr)``.

    ``group``: ``pool`` (has a MemoryManager), ``direct``, ``peer``, ``gpu``,
    ``floor`` (the bare ctypes call).
    ``baseline``: the row the speedup column divides by.  ``pool_of()``
    returns the MemoryManager(s) whose stats give hit rate and cached bytes.
    ``enter()``/``leave()`` run around every timed batch (latency on/off).
    ``replica()``: an independent copy of the row (growth workload), or None.
    """

    def __init__(self, name, group, description, alloc=None, free=None, *, baseline=None,
                 pools=(), close=(), enter=None, leave=None, threaded=True, growth=False,
                 trim=None, replica=None):
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
        #: None, or a callable making an independent copy of the row (its own pool over
        #: the same plugin; a Backend, closed by the caller): the growth workload
        #: keeps one per block count, all live at once
        self.replica = replica
        self.latency = False
        self.env = {}                 # environment its device was initialised with
        self.pool_observed = None     # LLVM rows: was a freed block kept (observed)

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


#: Every CPU row, in table order (``--only`` is checked against these and
#: :data:`~.gpu.GPU_ROWS` before anything runs).
CPU_ROWS = ("floor:ctypes-nop", "direct:bundled", "pool:exact", "pool:binned",
            "pool:exact,stats=off", "device:exact", "device:binned", "direct:bundled+lat",
            "pool:exact+lat", "device:exact+lat", "llvm16-nextgen", "llvm16-nextgen,pool=off",
            "llvm16-classic", "direct:ol", "device:exact/ol")

#: The variable LLVM 16's ``MemoryManagerTy::getSizeThresholdFromEnv`` reads
#: at every device init (``GenericDeviceTy::init``): unset or N > 0 = pool on
#: with threshold N (8 KiB when unset), 0 = no pool.
THRESHOLD_ENV = "LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD"

#: The value each LLVM row's device is initialised with (set explicitly, the
#: caller's environment is restored afterwards).
PEER_THRESHOLDS = {"llvm16-nextgen": "8192", "llvm16-nextgen,pool=off": "0",
                   "llvm16-cuda": "8192"}


@contextlib.contextmanager
def env_set(name: str, value: str):
    """``os.environ[name] = value`` for the block (seen by C ``getenv``),
    the previous value (or its absence) restored after."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def raw_pair(fa, fd, dev: int, what: str = "__tgt_rtl_data_delete"):
    """``alloc(size)``/``free(ptr)`` over two bound ctypes functions with the
    prototypes of ``data_alloc`` / ``data_delete`` (LLVM 16), so a row times
    the bare ctypes call.  ``free`` raises RuntimeError when ``fd`` returns
    non-zero."""

    def alloc(size, _fa=fa, _d=dev):
        return _fa(_d, size, None, 0) or 0

    def free(ptr, _fd=fd, _d=dev):
        if _fd(_d, ptr, 0):
            raise RuntimeError(f"{what}({ptr:#x}) failed")

    return alloc, free


def raw_llvm16_pair(plugin, dev: int):
    """:func:`raw_pair` over the plugin's ``data_alloc`` / ``data_delete``
    through :meth:`Plugin.entry_point` (unchecked, bound once by the plugin
    layer)."""
    return raw_pair(plugin.entry_point("data_alloc"), plugin.entry_point("data_delete"), dev)


def llvm_plugin_backend(name, path, description, *, growth=False):
    """One row over device 0 of the LLVM plugin at ``path``; a plugin with a
    memory manager (named in :data:`PEER_THRESHOLDS`) has its device
    initialised with ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD`` set to that
    value (printed in the description).  Raises Skip."""
    from ..plugins.loader import load_plugin
    if not Path(path).exists():
        raise Skip(f"{path} not installed")
    plugin = load_plugin(path)
    plugin.acquire()
    thr = PEER_THRESHOLDS.get(name)        # None: a plugin without memory manager
    try:
        if plugin.num_devices < 1:
            raise Skip(f"{plugin.name}: 0 devices")
        if thr is None:
            plugin.acquire_device(0)
        else:
            with env_set(THRESHOLD_ENV, thr):
                plugin.acquire_device(0)
    except BaseException:
        plugin.release()
        raise
    alloc, free = raw_llvm16_pair(plugin, 0)
    if thr is not None:
        description = f"{description}; device initialised with {THRESHOLD_ENV}={thr}"
    b = Backend(name, "peer", description, alloc, free, growth=growth,
                close=[plugin.release, functools.partial(plugin.release_device, 0)])
    b.env = {THRESHOLD_ENV: thr} if thr is not None else {}
    return b


def _keeps_freed_block(fa, fd, dev: int, probe_dev: int) -> bool:
    """True if a freed 1 KiB block of ``dev`` stays with the plugin: the next
    1 KiB ``malloc`` (through ``probe_dev``, a device without pool) does not
    get it back.  glibc hands the last freed chunk of a size out first."""
    a = fa(dev, 1024, None, 0)
    fd(dev, a, 0)
    b = fa(probe_dev, 1024, None, 0)
    fd(probe_dev, b, 0)
    return a != b


def _reinit_device(plugin, dev: int, thr: str) -> None:
    """Empty the C++ pool of an LLVM 16 nextgen device (``MemoryManagerTy``
    has no trim; ``deinit_device`` deletes it with every cached block) by
    deinitialising the device and initialising it again with the same
    threshold."""
    plugin.release_device(dev)
    with env_set(THRESHOLD_ENV, thr):
        plugin.acquire_device(dev)


def nextgen_backends() -> list:
    """``llvm16-nextgen`` (device 0, C++ pool on) and
    ``llvm16-nextgen,pool=off`` (device 1) in this process: the plugin reads
    :data:`THRESHOLD_ENV` at each device init, so each device is initialised
    with its value set explicitly (:data:`PEER_THRESHOLDS`).  The effect is
    observed, not assumed: device 2, initialised with 0, serves as a plain
    ``malloc`` probe (:func:`_keeps_freed_block`); the result is in each
    row's ``pool_observed`` and description.  Raises Skip."""
    from ..plugins.loader import load_plugin
    if not Path(NEXTGEN16).exists():
        raise Skip(f"{NEXTGEN16} not installed")
    plugin = load_plugin(NEXTGEN16)
    plugin.acquire()
    held = []
    try:
        if plugin.num_devices < 3:
            raise Skip(f"{plugin.name}: {plugin.num_devices} devices, the rows need 3")
        on, off = PEER_THRESHOLDS["llvm16-nextgen"], PEER_THRESHOLDS["llvm16-nextgen,pool=off"]
        for dev, thr in ((0, on), (1, off), (2, "0")):
            with env_set(THRESHOLD_ENV, thr):
                plugin.acquire_device(dev)
            held.append(dev)
        fa, fd = plugin.entry_point("data_alloc"), plugin.entry_point("data_delete")
        seen = {0: _keeps_freed_block(fa, fd, 0, 2), 1: _keeps_freed_block(fa, fd, 1, 2)}
        plugin.release_device(2)
        held.remove(2)
    except BaseException:
        for dev in reversed(held):
            plugin.release_device(dev)
        plugin.release()
        raise
    rows = []
    for dev, name, thr, what in ((0, "llvm16-nextgen", on, "its C++ memory manager on (the peer)"),
                                 (1, "llvm16-nextgen,pool=off", off, "no memory manager")):
        alloc, free = raw_llvm16_pair(plugin, dev)
        obs = ("observed: a freed 1 KiB block stays with the plugin" if seen[dev] else
               "observed: a freed 1 KiB block goes back to malloc")
        close = [functools.partial(plugin.release_device, dev)]
        if dev == 0:
            close.insert(0, plugin.release)        # closed in reverse: devices, then plugin
        b = Backend(name, "peer", f"LLVM 16 x86_64 nextgen via ctypes, device {dev} initialised "
                    f"with {THRESHOLD_ENV}={thr}: {what} ({obs})", alloc, free,
                    growth=(dev == 0), baseline=None if dev else "llvm16-nextgen,pool=off",
                    close=close, trim=functools.partial(_reinit_device, plugin, dev, thr))
        b.env = {THRESHOLD_ENV: thr}
        b.pool_observed = seen[dev]
        rows.append(b)
    return rows


def floor_backend(ctl) -> Backend:
    """``floor:ctypes-nop``: the same ``alloc``/``free`` wrappers as the LLVM
    rows (:func:`raw_pair`) over the bundled plugin's empty C functions
    (``HostPluginControl.nop_entry_points``): what a ctypes pair costs before
    the plugin does anything."""
    fa, fd = ctl.nop_entry_points()
    alloc, free = raw_pair(fa, fd, 0, "osh_host_nop_delete")
    return Backend("floor:ctypes-nop", "floor", "bare ctypes pair into empty C functions with "
                   "the data_alloc/data_delete prototypes (the cost floor of a plugin call)",
                   alloc, free)


def mm_backend(name, description, balloc, bfree, *, policy="exact", stats=True,
               baseline=None, growth=False):
    """A row over a new ``MemoryManager(balloc, bfree)`` (threshold 8 KiB); a growth
    row's ``replica`` is another such row."""
    from ..memory import MemoryManager
    mm = MemoryManager(balloc, bfree, threshold=8192, policy=policy, stats=stats,
                       debug="", device_label=name)
    replica = functools.partial(mm_backend, name, description, balloc, bfree, policy=policy,
                                stats=stats, baseline=baseline) if growth else None
    return Backend(name, "pool", description, mm.allocate, mm.free, baseline=baseline,
                   pools=[mm], close=[mm.drain], growth=growth, trim=mm.release_all,
                   replica=replica)


def host_backends(alloc_ns: int, free_ns: int) -> tuple[list, dict]:
    """The CPU rows; returns (backends, {name: skip reason}).  On an error
    or KeyboardInterrupt during set-up the rows made so far are closed
    before it propagates."""
    from ..abi.native import bundled_plugin_path
    backends, skipped = [], {}
    try:
        path = bundled_plugin_path()
    except FileNotFoundError as exc:
        return [], {"bundled": str(exc)}
    try:
        _host_rows(path, alloc_ns, free_ns, backends, skipped)
    except BaseException:
        for b in reversed(backends):
            try:
                b.close()
            except Exception:  # noqa: BLE001 - the set-up error is the one reported
                pass
        raise
    return backends, skipped


def _device_backend(plugin, dev, policy, name, description, baseline, *, growth=False):
    """A row through ``Device.alloc/free`` of a Runtime over ``plugin``
    (device ``dev``, pool ``policy``, threshold 8 KiB); closed with the
    Runtime.  A growth row's ``replica`` is another such row: a Runtime of its own
    over the same plugin and device (the plugin counts the device's users)."""
    from ..core.runtime import Runtime
    rt = Runtime([plugin], pool={"policy": policy, "threshold": 8192, "debug": ""})
    try:
        dv = rt.device(dev, plugin=plugin.name)
        dv.init()
    except BaseException:
        rt.close()
        raise
    replica = functools.partial(_device_backend, plugin, dev, policy, name, description,
                                baseline) if growth else None
    return Backend(name, "pool", description, dv.alloc, dv.free, baseline=baseline,
                   pools=[dv.pool], close=[rt.close], growth=growth, trim=dv.pool.release_all,
                   replica=replica)


def _host_rows(path, alloc_ns, free_ns, backends, skipped):
    from ..hostplugin import HostPluginControl
    from ..plugins.loader import load_plugin
    ctl = HostPluginControl(path)
    backends.append(floor_backend(ctl))
    plugin = load_plugin(path, abi="llvm")
    plugin.acquire()
    try:
        plugin.acquire_device(0)
    except BaseException:
        plugin.release()
        raise
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
    for i, pol in enumerate(("exact", "binned")):
        backends.append(_device_backend(plugin, (1 + i) % ndev, pol, f"device:{pol}",
                                        f"Device.alloc/free, pool {pol} (the user path)",
                                        "direct:bundled", growth=True))
    # latency-emulating rows
    d = Backend("direct:bundled+lat", "direct", f"bundled plugin, {lat_txt}", balloc, bfree,
                enter=lat_on, leave=lat_off)
    p = mm_backend("pool:exact+lat", f"MemoryManager(exact), {lat_txt}", balloc, bfree,
                   baseline="direct:bundled+lat")
    p.enter, p.leave = lat_on, lat_off
    dl = _device_backend(plugin, 3 % ndev, "exact", "device:exact+lat",
                         f"Device.alloc/free (exact), {lat_txt}", "direct:bundled+lat")
    dl.enter, dl.leave = lat_on, lat_off
    for b in (d, p, dl):
        b.latency = True
        b._close.append(lat_off)
        backends.append(b)

    try:
        backends.extend(nextgen_backends())
    except Skip as exc:
        skipped["llvm16-nextgen"] = skipped["llvm16-nextgen,pool=off"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - a plugin that fails is a skipped row
        skipped["llvm16-nextgen"] = skipped["llvm16-nextgen,pool=off"] = \
            f"{type(exc).__name__}: {exc}"
    try:
        backends.append(llvm_plugin_backend("llvm16-classic", CLASSIC16,
                                            "LLVM 16 x86_64 classic via ctypes (no pool)"))
    except Skip as exc:
        skipped["llvm16-classic"] = str(exc)
    except Exception as exc:  # noqa: BLE001
        skipped["llvm16-classic"] = f"{type(exc).__name__}: {exc}"
    try:
        backends.extend(liboffload_backends())
    except Exception as exc:  # noqa: BLE001 - a view that fails is a skipped row
        skipped["direct:ol"] = skipped["device:exact/ol"] = f"{type(exc).__name__}: {exc}"


def liboffload_backends() -> list:
    """The liboffload (``ol*``) rows over the bundled plugin's ``ol*`` view:
    ``direct:ol`` = ``LiboffloadPlugin.alloc/free`` (``olMemAlloc``/``olMemFree``
    through the ``ol_result_t`` checker), ``device:exact/ol`` = ``Device.alloc/free``
    with the pool over it (the user path of the third family)."""
    from ..core.runtime import Runtime
    from ..abi.native import bundled_plugin_path
    from ..plugins.loader import load_plugin
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
