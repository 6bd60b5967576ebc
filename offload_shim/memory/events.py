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

__all__ = ["EventLog", "now_ns"]

#: Event timestamps: ``time.monotonic_ns()``.
now_ns = time.monotonic_ns


class EventLog:
    """Pending events and the file they go to.

    ``target``: a path (opened for append, closed by :meth:`close`) or a
    text file object (flushed, never closed).  ``TypeError`` for anything
    else; ``OSError`` if the path cannot be opened."""

    __slots__ = ("_pending", "_lock", "_file", "_owned", "append")

    def __init__(self, target):
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
        #: queue one event (a dict); atomic, callable under the manager's lock
        self.append = self._pending.append

    def flush(self, sync: bool = False) -> None:
        """Write the pending events; ``sync``: also flush the file."""
        pending = self._pending
        if not pending and not sync:
            return
        with self._lock:
            f = self._file
            while True:
                try:
                    ev = pending.popleft()
                except IndexError:
                    break
                if f is not None:
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
