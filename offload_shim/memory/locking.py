"""The lock of a memory manager: one token in a :class:`collections.deque`, waiters
on a :class:`threading.Condition`.

A cache hit and a cached free each take the manager's lock once around a few
dict and deque operations that never block.  On CPython 3.11 ``threading.Lock``'s
``acquire()``/``release()`` pair parses its optional arguments with
``PyArg_ParseTupleAndKeywords`` on every call, and a one-token
``queue.SimpleQueue`` (``get``/``put_nowait``, the lock before this one) costs
about half that; a one-token ``deque``'s ``pop()`` (``METH_NOARGS``) and
``append(token)`` (``METH_O``) cost about half the queue again (measured side by
side on the shared 2-core machine, thread CPU time: 52 against 114 ns per
round trip; docs/benchmarks.md "Issue 29's pool targets").  Both calls are
atomic: the GIL, and on free-threaded CPython the deque's own per-object lock.

Uncontended, taking the lock is ``pop()`` of the token and giving it back is
``append`` of it plus a read of :attr:`TokenLock.waiting`.  A thread that finds
no token (``IndexError``) calls :meth:`TokenLock.wait_token`: under the
condition's lock it counts itself in ``waiting``, tries ``pop()`` again and
sleeps on the condition (in the kernel, as with ``threading.Lock``) until a
holder that gives the token back sees ``waiting`` and calls :meth:`TokenLock.wake`.
No wake-up is lost: the waiter counts itself before its last try, and the
condition's lock keeps a ``wake`` from slipping between that try and the sleep.
A waiter interrupted while it sleeps (KeyboardInterrupt) takes nothing and
passes any wake-up it was given on.

Hot paths use the deque directly::

    try:
        tokens.pop()
    except IndexError:
        lock.wait_token()
    try:
        ...                 # never blocks
    finally:
        tokens.append(TOKEN)
        if lock.waiting:
            lock.wake()

elsewhere :class:`TokenLock` is the context manager over the same deque.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque

__all__ = ["TokenLock", "TOKEN"]

#: what the deque holds while the lock is free
TOKEN = True


class TokenLock:
    """A non-reentrant mutex: ``tokens``, a ``deque`` holding :data:`TOKEN` while
    the lock is free, and ``waiting``, the number of threads asleep for it.
    ``with lock:``, and ``acquire``/``release``/``locked`` as in
    ``threading.Lock`` (no timeout)."""

    __slots__ = ("tokens", "waiting", "asleep", "_owner", "_cond")

    def __init__(self, owner=None):
        self.tokens = deque((TOKEN,))
        self.waiting = 0
        #: ``waiting > 0`` as a bool, what the hot paths test: a jump on ``True`` or
        #: ``False`` takes the interpreter's fast path (an int calls its ``__bool__``)
        self.asleep = False
        #: None, or a weak reference to an object whose ``_asleep`` attribute is kept
        #: equal to :attr:`asleep` (a memory manager: its hot paths read one attribute
        #: of their own instead of two)
        self._owner = None if owner is None else weakref.ref(owner)
        self._cond = threading.Condition(threading.Lock())

    def _set_asleep(self, value: bool) -> None:
        """:attr:`asleep` and the owner's ``_asleep`` (the condition's lock held)."""
        self.asleep = value
        if self._owner is not None:
            owner = self._owner()
            if owner is not None:
                owner._asleep = value

    def wait_token(self) -> None:
        """Take the token, sleeping until a holder gives it back (the slow path of
        taking the lock, after ``tokens.pop()`` found none)."""
        cond = self._cond
        with cond:
            self.waiting += 1
            self._set_asleep(True)
            try:
                while True:
                    try:
                        self.tokens.pop()
                        return
                    except IndexError:
                        pass
                    try:
                        cond.wait()
                    except BaseException:
                        cond.notify()       # the wake-up may have been this one's
                        raise
            finally:
                self.waiting -= 1
                self._set_asleep(self.waiting > 0)

    def wake(self) -> None:
        """Wake one thread asleep in :meth:`wait_token` (the token was given back)."""
        with self._cond:
            self._cond.notify()

    def __enter__(self):
        try:
            self.tokens.pop()
        except IndexError:
            self.wait_token()
        return self

    def __exit__(self, *exc):
        self.tokens.append(TOKEN)
        if self.waiting:
            self.wake()

    def acquire(self, blocking: bool = True) -> bool:
        try:
            self.tokens.pop()
        except IndexError:
            if not blocking:
                return False
            self.wait_token()
        return True

    def release(self) -> None:
        if self.tokens:
            raise RuntimeError("release of an unlocked TokenLock")
        self.tokens.append(TOKEN)
        if self.waiting:
            self.wake()

    def locked(self) -> bool:
        return not self.tokens
