"""The event log of a memory manager: one JSON object per line.

The manager appends events while it holds its own lock, so their order is
the bookkeeping order; :meth:`EventLog.flush` writes them outside that lock,
one writer at a time, in that order.  The format is described in
``docs/memory-manager.md`` ("Event log and replay"); RMM's logging adaptor
and replay benchmark are the model (docs/references.md, pools compared, "statistics").
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque

_tid = threading.get_native_id

__all__ = ["EventLog", "now_ns"]

#: Event timestamps: ``time.monotonic_ns()``.
now_ns = time.monotonic_ns


class EventLog:
    """Pending events and the file they go to.

    ``target``: a path (opened for append, closed by :meth:`close`) or a
    text file object (flushed, never closed).  ``TypeError`` for anything
    else; ``OSError`` if the path cannot be opened.  ``dev``: the device
    label every event carries.

    A target object with a ``write_line(text)`` method (the runtime trace's
    :class:`~offload_shim.trace.format.TraceWriter`) is given each event as its JSON
    line with the calling thread's ``tid`` last (``threading.get_native_id()``),
    formatted when it is queued (in the thread that caused it, under the manager's
    lock: an f-string, no dict, no I/O).  Otherwise, a target with an
    ``annotate(event) -> event`` method gets each event passed through it when it is
    queued (in the thread that caused it, under the manager's lock, so it must be
    cheap and never block); one with a ``write_event(event)`` method is given the
    events instead of their JSON lines."""

    __slots__ = ("_pending", "_lock", "_file", "_owned", "_dev", "append", "_lines",
                 "_devj")

    def __init__(self, target, dev: str = ""):
        if isinstance(target, (str, os.PathLike)):
            self._file = open(target, "a", encoding="utf-8")
            self._owned = True
        elif hasattr(target, "write"):
            self._file = target
            self._owned = False
        else:
            raise TypeError("event_log must be None, a path or a text file object")
        self._pending = deque()
        self._lock = threading.Lock()
        self._dev = dev
        self._devj = json.dumps(dev)
        #: queue one event (a dict, or in line mode its JSON line); atomic, callable
        #: under the manager's lock
        self.append = self._pending.append
        #: line mode: the target's write_line, given the formatted lines
        self._lines = getattr(target, "write_line", None)
        if not callable(self._lines):
            self._lines = None
        annotate = getattr(target, "annotate", None)
        if self._lines is None and callable(annotate):
            queue = self._pending.append
            self.append = lambda ev: queue(annotate(ev))

    def record(self, op: str, size: int, ptr: int, hit: bool, extra: dict | None = None,
               reason: str | None = None) -> None:
        """Queue the event ``{"op", "size" (bytes), "ptr", "hit", **extra, "dev",
        "t_ns"[, "reason"]}`` (``t_ns``: ``time.monotonic_ns()``); callable under
        the manager's lock (no I/O)."""
        if self._lines is not None:
            # the same text as encode(ev) with "tid" added last (TraceWriter.annotate)
            tail = f',"reason":{json.dumps(reason)}' if reason is not None else ""
            if extra:
                tail = "".join(f',"{k}":{v}' if type(v) is int
                               else f',"{k}":{json.dumps(v, separators=(",", ":"))}'
                               for k, v in extra.items()) + f',"dev":{self._devj}' \
                    + f',"t_ns":{now_ns()}' + tail
            else:
                tail = f',"dev":{self._devj},"t_ns":{now_ns()}' + tail
            self.append(f'{{"op":"{op}","size":{size},"ptr":{ptr},'
                        f'"hit":{"true" if hit else "false"}{tail},"tid":{_tid()}}}\n')
            return
        ev = {"op": op, "size": size, "ptr": ptr, "hit": hit}
        if extra:
            ev.update(extra)
        ev["dev"] = self._dev
        ev["t_ns"] = now_ns()
        if reason is not None:
            ev["reason"] = reason
        self.append(ev)

    def record_many(self, op: str, rows, hit: bool, block: bool = False) -> None:
        """:meth:`record` of ``(op, size, ptr, hit)`` for each ``(size, ptr)`` of
        ``rows`` (bytes, address), in order, with ``{"block": size}`` when ``block``
        (a hit of the exact policy: the block is the request's size): the events of a
        batch (``allocate_many``'s hits, ``free_many``'s cached frees, parked frees
        and their reclaim), each stamped with its own ``t_ns``.  Callable under the
        manager's lock."""
        if self._lines is None:
            for size, ptr in rows:
                self.record(op, size, ptr, hit, {"block": size} if block else None)
            return
        h, d, t = ("true" if hit else "false"), self._devj, _tid()
        if block:
            text = "".join(f'{{"op":"{op}","size":{z},"ptr":{p},"hit":{h},"block":{z},'
                           f'"dev":{d},"t_ns":{now_ns()},"tid":{t}}}\n' for z, p in rows)
        else:
            text = "".join(f'{{"op":"{op}","size":{z},"ptr":{p},"hit":{h},'
                           f'"dev":{d},"t_ns":{now_ns()},"tid":{t}}}\n' for z, p in rows)
        if text:
            self.append(text)

    def config(self, fields: dict) -> None:
        """Queue the log's first line, ``{"op": "config", **fields, "dev", "t_ns"}``."""
        ev = {"op": "config", **fields, "dev": self._dev, "t_ns": now_ns()}
        if self._lines is not None:
            ev["tid"] = _tid()
            self.append(json.dumps(ev, separators=(",", ":")) + "\n")
            return
        self.append(ev)

    def flush(self, sync: bool = False) -> None:
        """Write the pending events; ``sync``: also flush the file."""
        pending = self._pending
        if not pending and not sync:
            return
        with self._lock:
            f = self._file
            if self._lines is not None:
                out = []
                while True:
                    try:
                        out.append(pending.popleft())
                    except IndexError:
                        break
                if out and f is not None:
                    self._lines("".join(out))
                if sync and f is not None:
                    f.flush()
                return
            put = getattr(f, "write_event", None)
            while True:
                try:
                    ev = pending.popleft()
                except IndexError:
                    break
                if put is not None:
                    put(ev)
                elif f is not None:
                    f.write(json.dumps(ev, separators=(",", ":")) + "\n")
            if sync and f is not None:
                f.flush()

    def close(self) -> None:
        """Write what is pending, then close a file opened from a path (a
        file object is flushed).  Idempotent."""
        self.flush()
        with self._lock:
            f, self._file = self._file, None
            if f is not None:
                if self._owned:
                    f.close()
                else:
                    f.flush()

    def lock(self):
        """The writer's lock (for tests that check none is left held)."""
        return self._lock
