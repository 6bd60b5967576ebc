"""Exact vs binned vs best-fit on recorded programs (issue 30, docs/memory-manager.md
"Policies on recorded programs").

Records every clang-16 program of ``tests/programs/`` (its first ``run:`` line), the
programs of the ``run`` benchmark (:mod:`offload_shim.bench.run_overhead`, small
counts) and ``benchmarks/programs/*.c`` under ``offload-shim run --record``, replays
each trace with ``offload-shim replay`` under the four policies on the bundled plugin
with the benchmark's emulated driver latency (5 us per allocation, 14 us per free),
and writes ``benchmarks/results/policy-traces.{json,md}`` and
``docs/img/policy-traces.png`` (``--no-docs``: only the results).  Like the other
scripts here it imports the *installed* ``offload_shim``.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path
               if Path(p or os.getcwd()).resolve() not in (ROOT, ROOT / "benchmarks")]

from offload_shim.bench import run_overhead  # noqa: E402
from offload_shim.bench.config import (DEFAULT_ALLOC_LATENCY_NS,  # noqa: E402
                                       DEFAULT_FREE_LATENCY_NS)
from offload_shim.trace.replay import POLICIES, replay  # noqa: E402

SHIM = run_overhead.shim_command()
BENCH_COUNTS = {"data-1": 200, "maps-1": 200, "maps-4": 200, "maps-16": 100, "maps-64": 50,
                "enter-exit": 200, "update": 200}
OWN_COUNTS = {"ragged_rows": 2000, "shrinking_tiles": 20}


def programs(work: Path, only=None) -> list:
    """``[(name, kind, argv, env)]`` built into ``work``."""
    sys.path.insert(0, str(ROOT / "tests"))
    import conformance as cf
    out = []
    progs = [p for p in cf.programs() if "exe" in p.modes and p.built_by(cf.CLANG16)]
    if only:
        progs = [p for p in progs if any(o in p.name for o in only)]
    built = cf.build_all(progs, cf.CLANG16, jobs=2, library=False)
    for name, b in sorted(built.items()):
        if b.exe is None:
            continue
        run = b.program.runs[0]
        out.append((name, "conformance", [str(b.exe), *run.args], run.env))
    exes = run_overhead.build(list(BENCH_COUNTS), work / "bench")
    for name, n in BENCH_COUNTS.items():
        out.append((f"bench:{name}", "benchmark", [str(exes[name]), str(n)], {}))
    for src in sorted((ROOT / "benchmarks" / "programs").glob("*.c")):
        exe = work / src.stem
        subprocess.run(["clang-16", *run_overhead.CLANG_FLAGS, str(src), "-o", str(exe)],
                       check=True, capture_output=True, timeout=300)
        out.append((src.stem, "workload", [str(exe), str(OWN_COUNTS.get(src.stem, 100))],
                    {}))
    return out


def measure(progs, work: Path) -> list:
    rows = []
    for name, kind, argv, env in progs:
        trace = work / "traces" / (name.replace(":", "_") + ".jsonl")
        trace.parent.mkdir(exist_ok=True)
        e = dict(os.environ, **env)
        try:
            subprocess.run([*SHIM, "run", "--record", str(trace), *argv], env=e,
                           capture_output=True, timeout=120)
        except subprocess.TimeoutExpired:
            continue
        try:
            res = replay(trace, POLICIES,
                         latency=(DEFAULT_ALLOC_LATENCY_NS, DEFAULT_FREE_LATENCY_NS))
        except (OSError, ValueError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            continue
        if not res["recorded"]["allocs"]:
            continue
        rows.append({"program": name, "kind": kind, **res})
        print(f"{name}: {res['recorded']['allocs']} allocs", file=sys.stderr)
    return rows


def table(rows) -> str:
    lines = ["| program | allocs | peak requested (B) | peak device bytes exact / binned / "
             "best-fit | hit rate exact / binned / best-fit | replay time, ms: exact / "
             "binned / best-fit / none |", "|---|---|---|---|---|---|"]
    for r in rows:
        p = {x["policy"]: x for x in r["policies"]}
        lines.append(
            f"| {r['program']} | {r['recorded']['allocs']} | "
            f"{p['exact']['peak_requested_bytes']} | "
            + " / ".join(str(p[k]["peak_device_bytes"]) for k in ("exact", "binned",
                                                                   "best-fit"))
            + " | " + " / ".join(f"{p[k]['hit_rate']:.2f}" for k in ("exact", "binned",
                                                                      "best-fit"))
            + " | " + " / ".join(f"{p[k]['time_ns'] / 1e6:.1f}" for k in POLICIES) + " |")
    return "\n".join(lines)


def summary(rows) -> dict:
    """Per policy: programs where it holds the least peak memory among the pooling
    policies (ties shared), where its hit rate is highest, total plugin calls and
    time."""
    pools = ("exact", "binned", "best-fit")
    out = {k: {"least_peak": 0, "best_hits": 0, "backend_calls": 0, "time_ms": 0.0,
               "peak_bytes": 0} for k in POLICIES}
    for r in rows:
        p = {x["policy"]: x for x in r["policies"]}
        lo = min(p[k]["peak_device_bytes"] for k in pools)
        hi = max(p[k]["hit_rate"] for k in pools)
        for k in POLICIES:
            if k in pools:
                out[k]["least_peak"] += p[k]["peak_device_bytes"] == lo
                out[k]["best_hits"] += p[k]["hit_rate"] == hi
            out[k]["backend_calls"] += p[k]["backend_allocs"] + p[k]["backend_frees"]
            out[k]["time_ms"] += p[k]["time_ns"] / 1e6
            out[k]["peak_bytes"] += p[k]["peak_device_bytes"]
    return out


def plot(rows, path: Path) -> None:
    """Two panels per program with at least 4 allocations: peak device memory and
    plugin allocation + free calls, each relative to the exact policy (both
    deterministic for a trace, unlike the replay time on a shared machine)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in rows if r["recorded"]["allocs"] >= 4]
    names = [f"{r['program']} ({r['recorded']['allocs']})" for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(13, max(4, 0.26 * len(rows) + 1.5)),
                             sharey=True)
    colors = {"exact": "#4c72b0", "binned": "#dd8452", "best-fit": "#55a868",
              "none": "#999999"}
    h = 0.2
    for i, pol in enumerate(POLICIES):
        peaks, calls = [], []
        for r in rows:
            p = {x["policy"]: x for x in r["policies"]}
            peaks.append(p[pol]["peak_device_bytes"] / max(1, p["exact"]["peak_device_bytes"]))
            c = p[pol]["backend_allocs"] + p[pol]["backend_frees"]
            ce = p["exact"]["backend_allocs"] + p["exact"]["backend_frees"]
            calls.append(c / max(1, ce))
        ys = [k + (i - 1.5) * h for k in range(len(rows))]
        axes[0].barh(ys, peaks, height=h, color=colors[pol], label=pol)
        axes[1].barh(ys, calls, height=h, color=colors[pol], label=pol)
    axes[0].set_yticks(range(len(rows)), names, fontsize=7)
    axes[0].set_xlabel("peak device memory held / exact's")
    axes[1].set_xlabel("plugin allocations + frees / exact's (log)")
    axes[1].set_xscale("log")
    for ax in axes:
        ax.axvline(1.0, color="black", lw=0.6)
        ax.invert_yaxis()
    axes[1].legend(loc="lower right", fontsize=8)
    fig.suptitle("Pool policies on recorded traces (offload-shim replay, bundled plugin; "
                 "allocations in parentheses)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--only", action="append", help="conformance programs whose name "
                    "contains this (repeatable)")
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--plot-only", action="store_true",
                    help="redraw the table and plot from OUT/policy-traces.json")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.plot_only:
        res = json.loads((out / "policy-traces.json").read_text())
        rows = res["rows"]
    else:
        with tempfile.TemporaryDirectory(prefix="osh-policy-traces-") as tmp:
            rows = measure(programs(Path(tmp), args.only), Path(tmp))
        res = {"rows": rows, "summary": summary(rows),
               "latency_ns": [DEFAULT_ALLOC_LATENCY_NS, DEFAULT_FREE_LATENCY_NS]}
    (out / "policy-traces.json").write_text(json.dumps(res, indent=1))
    (out / "policy-traces.md").write_text(table(rows) + "\n")
    plot(rows, out / "policy-traces.png")
    if not args.no_docs:
        img = ROOT / "docs" / "img"
        img.mkdir(exist_ok=True)
        (img / "policy-traces.png").write_bytes((out / "policy-traces.png").read_bytes())
    print(table(rows))
    print(json.dumps(res["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
