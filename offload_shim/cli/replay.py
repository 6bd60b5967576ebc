"""``offload-shim replay TRACE``: re-issue a trace of ``offload-shim run --record`` on a
plugin under pool policies and print them side by side (:mod:`offload_shim.trace.replay`).

    offload-shim replay TRACE [--plugin P] [--policy exact|binned|best-fit|none ...]
                        [--compare-policies] [--threshold N] [--latency-ns A,F]
                        [--capacity BYTES] [--no-threads] [--json]

Without ``--policy`` (or with ``--compare-policies``) all four policies are replayed.
``--json`` prints ``{"recorded": {"allocs", "frees", "launches", "bytes", ...},
"policies": [{"policy": "exact", ...}, ...]}``.  Exit status 0; 1 when a re-issued
operation failed (other than out of memory, which is reported); 2 for bad input (not
a trace, an unknown policy...).
"""

from __future__ import annotations

import json
import sys


def cmd_replay(args) -> int:
    from ..errors import OffloadError
    from ..trace.format import TraceError
    from ..trace.replay import POLICIES, format_table, replay
    from .common import error
    policies = POLICIES if args.compare_policies or not args.policy else tuple(
        dict.fromkeys(args.policy))
    latency = None
    if args.latency_ns:
        try:
            a, _, f = args.latency_ns.partition(",")
            latency = (int(a), int(f or a))
        except ValueError:
            error(f"--latency-ns: expected ALLOC_NS[,FREE_NS], got {args.latency_ns!r}")
            return 2
    try:
        res = replay(args.trace, policies, plugin=args.plugin, threshold=args.threshold,
                     latency=latency, capacity=args.capacity, threads=not args.no_threads)
    except OSError as exc:
        error(f"{args.trace}: {exc.strerror or exc}")
        return 2
    except (TraceError, ValueError) as exc:
        error(str(exc))
        return 2
    except OffloadError as exc:
        error(f"cannot start the runtime: {exc}")
        return 2
    if args.json:
        print(json.dumps(res))
    else:
        print(format_table(res))
    return 1 if any(p["errors"] for p in res["policies"]) else 0


def register_cli(subparsers) -> None:
    from .common import nonnegative_int
    from ..trace.replay import POLICIES
    p = subparsers.add_parser(
        "replay", help="re-issue a trace of `run --record` on a plugin under pool "
        "policies; time, peak memory, hit rate, fragmentation, OOM side by side")
    p.add_argument("trace", help="trace file written by offload-shim run --record")
    p.add_argument("--plugin", help="plugin path (default: the bundled host plugin)")
    p.add_argument("--policy", action="append", choices=POLICIES,
                   help="pool policy to replay (repeatable; default: all four; none = "
                        "no pool)")
    p.add_argument("--compare-policies", action="store_true",
                   help="replay every policy (exact, binned, best-fit, none)")
    p.add_argument("--threshold", type=nonnegative_int, default=None, metavar="N",
                   help="pool threshold in bytes (default: the recorded pool's)")
    p.add_argument("--latency-ns", metavar="ALLOC[,FREE]",
                   help="bundled plugin: busy-wait this long in every allocation and free "
                        "(a GPU driver's cost)")
    p.add_argument("--capacity", type=nonnegative_int, default=None, metavar="BYTES",
                   help="bundled plugin: device capacity (allocations beyond it fail: "
                        "out-of-memory events)")
    p.add_argument("--no-threads", action="store_true",
                   help="replay every event from one thread (default: one per recorded "
                        "thread, taking turns in the recorded order)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_replay)


__all__ = ["cmd_replay", "register_cli"]
