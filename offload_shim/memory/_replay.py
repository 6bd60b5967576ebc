"""Replay a recorded event log against pool policies (RMM's replay
benchmark and logging adaptor in spirit, prior-art section 2 "statistics").

An event log is what ``MemoryManager(event_log=...)`` writes: JSON lines.
Only the caller's operations are replayed: ``alloc`` events with a non-zero
``ptr`` (hits and misses alike) and ``free`` events; pointers are matched by
``(dev, ptr)``.  Evictions, trims and OOM retries in the log are outcomes of
the recorded policy and are recomputed, not replayed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .fake import FakeBackend
from .manager import POLICIES, MemoryManager, read_threshold_env

__all__ = ["replay", "read_events", "main"]


def read_events(events):
    """Parse an event log: a path, a text file object or an iterable of
    lines/dicts.  Yields dicts; blank lines are skipped; a malformed line
    raises ``ValueError`` with its line number."""
    if isinstance(events, (str, os.PathLike)):
        with open(events, encoding="utf-8") as f:
            yield from read_events(f)
        return
    for n, line in enumerate(events, 1):
        if isinstance(line, dict):
            yield line
            continue
        line = line.strip()
        if not line:
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"event log line {n}: not JSON ({e.msg}): {line[:80]!r}") from None
        if not isinstance(ev, dict) or "op" not in ev:
            raise ValueError(f"event log line {n}: not an event object: {line[:80]!r}")
        yield ev


def replay(events_path, policies=("exact", "binned"), threshold=None, *, cache_limit=None,
           oom="free-all", bins_per_pow2=8) -> dict:
    """Run the caller operations of an event log against each policy with a
    fake unlimited backend (:class:`~offload_shim.memory.fake.FakeBackend`).

    ``threshold``: bytes; ``None`` takes it from the log's ``config`` event,
    else from :func:`read_threshold_env`.  ``cache_limit``, ``oom``,
    ``bins_per_pow2`` are passed to each :class:`MemoryManager`.

    Returns ``{policy: PoolStats}``, snapshots taken after the last event
    (before the replay managers are drained).  Raises ``ValueError`` for an
    unknown policy or a malformed log (e.g. an ``alloc`` of a pointer that is
    still live in the log).
    """
    events = list(read_events(events_path))
    for p in policies:
        if p not in POLICIES:
            raise ValueError(f"unknown policy {p!r}; expected one of {POLICIES}")
    if threshold is None:
        cfg = next((e for e in events if e.get("op") == "config" and "threshold" in e), None)
        threshold = int(cfg["threshold"]) if cfg is not None else read_threshold_env()
    results = {}
    for policy in policies:
        backend = FakeBackend()
        mm = MemoryManager(backend.alloc, backend.free, threshold=threshold, policy=policy,
                           oom=oom, cache_limit=cache_limit, stats=True, event_log=None,
                           debug="", device_label=f"replay:{policy}",
                           bins_per_pow2=bins_per_pow2)
        live = {}
        alloc, free = mm.allocate, mm.free
        for n, ev in enumerate(events, 1):
            op = ev.get("op")
            if op == "alloc":
                rptr = ev.get("ptr")
                if not rptr:
                    continue
                k = (ev.get("dev", ""), rptr)
                if k in live:
                    raise ValueError(f"event {n}: alloc of {rptr:#x}, still live in the log")
                live[k] = alloc(int(ev["size"]))
            elif op == "free":
                p = live.pop((ev.get("dev", ""), ev.get("ptr")), None)
                if p is not None:
                    free(p)
        results[policy] = mm.stats
        mm.drain()
    return results


_ROWS = ("bytes_in_use", "bytes_cached", "bytes_total", "peak_bytes_in_use",
         "peak_bytes_total", "hits", "misses", "hit_rate", "evictions", "oom_retries",
         "backend_allocs", "backend_frees", "live_blocks", "cached_blocks")


def format_table(results: dict) -> str:
    """``{policy: PoolStats}`` as a text table, one column per policy."""
    names = list(results)
    cells = [["stat"] + names]
    for row in _ROWS:
        vals = []
        for p in names:
            v = getattr(results[p], row)
            vals.append(f"{v:.3f}" if isinstance(v, float) else str(v))
        cells.append([row] + vals)
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines = []
    for i, r in enumerate(cells):
        lines.append("  ".join([r[0].ljust(widths[0])]
                               + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m offload_shim.memory.replay",
        description="Replay a MemoryManager event log against pool policies and print "
                    "their statistics side by side.")
    ap.add_argument("log", help="event log (JSON lines) written by MemoryManager(event_log=...)")
    ap.add_argument("--policy", action="append", choices=POLICIES,
                    help="policy to run (repeatable; default: exact and binned)")
    ap.add_argument("--threshold", type=int, default=None,
                    help="pool threshold in bytes (default: from the log, else the env/8192)")
    ap.add_argument("--cache-limit", type=int, default=None, help="cap on cached bytes")
    ap.add_argument("--oom", choices=("free-all", "incremental"), default="free-all")
    ap.add_argument("--json", action="store_true", help="print JSON (with per-bucket stats)")
    args = ap.parse_args(argv)
    try:
        res = replay(args.log, tuple(args.policy or ("exact", "binned")), args.threshold,
                     cache_limit=args.cache_limit, oom=args.oom)
    except (OSError, ValueError) as e:
        print(f"replay: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({p: s.as_dict() for p, s in res.items()}, indent=2))
    else:
        print(format_table(res))
    return 0

