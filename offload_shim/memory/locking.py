"""The lock of a memory manager: one token in a :class:`queue.SimpleQueue`.

A cache hit and a cached free each take the manager's lock once around a few
dict operations that never block.  On CPython 3.11 ``threading.Lock``'s
``acquire()``/``release()`` pair costs about 60 ns, a sixth of a whole
alloc+free hit pair: ``acquire`` parses its optional arguments with
``PyArg_ParseTupleAndKeywords`` on every call.  A ``SimpleQueue`` holding one
token is a mutex too (``get`` takes the token, blocking while another thread
holds it; ``put`` gives it back and never blocks), its C methods use the
faster argument clinic, and the pair costs about half as much
(docs/benchmarks.md has the measured hit pairs); ``put_nowait`` (one argument:
``METH_O``) gives the token back without ``put``'s keyword parsing (counted under
cachegrind: 15 of a hit pair's 8,155 machine instructions).  Waiters block in the
kernel as with ``threading.Lock``; a ``get`` interrupted while waiting
(KeyboardInterrupt) takes nothing.

Hot paths use the queue directly::

    q.get()
    try:
        ...                 # never blocks
    finally:
        q.put_nowait(TOKEN)

elsewhere :class:`TokenLock` is the context manager over the same queue.
"""

from __future__ import annotations

import queue

__all__ = ["TokenLock", "TOKEN"]

#: what the queue holds while the lock is free
TOKEN = True


class TokenLock:
    """A non-reentrant mutex over a one-token ``SimpleQueue`` (``queue``).
    ``with lock:``, and ``acquire``/``release``/``locked`` as in
    ``threading.Lock`` (no timeout)."""

    __slots__ = ("queue",)

    def __init__(self):
        self.queue = queue.SimpleQueue()
        self.queue.put(TOKEN)

    def __enter__(self):
        self.queue.get()
        return self

    def __exit__(self, *exc):
        self.queue.put(TOKEN)

    def acquire(self, blocking: bool = True) -> bool:
        try:
            self.queue.get(blocking)
        except queue.Empty:
            return False
        return True

    def release(self) -> None:
        if not self.queue.empty():
            raise RuntimeError("release of an unlocked TokenLock")
        self.queue.put(TOKEN)

    def locked(self) -> bool:
        return self.queue.empty()
