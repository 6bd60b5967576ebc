"""Frees put off (``MemoryManager.park`` / ``reclaim``; ``DeviceLease.park`` /
``reclaim``): the cheap path of ``offload-shim run`` gives a kernel construct's blocks
back this way, so that the next run of the same region takes them back without a
round trip through the pool's tables.  Whatever happens in between, the pool must end
up as if the blocks had been freed with ``free_many`` (and allocated again with
``allocate_many``): the same blocks for the same requests (the least recently freed of
a size first), the same figures.

Sources: docs/memory-manager.md ("Policies": LLVM's ``MemoryManagerTy`` order) and
docs/interpose.md ("Cost per construct").
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload_shim.core.compiled import _REVERSED, _fifo_refill
from offload_shim.errors import UnknownPointerError
from offload_shim.memory import DEBUG_ENV, THRESHOLD_ENV

from helpers import assert_conserved, make_pool

make = make_pool


@pytest.fixture(autouse=True)
def _bundled_plugin_stays_clean():
    """Pure-Python tests: no plugin is loaded."""
    yield


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv(THRESHOLD_ENV, raising=False)
    monkeypatch.delenv(DEBUG_ENV, raising=False)


def _figures(mm):
    s = mm.stats
    return (s.bytes_in_use, s.bytes_cached, s.hits, s.misses, s.live_blocks,
            s.cached_blocks, s.peak_bytes_in_use)


def test_reclaim_takes_the_parked_blocks_back_as_hits():
    b, mm = make()
    ps = mm.allocate_many([64, 64, 32])
    parcel = mm.park(ps[::-1])
    assert parcel is not None
    assert mm.reclaim(parcel) is True
    assert mm.reclaim(parcel) is False                  # once
    # as free_many + allocate_many: three more hits, nothing cached, all live
    s = mm.stats
    assert (s.hits, s.misses, s.bytes_in_use, s.bytes_cached) == (3, 3, 160, 0)
    mm.free_many(ps)
    assert_conserved(mm, b)


def test_parked_blocks_are_cached_for_everyone_else():
    """Any other call frees the parked blocks as parked, in their order: the next
    request of the size gets the first one parked; figures and queries see them
    cached; the parcel is void afterwards."""
    b, mm = make()
    a, c, d = mm.allocate_many([64, 64, 64])
    parcel = mm.park([d, c, a])                         # as free_many([d, c, a])
    assert mm.live_allocations() == []
    assert mm.reclaim(parcel) is False
    assert mm.allocate(64) == d                         # the least recently freed
    assert mm.allocate_many([64, 64]) == [c, a]
    mm.free_many([a, c, d])
    e = mm.allocate(128)
    parcel = mm.park([e])
    assert parcel is not None
    assert not mm.owns(e) and mm.size_of(e, None) is None
    assert mm.reclaim(parcel) is False
    assert_conserved(mm, b)


@pytest.mark.parametrize("other", ["free", "free_many", "stats", "trim", "sizes_of"])
def test_a_call_in_between_gives_what_free_many_would_have(other):
    """Two pools with the same history, one parking and one freeing at once, then
    the same call and the same allocations: the same blocks (by position), the same
    figures."""
    outs = []
    for parking in (True, False):
        b, mm = make()
        keep = mm.allocate_many([16, 48])
        ps = mm.allocate_many([16, 16, 48, 8])
        mm.free(keep[0])                                # a cached 16 before the parcel
        more = mm.allocate_many([16])                   # ... taken again
        if parking:
            assert mm.park(ps[::-1]) is not None
        else:
            mm.free_many(ps[::-1])
        if other == "free":
            mm.free(keep[1])
        elif other == "free_many":
            mm.free_many(more)
        elif other == "stats":
            mm.stats
        elif other == "trim":
            mm.trim(16)
        else:
            mm.sizes_of(ps)
        got = mm.allocate_many([16, 48, 16, 8, 48])
        order = {p: i for i, p in enumerate(keep + ps + more)}
        outs.append(([order.get(p, -1) for p in got], _figures(mm)))
    assert outs[0] == outs[1]


def test_park_refuses_what_free_many_would_treat_otherwise():
    """Not parked (None, nothing changed): blocks of a size already cached, a second
    parcel, a block that is not live, the same block twice, a binned pool, a pool
    with a cache limit or in a debug mode."""
    b, mm = make()
    ps = mm.allocate_many([32, 32, 64])
    mm.free(ps[1])
    assert mm.park([ps[0]]) is None                     # a 32 is cached
    assert mm.park([ps[2], ps[2]]) is None
    assert mm.park([ps[1]]) is None                     # not live
    parcel = mm.park([ps[2]])
    assert parcel is not None and mm.park([ps[0]]) is None
    assert mm.reclaim(parcel)
    mm.free_many([ps[2], ps[0]])
    assert_conserved(mm, b)
    for kw in ({"policy": "binned"}, {"cache_limit": 1 << 20}, {"debug": "off-pool"}):
        b, mm = make(**kw)
        p = mm.allocate(32)
        assert mm.park([p]) is None, kw
        mm.free(p)


def test_drain_counts_parked_blocks_as_cached():
    b, mm = make()
    ps = mm.allocate_many([8, 16])
    mm.allocate(24)                                     # held through the drain
    assert mm.park(ps[::-1]) is not None
    assert mm.drain() == (1, 24)                        # only the block still held
    assert not b.live


def test_a_parked_block_freed_again_is_a_double_free():
    b, mm = make(strict=True)
    p = mm.allocate(8)
    assert mm.park([p]) is not None
    with pytest.raises(UnknownPointerError):
        mm.free(p)
    assert mm.allocate(8) == p


def test_known_spares_the_look_up_and_still_checks_the_free_lists():
    b, mm = make()
    ps = mm.allocate_many([8, 8])
    parcel = mm.park(ps[::-1])
    assert mm.reclaim(parcel)
    known = parcel[1]
    other = mm.allocate(8)
    mm.free(other)                                      # an 8 is cached now
    assert mm.park(ps[::-1], known) is None
    assert mm.allocate(8) == other
    parcel = mm.park(ps[::-1], known)
    assert parcel is not None and mm.reclaim(parcel)
    mm.free_many(ps + [other])
    assert_conserved(mm, b)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([8, 16, 24, 4096]), min_size=1, max_size=12))
def test_fifo_refill_is_the_order_allocate_many_gives_back(sizes):
    """DeviceLease.reclaim reorders its pointers with _fifo_refill: the order in
    which allocate_many returns blocks a construct freed last-first."""
    b, mm = make()
    ps = mm.allocate_many(sizes)
    mm.free_many(ps[::-1])
    again = mm.allocate_many(sizes)
    refill = _fifo_refill(sizes)
    want = ps[::-1] if refill is _REVERSED else ([ps[j] for j in refill] if refill else ps)
    assert again == want
    mm.free_many(again)
    assert_conserved(mm, b)


@pytest.mark.parametrize("call", ["allocate", "allocate_many", "free", "free_many", "park",
                                  "reclaim"])
def test_set_before_runs_its_hook_once_before_the_next_use(call):
    """``MemoryManager.set_before`` (the kernel repeats of ``offload-shim run`` give
    their kept blocks back this way): the hook runs once, before the call, and may use
    the pool itself; the blocks it frees are the ones the call then finds (the least
    recently freed of a size first); afterwards the pool is of its own class again."""
    _b, mm = make()
    cls = type(mm)
    held = mm.allocate(64)
    other = mm.allocate(64)
    parcel = mm.park([other]) if call == "reclaim" else None
    calls = []

    def hook(op, args):
        calls.append(op)                # the call about to run, with its arguments
        assert op == call and isinstance(args, tuple)
        mm.free(held)                   # the pool from inside the hook
    mm.set_before(hook)
    assert isinstance(mm, cls) and type(mm) is not cls
    if call == "allocate":
        assert mm.allocate(64) == held
    elif call == "allocate_many":
        assert mm.allocate_many([64]) == [held]
    elif call == "free":
        mm.free(other)
        assert mm.allocate_many([64, 64]) == [held, other]
    elif call == "free_many":
        mm.free_many([other])
        assert mm.allocate_many([64, 64]) == [held, other]
    elif call == "park":
        if mm.park([other]) is None:    # (not parked beside a cached block: freed)
            mm.free_many([other])
        assert mm.allocate_many([64, 64]) == [held, other]
    else:
        # the hook's free used the pool after the park: the parked block went first
        assert not mm.reclaim(parcel)
        assert mm.allocate_many([64, 64]) == [other, held]
    assert calls == [call] and type(mm) is cls


def test_cached_alone_says_whether_a_kept_block_would_come_back():
    """``MemoryManager.cached_alone`` (the pair repeats of ``offload-shim run`` keep an
    ``enter data`` / ``exit data`` pair's blocks outside the pool only when freeing and
    allocating them again would give the same blocks back): True only while no other
    block of each size is cached, the sizes are distinct and nothing is parked; a
    question only."""
    b, mm = make()
    a, c = mm.allocate_many([64, 32])
    figures = _figures(mm)
    assert mm.cached_alone([a, c]) is True
    assert mm.cached_alone([a]) is True
    assert _figures(mm) == figures                      # nothing changed
    d = mm.allocate(64)
    assert mm.cached_alone([a, d]) is False             # two blocks of one size
    mm.free(d)                                          # another 64-byte block cached:
    assert mm.cached_alone([a]) is False                # freeing `a` queues it behind
    assert mm.cached_alone([c]) is True
    assert mm.cached_alone([12345]) is False            # not a block of this pool
    e = mm.allocate(64)                                 # takes `d` back
    parcel = mm.park([e])
    assert parcel is not None and mm.cached_alone([c]) is False   # a parked free
    assert mm.reclaim(parcel)
    # the claim holds: free `a` and allocate 64 bytes -> `a` again
    assert mm.cached_alone([a]) is True
    mm.free(a)
    assert mm.allocate(64) == a
    mm.free_many([a, c, e])
    assert_conserved(mm, b)


def test_take_cached_takes_each_sizes_free_list_in_its_order():
    """``MemoryManager.take_cached`` (the kernel repeats of ``offload-shim run`` hold a
    size's free list in C while they take its blocks in turn): per distinct size of the
    given live blocks, every cached block of that size, least recently freed first --
    the blocks and the order of that many ``allocate`` calls --, booked as hits; those
    blocks freed again in that order give the pool back its free lists."""
    b, mm = make()
    own64, own32 = mm.allocate_many([64, 32])
    c64 = mm.allocate_many([64, 64, 64])
    c32 = mm.allocate_many([32])
    other = mm.allocate(128)
    mm.free_many([c64[1], c32[0], c64[2], c64[0], other])
    hits = mm.stats.hits
    got = mm.take_cached([own64, own32], [64, 32], most=8)
    assert got == [(64, [c64[1], c64[2], c64[0]]), (32, [c32[0]])]
    assert mm.stats.hits == hits + 4
    assert mm.stats.cached_blocks == 1                  # the 128-byte block stays
    for ptr in (c64[1], c64[2], c64[0], c32[0]):
        assert mm.size_of(ptr, None) is not None        # live: the caller holds them
    assert mm.take_cached([own64], [64], most=8) == [(64, [])]   # nothing cached now
    # freed back in the order taken, then the caller's own: the order of the frees
    mm.free_many([c64[1], c64[2], c64[0], own64, c32[0], own32])
    assert mm.allocate_many([64, 64, 64, 64]) == [c64[1], c64[2], c64[0], own64]
    assert_conserved(mm, b)


def test_take_cached_refuses_without_taking_anything():
    """None, and the pool unchanged, where the caller could not keep the pool's order:
    another policy, poisoning or a cap, parked frees, an unknown or freed pointer, a
    size given wrongly, more than ``most`` blocks of a size cached."""
    b, mm = make()
    own = mm.allocate(64)
    extra = mm.allocate_many([64, 64])
    mm.free_many(extra)
    figures = _figures(mm)
    assert mm.take_cached([own], [64], most=1) is None      # two cached, at most one
    assert mm.take_cached([own], [32], most=8) is None      # not its size
    assert mm.take_cached([12345], [64], most=8) is None    # not a block of this pool
    assert mm.take_cached([extra[0]], [64], most=8) is None  # cached, not live
    assert _figures(mm) == figures                          # nothing taken
    x = mm.allocate(32)
    parcel = mm.park([x])
    assert parcel is not None
    assert mm.take_cached([own], [64], most=8) is None      # a parked free
    assert mm.reclaim(parcel)
    mm.free(x)
    assert mm.take_cached([own], [64], most=8) == [(64, extra)]
    mm.free_many(extra + [own])
    assert_conserved(mm, b)
    for opts in ({"policy": "binned"}, {"cache_limit": 1 << 20}):
        b2, mm2 = make(**opts)
        p = mm2.allocate(64)
        mm2.free(mm2.allocate(64))
        assert mm2.take_cached([p], [64], most=8) is None
        mm2.free(p)
