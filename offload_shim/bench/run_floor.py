"""The floor row of ``offload-shim bench --workloads run``: what a Python host layer
cannot go below per construct -- the C-to-Python crossing of each construct and the
foreign calls the construct needs, nothing else (issue 29: keeping only these measured
0.15-0.21 of a ``data-1`` region's cost then, about 1.0-1.4x libomptarget).

Measured in the bench's own process, between the repetitions of the run:

* ``call_us``: one ctypes call into an empty C function with a plugin entry point's
  prototype (``osh_host_nop_alloc`` of the bundled plugin: ``int32_t dev, int64_t
  size, void *hst, int32_t kind``), the cost of each foreign call a construct makes;
* ``crossing_us``: one C-to-Python call through a ``ctypes.CFUNCTYPE`` callback, as the
  interposer's bridge makes for every construct: libc ``qsort`` of two elements calls
  its comparison (the callback) once; the ``qsort`` call itself is one ctypes call,
  taken off.

Per construct (:data:`FLOOR_CALLS`: crossings, foreign calls; the pool serves every
device block from its cache): ``floor_us = crossings * crossing_us + calls * call_us``.
Medians over ``rounds`` blocks of ``n`` calls each, in the thread's CPU time (a tight
loop's wall time on a loaded machine is mostly waiting for a core); the floor's ratio is
taken against libomptarget's CPU µs per construct for the same reason.  The floor is a
model built from two measured costs, not a run of the construct: it leaves out the
kernel's own work and the plugin's work inside each call, which libomptarget pays too.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from itertools import repeat

__all__ = ["FLOOR_CALLS", "floor_us", "measure"]

#: row -> (C-to-Python crossings, foreign calls) per construct unit of the row.  A
#: construct's copies in, its launch and its copies out can go in one foreign call (the
#: batch of ``native/batch.c`` already takes a construct's copies in one), so every
#: construct needs one: ``data-1`` and ``maps-K`` (K copies each way) one crossing and
#: one call; an ``enter-exit`` or ``update`` pair is two constructs; ``nowait`` launches
#: and then waits (``taskwait``: the wait is a call of its own); a region of
#: ``threads-8`` is ``maps-1``'s.
FLOOR_CALLS = {
    "data-1": (1, 1),
    "maps-1": (1, 1), "maps-4": (1, 1), "maps-16": (1, 1), "maps-64": (1, 1),
    "enter-exit": (2, 2),
    "update": (2, 2),
    "nowait": (1, 2),
    "threads-8": (1, 1),
}


def _nop_call():
    """A bound ctypes function with a plugin entry point's prototype and no body."""
    from ..abi.native import bundled_plugin_path
    from ..hostplugin import HostPluginControl
    nop_alloc, _nop_delete = HostPluginControl(bundled_plugin_path()).nop_entry_points()
    return nop_alloc


def measure(n: int = 2000, rounds: int = 15) -> dict:
    """``{"call_us", "crossing_us", "rounds", "n"}`` (medians over ``rounds`` blocks of
    ``n``); raises OSError/FileNotFoundError when the bundled plugin or libc is
    missing."""
    nop = _nop_call()
    libc = ctypes.CDLL(None)
    qsort = libc.qsort
    qsort.restype = None
    cmp_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    cmp = cmp_t(lambda a, b: 0)
    qsort.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, cmp_t]
    pair = (ctypes.c_int * 2)(1, 2)
    addr = ctypes.addressof(pair)
    size = ctypes.sizeof(ctypes.c_int)
    pc = time.thread_time_ns            # CPU time: what the floor is compared with
    calls, sorts = [], []
    for _ in range(rounds):
        t0 = pc()
        for _ in repeat(None, n):
            nop(0, 8, None, 0)
        t1 = pc()
        for _ in repeat(None, n):
            qsort(addr, 2, size, cmp)
        t2 = pc()
        calls.append((t1 - t0) / n / 1e3)
        sorts.append((t2 - t1) / n / 1e3)
    call = statistics.median(calls)
    return {"call_us": call, "crossing_us": max(statistics.median(sorts) - call, 0.0),
            "rounds": rounds, "n": n}


def floor_us(row: str, fl: dict) -> float | None:
    """The floor of one construct unit of ``row`` (µs), None for a row without one."""
    spec = FLOOR_CALLS.get(row)
    if spec is None or not fl:
        return None
    crossings, calls = spec
    return crossings * fl["crossing_us"] + calls * fl["call_us"]
