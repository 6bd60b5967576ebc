"""Record classes without :mod:`dataclasses`: the start-up of ``offload-shim run``.

The embedded runtime of every ``offload-shim run`` imports some twenty record classes.
Made with ``@dataclass`` they cost the import of ``dataclasses`` (which imports
``inspect``, ``ast``, ``dis``, ``tokenize``...) and a generated ``__init__``, ``__repr__``
and ``__eq__`` per class, compiled with ``exec`` when the class is made: together about
a tenth of a run's start-up on this project's 2-core machines (docs/benchmarks.md).
Immutable records are therefore ``collections.namedtuple`` subclasses (``__slots__ =
()``, fields given as ``namedtuple`` field names and ``defaults``); mutable ones are
plain classes with their own ``__init__`` and :class:`FieldsRepr`, which reads
``_fields`` for the ``repr`` and ``==`` a dataclass would have.
"""

from __future__ import annotations

__all__ = ["FieldsRepr"]


class FieldsRepr:
    """``__repr__`` (``Name(a=1, b=2)``) and ``__eq__`` (same class, equal fields) from
    the class attribute ``_fields`` (names, in order); instances are unhashable, as a
    mutable dataclass's."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields)
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self._fields)

    __hash__ = None  # type: ignore[assignment]
