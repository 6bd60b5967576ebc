"""The trace file of ``offload-shim run --record``: versioned JSON Lines.

One JSON object per line, each with an ``op``.  The first line is the header::

    {"op": "trace", "format": "offload-shim-trace", "version": 2, "clock": "monotonic",
     "pid": 1234, "argv": [...], "t_ns": ...}

then the events in the order they were written (per thread, the order they happened;
``t_ns`` is ``time.monotonic_ns()``, ``tid`` the kernel thread id,
``threading.get_native_id()``), and, when the program ended normally, a last ``end``
line.  A trace cut short (the program crashed or was killed) has no ``end`` line and
possibly a partial last line: :func:`read_trace` skips that line and says so
(``Trace.truncated``).  Every op and field is listed in ``docs/trace-format.md``.

Writers: :class:`TraceWriter` writes to an unbuffered file descriptor under a lock:
an event outside a construct with one ``write`` as it happens, the events of one
construct (and the construct's own line) together in one ``write`` when the construct
returns (:meth:`TraceWriter.hold` / :meth:`~TraceWriter.release`).  Lines of threads
never interleave; what a crash or ``SIGKILL`` loses is the events of the constructs in
flight (at most one per thread).  The file order is therefore per thread; across
threads, order the events by ``t_ns`` (one clock; the memory manager stamps its
events under its lock, so their ``t_ns`` order is its bookkeeping order), as
:mod:`offload_shim.trace.replay` does.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter

__all__ = ["FORMAT", "VERSION", "OPS", "POOL_OPS", "CHECK_OPS", "TraceError", "TraceWriter",
           "Trace", "encode", "read_trace", "summary"]

FORMAT = "offload-shim-trace"
#: the version this package writes and reads (a reader refuses a larger one); version 2
#: added the ``step`` and ``outcome`` lines of ``offload-shim check``'s traces
VERSION = 2

#: the memory manager's event-log ops (``docs/memory-manager.md``), as they appear in a
#: trace (each with ``dev``, ``t_ns`` and ``tid``)
POOL_OPS = ("config", "alloc", "free", "free_failed", "evict", "trim", "oom_retry")
#: the ops of a trace of ``offload-shim check`` (header ``"source": "check"``): the steps
#: of a lifecycle-machine sequence and how it ended (:mod:`offload_shim.testing.sequences`)
CHECK_OPS = ("step", "outcome")
#: every op of version 2
OPS = ("trace", "end", "image_register", "image_unregister", "device_init",
       "device_deinit", "construct", "copy", "launch") + POOL_OPS + CHECK_OPS


_INT, _NUM, _STR, _NONE = (int,), (int, float), (str,), (type(None),)
#: op -> field -> the JSON types it may have, for the fields that readers use (``summary``,
#: :mod:`offload_shim.trace.replay`, :mod:`offload_shim.memory.replay`); required unless
#: marked optional below.  Other fields are kept as they are.
_FIELDS = {
    "alloc": {"size": _INT, "ptr": _INT + _NONE},
    "free": {"size": _INT, "ptr": _INT},
    "copy": {"dir": _STR, "size": _INT, "tgt": _INT},
    "launch": {"kernel": _STR},
    "construct": {"kind": _STR},
}
#: fields every event may carry, checked when present
_OPTIONAL = {"t_ns": _INT, "tid": _INT, "dev": _STR + _NONE, "dur_ns": _NUM,
             "hit": (bool,), "requested": _INT, "reason": _STR, "nargs": _INT}


def _field_problem(ev: dict) -> str | None:
    """Why a known op's line cannot be read (a field missing or of the wrong JSON type)."""
    for name, types in _FIELDS.get(ev["op"], {}).items():
        if name not in ev:
            return f"{ev['op']} without {name!r}"
        v = ev[name]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            return f"{ev['op']}: {name} is {v!r}"
    for name, types in _OPTIONAL.items():
        v = ev.get(name)
        if v is not None and (not isinstance(v, types)
                              or (isinstance(v, bool) and bool not in types)):
            return f"{ev['op']}: {name} is {v!r}"
    if ev["op"] in ("alloc", "free", "copy") and ev["size"] < 0:
        return f"{ev['op']}: negative size {ev['size']}"
    return None


class TraceError(ValueError):
    """A file that is not a trace of a version this package reads, or a malformed
    line (the message names the line)."""


class TraceWriter:
    """Writes a trace to ``path`` (created or truncated; ``OSError`` if it cannot be;
    ``exclusive``: if ``path`` exists, ``path.<pid>`` instead).

    :meth:`event` writes one event line at once (one ``os.write`` of the whole line:
    nothing is buffered in the process, so a crash or ``SIGKILL`` loses at most the
    line in flight); the memory manager's
    :class:`~offload_shim.memory.events.EventLog` formats its events itself and hands
    their lines to :meth:`write_line` (:meth:`line`).
    Thread-safe."""

    def __init__(self, path, header: dict | None = None, *, exclusive: bool = False):
        self.path = os.fspath(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
        if exclusive:
            # another process of the same run (a child that offloads too) made ``path``
            # first: this one writes ``path.<pid>``
            try:
                self._fd = os.open(self.path, flags | os.O_EXCL, 0o644)
            except FileExistsError:
                self.path = f"{self.path}.{os.getpid()}"
                self._fd = os.open(self.path, flags | os.O_TRUNC, 0o644)
        else:
            self._fd = os.open(self.path, flags | os.O_TRUNC, 0o644)
        self._base = os.fspath(path)
        self._pid = os.getpid()
        self._same = _fork_flag()
        self._header = dict(header or {})
        self._lock = threading.Lock()
        self._local = _Held()
        self.lines = 0
        self._head()

    def _head(self, **extra) -> None:
        head = {"op": "trace", "format": FORMAT, "version": VERSION, "clock": "monotonic",
                "pid": os.getpid(), "t_ns": time.monotonic_ns()}
        head.update(self._header)
        head.update(extra)
        self.event(head)

    def _forked(self) -> None:
        """(``_lock`` held.)  This process is a ``fork`` of the one that opened the
        trace (a program that forks after its runtime started: the child inherits the
        recorder and the descriptor): its lines go to ``<path>.<pid>`` with a header
        of its own (``forked_from``), never into the parent's file, whose lines would
        mix two processes' threads and addresses."""
        parent, self._pid = self._pid, os.getpid()
        self._same = _fork_flag()
        self._fd = -1                       # the parent's descriptor: left to it
        self.path = f"{self._base}.{self._pid}"
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                               | os.O_CLOEXEC, 0o644)
        except OSError:
            return                          # the child's lines are dropped, as after close
        self.lines = 0
        head = {"op": "trace", "format": FORMAT, "version": VERSION, "clock": "monotonic",
                "pid": self._pid, "t_ns": time.monotonic_ns(),
                "tid": threading.get_native_id()}
        head.update(self._header)
        head["forked_from"] = parent
        self._write_locked(encode(head).encode("utf-8"), 1)

    def event(self, ev: dict) -> None:
        """Write one event (a dict with ``op``; ``tid`` and ``t_ns`` are added when
        missing); held back while this thread is inside :meth:`hold`."""
        if "tid" not in ev:
            ev["tid"] = threading.get_native_id()
        if "t_ns" not in ev:
            ev["t_ns"] = time.monotonic_ns()
        self.line(encode(ev))

    #: :class:`~offload_shim.memory.events.EventLog` writes its events through this
    write_event = event

    def line(self, text: str) -> None:
        """Write one encoded event line (with its newline), or keep it for
        :meth:`release` while this thread holds."""
        buf = self._local.buf
        if buf is not None:
            buf.append(text)
        else:
            self.write(text)

    #: :class:`~offload_shim.memory.events.EventLog` hands its lines (formatted by it,
    #: ``tid`` last) to this
    write_line = line

    def hold(self) -> list:
        """Keep this thread's lines until :meth:`release` (one construct's events go
        to the file in one ``write``).  Nests.  Returns the list the lines are kept
        in (a caller may append complete lines to it itself)."""
        loc = self._local
        buf = loc.buf
        if buf is None:
            loc.buf = buf = []
            loc.depth = 1
        else:
            loc.depth += 1
        return buf

    def release(self) -> None:
        """Write what this thread held, in one ``write`` (the outermost release)."""
        loc = self._local
        loc.depth -= 1
        if loc.depth:
            return
        buf, loc.buf = loc.buf, None
        if buf:
            self.write("".join(buf))

    def write(self, text: str) -> None:
        """Write complete lines (``text`` ends with a newline)."""
        data = text.encode("utf-8")
        with self._lock:
            if self._fd < 0:
                return                              # closed: late events are dropped
            if not (self._same is not None and self._same[0]) \
                    and os.getpid() != self._pid:
                self._forked()
                if self._fd < 0:
                    return
            self._write_locked(data, text.count("\n"))

    def _write_locked(self, data: bytes, lines: int) -> None:
        fd = self._fd
        while data:
            n = os.write(fd, data)
            data = data[n:]
        self.lines += lines

    def flush(self) -> None:
        """Nothing is buffered (the file-object face of the memory manager's log)."""

    @staticmethod
    def annotate(ev: dict) -> dict:
        """Stamp a memory-manager event with the calling thread (``tid``)."""
        ev["tid"] = threading.get_native_id()
        return ev

    def close(self, end: dict | None = None) -> None:
        """Write the ``end`` line (with ``end``'s fields) and close.  Idempotent."""
        if self._fd < 0:
            return
        ev = {"op": "end"}
        ev.update(end or {})
        self.event(ev)
        with self._lock:
            fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def _fork_flag():
    """A one-byte flag that reads 1 in this process and 0 in a ``fork`` of it, C
    ``fork()`` included (an anonymous page with ``madvise(MADV_WIPEONFORK)``, Linux
    4.14+): the writer's test for "am I a forked child" without a ``getpid`` system
    call per write.  None where the kernel or Python lacks it (then ``getpid``)."""
    import mmap
    import sys
    # <linux/mman.h> MADV_WIPEONFORK (18); Python's mmap module names it only when
    # its build headers had it
    advice = getattr(mmap, "MADV_WIPEONFORK", 18 if sys.platform == "linux" else None)
    if advice is None:
        return None
    try:
        flag = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        flag.madvise(advice)
    except (AttributeError, OSError, ValueError):
        return None
    flag[0] = 1
    return flag


class _Held(threading.local):
    """Per thread: the lines held back (:meth:`TraceWriter.hold`), or None; how
    deep the holds nest."""

    buf = None
    depth = 0


_STR: dict = {}          # str -> its JSON text (labels, names, ops: few distinct)
_dumps = json.JSONEncoder(separators=(",", ":")).encode


def encode(ev: dict) -> str:
    """``ev`` as one JSON line (with its newline): ints, bools, None and strings
    formatted directly (the few distinct strings of a trace cached), anything else
    by :mod:`json`.  Same text as ``json.dumps(ev, separators=(",", ":"))``;
    several times cheaper for the flat events of a trace."""
    parts = []
    add = parts.append
    for k, v in ev.items():
        t = type(v)
        if t is int:
            add(f'"{k}":{v}')
        elif t is str:
            j = _STR.get(v)
            if j is None:
                j = _dumps(v)
                if len(_STR) < 4096:
                    _STR[v] = j
            add(f'"{k}":{j}')
        elif v is None:
            add(f'"{k}":null')
        elif v is True:
            add(f'"{k}":true')
        elif v is False:
            add(f'"{k}":false')
        else:
            add(f'"{k}":{_dumps(v)}')
    return "{" + ",".join(parts) + "}\n"


class Trace:
    """A trace read by :func:`read_trace`: ``header`` (the first line), ``events``
    (the other lines, without ``end``), ``end`` (the ``end`` line or None) and
    ``truncated`` (the last line was cut short and skipped)."""

    __slots__ = ("header", "events", "end", "truncated")

    def __init__(self, header, events, end, truncated):
        self.header, self.events, self.end, self.truncated = header, events, end, truncated

    @property
    def complete(self) -> bool:
        """The program's runtime stopped normally (an ``end`` line)."""
        return self.end is not None


def read_trace(path) -> Trace:
    """Read a trace file.  Raises ``OSError`` (cannot open), :class:`TraceError`: not
    a trace (first line), a version above :data:`VERSION`, a line that is not a JSON
    object with a known ``op``, or whose fields that readers use are missing or of the
    wrong type (``copy`` without ``tgt``, a ``size`` that is a string or negative...);
    the last line of a cut-short trace is skipped instead."""
    with open(path, "rb") as f:
        raw = f.read()
    lines = raw.split(b"\n")
    truncated = False
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        truncated = True                # no newline at the end: the line in flight
        lines.pop()
    if not lines:
        raise TraceError(f"{path}: empty file, not an {FORMAT} trace")
    try:
        header = json.loads(lines[0])
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise TraceError(f"{path}: line 1 is not an {FORMAT} header")
    version = header.get("version")
    if type(version) is not int or not 1 <= version <= VERSION:
        raise TraceError(f"{path}: trace version {version!r}; this offload_shim reads "
                         f"versions 1 to {VERSION}")
    events, end = [], None
    for n, line in enumerate(lines[1:], 2):
        try:
            ev = json.loads(line)
        except ValueError as exc:
            raise TraceError(f"{path}: line {n}: not JSON ({exc})") from None
        if not isinstance(ev, dict) or ev.get("op") not in OPS:
            raise TraceError(f"{path}: line {n}: not an event of version {VERSION}: "
                             f"{line[:80]!r}")
        bad = _field_problem(ev)
        if bad:
            raise TraceError(f"{path}: line {n}: {bad}")
        if ev["op"] == "end":
            end = ev
        else:
            events.append(ev)
    return Trace(header, events, end, truncated)


def summary(trace: Trace) -> dict:
    """Counts of a trace: ``allocs`` (caller allocations: ``alloc`` events with a
    pointer), ``frees`` (caller frees, drains excluded), ``copies``, ``copy_bytes``,
    ``launches``, ``bytes`` (bytes requested by the allocations), ``constructs``,
    ``threads`` (distinct ``tid``), ``devices`` (distinct ``dev`` labels) and ``ops``
    (events per op)."""
    ops = Counter()
    allocs = frees = copies = launches = nbytes = copy_bytes = 0
    tids, devs = set(), set()
    for ev in trace.events:
        op = ev["op"]
        ops[op] += 1
        if "tid" in ev:
            tids.add(ev["tid"])
        if op == "alloc" and ev.get("ptr"):
            allocs += 1
            nbytes += ev.get("size", 0)
            devs.add(ev.get("dev"))
        elif op == "free" and ev.get("reason") != "drain":
            frees += 1
        elif op == "copy":
            copies += 1
            copy_bytes += ev.get("size", 0)
        elif op == "launch":
            launches += 1
    return {"allocs": allocs, "frees": frees, "copies": copies, "copy_bytes": copy_bytes,
            "launches": launches, "bytes": nbytes, "constructs": ops["construct"],
            "threads": len(tids), "devices": len(devs - {None}), "ops": dict(ops)}
