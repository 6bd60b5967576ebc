"""Constants of ``offload-shim bench``: plugin paths, emulated latencies,
workload names, the iteration counts of each profile and the speed targets."""

from __future__ import annotations

import os
from pathlib import Path

#: Debian's plugin folders; $OSH_LLVM16_LIB / $OSH_GOMP_PLUGIN_DIR point elsewhere
#: (scripts/gpu-check.sh: the plugins unpacked from the GPU bundle)
LLVM16_DIR = Path(os.environ.get("OSH_LLVM16_LIB") or "/usr/lib/llvm-16/lib")
GOMP_PLUGIN_DIR = Path(os.environ.get("OSH_GOMP_PLUGIN_DIR") or "/usr/lib/x86_64-linux-gnu")
NEXTGEN16 = LLVM16_DIR / "libomptarget.rtl.x86_64.nextgen.so.16"
CLASSIC16 = LLVM16_DIR / "libomptarget.rtl.x86_64.so.16"
CUDA16 = LLVM16_DIR / "libomptarget.rtl.cuda.nextgen.so.16"
NVPTX12 = GOMP_PLUGIN_DIR / "libgomp-plugin-nvptx.so.1"

#: Emulated GPU-driver latencies (ns): ~5 us cudaMalloc, ~14 us device-synchronising
#: cudaFree (docs/references.md, pools compared, "published costs").
DEFAULT_ALLOC_LATENCY_NS = 5_000
DEFAULT_FREE_LATENCY_NS = 14_000

WORKLOADS = ("hot", "llvm-mm", "random", "replay", "growth")

#: Iteration counts.  ``hot_rounds`` x ``hot_pairs``: timed pairs per row of
#: the hot loop; ``mm_threads`` x ``mm_rounds`` x 14 sizes: timed pairs of the
#: LLVM pattern (after one untimed warm-up round); ``trace_ops`` /
#: ``replay_ops``: operations (half of them allocs), run in chunks of
#: ``trace_chunk``, the chunks within the first ``trace_warm`` untimed;
#: ``growth_points``: cached blocks; ``growth_pairs``: timed
#: hits per point, in ``growth_blocks`` batches; ``stats_rounds``: batches of
#: 200 pairs of the statistics overhead.  Every row runs the same operations
#: (no row gets a shorter run), and every workload is measured after a
#: warm-up, so that the pools' reuse shows the same way in every profile.
PROFILES = {
    "tiny": dict(hot_size=1024, hot_rounds=2, hot_pairs=20, mm_threads=2, mm_rounds=2,
                 trace_ops=3_000, replay_ops=3_000, trace_chunk=250, trace_warm=750,
                 growth_points=(10, 100),
                 growth_pairs=50, growth_blocks=2, stats_rounds=2),
    "quick": dict(hot_size=1024, hot_rounds=15, hot_pairs=400, mm_threads=16, mm_rounds=5,
                  trace_ops=20_000, replay_ops=20_000, trace_chunk=1_000, trace_warm=2_000,
                  growth_points=(10, 100, 1_000, 10_000, 100_000), growth_pairs=3_000,
                  growth_blocks=10, stats_rounds=30),
    "full": dict(hot_size=1024, hot_rounds=40, hot_pairs=1_000, mm_threads=16, mm_rounds=20,
                 trace_ops=200_000, replay_ops=100_000, trace_chunk=2_000, trace_warm=4_000,
                 growth_points=(10, 100, 1_000, 10_000, 100_000), growth_pairs=20_000,
                 growth_blocks=20, stats_rounds=100),
}

#: Profiles that only exercise the harness (tests, the leftovers check): their
#: counts are too small to measure anything, so no target is judged on them.
SMOKE_PROFILES = frozenset({"tiny"})

#: Speed targets of the pool (checked and printed, never asserted in tests).
TARGETS = {
    "hit_vs_nextgen": 0.35,     # Device.alloc/free hit pair <= 0.35 x nextgen (C++ pool on) pair
    "mm_hit_vs_nextgen": 0.3,   # MemoryManager.allocate/free hit pair <= 0.3 x that pair
    "latency_speedup": 10.0,    # pool >= 10x direct on the latency-emulating plugin
    "growth_flatness": 1.2,     # hit cost max/min over 10..100,000 cached blocks
    "stats_overhead": 0.05,     # stats=True vs stats=False, hot hit
}
