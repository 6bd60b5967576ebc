"""The workloads of ``offload-shim bench``: ``hot``, ``llvm-mm``,
``random``, ``growth`` and ``replay``, and the statistics-overhead
measurement.

Each workload takes the rows (:class:`~.backends.Backend`), the profile's
counts, the timer overhead (ns), the progress bar and a ``failed`` dict, and
returns figures per row.  Every row runs the same operations, and the rows
take turns in blocks (a round, a chunk of a trace, a batch of timed hits),
the order rotated from block to block, so that noise from the rest of the
machine falls on all rows alike.  A row that raises is dropped from the
workload and from the rest of the run; its name and the reason go into
``failed`` (reported under *Skipped*), and the other rows go on.
"""

from __future__ import annotations

import random
import statistics
import threading
from itertools import repeat

from . import stop
from .timing import Meter, cpu, pc, summary


class RowFailed(Exception):
    """Internal: a row raised during a block (``__cause__`` is the error)."""


def rotated(rows, k: int) -> list:
    """``rows`` starting at index ``k`` modulo its length (the turn order of
    block ``k``)."""
    if not rows:
        return []
    k %= len(rows)
    return list(rows[k:]) + list(rows[:k])


def reason(workload: str, exc: BaseException) -> str:
    """One line: the workload and the row's error."""
    return f"failed in {workload}: {type(exc).__name__}: {str(exc)[:300]}"


def _block(b, fn, *args):
    """``fn(*args)`` between ``b.enter()`` and ``b.leave()``."""
    b.enter()
    try:
        return fn(*args)
    finally:
        b.leave()


def _drop(rows, b, failed, workload, exc):
    failed[b.name] = reason(workload, exc)
    rows.remove(b)


def _guard(rows, b, failed, workload, fn, *args) -> bool:
    """Run one block of row ``b``; on an error drop the row (False).  A
    pending stop request (:mod:`.stop`) raises before the block starts."""
    stop.check()
    try:
        _block(b, fn, *args)
        return True
    except Exception as exc:  # noqa: BLE001 - one failing row must not end the run
        _drop(rows, b, failed, workload, exc)
        return False


# -- hot ---------------------------------------------------------------------------------

def wl_hot(backends, prm, ovh, progress, failed):
    """One size (``hot_size`` bytes), ``free(alloc(size))``: after 20 untimed
    warm-up pairs per row, ``hot_rounds`` rounds of ``hot_pairs`` timed
    pairs, the rows taking turns round by round."""
    size = prm["hot_size"]
    rows = list(backends)
    res = {b.name: ([], []) for b in rows}            # samples, blocks

    def warm(b):
        for _ in range(20):
            b.free(b.alloc(size))

    def batch(b, n):
        samples, blocks = res[b.name]
        alloc, free, app = b.alloc, b.free, samples.append
        c0 = cpu()
        w0 = pc()
        for _ in repeat(None, n):
            t0 = pc()
            free(alloc(size))
            app(pc() - t0 - ovh)
        w1 = pc()
        blocks.append((w1 - w0, cpu() - c0, n))

    for b in list(rows):
        _guard(rows, b, failed, "hot", warm, b)
    meters = {b.name: Meter(b) for b in rows}
    for r in range(prm["hot_rounds"]):
        for b in rotated(rows, r):
            if _guard(rows, b, failed, "hot", batch, b, prm["hot_pairs"]):
                meters[b.name].sample()
        progress.step(f"hot: round {r + 1}/{prm['hot_rounds']}", 0)
    out = {}
    for b in rows:
        samples, blocks = res[b.name]
        out[b.name] = {**summary(samples, blocks), **meters[b.name].result(), "size": size}
    progress.step("hot")
    return out


def stats_overhead(backends, prm, ovh):
    """stats=True vs stats=False hit cost: ``pool:exact`` and
    ``pool:exact,stats=off`` in alternating short batches of 200 pairs, each batch
    timed as a whole (a pair of the C hit path is near the timer's own resolution,
    so per-pair samples would quantise it); per batch the mean pair, less the
    timer's overhead spread over the batch, then the median over batches of each."""
    by = {b.name: b for b in backends}
    on, off = by.get("pool:exact"), by.get("pool:exact,stats=off")
    if on is None or off is None:
        return None
    size = prm["hot_size"]
    med = {on.name: [], off.name: []}
    for r in range(prm["stats_rounds"]):
        stop.check()
        for b in ((on, off) if r % 2 == 0 else (off, on)):
            alloc, free = b.alloc, b.free
            t0 = pc()
            for _ in repeat(None, 200):
                free(alloc(size))
            med[b.name].append((pc() - t0 - ovh) / 200)
    m_on, m_off = statistics.median(med[on.name]), statistics.median(med[off.name])
    return {"stats_on_ns": m_on, "stats_off_ns": m_off,
            "overhead": (m_on - m_off) / m_off if m_off > 0 else None}


# -- llvm-mm -----------------------------------------------------------------------------

#: LLVM's memory-manager test pattern: every power of two 4 B..32 KiB.
MM_SIZES = tuple(1 << k for k in range(2, 16))


def _mm_thread(b, sizes, out, errors, barrier):
    """One thread of one round: allocate every size, then free them; appends
    ``(size, pair ns)``.  Frees what it holds before leaving, also on error
    or when ``stop`` is set.  ``b.enter()`` runs in the thread too (a CUDA
    context is per thread); ``b.leave()`` only in the main thread, after
    every thread of the round has finished (the emulated latency is one
    setting for the whole plugin)."""
    b.enter()
    app = out.append
    alloc, free = b.alloc, b.free
    held = []
    try:
        barrier.wait()
        for s in sizes:
            if stop.requested():
                break
            t0 = pc()
            p = alloc(s)
            held.append((s, p, pc() - t0))
        while held:
            s, p, ta = held.pop(0)
            t0 = pc()
            free(p)
            app((s, ta + pc() - t0))
    except BaseException as exc:  # noqa: BLE001 - reported by the main thread
        errors.append(exc)
        barrier.abort()
        for _s, p, _ta in held:
            try:
                free(p)
            except Exception:  # noqa: BLE001 - the first error is the one reported
                pass


def _mm_round(b, nthr, samples):
    """One round of the pattern on ``nthr`` threads; returns wall ns from the
    release of the barrier to the last join.  Re-raises a thread's error.
    Every thread started is joined before this returns or raises."""
    errors = []
    barrier = threading.Barrier(nthr + 1)
    ths = []
    try:
        for i in range(nthr):
            t = threading.Thread(target=_mm_thread, args=(b, MM_SIZES, samples, errors, barrier),
                                 name=f"bench-llvm-mm-{i}", daemon=True)
            t.start()
            ths.append(t)
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        w0 = pc()
        for t in ths:
            t.join()
        wall = pc() - w0
    except BaseException:
        barrier.abort()
        for t in ths:
            t.join()
        raise
    if errors:
        raise errors[0]
    return wall


def wl_llvm_mm(backends, prm, ovh, progress, failed):
    """LLVM's memory-manager test pattern: ``mm_threads`` threads at once,
    each round allocating every power of two 4 B..32 KiB and then freeing
    them (16 and 32 KiB are above the 8 KiB threshold: no pool serves them).
    One untimed warm-up round per row, then ``mm_rounds`` timed rounds, the
    rows taking turns round by round; the pools keep their blocks between
    rounds (the pattern's reuse) and are trimmed at the end.

    Per-pair samples include waits for the GIL; ``passthrough_median_ns`` is
    the median of the 16 and 32 KiB pairs alone (a plugin call in every row).
    Throughput: the median over the rounds of all threads' pairs / the
    round's wall time."""
    nthr = prm["mm_threads"]
    rows = [b for b in backends if b.threaded]
    res = {b.name: ([], []) for b in rows}            # (size, ns) pairs, blocks

    def timed(b):
        pairs, blocks = res[b.name]
        n0 = len(pairs)
        wall = _mm_round(b, nthr, pairs)
        blocks.append((wall, None, len(pairs) - n0))

    for b in list(rows):
        _guard(rows, b, failed, "llvm-mm", _mm_round, b, nthr, [])     # warm-up
    meters = {b.name: Meter(b) for b in rows}
    for r in range(prm["mm_rounds"]):
        for b in rotated(rows, r):
            if _guard(rows, b, failed, "llvm-mm", timed, b):
                meters[b.name].sample()
        progress.step(f"llvm-mm: round {r + 1}/{prm['mm_rounds']}", 0)
    out = {}
    for b in rows:
        pairs, blocks = res[b.name]
        ns = [t - 2 * ovh for _s, t in pairs]
        big = sorted(t - 2 * ovh for s, t in pairs if s > 8192)
        out[b.name] = {**summary(ns, blocks), **meters[b.name].result(),
                       "threads": nthr, "rounds": prm["mm_rounds"],
                       "passthrough_median_ns": float(big[len(big) // 2]) if big else None}
        _trim(b, failed, "llvm-mm")
    progress.step("llvm-mm")
    return out


def _trim(b, failed, workload):
    try:
        b.trim()
    except Exception as exc:  # noqa: BLE001
        failed.setdefault(b.name, reason(workload, exc))


# -- traces ------------------------------------------------------------------------------

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




class _TraceRun:
    """One row's pass over a ``(slot, size)`` trace, chunk by chunk.  In a
    timed chunk each pair's alloc and free are timed and added (a pair whose
    alloc ran in a warm-up chunk is not counted); cached bytes are sampled
    between chunks (not timed); hit rate and cached bytes count from the
    first timed chunk."""

    def __init__(self, b, ops, ovh):
        nslots = 1 + max((s for s, _ in ops), default=0)
        self.b = b
        self.ops = ops
        self.ptrs = [0] * nslots
        self.ta = [-1] * nslots
        self.live = set()
        self.samples = []
        self.blocks = []
        self.ovh2 = 2 * ovh
        self.meter = None

    def warm(self, c0, c1):
        ptrs, ta, live = self.ptrs, self.ta, self.live
        alloc, free = self.b.alloc, self.b.free
        for slot, size in self.ops[c0:c1]:
            if size:
                ptrs[slot] = alloc(size)
                ta[slot] = -1
                live.add(slot)
            else:
                free(ptrs[slot])
                live.discard(slot)

    def chunk(self, c0, c1):
        if self.meter is None:
            self.meter = Meter(self.b)
        ptrs, ta, live = self.ptrs, self.ta, self.live
        app = self.samples.append
        alloc, free = self.b.alloc, self.b.free
        ovh2 = self.ovh2
        n0 = len(self.samples)
        k0 = cpu()
        w0 = pc()
        for slot, size in self.ops[c0:c1]:
            if size:
                t0 = pc()
                ptrs[slot] = alloc(size)
                ta[slot] = pc() - t0
                live.add(slot)
            else:
                t0 = pc()
                free(ptrs[slot])
                t1 = pc()
                live.discard(slot)
                if ta[slot] >= 0:
                    app(ta[slot] + t1 - t0 - ovh2)
        w1 = pc()
        self.blocks.append((w1 - w0, cpu() - k0, len(self.samples) - n0))
        self.meter.sample()

    def abandon(self):
        """Free what the trace still holds (after an error), ignoring errors."""
        for slot in self.live:
            try:
                self.b.free(self.ptrs[slot])
            except Exception:  # noqa: BLE001
                pass
        self.live.clear()

    def result(self, warm_ops):
        m = self.meter.result() if self.meter else {"hit_rate": None, "peak_cached_bytes": None}
        return {**summary(self.samples, self.blocks), **m,
                "ops": len(self.ops), "warm_ops": warm_ops}


def wl_trace(backends, ops, ovh, progress, label, prm, failed):
    """Every row runs the whole trace ``ops`` in chunks of ``trace_chunk``
    operations, the rows taking turns chunk by chunk; each row keeps its own
    live blocks between its chunks.  The chunks within the first
    ``trace_warm`` operations run untimed (the pools fill, as in a program
    that has been running a while); the rest are timed.  Pools are trimmed
    at the end."""
    chunk = prm["trace_chunk"]
    warm_ops = min(len(ops), -(-prm.get("trace_warm", 0) // chunk) * chunk)
    rows = list(backends)
    runs = {b.name: _TraceRun(b, ops, ovh) for b in rows}
    for k, c0 in enumerate(range(0, len(ops), chunk)):
        for b in rotated(rows, k):
            run = runs[b.name]
            fn = run.warm if c0 < warm_ops else run.chunk
            if not _guard(rows, b, failed, label, fn, c0, c0 + chunk):
                run.abandon()
    out = {}
    for b in rows:
        out[b.name] = runs[b.name].result(warm_ops)
        _trim(b, failed, label)
    progress.step(label)
    return out


def _growth_sizes(n):
    return [16 + 16 * (i % 64) for i in range(n)]     # 16..1024 B, mean 520 B


def wl_growth(backends, prm, ovh, progress, failed):
    """Pool-hit cost against the number of cached blocks N.  A row that can make
    independent copies of itself (``Backend.replica``: a fresh MemoryManager, or a
    fresh Runtime's Device, over the same plugin) gets one copy per N, all live at
    once: each copy allocates N blocks of 64 sizes (16..1024 B) and frees them (so
    they are cached), and then every (row, N) pair takes turns, batch by batch
    (``growth_pairs`` timed pairs of 256 B per pair, in ``growth_blocks`` batches,
    the order rotated from batch to batch), so that a drift of the machine's load
    falls on every N alike instead of reading as growth.  A row without replicas
    (the LLVM 16 nextgen row: its C++ pool is one per device, and the plugin has too
    few devices for one per N) measures its points one after another, on its own
    pool, emptied between points (``Backend.trim``: its device initialised again);
    ``interleaved`` says which way a row was measured."""
    size = 256
    rows = [b for b in backends if b.growth]
    points = tuple(prm["growth_points"])
    nblk = max(1, prm["growth_blocks"])
    per = max(1, prm["growth_pairs"] // nblk)
    acc = {}                                       # (row name, N) -> (samples, blocks)

    def fill(b, n):
        alloc, free = b.alloc, b.free
        held = [alloc(s) for s in _growth_sizes(n)]
        for p in held:
            free(p)
        for _ in range(20):
            free(alloc(size))

    def batch(b, key):
        alloc, free = b.alloc, b.free
        samples, blocks = acc[key]
        app = samples.append
        c0 = cpu()
        w0 = pc()
        for _ in repeat(None, per):
            t0 = pc()
            free(alloc(size))
            app(pc() - t0 - ovh)
        w1 = pc()
        blocks.append((w1 - w0, cpu() - c0, per))

    def point(b, key):
        samples, blocks = acc[key]
        ps = b.pools()
        return {**summary(samples, blocks),
                "cached_blocks": sum(p.stats.cached_blocks for p in ps) if ps else None}

    pts = {b.name: {} for b in rows}
    interleaved = {b.name: b.replica is not None for b in rows}
    # every N of every row that has replicas: live at once, taking turns
    copies = []                                     # (row, N, its copy)
    try:
        for b in [b for b in rows if b.replica is not None]:
            try:
                for n in points:
                    stop.check()
                    c = b.replica()
                    copies.append((b, n, c))
                    acc[(b.name, n)] = ([], [])
                    fill(c, n)
            except Exception as exc:  # noqa: BLE001 - one failing row must not end the run
                _drop(rows, b, failed, "growth", exc)
                copies = [t for t in copies if t[0] is not b]
        for k in range(nblk):
            for b, n, c in rotated(copies, k):
                if b not in rows:
                    continue
                stop.check()
                try:
                    _block(b, batch, c, (b.name, n))
                except Exception as exc:  # noqa: BLE001
                    _drop(rows, b, failed, "growth", exc)
            progress.step(f"growth: batch {k + 1}/{nblk} of every N at once", 0)
        for b, n, c in copies:
            if b in rows:
                pts[b.name][n] = point(c, (b.name, n))
    finally:
        for _b, _n, c in reversed(copies):
            try:
                c.close()
            except Exception as exc:  # noqa: BLE001
                failed.setdefault(_b.name, reason("growth", exc))
    # rows without replicas: point after point on their own pool
    seq = [b for b in rows if b.replica is None]
    for n in points:
        for b in list(seq):
            if _guard(seq, b, failed, "growth", fill, b, n):
                acc[(b.name, n)] = ([], [])
        for k in range(nblk):
            for b in rotated(seq, k):
                _guard(seq, b, failed, "growth", batch, b, (b.name, n))
        for b in seq:
            pts[b.name][n] = point(b, (b.name, n))
            _trim(b, failed, "growth")
        progress.step(f"growth: {n:,} cached blocks", 0)
    rows = [b for b in rows if b.replica is not None or b in seq]
    out = {}
    for b in rows:
        meds = [p["median_ns"] for p in pts[b.name].values()]
        out[b.name] = {"points": pts[b.name], "interleaved": interleaved[b.name],
                       "flatness": max(meds) / min(meds) if meds and min(meds) > 0 else None}
    progress.step("growth")
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


def run_workloads(backends, prm, ovh, progress, log_path, workloads, failed):
    """The selected workloads in :data:`~.config.WORKLOADS` order (growth,
    which fills the caches most, last); every pool is emptied after each
    workload (``Backend.trim``); a row that failed in one is left out of the
    next."""
    results = {}

    def alive():
        return [b for b in backends if b.name not in failed]

    if "hot" in workloads:
        results["hot"] = wl_hot(alive(), prm, ovh, progress, failed)
    if "llvm-mm" in workloads:
        results["llvm-mm"] = wl_llvm_mm(alive(), prm, ovh, progress, failed)
    if "random" in workloads:
        results["random"] = wl_trace(alive(), random_trace(prm["trace_ops"], seed=1), ovh,
                                     progress, "random", prm, failed)
    if "replay" in workloads and log_path:
        results["replay"] = wl_trace(alive(), replay_ops(log_path), ovh, progress, "replay",
                                     prm, failed)
    if "growth" in workloads:
        results["growth"] = wl_growth(alive(), prm, ovh, progress, failed)
    return results
