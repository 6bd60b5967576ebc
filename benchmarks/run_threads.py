"""Host threads offloading at once: ``offload-shim run`` side by side with the real
libomptarget 16 (issue 25 part 3, "concurrency as libomptarget's").

Two small OpenMP programs of its own (C source below, ``clang-16 -O2 -fopenmp
-fopenmp-targets=x86_64-pc-linux-gnu``), each run as a whole process under both
runtimes in alternation (the first one flips every repetition), through the x86_64
nextgen plugin:

* ``overlap``: 2 host threads, 20 kernels each that spin ``--spin`` seconds
  (``omp_get_wtime``) and record when they start and end; the program prints the share
  of the time any kernel runs during which kernels of both threads run (1.00: always
  together; a runtime that serialises kernels gives 0.00);
* ``regions T N``: ``T`` host threads each run ``N`` tiny regions
  (``target map(tofrom: x)``); the program prints its own loop time.  Per region:
  the loop time over ``N`` (each thread runs its ``N`` regions at once with the
  others), and the CPU time per region (user + sys of the process, ``RUSAGE_CHILDREN``
  deltas) as the slope between ``N1`` and ``N2`` so that start-up cancels.

Figures are medians over ``--repeats`` and printed as ratios offload-shim /
libomptarget; nothing is asserted (tests/test_concurrency.py checks the behaviour).
Imports the *installed* ``offload_shim`` (``pip install .``)."""

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path
               if Path(p or os.getcwd()).resolve() not in (ROOT, ROOT / "benchmarks")]

NEXTGEN16 = "/usr/lib/llvm-16/lib/libomptarget.rtl.x86_64.nextgen.so.16"
FLAGS = ["-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-Xoffload-linker",
         "-Bsymbolic", "-Wl,-rpath,/usr/lib/llvm-16/lib"]

OVERLAP = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#define T 2
#define ITERS 20
static double ent[T][ITERS], ext[T][ITERS];
int main(int argc, char **argv) {
  double spin = argc > 1 ? atof(argv[1]) : 0.01;
#pragma omp parallel num_threads(T)
  {
    int t = omp_get_thread_num();
    for (int it = 0; it < ITERS; it++) {
      double e0 = 0, e1 = 0;
#pragma omp target map(from : e0, e1) firstprivate(spin)
      {
        e0 = omp_get_wtime();
        while (omp_get_wtime() - e0 < spin)
          ;
        e1 = omp_get_wtime();
      }
      ent[t][it] = e0;
      ext[t][it] = e1;
    }
  }
  double lo = 1e300, hi = -1e300;
  for (int t = 0; t < T; t++)
    for (int i = 0; i < ITERS; i++) {
      if (ent[t][i] < lo) lo = ent[t][i];
      if (ext[t][i] > hi) hi = ext[t][i];
    }
  long steps = 100000;
  double dt = (hi - lo) / steps, any = 0, both = 0;
  for (long s = 0; s < steps; s++) {
    double x = lo + (s + 0.5) * dt;
    int in = 0;
    for (int t = 0; t < T; t++)
      for (int i = 0; i < ITERS; i++)
        if (ent[t][i] <= x && x < ext[t][i]) { in++; break; }
    if (in) any += dt;
    if (in == T) both += dt;
  }
  printf("overlap %.3f\n", any > 0 ? both / any : 0.0);
  return 0;
}
"""

REGIONS = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
static __attribute__((noinline)) long work(long n) {
  long x = 0;
  for (long i = 0; i < n; i++) {
#pragma omp target map(tofrom : x)
    x += 1;
  }
  return x;
}
int main(int argc, char **argv) {
  int t = argc > 1 ? atoi(argv[1]) : 2;
  long n = argc > 2 ? atol(argv[2]) : 1000, total = 0;
  double t0 = omp_get_wtime();
#pragma omp parallel num_threads(t) reduction(+ : total)
  total += work(n);
  double t1 = omp_get_wtime();
  printf("%ld\nloop_s %.6f\n", total, t1 - t0);
  return 0;
}
"""


def _build(src: str, name: str, where: Path) -> str:
    path = where / f"{name}.c"
    path.write_text(src)
    exe = where / name
    subprocess.run(["clang-16", *FLAGS, str(path), "-o", str(exe)], check=True,
                   capture_output=True)
    return str(exe)


def _run(cmd) -> tuple[list[str], float]:
    """(stdout lines, CPU seconds of the process and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out.stdout.splitlines(), cpu


def _value(lines, key) -> float:
    return float(next(ln.split()[1] for ln in lines if ln.startswith(key)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", default="1,2,8", help="thread counts of `regions`")
    ap.add_argument("--counts", default="200,2000", help="N1,N2 regions per thread")
    ap.add_argument("--spin", type=float, default=0.01, help="seconds per overlap kernel")
    args = ap.parse_args(argv)
    if shutil.which("clang-16") is None or not Path(NEXTGEN16).exists():
        print("benchmarks/run_threads.py: clang-16 or the LLVM 16 nextgen x86_64 plugin "
              "is missing", file=sys.stderr)
        return 2
    shim = [str(Path(sys.executable).with_name("offload-shim")), "run", "--plugin",
            NEXTGEN16]
    n1, n2 = (int(x) for x in args.counts.split(","))
    threads = [int(x) for x in args.threads.split(",")]
    with tempfile.TemporaryDirectory(prefix="osh-threads-") as tmp:
        overlap = _build(OVERLAP, "overlap", Path(tmp))
        regions = _build(REGIONS, "regions", Path(tmp))
        runtimes = {"libomptarget": [], "offload-shim": shim}
        share = {k: [] for k in runtimes}
        loop = {(k, t): [] for k in runtimes for t in threads}
        cpu = {(k, t): [] for k in runtimes for t in threads}
        for rep in range(args.repeats):
            order = list(runtimes) if rep % 2 == 0 else list(reversed(runtimes))
            for name in order:
                pre = runtimes[name]
                lines, _ = _run([*pre, overlap, str(args.spin)])
                share[name].append(_value(lines, "overlap"))
                for t in threads:
                    small, c1 = _run([*pre, regions, str(t), str(n1)])
                    big, c2 = _run([*pre, regions, str(t), str(n2)])
                    if small[0] != str(t * n1) or big[0] != str(t * n2):
                        raise SystemExit(f"{name}: wrong result {small[0]} / {big[0]}")
                    loop[(name, t)].append(_value(big, "loop_s") / n2 * 1e6)
                    cpu[(name, t)].append((c2 - c1) / (t * (n2 - n1)) * 1e6)
            print(f"[{rep + 1}/{args.repeats}]", file=sys.stderr)
    med = statistics.median
    print(f"overlap share of two threads' kernels ({args.spin} s each): libomptarget "
          f"{med(share['libomptarget']):.2f}, offload-shim {med(share['offload-shim']):.2f}")
    print("| threads | libomptarget µs/region (wall) | offload-shim | ratio | "
          "libomptarget CPU µs/region | offload-shim | ratio |")
    print("|---|---|---|---|---|---|---|")
    for t in threads:
        lw, sw = med(loop[("libomptarget", t)]), med(loop[("offload-shim", t)])
        lc, sc = med(cpu[("libomptarget", t)]), med(cpu[("offload-shim", t)])
        print(f"| {t} | {lw:.2f} | {sw:.2f} | {sw / lw:.1f}x | {lc:.2f} | {sc:.2f} | "
              f"{sc / lc:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
