"""Options of the memory manager and the environment variables it reads.

``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD`` is LLVM's own variable (LLVM 16
``MemoryManager.h``): the LLVM 16 nextgen plugins read it when a device initialises, the
classic CUDA plugins when they are loaded, each with ``std::stoul``, which
aborts the process on a value that is not a number.  :func:`read_threshold_env`
is the one place that reads it in Python; the runtime calls it before any
plugin can read the variable, so a bad value is a ``ValueError`` naming the
variable instead of a C++ abort.

``OFFLOAD_SHIM_PINNED`` names the pinned host memory policy of a runtime
(:func:`resolve_pin_policy`; the policies: :mod:`offload_shim.memory.pinned`).

``OFFLOAD_SHIM_POOL_DEBUG`` selects a debug mode of the pool (see
:mod:`offload_shim.memory.plugin_cache` for what it does to plugins that keep
their own cache).
"""

from __future__ import annotations

import operator
import os
from collections import namedtuple

__all__ = ["THRESHOLD_ENV", "DEBUG_ENV", "DEFAULT_THRESHOLD", "MAX_SIZE", "PTR_LIMIT",
           "DEBUG_MODES", "PoolConfig", "read_threshold_env", "resolve_debug", "nonneg_int",
           "check_bins", "check_flag", "check_choice", "PINNED_ENV", "PIN_POLICIES",
           "resolve_pin_policy"]

#: Environment variable read by LLVM ``DeviceTy::init`` / nextgen plugins.
THRESHOLD_ENV = "LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD"
#: Environment variable selecting a debug mode (``off-pool`` or ``poison``).
DEBUG_ENV = "OFFLOAD_SHIM_POOL_DEBUG"
#: LLVM ``SizeThreshold = 1 << 13``: 8 KiB.
DEFAULT_THRESHOLD = 1 << 13
#: Largest size (bytes) the plugins can take: their size arguments are
#: ``int64_t`` (LLVM) or ``size_t`` (GOMP); a larger Python int would wrap.
MAX_SIZE = (1 << 63) - 1
#: Device pointers are 64-bit addresses: ``0 <= ptr < PTR_LIMIT``.
PTR_LIMIT = 1 << 64
#: The debug modes (``None``: normal pooling).
DEBUG_MODES = ("off-pool", "poison")


class PoolConfig(namedtuple("PoolConfig", "threshold policy oom cache_limit stats debug "
                                          "device_label strict bins_per_pow2")):
    """A memory manager's options after the checks: ``threshold`` and ``cache_limit``
    (None or) bytes, ``policy``, ``oom``, ``stats`` (bool), ``debug`` (None or a mode
    of :data:`DEBUG_MODES`), ``device_label``, ``strict`` (the default of ``free``'s),
    ``bins_per_pow2``.  Immutable."""

    __slots__ = ()

    @property
    def enabled(self) -> bool:
        """Blocks are cached: a threshold and no ``off-pool`` mode (LLVM: no
        manager when the threshold is 0)."""
        return self.threshold > 0 and self.debug != "off-pool"

#: ``std::stoul`` on LP64 Linux: an ``unsigned long`` holds less than ``2**64``.
_STOUL_LIMIT = 1 << 64
#: the two patterns of :func:`read_threshold_env`, compiled when the variable is first
#: read: compiling them at import cost a tenth of the embedded runtime's start-up
#: (``re``'s compiler is Python), and most runs never set the variable
_THRESHOLD_PATTERNS: list = []


def _threshold_patterns() -> list:
    """``[plain, stoul]``: a whole value LLVM reads as a non-negative number, and the
    prefix ``std::stoul`` reads."""
    if not _THRESHOLD_PATTERNS:
        import re
        _THRESHOLD_PATTERNS[:] = [re.compile(r"\s*\+?[0-9]+\s*", re.ASCII),
                                  re.compile(r"\s*([+-]?)[0-9]+", re.ASCII)]
    return _THRESHOLD_PATTERNS

_DEBUG_OFF = ("", "0", "off", "none", "false", "no")


def read_threshold_env(environ=None) -> int:
    """Threshold in bytes from ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD``, as
    LLVM reads it (LLVM 16 MemoryManager.h): unset -> 8192; ``"0"`` -> 0 (manager
    off); ``"N"`` -> N.  ``environ`` defaults to :data:`os.environ`.

    LLVM 16 (``MemoryManagerTy::getSizeThresholdFromEnv``,
    openmp/libomptarget/plugins/common/MemoryManager/MemoryManager.h) takes
    the value with ``std::stoul`` into a ``size_t``, so anything up to
    ``2**64 - 1`` is a threshold there, and a request is pooled unless
    ``Size > SizeThreshold``: from :data:`MAX_SIZE` (``2**63 - 1``, the
    largest size the plugins take) up, every request is pooled.  Such a value
    is returned as :data:`MAX_SIZE`, which pools exactly the same requests.

    Raises ``ValueError`` naming the variable and the value for anything
    that is not a non-negative decimal integer of at most ``2**64 - 1``
    (surrounding blanks and a leading ``+`` are accepted).  LLVM's
    ``std::stoul`` aborts the program on an empty or non-numeric value and
    on one beyond ``2**64 - 1`` (``std::out_of_range``); it would also take
    the numeric prefix of ``"12abc"`` and wrap ``"-1"``; all are rejected
    here instead.
    """
    env = os.environ if environ is None else environ
    value = env.get(THRESHOLD_ENV)
    if value is None:
        return DEFAULT_THRESHOLD
    plain, stoul = _threshold_patterns()
    if not plain.fullmatch(value):
        m = stoul.match(value)
        if m is None:
            why = "LLVM's std::stoul would abort here"
        elif m.group(1) == "-":
            why = "LLVM's std::stoul would wrap the sign (-N as 2**64 - N)"
        else:
            why = f"LLVM's std::stoul would read only its leading {m.group(0).strip()!r}"
        raise ValueError(
            f"{THRESHOLD_ENV}={value!r} is not a non-negative decimal integer "
            f"(bytes; 0 disables the memory manager); {why}")
    v = int(value)
    if v >= _STOUL_LIMIT:
        raise ValueError(
            f"{THRESHOLD_ENV}={value!r} is more than 2**64 - 1 = {_STOUL_LIMIT - 1} bytes "
            f"(LLVM's std::stoul would abort here: out of range)")
    return min(v, MAX_SIZE)


def resolve_debug(debug, environ=None):
    """The debug mode: ``None`` (normal pooling), ``"off-pool"`` or
    ``"poison"``.  ``debug=None`` reads ``OFFLOAD_SHIM_POOL_DEBUG``; ``""``,
    ``"0"``, ``"off"``, ``"none"``, ``"false"``, ``"no"`` mean no mode.
    Raises ``TypeError`` for a non-str, ``ValueError`` (naming the option or
    the variable) for any other value."""
    source = "debug"
    if debug is None:
        debug = (os.environ if environ is None else environ).get(DEBUG_ENV, "")
        source = DEBUG_ENV
    if not isinstance(debug, str):
        raise TypeError(f"debug must be a str or None, not {type(debug).__name__}")
    d = debug.strip().lower()
    if d in _DEBUG_OFF:
        return None
    if d in DEBUG_MODES:
        return d
    raise ValueError(f"{source}={debug!r}: expected 'off-pool', 'poison' or '' (no debug mode)")


def nonneg_int(value, name: str, limit=None, unit: str = "bytes") -> int:
    """``value`` as an int ``>= 0`` (and ``<= limit``).  ``TypeError`` for a
    non-int or a bool, ``ValueError`` out of range; messages name the option
    and its ``unit``."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int ({unit}), not bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int ({unit}), not {type(value).__name__}") from None
    if v < 0:
        raise ValueError(f"{name} must be >= 0 {unit}, got {v}")
    if limit is not None and v > limit:
        raise ValueError(f"{name} must be at most {limit} {unit} (2**63 - 1: the plugins take "
                         f"int64/size_t sizes), got {v}")
    return v


def check_bins(value) -> int:
    """``bins_per_pow2``: the number of size classes per power of two, a
    power of two >= 1.  ``TypeError`` for a non-int, ``ValueError`` else."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"bins_per_pow2 must be an int (size classes per power of two), not "
                        f"{type(value).__name__}")
    v = operator.index(value)
    if v < 1 or v & (v - 1):
        raise ValueError(f"bins_per_pow2 must be a power of two >= 1 (size classes per power "
                         f"of two), got {v}")
    return v


def check_flag(value, name: str) -> bool:
    """``value`` must be a bool (``stats="yes"`` is a ``TypeError``)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {type(value).__name__} {value!r}")
    return value


def check_choice(value, name: str, choices) -> str:
    """``value`` must be one of the strings ``choices``: ``TypeError`` for a
    non-str, ``ValueError`` for another string."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, one of {choices}, not {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


PINNED_ENV = "OFFLOAD_SHIM_PINNED"
#: pinned host memory policies (:mod:`offload_shim.memory.pinned`, gcc-patches
#: -foffload-memory=pinned)
PIN_POLICIES = ("none", "mapped", "all")


def resolve_pin_policy(policy: str | None) -> str:
    """``policy`` or ``$OFFLOAD_SHIM_PINNED`` or ``"none"``.  Raises TypeError for a
    ``policy`` that is neither None nor a str, ValueError for a name not in
    :data:`PIN_POLICIES`.  Also importable as
    ``offload_shim.memory.pinned.resolve_policy``."""
    if policy is not None and not isinstance(policy, str):
        raise TypeError(f"pinned policy must be one of {PIN_POLICIES} (a str) or None, "
                        f"not {type(policy).__name__} {policy!r}")
    if policy is None:
        policy = os.environ.get(PINNED_ENV, "").strip().lower() or "none"
    if policy not in PIN_POLICIES:
        raise ValueError(f"pinned policy must be one of {PIN_POLICIES}, not {policy!r}"
                         f" (argument or ${PINNED_ENV})")
    return policy
