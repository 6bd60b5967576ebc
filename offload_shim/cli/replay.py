"""``offload-shim replay TRACE``: re-issue a trace of ``offload-shim run --record`` on a
plugin under pool policies and print them side by side (:mod:`offload_shim.trace.replay`).

    offload-shim replay TRACE [--plugin P] [--policy exact|binned|best-fit|none ...]
                        [--compare-policies] [--threshold N] [--latency-ns A,F]
                        [--capacity BYTES] [--no-threads] [--json]

A trace written by ``offload-shim check`` (header ``"source": "check"``: the steps of a
failing lifecycle-machine sequence) is re-run instead, step by step, against its
plugin (or ``--plugin``) in a child process (:func:`replay_check_trace`): the output
says how the sequence ended and whether that is the failure recorded; exit status 1
when it fails, 0 when it passes; the pool options do not apply (exit status 2).

Without ``--policy`` (or with ``--compare-policies``, which excludes ``--policy``: exit
status 2) all four policies are replayed.
``--json`` prints ``{"recorded": {"allocs", "frees", "launches", "bytes", ...},
"policies": [{"policy": "exact", ...}, ...]}``.  Exit status 0; 1 when a re-issued
operation failed (other than out of memory, which is reported); 2 for bad input (not
a trace, an unknown policy...).
"""

from __future__ import annotations

import json
import os


def cmd_replay(args) -> int:
    from ..errors import OffloadError
    from ..trace.format import TraceError, read_trace
    from ..trace.replay import POLICIES, format_table, replay
    from .common import error
    try:
        trace = read_trace(args.trace)
    except OSError as exc:
        error(f"{args.trace}: {exc.strerror or exc}")
        return 2
    except TraceError as exc:
        error(str(exc))
        return 2
    if trace.header.get("source") == "check":
        return _replay_check(args, trace)
    policies = POLICIES if args.compare_policies or not args.policy else tuple(
        dict.fromkeys(args.policy))
    plugin = None if args.plugin == "bundled" else args.plugin   # as check traces take it
    latency = None
    if args.latency_ns:
        try:
            a, _, f = args.latency_ns.partition(",")
            latency = (int(a), int(f or a))
        except ValueError:
            error(f"--latency-ns: expected ALLOC_NS[,FREE_NS], got {args.latency_ns!r}")
            return 2
    try:
        res = replay(trace, policies, plugin=plugin, threshold=args.threshold,
                     latency=latency, capacity=args.capacity, threads=not args.no_threads)
        res["trace"] = args.trace
    except OffloadError as exc:         # before OSError: PluginNotFoundError is both
        error(f"cannot start the runtime: {exc}")
        return 2
    except OSError as exc:
        error(f"{args.trace}: {exc.strerror or exc}")
        return 2
    except (TraceError, ValueError) as exc:
        error(str(exc))
        return 2
    if args.json:
        print(json.dumps(res))
    else:
        print(format_table(res))
    return 1 if any(p["errors"] for p in res["policies"]) else 0


def replay_check_trace(trace, plugin: str | None = None, *, timeout: float = 120.0) -> dict:
    """Re-run the steps of a trace written by ``offload-shim check`` (a path or a
    :class:`~offload_shim.trace.format.Trace` whose header says ``"source": "check"``)
    through the lifecycle machine against ``plugin`` (None: the plugin it was
    recorded with), in a child process of its own
    (:func:`offload_shim.cli.check.run_sequence`), with the recorded ABI view, threads
    and faults settings.  Returns ``{"plugin", "steps", "recorded" (the trace's
    outcome), "outcome" (this run's: ``kind``, ``signal``?, ``exception``?,
    ``message``, ``step``?), "same" (the same failure:
    :func:`offload_shim.testing.sequences.failure_signature`)}``.  Raises
    :class:`~offload_shim.trace.format.TraceError` (not a check trace), ``OSError``,
    ``ValueError`` (a bad ``timeout``)."""
    import os

    from ..testing.sequences import failure_signature, trace_steps
    from ..trace.format import read_trace
    from .check import run_sequence
    if isinstance(trace, (str, os.PathLike)):
        trace = read_trace(trace)
    steps, recorded = trace_steps(trace)
    h = trace.header
    path = plugin or h.get("plugin")
    if not path:
        from ..trace.format import TraceError
        raise TraceError("the check trace names no plugin: give one (--plugin)")
    got = run_sequence(path, h.get("abi"), steps, threads=bool(h.get("threads", True)),
                       faults=bool(h.get("faults", True)), timeout=timeout)
    return {"plugin": path, "steps": len(steps), "recorded": recorded, "outcome": got,
            "same": recorded is not None and failure_signature(got) ==
            failure_signature(recorded)}


def _replay_check(args, trace) -> int:
    """``replay`` of a check trace: its steps again, in a child (exit 1 when the
    sequence fails, as recorded or not; 0 when it passes)."""
    from ..testing.sequences import format_steps, trace_steps
    from .common import error
    pool_opts = [o for o, v in (("--policy", args.policy), ("--compare-policies",
                                                             args.compare_policies),
                                ("--threshold", args.threshold),
                                ("--latency-ns", args.latency_ns),
                                ("--capacity", args.capacity)) if v]
    if pool_opts:
        error(f"{args.trace} is a trace of offload-shim check (lifecycle steps, no "
              f"allocation stream): {', '.join(pool_opts)} do not apply")
        return 2
    plugin = args.plugin
    if plugin == "bundled":
        from ..abi.native import bundled_plugin_path
        plugin = str(bundled_plugin_path())
    if plugin is not None and not os.path.exists(plugin):
        error(f"--plugin {plugin}: no such file")
        return 2
    recorded = trace.header.get("plugin")
    if plugin is None and not (isinstance(recorded, str) and os.path.exists(recorded)):
        error(f"{args.trace}: the plugin it was recorded with ({recorded}) is not there; "
              "give one with --plugin")
        return 2
    res = replay_check_trace(trace, plugin)
    if args.json:
        print(json.dumps(res))
    else:
        o, r = res["outcome"], res["recorded"] or {}
        print(f"check trace: {args.trace}: {res['steps']} steps against {res['plugin']} "
              "(in a child process)")
        for line in format_steps(trace_steps(trace)[0]):
            print("    " + line)
        at = o.get("step")
        where = f" in step {at['i']} ({at['rule']})" if at and o["kind"] != "passed" else ""
        print(f"outcome:  {o['kind']}: {o.get('message', '')}{where}")
        print(f"recorded: {r.get('kind', '?')}: {r.get('message', '')}")
        print("the same failure as recorded" if res["same"] else
              "NOT the failure recorded")
    return 0 if res["outcome"]["kind"] == "passed" else 1


def register_cli(subparsers) -> None:
    from .common import nonnegative_int, positive_int
    from ..trace.replay import POLICIES
    p = subparsers.add_parser(
        "replay", help="re-issue a trace of `run --record` on a plugin under pool "
        "policies; time, peak memory, hit rate, fragmentation, OOM side by side")
    p.add_argument("trace", help="trace file written by offload-shim run --record")
    p.add_argument("--plugin", help="plugin path (default, or 'bundled': the bundled host "
                   "plugin)")
    which = p.add_mutually_exclusive_group()    # both: which one was meant? (exit 2)
    which.add_argument("--policy", action="append", choices=POLICIES,
                       help="pool policy to replay (repeatable; default: all four; none "
                            "= no pool)")
    which.add_argument("--compare-policies", action="store_true",
                       help="replay every policy (exact, binned, best-fit, none); not "
                            "with --policy")
    p.add_argument("--threshold", type=nonnegative_int, default=None, metavar="N",
                   help="pool threshold in bytes (default: the recorded pool's)")
    p.add_argument("--latency-ns", metavar="ALLOC[,FREE]",
                   help="bundled plugin: busy-wait this long in every allocation and free "
                        "(a GPU driver's cost)")
    p.add_argument("--capacity", type=positive_int, default=None, metavar="BYTES",
                   help="bundled plugin: device capacity (allocations beyond it fail: "
                        "out-of-memory events)")
    p.add_argument("--no-threads", action="store_true",
                   help="replay every event from one thread (default: one per recorded "
                        "thread, taking turns in the recorded order)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_replay)


__all__ = ["cmd_replay", "register_cli", "replay_check_trace"]
