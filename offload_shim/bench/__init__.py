"""``offload-shim bench``: device alloc/free through the pool against every
peer, side by side, in one run.

Backends (rows).  On every machine:

* ``pool:exact`` / ``pool:binned`` / ``pool:exact,stats=off``: a
  :class:`~offload_shim.memory.MemoryManager` over the bundled host plugin,
  called as ``MemoryManager.allocate/free``;
* ``device:exact`` / ``device:binned``: the same pool through
  ``Device.alloc/free`` (the user path: lifecycle checks and the live table);
* ``direct:bundled``: the bundled host plugin's ``plugin.alloc/free``;
* ``+lat`` rows: the bundled plugin with injected latencies emulating a GPU
  driver (``HostPluginControl.set_latency``; defaults 5 us per alloc, 14 us per
  free, the published ``cudaMalloc``/device-synchronising ``cudaFree`` costs of
  docs/references.md, pools compared).  **Emulation**: a busy-wait in the plugin,
  not a GPU;
* ``llvm16-nextgen``: the LLVM 16 x86_64 nextgen plugin called through ctypes
  (``__tgt_rtl_data_alloc``/``data_delete``), its C++ ``MemoryManagerTy`` on
  (the peer, LLVM D81054) and off (``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD=0``,
  measured in a child process because the plugin reads the variable once);
* ``llvm16-classic``: the LLVM 16 x86_64 classic plugin (no memory manager).

With a CUDA driver and device (cuda-python): ``cuMemAlloc/cuMemFree``,
``cuMemAllocAsync/cuMemFreeAsync`` (the driver's stream-ordered pool), the
LLVM 16 CUDA nextgen plugin, the GCC 12 nvptx plugin, the pool over each, and
CuPy's ``MemoryPool`` when CuPy imports.  Without them these rows are skipped
with the reason printed.

Workloads: ``hot`` (one size, backends interleaved batch by batch),
``llvm-mm`` (16 threads, every power of two 4 B..32 KiB), ``random`` (a seeded
trace, many small sizes and a few above the 8 KiB threshold), ``growth``
(pool-hit cost with 10..100,000 cached blocks) and ``replay`` (an event log
written by ``MemoryManager(event_log=...)``, replayed on every backend).  Two more
run whole compiled programs under ``offload-shim run`` and the real libomptarget 16
side by side: ``run`` (:mod:`.run_overhead`: cost per construct, start-up) and
``lifecycle`` (:mod:`.lifecycle`: dlopen / region / dlclose cycles, memory and time per
cycle, and how much two threads' kernels overlap).

Figures (per backend and workload): median and p99 ns per alloc+free pair
(each pair timed on its own with ``time.perf_counter_ns``, the timer's own
cost measured at start and subtracted), throughput (pairs per second of wall
time), hit rate and peak cached bytes (pools), speedup over the direct row,
and the speed targets with PASS/MISS.  Nothing here asserts a timing.

``benchmarks/run.py`` runs the ``full`` profile and writes JSON, Markdown and
PNG plots; ``offload-shim bench`` runs ``quick`` (< 1 minute) and prints the
table.

Modules: :mod:`.config` (paths, profiles, targets), :mod:`.timing` (clock,
summaries, progress), :mod:`.backends` (CPU rows), :mod:`.gpu` (GPU
discovery and rows), :mod:`.workloads`, :mod:`.runner` (one run),
:mod:`.report` (targets, tables, plots, files), :mod:`.cli`.  Importing the
package loads no plugin.
"""

from __future__ import annotations

from .backends import Backend, Skip, host_backends
from .cli import main, register_cli
from .config import (DEFAULT_ALLOC_LATENCY_NS, DEFAULT_FREE_LATENCY_NS, PROFILES, TARGETS,
                     WORKLOADS)
from .gpu import gpu_backends
from .report import (BEGIN_MARK, END_MARK, check_targets, format_markdown, format_text, plot,
                     update_docs, write_outputs)
from .runner import run
from .timing import machine_info
from .workloads import random_trace, record_replay_log, replay_ops

__all__ = ["PROFILES", "WORKLOADS", "TARGETS", "DEFAULT_ALLOC_LATENCY_NS",
           "DEFAULT_FREE_LATENCY_NS", "run", "format_markdown", "format_text", "write_outputs",
           "update_docs", "plot", "check_targets", "machine_info", "register_cli", "main",
           "Backend", "Skip", "host_backends", "gpu_backends", "random_trace",
           "record_replay_log", "replay_ops", "BEGIN_MARK", "END_MARK"]
