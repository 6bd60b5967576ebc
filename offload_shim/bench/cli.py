"""The command line of ``offload-shim bench`` and ``python -m
offload_shim.bench`` (also used by ``benchmarks/run.py``)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from .backends import CPU_ROWS
from .config import DEFAULT_ALLOC_LATENCY_NS, DEFAULT_FREE_LATENCY_NS, PROFILES, WORKLOADS
from .gpu import GPU_ROWS
from .report import format_text, write_outputs
from .runner import run
from .stop import deferred_signals

ALL_ROWS = CPU_ROWS + GPU_ROWS

_DESCRIPTION = "benchmark alloc/free: the pool against every peer, side by side"

#: Workloads that run whole programs under offload-shim run and libomptarget 16
#: (:mod:`.run_overhead`, :mod:`.lifecycle`), not the alloc/free rows.
PROCESS_WORKLOADS = ("run", "lifecycle", "record")

#: Largest emulated latency accepted (ns): the plugin busy-waits that long per call.
MAX_LATENCY_NS = 1_000_000_000


def _add_arguments(p: argparse.ArgumentParser, default_profile: str) -> None:
    p.add_argument("--profile", choices=sorted(PROFILES), default=default_profile,
                   help=f"iteration counts (default {default_profile})")
    p.add_argument("--json", action="store_true",
                   help="print the whole result as JSON on stdout instead of the table")
    p.add_argument("--out", metavar="DIR",
                   help="also write results.json/.md and PNG plots into DIR (created)")
    p.add_argument("--latency-alloc-ns", type=int, default=DEFAULT_ALLOC_LATENCY_NS,
                   help="emulated driver alloc latency, ns (default %(default)s)")
    p.add_argument("--latency-free-ns", type=int, default=DEFAULT_FREE_LATENCY_NS,
                   help="emulated device-synchronising free latency, ns (default %(default)s)")
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help="comma-separated subset of " + ",".join(WORKLOADS)
                   + " (or run: offload-shim run against libomptarget, run_overhead.py;"
                   " lifecycle: dlopen/region/dlclose cycles and two threads' kernels"
                   " against libomptarget, lifecycle.py; record: run --record against"
                   " run, record_overhead.py)")
    p.add_argument("--only", action="append", metavar="ROW",
                   help="rows whose name contains ROW (repeatable)")
    p.add_argument("--no-gpu", action="store_true", help="do not try the CUDA rows")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


class UsageError(Exception):
    """A bad option value: one line naming the option, exit status 2."""


def _check_args(args) -> tuple:
    """Validate the options before anything runs; returns the workloads.
    Raises UsageError."""
    wls = tuple(w.strip() for w in args.workloads.split(",") if w.strip())
    for w in wls:
        if w not in WORKLOADS and w not in PROCESS_WORKLOADS:
            raise UsageError(f"--workloads: unknown workload {w!r} "
                             f"(choose from {', '.join(WORKLOADS + PROCESS_WORKLOADS)})")
    if not wls:
        raise UsageError(f"--workloads: no workload given (choose from "
                         f"{', '.join(WORKLOADS + PROCESS_WORKLOADS)})")
    for opt, v in (("--latency-alloc-ns", args.latency_alloc_ns),
                   ("--latency-free-ns", args.latency_free_ns)):
        if not 0 <= v <= MAX_LATENCY_NS:
            raise UsageError(f"{opt} must be between 0 and {MAX_LATENCY_NS:,} ns, got {v}")
    if args.only:
        rows = _rows_of(wls)
        if not rows:
            raise UsageError(f"--only: --workloads {','.join(wls)} has no rows to pick "
                             f"(--only picks rows of {', '.join(WORKLOADS)}, run, record)")
        for o in args.only:
            if not o.strip():
                raise UsageError("--only: an empty ROW would match every row (name a "
                                 f"row: {', '.join(rows)})")
            if not any(o in name for name in rows):
                raise UsageError(f"--only {o!r} matches no row of --workloads "
                                 f"{','.join(wls)} (rows: {', '.join(rows)})")
    if args.out:
        d = Path(args.out)
        if d.exists() and not d.is_dir():
            raise UsageError(f"--out {args.out}: exists and is not a directory")
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--out {args.out}: cannot create the directory: "
                             f"{exc.strerror or exc}") from None
    return wls


def _rows_of(wls) -> list[str]:
    """The row names ``--only`` may pick among for the workloads ``wls``: the
    alloc/free rows for the pool workloads, the programs of ``run`` and ``record``
    (:mod:`.run_overhead`, :mod:`.record_overhead`)."""
    rows = list(ALL_ROWS) if any(w in WORKLOADS for w in wls) else []
    if "run" in wls:
        from .run_overhead import rows_for
        rows += [r.name for r in rows_for("tiny") if r.name not in rows]
    if "record" in wls:
        from .record_overhead import ROWS as RECORD_ROWS
        rows += [r for r in RECORD_ROWS if r not in rows]
    return rows


def _cmd(args, on_result=None) -> int:
    """Run the benchmark for the parsed ``args``.  Exit status: 0, 2 for a
    bad option (one line on stderr naming it: ``offload-shim: error: ...`` under
    ``offload-shim bench``, ``bench: ...`` under ``python -m offload_shim.bench``), 1 when the output files
    cannot be written, 130 after Ctrl-C and 143 after SIGTERM (one line
    "bench: interrupted"; every row and plugin closed first)."""
    try:
        wls = _check_args(args)
    except UsageError as exc:
        # offload-shim bench: the one-line usage error of every command (README)
        print(f"{getattr(args, 'error_prefix', 'bench')}: {exc}", file=sys.stderr)
        return 2
    # whole programs under offload-shim run vs libomptarget (run_overhead.py, lifecycle.py)
    for name in PROCESS_WORKLOADS:
        if name not in wls:
            continue
        if name == "run":
            from .run_overhead import main_from_bench
        elif name == "record":
            from .record_overhead import main_from_bench
        else:
            from .lifecycle import main_from_bench
        rc = main_from_bench(args)
        wls = tuple(w for w in wls if w != name)
        if rc or not wls:
            return rc
    try:
        with deferred_signals():
            out = run(args.profile, alloc_ns=args.latency_alloc_ns,
                      free_ns=args.latency_free_ns, gpu=not args.no_gpu, only=args.only,
                      progress=not args.no_progress, workloads=wls)
    except KeyboardInterrupt as exc:
        term = getattr(exc, "signum", signal.SIGINT) == signal.SIGTERM
        print(f"bench: interrupted{' (SIGTERM)' if term else ''}", file=sys.stderr)
        return 143 if term else 130
    if on_result is not None:
        on_result(out)
    if args.out:
        try:
            paths = write_outputs(out, args.out)
        except OSError as exc:
            print(f"bench: --out {args.out}: cannot write the results: {exc}", file=sys.stderr)
            return 1
        print(f"bench: wrote {paths['json']}, {paths['markdown']}"
              + "".join(f", {p}" for p in paths["plots"]), file=sys.stderr)
        if not paths["plots"]:
            from .report import say_no_plot
            say_no_plot()
    if args.json:
        print(json.dumps(out, indent=1, default=str))
    else:
        print(format_text(out))
    return 0


def register_cli(subparsers) -> None:
    """``offload-shim bench``: the quick profile, prints the table."""
    p = subparsers.add_parser("bench", help="benchmark alloc/free: the pool against every peer",
                              description=_DESCRIPTION)
    _add_arguments(p, "quick")
    p.set_defaults(func=_cmd, error_prefix="offload-shim: error")


def main(argv=None, default_profile: str = "quick", on_result=None) -> int:
    """``python -m offload_shim.bench`` (and ``benchmarks/run.py``, which
    passes ``on_result(out)`` to receive the result dict)."""
    ap = argparse.ArgumentParser(prog="python -m offload_shim.bench",
                                 description=_DESCRIPTION)
    _add_arguments(ap, default_profile)
    args = ap.parse_args(argv)
    return _cmd(args, on_result)
