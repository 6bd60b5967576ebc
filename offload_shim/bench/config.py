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
#: cudaFree (docs/prior-art.md section 2, "published costs").
DEFAULT_ALLOC_LATENCY_NS = 5_000
DEFAULT_FREE_LATENCY_NS = 14_000

WORKLOADS = ("hot", "llvm-mm", "random", "growth", "replay")

#: Iteration counts.  ``hot_rounds`` x ``hot_pairs``: pairs per backend of the
#: hot loop; ``mm_threads`` x ``mm_rounds`` x 14 sizes: pairs of the LLVM
#: pattern; ``trace_ops`` / ``replay_ops``: operations (half of them allocs);
#: ``growth_points``: cached blocks; ``growth_pairs``: timed hits per point;
#: ``lat_div``: the latency rows run ``1/lat_div`` of the iterations.
PROFILES = {
    "tiny": dict(hot_size=1024, hot_rounds=2, hot_pairs=20, mm_threads=2, mm_rounds=1,
                 trace_ops=200, replay_ops=200, growth_points=(10, 100), growth_pairs=50,
                 lat_div=2, stats_rounds=2),
    "quick": dict(hot_size=1024, hot_rounds=15, hot_pairs=400, mm_threads=16, mm_rounds=3,
                  trace_ops=20_000, replay_ops=20_000,
                  growth_points=(10, 100, 1_000, 10_000, 100_000), growth_pairs=3_000,
                  lat_div=4, stats_rounds=30),
    "full": dict(hot_size=1024, hot_rounds=40, hot_pairs=1_000, mm_threads=16, mm_rounds=20,
                 trace_ops=200_000, replay_ops=100_000,
                 growth_points=(10, 100, 1_000, 10_000, 100_000), growth_pairs=20_000,
                 lat_div=4, stats_rounds=100),
}

#: Speed targets of the pool (checked and printed, never asserted in tests).
TARGETS = {
    "hit_vs_nextgen": 0.5,      # pool hit pair <= 0.5 x nextgen (C++ pool on) pair
    "latency_speedup": 10.0,    # pool >= 10x direct on the latency-emulating plugin
    "growth_flatness": 1.2,     # hit cost max/min over 10..100,000 cached blocks
    "stats_overhead": 0.05,     # stats=True vs stats=False, hot hit
}
