"""The statistics of a pool: what each figure counts, the per-bucket
figures derived at snapshot time, ``stats=False``.

Sources: docs/memory-manager.md "Statistics" (names after CuPy, RMM,
PyTorch; docs/references.md, pools compared).  No timing is asserted (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import random

import pytest

import offload_shim as osh
from offload_shim.memory import DEBUG_ENV, THRESHOLD_ENV, BucketStats, MemoryManager
from offload_shim.memory.fake import FakeBackend

from helpers import make_pool

POW2 = [1 << k for k in range(2, 14)]     # 4 .. 8192

make = make_pool


@pytest.fixture(autouse=True)
def _bundled_plugin_stays_clean():
    """Pure-Python tests: no plugin is loaded, so conftest's check of the
    bundled host plugin does not apply here."""
    yield


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv(THRESHOLD_ENV, raising=False)
    monkeypatch.delenv(DEBUG_ENV, raising=False)


@pytest.mark.parametrize("n", POW2)
def test_per_bucket_stats_use_the_llvm_buckets(n):
    b, mm = make(threshold=1 << 20)
    for s in (n - 1, n, n + 1):
        mm.free(mm.allocate(s))
    per = mm.stats.per_bucket
    assert set(per) == {0 if n == 4 else n // 2, n}
    assert per[n].misses == 2 and per[n].cached_blocks == 2
    assert sum(p.bytes_cached for p in per.values()) == 3 * n


def test_stats_peaks_and_as_dict():
    b, mm = make()
    ps = [mm.allocate(1000) for _ in range(3)]
    for p in ps:
        mm.free(p)
    mm.allocate(1000)
    s = mm.stats
    assert s.peak_bytes_in_use == 3000 and s.peak_bytes_total == 3000
    assert s.bytes_in_use == 1000 and s.bytes_cached == 2000
    assert s.hits == 1 and s.misses == 3 and s.hit_rate == 0.25
    d = json.loads(json.dumps(s.as_dict()))
    assert d["per_bucket"]["512"]["misses"] == 3 and "hits" not in d["per_bucket"]["512"]


def test_stats_off_keeps_only_the_gauges():
    b, mm = make(stats=False)
    p = mm.allocate(64)
    mm.free(mm.allocate(32))
    s = mm.stats
    assert (s.bytes_in_use, s.bytes_cached, s.live_blocks, s.cached_blocks) == (64, 32, 1, 1)
    assert (s.peak_bytes_in_use, s.peak_bytes_total) == (96, 96)
    assert s.hits == s.misses == s.backend_allocs == 0 and s.per_bucket == {}
    mm.free(p)
    assert mm.allocate(64) == p


def test_a_bucket_has_no_peak_in_use_and_no_hits():
    # A per-bucket peak of bytes in use, or count of hits, would cost an
    # update of the bucket on every hit (and every cached free); a figure
    # that always read 0 was wrong, so the buckets do not have them.  The
    # pool's own peak and hits are exact.
    b, mm = make()
    ps = [mm.allocate(100) for _ in range(3)]
    for p in ps:
        mm.free(p)
    s = mm.stats
    x = s.per_bucket[64]
    assert isinstance(x, BucketStats)
    assert not hasattr(x, "peak_bytes_in_use") and not hasattr(x, "hits")
    assert "peak_bytes_in_use" not in s.as_dict()["per_bucket"][64]
    assert "peak_bytes_in_use" in s.as_dict() and s.peak_bytes_in_use == 300
    mm.free(mm.allocate(100))
    assert mm.stats.hits == 1
    assert x.peak_bytes_total == 300 and x.bytes_cached == 300


def _check_snapshot(mm, b, model_hits, model_misses):
    s = mm.stats
    assert s.bytes_total == s.bytes_in_use + s.bytes_cached == b.held_bytes
    assert s.live_blocks + s.cached_blocks == len(b.live)
    assert s.hits == model_hits and s.misses == model_misses
    assert s.backend_allocs - s.backend_frees == s.live_blocks + s.cached_blocks
    per = s.per_bucket
    for k in ("bytes_in_use", "bytes_cached", "bytes_total", "live_blocks", "cached_blocks",
              "misses", "evictions", "oom_retries", "backend_allocs", "backend_frees"):
        assert sum(getattr(x, k) for x in per.values()) == getattr(s, k), k
    for x in per.values():
        assert x.bytes_total == x.bytes_in_use + x.bytes_cached <= x.peak_bytes_total
        assert x.backend_allocs - x.backend_frees == x.live_blocks + x.cached_blocks
    assert s.peak_bytes_total >= s.bytes_total and s.peak_bytes_in_use >= s.bytes_in_use
    return s


@pytest.mark.parametrize("policy", ["exact", "binned"])
@pytest.mark.parametrize("cap", [None, 4096])
def test_derived_gauges_are_conserved_on_a_random_trace(policy, cap):
    rng = random.Random(5)
    b, mm = make(FakeBackend(capacity=1 << 16), policy=policy, cache_limit=cap,
                 threshold=2048, oom="incremental")
    live = []
    hits = misses = 0
    for step in range(3000):
        if live and rng.random() < 0.45:
            mm.free(live.pop(rng.randrange(len(live))))
        else:
            size = rng.choice((8, 24, 100, 130, 512, 700, 2048, 3000))
            before = mm.stats
            try:
                live.append(mm.allocate(size))
            except osh.OutOfDeviceMemoryError:
                pass
            after = mm.stats
            hits += after.hits - before.hits
            misses += after.misses - before.misses
        if step % 250 == 0:
            mm.trim(rng.choice((0, 1000)))
        if step % 50 == 0:
            _check_snapshot(mm, b, hits, misses)
    _check_snapshot(mm, b, hits, misses)
    mm.drain()
    s = mm.stats
    assert s.bytes_total == 0 and b.held_bytes == 0
    assert all(x.live_blocks == x.cached_blocks == 0 for x in s.per_bucket.values())


def test_per_bucket_peak_total_is_kept_on_backend_calls():
    b, mm = make()
    ps = [mm.allocate(100) for _ in range(3)]       # bucket 64: 300 bytes held
    for p in ps:
        mm.free(p)
    mm.free(mm.allocate(100))                       # a hit: held unchanged
    mm.trim()
    q = mm.allocate(100)
    x = mm.stats.per_bucket[64]
    assert x.peak_bytes_total == 300 and x.bytes_total == 100 and mm.stats.hits == 1
    assert mm.stats.peak_bytes_in_use == 300 and mm.stats.peak_bytes_total == 300
    mm.free(q)


def test_a_failed_backend_free_keeps_the_block_counted_as_held():
    """A cached block whose ``backend_free`` fails during ``trim`` is held again
    (its bucket's bytes held go back up, no eviction is counted), so a later
    miss in the bucket raises its peak above the first block alone."""
    b = FakeBackend()
    fail = [True]

    def free(ptr):
        if fail.pop() if fail else False:
            raise osh.PluginCallError("free failed")
        b.free(ptr)

    mm = MemoryManager(b.alloc, free, debug="", device_label="fake:0")
    mm.free(mm.allocate(100))                       # cached: bucket 64, 100 bytes held
    with pytest.raises(osh.PluginCallError):
        mm.trim()
    x = mm.stats.per_bucket[64]
    assert (x.bytes_cached, x.evictions, x.backend_frees, x.peak_bytes_total) == (100, 0, 0, 100)
    p = mm.allocate(100)                            # a hit on the block kept
    q = mm.allocate(100)                            # a miss: 200 bytes held
    x = mm.stats.per_bucket[64]
    assert (x.bytes_total, x.peak_bytes_total, x.misses) == (200, 200, 2)
    mm.free(p)
    mm.free(q)
    assert mm.trim() == 200 and mm.stats.per_bucket[64].backend_frees == 2


def test_poisoned_blocks_stay_counted_in_use_in_their_bucket():
    seen = []
    b = FakeBackend()
    mm = None

    def poison(ptr, size):
        s = mm.stats
        seen.append((s.live_blocks, s.bytes_in_use, s.per_bucket[128].live_blocks))

    mm = MemoryManager(b.alloc, b.free, debug="poison", poison=poison, threshold=8192)
    mm.free(mm.allocate(200))
    assert seen == [(1, 200, 1)]
    s = mm.stats
    assert (s.live_blocks, s.cached_blocks, s.per_bucket[128].cached_blocks) == (0, 1, 1)
    mm.drain()


def test_queries_tell_the_requested_size_from_the_block_size():
    """After a binned hit the block (1000 bytes, obtained by an earlier request) is larger
    than the request (990): ``size_of``, ``sizes_of`` and ``live_allocations`` report the
    request, ``block_size_of`` the block; a pointer that is not live is a ``KeyError`` naming
    it, or ``None`` in ``sizes_of``."""
    b, mm = make_pool(policy="binned")
    p = mm.allocate(1000)
    mm.free(p)
    q = mm.allocate(990)
    assert q == p
    assert (mm.size_of(q), mm.block_size_of(q)) == (990, 1000)
    assert mm.sizes_of([q, q + 16]) == [990, None]
    assert mm.live_allocations() == [(q, 990)]
    for query in (mm.size_of, mm.block_size_of):
        with pytest.raises(KeyError) as e:
            query(q + 16)
        assert e.value.args == (q + 16,)
    assert mm.size_of(q + 16, None) is None
    mm.drain()


def test_release_all_releases_a_one_byte_block_too():
    b, mm = make_pool()
    p, q = mm.allocate(1), mm.allocate(100)
    mm.free(p)
    mm.free(q)
    assert mm.release_all() == 101
    assert mm.stats.bytes_cached == 0 and b.live == {}
    mm.drain()


def test_trim_shrinks_the_pointer_table_a_burst_left_sparse():
    """A burst of live blocks leaves the pointer table sized for them after they are freed;
    ``trim`` copies it down (a hit then touches fewer cache lines).  Reads the private table:
    the effect is on memory only."""
    import sys
    b, mm = make_pool()
    ps = [mm.allocate(64) for _ in range(2000)]
    keep = ps.pop()
    for p in ps:
        mm.free(p)
    burst = sys.getsizeof(mm._live)
    mm.trim()
    assert sys.getsizeof(mm._live) < burst // 10
    assert mm.owns(keep) and mm.live_allocations() == [(keep, 64)]
    mm.drain()


@pytest.mark.parametrize("stats", [True, False])
def test_a_new_manager_reports_zero_everywhere_and_counts_hits_only_with_statistics(stats):
    b, mm = make_pool(stats=stats)
    s = mm.stats
    assert all(v == 0 for v in s[:-1]) and not s.per_bucket
    p = mm.allocate(64)
    mm.free(p)
    mm.allocate(64)
    s = mm.stats
    assert (s.hits, s.bytes_in_use, s.peak_bytes_total) == ((1 if stats else 0), 64, 64)
    mm.drain()


@pytest.mark.parametrize("policy", ["exact", "binned"])
@pytest.mark.parametrize("stats", [True, False])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_peak_in_use_is_the_highest_bytes_in_use_seen(policy, stats, seed):
    """The hit path compares the accounting word with its peak only while the peak is
    below the bytes held (``_peak_open``; a hit cannot pass bytes held): on a random
    trace of hits, misses, bypasses, trims and backend frees that fail (a block kept
    live or cached again, bytes held back up) the peak of bytes in use is exactly the
    highest bytes in use seen after any call, and hits are counted as before."""
    rng = random.Random(seed)
    b = FakeBackend()
    fails = [False]

    def free(ptr):
        if fails[0] and rng.random() < 0.5:
            raise osh.PluginCallError("free failed")
        b.free(ptr)

    mm = MemoryManager(b.alloc, free, threshold=2048, policy=policy, stats=stats,
                       debug="", device_label="fake:0")
    live, peak = [], 0
    for _ in range(2000):
        fails[0] = rng.random() < 0.1
        r = rng.random()
        try:
            if live and r < 0.45:
                mm.free(live.pop(rng.randrange(len(live))))
            elif r < 0.5:
                mm.trim(rng.choice((0, 500)))
            else:
                live.append(mm.allocate(rng.choice((24, 100, 130, 512, 2000, 3000))))
        except osh.PluginCallError:
            pass
        fails[0] = False
        s = mm.stats
        peak = max(peak, s.bytes_in_use)
        assert s.peak_bytes_in_use == peak
        assert s.bytes_in_use <= s.bytes_total
    for p in live:
        mm.free(p)
    mm.drain()


def test_a_hit_after_a_larger_miss_raises_the_peak():
    """Bytes held grew past the peak (a miss while a block was cached): the next hit
    brings bytes in use to a new peak, and the hit path must compare again."""
    b, mm = make()
    mm.free(mm.allocate(100))                       # 100 held, peak 100, cached 100
    q = mm.allocate(200)                            # a miss: 300 held, peak 200
    assert mm.stats.peak_bytes_in_use == 200
    p = mm.allocate(100)                            # a hit: 300 in use
    assert mm.stats.peak_bytes_in_use == 300 and mm.stats.hits == 1
    mm.free(p)
    mm.free(q)
    p = mm.allocate(100)                            # a hit below the peak
    assert mm.stats.peak_bytes_in_use == 300 and mm.stats.hits == 2
    mm.free(p)


@pytest.mark.parametrize("how", ["free", "trim"])
def test_bytes_held_coming_back_after_a_failed_backend_free_reopen_the_peak(how):
    """The lock is dropped around ``backend_free``: a miss in another call meanwhile
    (here inside the failing backend free) books bytes held without the block being
    freed; when the free fails the block's bytes are held again, above the peak, so
    the next hit must raise the peak (``_restore_live`` / ``_recache`` reopen it)."""
    b = FakeBackend()
    mm = None
    state = {"armed": False, "other": None}

    def free(ptr):
        if state["armed"]:
            state["armed"] = False
            state["other"] = mm.allocate(300)       # a miss while the block is out
            raise osh.PluginCallError("free failed")
        b.free(ptr)

    mm = MemoryManager(b.alloc, free, threshold=2048, debug="", device_label="fake:0")
    a = mm.allocate(100)
    x = mm.allocate(5000)                           # bypass: 5100 held and in use
    mm.free(a)                                      # cached
    state["armed"] = True
    with pytest.raises(osh.PluginCallError):
        if how == "free":
            mm.free(x)                              # x live again: 5400 held
        else:
            mm.trim()                               # a cached again: 5400 held
    assert mm.stats.bytes_total == 5400 and mm.stats.peak_bytes_in_use == 5300
    p = mm.allocate(100)                            # a hit: 5400 in use
    assert mm.stats.peak_bytes_in_use == 5400 == mm.stats.bytes_in_use
    for q in (p, x, state["other"]):
        mm.free(q)
    mm.drain()
