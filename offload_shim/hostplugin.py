"""The bundled C host plugin's control API (where its files are: :mod:`offload_shim.abi.native`).

``libosh_hostplugin.so`` (built from ``native/host_plugin.c``) is an OpenMP offload plugin
for both the LLVM ``__tgt_rtl_*`` ABI (LLVM 16 nextgen shape) and the GCC 12
``GOMP_OFFLOAD_*`` ABI whose "device memory" is host ``malloc`` memory.  Besides the plugin
entry points it exports an ``osh_host_*`` control API (fault injection, call counters,
contract-violation log, capacity and latency emulation); :class:`HostPluginControl` wraps that
API only (its ctypes binding is :mod:`offload_shim.abi.hostctl`).  The plugin entry points are driven through the ordinary plugin layer.

Nothing is loaded at import time.
"""

from __future__ import annotations

import os

from .abi.hostctl import ControlAPI
# where the bundled files are (:mod:`offload_shim.abi.native`), also importable from here
from .abi.native import (PLUGIN_FILENAME, SAMPLE_IMAGE_FILENAME, bundled_native_dir,
                          bundled_plugin_path, native_dir, sample_image_path)

__all__ = [
    "ABI_LLVM",
    "ABI_GOMP",
    "ABI_LIBOFFLOAD",
    "HostPluginControl",
    "PLUGIN_FILENAME",
    "SAMPLE_IMAGE_FILENAME",
    "bundled_native_dir",
    "native_dir",
    "bundled_plugin_path",
    "sample_image_path",
]

ABI_LLVM = 0
ABI_GOMP = 1
ABI_LIBOFFLOAD = 2


def _encode(name: str) -> bytes:
    if not isinstance(name, str):
        raise TypeError(f"expected str, got {type(name).__name__}")
    return name.encode("ascii")


class HostPluginControl:
    """Control/inspection handle on a loaded ``libosh_hostplugin.so``.

    ``path``: the plugin file.  It is loaded with ``dlopen(path, RTLD_NOW)``
    (:class:`offload_shim.abi.hostctl.ControlAPI`); dlopen returns the same handle as every
    other load of that path in the process, so the settings and counters are those seen by
    the plugin layer driving the same file.
    Device numbers are plugin-local (0..N-1); ``dev=-1`` means all devices.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._api = ControlAPI(self.path)

    def __repr__(self) -> str:
        return f"HostPluginControl({self.path!r})"

    # -- enumeration ---------------------------------------------------------------
    def entry_points(self) -> list[str]:
        """Full names of every plugin entry point known to the counters (both ABIs)."""
        return self._enumerate("entry_point_name")

    def violation_kinds(self) -> list[str]:
        """Every contract-violation kind the plugin records."""
        return self._enumerate("violation_kind_name")

    def _enumerate(self, fname: str) -> list[str]:
        out, i = [], 0
        while True:
            s = self._api.call(fname, i)
            if s is None:
                return out
            out.append(s)
            i += 1

    def nop_entry_points(self) -> tuple:
        """``(nop_alloc, nop_delete)``: the bound ctypes functions of
        ``osh_host_nop_alloc`` / ``osh_host_nop_delete``, empty C functions
        with the prototypes of ``__tgt_rtl_data_alloc`` / ``data_delete``
        (native/osh_host_plugin.h).  Unchecked; ``nop_alloc`` returns a fixed
        address that is not memory.  A pair of calls through them is the cost
        floor of any plugin call from Python (``offload-shim bench``)."""
        return self._api.function("nop_alloc"), self._api.function("nop_delete")

    # -- settings ------------------------------------------------------------------
    def set_num_devices(self, n: int) -> None:
        """Devices exposed by both ABIs (0..256).  ``ValueError`` if refused: only allowed
        while the LLVM side is not initialised and no GOMP device is initialised."""
        if self._api.call("set_num_devices", int(n)) != 0:
            raise ValueError(f"set_num_devices({n}) refused: {self.last_error()}")

    def set_capacity(self, dev: int, nbytes: int) -> None:
        """Per-device capacity in bytes for both ABIs (``<= 0``: unlimited; ``dev=-1``: all).
        Allocations beyond it return NULL ("out of memory").  ``ValueError``: bad device."""
        if self._api.call("set_capacity", int(dev), int(nbytes)) != 0:
            raise ValueError(f"set_capacity({dev}, {nbytes}) refused: {self.last_error()}")

    def set_latency(self, alloc_ns: int, free_ns: int) -> None:
        """Busy-wait latency in nanoseconds added to every alloc / free (both ABIs)."""
        self._api.call("set_latency", int(alloc_ns), int(free_ns))

    def set_table_shortfall(self, n: int) -> None:
        """Fault injection (GCC PR 68463): while ``n`` > 0 every image load
        reports a target table ``n`` entries shorter than the host table."""
        self._api.call("set_table_shortfall", int(n))

    def fail_nth(self, entry: str, nth: int) -> None:
        """Make the ``nth`` call from now (1 = next) of ``entry`` (full name, e.g.
        ``"__tgt_rtl_data_alloc"``) return its failure value; ``nth=0`` clears.
        ``ValueError``: unknown entry point or negative ``nth``."""
        if self._api.call("fail_nth", _encode(entry), int(nth)) != 0:
            raise ValueError(f"fail_nth({entry!r}, {nth}): {self.last_error()}")

    # -- inspection ----------------------------------------------------------------
    def call_count(self, entry: str) -> int:
        """Calls of ``entry`` since load or the last :meth:`reset_counters`."""
        n = self._api.call("call_count", _encode(entry))
        if n < 0:
            raise ValueError(f"unknown entry point {entry!r}")
        return n

    def call_counts(self, entries=None) -> dict[str, int]:
        """``{entry: count}`` for the given entry names (default: all entry points)."""
        if entries is None:
            entries = self.entry_points()
        return {e: self.call_count(e) for e in entries}

    def _dev_stat(self, fname: str, dev: int) -> int:
        n = self._api.call(fname, int(dev))
        if n < 0:
            raise ValueError(f"bad device {dev}")
        return n

    def live_allocs(self, dev: int = -1) -> int:
        """Live allocations (both ABIs summed); ``dev=-1``: all devices."""
        return self._dev_stat("live_allocs", dev)

    def live_bytes(self, dev: int = -1) -> int:
        """Live allocated bytes (both ABIs summed); ``dev=-1``: all devices."""
        return self._dev_stat("live_bytes", dev)

    def leaked_allocs(self, dev: int = -1) -> int:
        """Allocations the plugin freed itself at deinit_device/fini_device (caller leaks)."""
        return self._dev_stat("leaked_allocs", dev)

    def violation_count(self, kind: str | None = None) -> int:
        """Recorded contract violations of ``kind`` (``None``: all kinds).
        ``ValueError``: unknown kind."""
        n = self._api.call("violation_count", None if kind is None else _encode(kind))
        if n < 0:
            raise ValueError(f"unknown violation kind {kind!r}")
        return n

    def violations(self) -> list[tuple[str, str, str]]:
        """The last (up to 256) violations, oldest first, as ``(kind, entry_point, detail)``."""
        out = []
        for line in self._api.violation_log().splitlines():
            parts = line.split(" ", 2)
            while len(parts) < 3:
                parts.append("")
            out.append((parts[0], parts[1], parts[2]))
        return out

    def last_error(self) -> str:
        """Text of the last failure on the calling thread ("" if none)."""
        return self._api.call("last_error") or ""

    def is_plugin_initialized(self) -> bool:
        """True between ``__tgt_rtl_init_plugin`` and ``__tgt_rtl_deinit_plugin``."""
        return bool(self._api.call("is_plugin_initialized"))

    def is_device_initialized(self, abi: int, dev: int) -> bool:
        """``abi``: 0 (``ABI_LLVM``), 1 (``ABI_GOMP``) or 2 (``ABI_LIBOFFLOAD``:
        the device has a live queue, liboffload having no per-device init).
        ``ValueError``: bad abi/device."""
        r = self._api.call("is_device_initialized", int(abi), int(dev))
        if r < 0:
            raise ValueError(f"bad abi/device ({abi}, {dev})")
        return bool(r)

    def reset_counters(self) -> None:
        """Clear call counters, violations and fail_nth settings (not plugin state)."""
        self._api.call("reset_counters")

    # -- liboffload view (native/host_plugin_ol.c) ------------------------------------
    def ol_refcount(self) -> int:
        """The ``olInit`` reference count of the ``ol*`` view (0: not initialised)."""
        return int(self._api.call("ol_refcount"))

    def ol_live_queues(self, dev: int = -1) -> int:
        """Live ``olCreateQueue`` queues of ``ol*`` device ``dev`` (-1: all)."""
        return self._dev_stat("ol_live_queues", dev)

    def ol_live_programs(self, dev: int = -1) -> int:
        """Live ``olCreateProgram`` programs of ``ol*`` device ``dev`` (-1: all)."""
        return self._dev_stat("ol_live_programs", dev)
