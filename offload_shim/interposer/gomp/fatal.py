"""libgomp's fatal errors: :class:`GompFatal` stands for every ``gomp_fatal`` condition
(GCC 12 ``libgomp/error.c`` ``gomp_fatal`` / ``gomp_verror``: ``"\\nlibgomp: "``, the
message and ``"\\n"`` on stderr, then exit status 1), and :func:`fmt_p` writes the ``%p``
of those messages as glibc's ``printf`` does (``(nil)`` for 0).

Raised by the mapping (:mod:`.refcount`, :mod:`.mapvars`, :mod:`.mapping`), the host
device (:mod:`.device`) and the constructs (:mod:`.target`) alike, so it sits below them
all and imports nothing.
"""

from __future__ import annotations

_U64 = (1 << 64) - 1


def fmt_p(v: int) -> str:
    """``%p`` as glibc's printf writes it."""
    v &= _U64
    return "(nil)" if v == 0 else f"{v:#x}"


class GompFatal(Exception):
    """A ``gomp_fatal`` condition of libgomp; ``message`` is its text (the C side prints
    ``"\\nlibgomp: " + message + "\\n"`` and exits with status 1)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


__all__ = ["GompFatal", "fmt_p"]
