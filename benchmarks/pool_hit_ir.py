"""Instructions per pool-hit pair, counted by cachegrind (independent of the machine's load).

    python benchmarks/pool_hit_ir.py [--case mm|mm-off|binned|device] [--n1 2000] [--n2 12000]

Runs this interpreter under ``valgrind --tool=cachegrind --cache-sim=no`` twice, doing
``n1`` and then ``n2`` pairs of ``free(allocate(1024))`` through ``itertools.repeat`` (after
20 warm-up pairs), and prints ``(Ir(n2) - Ir(n1)) / (n2 - n1)``: the instructions of one
pair, the calling loop included (an empty loop over two trivial methods is about 840).
Cases, each over the bundled host plugin as the ``hot`` rows of ``offload-shim bench`` are:
``mm`` (``pool:exact``: ``MemoryManager(threshold=8192)``), ``mm-off`` (``stats=False``),
``binned`` and ``device`` (``Device.alloc``/``free`` of a Runtime, pool exact).  Repeat runs
agree within about +-30 instructions.  Needs valgrind and the package installed in this
interpreter (docs/benchmarks.md "Issue 29's pool targets").
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

_CHILD = r"""
import functools, sys
from itertools import repeat
from offload_shim.abi.native import bundled_plugin_path
from offload_shim.memory import MemoryManager
from offload_shim.plugins.loader import load_plugin
n, case = int(sys.argv[1]), sys.argv[2]
plugin = load_plugin(bundled_plugin_path(), abi="llvm")
plugin.acquire()
plugin.acquire_device(0)
balloc, bfree = functools.partial(plugin.alloc, 0), functools.partial(plugin.free, 0)
if case == "device":
    from offload_shim.core.runtime import Runtime
    rt = Runtime([plugin], pool={"policy": "exact", "threshold": 8192, "debug": ""})
    dv = rt.device(1, plugin=plugin.name)
    dv.init()
    alloc, free = dv.alloc, dv.free
else:
    mm = MemoryManager(balloc, bfree, threshold=8192, debug="", device_label="ir",
                       policy="binned" if case == "binned" else "exact",
                       stats=case != "mm-off")
    alloc, free = mm.allocate, mm.free
size = 1024
for _ in range(20):
    free(alloc(size))
def run(n):
    for _ in repeat(None, n):
        free(alloc(size))
run(n)
"""


def _instructions(n: int, case: str) -> int:
    out = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no",
                          "--cachegrind-out-file=/dev/null", sys.executable, "-P", "-c", _CHILD,
                          str(n), case], capture_output=True, text=True, check=True)
    m = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if m is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    return int(m.group(1).replace(",", ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=("mm", "mm-off", "binned", "device"), default="mm")
    ap.add_argument("--n1", type=int, default=2000)
    ap.add_argument("--n2", type=int, default=12000)
    a = ap.parse_args(argv)
    if a.n2 <= a.n1:
        ap.error("--n2 must be larger than --n1")
    lo, hi = _instructions(a.n1, a.case), _instructions(a.n2, a.case)
    print(f"{a.case}: {(hi - lo) / (a.n2 - a.n1):.0f} instructions per pair "
          f"({a.n1}: {lo:,}, {a.n2}: {hi:,})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
