"""libomptarget's diagnostics, line for line, in the words of the program's release.

Mirrors ``openmp/libomptarget/include/Debug.h`` and ``SourceInfo.h`` (LLVM 16;
``offload/include/Shared/Debug.h`` in 19.1 and 22.1): ``MESSAGE``
(``Libomptarget message: ...``), ``FAILURE_MESSAGE`` / ``REPORT`` of a release build
(``Libomptarget error: ...``), ``INFO`` (``Libomptarget device N info: ...`` when the bit
is set in ``LIBOMPTARGET_INFO`` or ``__tgt_set_info_flag``), ``FATAL_MESSAGE``
(``Libomptarget fatal error N: ...``; the caller aborts), ``SourceInfo`` (the
``;file;function;line;col;;`` strings of ``ident_t.psource`` and of map names) and
``getNameFromMapping``.  Users and test suites grep these lines, so their text is
libomptarget's own; everything goes to stderr, unbuffered.  The runtime's name
(``Libomptarget`` / ``omptarget``) and how ``LIBOMPTARGET_DEBUG`` is read come from the
:class:`~offload_shim.interposer.llvm.profile.RuntimeProfile` the interposer chose
(:func:`set_profile`); until one is chosen, 16's.
"""

from __future__ import annotations

import os
import sys
import threading

from ...abi import interposer as _abi
from .profile import LIBOMPTARGET_16, RuntimeProfile

# OMP_INFOTYPE_* (LLVM 16 include/Debug.h)
INFO_KERNEL_ARGS = 0x0001
INFO_MAPPING_EXISTS = 0x0002
INFO_DUMP_TABLE = 0x0004
INFO_MAPPING_CHANGED = 0x0008
INFO_PLUGIN_KERNEL = 0x0010
INFO_DATA_TRANSFER = 0x0020
INFO_EMPTY_MAPPING = 0x0040    # defined; libomptarget 16 prints nothing for it
INFO_ALL = 0xFFFFFFFF

_level: int | None = None
_debug: int | None = None               # LIBOMPTARGET_DEBUG, read at the first INFO
_lock = threading.Lock()
_profile: RuntimeProfile = LIBOMPTARGET_16
_name = _profile.name                   # GETNAME(TARGET_NAME)


def set_profile(profile: RuntimeProfile) -> None:
    """The release whose words the lines are in (the runtime's name,
    ``RuntimeProfile.name``) and whose ``LIBOMPTARGET_DEBUG`` rule applies
    (``RuntimeProfile.debug_env``).  Raises TypeError for anything but a
    :class:`RuntimeProfile`."""
    global _profile, _name
    if not isinstance(profile, RuntimeProfile):
        raise TypeError(f"set_profile needs a RuntimeProfile, not {type(profile).__name__}")
    _profile, _name = profile, profile.name


def profile() -> RuntimeProfile:
    """The profile set by :func:`set_profile` (16's until one is set)."""
    return _profile


def runtime_name() -> str:
    """``GETNAME(TARGET_NAME)`` of the runtime the program links (:func:`set_runtime_name`)."""
    return _name


class StoiError(ValueError):
    """What ``std::stoi`` throws: ``kind`` is ``invalid_argument`` (no digits) or
    ``out_of_range`` (outside a 32-bit ``int``)."""

    def __init__(self, kind: str):
        super().__init__(f"std::{kind}: stoi")
        self.kind = kind


def stoi(text: str) -> int:
    """``std::stoi(text)`` (base 10, ``strtol`` rules): leading white space, an
    optional sign, decimal digits, the rest ignored (``"0x40"`` is 0, ``"64abc"`` is
    64).  Raises :class:`StoiError` (``invalid_argument``) when there are no digits,
    (``out_of_range``) when the value does not fit a 32-bit ``int``."""
    # scanned by hand, not with a regular expression: compiling one on the first call
    # (LIBOMPTARGET_INFO is read at every start) cost more than the rest of this module
    n = len(text)
    i = 0
    while i < n and text[i] in " \t\n\v\f\r":
        i += 1
    j = i + 1 if i < n and text[i] in "+-" else i
    k = j
    while k < n and "0" <= text[k] <= "9":
        k += 1
    if k == j:
        raise StoiError("invalid_argument")
    value = int(text[i:k])
    if not -(1 << 31) <= value < (1 << 31):
        raise StoiError("out_of_range")
    return value


def _stoi(text: str) -> int:
    """:func:`stoi`, 0 where it would throw (the line and column fields of
    ``SourceInfo``, which libomptarget reads with ``std::stoi`` of text clang wrote)."""
    try:
        return stoi(text)
    except StoiError:
        return 0


def _terminate(exc: StoiError) -> None:
    """An exception nothing catches in libomptarget: the C++ runtime's
    ``std::terminate`` message, then ``abort()`` (SIGABRT)."""
    _write(f"terminate called after throwing an instance of 'std::{exc.kind}'\n"
           f"  what():  stoi\n")
    os.abort()


def _read_level(name: str) -> int:
    """The environment variable ``name`` through ``std::stoi`` as an unsigned 32-bit
    value, 0 when unset; a value ``std::stoi`` rejects ends the program
    (:func:`_terminate`), as LLVM 16 ``include/Debug.h`` ``getInfoLevelInternal`` and
    ``getDebugLevel`` do."""
    raw = os.environ.get(name)
    try:
        return (stoi(raw) & 0xFFFFFFFF) if raw is not None else 0
    except StoiError as exc:
        _terminate(exc)


def info_level() -> int:
    """The INFO bit mask: ``LIBOMPTARGET_INFO`` read once, at the first use, with
    ``std::stoi`` as ``getInfoLevelInternal`` (LLVM 16 ``include/Debug.h``) does, kept
    as an unsigned 32-bit value (-1 sets every bit); or the last
    ``__tgt_set_info_flag``.  A value ``std::stoi`` rejects (no digits: ``abc``, the
    empty string; beyond 32 bits: ``4294967295``) ends the program as libomptarget 16
    does: ``terminate called after throwing an instance of 'std::invalid_argument'``
    (or ``'std::out_of_range'``), SIGABRT -- at the first construct, API copy or the
    device teardown at exit that reads the level."""
    global _level
    if _level is None:
        with _lock:
            if _level is None:
                _level = _read_level("LIBOMPTARGET_INFO")
    return _level


def debug_level() -> int:
    """``getDebugLevel()``: ``LIBOMPTARGET_DEBUG`` read once, at the first INFO
    statement, with ``std::stoi`` (a value it rejects ends the program as in
    :func:`info_level`), as an unsigned 32-bit value.  libomptarget 16's and 19.1's
    ``INFO`` macro prints nothing when it is not 0: its debug output (``DP``)
    replaces the INFO lines, and the Debian build has none (a release build), so
    ``LIBOMPTARGET_DEBUG=1`` silences every ``Libomptarget device N info:`` line.
    Always 0 under a release that does neither (``RuntimeProfile.debug_env``:
    22.1)."""
    global _debug
    if not _profile.debug_env:
        return 0
    if _debug is None:
        with _lock:
            if _debug is None:
                _debug = _read_level("LIBOMPTARGET_DEBUG")
    return _debug


def tracing_possible() -> bool:
    """Whether INFO lines may be printed, without reading ``LIBOMPTARGET_INFO`` (or
    ``LIBOMPTARGET_DEBUG``) the way :func:`info_level` does (a value ``std::stoi``
    rejects counts as tracing: the construct that reads it first must take the
    general code, which ends the program there)."""
    if _debug is None and _profile.debug_env:
        try:
            stoi(os.environ.get("LIBOMPTARGET_DEBUG", "0"))
        except StoiError:
            return True
    if _level is not None:
        return _level != 0
    raw = os.environ.get("LIBOMPTARGET_INFO")
    if raw is None:
        return False
    try:
        return stoi(raw) != 0
    except StoiError:
        return True


def set_info_level(level: int) -> None:
    """``__tgt_set_info_flag``."""
    global _level
    _level = int(level) & 0xFFFFFFFF


def _write(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def message(text: str) -> None:
    """``MESSAGE``: ``Libomptarget message: TEXT``."""
    _write(f"{_name} message: {text}\n")


def report(text: str) -> None:
    """``REPORT`` (release build) = ``FAILURE_MESSAGE``: ``Libomptarget error: TEXT``."""
    _write(f"{_name} error: {text}\n")


def info(flags: int, device: int, text: str) -> None:
    """``INFO``: ``Libomptarget device N info: TEXT`` when a bit of ``flags`` is set
    and :func:`debug_level` is 0."""
    if debug_level():
        return
    if info_level() & flags:
        _write(f"{_name} device {device} info: {text}\n")


def fatal(num: int, text: str, prefix: str = "") -> None:
    """``FATAL_MESSAGE0``'s line (the C side aborts afterwards); ``prefix`` is the
    ``file:line:col: `` of ``handleTargetOutcome`` when known."""
    _write(f"{prefix}{_name} fatal error {num}: {text}\n")


def own(text: str) -> None:
    """A line of offload_shim's own, never libomptarget's: ``offload_shim: TEXT`` (what
    the Python runtime does differently from the real one and the user should know)."""
    _write(f"offload_shim: {text}\n")


def ptr(value: int | None) -> str:
    """``DPxMOD`` of a pointer (``0x%016lx``)."""
    return f"0x{(value or 0) & 0xFFFFFFFFFFFFFFFF:016x}"


class SourceInfo:
    """``SourceInfo`` of an ``ident_t *`` (``;file;function;line;col;;``) or of a map
    name (``;name;file;line;col;;``, or a bare name such as a declare-target global's
    entry name): ``filename`` (path removed), ``name``, ``line``, ``column``;
    ``available`` when the line or column is not 0."""

    def __init__(self, text: str, *, is_name: bool = False):
        if ";" not in text:
            text = f";{text};unknown;0;0;;"
        self.text = text
        name_at, file_at = (0, 1) if is_name else (1, 0)
        self.filename = _remove_path(self._sub(file_at))
        self.name = self._sub(name_at)
        self.line = _stoi(self._sub(2))
        self.column = _stoi(self._sub(3))

    def _sub(self, n: int) -> str:
        s = self.text
        begin = s.find(";")
        end = s.find(";", begin + 1)
        for _ in range(n):
            begin = end
            end = s.find(";", begin + 1) if begin != -1 else -1
        if begin == -1:
            return ""
        return s[begin + 1:end if end != -1 else len(s)]

    @property
    def available(self) -> bool:
        return bool(self.line or self.column)

    @classmethod
    def of_loc(cls, loc: int | None) -> "SourceInfo":
        src = _abi.ident_source(loc)
        return cls(src or ";unknown;unknown;0;0;;")

    @classmethod
    def of_name(cls, name: "int | str | tuple | None") -> "SourceInfo":
        """Of a map name (:func:`name_text`)."""
        text = name_text(name)
        if not text:
            return cls(";unknown;unknown;0;0;;", is_name=True)
        return cls(text, is_name=True)


def _remove_path(path: str) -> str:
    return path[max(path.rfind("/"), path.rfind("\\")) + 1:]


def name_text(name: "int | str | tuple | None") -> str:
    """The text of a map name as a mapping row keeps it: the string, the address of the
    string (``map_names[i]`` as the construct passed it), or ``(map_names, i)``: the
    construct's array of name addresses and the argument's index, read only when the
    name is wanted (the cheap path of plan.py, which copies no names); "" for none."""
    if not name:
        return ""
    if isinstance(name, str):
        return name
    if isinstance(name, tuple):
        arr, i = name
        name = _abi.read_pointer(arr + 8 * i)
        if not name:
            return ""
    return _abi.read_cstring(name).decode(errors="replace")


def name_of(name: "int | str | tuple | None") -> str:
    """``getNameFromMapping``: the variable name of a map name (:func:`name_text`), or
    ``unknown``."""
    s = name_text(name)
    if not s:
        return "unknown"
    begin = s.find(";")
    end = s.find(";", begin + 1)
    return s[begin + 1:end if end != -1 else len(s)]


__all__ = ["StoiError", "debug_level", "profile", "set_profile", "stoi", "tracing_possible", "INFO_ALL", "INFO_DATA_TRANSFER", "INFO_DUMP_TABLE", "INFO_EMPTY_MAPPING",
           "INFO_KERNEL_ARGS", "INFO_MAPPING_CHANGED", "INFO_MAPPING_EXISTS",
           "INFO_PLUGIN_KERNEL", "SourceInfo", "fatal", "info", "info_level", "message",
           "name_of", "name_text", "ptr", "report", "runtime_name", "set_info_level"]
