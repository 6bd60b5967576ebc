"""Threads against one MemoryManager (prior-art B1, B5; seed 004 review of
the bucket locks).  The fake backend yields (``time.sleep(0)``) inside every
call, as a ctypes call that releases the GIL would.  No timing assertions.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from offload_shim.errors import LifecycleError, OutOfDeviceMemoryError
from offload_shim.memory import MemoryManager
from offload_shim.memory.fake import FakeBackend

from helpers import run_threads as _run_threads


def run_threads(n, target):
    return _run_threads(n, target, timeout=120, raise_first=False)

SIZES = [1 << k for k in range(2, 16)]      # 4 B .. 32 KiB; 16 and 32 KiB bypass by default


@pytest.fixture(autouse=True)
def _bundled_plugin_stays_clean():
    """Pure-Python tests: conftest's bundled-plugin check does not apply."""
    yield


def assert_unlocked(mm):
    for lock in mm._locks():
        assert lock.acquire(blocking=False), "a manager lock is still held"
        lock.release()


@pytest.mark.parametrize("policy,cap", [("exact", None), ("binned", None), ("exact", 64 << 10)])
def test_b5_sixteen_threads_alloc_free_every_power_of_two(policy, cap):
    b = FakeBackend(yield_=True)
    mm = MemoryManager(b.alloc, b.free, policy=policy, cache_limit=cap, debug="")
    handed = [[] for _ in range(16)]

    def work(i):
        rnd = random.Random(i)
        for _ in range(30):
            ps = [mm.allocate(s) for s in SIZES]
            handed[i].extend(ps)
            rnd.shuffle(ps)
            for p in ps:
                mm.free(p)

    assert run_threads(16, work) == []
    assert b.errors == []                      # no double or unknown free reached the device
    s = mm.stats
    assert s.bytes_in_use == 0 and s.live_blocks == 0
    assert s.bytes_cached == b.held_bytes and s.cached_blocks == len(b.live)
    assert s.backend_allocs - s.backend_frees == len(b.live)
    assert s.hits + s.misses == 16 * 30 * len(SIZES)
    assert s.hits > 0
    if cap is not None:
        assert s.bytes_cached <= cap
    assert mm.drain() == (0, 0)
    # every pointer the device handed out was freed exactly once (the fake
    # never reuses addresses and raises on a second free)
    assert b.live == {} and b.frees == len(b.freed) == s.backend_allocs
    assert {p for ps in handed for p in ps} <= set(b.freed)
    assert_unlocked(mm)


def test_concurrent_trim_and_capacity_limited_device():
    b = FakeBackend(capacity=256 << 10, yield_=True)
    mm = MemoryManager(b.alloc, b.free, oom="incremental", cache_limit=128 << 10, debug="")
    stop = threading.Event()
    ooms = []

    def trimmer(_):
        while not stop.is_set():
            mm.trim(32 << 10)

    def work(i):
        rnd = random.Random(100 + i)
        held = []
        for _ in range(400):
            if held and rnd.random() < 0.5:
                mm.free(held.pop(rnd.randrange(len(held))))
            else:
                try:
                    held.append(mm.allocate(rnd.choice(SIZES)))
                except OutOfDeviceMemoryError as e:
                    ooms.append(e)
        for p in held:
            mm.free(p)

    t = threading.Thread(target=trimmer, args=(0,))
    t.start()
    errors = run_threads(8, work)
    stop.set()
    t.join()
    assert errors == [] and b.errors == []
    s = mm.stats
    assert s.bytes_in_use == 0 and s.bytes_cached == b.held_bytes
    for e in ooms:
        assert e.requested in SIZES
    mm.drain()
    assert b.live == {}
    assert_unlocked(mm)


def test_b1_backend_always_out_of_memory_then_drain():
    # ROCm aomp #159: a failed allocation left a lock held; teardown deadlocked.
    b = FakeBackend(fail=True)
    mm = MemoryManager(b.alloc, b.free, debug="")

    def work(i):
        for _ in range(50):
            with pytest.raises(OutOfDeviceMemoryError):
                mm.allocate(SIZES[i % len(SIZES)])
    assert run_threads(8, work) == []
    assert_unlocked(mm)
    assert mm.drain() == (0, 0)
    assert_unlocked(mm)
    with pytest.raises(LifecycleError):
        mm.allocate(8)


def test_b1_fill_device_until_oom_then_drain():
    b = FakeBackend(capacity=64 << 10)
    mm = MemoryManager(b.alloc, b.free, debug="")
    live = []
    with pytest.raises(OutOfDeviceMemoryError):
        while True:
            live.append(mm.allocate(4096))
    for p in live[::2]:
        mm.free(p)                             # half of it cached
    assert_unlocked(mm)
    n, nbytes = mm.drain()
    assert n == len(live) - len(live[::2]) and nbytes == 4096 * n
    assert b.live == {}
    assert_unlocked(mm)


def test_drain_while_threads_allocate_and_free():
    # teardown racing with users: every block, including ones in flight in
    # backend calls during drain(), ends up freed exactly once.
    b = FakeBackend(yield_=True)
    mm = MemoryManager(b.alloc, b.free, debug="poison", poison=lambda p, n: None)
    started = threading.Barrier(9)

    def work(i):
        rnd = random.Random(i)
        held = []
        started.wait()
        try:
            while True:
                if held and rnd.random() < 0.5:
                    mm.free(held.pop())
                else:
                    held.append(mm.allocate(rnd.choice(SIZES)))
        except LifecycleError:
            return

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    started.wait()
    deadline = time.monotonic() + 30
    while mm.stats.backend_allocs < 200 and time.monotonic() < deadline:
        time.sleep(0.001)
    mm.drain()
    for t in ts:
        t.join(timeout=60)
        assert not t.is_alive()
    assert b.errors == [] and b.live == {}
    assert_unlocked(mm)
