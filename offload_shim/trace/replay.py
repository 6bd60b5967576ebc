"""``offload-shim replay TRACE``: re-issue a recorded trace on a plugin under each pool
policy and report them side by side.

What is re-issued, per policy, on a fresh :class:`~offload_shim.Runtime` of one plugin
(the bundled host plugin by default):

* every caller allocation (``alloc`` events with a pointer, cache hits and misses
  alike) through ``Device.alloc`` -- the device's :class:`MemoryManager` with the
  policy under test -- and every caller ``free`` through ``Device.free`` (a ``free``
  with ``"reason": "drain"`` ends the block's life without a free: the program held
  it until its device was torn down, and so does the replay); a ``free_failed``
  allocates the block again, as :mod:`offload_shim.memory.replay` does;
* every ``copy`` of the trace whose device address lies in a block the trace allocated,
  with its size and direction, at the same offset in the replayed block
  (``Device.submit_raw`` / ``retrieve_raw`` from one host buffer); copies to other
  device memory (the ``declare target`` globals of the program's image) are counted
  as ``copies_skipped``;
* ``launch`` events are counted (``launches``), not re-issued: the trace holds the
  kernel's name and argument count, not its image or arguments
  (``launches_reissued`` is 0).

Order and threads: the events are sorted by ``t_ns`` (the recorder writes a
construct's events when it returns, so the file order across threads is not the
event order; docs/trace-format.md); each recorded thread (``tid``) is replayed by a
thread of its own, and the threads take turns so that the events happen in the
recorded order (``threads=False``: one thread does them all, in that order).

Per policy the report gives ``time_ns`` (wall time of the re-issued events, not the
runtime's start and stop), ``peak_device_bytes`` (the most device memory the pools
held, ``PoolStats.peak_bytes_total``), ``peak_requested_bytes`` (the most bytes the
program had allocated at once: the same for every policy), ``fragmentation`` (``1 -
peak_requested_bytes / peak_device_bytes``: the share of the peak held by cached
blocks and by the slack of blocks larger than their request), ``hit_rate``, ``hits``,
``misses``, ``bytes_cached`` (at the end, before teardown), ``waste_bound`` (the
policy's bound on a hit's waste, a fraction of the request:
:func:`offload_shim.memory.policies.waste_bound`) and ``max_waste`` (the largest seen),
``oom_events`` (allocations that failed with
:class:`~offload_shim.errors.OutOfDeviceMemoryError`), ``oom_retries``,
``backend_allocs`` / ``backend_frees`` (plugin calls), and the counts re-issued.
Policy ``none`` is no pool at all (threshold 0: every allocation is a plugin call).

``capacity`` (bytes per device, bundled plugin only: its ``set_capacity``) makes
out-of-memory happen; ``latency`` (``(alloc_ns, free_ns)``, bundled plugin only: its
``set_latency``) makes every plugin allocation and free cost that much, like a GPU
driver's (docs/benchmarks.md).
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from bisect import bisect_right, insort

from .format import Trace, TraceError, read_trace, summary

__all__ = ["POLICIES", "replay", "format_table"]

#: the policies ``replay`` knows: the memory manager's, and ``none`` (no pool)
POLICIES = ("exact", "binned", "best-fit", "none")
#: largest host buffer the copies use (a copy above it is done in pieces)
_HOST_MAX = 64 << 20


def replay(trace, policies=POLICIES, *, plugin=None, threshold=None, latency=None,
           capacity=None, threads=True) -> dict:
    """Replay ``trace`` (a path or a :class:`~offload_shim.trace.format.Trace`) under
    each of ``policies`` on ``plugin`` (a plugin path; None: the bundled host plugin).

    ``threshold``: bytes (None: the recorded pool's, from the trace's first ``config``
    event, else 8192).  ``latency``: ``(alloc_ns, free_ns)``; ``capacity``: bytes
    per device, > 0 (both only for the bundled plugin, whose capacity 0 means no
    limit: 0 is refused rather than replayed as an unlimited device).  Returns ``{"trace": path,
    "plugin", "threshold", "recorded": {"allocs", "frees", "copies", "launches",
    "bytes", "threads", "constructs", "complete", "truncated"}, "policies": [one dict
    per policy, module doc]}``.

    Raises ``ValueError`` (an unknown policy, ``latency``/``capacity`` with another
    plugin, a negative value, capacity 0), :class:`~offload_shim.trace.format.TraceError` (not a
    trace, or a trace of ``offload-shim check``), ``OSError``, and the runtime's errors for a plugin that cannot be
    loaded."""
    from ..memory.policies import waste_bound
    if not isinstance(trace, Trace):
        path = os.fspath(trace)
        trace = read_trace(path)
    else:
        path = None
    if trace.header.get("source") == "check":
        raise TraceError(f"{path or 'the trace'} is a trace of offload-shim check (the "
                         "steps of a lifecycle sequence, no allocation stream): "
                         "offload_shim.cli.replay.replay_check_trace re-runs it")
    policies = tuple(policies)
    for p in policies:
        if p not in POLICIES:
            raise ValueError(f"unknown policy {p!r}; expected one of {', '.join(POLICIES)}")
    if not policies:
        raise ValueError("no policy to replay")
    if (latency or capacity is not None) and plugin is not None:
        raise ValueError("latency and capacity are emulated by the bundled host plugin "
                         "only (no --plugin)")
    if latency is not None and (len(latency) != 2 or min(latency) < 0):
        raise ValueError(f"latency must be (alloc_ns, free_ns) >= 0, got {latency!r}")
    if capacity is not None and capacity <= 0:    # (the plugin's 0 is "no limit")
        raise ValueError(f"capacity must be > 0 bytes, got {capacity}")
    if threshold is None:
        cfg = next((e for e in trace.events if e["op"] == "config"), None)
        threshold = int(cfg.get("threshold", 8192)) if cfg else 8192
    elif type(threshold) is not int or threshold < 0:
        raise ValueError(f"threshold must be an int >= 0 bytes, got {threshold!r}")
    s = summary(trace)
    events = _events(trace)
    out = {"trace": path, "plugin": plugin or "bundled", "threshold": threshold,
           "recorded": {"allocs": s["allocs"], "frees": s["frees"], "copies": s["copies"],
                        "copy_bytes": s["copy_bytes"], "launches": s["launches"],
                        "bytes": s["bytes"], "constructs": s["constructs"],
                        "threads": s["threads"], "complete": trace.complete,
                        "truncated": trace.truncated},
           "policies": []}
    for pol in policies:
        res = _replay_one(events, pol, plugin, threshold, latency, capacity, threads)
        res["waste_bound"] = None if pol == "none" else waste_bound(pol)
        out["policies"].append(res)
    return out


def _events(trace: Trace) -> list:
    """The events replay looks at, ordered by ``t_ns`` (stable)."""
    keep = ("alloc", "free", "free_failed", "copy", "launch")
    evs = [e for e in trace.events if e["op"] in keep
           and not (e["op"] == "alloc" and not e.get("ptr"))]
    evs.sort(key=lambda e: e.get("t_ns", 0))
    return evs


class _State:
    """What one policy's replay keeps: recorded block -> replayed block, per device."""

    def __init__(self, devices):
        self.devices = devices              # recorded label -> Device
        self.live = {}                      # (label, recorded ptr) -> (ptr, size) | None
        self.starts = {}                    # label -> sorted recorded block starts
        self.lock = threading.Lock()
        self.requested = self.peak_requested = 0
        self.max_waste = 0.0
        self.allocs = self.frees = self.copies = self.copy_bytes = 0
        self.copies_skipped = self.launches = self.oom_events = 0
        self.errors: list[str] = []


def _replay_one(events, policy, plugin, threshold, latency, capacity, threads) -> dict:
    import offload_shim as osh
    from ..errors import OffloadError, OutOfDeviceMemoryError
    pool = {"policy": "exact" if policy == "none" else policy,
            "threshold": 0 if policy == "none" else threshold, "debug": ""}
    ctl = None
    if plugin is None:
        rt = osh.Runtime([], bundled=True, abi="llvm", pool=pool)
        if latency or capacity:
            from ..abi.native import bundled_plugin_path
            from ..hostplugin import HostPluginControl
            ctl = HostPluginControl(bundled_plugin_path())
    else:
        rt = osh.Runtime([plugin], pool=pool)
    try:
        devs = list(rt.devices)
        if not devs:
            raise ValueError(f"{plugin or 'the bundled plugin'} has no device")
        labels = []
        for e in events:
            lab = e.get("dev")
            if lab is not None and lab not in labels:
                labels.append(lab)
        st = _State({lab: devs[i % len(devs)] for i, lab in enumerate(labels)})
        for d in set(st.devices.values()):
            d.init()
        if ctl is not None:
            if capacity:
                ctl.set_capacity(-1, capacity)
            if latency:
                ctl.set_latency(*latency)
        biggest = max((e["size"] for e in events if e["op"] == "copy"), default=0)
        host = ctypes.create_string_buffer(max(1, min(biggest, _HOST_MAX)))
        hostaddr, hostlen = ctypes.addressof(host), len(host)

        def do(e):
            op = e["op"]
            lab = e.get("dev")
            if op == "alloc" or op == "free_failed":
                size = e.get("requested", e["size"]) if op == "free_failed" else e["size"]
                dev = st.devices[lab]
                try:
                    p = dev.alloc(size)
                except OutOfDeviceMemoryError:
                    with st.lock:
                        st.oom_events += 1
                        st.live[(lab, e["ptr"])] = None
                    return
                blk = dev.pool.block_size_of(p) if p and dev.pool.owns(p) else size
                with st.lock:
                    st.allocs += 1
                    st.live[(lab, e["ptr"])] = (p, size)
                    insort(st.starts.setdefault(lab, []), e["ptr"])
                    st.requested += size
                    if st.requested > st.peak_requested:
                        st.peak_requested = st.requested
                    if size and blk > size:
                        st.max_waste = max(st.max_waste, (blk - size) / size)
            elif op == "free":
                with st.lock:
                    got = st.live.pop((lab, e["ptr"]), None)
                    starts = st.starts.get(lab)
                    if starts is not None:
                        i = bisect_right(starts, e["ptr"]) - 1
                        if i >= 0 and starts[i] == e["ptr"]:
                            del starts[i]
                    if got is not None:
                        st.requested -= got[1]
                if got is not None and e.get("reason") != "drain":
                    st.devices[lab].free(got[0])
                    with st.lock:
                        st.frees += 1
            elif op == "copy":
                tgt, n = e["tgt"], e["size"]
                with st.lock:
                    starts = st.starts.get(lab, ())
                    i = bisect_right(starts, tgt) - 1
                    got = st.live.get((lab, starts[i])) if i >= 0 else None
                    if got is None or tgt + n > starts[i] + max(got[1], 1):
                        st.copies_skipped += 1
                        return
                    new = got[0] + (tgt - starts[i])
                dev = st.devices[lab]
                for off in range(0, n, hostlen):
                    k = min(hostlen, n - off)
                    if e["dir"] == "h2d":
                        dev.submit_raw(new + off, hostaddr, k)
                    else:
                        dev.retrieve_raw(hostaddr, new + off, k)
                with st.lock:
                    st.copies += 1
                    st.copy_bytes += n
            elif op == "launch":
                with st.lock:
                    st.launches += 1

        t0 = time.perf_counter_ns()
        tids = {e.get("tid") for e in events}
        if threads and len(tids) > 1:
            _run_threads(events, do, st)
        else:
            for e in events:
                try:
                    do(e)
                except OffloadError as exc:
                    st.errors.append(f"{e['op']} at t_ns={e.get('t_ns')}: {exc}")
        elapsed = time.perf_counter_ns() - t0
        pools = [d.pool for d in set(st.devices.values()) if d.pool is not None]
        stats = [p.stats for p in pools]
    finally:
        if ctl is not None:
            ctl.set_latency(0, 0)
            ctl.set_capacity(-1, 0)
        rt.close()
    peak = sum(s.peak_bytes_total for s in stats)
    hits, misses = sum(s.hits for s in stats), sum(s.misses for s in stats)
    return {"policy": policy, "time_ns": elapsed, "peak_device_bytes": peak,
            "peak_requested_bytes": st.peak_requested,
            "fragmentation": (1 - st.peak_requested / peak) if peak else 0.0,
            "hits": hits, "misses": misses,
            "hit_rate": hits / (hits + misses) if hits + misses else 0.0,
            "bytes_cached": sum(s.bytes_cached for s in stats),
            "max_waste": st.max_waste, "oom_events": st.oom_events,
            "oom_retries": sum(s.oom_retries for s in stats),
            "backend_allocs": sum(s.backend_allocs for s in stats),
            "backend_frees": sum(s.backend_frees for s in stats),
            "allocs": st.allocs, "frees": st.frees, "copies": st.copies,
            "copy_bytes": st.copy_bytes, "copies_skipped": st.copies_skipped,
            "launches": st.launches, "launches_reissued": 0, "errors": st.errors}


def _run_threads(events, do, st) -> None:
    """One thread per recorded ``tid``; event ``i`` runs when events ``0..i-1`` are
    done (a turn counter under a condition)."""
    from ..errors import OffloadError
    per: dict = {}
    for i, e in enumerate(events):
        per.setdefault(e.get("tid"), []).append((i, e))
    cv = threading.Condition()
    turn = [0]

    def worker(items):
        for i, e in items:
            with cv:
                while turn[0] != i:
                    cv.wait()
            try:
                do(e)
            except OffloadError as exc:
                with st.lock:
                    st.errors.append(f"{e['op']} at t_ns={e.get('t_ns')}: {exc}")
            except BaseException as exc:  # noqa: BLE001 - reported, the turn goes on
                with st.lock:
                    st.errors.append(f"{e['op']}: {type(exc).__name__}: {exc}")
            with cv:
                turn[0] = i + 1
                cv.notify_all()

    ts = [threading.Thread(target=worker, args=(items,), name=f"replay-tid-{tid}")
          for tid, items in per.items()]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


_ROWS = (("time_ns", "time (ms)", lambda v: f"{v / 1e6:.2f}"),
         ("peak_device_bytes", "peak device bytes", str),
         ("peak_requested_bytes", "peak requested bytes", str),
         ("fragmentation", "fragmentation", lambda v: f"{v:.3f}"),
         ("hit_rate", "hit rate", lambda v: f"{v:.3f}"),
         ("hits", "hits", str), ("misses", "misses", str),
         ("bytes_cached", "bytes cached (end)", str),
         ("waste_bound", "waste bound", lambda v: "-" if v is None else f"{v:g}"),
         ("max_waste", "max waste seen", lambda v: f"{v:.3f}"),
         ("oom_events", "OOM events", str), ("oom_retries", "OOM retries", str),
         ("backend_allocs", "plugin allocs", str), ("backend_frees", "plugin frees", str),
         ("allocs", "allocs", str), ("frees", "frees", str), ("copies", "copies", str),
         ("copies_skipped", "copies skipped", str),
         ("launches", "launches (counted)", str))


def format_table(result: dict) -> str:
    """The report of :func:`replay` as text: what was recorded, then one column per
    policy."""
    r = result["recorded"]
    head = (f"trace: {result.get('trace') or '-'}: {r['allocs']} allocs, {r['frees']} "
            f"frees, {r['copies']} copies, {r['launches']} launches, {r['bytes']} bytes, "
            f"{r['threads']} thread(s)"
            + ("" if r["complete"] else " (incomplete: the program did not stop "
                                          "normally)")
            + f"\nplugin: {result['plugin']}; threshold: {result['threshold']} bytes")
    pols = result["policies"]
    cells = [["", *[p["policy"] for p in pols]]]
    for key, title, fmt in _ROWS:
        cells.append([title, *[fmt(p[key]) for p in pols]])
    w = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    lines = ["  ".join([c[0].ljust(w[0])] + [x.rjust(w[i + 1]) for i, x in enumerate(c[1:])])
             for c in cells]
    lines.insert(1, "  ".join("-" * x for x in w))
    for p in pols:
        for err in p["errors"][:5]:
            lines.append(f"{p['policy']}: error: {err}")
    return head + "\n" + "\n".join(lines)
