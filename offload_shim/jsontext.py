"""JSON text read and written by the C half of the standard library's json module
(``_json``: the scanner and string encoder ``json.loads`` and ``json.dumps`` use
themselves), without importing :mod:`json`.

Importing :mod:`json` imports ``json.decoder``, ``json.scanner`` and ``json.encoder``,
which compile regular expressions at import (``re``, whose compiler is Python, and
``enum``): some 6-8 ms of CPU in each interpreter of every ``offload-shim run`` (the
launcher writes ``OFFLOAD_SHIM_RUN_OPTIONS``, the program's runtime reads it and the
stored verdicts of :mod:`offload_shim.safety.verdicts`).  :func:`loads` and
:func:`dumps` give what ``json.loads`` and ``json.dumps`` (default arguments) give --
``tests/test_run_startup.py`` compares them on generated values and texts -- and hand
anything else to :mod:`json` itself: text the scanner does not take whole (so every
error is json's own ``JSONDecodeError``, a ValueError), values other than ``None``,
``bool``, ``int``, ``str``, lists, tuples and dicts with ``str`` keys (floats, for one),
and Pythons without ``_json``.
"""

from __future__ import annotations

try:
    import _json
except ImportError:        # pragma: no cover - CPython always has it
    _json = None

__all__ = ["dumps", "loads"]

_WS = " \t\n\r"            # JSON's whitespace (RFC 8259, section 2), json.decoder's too


class _Context:
    """What ``_json.make_scanner`` reads from a ``json.JSONDecoder`` made with the
    default arguments (``json.decoder.JSONDecoder.__init__``, CPython 3.11)."""
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"),
                      "NaN": float("nan")}.__getitem__


_scan = _json.make_scanner(_Context()) if _json is not None else None


def loads(text: str):
    """``json.loads(text)`` for a ``str``: the value; ``json.JSONDecodeError`` (a
    ValueError) for text that is not one JSON value."""
    if _scan is not None and isinstance(text, str):
        start = len(text) - len(text.lstrip(_WS))
        try:
            value, end = _scan(text, start)
        except Exception:   # noqa: BLE001 - json.loads below raises json's own error
            # StopIteration: no value at start.  Text that is bad further on: the
            # scanner raises json.decoder.JSONDecodeError only once json.decoder is
            # imported (_json.c raise_errmsg), a SystemError before
            pass
        else:
            if end == len(text) or not text[end:].strip(_WS):
                return value
    import json
    return json.loads(text)                # raises, or a text of a kind not handled here


class _Other(Exception):
    """A value :func:`_encode` leaves to ``json.dumps``."""


def dumps(value) -> str:
    """``json.dumps(value)`` (default arguments: ``", "`` and ``": "`` separators, ASCII
    only, keys in the dict's order)."""
    if _json is not None:
        try:
            return _encode(value)
        except (_Other, RecursionError):
            pass
    import json
    return json.dumps(value)


def _encode(v) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return _json.encode_basestring_ascii(v)
    if isinstance(v, int):
        return int.__repr__(v)                 # as json.encoder (an IntEnum too)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join([_encode(x) for x in v]) + "]"
    if isinstance(v, dict):
        parts = []
        for k, x in v.items():
            if not isinstance(k, str):
                raise _Other()
            parts.append(_json.encode_basestring_ascii(k) + ": " + _encode(x))
        return "{" + ", ".join(parts) + "}"
    raise _Other()
