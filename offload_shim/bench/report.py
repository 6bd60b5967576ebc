"""What ``offload-shim bench`` reports: the targets with PASS/MISS, the
Markdown tables, the PNG plots (matplotlib, optional), the output files and
the table kept in ``docs/benchmarks.md``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .config import SMOKE_PROFILES, TARGETS

#: Workloads on which the latency target is reported, and the figure used.
LATENCY_WORKLOADS = ("hot", "llvm-mm", "random", "replay")


def check_targets(out) -> list:
    """The speed targets (:data:`~.config.TARGETS`) as ``{"target", "value",
    "limit", "status", "detail"}`` rows; ``status``: PASS, MISS or N/A (a
    row is missing).

    * hit pair <= 0.3 x (MemoryManager) and <= 0.35 x (Device) the LLVM 16 nextgen
      pair (C++ pool on): medians of
      ``hot`` (every pair after warm-up is a hit);
    * >= 10 x direct on the latency-emulating plugin: on ``hot``,
      ``llvm-mm``, ``random`` and ``replay``, as the ``speedup`` (the direct
      row's wall time over the pool row's for the same operations: misses
      and pass-through sizes count at their full cost);
    * hit cost flat over the growth points (max/min of the medians);
    * statistics overhead (alternating batches).

    On a smoke-test profile (:data:`~.config.SMOKE_PROFILES`) every status
    is N/A."""
    res = out["results"]
    hot = res.get("hot", {})
    rows = []
    smoke = out.get("meta", {}).get("profile") in SMOKE_PROFILES

    def add(target, value, limit, ok, text):
        status = "N/A" if value is None else ("PASS" if ok(value, limit) else "MISS")
        if smoke:
            status, text = "N/A", "smoke-test profile, not judged: " + text
        rows.append({"target": target, "value": value, "limit": limit, "status": status,
                     "detail": text})

    peer = hot.get("llvm16-nextgen", {}).get("median_ns")
    for name, what, limit in (("pool:exact", "MemoryManager.allocate/free",
                               TARGETS["mm_hit_vs_nextgen"]),
                              ("device:exact", "Device.alloc/free (user path)",
                               TARGETS["hit_vs_nextgen"])):
        mine = hot.get(name, {}).get("median_ns")
        v = mine / peer if mine and peer else None
        add(f"hot: pool-hit pair via {what} <= {limit} x LLVM 16 nextgen pair (C++ pool on)",
            v, limit, lambda v, l: v <= l,
            f"median {mine:.0f} ns vs {peer:.0f} ns" if v is not None else "row missing")
    for w in LATENCY_WORKLOADS:
        per = res.get(w, {})
        base = per.get("direct:bundled+lat", {})
        for name in ("pool:exact+lat", "device:exact+lat"):
            r = per.get(name, {})
            v = r.get("speedup")
            detail = "row missing"
            if v is not None:
                hr = r.get("hit_rate")
                detail = (f"{_fmt_rate(r.get('throughput_per_s'))} vs "
                          f"{_fmt_rate(base.get('throughput_per_s'))}"
                          + (f", hit rate {hr:.0%}" if hr is not None else ""))
            add(f"{w}: {name} >= 10 x direct on the latency-emulating plugin (throughput)", v,
                TARGETS["latency_speedup"], lambda v, l: v >= l, detail)
    g = res.get("growth", {})
    for name in [n for n in g if n in out["rows"] and out["rows"][n]["group"] == "pool"]:
        v = g.get(name, {}).get("flatness")
        pts = g.get(name, {}).get("points", {})
        add(f"growth: {name} hit cost flat from {min(pts, default='?')} to "
            f"{max(pts, default='?')} cached blocks (max/min <= 1.2)", v,
            TARGETS["growth_flatness"], lambda v, l: v <= l,
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
    "hot": "Hot loop (one size, rows taking turns round by round)",
    "llvm-mm": "LLVM memory-manager pattern (threads x every power of two 4 B..32 KiB)",
    "random": "Random trace (realistic size mix)",
    "replay": "Replay of a pool event log",
}


def _fmt_x(v):
    return "–" if v is None else f"{v:.1f}x"


def format_markdown(out) -> str:
    """The result as Markdown: machine and settings (emulated latency, the
    threshold each LLVM row's device was initialised with), targets, one
    table per workload, the growth table, skipped rows, row descriptions."""
    meta = out["meta"]
    m = meta["machine"]
    lat = meta["emulated_latency_ns"]
    prm = meta.get("params", {})
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores, {m['implementation']} {m['python']}, "
             f"{m['os']}; {m['date']}; profile `{meta['profile']}` "
             f"({meta['seconds']} s); timer overhead {meta['timer_overhead_ns']} ns "
             f"subtracted; emulated latency {lat['alloc']} ns alloc / {lat['free']} ns free"
             + (f"; the pool's hit path in {'C' if meta['pool_hit_path'] == 'c' else 'Python'}"
                if meta.get("pool_hit_path") else "")
             + (f"; 1-minute load average {meta['loadavg'][0]} before, "
                f"{meta['loadavg'][1]} after" if meta.get("loadavg") else "") + "."]
    env = meta.get("peer_env") or {}
    if env:
        lines += ["", "LLVM rows, device initialised with: " + "; ".join(
            f"`{n}`: " + ", ".join(f"`{k}={v}`" for k, v in e.items())
            for n, e in env.items()) + "."]
    if prm:
        lines += ["", f"Counts: hot {prm.get('hot_rounds')} rounds x {prm.get('hot_pairs')} "
                  f"pairs; llvm-mm {prm.get('mm_threads')} threads x {prm.get('mm_rounds')} "
                  f"rounds after one warm-up round; random {prm.get('trace_ops'):,} and replay "
                  f"{prm.get('replay_ops'):,} operations in chunks of {prm.get('trace_chunk'):,}; "
                  f"rows take turns block by block in every workload; GIL switch interval "
                  f"{meta.get('gil_switch_interval_s', 0) * 1000:g} ms."]
    if meta["profile"] in SMOKE_PROFILES:
        lines += ["", f"**Profile `{meta['profile']}` is a smoke test of the harness: its counts "
                  "are too small to measure anything; the figures below are not results.**"]
    lines += ["", "### Targets", "", "| target | value | limit | status | detail |",
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
        mm = w == "llvm-mm"
        lines += ["| backend | median ns/pair | p99 ns/pair | "
                  + ("16+32 KiB pairs, median ns | " if mm else "")
                  + "throughput | hit rate | peak cached | speedup (throughput) | median ratio | over |",
                  "|---|---:|---:|" + ("---:|" if mm else "") + "---:|---:|---:|---:|---:|---|"]
        order = sorted(per, key=lambda n: per[n].get("median_ns") or 0)
        for name in order:
            r = per[name]
            hr = r.get("hit_rate")
            lines.append(
                f"| {name} | {_fmt_ns(r.get('median_ns'))} | {_fmt_ns(r.get('p99_ns'))} | "
                + (f"{_fmt_ns(r.get('passthrough_median_ns'))} | " if mm else "")
                + f"{_fmt_rate(r.get('throughput_per_s'))} | {'–' if hr is None else f'{hr:.1%}'} | "
                f"{_fmt_bytes(r.get('peak_cached_bytes'))} | {_fmt_x(r.get('speedup'))} | "
                f"{_fmt_x(r.get('median_ratio'))} | {r.get('speedup_over') or ''} |")
    g = out["results"].get("growth")
    if g:
        npts = sorted({n for r in g.values() for n in r["points"]}, key=int)
        lines += ["", "### Pool-hit cost against cached blocks (median ns/pair)", "",
                  "Rows marked *interleaved*: one pool per block count, all live at once, "
                  "taking turns batch by batch; the others measure one count after another.",
                  "",
                  "| backend | " + " | ".join(f"{int(n):,}" for n in npts) + " | max/min |",
                  "|---|" + "---:|" * (len(npts) + 1)]
        for name, r in g.items():
            cells = [_fmt_ns(r["points"].get(n, r["points"].get(str(n), {})).get("median_ns"))
                     for n in npts]
            fl = r.get("flatness")
            how = "interleaved" if r.get("interleaved") else "one after another"
            lines.append(f"| {name} ({how}) | " + " | ".join(cells)
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


def no_plot_reason() -> str | None:
    """Why ``--out`` gets no PNG plot, as one line, or None when matplotlib can be
    imported (it is in the ``bench`` extra, which ``make demo`` and ``make bench``
    install)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return ("no PNG plots: matplotlib is not installed "
                "(pip install 'offload-shim[bench]' or pip install matplotlib)")
    return None


def say_no_plot(prefix: str = "bench", file=None) -> None:
    """Print :func:`no_plot_reason` (``prefix: no PNG plots: ...``) on stderr when
    there is one."""
    why = no_plot_reason()
    if why:
        print(f"{prefix}: {why}", file=sys.stderr if file is None else file)


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
                      "tab:orange" if "nextgen" in n else
                      "tab:blue" if out["rows"].get(n, {}).get("group") == "floor" else
                      "tab:gray" for n in names]
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


def replace_marked_block(doc_path, begin: str, end: str, body: str) -> None:
    """Replace the text between the lines ``begin`` and ``end`` of ``doc_path``
    with ``body`` (the block is appended when the marks are absent)."""
    p = Path(doc_path)
    text = p.read_text(encoding="utf-8") if p.exists() else "# Benchmarks\n"
    block = f"{begin}\n{body}{end}"
    if begin in text and end in text:
        a = text.index(begin)
        b = text.index(end) + len(end)
        text = text[:a] + block + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    p.write_text(text, encoding="utf-8")


def update_docs(out, doc_path) -> None:
    """Replace the text between :data:`BEGIN_MARK` and :data:`END_MARK` of
    ``doc_path`` with the latest table (appended when the marks are absent)."""
    replace_marked_block(doc_path, BEGIN_MARK, END_MARK, format_markdown(out))


def format_text(out) -> str:
    """What ``offload-shim bench`` prints: the Markdown table."""
    return format_markdown(out)

