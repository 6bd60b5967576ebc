"""Which cached blocks go back to the backend: the cache cap, ``trim`` and
the OOM ladders.

Sources: LLVM D81054 (LLVM ``freeAndAllocate``; the summary's incremental
ladder; the reviewer's "unbounded memory" concern), CuPy ``set_limit`` /
#7678, docs/memory-manager.md "Cap, trim, drain".
"""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import offload_shim as osh
from offload_shim.errors import OffloadError, OutOfDeviceMemoryError
from offload_shim.memory import DEBUG_ENV, THRESHOLD_ENV, MemoryManager
from offload_shim.memory.fake import FakeBackend

from helpers import assert_conserved, make_pool

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


# -- the cache cap -------------------------------------------------------------


def test_cache_limit_evicts_oldest_first():
    b, mm = make(threshold=1000, cache_limit=250)
    a, c, d = mm.allocate(100), mm.allocate(100), mm.allocate(100)
    mm.free(a)
    mm.free(c)
    assert b.freed == {}
    mm.free(d)                                    # 300 > 250: the oldest (a) goes
    assert list(b.freed) == [a]
    s = mm.stats
    assert s.bytes_cached == 200 and s.evictions == 1
    assert mm.allocate(100) == c                  # the least recently freed (LLVM's)
    assert_conserved(mm, b)


def test_cache_limit_evicts_only_the_blocks_it_must():
    # the cap-eviction case without a plugin: cap 4096; three
    # 1000-byte blocks cached, then an 8000-byte block freed: only it goes.
    b, mm = make(threshold=8192, cache_limit=4096)
    small = [mm.allocate(1000) for _ in range(3)]
    big = mm.allocate(8000)
    for p in small:
        mm.free(p)
    mm.free(big)
    assert list(b.freed) == [big]
    s = mm.stats
    assert s.cached_blocks == 3 and s.evictions == 1
    again = [mm.allocate(1000) for _ in range(3)]
    assert sorted(again) == sorted(small) and mm.stats.hits == 3
    assert_conserved(mm, b)


def test_cache_limit_prefers_one_old_block_to_several():
    b, mm = make(threshold=8192, cache_limit=4000)
    blocks = [mm.allocate(s) for s in (3000, 500, 500)]
    for p in blocks:
        mm.free(p)                                # 4000 cached: at the cap
    q = mm.allocate(600)
    mm.free(q)                                    # 4600: 600 over; the 3000 covers it alone
    assert list(b.freed) == [blocks[0]]
    r = mm.allocate(700)
    mm.free(r)                                    # 2300: under the cap
    assert list(b.freed) == [blocks[0]]
    assert mm.stats.bytes_cached == 2300
    assert_conserved(mm, b)


def _fewest(sizes, need):
    """The fewest of ``sizes`` whose bytes reach ``need`` (brute force)."""
    from itertools import combinations
    for k in range(1, len(sizes) + 1):
        if any(sum(c) >= need for c in combinations(sizes, k)):
            return k
    return None


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.sampled_from([16, 100, 300, 1000, 2500]), min_size=1, max_size=9),
       over=st.integers(1, 4000), last=st.sampled_from([16, 300, 1000, 2500, 6000]))
def test_cap_evicts_the_fewest_blocks_and_the_oldest_that_suffice(sizes, over, last):
    """All of ``sizes`` fit under the cap; one more free of ``last`` bytes
    goes ``over`` it.  The cap releases a smallest set of blocks that brings
    the cache under it; when one block suffices, the oldest such block."""
    cap = max(sum(sizes), sum(sizes) + last - over)
    b, mm = make(threshold=8192, cache_limit=cap)
    ps = [mm.allocate(s) for s in sizes]
    q = mm.allocate(last)
    for p in ps:
        mm.free(p)
    assert b.freed == {}
    mm.free(q)
    blocks = ps + [q]                             # oldest first
    need = sum(sizes) + last - cap
    victims = [blocks.index(p) for p in b.freed]
    sz = sizes + [last]
    if need <= 0:
        assert victims == []
    else:
        assert len(victims) == _fewest(sz, need)
        assert sum(sz[i] for i in victims) >= need
        if len(victims) == 1:
            assert victims[0] == min(i for i, x in enumerate(sz) if x >= need)
    assert mm.stats.bytes_cached <= cap
    assert_conserved(mm, b)


def test_cache_limit_block_larger_than_cap_is_not_kept():
    b, mm = make(threshold=1000, cache_limit=50)
    p = mm.allocate(100)
    mm.free(p)
    assert p in b.freed and mm.stats.bytes_cached == 0


def test_cache_limit_zero_caches_nothing():
    b, mm = make(cache_limit=0)
    for s in (8, 16, 8):
        mm.free(mm.allocate(s))
    assert mm.stats.bytes_cached == 0 and len(b.freed) == 3


@pytest.mark.parametrize("cap", [600, 400])
def test_b9_cap_does_not_block_a_large_allocation(cap):
    # CuPy #7678: with a cap, alloc 512 MiB, free, alloc 800 MiB failed although
    # nothing was in use.  Units here: capacity 1000, threshold raised so both pool.
    b, mm = make(FakeBackend(capacity=1000), threshold=1000, cache_limit=cap)
    p = mm.allocate(512)
    mm.free(p)
    assert mm.stats.bytes_cached == (512 if cap >= 512 else 0)
    q = mm.allocate(800)
    assert b.live == {q: 800} and p in b.freed
    assert mm.stats.evictions == 1
    assert_conserved(mm, b)


# -- trim / release_all --------------------------------------------------------


def test_trim_releases_the_fewest_blocks_largest_first_and_release_all():
    b, mm = make()
    ps = [mm.allocate(s) for s in (10, 20, 30, 40, 40)]
    for p in ps:
        mm.free(p)
    assert mm.trim(110) == 40                     # 140 cached: one 40 is enough
    assert list(b.freed) == [ps[3]]               # the least recently freed of its size
    assert mm.stats.bytes_cached == 100
    assert mm.trim(45) == 70                      # 40, then 30 (fewest blocks for 55)
    assert list(b.freed) == [ps[3], ps[4], ps[2]]
    assert mm.trim(1000) == 0
    assert mm.release_all() == 30
    assert mm.stats.bytes_cached == 0 and mm.stats.evictions == 5
    assert mm.release_all() == 0
    with pytest.raises(ValueError):
        mm.trim(-1)
    assert_conserved(mm, b)


# -- OOM ladders ---------------------------------------------------------------


def _cache_three(mm):
    ps = [mm.allocate(s) for s in (100, 200, 300)]
    for p in ps:
        mm.free(p)
    return ps


def test_oom_free_all_releases_every_cached_block():
    b, mm = make(FakeBackend(capacity=1000), threshold=1000, oom="free-all")
    ps = _cache_three(mm)
    p = mm.allocate(500)                          # 600 cached + 500 > 1000
    assert sorted(b.free_order) == sorted(ps)
    s = mm.stats
    assert s.bytes_cached == 0 and s.oom_retries == 1 and s.evictions == 3
    assert b.live == {p: 500}
    assert_conserved(mm, b)


def test_oom_incremental_releases_largest_first_only_as_needed():
    b, mm = make(FakeBackend(capacity=1000), threshold=1000, oom="incremental")
    p100, p200, p300 = _cache_three(mm)
    mm.allocate(500)                              # freeing 300 is enough
    assert b.free_order == [p300]
    assert mm.stats.bytes_cached == 300 and mm.stats.oom_retries == 1
    q = mm.allocate(450)                          # 800 + 450 > 1000 -> free 200, then 100
    assert b.free_order == [p300, p200, p100]
    assert mm.stats.oom_retries == 3 and q in b.live
    assert_conserved(mm, b)


def test_oom_incremental_stops_at_first_success():
    b, mm = make(FakeBackend(capacity=1000), threshold=1000, oom="incremental")
    p100, p200, p300 = _cache_three(mm)
    mm.allocate(750)                              # needs 300 then 200 released
    assert b.free_order == [p300, p200]
    assert mm.stats.cached_blocks == 1 and mm.stats.oom_retries == 2


@pytest.mark.parametrize("oom", ["free-all", "incremental"])
def test_oom_ladder_also_serves_bypass_allocations(oom):
    b, mm = make(FakeBackend(capacity=10000), oom=oom)
    ps = [mm.allocate(4000), mm.allocate(4000)]
    for p in ps:
        mm.free(p)
    p = mm.allocate(9000)                         # above the threshold
    assert mm.owns(p) and mm.stats.bytes_cached == 0


@pytest.mark.parametrize("oom", ["free-all", "incremental"])
def test_out_of_device_memory_error(oom):
    b, mm = make(FakeBackend(capacity=1000), threshold=1000, oom=oom, device_label="gpu:3")
    live = mm.allocate(400)
    mm.free(mm.allocate(300))                     # 300 cached, released by the ladder
    with pytest.raises(OutOfDeviceMemoryError) as ei:
        mm.allocate(700)
    e = ei.value
    assert isinstance(e, MemoryError) and isinstance(e, OffloadError)
    assert (e.requested, e.cached, e.in_use, e.device) == (700, 0, 400, "gpu:3")
    msg = str(e)
    for part in ("700", "400", "gpu:3", "300", oom):
        assert part in msg
    assert mm.owns(live) and mm.stats.oom_retries >= 1
    assert_conserved(mm, b)


def test_oom_under_binned_asks_for_the_requested_size():
    asked = []
    b = FakeBackend(fail=True)
    b.on_call = lambda op, arg: asked.append(arg) if op == "alloc" else None
    b, mm = make(b, policy="binned")
    with pytest.raises(OutOfDeviceMemoryError) as ei:
        mm.allocate(100)
    assert ei.value.requested == 100 and asked == [100, 100]     # never its class (104)


def test_oom_on_empty_cache_retries_once_then_raises():
    for oom in ("free-all", "incremental"):
        b, mm = make(FakeBackend(fail=True), oom=oom)
        with pytest.raises(OutOfDeviceMemoryError):
            mm.allocate(64)
        assert b.alloc_calls == 2 and mm.stats.oom_retries == 1


def test_backend_returning_none_is_oom():
    mm = MemoryManager(lambda n: None, lambda p: None, debug="")
    with pytest.raises(OutOfDeviceMemoryError):
        mm.allocate(8)


def test_backend_error_propagates_and_leaves_no_lock_held():
    def boom(size):
        raise OffloadError("data_alloc failed", code=1, function="__tgt_rtl_data_alloc")
    b = FakeBackend()
    mm = MemoryManager(boom, b.free, debug="")
    with pytest.raises(OffloadError, match="data_alloc failed"):
        mm.allocate(64)
    for lock in mm._locks():
        assert lock.acquire(blocking=False)
        lock.release()
    assert mm.stats.live_blocks == 0


def test_trim_gives_back_the_tables_of_a_burst():
    # After 100,000 blocks came and went, the pointer table and the free lists
    # keep their size (Python dicts do not shrink on deletion) unless the
    # trim shrinks them.
    import tracemalloc
    b, mm = make(FakeBackend())
    tracemalloc.start()
    try:
        ps = [mm.allocate(16 + 16 * (i % 64)) for i in range(100_000)]
        for p in ps:
            mm.free(p)
        del ps
        before = tracemalloc.get_traced_memory()[0]
        assert mm.release_all() > 0
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert before - after > 5_000_000                 # the tables, not only the blocks' records
    p = mm.allocate(256)
    mm.free(p)
    assert mm.allocate(256) == p and mm.stats.hits == 1


# -- the choices themselves (memory/eviction.py, memory/oom.py) ----------------
# Through the manager the cap always finds one block that covers its need (the
# cache was under the cap before the block just cached), so these call the
# choosers directly: several blocks, the k-th oldest of a size, a need beyond
# the cache, the ladders' (ptr, released, retries) reported in the OOM error.


def _rec(ptr):
    """A free-list entry as the choosers read it: a record with its ``ptr``."""
    return SimpleNamespace(ptr=ptr)


def _free_lists(blocks):
    """``blocks``: [(ptr, size)] from the least to the most recently freed ->
    (free lists ``{size: deque of records}`` in that order, stamps ``{ptr: age}``)."""
    free, stamps = {}, {}
    for age, (ptr, size) in enumerate(blocks, 1):
        free.setdefault(size, deque()).append(_rec(ptr))
        stamps[ptr] = age
    return free, stamps


def test_fewest_oldest_takes_the_largest_while_no_block_covers_the_rest():
    from offload_shim.memory.eviction import fewest_oldest
    free, stamps = _free_lists([(1, 100), (2, 100), (3, 300), (4, 50)])
    # 450: 300 first, then 100 (the older of the two), then the oldest block
    # that covers the last 50 (the second 100, older than the 50)
    assert fewest_oldest(free, stamps, 450) == [(3, 300), (1, 100), (2, 100)]
    assert fewest_oldest(free, stamps, 400) == [(3, 300), (1, 100)]   # exactly: no more
    assert fewest_oldest(free, stamps, 10_000) == [(3, 300), (1, 100), (2, 100), (4, 50)]
    assert fewest_oldest({}, {}, 10) == [] and fewest_oldest(free, stamps, 0) == []
    assert free == _free_lists([(1, 100), (2, 100), (3, 300), (4, 50)])[0]   # not mutated


def test_fewest_oldest_one_block_the_oldest_freed_not_the_first_size():
    from offload_shim.memory.eviction import fewest_oldest
    # the 1000-byte list was made first, but the 2000-byte block was freed first
    free = {1000: deque([_rec(11)]), 2000: deque([_rec(22)]), 500: deque([_rec(33)])}
    stamps = {22: 1, 11: 2, 33: 3}
    assert fewest_oldest(free, stamps, 500) == [(22, 2000)]
    assert fewest_oldest(free, stamps, 1500) == [(22, 2000)]


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.sampled_from([16, 100, 300, 1000, 2500]), min_size=0, max_size=9),
       need=st.integers(1, 8000))
def test_fewest_oldest_against_brute_force(sizes, need):
    from offload_shim.memory.eviction import fewest_oldest
    blocks = list(enumerate(sizes, 1))
    free, stamps = _free_lists(blocks)
    got = fewest_oldest(free, stamps, need)
    ptrs = [p for p, _ in got]
    assert len(set(ptrs)) == len(ptrs) and all(dict(blocks)[p] == s for p, s in got)
    if need > sum(sizes):
        assert sorted(ptrs) == [p for p, _ in blocks]          # every block
        return
    assert len(got) == _fewest(sizes, need) and sum(s for _, s in got) >= need
    for size in {s for _, s in got[:-1]}:                     # the oldest of a size first
        taken = [p for p, s in got[:-1] if s == size]
        assert taken == [r.ptr for r in free[size]][:len(taken)]
    last_p, last_s = got[-1]
    rest = need - sum(s for _, s in got[:-1])
    used = set(ptrs[:-1])
    covering = [p for p, s in blocks if s >= rest and p not in used]
    assert last_p == min(covering, key=stamps.get)            # the oldest that covers the rest


def test_oom_ladders_report_released_bytes_and_retries():
    from offload_shim.memory.oom import free_all, incremental

    def ladder(cached, succeed_at, reuse_at=0):
        """Callables over a cache of ``cached`` block sizes (largest released
        first); the ``succeed_at``-th retry returns a pointer (0: never), the
        ``reuse_at``-th search of the cache finds a fitting block (0: never)."""
        cache = sorted(cached)
        calls = {"retry": 0, "all": 0, "reuse": 0}

        def release_all():
            calls["all"] += 1
            n = sum(cache)
            cache.clear()
            return n

        def release_largest():
            return cache.pop() if cache else None

        def retry():
            calls["retry"] += 1
            return 0x1000 if calls["retry"] == succeed_at else 0

        def reuse():
            calls["reuse"] += 1
            return 0x2000 if calls["reuse"] == reuse_at else 0
        return (release_all, release_largest, retry, reuse), calls

    args, calls = ladder([100, 200, 300], 0)
    assert free_all(*args) == (0, False, 600, 1)
    assert calls == {"retry": 1, "all": 1, "reuse": 1}
    args, calls = ladder([], 1)
    assert free_all(*args) == (0x1000, False, 0, 1)
    args, calls = ladder([100], 1, reuse_at=1)        # a fitting block freed meanwhile
    assert free_all(*args) == (0x2000, True, 100, 0) and calls["retry"] == 0
    args, calls = ladder([100, 200, 300], 2)
    assert incremental(*args) == (0x1000, False, 500, 2)
    assert calls == {"retry": 2, "all": 0, "reuse": 2}
    args, calls = ladder([100, 200, 300], 0)
    assert incremental(*args) == (0, False, 600, 3) and calls["retry"] == calls["reuse"] == 3
    args, calls = ladder([100, 200, 300], 0, reuse_at=2)   # searched after each release
    assert incremental(*args) == (0x2000, True, 500, 1) and calls["retry"] == 1
    args, calls = ladder([], 0)
    assert incremental(*args) == (0, False, 0, 1) and calls["retry"] == calls["reuse"] == 1
    args, calls = ladder([], 1)
    assert incremental(*args) == (0x1000, False, 0, 1)
    args, calls = ladder([], 1, reuse_at=1)
    assert incremental(*args) == (0x2000, True, 0, 0) and calls["retry"] == 0


def test_largest_first_stops_as_soon_as_the_need_is_met():
    from offload_shim.memory.eviction import largest_first
    free = {100: deque([_rec(2), _rec(3)]), 300: deque([_rec(1)])}
    assert largest_first(free, 0) == [] and largest_first(free, -5) == []
    assert largest_first(free, 400) == [(1, 300), (2, 100)]          # exactly: no more
    assert largest_first(free, 399) == [(1, 300), (2, 100)]
    assert largest_first(free, 401) == [(1, 300), (2, 100), (3, 100)]
    assert largest_first(free, 10_000) == [(1, 300), (2, 100), (3, 100)]


class _Index:
    """A pointer given as an object with ``__index__`` (a numpy integer, a ctypes
    value converted by a backend wrapper)."""

    def __init__(self, v):
        self.v = v

    def __index__(self):
        return self.v


def test_oom_ladder_result_and_error_fields():
    """After the OOM ladder, the retried allocation is returned as a plain int
    (also when the backend hands an ``__index__`` object), its retry is counted in
    the request's bucket (first seen at that retry) and logged; when the ladder
    ends without memory the error carries the request, the bytes in use, the
    device and the function; an ``__index__`` pointer can be freed."""
    import io
    import json
    fb = FakeBackend(capacity=1000)
    wrap = []

    def alloc(n):
        v = fb.alloc(n)
        return _Index(v) if v and wrap else v

    log = io.StringIO()
    mm = MemoryManager(alloc, fb.free, threshold=1000, debug="", event_log=log,
                       device_label="fake:0")
    keep = mm.allocate(200)                       # bucket 128
    mm.free(mm.allocate(300))                     # 300 cached, bucket 256
    wrap.append(True)
    p = mm.allocate(600)                          # bucket 512: 200 + 300 + 600 > 1000
    assert type(p) is int and p in fb.live
    x = mm.stats.per_bucket
    assert sorted(x) == [128, 256, 512]
    assert (x[512].oom_retries, x[512].misses, x[256].evictions) == (1, 1, 1)
    mm.flush_event_log()
    retry = [e for e in map(json.loads, log.getvalue().splitlines()) if e["op"] == "oom_retry"]
    assert [(e["size"], e["ptr"], e["hit"]) for e in retry] == [(600, 0, False)]
    with pytest.raises(OutOfDeviceMemoryError) as ei:
        mm.allocate(300)
    e = ei.value
    assert (e.requested, e.in_use, e.device) == (300, 800, "fake:0")
    assert e.function == "MemoryManager.allocate"
    mm.free(_Index(keep))
    mm.free(p)
    assert mm.live_allocations() == [] and mm.stats.bytes_cached == 800
    # with statistics off the retry is still logged
    fb2, log2 = FakeBackend(capacity=1000), io.StringIO()
    mm2 = MemoryManager(fb2.alloc, fb2.free, threshold=1000, debug="", stats=False,
                        event_log=log2)
    mm2.free(mm2.allocate(600))
    mm2.allocate(500)                             # another bucket: a miss, 600 + 500 > 1000
    mm2.flush_event_log()
    assert [e["op"] for e in map(json.loads, log2.getvalue().splitlines())].count("oom_retry") == 1


def test_sizes_given_as_index_objects_are_pooled_like_ints():
    """A size given as an ``__index__`` object is its value: 1 byte and exactly
    the threshold are pooled (cached on free), one byte more bypasses."""
    b, mm = make(threshold=1000)
    for n in (1, 1000):
        p = mm.allocate(_Index(n))
        assert b.live[p] == n
        mm.free(p)
        assert p in b.live                        # cached, not freed
    p = mm.allocate(_Index(1001))
    mm.free(p)
    assert p not in b.live                        # bypass: straight back
    assert mm.stats.bytes_cached == 1001 and mm.stats.cached_blocks == 2
    # a backend that hands pointers as __index__ objects: the caller gets ints
    fb = FakeBackend()
    mm2 = MemoryManager(lambda n: _Index(fb.alloc(n)), fb.free, debug="")
    p = mm2.allocate(100)
    assert type(p) is int and fb.live == {p: 100}
    mm2.free(p)
    assert mm2.allocate(100) == p


def test_allocate_after_drain_names_the_call():
    """``allocate`` on a drained manager raises LifecycleError naming
    ``MemoryManager.allocate`` and the device, for a pooled and a bypassed size."""
    from offload_shim.errors import LifecycleError
    b, mm = make(threshold=1000)
    mm.free(mm.allocate(100))
    mm.drain()
    for n in (100, 5000):
        with pytest.raises(LifecycleError) as ei:
            mm.allocate(n)
        assert (ei.value.function, ei.value.device) == ("MemoryManager.allocate", "fake:0")
    assert b.live == {}
    # drained while the backend call is in flight: the block goes back, same error
    fb = FakeBackend()

    def alloc(n):
        mm2.drain()
        return fb.alloc(n)

    mm2 = MemoryManager(alloc, fb.free, debug="")
    with pytest.raises(LifecycleError) as ei:
        mm2.allocate(100)
    assert ei.value.function == "MemoryManager.allocate" and fb.live == {}


def test_a_backend_handing_out_a_held_block_is_refused():
    """A backend that returns a block another manager of it already holds (a
    corrupt backend, or a free behind the manager's back) is refused with an
    OffloadError naming the call and the device; the holder keeps its block."""
    fb = FakeBackend()
    mm1 = MemoryManager(fb.alloc, fb.free, debug="", device_label="fake:0")
    p = mm1.allocate(100)
    mm2 = MemoryManager(lambda n: p, fb.free, debug="", device_label="fake:1")
    with pytest.raises(OffloadError, match="already holds") as ei:
        mm2.allocate(100)
    assert (ei.value.function, ei.value.device) == ("MemoryManager.allocate", "fake:1")
    assert mm1.owns(p) and not mm2.owns(p) and mm2.live_allocations() == []
    mm1.free(p)


def test_a_failed_bypass_free_leaves_the_block_owned():
    """A bypassed block whose ``backend_free`` fails is the caller's live block
    again, still owned by its manager: another manager of the same backend that
    is handed it (non-strict) gives it back to that owner.  A free of a pointer
    the manager does not hold after its drain names ``MemoryManager.free``."""
    from helpers import FailOnce
    from offload_shim.errors import LifecycleError
    fb = FakeBackend()
    bfree = FailOnce(fb)
    mm1 = MemoryManager(fb.alloc, bfree, threshold=64, debug="", device_label="fake:0")
    mm2 = MemoryManager(fb.alloc, bfree, threshold=64, debug="", device_label="fake:1")
    p = mm1.allocate(1000)                        # above the threshold: bypass
    with pytest.raises(OffloadError):
        mm1.free(p)
    assert mm1.owns(p) and mm1.live_allocations() == [(p, 1000)]
    mm2.free(p, strict=False)                     # routed to its owner
    assert mm1.live_allocations() == [] and fb.live == {}
    assert mm2.stats.foreign_frees == 0
    mm1.drain()
    with pytest.raises(LifecycleError) as ei:
        mm1.free(p)
    assert (ei.value.function, ei.value.device) == ("MemoryManager.free", "fake:0")


def test_free_edges_events_foreign_count_and_cap():
    """``free(None)`` is a no-op; each foreign free is counted; a free event says
    whether the block was cached (``hit``) or went to the backend; the cache cap
    counts cached bytes only (not those in use) and allows exactly the cap."""
    import io
    import json
    fb = FakeBackend()
    log = io.StringIO()
    mm = MemoryManager(fb.alloc, fb.free, threshold=1000, cache_limit=300, debug="",
                       event_log=log)
    mm.free(None)
    big = mm.allocate(900)                        # in use, pooled size
    a, b = mm.allocate(100), mm.allocate(200)
    mm.free(a)
    mm.free(b)                                    # 300 cached == the cap: kept
    assert mm.stats.bytes_cached == 300 and mm.stats.evictions == 0
    q = mm.allocate(5000)                         # bypass
    mm.free(q)
    for _ in range(2):
        mm.free(fb.alloc(8), strict=False)        # not this manager's: straight to the backend
    assert mm.stats.foreign_frees == 2
    mm.flush_event_log()
    frees = [(e["ptr"], e["hit"]) for e in map(json.loads, log.getvalue().splitlines())
             if e["op"] == "free"]
    assert frees == [(a, True), (b, True), (q, False)]
    mm.free(big)


@pytest.mark.parametrize("oom", ["free-all", "incremental"])
def test_oom_ladder_evictions_are_logged_as_oom(oom):
    """Each block an OOM ladder releases is logged as an ``evict`` event with
    reason ``oom``."""
    import io
    import json
    log = io.StringIO()
    b, mm = make(FakeBackend(capacity=1000), threshold=1000, oom=oom, event_log=log)
    ps = _cache_three(mm)
    mm.allocate(900)
    mm.flush_event_log()
    ev = [(e["ptr"], e["reason"], e["hit"]) for e in map(json.loads, log.getvalue().splitlines())
          if e["op"] == "evict"]
    assert ev and all(r == "oom" and h is False for _, r, h in ev)
    assert {p for p, _, _ in ev} <= set(ps)


def test_incremental_ladder_releases_one_block_at_a_time():
    """``incremental`` releases the largest cached block, one per step, even when
    the largest is a single byte."""
    b, mm = make(FakeBackend(capacity=3), threshold=1000, oom="incremental")
    x, y = mm.allocate(1), mm.allocate(1)
    mm.free(x)
    mm.free(y)
    p = mm.allocate(2)                            # 2 cached + 2 > 3: one 1-byte block goes
    assert len(b.free_order) == 1 and mm.stats.cached_blocks == 1
    mm.free(p)


def test_a_block_whose_release_failed_is_cached_and_owned_again():
    """A cached block whose ``backend_free`` fails in ``trim`` goes back into the
    cache, still owned by its manager: handed to another manager of the same
    backend (non-strict), it is a double free there, never a foreign free."""
    from helpers import FailOnce
    fb = FakeBackend()
    bfree = FailOnce(fb)
    mm1 = MemoryManager(fb.alloc, bfree, debug="")
    mm2 = MemoryManager(fb.alloc, bfree, debug="")
    p = mm1.allocate(100)
    mm1.free(p)
    with pytest.raises(OffloadError):
        mm1.trim()
    assert mm1.stats.cached_blocks == 1 and p in fb.live
    with pytest.raises(osh.UnknownPointerError):
        mm2.free(p, strict=False)
    assert p in fb.live and mm2.stats.foreign_frees == 0
    assert mm1.trim() == 100 and fb.live == {}


def test_trim_by_default_releases_every_cached_byte():
    """``trim()`` keeps nothing cached, even a 1-byte block next to a larger one;
    a bad ``keep_bytes`` is refused naming it."""
    b, mm = make()
    x, y = mm.allocate(1), mm.allocate(100)
    mm.free(x)
    mm.free(y)
    assert mm.trim() == 101 and mm.stats.cached_blocks == 0 and b.live == {}
    with pytest.raises(TypeError, match="^keep_bytes must be an int"):
        mm.trim(1.5)
    with pytest.raises(ValueError, match="keep_bytes"):
        mm.trim(-1)


def test_trim_keeps_the_bytes_asked_and_returns_zero_when_it_cannot():
    """``trim(keep)`` counts cached bytes only (blocks in use do not count against
    ``keep``); after ``drain``, or when the guard refuses (a device being torn down),
    it releases nothing and returns 0."""
    from contextlib import contextmanager
    from offload_shim.errors import LifecycleError
    b, mm = make()
    big = mm.allocate(900)
    x, y = mm.allocate(100), mm.allocate(200)
    mm.free(x)
    mm.free(y)
    assert mm.trim(200) == 200 and mm.stats.bytes_cached == 100   # the 200 goes
    mm.free(big)
    refuse = [True]

    class Guard:
        def __enter__(self):
            if refuse:
                raise LifecycleError("being torn down")

        def __exit__(self, *exc):
            return False

    b2 = FakeBackend()
    mm2 = MemoryManager(b2.alloc, b2.free, debug="", guard=Guard())
    refuse.clear()
    mm2.free(mm2.allocate(100))
    refuse.append(True)
    assert mm2.trim() == 0 and mm2.stats.bytes_cached == 100
    refuse.clear()
    mm.drain()
    assert mm.trim() == 0
    mm2.drain()
    assert mm2.trim() == 0

    armed = []

    class DrainOnEnter:                           # drained while trim waits for the guard
        def __enter__(self):
            if armed:
                mm3.drain()

        def __exit__(self, *exc):
            return False

    b3 = FakeBackend()
    mm3 = MemoryManager(b3.alloc, b3.free, debug="", guard=DrainOnEnter())
    mm3.free(mm3.allocate(100))
    armed.append(True)
    assert mm3.trim() == 0 and b3.live == {}


def test_trim_to_a_byte_short_of_the_cache_and_its_events():
    """``trim(keep)`` one byte below what is cached still releases (the largest
    block); ``trim(1)`` keeps the 1-byte block; each released block is a ``trim``
    event with reason ``trim``."""
    import io
    import json
    log = io.StringIO()
    b, mm = make(event_log=log)
    x, y = mm.allocate(1), mm.allocate(100)
    mm.free(x)
    mm.free(y)
    assert mm.trim(100) == 100 and mm.stats.bytes_cached == 1
    mm.free(mm.allocate(100))
    assert mm.trim(1) == 100 and mm.stats.bytes_cached == 1
    mm.flush_event_log()
    ev = [(e["ptr"], e["reason"]) for e in map(json.loads, log.getvalue().splitlines())
          if e["op"] == "trim"]
    assert [r for _, r in ev] == ["trim", "trim"] and ev[0][0] == y
