"""The ``record`` workload of ``offload-shim bench``: what ``run --record TRACE`` costs
a compiled program, against the same program under ``run`` without it.

The programs and counts are :mod:`.run_overhead`'s (built with ``clang-16 -O2``); each
row runs ``offload-shim run --plugin <x86_64 nextgen> ./prog N`` and ``offload-shim run
--record TRACE --plugin ... ./prog N`` in alternation (which goes first flips every
repetition).  Per-construct cost is the slope between the two counts, as there
(medians of wall and CPU time); ``startup`` and ``copy-64M`` are whole-process times.
The ratio printed is recording / not recording; the goal (issue 30) is at most 1.5.
Each row checks that both print the same result and that the trace has an ``end`` line
and as many ``construct`` lines as the program ran constructs (at least ``N``).
Checked and printed, never asserted in tests.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from . import run_overhead as ro
from .config import NEXTGEN16

NAME = "record"
MODES = ("run", "run --record")
GOAL = 1.5
#: rows kept (the copy-bound and the 64-map rows add time, not information)
ROWS = ("startup", "data-1", "maps-1", "maps-16", "enter-exit", "update")


def run(profile: str = "quick", *, repeats: int | None = None, plugin=NEXTGEN16,
        progress=None, only=None) -> dict:
    """Build, run both modes, and return ``meta``, ``rows`` (row -> figures: per mode
    ``wall``/``cpu`` (us per iteration for slope rows, s for whole-process rows),
    ``ratio`` and ``cpu_ratio`` (record / run), ``trace_lines``, ``errors``),
    ``goal``, ``skipped``."""
    from .timing import machine_info
    rows = [r for r in ro.rows_for(profile) if r.name in ROWS]
    if only:
        rows = [r for r in rows if any(o in r.name for o in only)]
    reps = repeats or ro.REPEATS[profile]
    out = {"meta": {"machine": machine_info(), "profile": profile, "repeats": reps,
                    "plugin": str(plugin)}, "rows": {}, "goal": GOAL, "skipped": None}
    env = ro._clean_env()
    shim = ro.shim_command()
    t0 = time.monotonic()
    try:
        if not Path(plugin).exists():
            raise ro.Skip(f"{plugin} not found (apt-get install libomp5-16)")
        with tempfile.TemporaryDirectory(prefix="osh-bench-record-") as tmp:
            exes = ro.build([r.name for r in rows], tmp)
            trace = os.path.join(tmp, "trace.jsonl")
            cmds = {"run": shim + ["run", "--plugin", str(plugin)],
                    "run --record": shim + ["run", "--record", trace, "--plugin",
                                            str(plugin)]}
            samples = {r.name: {m: [[] for _ in r.counts] for m in MODES} for r in rows}
            lines: dict = {}
            flip = False
            for rep in range(reps):
                for r in rows:
                    for j, n in enumerate(r.counts):
                        order = MODES[::-1] if flip else MODES
                        flip = not flip
                        for m in order:
                            x = ro.run_once(cmds[m] + [str(exes[r.name]), str(n)], env)
                            if m == "run --record":
                                x["trace"] = _trace_counts(trace)
                            samples[r.name][m][j].append(x)
                    if progress:
                        progress(f"record: rep {rep + 1}/{reps} {r.name}", rep, reps)
            out["rows"] = {r.name: _summary(r, samples[r.name]) for r in rows}
    except ro.Skip as exc:
        out["skipped"] = str(exc)
    out["meta"]["seconds"] = round(time.monotonic() - t0, 1)
    return out


def _trace_counts(path) -> dict:
    from ..trace.format import read_trace
    try:
        t = read_trace(path)
    except (OSError, ValueError) as exc:
        return {"error": str(exc)}
    return {"lines": len(t.events), "constructs": sum(e["op"] == "construct"
                                                      for e in t.events),
            "complete": t.complete}


def _summary(r, per) -> dict:
    fig: dict = {"unit": r.unit, "what": r.what, "counts": list(r.counts), "errors": []}
    for m in MODES:
        for j, runs in enumerate(per[m]):
            for x in runs:
                if x["rc"] != 0:
                    fig["errors"].append(f"{m} N={r.counts[j]}: exit {x['rc']} {x['stderr']}")
                t = x.get("trace")
                if t is not None and (t.get("error") or not t.get("complete")
                                      or t.get("constructs", 0) < r.counts[j]):
                    fig["errors"].append(f"{m} N={r.counts[j]}: trace {t}")
    for j in range(len(r.counts)):
        res = {m: sorted({x["result"] for x in per[m][j]}) for m in MODES}
        if res["run"] != res["run --record"]:
            fig["errors"].append(f"results differ at N={r.counts[j]}: {res}")
    for m in MODES:
        f = {}
        if r.slope:
            d = (r.counts[1] - r.counts[0]) / 1e6
            a, b = per[m]
            for key in ("wall_s", "cpu_s"):
                f[key[:-2]] = (ro._med([y[key] for y in b]) - ro._med([x[key] for x in a])) / d
        else:
            for key in ("wall_s", "cpu_s"):
                f[key[:-2]] = ro._med([x[key] for x in per[m][0]])
        fig[m] = f
    fig["ratio"] = ro._ratio(fig["run --record"]["wall"], fig["run"]["wall"])
    fig["cpu_ratio"] = ro._ratio(fig["run --record"]["cpu"], fig["run"]["cpu"])
    lines = [x["trace"].get("lines") for x in per["run --record"][-1] if x.get("trace")]
    fig["trace_lines"] = ro._med([n for n in lines if n is not None])
    return fig


def format_text(out) -> str:
    """The side-by-side table: per row, both modes and the ratios."""
    if out.get("skipped"):
        return f"record: skipped: {out['skipped']}"
    head = ["row", "unit", "run", "run --record", "ratio", "cpu ratio", "trace lines",
            f"<= {GOAL}x"]
    cells = [head]
    note = ro.smoke_note(out.get("meta", {}).get("profile", ""))
    for name, f in out["rows"].items():
        u = "us/" + f["unit"] if f["unit"] != "process" else "s"
        ok = "-" if f["ratio"] is None or note else ("yes" if f["ratio"] <= GOAL else "NO")
        cells.append([name, u, ro._f(f["run"]["wall"]), ro._f(f["run --record"]["wall"]),
                      ro._f(f["ratio"]), ro._f(f["cpu_ratio"]),
                      ro._f(f["trace_lines"], "{:.0f}"),
                      ok + (" (errors)" if f["errors"] else "")])
    w = [max(len(str(c[i])) for c in cells) for i in range(len(head))]
    lines = ["  ".join(str(c[i]).ljust(w[i]) for i in range(len(head))) for c in cells]
    lines.insert(1, "  ".join("-" * x for x in w))
    for name, f in out["rows"].items():
        for e in f["errors"][:3]:
            lines.append(f"{name}: {e}")
    return "\n".join(note + lines)


def main_from_bench(args) -> int:
    """``offload-shim bench --workloads record``: prints the table (``--json``: the
    result), writes ``record-overhead.json`` into ``--out``.  Exit status 0."""
    import json
    out = run(args.profile, only=getattr(args, "only", None))
    if getattr(args, "out", None):
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "record-overhead.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1) if getattr(args, "json", False) else format_text(out))
    return 0


__all__ = ["GOAL", "MODES", "format_text", "main_from_bench", "run"]
