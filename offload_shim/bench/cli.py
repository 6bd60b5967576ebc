"""The command line of ``offload-shim bench`` and ``python -m
offload_shim.bench`` (also used by ``benchmarks/run.py``)."""

from __future__ import annotations

import argparse
import json
import sys

from .backends import Skip, worker_backends
from .config import DEFAULT_ALLOC_LATENCY_NS, DEFAULT_FREE_LATENCY_NS, PROFILES, WORKLOADS
from .report import format_text, write_outputs
from .runner import run
from .timing import Progress, timer_overhead_ns
from .workloads import run_workloads

_DESCRIPTION = "benchmark alloc/free: the pool against every peer, side by side"

def _add_arguments(p: argparse.ArgumentParser, default_profile: str) -> None:
    p.add_argument("--profile", choices=sorted(PROFILES), default=default_profile,
                   help=f"iteration counts (default {default_profile})")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--out", metavar="DIR", help="also write results.json/.md and PNG plots here")
    p.add_argument("--latency-alloc-ns", type=int, default=DEFAULT_ALLOC_LATENCY_NS,
                   help="emulated driver alloc latency, ns (default %(default)s)")
    p.add_argument("--latency-free-ns", type=int, default=DEFAULT_FREE_LATENCY_NS,
                   help="emulated device-synchronising free latency, ns (default %(default)s)")
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help="comma-separated subset of " + ",".join(WORKLOADS))
    p.add_argument("--only", action="append", help="rows whose name contains this (repeatable)")
    p.add_argument("--no-gpu", action="store_true", help="do not try the CUDA rows")
    p.add_argument("--no-child", action="store_true",
                   help="skip the nextgen pool-off row (it needs a child process)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _cmd(args, on_result=None) -> int:
    wls = tuple(w.strip() for w in args.workloads.split(",") if w.strip())
    bad = [w for w in wls if w not in WORKLOADS]
    if bad:
        print(f"bench: unknown workload(s) {bad}; choose from {WORKLOADS}", file=sys.stderr)
        return 2
    out = run(args.profile, alloc_ns=args.latency_alloc_ns, free_ns=args.latency_free_ns,
              gpu=not args.no_gpu, child=not args.no_child, only=args.only,
              progress=not args.no_progress, workloads=wls)
    if on_result is not None:
        on_result(out)
    if args.out:
        paths = write_outputs(out, args.out)
        print(f"bench: wrote {paths['json']}, {paths['markdown']}"
              + "".join(f", {p}" for p in paths["plots"]), file=sys.stderr)
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
    p.set_defaults(func=_cmd)


def _worker_main(args) -> int:
    """Child process: run one backend's workloads, print one JSON line."""
    prm = dict(PROFILES[args.profile])
    ovh = timer_overhead_ns()
    wls = tuple(w for w in args.workloads.split(",") if w)
    skipped = {}
    try:
        backends = worker_backends(args.worker)
    except Skip as exc:
        print(json.dumps({"results": {}, "rows": {}, "skipped": {args.worker: str(exc)}}))
        return 0
    try:
        res = run_workloads(backends, prm, ovh, Progress(1, False), args.replay_log, wls)
    finally:
        for b in backends:
            b.close()
    rows = {b.name: {"group": b.group, "description": b.description, "baseline": b.baseline,
                     "latency": False} for b in backends}
    print(json.dumps({"results": res, "rows": rows, "skipped": skipped}))
    return 0


def main(argv=None, default_profile: str = "quick", on_result=None) -> int:
    """``python -m offload_shim.bench`` (and ``benchmarks/run.py``, which
    passes ``on_result(out)`` to receive the result dict)."""
    ap = argparse.ArgumentParser(prog="python -m offload_shim.bench",
                                 description=_DESCRIPTION)
    _add_arguments(ap, default_profile)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--replay-log", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker_main(args)
    return _cmd(args, on_result)
