"""The ``lifecycle`` workload of ``offload-shim bench``: what loading and unloading an
offload library over and over costs under ``offload-shim run``, against the same
programs under the real libomptarget 16, measured side by side in one run.

Two small programs of its own (C source below; the library and the overlap program
built with ``clang-16 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu``, the host with
plain ``clang-16``), each run as a whole process under both runtimes, the two back to
back and their order flipped every time:

* **libomptarget**: the program as built (``libomptarget.so.16`` and its default x86_64
  nextgen plugin), ``OMP_TARGET_OFFLOAD=mandatory``;
* **offload-shim**: ``offload-shim run --plugin <x86_64 nextgen> PROGRAM``, the same.

``host LIB N W``
    ``N`` cycles of ``dlopen(LIB, RTLD_NOW | RTLD_LOCAL)`` (its constructor registers the
    image: ``__tgt_register_lib``), one call of a function with one target region
    (``map(from:)`` of two scalars), ``dlclose`` (``__tgt_unregister_lib``).  After
    ``W`` warm-up cycles the host reads its resident set (``/proc/self/statm``, bytes)
    and counts its memory mappings (lines of ``/proc/self/maps``), then starts
    ``CLOCK_MONOTONIC`` and ``CLOCK_PROCESS_CPUTIME_ID``; after the last cycle it stops
    them and reads both again.  Per cycle: RSS growth (KiB), wall and CPU time (µs,
    every thread of the process: the embedded Python runtime included), memory
    mappings added.  Start-up and exit are outside the clocks.
``overlap M S``
    two OpenMP host threads, each running one untimed region (the device's and
    image's set-up) and, after a barrier, ``M`` target regions whose kernel reads
    ``CLOCK_MONOTONIC`` at entry, spins ``S`` ns and reads it again at exit (the
    timestamps come back through ``map(from:)``).  The **overlap share** is the time
    during which both threads are inside a kernel over the time during which at least
    one is (:func:`overlap_share`): close to 1 when launches from two threads run
    concurrently (libomptarget 16), 0 when they are serialised.

Each figure is given per runtime (median over the repetitions and the 25th..75th
percentile) and as the ratio offload-shim / libomptarget of the medians, with the
spread of the per-repetition ratios (25th..75th percentile).  Each run must offload
every region (the programs print how many ran on a device); one that does not, or
exits non-zero, is reported under the row's errors.  libomptarget 16's nextgen plugin
leaves a ``/tmp/tmpfile_*`` copy of every image it loads (``N`` per host run): those of
the reference runs are removed once, after the last run
(:class:`~offload_shim.safety.children.ChildScope`), so that no removal by the
harness falls between runs (on a file system without a journal, ext4 skips inodes freed
in the last 30 s when it allocates one, and a removal of hundreds of files slows the
file creations of the runs after it).  ``offload-shim run`` removes its own copy right
after each load; that cost is its own and is measured.

Targets (issue 25): RSS growth per cycle <= 1.5x libomptarget 16's, cycle cost (wall
and CPU) <= 2x.  Checked and printed, never asserted in tests.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

from .config import NEXTGEN16
from .run_overhead import (RUNTIMES, Skip, _clean_env, _loadavg, _med, _progress_printer,
                           _spread, clang, shim_command)

NAME = "lifecycle"

LIB_FLAGS = ["-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-shared", "-fPIC",
             "-Xoffload-linker", "-Bsymbolic", "-Wl,-Bsymbolic",
             "-Wl,-rpath,/usr/lib/llvm-16/lib"]
PROG_FLAGS = ["-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu",
              "-Xoffload-linker", "-Bsymbolic", "-Wl,-rpath,/usr/lib/llvm-16/lib"]
HOST_FLAGS = ["-O2"]

LIB_SOURCE = r"""
#include <omp.h>
/* 1: the region ran on a device, 0: on the host, -1: wrong result */
int osh_where(int x) {
  int dev = 0, y = 0;
#pragma omp target map(from : dev, y)
  { dev = !omp_is_initial_device(); y = 2 * x; }
  return y == 2 * x ? dev : -1;
}
"""

HOST_SOURCE = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static long long clock_ns(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}
static long long resident_bytes(void) {          /* /proc/self/statm: pages */
  long size = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%ld %ld", &size, &resident) != 2)
    resident = -1;
  if (f)
    fclose(f);
  return resident < 0 ? -1 : (long long)resident * sysconf(_SC_PAGESIZE);
}
static long mappings(void) {                      /* lines of /proc/self/maps */
  char buf[65536];
  long lines = 0;
  size_t n;
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f)
    return -1;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < n; i++)
      lines += buf[i] == '\n';
  fclose(f);
  return lines;
}
int main(int argc, char **argv) {
  if (argc < 4)
    return 2;
  long n = atol(argv[2]), warm = atol(argv[3]), on_device = 0, maps0 = 0;
  long long rss0 = 0, wall0 = 0, cpu0 = 0;
  for (long i = 0; i < n; i++) {
    if (i == warm) {
      rss0 = resident_bytes();
      maps0 = mappings();
      wall0 = clock_ns(CLOCK_MONOTONIC);
      cpu0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      fprintf(stderr, "dlopen: %s\n", dlerror());
      return 2;
    }
    int (*where)(int) = (int (*)(int))dlsym(h, "osh_where");
    if (!where) {
      fprintf(stderr, "dlsym: %s\n", dlerror());
      return 2;
    }
    on_device += where((int)i) == 1;
    if (dlclose(h) != 0) {
      fprintf(stderr, "dlclose: %s\n", dlerror());
      return 2;
    }
  }
  long long wall1 = clock_ns(CLOCK_MONOTONIC), cpu1 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  long long rss1 = resident_bytes();
  long maps1 = mappings();
  printf("on_device %ld\n", on_device);
  printf("cycles %ld\n", n);
  printf("measured %ld\n", n - warm);
  printf("wall_ns %lld\n", wall1 - wall0);
  printf("cpu_ns %lld\n", cpu1 - cpu0);
  printf("rss_bytes %lld %lld\n", rss0, rss1);
  printf("maps %ld %ld\n", maps0, maps1);
  return 0;
}
"""

OVERLAP_SOURCE = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#pragma omp declare target
static long long osh_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}
#pragma omp end declare target
int main(int argc, char **argv) {
  long m = argc > 1 ? atol(argv[1]) : 20, spin = argc > 2 ? atol(argv[2]) : 2000000;
  long long *t = calloc((size_t)(4 * m), sizeof *t);
  int on_device[2] = {0, 0}, threads = 0;
  if (!t)
    return 2;
#pragma omp parallel num_threads(2)
  {
    int me = omp_get_thread_num();
#pragma omp single
    threads = omp_get_num_threads();
    long long *mine = t + (long)me * 2 * m;
    int warm = 0;          /* first region of each thread: device and image set-up */
#pragma omp target map(from : warm)
    warm = 1;
#pragma omp barrier
    for (long k = 0; k < m; k++) {
      long long in = 0, out = 0;
      int dev = 0;
#pragma omp target map(from : in, out, dev) firstprivate(spin)
      {
        dev = !omp_is_initial_device();
        in = osh_now_ns();
        while (osh_now_ns() - in < spin)
          ;
        out = osh_now_ns();
      }
      mine[2 * k] = in;
      mine[2 * k + 1] = out;
      on_device[me] += dev;
    }
  }
  printf("threads %d\n", threads);
  printf("on_device %d\n", on_device[0] + on_device[1]);
  for (int th = 0; th < 2; th++) {
    printf("kernels%d", th);
    for (long k = 0; k < 2 * m; k++)
      printf(" %lld", t[th * 2 * m + k]);
    printf("\n");
  }
  free(t);
  return 0;
}
"""

#: per profile: host cycles and warm-up cycles, regions per thread of the overlap
#: program and the time each kernel spins (µs), repetitions
PROFILES = {
    "tiny": dict(cycles=12, warmup=4, regions=3, spin_us=500, repeats=1),
    "quick": dict(cycles=200, warmup=20, regions=40, spin_us=2000, repeats=3),
    "full": dict(cycles=300, warmup=30, regions=100, spin_us=2000, repeats=9),
}

#: (row, limit, meaning): offload-shim / libomptarget ratios checked by :func:`check_targets`
TARGETS = (
    ("rss_kib", 1.5, "RSS growth per dlopen/region/dlclose cycle <= 1.5x libomptarget 16"),
    ("wall_us", 2.0, "wall time per cycle <= 2x libomptarget 16"),
    ("cpu_us", 2.0, "CPU time per cycle <= 2x libomptarget 16"),
)

#: row -> (what, unit, value format)
ROWS = {
    "rss_kib": ("RSS growth per cycle", "KiB", "{:.2f}"),
    "wall_us": ("wall time per cycle", "µs", "{:.0f}"),
    "cpu_us": ("CPU time per cycle (every thread)", "µs", "{:.0f}"),
    "maps": ("memory mappings added per cycle (/proc/self/maps lines)", "", "{:.2f}"),
    "overlap": ("overlap share of two host threads' kernels", "", "{:.2f}"),
}


# -- building ------------------------------------------------------------------------

def build(directory) -> dict[str, Path]:
    """Compile ``lib.so``, ``host`` and ``overlap`` into ``directory``; name -> path.
    Raises Skip when clang-16 is missing or a build fails."""
    cc = clang()
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, src, flags, target in (("lib", LIB_SOURCE, LIB_FLAGS, "lib.so"),
                                     ("host", HOST_SOURCE, HOST_FLAGS, "host"),
                                     ("overlap", OVERLAP_SOURCE, PROG_FLAGS, "overlap")):
        (d / f"{name}.c").write_text(src, encoding="utf-8")
        cmd = [cc, *flags, str(d / f"{name}.c"), "-o", str(d / target)]
        if name == "host":
            cmd.append("-ldl")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise Skip(f"clang-16 failed on {name}: {proc.stderr.strip()[-300:]}")
        out[name] = d / target
    return out


# -- figures -------------------------------------------------------------------------

def overlap_share(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> float | None:
    """The time during which both threads are inside a kernel over the time during which
    at least one is: ``a`` and ``b`` are each thread's ``(enter, exit)`` timestamps (ns,
    one clock).  1.0 for kernels that always run together, 0.0 for kernels that never
    do; None when no kernel took any time.  Raises ValueError for an interval that ends
    before it begins."""
    events = []
    for who, intervals in enumerate((a, b)):
        for enter, leave in intervals:
            if leave < enter:
                raise ValueError(f"kernel interval ({enter}, {leave}) ends before it begins")
            events.append((enter, 1, who))
            events.append((leave, -1, who))
    events.sort(key=lambda e: (e[0], e[1]))      # at one instant, exits before entries
    inside = [0, 0]
    both = either = 0
    last = None
    for t, step, who in events:
        if last is not None and t > last:
            n = (inside[0] > 0) + (inside[1] > 0)
            if n == 2:
                both += t - last
            if n:
                either += t - last
        inside[who] += step
        last = t
    return both / either if either else None


def _fields(stdout: str) -> dict[str, list[int]]:
    out = {}
    for line in stdout.splitlines():
        parts = line.split()
        if parts:
            try:
                out[parts[0]] = [int(p) for p in parts[1:]]
            except ValueError:
                continue
    return out


def parse_host(stdout: str) -> dict:
    """The per-cycle figures of one ``host`` run (see the module doc): ``rss_kib``,
    ``wall_us``, ``cpu_us``, ``maps``, ``on_device``, ``cycles``.  Raises KeyError or
    ValueError for output that lacks them."""
    f = _fields(stdout)
    n = f["measured"][0]
    if n <= 0:
        raise ValueError("no measured cycle")
    return {"rss_kib": (f["rss_bytes"][1] - f["rss_bytes"][0]) / 1024 / n,
            "wall_us": f["wall_ns"][0] / 1e3 / n,
            "cpu_us": f["cpu_ns"][0] / 1e3 / n,
            "maps": (f["maps"][1] - f["maps"][0]) / n,
            "on_device": f["on_device"][0], "cycles": f["cycles"][0]}


def parse_overlap(stdout: str) -> dict:
    """``overlap`` (:func:`overlap_share`), ``threads``, ``on_device``, ``regions``
    of one ``overlap`` run.  Raises KeyError or ValueError for output that lacks
    them."""
    f = _fields(stdout)
    pairs = [list(zip(f[k][0::2], f[k][1::2])) for k in ("kernels0", "kernels1")]
    return {"overlap": overlap_share(*pairs), "threads": f["threads"][0],
            "on_device": f["on_device"][0], "regions": len(pairs[0]) + len(pairs[1])}


# -- running -------------------------------------------------------------------------

def run_program(cmd: list[str], env: dict, timeout: float = 600.0) -> dict:
    """Run ``cmd`` to completion: ``rc``, ``stdout``, the end of ``stderr`` when it
    failed, ``wall_s`` and ``cpu_s`` of the whole process (user + sys of it and its
    children)."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter_ns()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    wall = (time.perf_counter_ns() - t0) / 1e9
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"rc": proc.returncode, "stdout": proc.stdout, "wall_s": wall, "cpu_s": cpu,
            "stderr": proc.stderr[-300:] if proc.returncode else ""}


def measure(exes: dict, prof: dict, plugin, progress=None, shim=None) -> dict:
    """Run ``host`` and ``overlap`` under both runtimes ``prof["repeats"]`` times,
    interleaved (the order of the runtimes flipped every time).  Returns program ->
    runtime -> list of per-run dicts (:func:`run_program` plus the parsed figures, or
    ``error``)."""
    from ..safety.children import ChildScope
    shim = (shim or shim_command()) + ["run", "--plugin", str(plugin)]
    programs = {
        "host": [str(exes["host"]), str(exes["lib"]), str(prof["cycles"]),
                 str(prof["warmup"])],
        "overlap": [str(exes["overlap"]), str(prof["regions"]),
                    str(int(prof["spin_us"] * 1000))],
    }
    parsers = {"host": parse_host, "overlap": parse_overlap}
    samples: dict = {p: {rt: [] for rt in RUNTIMES} for p in programs}
    total = prof["repeats"] * len(programs)
    done = 0
    flip = False
    # the reference runs leave their image copies in /tmp: removed once, at the end
    with ChildScope(prefix="osh_bench_lifecycle_") as scope:
        env = _clean_env()
        env = scope.env(env)
        env["OMP_TARGET_OFFLOAD"] = "mandatory"
        for rep in range(prof["repeats"]):
            for name, argv in programs.items():
                order = RUNTIMES[::-1] if flip else RUNTIMES
                flip = not flip
                for rt in order:
                    cmd = argv if rt == "libomptarget" else shim + argv
                    res = run_program(cmd, env)
                    stdout = res.pop("stdout")
                    if res["rc"] == 0:
                        try:
                            res.update(parsers[name](stdout))
                        except (KeyError, ValueError, IndexError) as exc:
                            res["error"] = f"unreadable output: {exc}"
                    else:
                        res["error"] = f"exit {res['rc']} {res['stderr']}".strip()
                    samples[name][rt].append(res)
                done += 1
                if progress:
                    progress(f"lifecycle: rep {rep + 1}/{prof['repeats']} {name}", done,
                             total)
    return samples


def _row(samples: dict, program: str, key: str) -> dict:
    per = samples[program]
    fig: dict = {}
    for rt in RUNTIMES:
        vals = [x[key] for x in per[rt] if "error" not in x and x.get(key) is not None]
        fig[rt] = {"median": _med(vals), "spread": _spread(vals), "values": vals}
    lo, sh = fig["libomptarget"]["median"], fig["offload-shim"]["median"]
    fig["ratio"] = (sh / lo) if lo and sh is not None and lo > 0 else None
    ratios = []
    for x, y in zip(per["libomptarget"], per["offload-shim"]):
        a, b = x.get(key), y.get(key)
        if "error" in x or "error" in y or a is None or b is None or a <= 0:
            continue
        ratios.append(b / a)
    fig["ratio_spread"] = _spread(ratios)
    return fig


def summarise(samples: dict, prof: dict) -> dict:
    """The rows (``rss_kib``, ``wall_us``, ``cpu_us``, ``maps``, ``overlap``) from the
    raw samples, each with both runtimes' median and spread, the ratio of the medians
    and the spread of the per-repetition ratios; ``errors``: runs that failed or did
    not offload every region."""
    rows = {}
    for key in ("rss_kib", "wall_us", "cpu_us", "maps"):
        rows[key] = _row(samples, "host", key)
    rows["overlap"] = _row(samples, "overlap", "overlap")
    errors = []
    for program, per in samples.items():
        for rt in RUNTIMES:
            for i, x in enumerate(per[rt]):
                if "error" in x:
                    errors.append(f"{program} under {rt} (rep {i + 1}): {x['error']}")
                    continue
                want = prof["cycles"] if program == "host" else 2 * prof["regions"]
                if x.get("on_device") != want:
                    errors.append(f"{program} under {rt} (rep {i + 1}): {x.get('on_device')} "
                                  f"of {want} regions ran on a device")
                if program == "overlap" and x.get("threads") != 2:
                    errors.append(f"overlap under {rt} (rep {i + 1}): {x.get('threads')} "
                                  "threads instead of 2")
    for key, row in rows.items():
        row["what"], row["unit"] = ROWS[key][0], ROWS[key][1]
    return {"rows": rows, "errors": errors,
            "process": {rt: {"host_wall_s": _med([x["wall_s"] for x in samples["host"][rt]]),
                             "host_cpu_s": _med([x["cpu_s"] for x in samples["host"][rt]])}
                        for rt in RUNTIMES}}


def check_targets(rows: dict, smoke: bool = False) -> list[dict]:
    """PASS/MISS/N/A per entry of :data:`TARGETS` (the ratio, its limit); N/A for a
    smoke profile (``tiny``: too few cycles to measure anything)."""
    res = []
    for key, limit, meaning in TARGETS:
        val = rows.get(key, {}).get("ratio")
        status = "N/A" if val is None or smoke else ("PASS" if val <= limit else "MISS")
        res.append({"row": key, "limit": limit, "value": val, "status": status,
                    "target": meaning})
    return res


def run(profile: str = "quick", *, plugin=NEXTGEN16, workdir=None, progress=None,
        shim: list[str] | None = None, repeats: int | None = None) -> dict:
    """Build the programs, run them under both runtimes and return the JSON-ready
    result: ``meta``, ``rows``, ``process`` (whole-process medians of the host runs),
    ``errors``, ``targets``, ``skipped`` (a reason when the workload cannot run
    here)."""
    from .timing import machine_info
    prof = dict(PROFILES[profile])
    if repeats:
        prof["repeats"] = repeats
    t0 = time.monotonic()
    out = {"meta": {"machine": machine_info(), "profile": profile, "plugin": str(plugin),
                    "shim_command": shim or shim_command(), **prof,
                    "loadavg": _loadavg()},
           "rows": {}, "process": {}, "errors": [], "targets": [], "skipped": None}
    try:
        if not Path(plugin).exists():
            raise Skip(f"{plugin} not found (apt-get install libomp5-16)")
        tmp = tempfile.TemporaryDirectory(prefix="osh-bench-lifecycle-")
        try:
            exes = build(workdir or tmp.name)
            samples = measure(exes, prof, plugin, progress, shim)
        finally:
            tmp.cleanup()
    except Skip as exc:
        out["skipped"] = str(exc)
        return out
    out.update(summarise(samples, prof))
    out["targets"] = check_targets(out["rows"], smoke=profile == "tiny")
    out["meta"]["loadavg_after"] = _loadavg()
    out["meta"]["seconds"] = round(time.monotonic() - t0, 1)
    return out


# -- reporting -----------------------------------------------------------------------

def _f(x, fmt):
    return "-" if x is None else fmt.format(x)


def _sp(s, fmt):
    return "-" if not s or s[0] is None else f"{fmt.format(s[0])}..{fmt.format(s[1])}"


def format_markdown(out) -> str:
    """The table of the ``lifecycle`` workload (Markdown)."""
    m = out["meta"]
    mc = m["machine"]
    lines = [f"Machine: {mc['cpu']}, {mc['cores']} cores, Python {mc['python']}, "
             f"{mc['date']}; load average {m.get('loadavg')} before, "
             f"{m.get('loadavg_after')} after; profile `{m['profile']}`, {m['repeats']} "
             f"repetitions; host: {m['cycles']} cycles, the first {m['warmup']} "
             f"unmeasured; overlap: 2 threads x {m['regions']} regions of "
             f"{m['spin_us']} µs; plugin `{m['plugin']}`.", ""]
    if out.get("skipped"):
        return "\n".join(lines + [f"Skipped: {out['skipped']}", ""])
    lines += ["| figure | libomptarget 16 | p25..p75 | offload-shim run | p25..p75 "
              "| ratio | ratio p25..p75 |",
              "|---|---|---|---|---|---|---|"]
    for key, row in out["rows"].items():
        fmt = ROWS[key][2]
        unit = f" ({row['unit']})" if row["unit"] else ""
        lo, sh = row["libomptarget"], row["offload-shim"]
        lines.append(f"| {row['what']}{unit} | {_f(lo['median'], fmt)} | "
                     f"{_sp(lo['spread'], fmt)} | {_f(sh['median'], fmt)} | "
                     f"{_sp(sh['spread'], fmt)} | **{_f(row['ratio'], '{:.2f}')}x** | "
                     f"{_sp(row['ratio_spread'], '{:.2f}')} |")
    proc = out.get("process") or {}
    if proc:
        lo, sh = proc.get("libomptarget", {}), proc.get("offload-shim", {})
        lines += ["", f"Whole host process (start-up and exit included; medians): "
                      f"libomptarget {_f(lo.get('host_wall_s'), '{:.3f}')} s wall / "
                      f"{_f(lo.get('host_cpu_s'), '{:.3f}')} s CPU, offload-shim run "
                      f"{_f(sh.get('host_wall_s'), '{:.3f}')} s / "
                      f"{_f(sh.get('host_cpu_s'), '{:.3f}')} s."]
    lines += ["", "Targets:", "", "| target | ratio | status |", "|---|---|---|"]
    for t in out["targets"]:
        lines.append(f"| {t['target']} | {_f(t['value'], '{:.2f}')}x | {t['status']} |")
    if out.get("errors"):
        lines += ["", "Errors:", ""] + [f"* {e}" for e in out["errors"]]
    return "\n".join(lines) + "\n"


def format_text(out) -> str:
    """What ``offload-shim bench --workloads lifecycle`` prints."""
    return ("## lifecycle (dlopen / region / dlclose cycles and two threads' kernels, "
            "offload-shim run vs libomptarget 16)\n\n" + format_markdown(out))


BEGIN_MARK = "<!-- bench-lifecycle:begin (written by benchmarks/lifecycle.py) -->"
END_MARK = "<!-- bench-lifecycle:end -->"


def update_docs(out, doc_path) -> None:
    """Replace the block between :data:`BEGIN_MARK` and :data:`END_MARK` of
    ``doc_path`` with the latest table (appended when the marks are absent)."""
    from .report import replace_marked_block
    replace_marked_block(doc_path, BEGIN_MARK, END_MARK, format_markdown(out))


def write_outputs(out, directory) -> dict:
    """``lifecycle.json`` and ``lifecycle.md`` in ``directory`` (created); returns
    their paths."""
    import json
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "lifecycle.json").write_text(json.dumps(out, indent=1, default=str))
    (d / "lifecycle.md").write_text(format_markdown(out))
    return {"json": str(d / "lifecycle.json"), "markdown": str(d / "lifecycle.md")}


def main_from_bench(args) -> int:
    """``offload-shim bench --workloads lifecycle`` (``args`` of the bench command
    line: ``profile``, ``json``, ``out``, ``no_progress``): runs the workload, prints
    the table (or the JSON with ``--json``), writes ``lifecycle.json`` and ``.md``
    into ``--out`` when given.  Exit status 0 (also when skipped: the reason is
    printed)."""
    import json
    out = run(args.profile,
              progress=_progress_printer(not getattr(args, "no_progress", False)))
    if getattr(args, "out", None):
        write_outputs(out, args.out)
    if getattr(args, "json", False):
        print(json.dumps(out, indent=1, default=str))
    else:
        print(format_text(out))
    return 0


__all__ = ["BEGIN_MARK", "END_MARK", "PROFILES", "ROWS", "TARGETS", "build",
           "check_targets", "format_markdown", "format_text", "main_from_bench", "measure",
           "overlap_share", "parse_host", "parse_overlap", "run", "run_program", "summarise",
           "update_docs", "write_outputs"]
