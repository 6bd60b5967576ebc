"""The workloads of ``offload-shim bench``: ``hot``, ``llvm-mm``,
``random``, ``growth`` and ``replay``, and the statistics-overhead
measurement.  Each takes the rows (:class:`~.backends.Backend`), the profile's
counts and the timer overhead (ns), and returns figures per row."""

from __future__ import annotations

import random
import statistics
import threading
from itertools import repeat

from .timing import Meter, pc, summary

def _scaled(b, n, prm):
    return max(1, n // prm["lat_div"]) if b.latency else n


def wl_hot(backends, prm, ovh, progress):
    """One size (``hot_size`` bytes), ``free(alloc(size))``; backends
    interleaved round by round so machine noise hits them alike."""
    size = prm["hot_size"]
    res = {b.name: ([], 0, 0) for b in backends}
    meters = {b.name: Meter(b) for b in backends}
    for b in backends:                       # warm: first block, caches, specialisation
        b.enter()
        try:
            for _ in range(20):
                b.free(b.alloc(size))
        finally:
            b.leave()
    for r in range(prm["hot_rounds"]):
        for b in backends:
            samples, wall, pairs = res[b.name]
            n = _scaled(b, prm["hot_pairs"], prm)
            alloc, free, app = b.alloc, b.free, samples.append
            b.enter()
            try:
                w0 = pc()
                for _ in repeat(None, n):
                    t0 = pc()
                    free(alloc(size))
                    app(pc() - t0 - ovh)
                wall += pc() - w0
            finally:
                b.leave()
            res[b.name] = (samples, wall, pairs + n)
            meters[b.name].sample()
        progress.step(f"hot: round {r + 1}/{prm['hot_rounds']}", 0)
    out = {}
    for b in backends:
        samples, wall, pairs = res[b.name]
        out[b.name] = {**summary(samples, wall, pairs), **meters[b.name].result(),
                       "size": size}
    progress.step("hot")
    return out


def stats_overhead(backends, prm, ovh):
    """stats=True vs stats=False hit cost: ``pool:exact`` and
    ``pool:exact,stats=off`` in alternating short batches; per batch the
    median pair, then the median over batches of each."""
    by = {b.name: b for b in backends}
    on, off = by.get("pool:exact"), by.get("pool:exact,stats=off")
    if on is None or off is None:
        return None
    size = prm["hot_size"]
    med = {on.name: [], off.name: []}
    for r in range(prm["stats_rounds"]):
        for b in ((on, off) if r % 2 == 0 else (off, on)):
            alloc, free = b.alloc, b.free
            s = []
            app = s.append
            for _ in repeat(None, 200):
                t0 = pc()
                free(alloc(size))
                app(pc() - t0 - ovh)
            med[b.name].append(statistics.median(s))
    m_on, m_off = statistics.median(med[on.name]), statistics.median(med[off.name])
    return {"stats_on_ns": m_on, "stats_off_ns": m_off,
            "overhead": (m_on - m_off) / m_off if m_off > 0 else None}


def _llvm_mm_thread(alloc, free, rounds, sizes, out, enter, barrier):
    enter()
    barrier.wait()
    app = out.append
    for _ in range(rounds):
        held = []
        for s in sizes:
            t0 = pc()
            p = alloc(s)
            held.append((p, pc() - t0))
        for p, ta in held:
            t0 = pc()
            free(p)
            app(ta + pc() - t0)


def wl_llvm_mm(backends, prm, ovh, progress):
    """LLVM's memory-manager test pattern: ``mm_threads`` threads at once,
    each round allocating every power of two 4 B..32 KiB, then freeing them
    (32 KiB and 16 KiB are above the 8 KiB threshold).  Per-pair samples
    include waits for the GIL; throughput is all threads' pairs / wall."""
    sizes = [1 << k for k in range(2, 16)]
    out = {}
    for b in backends:
        if not b.threaded:
            continue
        m = Meter(b)
        rounds = _scaled(b, prm["mm_rounds"], prm)
        nthr = prm["mm_threads"]
        samples = []
        barrier = threading.Barrier(nthr + 1)
        ths = [threading.Thread(target=_llvm_mm_thread,
                                args=(b.alloc, b.free, rounds, sizes, samples, b.enter, barrier))
               for _ in range(nthr)]
        b.enter()
        try:
            for t in ths:
                t.start()
            barrier.wait()
            w0 = pc()
            for t in ths:
                t.join()
            wall = pc() - w0
        finally:
            b.leave()
        out[b.name] = {**summary([x - 2 * ovh for x in samples], wall, len(samples)),
                       **m.result(), "threads": nthr}
        b.trim()
        progress.step(f"llvm-mm: {b.name}")
    return out


# size mix of the random trace: (weight, sizes); exact sizes repeat, as in real programs
_SMALL = [8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 640, 768, 1024]
_MEDIUM = [1536, 2048, 3072, 4000, 4096, 5000, 6144, 8000, 8192]
_LARGE = [12288, 16384, 32768, 65536, 131072, 262144, 1 << 20]


def random_trace(n_ops: int, seed: int = 1, live_target: int = 256) -> list:
    """A seeded trace of ``(slot, size)`` operations: ``size > 0`` allocates
    ``size`` bytes into ``slot``, ``size == 0`` frees it.  Size mix: ~80 %
    small (8 B..1 KiB), ~15 % medium (1.5..8 KiB), ~5 % above the 8 KiB
    threshold (12 KiB..1 MiB); sizes drawn with a Zipf-like skew so some
    repeat often.  The live set wanders around ``live_target`` blocks; the
    trace ends with every block freed."""
    rng = random.Random(seed)

    def pick():
        r = rng.random()
        pool = _SMALL if r < 0.80 else (_MEDIUM if r < 0.95 else _LARGE)
        i = min(int(rng.paretovariate(1.2)) - 1, len(pool) - 1)
        base = pool[(i * 7 + len(pool) // 3) % len(pool)] if rng.random() < 0.5 else rng.choice(pool)
        # a few odd sizes next to the common ones (binned can reuse, exact cannot)
        return base + (rng.randrange(1, 8) * 8 if rng.random() < 0.2 else 0)

    ops, live, free_slots, nslots = [], [], [], 0
    while len(ops) < n_ops - len(live):
        p_alloc = 0.5 + 0.3 * (1 - len(live) / live_target)
        if live and rng.random() > p_alloc:
            i = rng.randrange(len(live))
            live[i], live[-1] = live[-1], live[i]
            slot = live.pop()
            ops.append((slot, 0))
            free_slots.append(slot)
        else:
            slot = free_slots.pop() if free_slots else nslots
            if slot == nslots:
                nslots += 1
            ops.append((slot, pick()))
            live.append(slot)
    for slot in live:
        ops.append((slot, 0))
    return ops


def _run_trace(b, ops, ovh, chunk=512):
    """Run a ``(slot, size)`` trace; each pair's alloc and free are timed and
    added.  Cached bytes are sampled between chunks (not timed)."""
    nslots = 1 + max((s for s, _ in ops), default=0)
    ptrs = [0] * nslots
    ta = [0] * nslots
    samples = []
    app = samples.append
    alloc, free = b.alloc, b.free
    m = Meter(b)
    wall = 0
    ovh2 = 2 * ovh
    b.enter()
    try:
        for c in range(0, len(ops), chunk):
            w0 = pc()
            for slot, size in ops[c:c + chunk]:
                if size:
                    t0 = pc()
                    ptrs[slot] = alloc(size)
                    ta[slot] = pc() - t0
                else:
                    t0 = pc()
                    free(ptrs[slot])
                    app(ta[slot] + pc() - t0 - ovh2)
            wall += pc() - w0
            m.sample()
    finally:
        b.leave()
    return {**summary(samples, wall, len(samples)), **m.result()}


def wl_trace(backends, ops, ovh, progress, label, prm):
    out = {}
    for b in backends:
        use = ops
        if b.latency and prm["lat_div"] > 1:
            use = _prefix_closed(ops, len(ops) // prm["lat_div"])
        out[b.name] = {**_run_trace(b, use, ovh), "ops": len(use)}
        b.trim()
        progress.step(f"{label}: {b.name}")
    return out


def _prefix_closed(ops, n):
    """The first ``n`` operations plus the frees that close their allocations."""
    head = ops[:n]
    live = {}
    for slot, size in head:
        if size:
            live[slot] = True
        else:
            live.pop(slot, None)
    return head + [(s, 0) for s in live]


def _growth_sizes(n):
    return [16 + 16 * (i % 64) for i in range(n)]     # 16..1024 B, mean 520 B


def wl_growth(backends, prm, ovh, progress):
    """Pool-hit cost against the number of cached blocks: for each N, N
    blocks of 64 sizes (16..1024 B) are allocated and freed (so cached), then
    ``growth_pairs`` pairs of 256 B (one of those sizes) are timed; the cache
    is then trimmed (LLVM's cannot be: its blocks stay cached, so its N-th
    point has at least N cached blocks)."""
    out = {}
    size = 256
    for b in backends:
        if not b.growth:
            continue
        pts = {}
        alloc, free = b.alloc, b.free
        for npts in prm["growth_points"]:
            held = [alloc(s) for s in _growth_sizes(npts)]
            for p in held:
                free(p)
            del held
            snap = b.snapshot()
            samples = []
            app = samples.append
            for _ in range(20):
                free(alloc(size))
            w0 = pc()
            for _ in repeat(None, prm["growth_pairs"]):
                t0 = pc()
                free(alloc(size))
                app(pc() - t0 - ovh)
            wall = pc() - w0
            pts[npts] = {**summary(samples, wall, len(samples)),
                         "cached_blocks": sum(p.stats.cached_blocks for p in b.pools())
                         if snap else None}
            b.trim()
        meds = [p["median_ns"] for p in pts.values()]
        out[b.name] = {"points": pts, "flatness": max(meds) / min(meds) if min(meds) > 0 else None}
        progress.step(f"growth: {b.name}")
    return out


def record_replay_log(path, n_ops: int, seed: int = 7) -> int:
    """Write an event log with ``MemoryManager(event_log=path)`` over a fake
    backend, running a phased trace: iterations that allocate a set of arrays
    (sizes drift between phases), temporaries, and free them at the end of
    the iteration.  Returns the number of events written."""
    from ..memory import MemoryManager
    from ..memory.fake import FakeBackend
    rng = random.Random(seed)
    fb = FakeBackend()
    with open(path, "w", encoding="utf-8") as f:
        mm = MemoryManager(fb.alloc, fb.free, threshold=8192, policy="exact",
                           event_log=f, debug="", device_label="replay-source")
        ops = 0
        phase_sizes = [rng.choice(_SMALL + _MEDIUM) for _ in range(12)]
        while ops < n_ops:
            if rng.random() < 0.05:     # a new phase: some array sizes change
                phase_sizes = [s if rng.random() < 0.7 else rng.choice(_SMALL + _MEDIUM + _LARGE)
                               for s in phase_sizes]
            held = [mm.allocate(s) for s in phase_sizes]
            tmp = [mm.allocate(rng.choice(_SMALL)) for _ in range(rng.randrange(0, 6))]
            for p in tmp:
                mm.free(p)
            for p in reversed(held):
                mm.free(p)
            ops += 2 * (len(held) + len(tmp))
        mm.drain()
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def replay_ops(path) -> list:
    """The caller operations of an event log as a ``(slot, size)`` trace
    (``alloc`` with a pointer, ``free`` of a live one; pointers matched by
    ``(dev, ptr)`` as in :func:`offload_shim.memory.replay`)."""
    from ..memory._replay import read_events
    ops, live, free_slots, nslots = [], {}, [], 0
    for ev in read_events(path):
        op = ev.get("op")
        if op == "alloc" and ev.get("ptr"):
            slot = free_slots.pop() if free_slots else nslots
            if slot == nslots:
                nslots += 1
            live[(ev.get("dev", ""), ev["ptr"])] = slot
            ops.append((slot, int(ev["size"])))
        elif op == "free":
            slot = live.pop((ev.get("dev", ""), ev.get("ptr")), None)
            if slot is not None:
                ops.append((slot, 0))
                free_slots.append(slot)
    return ops + [(s, 0) for s in live.values()]



def run_workloads(backends, prm, ovh, progress, log_path, workloads):
    results = {}
    if "hot" in workloads:
        results["hot"] = wl_hot(backends, prm, ovh, progress)
    if "llvm-mm" in workloads:
        results["llvm-mm"] = wl_llvm_mm(backends, prm, ovh, progress)
    if "random" in workloads:
        results["random"] = wl_trace(backends, random_trace(prm["trace_ops"], seed=1), ovh,
                                     progress, "random", prm)
    if "growth" in workloads:
        results["growth"] = wl_growth(backends, prm, ovh, progress)
    if "replay" in workloads and log_path:
        results["replay"] = wl_trace(backends, replay_ops(log_path), ovh, progress, "replay", prm)
    return results

