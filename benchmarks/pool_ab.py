"""The pool's hot paths, before and after a change, side by side in one process.

    python benchmarks/pool_ab.py [--ref REV] [--rounds N] [--pairs N]

``REV`` (default ``HEAD``) is a git revision of this repository: its ``offload_shim``
is unpacked (``git archive``) into a temporary folder under the name
``offload_shim_ref`` and imported beside the working tree's package; the memory
manager is pure Python with relative imports, so both live in one interpreter.  Each
case builds one manager of each over the fake backend (``memory/fake.py``, no plugin
call on a hit) with a few blocks cached, and the two take turns, batch by batch,
the first of each round alternating.  Time is the thread's CPU time
(``time.thread_time_ns``), so other processes on a shared machine inflate neither.

Cases: an ``allocate``/``free`` hit pair under each policy, with ``stats=False``,
and ``allocate_many``/``free_many`` of four blocks (the interposer's cheap path).
Printed per case: the median ns per pair of each, and the median [p25, p75] of the
per-round ratios ref/new and new/ref.

The working tree's package is imported from the source tree (``offload_shim`` next
to this folder); no plugin is loaded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SIZES = [64, 64, 128, 64]


def _unpack(rev: str, into: Path) -> None:
    """``offload_shim`` of ``rev`` as ``into/offload_shim_ref``."""
    tar = into / "ref.tar"
    with open(tar, "wb") as f:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev, "offload_shim"], stdout=f,
                       check=True)
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")
    os.rename(into / "offload_shim", into / "offload_shim_ref")


def _manager(mod, fake, policy, stats):
    b = fake.FakeBackend()
    mm = mod.MemoryManager(b.alloc, b.free, threshold=8192, policy=policy, stats=stats)
    ps = mm.allocate_many(SIZES * 2)
    mm.free_many(ps)
    return mm


def _pairs(mm, n):
    a, f = mm.allocate, mm.free
    t = time.thread_time_ns()
    for _ in range(n):
        f(a(64))
    return (time.thread_time_ns() - t) / n


def _many(mm, n):
    a, f = mm.allocate_many, mm.free_many
    t = time.thread_time_ns()
    for _ in range(n):
        f(a(SIZES))
    return (time.thread_time_ns() - t) / n


CASES = [("hit pair, exact", "exact", True, _pairs),
         ("hit pair, binned", "binned", True, _pairs),
         ("hit pair, exact, stats=False", "exact", False, _pairs),
         ("allocate_many/free_many x4", "exact", True, _many)]


def _q(xs):
    q = statistics.quantiles(xs, n=4)
    return f"{statistics.median(xs):.3f} [{q[0]:.3f}, {q[2]:.3f}]"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="HEAD", help="git revision to compare with")
    ap.add_argument("--rounds", type=int, default=40, help="rounds per case (>= 4)")
    ap.add_argument("--pairs", type=int, default=20000, help="pairs per batch")
    args = ap.parse_args(argv)
    if args.rounds < 4 or args.pairs < 1:
        ap.error("--rounds must be >= 4 and --pairs >= 1")
    with tempfile.TemporaryDirectory() as tmp:
        _unpack(args.ref, Path(tmp))
        sys.path[:0] = [tmp, str(ROOT)]
        import offload_shim.memory as new
        import offload_shim_ref.memory as ref
        from offload_shim.memory import fake as new_fake
        from offload_shim_ref.memory import fake as ref_fake
        print(f"ref: {args.ref}; new: the working tree; {args.rounds} rounds of "
              f"{args.pairs} pairs; Python {sys.version.split()[0]}")
        print(f"{'case':32s} {'ref ns':>8s} {'new ns':>8s}  new/ref median [p25, p75]")
        for name, policy, stats, run in CASES:
            mr = _manager(ref, ref_fake, policy, stats)
            mn = _manager(new, new_fake, policy, stats)
            tr, tn = [], []
            for r in range(args.rounds):
                if r % 2:
                    tr.append(run(mr, args.pairs))
                    tn.append(run(mn, args.pairs))
                else:
                    tn.append(run(mn, args.pairs))
                    tr.append(run(mr, args.pairs))
            ratios = [n / r for r, n in zip(tr, tn)]
            print(f"{name:32s} {statistics.median(tr):8.1f} {statistics.median(tn):8.1f}  "
                  f"{_q(ratios)}")
            mr.drain()
            mn.drain()
    return 0


if __name__ == "__main__":
    sys.exit(main())
