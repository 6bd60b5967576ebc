"""Threads against one pool (ROCm aomp #159, llvm-project #49284; D81054 review of the bucket
locks): against a MemoryManager over a fake backend that yields
(``time.sleep(0)``) inside every call, as a ctypes call that releases the GIL
would, and against a runtime device of the bundled plugin while it is trimmed,
deinitialised and closed.  Nothing may be lost or freed twice, no lock may be
left held.  No timing assertions.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import offload_shim as osh
from offload_shim.errors import LifecycleError, OutOfDeviceMemoryError, UnknownPointerError
from offload_shim.memory import DEBUG_ENV, THRESHOLD_ENV, MemoryManager
from offload_shim.memory.manager import OOM_LADDERS
from offload_shim.memory.fake import FakeBackend
from offload_shim.plugins.loader import load_plugin

from helpers import assert_unlocked, make_pool
from helpers import run_threads as _run_threads


def run_threads(n, target):
    return _run_threads(n, target, timeout=120, raise_first=False)


make = make_pool

SIZES = [1 << k for k in range(2, 16)]      # 4 B .. 32 KiB; 16 and 32 KiB bypass by default


@pytest.fixture(autouse=True)
def _no_pool_env(monkeypatch):
    monkeypatch.delenv(THRESHOLD_ENV, raising=False)
    monkeypatch.delenv(DEBUG_ENV, raising=False)


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


def test_no_lock_held_during_backend_or_poison_calls():
    b = FakeBackend(capacity=300)
    holder = {}

    def check(op, arg):
        for lock in holder["mm"]._locks():
            assert not lock.locked(), f"lock held during backend {op}"
    b.on_call = check
    mm = MemoryManager(b.alloc, b.free, debug="poison", threshold=1000, cache_limit=150,
                       poison=lambda p, n: check("poison", p))
    holder["mm"] = mm
    ps = [mm.allocate(100), mm.allocate(100)]
    for p in ps:
        mm.free(p)                                # second free evicts (cap 150)
    mm.allocate(250)                              # OOM ladder
    with pytest.raises(OutOfDeviceMemoryError):
        mm.allocate(290)
    mm.free(mm.allocate(8))
    mm.trim()
    mm.drain()
    assert b.alloc_calls > 3 and b.frees >= 3


def test_stats_snapshot_under_concurrent_hits_is_consistent():
    b, mm = make()
    stop = threading.Event()
    errors = []

    def worker(size):
        try:
            while not stop.is_set():
                mm.free(mm.allocate(size))
        except BaseException as e:              # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(s,)) for s in (16, 100, 4096, 9000)]
    for t in ts:
        t.start()
    try:
        for _ in range(200):
            s = mm.stats
            assert s.bytes_total == s.bytes_in_use + s.bytes_cached
            assert sum(x.bytes_in_use for x in s.per_bucket.values()) == s.bytes_in_use
            assert s.backend_allocs - s.backend_frees == s.live_blocks + s.cached_blocks
    finally:
        stop.set()
        for t in ts:
            t.join(10)
    assert not errors
    mm.drain()
    assert b.held_bytes == 0


# -- a runtime device under threads ---------------------------------------------

def test_device_deinit_while_threads_allocate(bundled_path, ctl):
    """The in-flight guard without a lock: deinit waits for calls in flight,
    calls that start during it fail with LifecycleError or re-initialise; no
    block is lost or freed twice (the bundled plugin's counters balance)."""
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        dev.init()
        stop = threading.Event()
        errors = []

        def worker(size):
            try:
                while not stop.is_set():
                    try:
                        p = dev.alloc(size)
                    except LifecycleError:
                        continue
                    try:
                        dev.free(p)
                    except (LifecycleError, UnknownPointerError):
                        pass                        # drained by a deinit meanwhile
            except BaseException as e:              # pragma: no cover - reported below
                errors.append(e)

        ts = [threading.Thread(target=worker, args=(s,)) for s in (64, 1000, 10000)]
        for t in ts:
            t.start()
        try:
            for _ in range(30):
                try:
                    dev.deinit()
                except LifecycleError:
                    pass                            # not initialised at that moment
                dev.init()
        finally:
            stop.set()
            for t in ts:
                t.join(20)
        assert not any(t.is_alive() for t in ts)
        assert not errors, errors[0]
        assert not dev._tokens
        dev.deinit()
        assert ctl.live_allocs(dev.index) == 0


@pytest.mark.parametrize("policy,cap", [("exact", None), ("binned", 48 << 10)])
def test_threads_hit_one_device_while_another_trims_deinits_and_closes(bundled_path, ctl,
                                                                       monkeypatch, policy,
                                                                       cap):
    """Twelve threads allocate and free (pooled and bypassed sizes, cache
    hits mostly) on one device while another thread trims its pool and
    deinitialises/reinitialises it, until the runtime is closed under them.
    Nothing is lost and nothing is freed twice: per address the plugin sees
    alloc, free, alloc, free...; after close the plugin holds no block and
    had to free none itself at deinit_device; no thread hangs; the only
    errors are LifecycleError (the device went away) and
    UnknownPointerError (a deinit freed the block first)."""
    plugin = load_plugin(bundled_path)
    seqs = defaultdict(list)
    ev_lock = threading.Lock()
    real_alloc, real_free = plugin.alloc, plugin.free

    def alloc(d, size, *a):
        p = real_alloc(d, size, *a)
        if p:
            with ev_lock:
                seqs[p].append("a")
        return p

    def free(d, p, *a):
        with ev_lock:                              # recorded before libc can reuse p
            seqs[p].append("f")
        return real_free(d, p, *a)

    monkeypatch.setattr(plugin, "alloc", alloc)
    monkeypatch.setattr(plugin, "free", free)
    leaked0, viol0 = ctl.leaked_allocs(), ctl.violation_count()
    rt = osh.Runtime([plugin], pool={"policy": policy, "cache_limit": cap})
    dev = rt.devices[1]
    dev.init()
    closed = threading.Event()
    unexpected = []
    counts = defaultdict(int)

    def worker(i):
        rnd = random.Random(i)
        held = []
        while True:
            try:
                if held and rnd.random() < 0.5:
                    dev.free(held.pop(rnd.randrange(len(held))))
                else:
                    held.append(dev.alloc(rnd.choice((64, 64, 64, 1000, 1000, 4000, 9000))))
                counts["ok"] += 1
            except LifecycleError:
                counts["lifecycle"] += 1
                if closed.is_set():
                    return
                held.clear()                       # a deinit drained them
            except UnknownPointerError:
                counts["drained"] += 1
            except BaseException as e:             # pragma: no cover - reported below
                unexpected.append(e)
                return

    def trimmer():
        rnd = random.Random(99)
        while not closed.is_set():
            try:
                pool = dev.pool
                if pool is not None:
                    pool.trim(rnd.choice((0, 4096)))
                if rnd.random() < 0.05:
                    dev.deinit()
                    dev.init()
            except LifecycleError:
                if closed.is_set():
                    return
            except BaseException as e:             # pragma: no cover - reported below
                unexpected.append(e)
                return
            time.sleep(0)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
    ts.append(threading.Thread(target=trimmer))
    for t in ts:
        t.start()
    deadline = time.monotonic() + 20
    while counts["ok"] < 20_000 and time.monotonic() < deadline:
        time.sleep(0.01)
    closed.set()
    rt.close()                                     # under the threads' feet
    for t in ts:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in ts), "a thread hangs"
    assert not unexpected, unexpected[0]
    assert counts["ok"] > 1000
    assert ctl.live_allocs(dev.index) == 0 and ctl.leaked_allocs() == leaked0
    assert ctl.violation_count() == viol0
    for p, seq in seqs.items():
        assert seq == ["a", "f"] * (len(seq) // 2), f"{p:#x}: {seq}"
    assert dev.state is osh.DeviceState.CLOSED


# -- OOM while a fitting block is cached (pytorch #189504) ------------------------

_FIT = 600          # the request; cached non-fitting blocks hold less than it in all


@settings(max_examples=80, deadline=None)
@given(policy=st.sampled_from(["exact", "binned"]), oom=st.sampled_from(OOM_LADDERS),
       cached=st.lists(st.sampled_from([48, 96, 160]), max_size=3),
       points=st.lists(st.integers(0, 11), max_size=3, unique=True),
       larger=st.booleans())
def test_a_fitting_block_freed_at_any_point_of_the_oom_ladder_is_used(
        policy, oom, cached, points, larger):
    """A request misses the cache, the backend (full: capacity = what the pool
    holds) returns 0 and the OOM ladder runs.  Helper threads, one per entry of
    ``points``, each hold a block that fits the request (binned: also a larger
    one of its class) and free it when the requesting thread reaches that point
    of the ladder: the entry or exit of one of its backend calls (the first
    allocation, each release, each retry).  A fitting block freed before the
    ladder ends must serve the request (no OutOfDeviceMemoryError with it
    cached), and the books balance: what the pool holds is what the backend
    holds, every block freed exactly once.  Without a free the OOM is real (the
    cached blocks hold less than the request) and is raised."""
    fb = FakeBackend()
    requester = threading.current_thread()
    armed = [False]
    seen = [0]
    helpers = {}                # point -> (go, done) events of the helper freeing there

    def point():
        if armed[0] and threading.current_thread() is requester:
            k = seen[0]
            seen[0] += 1
            if k in helpers:
                go, done = helpers[k]
                go.set()
                assert done.wait(60), "helper did not free its block"

    def balloc(size):
        point()
        ptr = fb.alloc(size)
        point()
        return ptr

    def bfree(ptr):
        point()
        fb.free(ptr)
        point()

    mm = MemoryManager(balloc, bfree, policy=policy, oom=oom, threshold=4096, debug="")
    fit = _FIT + 8 if larger and policy == "binned" else _FIT
    if fit != _FIT:
        assert mm._sizes.size_class(fit) == mm._sizes.size_class(_FIT)
    for p in [mm.allocate(n) for n in cached]:
        mm.free(p)
    held = [mm.allocate(fit) for _ in points]
    fb.capacity = fb.held_bytes         # the device is full: nothing more without a release
    freed = []

    def helper(i):
        go, done = helpers[points[i]]
        go.wait(120)
        mm.free(held[i])
        freed.append(held[i])
        done.set()

    for k in points:
        helpers[k] = (threading.Event(), threading.Event())
    threads = [threading.Thread(target=helper, args=(i,)) for i in range(len(points))]
    for t in threads:
        t.start()
    armed[0] = True
    try:
        ptr = mm.allocate(_FIT)
        error = None
    except OutOfDeviceMemoryError as e:
        ptr, error = 0, e
    finally:
        armed[0] = False
        for go, _ in helpers.values():
            go.set()
        for t in threads:
            t.join(120)
    assert not any(t.is_alive() for t in threads)
    fired = [k for k in points if k < seen[0]]
    if fired:
        assert error is None, f"OOM with a fitting block freed at ladder point(s) {fired}: {error}"
    else:
        assert error is not None and error.cached == 0 and error.in_use == fit * len(points)
    if ptr:
        assert mm.size_of(ptr) == _FIT and fb.live.get(ptr) in (_FIT, fit)
        mm.free(ptr)
    s = mm.stats
    assert s.bytes_in_use == 0 and s.live_blocks == 0
    assert s.bytes_total == fb.held_bytes == sum(fb.live.values())
    assert s.backend_allocs - s.backend_frees == s.cached_blocks == len(fb.live)
    assert mm.drain() == (0, 0)
    assert fb.live == {} and fb.errors == []
    assert_unlocked(mm)



# -- the lock itself (memory/locking.py): a thread that finds no token sleeps and is woken


def test_a_waiter_sleeps_counted_and_gets_the_token_when_it_is_given_back():
    from offload_shim.memory.locking import TokenLock
    lock = TokenLock()
    lock.acquire()
    got = threading.Event()

    def waiter():
        with lock:
            got.set()

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    for _ in range(2000):                   # until the waiter is asleep on the condition
        if lock.waiting:
            break
        time.sleep(0.005)
    assert lock.waiting == 1 and lock.locked() and not got.is_set()
    lock.release()                          # gives the token back and wakes the waiter
    t.join(30)
    assert got.is_set() and not t.is_alive()
    assert lock.waiting == 0 and not lock.locked()
    assert lock.acquire(blocking=False) and not lock.acquire(blocking=False)
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()


def test_many_threads_on_one_lock_lose_no_update_and_no_wake_up():
    import sys

    from offload_shim.memory.locking import TokenLock
    lock = TokenLock()
    count = [0]

    def work(_i):
        for _ in range(3000):
            with lock:
                n = count[0]
                if n % 97 == 0:
                    time.sleep(0)           # let another thread find no token
                count[0] = n + 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        _run_threads(8, work)
    finally:
        sys.setswitchinterval(old)
    assert count[0] == 8 * 3000 and lock.waiting == 0 and not lock.locked()
