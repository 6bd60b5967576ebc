"""The ``run`` workload of ``offload-shim bench``: what ``offload-shim run`` costs a
compiled program, against the same executable under the real libomptarget 16.

Small OpenMP programs of its own (C source below, built with ``clang-16 -O2
-fopenmp -fopenmp-targets=x86_64-pc-linux-gnu``) are run as whole processes, the two
runtimes in alternation (which one goes first flips every repetition):

* **libomptarget**: ``./prog N`` as built (``libomptarget.so.16`` and its default
  x86_64 nextgen plugin; LLVM 16's release notes: nextgen is the default);
* **offload-shim**: ``offload-shim run --plugin <x86_64 nextgen> ./prog N`` (the
  launcher, the embedded interpreter and the Python runtime, all included).

Rows (each program takes its repetition count ``N`` as ``argv[1]``):

==============  ==================================================================
``startup``     no target region at all (the image is still registered)
``data-1``      ``N`` x ``target map(tofrom: x)`` inside ``target data map(x)``
                (the mapping exists: lookup, reference counts, launch)
``maps-K``      ``N`` x ``target map(tofrom: a0, ..., aK-1)``, ``K`` = 1, 4, 16, 64
                scalars (each map allocates, copies to and from, frees)
``enter-exit``  ``N`` x ``target enter data map(to: b[0:64])`` +
                ``target exit data map(from: b[0:64])`` (512 bytes)
``update``      ``N`` x ``target update to(b[0:64])`` + ``target update from(b[0:64])``
                inside ``target data``
``copy-64M``    20 x ``target map(tofrom: a[0:8M])`` of doubles (64 MiB each way)
==============  ==================================================================

Per-construct cost is the **slope**: every slope row runs at two counts ``N1 < N2``
and the cost per iteration is ``(T(N2) - T(N1)) / (N2 - N1)`` of the medians, so
start-up and teardown cancel; the real libomptarget, some ten times cheaper per
construct, runs 8 times as many iterations between the two counts (4 for ``maps-64``),
so its slope too stands well above the noise of starting a process.  ``startup`` and ``copy-64M`` are whole-process times.
Figures per runtime: wall time (``time.perf_counter_ns`` around spawn .. wait) and
CPU time (user + sys of the process and its children, ``RUSAGE_CHILDREN`` deltas;
steadier than wall time on a shared machine), medians over the repetitions, and the
spread as the 25th..75th percentile of the per-repetition figures (a slope per
repetition: ``T_i(N2) - T_i(N1)``).  Each program also times its own loop
(``clock_gettime``) and prints it; that in-program figure is reported as a
cross-check.  Each row checks that both runtimes print the same result line.

Targets (issue "offload-shim run at most 10x libomptarget's cost per target
region"): start-up <= 0.15 s; ``data-1`` and ``maps-16`` per-region ratio <= 10;
``copy-64M`` ratio <= 1.1.  Checked and printed, never asserted in tests.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .config import NEXTGEN16

NAME = "run"
RUNTIMES = ("libomptarget", "offload-shim")

CLANG_FLAGS = ["-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu",
               "-Xoffload-linker", "-Bsymbolic", "-Wl,-rpath,/usr/lib/llvm-16/lib"]

_PRELUDE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static long long osh_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}
static long osh_count(int argc, char **argv, long dflt) {
  return argc > 1 ? atol(argv[1]) : dflt;
}
/* The loop runs in chunks of at most CHUNK iterations, each a call of a function that
 * is not inlined: the LLVM 16 x86_64 plugins' kernel launch (ffi_call) leaves the
 * caller's stack pointer lower each time, and a single loop of some 75,000 launches
 * overflows an 8 MiB stack, under the real libomptarget and offload-shim alike. */
#define CHUNK 10000
#define OSH_CHUNKED(n, work)                                                     \
  for (long done_ = 0; done_ < (n); done_ += CHUNK)                              \
    work((n) - done_ < CHUNK ? (n) - done_ : CHUNK)
#define OSH_WORK static __attribute__((noinline)) void
"""


def _maps_source(k: int) -> str:
    decl = "".join(f"static long a{i} = {i};\n" for i in range(k))
    maps = ", ".join(f"a{i}" for i in range(k))
    body = " ".join(f"a{i} += {i + 1};" for i in range(k))
    total = " + ".join(f"a{i}" for i in range(k))
    return _PRELUDE + decl + f"""
OSH_WORK work(long k) {{
  for (long it = 0; it < k; it++) {{
#pragma omp target map(tofrom: {maps})
    {{ {body} }}
  }}
}}
int main(int argc, char **argv) {{
  long n = osh_count(argc, argv, 1000);
  long long t0 = osh_now();
  OSH_CHUNKED(n, work);
  long long t1 = osh_now();
  printf("%ld\\n", {total});
  printf("loop_ns %lld\\n", t1 - t0);
  return 0;
}}
"""


_SOURCES = {
    "startup": _PRELUDE + r"""
/* no target region; a declare-target variable gives the device image an entry, as
 * any program that offloads has (an image without entries is a corner of its own) */
#pragma omp declare target
int osh_unused = 0;
#pragma omp end declare target
int main(int argc, char **argv) {
  (void)argc; (void)argv;
  printf("0\n");
  printf("loop_ns 0\n");
  return 0;
}
""",
    "data-1": _PRELUDE + r"""
static long x = 0;
OSH_WORK work(long k) {
  for (long it = 0; it < k; it++) {
#pragma omp target map(tofrom: x)
    { x += 1; }
  }
}
int main(int argc, char **argv) {
  long n = osh_count(argc, argv, 1000);
  long long t0 = 0, t1 = 0;
#pragma omp target data map(tofrom: x)
  {
    t0 = osh_now();
    OSH_CHUNKED(n, work);
    t1 = osh_now();
  }
  printf("%ld\n", x);
  printf("loop_ns %lld\n", t1 - t0);
  return 0;
}
""",
    "enter-exit": _PRELUDE + r"""
static double b[64];
OSH_WORK work(long k) {
  for (long it = 0; it < k; it++) {
#pragma omp target enter data map(to: b[0:64])
    b[it % 64] += 1.0;     /* host change, overwritten by the exit copy */
#pragma omp target exit data map(from: b[0:64])
  }
}
int main(int argc, char **argv) {
  long n = osh_count(argc, argv, 1000);
  for (int i = 0; i < 64; i++) b[i] = i;
#pragma omp target map(tofrom: b[0:64])      /* once: the image has a kernel entry */
  { b[0] += 0.0; }
  long long t0 = osh_now();
  OSH_CHUNKED(n, work);
  long long t1 = osh_now();
  double s = 0;
  for (int i = 0; i < 64; i++) s += b[i];
  printf("%.1f\n", s);
  printf("loop_ns %lld\n", t1 - t0);
  return 0;
}
""",
    "update": _PRELUDE + r"""
static double b[64];
OSH_WORK work(long k) {
  for (long it = 0; it < k; it++) {
    b[it % 64] += 1.0;
#pragma omp target update to(b[0:64])
#pragma omp target update from(b[0:64])
  }
}
int main(int argc, char **argv) {
  long n = osh_count(argc, argv, 1000);
  for (int i = 0; i < 64; i++) b[i] = i;
  long long t0 = 0, t1 = 0;
#pragma omp target data map(tofrom: b[0:64])
  {
#pragma omp target                          /* once: the image has a kernel entry */
    { b[0] += 0.0; }
    t0 = osh_now();
    OSH_CHUNKED(n, work);
    t1 = osh_now();
  }
  double s = 0;
  for (int i = 0; i < 64; i++) s += b[i];
  printf("%.1f\n", s);
  printf("loop_ns %lld\n", t1 - t0);
  return 0;
}
""",
    "copy-64M": _PRELUDE + r"""
int main(int argc, char **argv) {
  long n = osh_count(argc, argv, 20);
  long m = 8L * 1024 * 1024;             /* doubles: 64 MiB */
  double *a = malloc(m * sizeof(double));
  if (!a) return 1;
  for (long i = 0; i < m; i++) a[i] = (double)(i & 1023);
  long long t0 = osh_now();
  for (long it = 0; it < n; it++) {
#pragma omp target map(tofrom: a[0:m])
    { a[it] += 1.0; a[m - 1 - it] += 2.0; }
  }
  long long t1 = osh_now();
  double s = 0;
  for (long i = 0; i < m; i += 4096) s += a[i];
  printf("%.1f %.1f\n", s, a[m - 1]);
  printf("loop_ns %lld\n", t1 - t0);
  free(a);
  return 0;
}
""",
}
for _k in (1, 4, 16, 64):
    _SOURCES[f"maps-{_k}"] = _maps_source(_k)


@dataclass(frozen=True)
class Row:
    """One program: ``counts`` = (N1, N2) for a slope row, (N,) for a whole-process
    row, for ``offload-shim run``; the real libomptarget runs ``N1 + (N2 - N1) *
    lomp_factor`` at the second count, so that its far smaller slope still stands well
    above the noise of a process start (the slope does not depend on the counts);
    ``unit``: what one iteration is."""
    name: str
    counts: tuple
    unit: str
    what: str
    lomp_factor: int = 1

    @property
    def slope(self) -> bool:
        return len(self.counts) == 2

    def count(self, runtime: str, j: int) -> int:
        """The count of the ``j``-th run of ``runtime``."""
        n = self.counts[j]
        if runtime == "libomptarget" and j == 1:
            n = self.counts[0] + (n - self.counts[0]) * self.lomp_factor
        return n


def rows_for(profile: str) -> list[Row]:
    """The rows with the repetition counts of ``profile`` (``tiny``: a few
    iterations, only to check that everything runs)."""
    s = {"tiny": 0.002, "quick": 0.4, "full": 1.0}[profile]
    f = 1 if profile == "tiny" else 8

    def n(x):
        return max(2, int(x * s))
    return [
        Row("startup", (0,), "process", "no target region"),
        Row("data-1", (n(1000), n(41000)), "region",
            "1 scalar map, inside `target data` (mapping present)", f),
        Row("maps-1", (n(1000), n(31000)), "region", "1 scalar `map(tofrom:)`", f),
        Row("maps-4", (n(1000), n(21000)), "region", "4 scalar maps", f),
        Row("maps-16", (n(500), n(10500)), "region", "16 scalar maps", f),
        Row("maps-64", (n(200), n(4200)), "region", "64 scalar maps", f // 2 or 1),
        Row("enter-exit", (n(1000), n(31000)), "pair",
            "`enter data map(to:)` + `exit data map(from:)`, 512 B", f),
        Row("update", (n(1000), n(31000)), "pair",
            "`update to` + `update from`, 512 B, inside `target data`", f),
        Row("copy-64M", (20 if profile != "tiny" else 2,), "process",
            "20 regions mapping 64 MiB tofrom (copy bound)"),
    ]


#: (row, figure, limit, meaning) checked by :func:`check_targets`
TARGETS = (
    ("startup", "wall_s", 0.15, "start-up of a program with no region <= 0.15 s"),
    ("data-1", "ratio", 10.0, "one region, one scalar map inside target data <= 10x"),
    ("maps-16", "ratio", 10.0, "one region with 16 scalar maps <= 10x"),
    ("copy-64M", "ratio", 1.1, "20 regions mapping 64 MiB tofrom <= 1.1x"),
)

REPEATS = {"tiny": 1, "quick": 5, "full": 11}


class Skip(Exception):
    """The workload cannot run here (no clang-16, no nextgen plugin...)."""


# -- building --------------------------------------------------------------------

def clang() -> str:
    """Path of ``clang-16``; Skip when absent."""
    cc = shutil.which("clang-16")
    if not cc:
        raise Skip("clang-16 not found (apt-get install clang-16 libomp-16-dev)")
    return cc


def build(names, directory) -> dict[str, Path]:
    """Compile the programs ``names`` into ``directory``; name -> executable.
    Raises Skip when clang-16 is missing or a build fails."""
    cc = clang()
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in names:
        src = d / f"{name}.c"
        exe = d / name
        src.write_text(_SOURCES[name], encoding="utf-8")
        proc = subprocess.run([cc, *CLANG_FLAGS, str(src), "-o", str(exe)],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise Skip(f"clang-16 failed on {name}: {proc.stderr.strip()[-300:]}")
        out[name] = exe
    return out


def source(name: str) -> str:
    """The C source of program ``name``."""
    return _SOURCES[name]


# -- running -----------------------------------------------------------------------

def shim_command() -> list[str]:
    """How ``offload-shim`` is started: the console script next to this
    interpreter, else ``python -m offload_shim``."""
    exe = Path(sys.executable).with_name("offload-shim")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "offload_shim"]


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LIBOMPTARGET_", "OFFLOAD_SHIM_", "OMP_TARGET"))
           and k not in ("LD_PRELOAD", "PYTHONPROFILEIMPORTTIME")}
    return env


def run_once(cmd: list[str], env: dict, timeout: float = 600.0) -> dict:
    """Run ``cmd`` to completion: ``wall_s``, ``cpu_s`` (user + sys of it and its
    children), ``result`` (first stdout line), ``loop_s`` (the program's own loop
    time), ``rc``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter_ns()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    wall = (time.perf_counter_ns() - t0) / 1e9
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = proc.stdout.splitlines()
    loop = None
    for ln in lines:
        if ln.startswith("loop_ns "):
            loop = int(ln.split()[1]) / 1e9
    return {"wall_s": wall, "cpu_s": cpu, "rc": proc.returncode,
            "result": lines[0] if lines else "", "loop_s": loop,
            "stderr": proc.stderr[-300:] if proc.returncode else ""}


def _pct(values, q):
    v = sorted(values)
    if not v:
        return None
    k = (len(v) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def _spread(values):
    return [_pct(values, 0.25), _pct(values, 0.75)]


def measure(exes: dict, rows: list[Row], repeats: int, plugin: str, progress=None,
            shim: list[str] | None = None) -> dict:
    """Run every (row, count, runtime) ``repeats`` times, interleaved: each
    repetition visits every row and count, both runtimes back to back, the order
    of the runtimes flipped every time.  Returns row -> runtime -> [runs at the first
    count, runs at the second] (lists of :func:`run_once` dicts; counts:
    :meth:`Row.count`)."""
    env = _clean_env()
    shim = (shim or shim_command()) + ["run", "--plugin", str(plugin)]
    samples: dict = {r.name: {rt: [[] for _ in r.counts] for rt in RUNTIMES} for r in rows}
    flip = False
    total = repeats * sum(len(r.counts) for r in rows)
    done = 0
    for rep in range(repeats):
        for r in rows:
            for j in range(len(r.counts)):
                order = RUNTIMES[::-1] if flip else RUNTIMES
                flip = not flip
                for rt in order:
                    prog = [str(exes[r.name]), str(r.count(rt, j))]
                    cmd = prog if rt == "libomptarget" else shim + prog
                    samples[r.name][rt][j].append(run_once(cmd, env))
                done += 1
                if progress:
                    progress(f"run: rep {rep + 1}/{repeats} {r.name} N={r.counts[j]}", done,
                             total)
    return samples


def _med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(rows: list[Row], samples: dict) -> dict:
    """The figures of every row from the raw samples (see the module doc)."""
    out = {}
    for r in rows:
        per = samples[r.name]
        fig: dict = {"unit": r.unit, "what": r.what, "counts": list(r.counts),
                     "lomp_counts": [r.count("libomptarget", j) for j in range(len(r.counts))]}
        errors = []
        for j in range(len(r.counts)):
            for rt in RUNTIMES:
                for x in per[rt][j]:
                    if x["rc"] != 0:
                        errors.append(f"{rt} N={r.count(rt, j)}: exit {x['rc']} "
                                      f"{x['stderr']}".strip())
        # the same count under both runtimes prints the same result (the first count
        # is the same for both; the second only for lomp_factor 1)
        mismatch = []
        for j in range(len(r.counts)):
            if r.count("libomptarget", j) != r.count("offload-shim", j):
                continue
            by = {rt: sorted({x["result"] for x in per[rt][j]}) for rt in RUNTIMES}
            if by["libomptarget"] != by["offload-shim"]:
                mismatch.append((r.counts[j], by))
        fig["same_result"] = not mismatch
        for n, by in mismatch:
            errors.append(f"results differ at N={n}: "
                          + "; ".join(f"{rt}={by[rt]}" for rt in RUNTIMES))
        fig["errors"] = errors
        for rt in RUNTIMES:
            f = {}
            if r.slope:
                d = (r.count(rt, 1) - r.count(rt, 0)) / 1e6
                a, b = per[rt]
                for key in ("wall_s", "cpu_s"):
                    per_rep = [(y[key] - x[key]) / d for x, y in zip(a, b)]
                    slope = (_med([y[key] for y in b]) - _med([x[key] for x in a])) / d
                    f[key.replace("_s", "_us")] = slope
                    f[key.replace("_s", "_us") + "_spread"] = _spread(per_rep)
                loops = [y["loop_s"] / r.count(rt, 1) * 1e6 for y in b
                         if y["loop_s"] is not None]
                f["loop_us"] = _med(loops)
                f["startup_wall_s"] = _med([x["wall_s"] for x in a])
            else:
                runs = per[rt][0]
                for key in ("wall_s", "cpu_s"):
                    f[key] = _med([x[key] for x in runs])
                    f[key + "_spread"] = _spread([x[key] for x in runs])
                f["loop_s"] = _med([x["loop_s"] for x in runs])
            fig[rt] = f
        key = "wall_us" if r.slope else "wall_s"
        ckey = "cpu_us" if r.slope else "cpu_s"
        lo, sh = fig["libomptarget"], fig["offload-shim"]
        # a slope at or below zero is noise, not a cost: no ratio then
        fig["ratio"] = _ratio(sh.get(key), lo.get(key))
        fig["cpu_ratio"] = _ratio(sh.get(ckey), lo.get(ckey))
        if r.slope:
            dl = r.count("libomptarget", 1) - r.count("libomptarget", 0)
            ds = r.count("offload-shim", 1) - r.count("offload-shim", 0)
            (la, lb), (sa, sb) = per["libomptarget"], per["offload-shim"]
            ratios = []
            for x, y, u, v in zip(la, lb, sa, sb):
                lw = (y["wall_s"] - x["wall_s"]) / dl
                sw = (v["wall_s"] - u["wall_s"]) / ds
                if lw > 0 and sw > 0:
                    ratios.append(sw / lw)
            fig["ratio_spread"] = _spread(ratios)
            lol, shl = lo.get("loop_us"), sh.get("loop_us")
            fig["loop_ratio"] = (shl / lol) if lol and shl else None
        else:
            ratios = [v["wall_s"] / x["wall_s"]
                      for x, v in zip(per["libomptarget"][0], per["offload-shim"][0])
                      if x["wall_s"] > 0]
            fig["ratio_spread"] = _spread(ratios)
        out[r.name] = fig
    return out


def _ratio(a, b):
    return a / b if a is not None and b is not None and a > 0 and b > 0 else None


def check_targets(rows: dict) -> list[dict]:
    """PASS/MISS/N/A per entry of :data:`TARGETS` (the figure, its limit)."""
    res = []
    for name, figure, limit, meaning in TARGETS:
        fig = rows.get(name)
        val = None
        if fig is not None:
            val = fig["offload-shim"].get("wall_s") if figure == "wall_s" else fig.get(figure)
        status = "N/A" if val is None else ("PASS" if val <= limit else "MISS")
        if fig is not None and fig.get("errors"):
            status = "MISS" if status != "N/A" else status
        res.append({"row": name, "figure": figure, "limit": limit, "value": val,
                    "status": status, "target": meaning})
    return res


def run(profile: str = "quick", *, only=None, repeats: int | None = None,
        plugin=NEXTGEN16, workdir=None, progress=None, shim: list[str] | None = None,
        scale: float = 1.0) -> dict:
    """Build the programs, run them under both runtimes and return the JSON-ready
    result: ``meta``, ``rows`` (row -> figures), ``targets``, ``skipped`` (a reason
    when the workload cannot run here).  ``only``: row names to keep; ``shim``: the
    command that starts ``offload-shim`` (default :func:`shim_command`; another
    install compares two versions); ``scale``: multiplies the slope rows' counts."""
    from .timing import machine_info
    t_start = time.monotonic()
    rows = rows_for(profile)
    if scale != 1.0:
        rows = [Row(r.name, tuple(max(2, int(n * scale)) for n in r.counts), r.unit, r.what,
                    r.lomp_factor) if r.slope else r for r in rows]
    if only:
        rows = [r for r in rows if any(o in r.name for o in only)]
    reps = repeats or REPEATS[profile]
    out = {"meta": {"machine": machine_info(), "profile": profile, "repeats": reps,
                    "plugin": str(plugin), "shim_command": shim or shim_command(),
                    "clang_flags": CLANG_FLAGS,
                    "loadavg": _loadavg()},
           "rows": {}, "targets": [], "skipped": None}
    try:
        if not Path(plugin).exists():
            raise Skip(f"{plugin} not found (apt-get install libomp5-16)")
        tmp = tempfile.TemporaryDirectory(prefix="osh-bench-run-")
        try:
            exes = build([r.name for r in rows], workdir or tmp.name)
            samples = measure(exes, rows, reps, plugin, progress, shim)
        finally:
            tmp.cleanup()
    except Skip as exc:
        out["skipped"] = str(exc)
        return out
    out["rows"] = summarise(rows, samples)
    out["targets"] = check_targets(out["rows"])
    out["meta"]["loadavg_after"] = _loadavg()
    out["meta"]["seconds"] = round(time.monotonic() - t_start, 1)
    return out


def _loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# -- reporting -----------------------------------------------------------------------

def _f(x, fmt="{:.2f}"):
    return "-" if x is None else fmt.format(x)


def _sp(s, fmt="{:.2f}"):
    return "-" if not s or s[0] is None else f"{fmt.format(s[0])}..{fmt.format(s[1])}"


def format_markdown(out) -> str:
    """The tables of the ``run`` workload (Markdown)."""
    m = out["meta"]
    lines = [f"Machine: {m['machine']['cpu']}, {m['machine']['cores']} cores, Python "
             f"{m['machine']['python']}, {m['machine']['date']}; load average "
             f"{m.get('loadavg')} before, {m.get('loadavg_after')} after; profile "
             f"`{m['profile']}`, {m['repeats']} repetitions, plugin `{m['plugin']}`.", ""]
    if out.get("skipped"):
        return "\n".join(lines + [f"Skipped: {out['skipped']}", ""])
    rows = out["rows"]
    lines += ["Per construct (slope between the two counts N1, N2 -- offload-shim's; the real "
              "libomptarget runs more iterations at N2, in parentheses; medians; µs):", "",
              "| row | what | N1, N2 | libomptarget µs | offload-shim µs | ratio (wall) "
              "| ratio p25..p75 | CPU µs lomp / shim | ratio (CPU) | in-program µs "
              "lomp / shim |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for name, f in rows.items():
        if len(f["counts"]) != 2:
            continue
        lo, sh = f["libomptarget"], f["offload-shim"]
        lines.append(
            f"| `{name}` | {f['what']} | {f['counts'][0]}, {f['counts'][1]} "
            f"({f['lomp_counts'][1]}) | "
            f"{_f(lo['wall_us'])} | {_f(sh['wall_us'])} | **{_f(f['ratio'], '{:.1f}')}x** | "
            f"{_sp(f['ratio_spread'], '{:.1f}')} | {_f(lo['cpu_us'])} / {_f(sh['cpu_us'])} | "
            f"{_f(f['cpu_ratio'], '{:.1f}')}x | {_f(lo['loop_us'])} / {_f(sh['loop_us'])} |")
    lines += ["", "Whole process (medians; seconds):", "",
              "| row | what | libomptarget s | offload-shim s | p25..p75 lomp / shim | ratio "
              "| CPU s lomp / shim |",
              "|---|---|---|---|---|---|---|"]
    for name, f in rows.items():
        if len(f["counts"]) == 2:
            continue
        lo, sh = f["libomptarget"], f["offload-shim"]
        lines.append(
            f"| `{name}` | {f['what']} | {_f(lo['wall_s'], '{:.3f}')} | "
            f"{_f(sh['wall_s'], '{:.3f}')} | {_sp(lo['wall_s_spread'], '{:.3f}')} / "
            f"{_sp(sh['wall_s_spread'], '{:.3f}')} | **{_f(f['ratio'], '{:.2f}')}x** | "
            f"{_f(lo['cpu_s'], '{:.3f}')} / {_f(sh['cpu_s'], '{:.3f}')} |")
    lines += ["", "Targets:", "", "| target | value | status |", "|---|---|---|"]
    for t in out["targets"]:
        unit = " s" if t["figure"] == "wall_s" else "x"
        lines.append(f"| {t['target']} | {_f(t['value'], '{:.3f}')}{unit} | {t['status']} |")
    errs = [(n, e) for n, f in rows.items() for e in f.get("errors", [])]
    if errs:
        lines += ["", "Errors:", ""] + [f"* `{n}`: {e}" for n, e in errs]
    return "\n".join(lines) + "\n"


def format_text(out) -> str:
    """What ``offload-shim bench --workloads run`` prints."""
    return "## run overhead (offload-shim run vs libomptarget 16)\n\n" + format_markdown(out)


BEGIN_MARK = "<!-- bench-run:begin (written by benchmarks/run_overhead.py) -->"
END_MARK = "<!-- bench-run:end -->"


def update_docs(out, doc_path) -> None:
    """Replace the block between :data:`BEGIN_MARK` and :data:`END_MARK` of
    ``doc_path`` with the latest tables (appended when the marks are absent)."""
    from .report import replace_marked_block
    replace_marked_block(doc_path, BEGIN_MARK, END_MARK, format_markdown(out))


def plot(out, directory) -> list:
    """``run-overhead.png``: per row, the offload-shim / libomptarget ratio (wall,
    with the p25..p75 spread, and CPU) on a log axis with the targets drawn; and
    the per-construct µs of both runtimes.  Returns the paths written ([] without
    matplotlib or rows)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    rows = out.get("rows") or {}
    if not rows:
        return []
    names = list(rows)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    xs = range(len(names))
    ratio = [rows[n]["ratio"] or 0 for n in names]
    cpu = [rows[n]["cpu_ratio"] or 0 for n in names]
    lo = [max(0, r - (rows[n]["ratio_spread"][0] or r)) for n, r in zip(names, ratio)]
    hi = [max(0, (rows[n]["ratio_spread"][1] or r) - r) for n, r in zip(names, ratio)]
    ax1.bar([x - 0.2 for x in xs], ratio, 0.4, yerr=[lo, hi], label="wall (p25..p75)",
            color="#4878a8")
    ax1.bar([x + 0.2 for x in xs], cpu, 0.4, label="CPU", color="#a8c0d8")
    limits = {t[0]: t[2] for t in TARGETS if t[1] == "ratio"}
    for i, n in enumerate(names):
        if n in limits:
            ax1.hlines(limits[n], i - 0.45, i + 0.45, colors="#c04040", linestyles="--")
    ax1.axhline(1.0, color="grey", lw=0.8)
    ax1.set_yscale("log")
    ax1.set_xticks(list(xs), names, rotation=30, ha="right")
    ax1.set_ylabel("offload-shim / libomptarget")
    ax1.set_title("ratio per row (red dashes: targets)")
    ax1.legend(fontsize=8)
    slope = [n for n in names if len(rows[n]["counts"]) == 2]
    xs2 = range(len(slope))
    ax2.bar([x - 0.2 for x in xs2], [rows[n]["libomptarget"]["wall_us"] or 0 for n in slope],
            0.4, label="libomptarget 16", color="#6a9f58")
    ax2.bar([x + 0.2 for x in xs2], [rows[n]["offload-shim"]["wall_us"] or 0 for n in slope],
            0.4, label="offload-shim run", color="#d08040")
    ax2.set_yscale("log")
    ax2.set_xticks(list(xs2), slope, rotation=30, ha="right")
    ax2.set_ylabel("µs per construct (wall, slope)")
    ax2.set_title("cost per region / pair")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / "run-overhead.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [str(path)]


def _progress_printer(enabled: bool):
    if not enabled:
        return None
    tty = sys.stderr.isatty()

    def show(label, done, total):
        msg = f"[{done}/{total}] {label}"
        if tty:
            sys.stderr.write("\r" + msg[:100].ljust(100))
            if done == total:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(msg + "\n")
        sys.stderr.flush()
    return show


def main_from_bench(args) -> int:
    """``offload-shim bench --workloads run`` (``args`` of the bench command line:
    ``profile``, ``json``, ``out``, ``no_progress``): runs the workload, prints the
    tables (or the JSON with ``--json``), writes ``run-overhead.json``, ``.md`` and
    the plot into ``--out`` when given.  Exit status 0 (also when skipped: the
    reason is printed)."""
    import json
    out = run(args.profile,
              progress=_progress_printer(not getattr(args, "no_progress", False)))
    if getattr(args, "out", None):
        paths = write_outputs(out, args.out)
        if not paths["plots"] and not out.get("skipped"):
            from .report import say_no_plot
            say_no_plot()
    if getattr(args, "json", False):
        print(json.dumps(out, indent=1, default=str))
    else:
        print(format_text(out))
    return 0


def write_outputs(out, directory) -> dict:
    """``run-overhead.json``, ``run-overhead.md`` and ``run-overhead.png`` in
    ``directory`` (created); returns their paths."""
    import json
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "run-overhead.json").write_text(json.dumps(out, indent=1, default=str))
    (d / "run-overhead.md").write_text(format_markdown(out))
    return {"json": str(d / "run-overhead.json"), "markdown": str(d / "run-overhead.md"),
            "plots": plot(out, d)}


__all__ = ["BEGIN_MARK", "END_MARK", "RUNTIMES", "Row", "Skip", "TARGETS", "build",
           "check_targets", "format_markdown", "format_text", "measure", "plot",
           "main_from_bench", "rows_for", "run", "run_once", "source", "summarise",
           "update_docs", "write_outputs"]
