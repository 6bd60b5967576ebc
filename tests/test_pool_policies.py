"""Which block serves a request: LLVM's buckets, the threshold, the exact
and binned policies, sizes and options the manager refuses.

Sources: LLVM D81054 / LLVM 16 ``MemoryManager.h``; the binned
policy's rule (docs/memory-manager.md "Policies"): rounding never costs device
memory, a request the device can hold is served.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload_shim.errors import OutOfDeviceMemoryError, UnknownPointerError
from offload_shim.memory import (DEBUG_ENV, LLVM_BUCKET_SIZES, THRESHOLD_ENV, MemoryManager,
                                 PoolStats, binned_size, llvm_bucket, read_threshold_env)
from offload_shim.memory.config import MAX_SIZE
from offload_shim.memory.fake import FakeBackend
from offload_shim.memory.policies import llvm_find_bucket_index

from helpers import assert_conserved, make_pool

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


# -- LLVM's buckets ------------------------------------------------------------


@pytest.mark.parametrize("n", POW2)
def test_bucket_at_every_power_of_two_boundary(n):
    below = 0 if n == 4 else n // 2
    assert llvm_bucket(n - 1) == below
    assert llvm_bucket(n) == n
    assert llvm_bucket(n + 1) == n
    assert {llvm_bucket(n - 1), llvm_bucket(n), llvm_bucket(n + 1)} <= set(LLVM_BUCKET_SIZES)


def test_bucket_small_and_large():
    assert [llvm_bucket(s) for s in (1, 2, 3)] == [0, 0, 0]
    assert llvm_bucket(16384) == llvm_bucket(1 << 30) == 8192     # last bucket


def test_llvm_find_bucket_port_quirk():
    # the real LLVM binary search puts these floor-pow2 sizes one bucket low
    low = {4: 0, 64: 32, 512: 256, 8192: 4096, 16384: 4096}
    for size in range(1, 20000):
        got = LLVM_BUCKET_SIZES[llvm_find_bucket_index(size)]
        f = 1 << (size.bit_length() - 1)
        assert got == low.get(f, llvm_bucket(size)), size


# -- threshold -----------------------------------------------------------------


def test_threshold_edges_default():
    b, mm = make()
    assert mm.threshold == 8192 and mm.enabled
    p = mm.allocate(8192)
    q = mm.allocate(8193)
    mm.free(p)
    mm.free(q)
    assert p in b.live and q in b.freed          # 8192 pooled, 8193 bypassed
    assert mm.stats.per_bucket[PoolStats.BYPASS_BUCKET].backend_frees == 1
    assert mm.allocate(8192) == p
    q2 = mm.allocate(8193)
    assert q2 != q and mm.owns(q2)               # bypassed blocks are still tracked
    assert_conserved(mm, b)


@pytest.mark.parametrize("thr", [1, 100, 8192, 1 << 20])
def test_threshold_custom(thr):
    b, mm = make(threshold=thr)
    p, q = mm.allocate(thr), mm.allocate(thr + 1)
    mm.free(p)
    mm.free(q)
    assert p in b.live and q in b.freed


def test_threshold_zero_turns_pooling_off():
    b, mm = make(threshold=0)
    assert not mm.enabled
    p = mm.allocate(64)
    assert mm.owns(p)
    mm.free(p)
    assert p in b.freed and mm.stats.bytes_cached == 0


@pytest.mark.parametrize("env,want", [(None, 8192), ("0", 0), ("1024", 1024), (" 64 ", 64),
                                      ("+16", 16), ("8192", 8192)])
def test_read_threshold_env(env, want):
    environ = {} if env is None else {THRESHOLD_ENV: env}
    assert read_threshold_env(environ) == want


@pytest.mark.parametrize("bad", ["abc", "", "12abc", "-1", "1.5", "0x10", "1e3", "٣"])
def test_read_threshold_env_garbage(bad):
    with pytest.raises(ValueError) as ei:
        read_threshold_env({THRESHOLD_ENV: bad})
    assert THRESHOLD_ENV in str(ei.value) and repr(bad) in str(ei.value)


def test_threshold_from_process_env(monkeypatch):
    monkeypatch.setenv(THRESHOLD_ENV, "0")
    assert not make()[1].enabled
    monkeypatch.setenv(THRESHOLD_ENV, "100")
    assert make()[1].threshold == 100
    monkeypatch.setenv(THRESHOLD_ENV, "lots")
    with pytest.raises(ValueError, match=THRESHOLD_ENV):
        make()
    assert make(threshold=5)[1].threshold == 5      # explicit value wins, env not read


# -- exact policy --------------------------------------------------------------


def test_exact_reuse_same_size_only():
    b, mm = make()
    p = mm.allocate(100)
    mm.free(p)
    assert mm.allocate(100) == p                  # hit: same pointer
    q = mm.allocate(101)                          # same bucket (64), other size: miss
    assert q != p and q in b.live
    mm.free(q)
    assert mm.allocate(100) != q                  # still no cross-size reuse
    s = mm.stats
    assert (s.hits, s.misses, s.backend_allocs) == (1, 3, 3)
    assert_conserved(mm, b)


def test_exact_reuse_takes_the_least_recently_freed_block():
    """Among cached blocks of the size the exact policy hands out the one freed
    first, as LLVM's MemoryManagerTy (std::multiset: insert after the equal
    sizes, find the first of them): allocate_many too; a later free goes last."""
    b, mm = make()
    a, c, d = mm.allocate(32), mm.allocate(32), mm.allocate(32)
    mm.free(c)
    mm.free(a)
    mm.free(d)
    assert mm.allocate(32) == c
    mm.free(c)                                  # now after a and d
    assert mm.allocate_many([32, 32]) == [a, d]
    assert mm.allocate(32) == c


def test_binned_reuse_takes_the_most_recently_freed_block():
    b, mm = make(policy="binned")
    a, c = mm.allocate(32), mm.allocate(32)
    mm.free(a)
    mm.free(c)
    assert mm.allocate(32) == c
    assert mm.allocate(32) == a


def test_free_many_frees_in_order_and_stops_at_the_first_error():
    """free_many caches in the given order (the first given is the first reused)
    and raises the first error with the blocks before it freed and those after it
    still live."""
    b, mm = make(strict=True)
    ps = mm.allocate_many([16, 16, 16])
    mm.free_many([ps[2], ps[0]])
    assert mm.allocate(16) == ps[2]
    with pytest.raises(UnknownPointerError):
        mm.free_many([ps[1], 12345, ps[2]])
    assert mm.size_of(ps[2]) == 16              # not reached: still live
    assert mm.allocate_many([16, 16]) == [ps[0], ps[1]]
    mm.free_many([ps[1], ps[0], ps[2]])
    assert_conserved(mm, b)


def test_many_cached_blocks_hit_path_uses_size_index():
    # 100k cached blocks of distinct sizes: each request finds the block of
    # its own size (the free lists are a dict keyed by size; this checks
    # behaviour, not time), and a size that is not cached misses.
    b, mm = make(threshold=1 << 20)
    ps = [mm.allocate(s) for s in range(1, 100_001)]
    for p in ps:
        mm.free(p)
    assert mm.stats.cached_blocks == 100_000
    assert mm.allocate(54321) == ps[54320]
    assert mm.allocate(1) == ps[0]
    q = mm.allocate(100_001)
    assert q not in ps and mm.stats.hits == 2 and mm.stats.cached_blocks == 99_998


# -- binned policy -------------------------------------------------------------


@settings(max_examples=400)
@given(st.integers(1, 8192) | st.integers(1, 1 << 40))
def test_binned_waste_bound(size):
    r = binned_size(size)
    assert r >= size
    assert (r - size) * 8 <= size
    assert binned_size(r) == r                    # classes are fixed points
    assert binned_size(size + 1) >= r             # monotone


@given(st.sampled_from([1, 2, 4, 16, 32]), st.integers(1, 1 << 30))
def test_binned_waste_bound_other_bin_counts(bins, size):
    r = binned_size(size, bins)
    assert size <= r and (r - size) * bins <= size


@settings(max_examples=200)
@given(sizes=st.lists(st.integers(1, 1 << 20), min_size=1, max_size=30),
       thr=st.sampled_from([8192, 1 << 16, 1 << 20]))
def test_binned_asks_the_backend_for_the_requested_size(sizes, thr):
    b, mm = make(policy="binned", threshold=thr)
    for s in sizes:
        p = mm.allocate(s)
        blk = mm.block_size_of(p)
        assert mm.size_of(p) == s and blk == s == b.live[p]    # a miss: exactly the request
        mm.free(p)
        mm.trim()                                 # the next request misses again
        if s <= thr:
            q = mm.allocate(s)
            mm.free(q)
            r = mm.allocate(max(1, s - s // 9))   # a smaller request of the same class?
            if binned_size(s - s // 9 or 1) == binned_size(s):
                assert r == q and mm.block_size_of(r) == s and (s - mm.size_of(r)) * 8 <= s
            mm.free(r)
            mm.trim()
    assert_conserved(mm, b)


def test_binned_reuses_a_block_of_the_class_that_holds_the_request():
    b, mm = make(policy="binned")
    assert binned_size(95) == 96 and binned_size(97) == binned_size(100) == 104
    p = mm.allocate(100)
    mm.free(p)
    assert mm.allocate(98) == p                   # a larger block of the class
    assert mm.size_of(p) == 98 and mm.block_size_of(p) == 100
    assert mm.stats.hits == 1 and mm.stats.per_bucket[104].cached_blocks == 0
    mm.free(p)
    q = mm.allocate(102)                          # 100 does not hold 102: a miss
    assert q != p and mm.block_size_of(q) == 102
    r = mm.allocate(95)                           # another class: no reuse of p
    assert r not in (p, q)
    for x in (q, r):
        mm.free(x)
    assert mm.allocate(100) == p                  # exactly its size first
    assert mm.allocate(99) == q                   # then the smallest larger block
    assert mm.size_of(q) == 99 and mm.block_size_of(q) == 102
    assert mm.stats.hits == 3
    assert_conserved(mm, b)


# -- best-fit policy -----------------------------------------------------------


def test_best_fit_reuses_the_smallest_block_below_twice_the_request():
    b, mm = make(policy="best-fit")
    assert type(mm) is MemoryManager and mm.policy == "best-fit"
    blocks = {n: mm.allocate(n) for n in (100, 150, 400, 1000)}
    for p in blocks.values():
        mm.free(p)
    assert mm.allocate(120) == blocks[150]        # smallest that holds it (any class)
    assert mm.block_size_of(blocks[150]) == 150 and mm.size_of(blocks[150]) == 120
    assert mm.allocate(90) == blocks[100]         # 100 < 180
    q = mm.allocate(190)                          # 400 >= 380: a miss, not a hit
    assert q not in blocks.values() and mm.block_size_of(q) == 190
    assert mm.allocate(201) == blocks[400]        # 400 < 402
    assert mm.allocate(1000) == blocks[1000]      # exactly its size
    assert mm.stats.hits == 4
    for p in (blocks[100], blocks[150], blocks[400], blocks[1000], q):
        mm.free(p)
    assert_conserved(mm, b)


@settings(max_examples=150)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(1, 5000)), max_size=60))
def test_best_fit_hits_stay_inside_the_waste_bound(ops):
    from offload_shim.memory.policies import BEST_FIT_LIMIT, waste_bound
    assert waste_bound("best-fit") == BEST_FIT_LIMIT - 1
    b, mm = make(policy="best-fit")
    live = []
    for is_free, size in ops:
        if is_free and live:
            mm.free(live.pop(size % len(live)))
            continue
        p = mm.allocate(size)
        blk = mm.block_size_of(p)
        assert size <= blk < BEST_FIT_LIMIT * size
        live.append(p)
    for p in live:
        mm.free(p)
    assert_conserved(mm, b)


@pytest.mark.parametrize("policy", ["exact", "binned", "best-fit"])
def test_two_requests_that_fill_the_device_are_served(policy):
    # the binned-growth case without a plugin: 2 x 1000 bytes on
    # a 2000-byte device.  Rounding 1000 up to its class (1024) would leave 976.
    b, mm = make(FakeBackend(capacity=2000), policy=policy)
    a, c = mm.allocate(1000), mm.allocate(1000)
    assert b.held_bytes == 2000 and mm.stats.bytes_in_use == 2000
    mm.free(a)
    mm.free(c)
    assert_conserved(mm, b)


@settings(max_examples=150, deadline=None)
@given(policy=st.sampled_from(["exact", "binned", "best-fit"]),
       oom=st.sampled_from(["free-all", "incremental"]),
       cap=st.none() | st.integers(0, 6000), capacity=st.integers(2000, 20000),
       ops=st.lists(st.tuples(st.booleans(), st.integers(1, 3000)), max_size=60))
def test_every_request_that_fits_next_to_the_blocks_in_use_is_served(policy, oom, cap,
                                                                     capacity, ops):
    """Whatever a policy rounds or caches, a request the device can hold (its
    size fits next to the bytes of the blocks in use) is served: cached
    blocks are released by the ladder and no backend allocation is rounded."""
    b, mm = make(FakeBackend(capacity=capacity), policy=policy, oom=oom, cache_limit=cap)
    live = []
    for is_free, size in ops:
        if is_free and live:
            mm.free(live.pop(size % len(live)))
            continue
        fits = mm.stats.bytes_in_use + size <= capacity
        try:
            live.append(mm.allocate(size))
        except OutOfDeviceMemoryError:
            assert not fits, f"{size} bytes fit next to {mm.stats.bytes_in_use} in use"
        assert_conserved(mm, b)
    for p in live:
        mm.free(p)
    mm.drain()
    assert b.live == {}


def test_bad_arguments():
    b = FakeBackend()
    for kw, exc in [({"policy": "best"}, ValueError), ({"oom": "pray"}, ValueError),
                    ({"cache_limit": -1}, ValueError), ({"threshold": -1}, ValueError),
                    ({"threshold": 1.5}, TypeError), ({"bins_per_pow2": 3}, ValueError),
                    ({"debug": "loud"}, ValueError), ({"debug": "poison"}, ValueError),
                    ({"event_log": 42}, TypeError)]:
        with pytest.raises(exc):
            MemoryManager(b.alloc, b.free, **kw)
    with pytest.raises(TypeError):
        MemoryManager(None, b.free)


@pytest.mark.parametrize("kw,exc,words", [
    ({"stats": "yes"}, TypeError, "stats must be True or False"),
    ({"stats": 1}, TypeError, "stats must be True or False"),
    ({"strict": "no"}, TypeError, "strict must be True or False"),
    ({"policy": 1}, TypeError, "policy must be a str"),
    ({"oom": None}, TypeError, "oom must be a str"),
    ({"device_label": 3}, TypeError, "device_label must be a str"),
    ({"poison": 5}, TypeError, "poison must be callable"),
    ({"guard": object()}, TypeError, "guard must be None or a context manager"),
    ({"backend_key": []}, TypeError, "unhashable"),
    ({"bins_per_pow2": 3}, ValueError, "size classes per power of two"),
    ({"bins_per_pow2": 0}, ValueError, "size classes per power of two"),
    ({"bins_per_pow2": "8"}, TypeError, "size classes per power of two"),
    ({"bins_per_pow2": 8.0}, TypeError, "size classes per power of two"),
    ({"threshold": -1}, ValueError, "threshold must be >= 0 bytes"),
    ({"threshold": 2**63}, ValueError, "threshold must be at most 9223372036854775807 bytes"),
    ({"threshold": 1.5}, TypeError, "threshold must be an int (bytes)"),
    ({"cache_limit": -1}, ValueError, "cache_limit must be >= 0 bytes"),
    ({"cache_limit": 2**63}, ValueError, "cache_limit must be at most 9223372036854775807"),
    ({"cache_limit": "1k"}, TypeError, "cache_limit must be an int (bytes)"),
    ({"guard": type("EnterOnly", (), {"__enter__": lambda self: self})()}, TypeError,
     "guard must be None or a context manager"),
])
def test_option_types_and_wording(kw, exc, words):
    b = FakeBackend()
    with pytest.raises(exc) as ei:
        MemoryManager(b.alloc, b.free, debug="", **kw)
    assert words in str(ei.value)
    if "bins_per_pow2" in kw:
        assert "bytes" not in str(ei.value)           # classes, not bytes


def test_largest_values_of_threshold_and_cache_limit_are_accepted():
    b = FakeBackend()
    mm = MemoryManager(b.alloc, b.free, debug="", threshold=2**63 - 1, cache_limit=2**63 - 1)
    assert (mm.threshold, mm.cache_limit) == (2**63 - 1, 2**63 - 1)
    mm.drain()


def test_defaults_of_the_read_only_configuration(monkeypatch):
    from offload_shim.memory import THRESHOLD_ENV
    monkeypatch.delenv(THRESHOLD_ENV, raising=False)
    b = FakeBackend()
    mm = MemoryManager(b.alloc, b.free, debug="")
    assert (mm.policy, mm.oom, mm.threshold, mm.cache_limit, mm.device_label, mm.debug,
            mm.enabled) == ("exact", "free-all", 8192, None, "", None, True)
    assert MemoryManager(b.alloc, b.free, debug="", policy="binned").policy == "binned"


def test_a_poison_callback_is_not_called_unless_the_debug_mode_is_poison():
    b, calls = FakeBackend(), []
    mm = MemoryManager(b.alloc, b.free, debug="", poison=lambda p, n: calls.append(p))
    p = mm.allocate(64)
    mm.free(p)
    assert calls == [] and mm.allocate(64) == p
    mm.drain()


def test_threshold_0_pools_not_even_one_byte():
    b = FakeBackend()
    mm = MemoryManager(b.alloc, b.free, debug="", threshold=0)
    p = mm.allocate(1)
    mm.free(p)
    assert b.frees == 1 and mm.stats.bytes_cached == 0 and not mm.enabled
    mm.drain()


def test_runtime_checks_pool_option_types_at_construction(bundled_path):
    import offload_shim as osh
    with pytest.raises(TypeError, match="stats must be True or False"):
        osh.Runtime([bundled_path], pool={"stats": "yes"})
    for reserved in ("strict", "guard", "backend_key", "device_label", "poison"):
        with pytest.raises(TypeError, match="set by the device"):
            osh.Runtime([bundled_path], pool={reserved: None})


def test_binned_classes_of_small_sizes_and_the_policy_object_agree():
    from offload_shim.memory.policies import BinnedPolicy
    # [16, 32) has step 2 with 8 bins per power of two; below 16 every size is its class
    assert [binned_size(s) for s in (15, 16, 17, 18, 31)] == [15, 16, 18, 18, 32]
    for bins in (1, 2, 8, 16):
        pol = BinnedPolicy(bins)
        for s in range(1, 300):
            assert pol.size_class(s) == pol.bucket(s) == binned_size(s, bins), (bins, s)


def test_llvm_find_bucket_of_size_zero_is_bucket_zero():
    assert llvm_find_bucket_index(0) == 0 and llvm_find_bucket_index(1) == 0


@pytest.mark.parametrize("order", [(100, 102), (102, 100), (102, 100, 102, 100)])
def test_size_class_index_keeps_every_size_of_a_class_sorted(order):
    from offload_shim.memory.policies import BinnedPolicy
    idx = BinnedPolicy().index()                  # 97..104 are one class (104)
    for block in order:
        idx.add(block)
    free = {100: [0x100], 102: [0x102]}
    assert idx.larger(98, free) is free[100]      # the smallest larger block of the class
    assert idx.larger(100, free) is free[102]
    free[100] = []                                # an empty list is skipped
    assert idx.larger(98, free) is free[102]
    assert idx.larger(102, free) is None and idx.larger(90, free) is None


def test_binned_hit_path_edges():
    """The binned hit path: a block handed to a smaller request of its class and
    then to its own size again is recorded at the size asked last; sizes the
    hit path does not take (0, a float, beyond the threshold) never get a cached
    block; a hit is logged with its size, pointer and block."""
    import io
    import json
    log = io.StringIO()
    b, mm = make_pool(policy="binned", event_log=log)
    p = mm.allocate(100)
    mm.free(p)
    assert mm.allocate(99) == p and mm.size_of(p) == 99
    mm.free(p)
    assert mm.allocate(100) == p and mm.size_of(p) == 100
    mm.free(p)
    assert mm.allocate(0) == 0
    with pytest.raises(TypeError):
        mm.allocate(100.0)
    big = mm.allocate(mm.threshold + 1)
    assert big != p
    mm.free(big)
    mm.flush_event_log()
    hits = [e for e in map(json.loads, log.getvalue().splitlines())
            if e["op"] == "alloc" and e.get("hit")]
    assert [(e["size"], e["ptr"], e["block"]) for e in hits] == [(99, p, 100), (100, p, 100)]
    assert mm.live_allocations() == []
    assert_conserved(mm, b)
