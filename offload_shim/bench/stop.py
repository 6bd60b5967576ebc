"""Stopping ``offload-shim bench`` at a safe point.

A Ctrl-C (SIGINT) or SIGTERM raised as ``KeyboardInterrupt`` wherever the
main thread happens to be can land between a lock's ``acquire()`` and its
``try`` in the pool's hot path, or while the threads of a round are being
started, and then the clean-up blocks.  While :func:`deferred_signals` is
active the signal only records itself; the workloads call :func:`check`
between blocks (a round, a chunk, a batch: milliseconds), which raises
:class:`Interrupted` there, so that every row is closed and every thread
joined.  A second signal raises at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading

__all__ = ["Interrupted", "deferred_signals", "check", "requested"]


class Interrupted(KeyboardInterrupt):
    """A stop asked for by a signal; ``.signum`` is the signal number."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _State:
    signum: int | None = None


_state = _State()


def _handler(signum, frame):
    if _state.signum is not None:          # asked twice: stop now
        raise Interrupted(signum)
    _state.signum = signum


def requested() -> bool:
    """True once a signal asked the run to stop (read by worker threads)."""
    return _state.signum is not None


def check() -> None:
    """Raise :class:`Interrupted` if a signal asked the run to stop."""
    if _state.signum is not None:
        raise Interrupted(_state.signum)


@contextlib.contextmanager
def deferred_signals(signums=(signal.SIGINT, signal.SIGTERM)):
    """Within the block, ``signums`` only record a stop request (see the
    module).  Outside the main thread this does nothing (Python delivers
    signals to the main thread only).  The previous handlers are restored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _state.signum = None
    old = {s: signal.signal(s, _handler) for s in signums}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        _state.signum = None
