"""Model-based test of MemoryManager (hypothesis RuleBasedStateMachine).

After every step the manager's books must match the fake device exactly:
bytes in use + bytes cached == bytes the device holds, and the live blocks
are those the model handed out and did not free.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, consumes, initialize, invariant,
                                 multiple, precondition, rule)

from offload_shim.errors import OutOfDeviceMemoryError, UnknownPointerError
from offload_shim.memory import MemoryManager
from offload_shim.memory.fake import FakeBackend, FakeBackendError


@pytest.fixture(autouse=True)
def _bundled_plugin_stays_clean():
    """Pure-Python tests: conftest's bundled-plugin check does not apply."""
    yield


# a few recurring sizes (so reuse happens) plus arbitrary ones, some above 8 KiB
SIZES = st.sampled_from([0, 1, 3, 4, 8, 100, 104, 512, 4096, 8192, 8193, 20000]) | \
    st.integers(0, 12000)


class PoolMachine(RuleBasedStateMachine):
    ptrs = Bundle("ptrs")

    @initialize(policy=st.sampled_from(["exact", "binned"]),
                oom=st.sampled_from(["free-all", "incremental"]),
                cap=st.none() | st.integers(0, 30000),
                capacity=st.none() | st.integers(10000, 80000),
                threshold=st.sampled_from([0, 64, 8192, 1 << 16]),
                stats=st.booleans())
    def setup(self, policy, oom, cap, capacity, threshold, stats):
        self.backend = FakeBackend(capacity=capacity)
        self.cap = cap
        self.mm = MemoryManager(self.backend.alloc, self.backend.free, policy=policy, oom=oom,
                                cache_limit=cap, threshold=threshold, stats=stats, debug="")
        self.model = {}          # ptr -> requested size
        self.freed = []          # pointers freed and not handed out again

    @rule(target=ptrs, size=SIZES)
    def allocate(self, size):
        try:
            p = self.mm.allocate(size)
        except OutOfDeviceMemoryError as e:
            assert self.backend.capacity is not None
            assert e.requested == size and e.in_use == self.mm.stats.bytes_in_use
            return multiple()                  # nothing to add to the bundle
        if size == 0:
            assert p == 0
            return multiple()
        assert p not in self.model
        self.model[p] = size
        if p in self.freed:
            self.freed.remove(p)
        return p

    @rule(p=consumes(ptrs))
    def free(self, p):
        self.mm.free(p)
        del self.model[p]
        self.freed.append(p)

    @precondition(lambda self: self.freed)
    @rule(data=st.data())
    def double_free(self, data):
        p = data.draw(st.sampled_from(self.freed))
        cached = self.mm.stats.cached_blocks
        with pytest.raises((UnknownPointerError, FakeBackendError)):
            self.mm.free(p)                  # cached -> manager refuses; released -> device refuses
        assert self.mm.stats.cached_blocks == cached

    @rule(keep=st.integers(0, 20000))
    def trim(self, keep):
        before = self.mm.stats.bytes_cached
        released = self.mm.trim(keep)
        after = self.mm.stats.bytes_cached
        assert after <= keep and released == before - after

    @rule()
    def release_all(self):
        self.mm.release_all()
        assert self.mm.stats.bytes_cached == 0

    @invariant()
    def books_balance(self):
        s = self.mm.stats
        b = self.backend
        assert s.bytes_total == s.bytes_in_use + s.bytes_cached == b.held_bytes
        assert s.live_blocks == len(self.model)
        assert s.live_blocks + s.cached_blocks == len(b.live)
        assert s.bytes_in_use == sum(self.mm.block_size_of(p) for p in self.model)
        if s.backend_allocs or s.backend_frees:
            assert s.backend_allocs - s.backend_frees == len(b.live)
        if self.cap is not None:
            assert s.bytes_cached <= self.cap
        if not self.mm.enabled:
            assert s.bytes_cached == 0
        for p, size in self.model.items():
            assert self.mm.owns(p) and self.mm.size_of(p) == size
        if s.per_bucket:
            assert sum(x.bytes_in_use for x in s.per_bucket.values()) == s.bytes_in_use
            assert sum(x.bytes_cached for x in s.per_bucket.values()) == s.bytes_cached

    def teardown(self):
        if not hasattr(self, "mm"):
            return
        want = (len(self.model), sum(self.mm.block_size_of(p) for p in self.model))
        assert self.mm.drain() == want
        assert self.backend.live == {} and self.backend.held_bytes == 0
        for lock in self.mm._locks():
            assert lock.acquire(blocking=False)
            lock.release()


PoolMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                         deadline=None)
TestPool = PoolMachine.TestCase
