"""Timing helpers of ``offload-shim bench``: the clock, the timer's own
cost, per-pair summaries, pool meters, the machine description and the
progress bar."""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import sys
import time
from itertools import repeat

pc = time.perf_counter_ns
#: CPU time of the calling thread (ns): blocks of single-threaded workloads.
cpu = time.thread_time_ns


# -- machine -----------------------------------------------------------------------

def machine_info() -> dict:
    """CPU model (``/proc/cpuinfo``), logical cores, Python, OS, date (UTC)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "os": f"{platform.system()} {platform.release()}",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def timer_overhead_ns(n: int = 20_000) -> int:
    """Median ns of an empty ``t0 = pc(); ... pc() - t0`` region (subtracted)."""
    samples = []
    app = samples.append
    for _ in repeat(None, n):
        t0 = pc()
        app(pc() - t0)
    return int(statistics.median(samples))


# -- progress ------------------------------------------------------------------------

class Progress:
    """A one-line progress bar on stderr (``\\r`` updates on a terminal, a line
    per step otherwise)."""

    def __init__(self, total: int, enabled: bool = True, width: int = 28):
        self.total = max(total, 1)
        self.done = 0
        self.enabled = enabled
        self.width = width
        self.tty = enabled and sys.stderr.isatty()

    def step(self, label: str, advance: int = 1) -> None:
        self.done = min(self.done + advance, self.total)
        if not self.enabled:
            return
        fill = self.width * self.done // self.total
        bar = "#" * fill + "-" * (self.width - fill)
        text = f"[{bar}] {self.done:3d}/{self.total} {label}"
        if self.tty:
            sys.stderr.write("\r" + text[:110].ljust(110))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()



def summary(samples, blocks) -> dict:
    """Figures of one row in one workload.

    ``samples``: ns per alloc+free pair (timer overhead already removed);
    ``blocks``: ``(wall ns, CPU ns or None, pairs)`` of each timed block (a
    round, a chunk of a trace), instrumentation included.  ``median_ns``,
    ``p99_ns`` and ``mean_ns`` are over the samples.  ``throughput_per_s``
    (pairs per second) counts every pair, misses included, at its full cost:

    * single-threaded blocks (CPU ns given, ``time.thread_time_ns``): all
      pairs over the thread's CPU time, which leaves out the time the rest of
      the machine took the core (the emulated driver latency is a busy-wait
      in the calling thread, so it counts);
    * threaded blocks (CPU None): the median over the blocks of pairs per
      second of wall time.

    ``throughput_basis`` says which; ``wall_throughput_per_s`` is all pairs
    over all wall time, pre-emption included."""
    pairs = sum(n for _w, _c, n in blocks)
    if not samples:
        return {"pairs": pairs}
    s = sorted(samples)
    n = len(s)
    wall = sum(w for w, _c, _n in blocks)
    if blocks and all(c is not None for _w, c, _n in blocks):
        cpu = sum(c for _w, c, _n in blocks)
        rate = pairs * 1e9 / cpu if cpu > 0 else None
        basis = "thread CPU time"
    else:
        rates = sorted(k * 1e9 / w for w, _c, k in blocks if w > 0 and k > 0)
        m = len(rates)
        rate = (rates[m // 2] if m % 2 else (rates[m // 2 - 1] + rates[m // 2]) / 2) if m else None
        basis = "wall time, median over blocks"
    return {"pairs": pairs,
            "median_ns": float(s[n // 2]) if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2,
            "p99_ns": float(s[min(n - 1, int(n * 0.99))]),
            "mean_ns": sum(s) / n,
            "throughput_per_s": rate, "throughput_basis": basis,
            "wall_throughput_per_s": pairs * 1e9 / wall if wall > 0 else None,
            "blocks": len(blocks)}


class Meter:
    """Hit rate and peak cached bytes of a backend over one workload
    (stats deltas; cached bytes sampled between timed batches)."""

    def __init__(self, b):
        self.b = b
        self.first = b.snapshot()
        self.peak = self.first[2] if self.first else None

    def sample(self):
        if self.first is not None:
            c = self.b.snapshot()[2]
            if c > self.peak:
                self.peak = c

    def result(self):
        if self.first is None:
            return {"hit_rate": None, "peak_cached_bytes": None}
        h, m, c = self.b.snapshot()
        self.peak = max(self.peak, c)
        dh, dm = h - self.first[0], m - self.first[1]
        if self.b.name.endswith("stats=off"):
            return {"hit_rate": None, "peak_cached_bytes": self.peak}
        return {"hit_rate": dh / (dh + dm) if dh + dm else None, "peak_cached_bytes": self.peak}

