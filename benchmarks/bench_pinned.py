"""Submit throughput from pinned vs pageable host buffers (issue 6; gcc-patches -foffload-memory=pinned).

Standalone:  python benchmarks/bench_pinned.py [--plugin PATH] [--sizes 4096,1048576] [--repeat 20]

On a GPU plugin the pinned rows show the DMA gain of page-locked memory; on the
bundled host plugin (default) the copy is a memcpy, so the table shows the cost
of pinning itself: the "pin+unpin" column is one data_lock/mlock + unlock of the
range, "mapped" is a submit under Runtime(pinned="mapped") (first submit pins).
"""

from __future__ import annotations

import argparse
import mmap
import time

import offload_shim as osh
from offload_shim.memory.pinned import vmlck_bytes


def _rate(nbytes: int, seconds: float) -> str:
    return f"{nbytes / seconds / 1e9:8.2f}" if seconds > 0 else "     inf"


def run(plugin: str | None, sizes: list[int], repeat: int) -> None:
    plugins = [plugin] if plugin else []
    print(f"{'bytes':>10} {'pageable GB/s':>14} {'pinned GB/s':>12} {'mapped GB/s':>12} "
          f"{'pin+unpin us':>13}")
    with osh.Runtime(plugins, bundled=not plugin) as rt, \
            osh.Runtime(plugins, bundled=not plugin, pinned="mapped") as rtm:
        dev, devm = rt.devices[0], rtm.devices[0]
        reg = rt.pinned_memory
        for n in sizes:
            pageable = bytearray(n)
            tgt = dev.alloc(n)
            t0 = time.perf_counter()
            for _ in range(repeat):
                dev.submit(tgt, pageable)
            t_page = (time.perf_counter() - t0) / repeat
            with reg.alloc_host(n, device=dev) as pinned:
                t0 = time.perf_counter()
                for _ in range(repeat):
                    dev.submit(tgt, pinned)
                t_pin = (time.perf_counter() - t0) / repeat
            buf = mmap.mmap(-1, n)
            t0 = time.perf_counter()
            for _ in range(repeat):
                reg.pin(buf, device=dev)
                reg.unpin(buf, device=dev)
            t_lock = (time.perf_counter() - t0) / repeat
            tgtm = devm.alloc(n)
            t0 = time.perf_counter()
            for _ in range(repeat):
                devm.submit(tgtm, buf)
            t_map = (time.perf_counter() - t0) / repeat
            devm.free(tgtm)
            dev.free(tgt)
            print(f"{n:>10} {_rate(n, t_page):>14} {_rate(n, t_pin):>12} {_rate(n, t_map):>12} "
                  f"{t_lock * 1e6:>13.1f}")
        print(f"backend: {reg.backend_for(dev)}; VmLck now {vmlck_bytes()} bytes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plugin", help="plugin path (default: the bundled host plugin)")
    ap.add_argument("--sizes", default="4096,65536,1048576,4194304")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    run(args.plugin, [int(s) for s in args.sizes.split(",")], args.repeat)


if __name__ == "__main__":
    main()
