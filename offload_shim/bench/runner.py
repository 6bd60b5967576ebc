"""One run of ``offload-shim bench``: build the rows, run the workloads,
compute speedups and targets, and return the JSON-ready result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .backends import host_backends
from .config import DEFAULT_ALLOC_LATENCY_NS, DEFAULT_FREE_LATENCY_NS, PROFILES, WORKLOADS
from .gpu import gpu_backends
from .report import check_targets
from .timing import Progress, machine_info, timer_overhead_ns
from .workloads import record_replay_log, replay_ops, run_workloads, stats_overhead

def child_row(kind, profile, log_path, workloads, timeout=600):
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
    ovh = timer_overhead_ns()
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
    bar = Progress(n_steps, progress)
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
            results = run_workloads(backends, prm, ovh, bar, log_path, workloads)
            stats_ovh = stats_overhead(backends, prm, ovh)
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
                sub = child_row("llvm16-nextgen-off", profile, log_path,
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
