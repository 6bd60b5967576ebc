"""Replay a recorded event log against pool policies (RMM's replay
benchmark and logging adaptor in spirit, docs/references.md, pools compared "statistics").

An event log is what ``MemoryManager(event_log=...)`` writes: JSON lines.
Only the caller's operations are replayed: ``alloc`` events with a non-zero
``ptr`` (hits and misses alike), ``free`` events and ``free_failed`` events (a free whose ``backend_free`` raised: the block is
live again); pointers are matched by ``(dev, ptr)``.  A ``free`` with
``"reason": "drain"`` (a block the caller still held when its device was
deinitialised) ends the pointer's life in the log, so the address may be
handed out again, but is not replayed as a free: the caller leaked the
block, and the replay pool keeps it in use, as the recorded pool did until
its drain.  Evictions, trims and
OOM retries in the log are outcomes of the recorded policy and are
recomputed, not replayed.  Every event is checked first: an unknown ``op``
or a missing or non-integer ``size``/``ptr`` is a ``ValueError`` naming the
event, never a silently replayed zero.
"""

from __future__ import annotations

import json
import os
import sys

from .fake import FakeBackend
from .manager import MAX_SIZE, POLICIES, PTR_LIMIT, MemoryManager, read_threshold_env

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


#: ops a MemoryManager writes
OPS = ("config", "alloc", "free", "free_failed", "evict", "trim", "oom_retry")
# fields each op must carry (others are checked when present)
_REQUIRED = {"alloc": ("size", "ptr"), "free": ("ptr",), "free_failed": ("ptr", "size"),
             "evict": ("ptr",), "trim": ("ptr",), "oom_retry": ()}
_LIMITS = {"size": MAX_SIZE + 1, "ptr": PTR_LIMIT, "requested": MAX_SIZE + 1,
           "block": PTR_LIMIT, "threshold": MAX_SIZE + 1}


def _check_event(n: int, ev: dict) -> None:
    """ValueError naming event ``n`` if ``ev`` is not a well-formed event."""
    op = ev.get("op")
    if op not in OPS:
        raise ValueError(f"event {n}: unknown op {op!r} (expected one of {', '.join(OPS)})")
    for name in _REQUIRED.get(op, ()):
        if name not in ev:
            raise ValueError(f"event {n}: {op!r} event without {name!r}: {ev!r}")
    for name, limit in _LIMITS.items():
        if name not in ev or (name == "threshold" and op != "config"):
            continue
        v = ev[name]
        if type(v) is not int or not 0 <= v < limit:
            raise ValueError(f"event {n}: {op!r} event has {name}={v!r}, expected an int "
                             f"in [0, {limit})")
    if "dev" in ev and not isinstance(ev["dev"], str):
        raise ValueError(f"event {n}: 'dev' must be a string, got {ev['dev']!r}")


def replay(events_path, policies=("exact", "binned"), threshold=None, *, cache_limit=None,
           oom="free-all", bins_per_pow2=8) -> dict:
    """Run the caller operations of an event log against each policy with a
    fake unlimited backend (:class:`~offload_shim.memory.fake.FakeBackend`).

    ``threshold``: bytes; ``None`` takes it from the log's ``config`` event,
    else from :func:`read_threshold_env`.  ``cache_limit``, ``oom``,
    ``bins_per_pow2`` are passed to each :class:`MemoryManager`.

    Returns ``{policy: PoolStats}``, snapshots taken after the last event
    (before the replay managers are drained).  Raises ``ValueError`` for an
    unknown policy or a malformed log: a line that is not a JSON object, an
    unknown ``op``, a missing or non-integer ``size``/``ptr``, an ``alloc``
    of a pointer that is still live in the log.

    A ``free`` with ``"reason": "drain"`` (the recorded device was
    deinitialised while the caller held the block) forgets the pointer
    without freeing it in the replay (a leak stays in use); a
    ``free_failed`` allocates the block again (its ``requested`` size).
    """
    events = list(read_events(events_path))
    for n, ev in enumerate(events, 1):
        _check_event(n, ev)
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
                live[k] = alloc(ev["size"])
            elif op == "free":
                p = live.pop((ev.get("dev", ""), ev["ptr"]), None)
                if p is not None and ev.get("reason") != "drain":
                    free(p)
            elif op == "free_failed":
                rptr = ev["ptr"]
                k = (ev.get("dev", ""), rptr)
                if k in live:
                    raise ValueError(f"event {n}: free_failed of {rptr:#x}, still live in "
                                     f"the log")
                live[k] = alloc(ev.get("requested", ev["size"]))
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
    import argparse                 # only for the command line (start-up of the runtime)
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

