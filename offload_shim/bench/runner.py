"""One run of ``offload-shim bench``: build the rows, run the workloads,
compute speedups and targets, and return the JSON-ready result."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from ..memory.hitpath import hit_path as _hit_path
from . import stop
from .backends import host_backends
from .config import DEFAULT_ALLOC_LATENCY_NS, DEFAULT_FREE_LATENCY_NS, PROFILES, WORKLOADS
from .gpu import gpu_backends
from .report import check_targets
from .timing import Progress, machine_info, timer_overhead_ns
from .workloads import record_replay_log, replay_ops, run_workloads, stats_overhead

def _close_all(opened, skipped) -> None:
    """Close the rows in reverse order of opening (plugins last); errors are
    collected under ``skipped["close errors"]``."""
    errs = []
    for b in reversed(opened):
        try:
            b.close()
        except Exception as exc:  # noqa: BLE001
            errs.append(f"{b.name}: {exc}")
    if errs:
        skipped["close errors"] = "; ".join(errs)


def _ratios(results, rows) -> None:
    """Per workload and row with a baseline present: ``speedup`` = baseline
    wall time / this row's wall time for the same operations (= throughput
    ratio), ``median_ratio`` = baseline median / this row's median."""
    for w, per in results.items():
        if w == "growth":
            continue
        for name, r in per.items():
            base = rows.get(name, {}).get("baseline")
            b = per.get(base, {})
            bt, bm = b.get("throughput_per_s"), b.get("median_ns")
            mt, mm = r.get("throughput_per_s"), r.get("median_ns")
            r["speedup"] = mt / bt if bt and mt else None
            r["median_ratio"] = bm / mm if bm and mm else None
            r["speedup_over"] = base if r["speedup"] is not None else None


def _loadavg():
    """The 1-minute load average now (None where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def run(profile: str = "quick", *, alloc_ns: int = DEFAULT_ALLOC_LATENCY_NS,
        free_ns: int = DEFAULT_FREE_LATENCY_NS, gpu: bool = True, only=None,
        progress: bool = True, workloads=WORKLOADS, params=None) -> dict:
    """Run the benchmark in this process; returns the JSON-ready result dict
    (see ``docs/benchmarks.md``).  ``profile``: a key of :data:`PROFILES`;
    ``alloc_ns``/``free_ns``: emulated latencies (ns, >= 0); ``gpu``: try the
    CUDA rows; ``only``: substrings selecting rows; ``params``: overrides of
    the profile's counts.  Every row is closed before it returns or raises
    (also on KeyboardInterrupt; within :func:`.stop.deferred_signals`, as
    the command runs it, a signal stops the run at the next block).  A row that cannot be set up or fails
    during a workload is listed under ``skipped`` with the reason."""
    prm = dict(PROFILES[profile])
    prm.update(params or {})
    workloads = tuple(w for w in WORKLOADS if w in workloads)
    t_start = time.monotonic()
    load_before = _loadavg()
    ovh = timer_overhead_ns()
    opened, skipped = [], {}
    failed = {}
    results = {}
    stats_ovh = None
    replay_info = None
    bar = None
    tmp = tempfile.TemporaryDirectory(prefix="osh-bench-")
    try:
        hb, hs = host_backends(alloc_ns, free_ns)
        opened += hb
        skipped.update(hs)
        stop.check()
        if gpu:
            gb, gs = gpu_backends()
            opened += gb
            skipped.update(gs)
        else:
            skipped["gpu rows"] = "disabled (--no-gpu)"
        stop.check()
        backends = list(opened)
        if only:
            backends = [b for b in backends if any(o in b.name for o in only)]
            skipped = {k: v for k, v in skipped.items() if any(o in k for o in only)}
        rows = {b.name: {"group": b.group, "description": b.description,
                         "baseline": b.baseline, "latency": b.latency, "env": b.env,
                         "pool_observed": b.pool_observed} for b in backends}
        n_steps = len(workloads) + 1
        bar = Progress(n_steps, progress)
        log_path = None
        if "replay" in workloads:
            log_path = Path(tmp.name) / "events.jsonl"
            n_ev = record_replay_log(log_path, prm["replay_ops"])
            from ..memory import replay as pool_replay
            pol = pool_replay(log_path, ("exact", "binned"))
            replay_info = {"events": n_ev, "ops": len(replay_ops(log_path)),
                           "replay_stats": {p: {"hit_rate": s.hit_rate,
                                                "peak_bytes_total": s.peak_bytes_total}
                                            for p, s in pol.items()}}
            stop.check()
        results = run_workloads(backends, prm, ovh, bar, log_path, workloads, failed)
        stats_ovh = stats_overhead([b for b in backends if b.name not in failed], prm, ovh)
        bar.step("stats overhead")
    finally:
        if bar is not None:
            bar.close()
        _close_all(opened, skipped)
        tmp.cleanup()
    skipped.update(failed)          # rows that failed keep the workloads they finished
    _ratios(results, rows)
    out = {"meta": {"machine": machine_info(), "profile": profile, "params": prm,
                    "timer_overhead_ns": ovh, "pool_hit_path": _hit_path(),
                    "emulated_latency_ns": {"alloc": alloc_ns, "free": free_ns},
                    "peer_env": {n: r["env"] for n, r in rows.items() if r["env"]},
                    "gil_switch_interval_s": sys.getswitchinterval(),
                    "loadavg": [load_before, _loadavg()],
                    "seconds": round(time.monotonic() - t_start, 1)},
           "rows": rows, "skipped": skipped, "results": results,
           "stats_overhead": stats_ovh, "replay": replay_info}
    out["targets"] = check_targets(out)
    return out
