"""The pool through the runtime: Runtime devices over the bundled host plugin
(capacity limits, call counters, violation log) and the LLVM 16 x86_64
plugins.

Covers LLVM's own memory-manager test pattern (LLVM D81054,
``openmp/libomptarget/test/offloading/memory_manager.cpp``), both OOM
ladders, ROCm aomp #159, D81054 TODO, llvm-project #49284 and CuPy #7678 through a real plugin, requests that
fit a full device under each policy, and stats conservation against the
plugin's own accounting.  No timing assertions.
"""

from __future__ import annotations

import ctypes
import random
import threading
from array import array
from collections import defaultdict

import pytest

import offload_shim as osh
from offload_shim.memory import DEBUG_ENV, THRESHOLD_ENV
from offload_shim.plugins.loader import load_plugin

from helpers import run_threads

DELETE = "__tgt_rtl_data_delete"
ALLOC = "__tgt_rtl_data_alloc"


@pytest.fixture(autouse=True)
def _no_pool_env(monkeypatch):
    """Tests here set the pool options they rely on; the caller's environment
    must not turn pooling off or change the threshold behind them."""
    monkeypatch.delenv(THRESHOLD_ENV, raising=False)
    monkeypatch.delenv(DEBUG_ENV, raising=False)


@pytest.fixture
def capacity(ctl):
    """``capacity(dev, nbytes)`` on the bundled plugin; reset to unlimited
    afterwards whatever happens."""
    def set_(dev, nbytes):
        ctl.set_capacity(dev, nbytes)
    try:
        yield set_
    finally:
        ctl.set_capacity(-1, 0)


def runtime_locks(rt, dev):
    """Every lock on the path of Device.alloc/free/close."""
    locks = [rt._lock, dev._life, dev._flight, dev.plugin._lock,
             dev.plugin._dev_lock(dev.index)]
    if dev.pool is not None:
        locks.extend(dev.pool._locks())
    return locks


def assert_all_unlocked(locks):
    """Acquire each lock non-blocking from a fresh thread (RLocks held by
    this thread would otherwise look free)."""
    held = []

    def probe():
        for lk in locks:
            if lk.acquire(blocking=False):
                lk.release()
            else:
                held.append(lk)
    t = threading.Thread(target=probe)
    t.start()
    t.join(10)
    assert not held, f"locks still held: {held}"


# -- LLVM's memory_manager.cpp pattern -------------------------------------------

RUNTIME_PLUGINS = ["bundled", "nextgen16", "classic16"]


@pytest.fixture(params=RUNTIME_PLUGINS)
def any_plugin(request, bundled_path):
    if request.param == "bundled":
        return bundled_path
    return request.getfixturevalue(request.param)


def test_llvm_memory_manager_pattern(any_plugin, ctl):
    """LLVM's ``memory_manager.cpp`` through a Runtime device, 16 threads that
    first-touch the device together.  Phase 1: each allocates and frees every
    power of two from 4 B to 32 KiB (``n`` ints, n = 1..8192; LLVM stops at
    16 KiB), four rounds.  Phase 2: each allocates ``4 * n`` bytes
    (n = 2..8192: LLVM's sizes without 4 B, plus 32 KiB), writes zeros, runs the
    ``increment`` kernel over the ``n / 2`` longs (thread index + 1) times and
    reads back its index + 1 (LLVM writes the thread id with a target region
    and maps it back)."""
    n_threads = 16
    bundled = any_plugin.endswith("libosh_hostplugin.so")
    calls0 = ctl.call_counts([ALLOC, DELETE])
    with osh.Runtime([any_plugin]) as rt:
        rt.register_image(osh.OffloadImage.sample())
        dev = rt.devices[0]
        assert not dev.initialized
        barrier = threading.Barrier(n_threads, timeout=60)   # a failed thread breaks it

        def work(i):
            barrier.wait()
            for _ in range(4):
                for k in range(14):
                    p = dev.alloc(4 << k)
                    assert p
                    dev.free(p)
            barrier.wait()
            for k in range(1, 14):
                nbytes = 4 << k
                n = nbytes // 8
                p = dev.alloc(nbytes)
                dev.submit(p, bytes(nbytes))
                for _ in range(i + 1):
                    dev.launch("increment", [p, n])
                out = array("q", bytes(nbytes))
                dev.retrieve(out, p)
                assert set(out) == {i + 1}, f"thread {i}: block {p:#x} of {n} longs"
                dev.free(p)

        run_threads(n_threads, work)
        assert dev.init_count == 1
        st = dev.pool.stats
        assert st.live_blocks == 0 and st.bytes_in_use == 0
        assert st.hits > 0
        assert st.backend_allocs - st.backend_frees == st.cached_blocks
        # 16 KiB and 32 KiB are above the 8 KiB threshold: never cached
        assert all(b <= 8192 for b in st.per_bucket if b >= 0)
        assert dev.allocations == (0, 0)
        n_blocks = st.backend_allocs
    assert rt.close() == {}
    if bundled:
        calls = ctl.call_counts([ALLOC, DELETE])
        assert calls[ALLOC] - calls0[ALLOC] == n_blocks
        assert calls[DELETE] - calls0[DELETE] == n_blocks


# -- OOM ladders through a capacity-limited device --------------------------------

@pytest.mark.parametrize("oom,released,kept", [("free-all", [2048, 1024, 512], []),
                                              ("incremental", [2048], [1024, 512])])
def test_oom_ladders_on_capacity_limited_device(bundled_path, ctl, capacity, oom, released,
                                                kept):
    """Capacity 10000 B; 4096 B in use, 2048 + 1024 + 512 B cached (7680 held).
    A 4000 B request does not fit: free-all releases every cached block and
    retries once; incremental releases the largest (2048) and succeeds, keeping
    the rest (D81054 summary vs LLVM ``freeAndAllocate``)."""
    with osh.Runtime([bundled_path], pool={"oom": oom}) as rt:
        dev = rt.devices[0]
        dev.init()
        capacity(dev.index, 10000)
        keep = dev.alloc(4096)
        small = {s: dev.alloc(s) for s in (2048, 1024, 512)}
        for s in (2048, 1024, 512):
            dev.free(small[s])
        assert ctl.live_bytes(dev.index) == 7680
        d0 = ctl.call_count(DELETE)
        big = dev.alloc(4000)
        st = dev.pool.stats
        assert ctl.call_count(DELETE) - d0 == len(released)
        assert st.evictions == len(released)
        assert st.oom_retries == (1 if oom == "free-all" else len(released))
        assert st.bytes_cached == sum(kept) and st.cached_blocks == len(kept)
        assert st.bytes_in_use == 4096 + 4000 == ctl.live_bytes(dev.index) - sum(kept)
        # the blocks that stayed cached are still reused
        for s in kept:
            assert dev.alloc(s) == small[s]
            dev.free(small[s])
        dev.free(big)
        dev.free(keep)


@pytest.mark.parametrize("oom", ["free-all", "incremental"])
def test_out_of_device_memory_error_fields(bundled_path, ctl, capacity, oom):
    with osh.Runtime([bundled_path], pool={"oom": oom}) as rt:
        dev = rt.devices[1]
        dev.init()
        capacity(dev.index, 4096)
        a, b = dev.alloc(2048), dev.alloc(2048)
        dev.free(a)                                   # 2048 cached, 2048 in use
        with pytest.raises(osh.OutOfDeviceMemoryError) as ei:
            dev.alloc(4000)
        e = ei.value
        assert isinstance(e, MemoryError) and isinstance(e, osh.OffloadError)
        assert e.requested == 4000 and e.in_use == 2048 and e.cached == 0
        assert e.device == dev.label and dev.label.endswith("hostplugin:1")
        assert dev.label in str(e) and "4000 bytes" in str(e) and oom in str(e)
        assert ctl.live_bytes(dev.index) == 2048      # the ladder gave the cached block back
        assert dev.allocations == (1, 2048)
        # the device is still usable: what fits is allocated
        c = dev.alloc(2048)
        with pytest.raises(osh.OutOfDeviceMemoryError) as ei:
            dev.alloc(1)
        assert ei.value.requested == 1 and ei.value.in_use == 4096
        dev.free(b)
        dev.free(c)


# -- ROCm aomp #159, D81054 TODO, llvm-project #49284, CuPy #7678 through a real plugin ----

def test_b1_oom_then_close_finishes_and_releases_every_lock(bundled_path, ctl, capacity):
    """Plugin alloc returns NULL (capacity reached): allocate until OOM, free
    some, OOM again, then close with allocations still held."""
    rt = osh.Runtime([bundled_path])
    try:
        dev = rt.devices[0]
        dev.init()
        capacity(dev.index, 4096)
        held = []
        with pytest.raises(osh.OutOfDeviceMemoryError):
            while True:
                held.append(dev.alloc(64))
        assert len(held) == 4096 // 64
        for p in held[::2]:
            dev.free(p)                               # cached, capacity still full
        with pytest.raises(osh.OutOfDeviceMemoryError):
            dev.alloc(4096)                           # ladder frees the cache, still no room
        assert ctl.live_bytes(dev.index) == 64 * (len(held) // 2)
        locks = runtime_locks(rt, dev)
        assert_all_unlocked(locks)
    except BaseException:
        rt.close()
        raise
    leaks = rt.close()
    assert leaks == {dev.label: (len(held) // 2, 64 * (len(held) // 2))}
    assert ctl.live_allocs() == 0 and dev.state is osh.DeviceState.CLOSED
    assert_all_unlocked(locks)
    with pytest.raises(osh.LifecycleError):
        dev.alloc(64)


def test_b4_close_frees_cached_blocks_before_deinit_device(bundled_path, ctl, monkeypatch):
    """Cached and still-held blocks are freed through the plugin before
    ``deinit_device``, and nothing reaches the plugin after ``deinit_plugin``
    (D81054 TODO; LLVM GenericDeviceTy::deinit).  Checked by the order of the plugin
    calls, the plugin's call counters, its leak counter (blocks the plugin had
    to free itself at deinit_device) and its violation log."""
    plugin = load_plugin(bundled_path)
    order = []
    real_free, real_deinit_dev, real_deinit_plugin = (plugin.free, plugin._deinit_device,
                                                      plugin._deinit_plugin)
    monkeypatch.setattr(plugin, "free", lambda d, p, *a: (order.append(("free", d)),
                                                          real_free(d, p, *a))[1])
    monkeypatch.setattr(plugin, "_deinit_device", lambda d: (order.append(("deinit_device", d)),
                                                             real_deinit_dev(d))[1])
    monkeypatch.setattr(plugin, "_deinit_plugin", lambda: (order.append(("deinit_plugin",)),
                                                           real_deinit_plugin())[1])
    leaked0, viol0 = ctl.leaked_allocs(), ctl.violation_count()
    rt = osh.Runtime([plugin])
    try:
        devs = rt.devices[:2]
        cached = 0
        for dev in devs:
            ps = [dev.alloc(s) for s in (8, 100, 4096, 8192, 100)]
            for p in ps[:4]:
                dev.free(p)                           # 4 cached, 1 held
            cached += dev.pool.stats.cached_blocks
            dev.alloc(20000)                          # above the threshold, held
        assert cached == 8
    except BaseException:
        rt.close()
        raise
    d0 = ctl.call_count(DELETE)
    leaks = rt.close()
    assert leaks == {d.label: (2, 100 + 20000) for d in devs}
    assert ctl.call_count(DELETE) - d0 == cached + 4
    assert ctl.leaked_allocs() == leaked0             # plugin freed nothing itself
    assert ctl.violation_count() == viol0
    assert ctl.live_allocs() == 0 and not ctl.is_plugin_initialized()
    # every free of a device precedes its deinit_device; deinit_plugin is last
    assert order[-1] == ("deinit_plugin",)
    for dev in devs:
        i = order.index(("deinit_device", dev.index))
        assert ("free", dev.index) not in order[i:]
        assert sum(1 for o in order[:i] if o == ("free", dev.index)) == 4 + 2


def test_b5_eight_threads_first_touch_each_pointer_freed_once(bundled_path, ctl, monkeypatch):
    """8 threads touch an uninitialised device at once and allocate/free
    (pooled and bypassed sizes).  Per address, the plugin sees alloc, free,
    alloc, free... (each block freed exactly once, none after close)."""
    plugin = load_plugin(bundled_path)
    events = defaultdict(list)
    ev_lock = threading.Lock()
    real_alloc, real_free = plugin.alloc, plugin.free

    def alloc(d, size, *a):
        p = real_alloc(d, size, *a)
        if p:
            with ev_lock:
                events[p].append("a")
        return p

    def free(d, p, *a):
        with ev_lock:                              # recorded before libc can reuse p
            events[p].append("f")
        return real_free(d, p, *a)

    monkeypatch.setattr(plugin, "alloc", alloc)
    monkeypatch.setattr(plugin, "free", free)
    init0 = ctl.call_count("__tgt_rtl_init_device")
    sizes = [16, 100, 4096, 8192, 10000, 40000]
    with osh.Runtime([plugin], pool={"cache_limit": 64 << 10}) as rt:
        dev = rt.devices[2]
        barrier = threading.Barrier(8, timeout=60)

        def work(i):
            rnd = random.Random(i)
            barrier.wait()
            mine = []
            for _ in range(300):
                if mine and rnd.random() < 0.5:
                    dev.free(mine.pop(rnd.randrange(len(mine))))
                else:
                    mine.append(dev.alloc(rnd.choice(sizes)))
            for p in mine[:len(mine) // 2]:
                dev.free(p)                          # the rest is freed by close

        run_threads(8, work)
        assert dev.init_count == 1
    assert ctl.call_count("__tgt_rtl_init_device") - init0 == 1
    assert events and ctl.live_allocs() == 0
    for p, seq in events.items():
        assert seq == ["a", "f"] * (len(seq) // 2), f"{p:#x}: {seq}"


@pytest.mark.parametrize("oom", ["free-all", "incremental"])
@pytest.mark.parametrize("policy", ["exact", "binned"])
def test_b9_cache_cap_and_capacity_limited_device(bundled_path, ctl, capacity, policy, oom):
    """CuPy #7678 in units of 64 B: capacity 1000 units, cache
    cap 600 units, threshold raised so both requests are pooled.  Alloc 512
    units, free (cached, under the cap), alloc 800 units: the backend refuses,
    the ladder evicts the cached 512 and the retry succeeds."""
    u = 64
    with osh.Runtime([bundled_path], pool={"policy": policy, "oom": oom, "threshold": 1 << 20,
                                           "cache_limit": 600 * u}) as rt:
        dev = rt.devices[0]
        dev.init()
        capacity(dev.index, 1000 * u)
        p = dev.alloc(512 * u)
        dev.free(p)
        assert dev.pool.stats.bytes_cached == 512 * u == ctl.live_bytes(dev.index)
        q = dev.alloc(800 * u)
        st = dev.pool.stats
        assert st.evictions == 1 and st.oom_retries == 1 and st.bytes_cached == 0
        assert st.bytes_in_use == 800 * u == ctl.live_bytes(dev.index)
        dev.free(q)
        # the cap holds: 800 units do not fit under 600 cached
        assert dev.pool.stats.bytes_cached == 0 and ctl.live_bytes(dev.index) == 0


@pytest.mark.parametrize("oom", ["free-all", "incremental"])
@pytest.mark.parametrize("policy", ["exact", "binned"])
def test_requests_that_fill_the_device_are_served(bundled_path, ctl, capacity, policy, oom):
    """The binned-growth case and more of its class: a
    2000-byte device holds two 1000-byte blocks under either policy (binned
    does not spend device memory on rounding); after they are freed and
    cached, a 2000-byte request is served (the ladder releases the cache);
    under binned a class-mate of a cached block that holds it is served
    from it."""
    with osh.Runtime([bundled_path], pool={"policy": policy, "oom": oom}) as rt:
        dev = rt.devices[0]
        dev.init()
        capacity(dev.index, 2000)
        a, b = dev.alloc(1000), dev.alloc(1000)
        assert ctl.live_bytes(dev.index) == 2000
        dev.free(a)
        dev.free(b)
        c = dev.alloc(2000)                            # above nothing: the cache must go
        assert ctl.live_bytes(dev.index) == 2000 and dev.pool.stats.bytes_cached == 0
        dev.free(c)
        hits = dev.pool.stats.hits
        d = dev.alloc(1990)          # binned: c's block holds it (one class); exact: a miss
        if policy == "binned":
            assert d == c and dev.pool.stats.hits == hits + 1
            assert ctl.live_bytes(dev.index) == 2000
        else:
            assert dev.pool.stats.hits == hits and ctl.live_bytes(dev.index) == 1990
        dev.free(d)


# -- stats conservation against the plugin's accounting ------------------------------

@pytest.mark.parametrize("policy", ["exact", "binned"])
def test_stats_conservation_against_plugin(bundled_path, ctl, policy):
    """After every step of a random workload (pooled and bypassed sizes, a cap,
    trims): ``bytes_in_use + bytes_cached`` (block sizes, so rounded under
    ``binned``) equals the bytes the plugin holds for the device, and
    ``live_blocks + cached_blocks`` its live allocations."""
    rnd = random.Random(7)
    sizes = [1, 3, 8, 100, 1000, 1001, 1100, 4095, 8192, 9000, 30000]
    with osh.Runtime([bundled_path], pool={"policy": policy, "cache_limit": 48 << 10}) as rt:
        dev = rt.devices[3]
        live = []
        for step in range(1500):
            r = rnd.random()
            if r < 0.01:
                dev.pool.trim(rnd.choice([0, 4096]))
            elif live and r < 0.5:
                dev.free(live.pop(rnd.randrange(len(live))))
            else:
                live.append(dev.alloc(rnd.choice(sizes)))
            if step % 25 == 0:
                st = dev.pool.stats
                assert st.bytes_in_use + st.bytes_cached == ctl.live_bytes(dev.index), step
                assert st.live_blocks + st.cached_blocks == ctl.live_allocs(dev.index), step
                assert st.bytes_cached <= 48 << 10
        st = dev.pool.stats
        assert st.hits > 0 and st.evictions > 0
        assert st.backend_allocs - st.backend_frees == st.live_blocks + st.cached_blocks
        assert st.bytes_in_use == sum(dev.pool.block_size_of(p) for p in live)
        assert dev.allocations == (len(live), sum(dev.pool.size_of(p) for p in live))
        for p in live:
            dev.free(p)
        st = dev.pool.stats
        assert st.bytes_in_use == 0 and st.bytes_cached == ctl.live_bytes(dev.index)
