"""ctypes layer of the bundled host plugin's control API (``osh_host_*``).

``libosh_hostplugin.so`` (``native/host_plugin.c``) exports, besides the
plugin entry points, a control and inspection API declared in
``native/osh_host_plugin.h``: fault injection, call counters, the
contract-violation log, capacity and latency emulation.  :class:`ControlAPI`
binds those functions once and converts their values to Python types; the
policy (which values are refused, the exceptions) lives in
:class:`offload_shim.hostplugin.HostPluginControl`.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import c_char_p, c_int, c_int32, c_int64, c_void_p

__all__ = ["PROTOTYPES", "LOG_BUFSIZE", "ControlAPI"]

#: size of the violation-log buffer: 256 kept lines of at most 255 bytes, plus NUL
LOG_BUFSIZE = 256 * 256 + 1

# name -> (restype, argtypes); C prototypes from native/osh_host_plugin.h
PROTOTYPES = {
    # int osh_host_set_num_devices(int n);
    "osh_host_set_num_devices": (c_int, [c_int]),
    # int osh_host_set_capacity(int dev, int64_t bytes);
    "osh_host_set_capacity": (c_int, [c_int, c_int64]),
    # void osh_host_set_latency(int64_t alloc_ns, int64_t free_ns);
    "osh_host_set_latency": (None, [c_int64, c_int64]),
    # void osh_host_set_table_shortfall(int n);
    "osh_host_set_table_shortfall": (None, [c_int]),
    # int osh_host_fail_nth(const char *entry, int64_t nth);
    "osh_host_fail_nth": (c_int, [c_char_p, c_int64]),
    # int64_t osh_host_call_count(const char *entry);
    "osh_host_call_count": (c_int64, [c_char_p]),
    # int64_t osh_host_live_allocs(int dev);
    "osh_host_live_allocs": (c_int64, [c_int]),
    # int64_t osh_host_live_bytes(int dev);
    "osh_host_live_bytes": (c_int64, [c_int]),
    # int64_t osh_host_leaked_allocs(int dev);
    "osh_host_leaked_allocs": (c_int64, [c_int]),
    # int64_t osh_host_violation_count(const char *kind);   /* NULL = all */
    "osh_host_violation_count": (c_int64, [c_char_p]),
    # int osh_host_violation_log(char *buf, int64_t len);
    "osh_host_violation_log": (c_int, [c_char_p, c_int64]),
    # const char *osh_host_last_error(void);
    "osh_host_last_error": (c_char_p, []),
    # int osh_host_is_plugin_initialized(void);
    "osh_host_is_plugin_initialized": (c_int, []),
    # int osh_host_is_device_initialized(int abi, int dev);
    "osh_host_is_device_initialized": (c_int, [c_int, c_int]),
    # void osh_host_reset_counters(void);
    "osh_host_reset_counters": (None, []),
    # const char *osh_host_entry_point_name(int i);
    "osh_host_entry_point_name": (c_char_p, [c_int]),
    # const char *osh_host_violation_kind_name(int i);
    "osh_host_violation_kind_name": (c_char_p, [c_int]),
    # int osh_host_ol_refcount(void);                     /* liboffload view (host_plugin_ol.c) */
    "osh_host_ol_refcount": (c_int, []),
    # int64_t osh_host_ol_live_queues(int dev);
    "osh_host_ol_live_queues": (c_int64, [c_int]),
    # int64_t osh_host_ol_live_programs(int dev);
    "osh_host_ol_live_programs": (c_int64, [c_int]),
    # void *osh_host_nop_alloc(int32_t dev, int64_t size, void *host_ptr, int32_t kind);
    "osh_host_nop_alloc": (c_void_p, [c_int32, c_int64, c_void_p, c_int32]),
    # int32_t osh_host_nop_delete(int32_t dev, void *ptr, int32_t kind);
    "osh_host_nop_delete": (c_int32, [c_int32, c_void_p, c_int32]),
}


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode(errors="replace")


class ControlAPI:
    """The ``osh_host_*`` functions of one ``libosh_hostplugin.so``, bound.

    ``path``: the plugin file, loaded with ``dlopen(path, RTLD_NOW)``; the
    handle is the one every other load of that file in the process gets, so
    the counters are those of the plugin the plugin layer drives.  Raises
    OSError (dlopen) or AttributeError (a missing function: not the bundled
    plugin).  Methods return the C values converted (ints, ``str``), no
    checks."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        lib = ctypes.CDLL(self.path, mode=os.RTLD_NOW)
        self._fns = {}
        for name, (restype, argtypes) in PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
            self._fns[name] = fn
        self._lib = lib

    def call(self, name: str, *args):
        """Call ``osh_host_<name>`` (short name, e.g. ``"live_allocs"``) with
        ``args``; ``const char *`` results come back as ``str`` or None,
        ``const char *`` arguments are passed as ``str`` (ASCII) or None."""
        conv = [a.encode("ascii") if isinstance(a, str) else a for a in args]
        value = self._fns["osh_host_" + name](*conv)
        return _text(value) if isinstance(value, bytes) else value

    def function(self, name: str):
        """The bound ctypes function ``osh_host_<name>`` itself (unchecked; for
        callers that time the bare call, e.g. the benchmark's floor row)."""
        return self._fns["osh_host_" + name]

    def violation_log(self) -> str:
        """The kept violation lines (``osh_host_violation_log``), one per line."""
        buf = ctypes.create_string_buffer(LOG_BUFSIZE)
        n = self._fns["osh_host_violation_log"](buf, len(buf))
        return buf.raw[:max(n, 0)].decode(errors="replace")
