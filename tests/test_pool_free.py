"""What ``free`` does with each kind of pointer: live, cached (double free),
never handed out (foreign), held by another manager of the same backend, not
a 64-bit address; strict frees; a backend free that fails.

Sources: LLVM ``MemoryManagerTy::free`` (a foreign pointer goes to the
plugin), docs/memory-manager.md "What reaches the backend" and "When
``backend_free`` fails"; no mode frees a block twice.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload_shim.errors import LifecycleError, OffloadError, UnknownPointerError
from offload_shim.memory import DEBUG_ENV, THRESHOLD_ENV, MemoryManager
from offload_shim.memory.fake import FakeBackend, FakeBackendError
from offload_shim.memory.ownership import address_space

from helpers import FailOnce, assert_conserved, make_pool

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


# -- double, foreign and strict frees ------------------------------------------


def test_double_free_of_cached_block_raises_and_keeps_cache():
    b, mm = make(device_label="fake:1")
    p = mm.allocate(64)
    mm.free(p)
    with pytest.raises(UnknownPointerError) as ei:
        mm.free(p)
    assert f"{p:#x}" in str(ei.value) and ei.value.device == "fake:1"
    s = mm.stats
    assert s.cached_blocks == 1 and s.bytes_cached == 64 and b.freed == {}
    assert mm.allocate(64) == p
    assert mm.allocate(64) != p                   # not handed out twice
    assert_conserved(mm, b)


def test_free_of_unknown_pointer_goes_to_backend():
    b, mm = make()
    raw = b.alloc(32)                             # not from the manager
    mm.free(raw)
    assert raw in b.freed and mm.stats.foreign_frees == 1
    with pytest.raises(FakeBackendError):
        mm.free(0xDEAD0)                          # the backend's own check fires


def test_backend_returning_a_held_pointer_is_detected():
    b, mm = make()
    p = mm.allocate(64)
    # another manager of the same backend (the key defaults to backend_free)
    mm2 = MemoryManager(lambda n: p, b.free, debug="")
    with pytest.raises(OffloadError, match="already holds"):
        mm2.allocate(64)
    # a manager of another backend: only its own blocks count
    mm3 = MemoryManager(lambda n: p, lambda q: None, debug="", backend_key="other")
    assert mm3.allocate(64) == p
    with pytest.raises(OffloadError, match="already holds"):
        mm3.allocate(64)


def test_foreign_free_of_a_block_another_manager_caches_is_refused():
    # The block is cached by its owner: passing it to the backend would free
    # it while the owner hands it out again, and frees it a second time at
    # drain.  The fake device raises on any second free.
    b = FakeBackend()
    owner = MemoryManager(b.alloc, b.free, debug="", device_label="owner")
    other = MemoryManager(b.alloc, b.free, debug="", device_label="other")
    p = owner.allocate(64)
    owner.free(p)
    with pytest.raises(UnknownPointerError, match="double free") as ei:
        other.free(p)
    assert ei.value.device == "owner" and b.freed == {}
    assert owner.allocate(64) == p                # still the owner's, handed out once
    owner.free(p)
    owner.drain()
    other.drain()
    assert b.errors == [] and b.live == {} and list(b.freed) == [p]


def test_foreign_free_of_a_live_block_goes_back_to_its_manager():
    b = FakeBackend()
    owner = MemoryManager(b.alloc, b.free, debug="")
    other = MemoryManager(b.alloc, b.free, debug="")
    p = owner.allocate(64)
    other.free(p)                                 # LLVM: "not mine, to the plugin" -> its owner
    assert not owner.owns(p) and owner.stats.cached_blocks == 1 and b.freed == {}
    assert other.stats.foreign_frees == 0
    with pytest.raises(UnknownPointerError):
        other.free(p, strict=True)                # strict: not live here, never passed on
    raw = b.alloc(32)                             # no manager holds it: to the backend
    other.free(raw)
    assert raw in b.freed and other.stats.foreign_frees == 1
    for mm in (owner, other):
        mm.drain()
    assert b.errors == [] and b.live == {}


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["alloc", "free", "cross", "trim", "drain"]),
                              st.integers(0, 1), st.sampled_from([8, 100, 9000])),
                    max_size=40))
def test_no_mode_frees_a_block_twice(ops):
    """Two managers (exact; binned with a cap) over one fake device that never
    reuses an address and refuses a second free.  Frees through either
    manager of any pointer a manager holds (live or cached) never free a
    block twice: the device's books stay clean.  (A pointer no manager holds
    any more goes to the device, as in LLVM: a stale double free is the
    device's to refuse, so the ops here leave those out.)"""
    b = FakeBackend()
    space = address_space(b.free)
    mms = [MemoryManager(b.alloc, b.free, debug=""),
           MemoryManager(b.alloc, b.free, debug="", policy="binned", cache_limit=200)]
    seen = []
    for op, i, size in ops:
        mm = mms[i]
        try:
            if op == "alloc":
                seen.append(mm.allocate(size))
            elif op in ("free", "cross"):
                held = [p for p in seen if space.holder(p) is not None]
                if held:
                    target = mms[1 - i] if op == "cross" else mm
                    target.free(held[size % len(held)])
            elif op == "trim":
                mm.trim()
            elif op == "drain":
                mm.drain()
        except (UnknownPointerError, LifecycleError):
            pass                                  # refused: a double free or a closed manager
        assert b.errors == []
    for mm in mms:
        mm.drain()
    assert b.errors == [] and b.live == {}


def test_strict_free_refuses_pointers_that_are_not_live():
    b, mm = make()
    p = mm.allocate(64)
    foreign = b.alloc(32)
    calls = b.frees
    with pytest.raises(UnknownPointerError, match="not a live allocation"):
        mm.free(foreign, strict=True)           # never handed out: not passed on
    assert b.frees == calls and mm.stats.foreign_frees == 0
    mm.free(p, strict=True)                     # live: cached as usual
    assert mm.stats.cached_blocks == 1
    with pytest.raises(UnknownPointerError, match="double free"):
        mm.free(p, strict=True)                 # cached: the cache is untouched
    assert mm.stats.cached_blocks == 1 and mm.allocate(64) == p
    mm.free(p, True)
    b.free(foreign)
    mm.drain()
    with pytest.raises(LifecycleError):
        mm.free(p, strict=True)


@pytest.mark.parametrize("kw", [{}, {"threshold": 0}, {"cache_limit": 100},
                                {"event_log": None, "stats": False}, {"policy": "binned"}])
def test_strict_free_of_every_kind_of_live_block(kw):
    b, mm = make(**kw)
    ps = [mm.allocate(s) for s in (8, 100, 9000)]
    for p in ps:
        mm.free(p, strict=True)
    s = mm.stats
    assert s.live_blocks == 0 and s.bytes_in_use == 0
    assert s.bytes_cached == b.held_bytes
    mm.drain()
    assert b.held_bytes == 0


@pytest.mark.parametrize("ptr", [-5, -1, 2**64, 2**64 + 16])
def test_free_refuses_pointers_outside_64_bits(ptr):
    b, mm = make()
    with pytest.raises(ValueError, match="64-bit"):
        mm.free(ptr)
    with pytest.raises(UnknownPointerError):
        mm.free(ptr, strict=True)
    assert b.errors == [] and mm.stats.foreign_frees == 0


# -- a failing backend free keeps the block ------------------------------------


@pytest.mark.parametrize("kw", [{"threshold": 64}, {"debug": "off-pool"}])
def test_failed_backend_free_keeps_the_block_live(kw):
    b = FakeBackend()
    bf = FailOnce(b)
    mm = MemoryManager(b.alloc, bf, device_label="f", **{"debug": "", **kw})
    p = mm.allocate(1000)
    before = mm.stats
    with pytest.raises(OffloadError, match="data_delete failed"):
        mm.free(p, strict=True)
    assert mm.owns(p) and mm.size_of(p) == 1000
    assert mm.stats.as_dict() == before.as_dict()
    assert_conserved(mm, b)
    mm.free(p, strict=True)                          # the caller retries: it works
    assert not mm.owns(p) and b.live == {}
    assert_conserved(mm, b)
    with pytest.raises(UnknownPointerError):
        mm.free(p, strict=True)
    assert mm.drain() == (0, 0)


def test_failed_free_after_poison_failure_keeps_the_block_live():
    b = FakeBackend()
    bf = FailOnce(b)

    def poison(ptr, size):
        raise OffloadError("data_submit failed", code=1)
    mm = MemoryManager(b.alloc, bf, debug="poison", poison=poison)
    p = mm.allocate(64)
    with pytest.raises(OffloadError, match="data_delete"):
        mm.free(p)
    assert mm.owns(p)
    assert_conserved(mm, b)
    with pytest.raises(OffloadError, match="data_submit"):
        mm.free(p)                                   # poison fails again; backend free works
    assert not mm.owns(p) and b.live == {}
    assert_conserved(mm, b)


@pytest.mark.parametrize("how", ["trim", "cap", "oom"])
def test_failed_release_of_cached_blocks_keeps_them_cached(how):
    b = FakeBackend(capacity=256 if how == "oom" else None)
    bf = FailOnce(b)
    mm = MemoryManager(b.alloc, bf, debug="", cache_limit=100 if how == "cap" else None)
    ps = [mm.allocate(64) for _ in range(2)]
    if how == "cap":
        mm.free(ps[0])
        with pytest.raises(OffloadError):
            mm.free(ps[1])                           # 128 cached > 100: oldest evicted, fails
    else:
        for p in ps:
            mm.free(p)
        with pytest.raises(OffloadError):
            if how == "trim":
                mm.trim()
            else:
                mm.allocate(200)                     # OOM: free-all ladder, first free fails
    assert bf.failed and bf.failed[0] in b.live
    assert_conserved(mm, b)
    assert mm.stats.cached_blocks >= 1
    mm.trim()                                        # retried: now released
    assert_conserved(mm, b)
    assert mm.stats.cached_blocks == 0
    mm.drain()
    assert b.live == {}


def test_failed_free_during_drain_is_not_recorded_again():
    b = FakeBackend()
    bf = FailOnce(b)
    mm = MemoryManager(b.alloc, bf, debug="", threshold=0)
    mm.allocate(8)
    with pytest.raises(OffloadError):
        mm.drain()
    assert mm.closed and mm.live_allocations() == []
    with pytest.raises(LifecycleError):
        mm.allocate(8)


@pytest.mark.parametrize("label", ["gpu:1", ""])
def test_free_errors_name_the_function_and_the_device(label):
    """A double free and a strict free of an unknown pointer raise UnknownPointerError naming
    ``MemoryManager.free`` and the device label (``None`` for a manager without one)."""
    b, mm = make_pool(device_label=label)
    p = mm.allocate(64)
    mm.free(p)
    for bad in (lambda: mm.free(p), lambda: mm.free(p + 4096, strict=True)):
        with pytest.raises(UnknownPointerError) as e:
            bad()
        assert (e.value.function, e.value.device) == ("MemoryManager.free", label or None)
    mm.drain()
