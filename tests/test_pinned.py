"""Pinned host memory (issue 6; gcc-patches -foffload-memory=pinned): registry, backends, policies, host pool."""

from __future__ import annotations

import errno
import json
import mmap
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import offload_shim as osh
from offload_shim.memory import pin_backends as pb
from offload_shim.memory import pinned as pm
from offload_shim.plugins.loader import load_plugin

from helpers import DROP_CAP as _DROP_CAP, run_child

PAGE = pm.PAGE


def page_buf(pages: int) -> mmap.mmap:
    """A page-aligned anonymous buffer (VmLck deltas are then exact)."""
    return mmap.mmap(-1, pages * PAGE)


def addr_of(buf) -> int:
    import ctypes
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))


def span_bytes(ranges) -> int:
    pages = set()
    for a, n in ranges:
        pages.update(range(a // PAGE, -(-(a + n) // PAGE)))
    return len(pages) * PAGE


@pytest.fixture(params=["bundled", "nextgen16"])
def plugin(request, bundled_path):
    if request.param == "bundled":
        return load_plugin(bundled_path)
    return load_plugin(request.getfixturevalue("nextgen16"))


# -- policy selection --------------------------------------------------------------

def test_policy_default_and_env(monkeypatch, bundled_path):
    monkeypatch.delenv(pm.PINNED_ENV, raising=False)
    with osh.Runtime([bundled_path]) as rt:
        assert rt.pinned_policy == "none"
    monkeypatch.setenv(pm.PINNED_ENV, "mapped")
    with osh.Runtime([bundled_path]) as rt:
        assert rt.pinned_policy == "mapped"
    with osh.Runtime([bundled_path], pinned="none") as rt:
        assert rt.pinned_policy == "none"
    monkeypatch.setenv(pm.PINNED_ENV, "bogus")
    with pytest.raises(ValueError, match="pinned policy"):
        osh.Runtime([bundled_path])
    # not a name at all: a TypeError naming the type (it was a ValueError)
    for bad in (3, True, b"all"):
        with pytest.raises(TypeError, match="pinned policy"):
            osh.Runtime([bundled_path], pinned=bad)


def test_creating_a_runtime_pins_nothing(bundled_path):
    before = pm.vmlck_bytes()
    with osh.Runtime([bundled_path], pinned="mapped") as rt:
        # the registry exists from the start under "mapped" (so the submit path never
        # needs the runtime lock) but holds nothing
        assert not rt.pinned_memory.bytes_pinned()
    assert pm.vmlck_bytes() == before


def test_the_none_policy_builds_the_registry_when_something_pins(bundled_path):
    # a fresh interpreter: this one imported memory.pinned above
    r = run_child(f"""
        import mmap, sys
        import offload_shim as osh
        with osh.Runtime([{bundled_path!r}], pinned="none") as rt:
            dev = rt.devices[0]
            t = dev.alloc(4096)
            dev.submit(t, mmap.mmap(-1, 4096))     # the hooks need no registry
            dev.free(t)
            print("before", "offload_shim.memory.pinned" in sys.modules)
            buf = mmap.mmap(-1, 4096)
            rng = rt.pinned_memory.pin(buf, device=dev)
            print("pinned", rng.size, rt.pinned_memory.is_pinned(rng.address, 4096,
                                                                  device=dev))
            dev.deinit()                            # the device's pins go with it
            print("after deinit", rt.pinned_memory.ranges())
        late = osh.Runtime([{bundled_path!r}])
        late.close()
        try:
            late.pinned_memory.pin(mmap.mmap(-1, 4096))
        except osh.LifecycleError:
            print("closed", late.pinned_memory.closed)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["before False", "pinned 4096 True", "after deinit []",
                                     "closed True"]


# -- the range rule, model-based ------------------------------------------------------

class _Model:
    def __init__(self):
        self.top: dict[int, list] = {}      # start -> [size, own, {nested: n}]

    def pin(self, a, n):
        hits = [(s, v) for s, v in self.top.items() if s < a + n and a < s + v[0]]
        if len(hits) == 1 and hits[0][0] <= a and a + n <= hits[0][0] + hits[0][1][0]:
            s, v = hits[0]
            if (a, n) == (s, v[0]):
                v[1] += 1
            else:
                v[2][(a, n)] = v[2].get((a, n), 0) + 1
            return True
        if hits:
            return False
        self.top[a] = [n, 1, {}]
        return True

    def unpin(self, a, n):
        for s, v in self.top.items():
            if (a, n) == (s, v[0]) and v[1]:
                v[1] -= 1
            elif (a, n) in v[2]:
                v[2][(a, n)] -= 1
                if not v[2][(a, n)]:
                    del v[2][(a, n)]
            else:
                continue
            if not v[1] and not v[2]:
                del self.top[s]
            return True
        return False


ops = st.lists(st.tuples(st.sampled_from(["pin", "unpin"]), st.integers(0, 15),
                         st.integers(1, 6)), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_refcount_and_overlap_rules_match_model(seq):
    """mlock backend, process domain: registry == model after every step, and
    VmLck grows by exactly the pages of the top-level ranges."""
    buf = page_buf(24)
    base = addr_of(buf)
    quarter = PAGE // 4                      # ranges share pages: the page accounting matters
    v0 = pm.vmlck_bytes()
    model = _Model()
    with pm.PinnedRegistry() as reg:
        for op, off, ln in seq:
            a, n = base + off * quarter * 3, ln * quarter * 3
            if op == "pin":
                ok = model.pin(a - base, n)
                if ok:
                    reg.pin(a, n)
                else:
                    with pytest.raises(osh.PinnedRangeError, match="overlaps"):
                        reg.pin(a, n)
            else:
                ok = model.unpin(a - base, n)
                if ok:
                    reg.unpin(a, n)
                else:
                    with pytest.raises(osh.PinnedRangeError, match="not pinned"):
                        reg.unpin(a, n)
            got = {r.address - base: [r.size, r.refs,
                                      {(k[0] - base, k[1]): c for k, c in r.nested.items()}]
                   for r in reg.ranges(None)}
            want = {s: [v[0], v[1] + sum(v[2].values()), v[2]] for s, v in model.top.items()}
            assert got == want
            assert pm.vmlck_bytes() - v0 == span_bytes(
                (base + s, v[0]) for s, v in model.top.items())
    assert pm.vmlck_bytes() == v0
    del buf


def test_is_pinned_takes_what_pin_takes():
    # a buffer object, as pin() takes it; a numpy array failed inside bisect with
    # numpy's "truth value of an array" ValueError
    np = pytest.importorskip("numpy")
    a = np.zeros(4 * PAGE, dtype=np.uint8)
    with pm.PinnedRegistry() as reg:
        assert not reg.is_pinned(a)
        reg.pin(a)
        assert reg.is_pinned(a) and reg.is_pinned(a[PAGE:]) and reg.is_pinned(a, 16)
        assert reg.is_pinned(a.ctypes.data) and reg.is_pinned(a.ctypes.data, 4 * PAGE)
        assert not reg.is_pinned(a.ctypes.data, 4 * PAGE + 1)
        with pytest.raises(ValueError, match="C-contiguous"):
            reg.is_pinned(a[::2])
        with pytest.raises(TypeError):
            reg.is_pinned("not a buffer")
        reg.unpin(a)
        assert not reg.is_pinned(a)


def test_pin_errors_and_buffer_forms():
    buf = page_buf(4)
    with pm.PinnedRegistry() as reg:
        with pytest.raises(osh.PinnedRangeError, match="size must be > 0"):
            reg.pin(addr_of(buf), 0)
        with pytest.raises(TypeError):
            reg.pin(addr_of(buf))                # an address needs a size
        with pytest.raises(TypeError, match="read-only"):
            reg.pin(b"abc")
        with pytest.raises(osh.PinnedRangeError, match="not pinned"):
            reg.unpin(buf)
        r = reg.pin(buf)
        assert (r.size, r.refs, r.backend) == (4 * PAGE, 1, "mlock")
        assert reg.pin(memoryview(buf)[PAGE:2 * PAGE]).refs == 2      # nested
        with pytest.raises(osh.PinnedRangeError, match="overlaps"):
            reg.pin(addr_of(buf) - PAGE, 2 * PAGE)                     # partial
        assert reg.is_pinned(addr_of(buf) + PAGE, PAGE)
        assert reg.unpin(addr_of(buf) + PAGE) == 1                    # int address, no size
        assert reg.unpin(buf) == 0
        assert reg.ranges() == []
        reg.pin(memoryview(buf)[PAGE:2 * PAGE])
        with pytest.raises(osh.PinnedRangeError, match="overlaps"):
            reg.pin(buf)                                               # superset of a pin
    with pytest.raises(osh.LifecycleError):
        reg.pin(buf)
    reg.close()                                                        # idempotent


# -- the mapped policy on real plugins -------------------------------------------------

def test_mapped_pins_exactly_the_submitted_ranges(plugin):
    bundled = plugin.bundled
    v0 = pm.vmlck_bytes()
    a_h, b_h = page_buf(3), page_buf(2)
    with osh.Runtime([plugin], pinned="mapped") as rt:
        dev = rt.devices[0]
        reg = rt.pinned_memory
        ta, tb = dev.alloc(3 * PAGE), dev.alloc(2 * PAGE)
        dev.submit(ta, a_h)
        dev.submit(tb, b_h, nbytes=PAGE + 10)
        dev.submit(ta, a_h)                       # again: no second pin
        dev.retrieve(a_h, ta)                     # same block, same range: no second pin
        dev.submit(ta, bytes(64))                 # read-only: copied by Python, not pinned
        want = sorted([(addr_of(a_h), 3 * PAGE), (addr_of(b_h), PAGE + 10)])
        got = sorted((r.address, r.size) for r in reg.ranges(dev))
        assert got == want
        assert all(r.refs == 1 and r.backend == "plugin" for r in reg.ranges(dev))
        assert reg.bytes_pinned() == {"plugin": 4 * PAGE + 10}
        locked = pm.vmlck_bytes() - v0
        assert locked == (span_bytes(want) if bundled else 0)   # nextgen 16 locks nothing
        dev.free(ta)                              # unmap: its range goes
        assert dev.allocations == (1, 2 * PAGE)   # and the block is freed
        assert [(r.address, r.size) for r in reg.ranges(dev)] == [(addr_of(b_h), PAGE + 10)]
        assert pm.vmlck_bytes() - v0 == (2 * PAGE if bundled else 0)
        dev.free(tb)
        assert reg.ranges() == [] and pm.vmlck_bytes() == v0
        # unpinned at deinit
        tc = dev.alloc(PAGE)
        dev.retrieve(b_h, tc, nbytes=PAGE)
        assert len(reg.ranges(dev)) == 1
        dev.deinit()
        assert reg.ranges() == [] and pm.vmlck_bytes() == v0
        # and at close
        td = dev.alloc(PAGE)
        dev.submit(td, a_h, nbytes=PAGE)
        assert len(reg.ranges(dev)) == 1
        dev.free(td)
        dev.submit(dev.alloc(PAGE), b_h, nbytes=PAGE)   # held until close
        assert len(reg.ranges(dev)) == 1
    assert reg.closed and reg.ranges() == []
    assert pm.vmlck_bytes() == v0


def test_same_range_two_blocks_counts_twice(plugin):
    h = page_buf(1)
    with osh.Runtime([plugin], pinned="mapped") as rt:
        dev = rt.devices[0]
        t1, t2 = dev.alloc(PAGE), dev.alloc(PAGE)
        dev.submit(t1, h)
        dev.submit(t2, h)
        (r,) = rt.pinned_memory.ranges(dev)
        assert r.refs == 2
        dev.free(t1)
        assert rt.pinned_memory.ranges(dev)[0].refs == 1
        dev.free(t2)
        assert rt.pinned_memory.ranges(dev) == []


def test_policy_none_pins_nothing(plugin):
    h = page_buf(1)
    with osh.Runtime([plugin], pinned="none") as rt:
        dev = rt.devices[0]
        t = dev.alloc(PAGE)
        dev.submit(t, h)
        assert rt.pinned_memory.ranges() == [] and rt.pinned_memory.bytes_pinned() == {}
        dev.free(t)


def test_explicit_device_pins_and_teardown(plugin):
    h = page_buf(2)
    with osh.Runtime([plugin]) as rt:
        dev = rt.devices[1]
        reg = rt.pinned_memory
        assert reg.backend_for(dev) == "plugin" and dev.initialized
        reg.pin(h, device=dev)
        reg.pin(h, device=dev)
        reg.pin(h, device=None)                   # another domain: no conflict
        assert [r.refs for r in reg.ranges(dev)] == [2]
        assert reg.unpin(h, device=dev) == 1
        dev.deinit()                              # the device's pins end with it
        assert reg.ranges(dev) == [] and len(reg.ranges(None)) == 1
        with pytest.raises(osh.PinnedRangeError):
            reg.unpin(h, device=dev)


def test_gomp_view_falls_back_to_mlock(bundled_path):
    p = load_plugin(bundled_path, abi="gomp")
    h = page_buf(1)
    v0 = pm.vmlck_bytes()
    with osh.Runtime([p], pinned="mapped") as rt:
        dev = rt.devices[0]
        assert not pb._page_locked_allocator(p)  # GCC 12 has no page_locked_host_* hooks
        assert isinstance(pm.select_backend(dev, purpose="allocate"), pm.MlockBackend)
        t = dev.alloc(PAGE)
        dev.submit(t, h)
        assert rt.pinned_memory.bytes_pinned() == {"mlock": PAGE}
        assert pm.vmlck_bytes() - v0 == PAGE
    assert pm.vmlck_bytes() == v0


def test_a_device_pin_holds_the_device_until_it_is_made(bundled_path, monkeypatch):
    """A pin for a device initialises it and holds it in use while the backend
    locks (``Device.in_use``): a deinit started meanwhile waits for the pin."""
    import threading
    h = page_buf(1)
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        reg = rt.pinned_memory
        locking, release = threading.Event(), threading.Event()
        real_lock = pm.PluginLockBackend.lock

        def slow_lock(self, addr, size):
            locking.set()
            release.wait(10)
            real_lock(self, addr, size)

        monkeypatch.setattr(pm.PluginLockBackend, "lock", slow_lock)
        t = threading.Thread(target=reg.pin, args=(h,), kwargs={"device": dev})
        t.start()
        assert locking.wait(10) and dev.initialized
        deinit = threading.Thread(target=dev.deinit)
        deinit.start()
        deinit.join(0.3)
        assert deinit.is_alive()                  # waits for the pin in flight
        release.set()
        t.join(10)
        deinit.join(10)
        assert not deinit.is_alive() and not dev.initialized
        assert reg.ranges(dev) == []              # the device's pins ended with it


class _FakeGompPlugin:
    """The two page-locked entry points of a GOMP plugin that has them (GCC
    trunk), answering like a plugin whose allocation fails once."""
    abi = "gomp"
    has_page_locked_host_memory = True

    def __init__(self):
        self.calls = []

    def has(self, name):
        return name in ("page_locked_host_alloc", "page_locked_host_free")

    def page_locked_host_alloc(self, size):
        self.calls.append(("alloc", size))
        if len(self.calls) == 1:
            raise osh.PluginCallError("fake: GOMP_OFFLOAD_page_locked_host_alloc(4096) failed",
                                      function="GOMP_OFFLOAD_page_locked_host_alloc")
        return 0x10000

    def page_locked_host_free(self, addr):
        self.calls.append(("free", addr))


def test_gomp_page_locked_backend_goes_through_the_plugin_methods():
    class Dev:
        label = "fake:0"
        plugin = _FakeGompPlugin()
    assert pb._page_locked_allocator(Dev.plugin)
    be = pm.GompPageLockedBackend(Dev)
    with pytest.raises(osh.PinnedMemoryError) as ei:
        be.host_alloc(PAGE)
    assert ei.value.function == "GOMP_OFFLOAD_page_locked_host_alloc"
    assert ei.value.device == "fake:0"
    assert be.host_alloc(PAGE) == 0x10000
    be.host_free(0x10000)
    assert Dev.plugin.calls == [("alloc", PAGE), ("alloc", PAGE), ("free", 0x10000)]


def test_gcc12_plugins_have_no_page_locked_entry_points(bundled_path):
    p = load_plugin(bundled_path, abi="gomp")
    with pytest.raises(osh.MissingEntryPointError):
        p.page_locked_host_alloc(PAGE)
    with pytest.raises(osh.MissingEntryPointError):
        p.page_locked_host_free(0x1000)


# -- pinned host allocations ---------------------------------------------------------------

@given(st.integers(1, 1 << 30))
def test_size_class_waste_is_bounded(n):
    c = pm.size_class_pages(n) * PAGE
    assert c >= n and c % PAGE == 0
    assert c - n < PAGE + n / 8


def test_host_pool_reuses_locked_blocks(plugin):
    v0 = pm.vmlck_bytes()
    with osh.Runtime([plugin]) as rt:
        dev = rt.devices[0]
        reg = rt.pinned_memory
        with reg.alloc_host(10_000, device=dev) as b:
            assert isinstance(b, pm.PinnedHostBuffer)
            mv = memoryview(b)
            assert (mv.nbytes, mv.format[-1], b.capacity) == (10_000, "B", 3 * PAGE)
            assert b.address % PAGE == 0 and reg.is_pinned(b.address, 10_000, device=dev)
            b[:4] = b"\x01\x02\x03\x04"
            t = dev.alloc(10_000)
            dev.submit(t, b)
            out = bytearray(10_000)
            dev.retrieve(out, t)
            assert out[:4] == b"\x01\x02\x03\x04"
            dev.free(t)
            addr = b.address
        assert b.freed
        b.free()                                  # idempotent
        b2 = reg.alloc_host(9_000, device=dev)    # same class: the cached, still locked block
        assert b2.address == addr
        pool = reg.host_pool(dev)
        assert pool.stats()["hits"] == 1 and pool.stats()["misses"] == 1
        b2.free()
        assert pool.stats()["cached"] == 3 * PAGE
        assert pool.trim() == 3 * PAGE and reg.ranges(dev) == []
        b3 = reg.alloc_host(PAGE)                 # process domain: mlock
        assert reg.bytes_pinned() == {"mlock": PAGE}
        del b3                                    # finalizer returns it to the pool
        with pytest.raises(ValueError):
            reg.alloc_host(0)
    assert pm.vmlck_bytes() == v0


# -- RLIMIT_MEMLOCK failure paths and the "all" policy, in child processes ----------------



def _child(body: str) -> dict:
    cp = run_child(_DROP_CAP + body)
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout.strip().splitlines()[-1])


def test_memlock_limit_failure_paths_in_child(bundled_path):
    res = _child(f"""
import json, mmap, warnings
import offload_shim as osh
from offload_shim.memory import pinned as pm
drop_ipc_lock(); set_limit(64 * 1024)
out = {{"cap": pm.has_cap_ipc_lock(), "limit": pm.memlock_limit()}}
big = mmap.mmap(-1, 1 << 20)
with osh.Runtime([{bundled_path!r}], pinned="mapped") as rt:
    reg = rt.pinned_memory
    dev = rt.devices[0]
    for name, dom in (("mlock", None), ("plugin", dev)):
        try:
            reg.pin(big, device=dom)
        except osh.MemlockLimitError as e:
            out[name] = [str(e), e.limit, e.requested]
    small = mmap.mmap(-1, 4096)
    reg.pin(small)                                   # under the limit: fine
    try:
        reg.alloc_host(1 << 20)
    except osh.MemlockLimitError as e:
        out["alloc"] = e.requested
    t = dev.alloc(1 << 20)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        dev.submit(t, big)                            # mapped: pin skipped, copy done
    out["warned"] = [str(x.category.__name__) for x in w]
    out["skipped"] = reg.stats()["skipped"]
    dev.free(t)
    # the kernel itself refuses past the check: straight mlock
    import ctypes
    lib = ctypes.CDLL(None, use_errno=True)
    lib.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    a = ctypes.addressof((ctypes.c_char * (1 << 20)).from_buffer(big))
    out["kernel_refuses"] = lib.mlock(a, 1 << 20) != 0
out["vmlck_after"] = pm.vmlck_bytes()
print(json.dumps(out))
""")
    assert res["cap"] is False and res["limit"] == 64 * 1024
    for name in ("mlock", "plugin"):
        msg, limit, requested = res[name]
        assert "RLIMIT_MEMLOCK" in msg and "ulimit -l" in msg and "65536" in msg
        assert limit == 65536 and requested == 1 << 20
    assert res["alloc"] == 1 << 20
    assert res["warned"] == ["PinnedMemoryWarning"] and res["skipped"] == 1
    assert res["kernel_refuses"] is True
    assert res["vmlck_after"] == 0


def test_policy_all_in_child(bundled_path):
    res = _child(f"""
import json, warnings
import offload_shim as osh
from offload_shim.memory import pinned as pm
out = {{}}
with osh.Runtime([{bundled_path!r}], pinned="all") as rt:
    out["locked"] = rt.pinned_memory.stats()["all_locked"]
    out["vmlck"] = pm.vmlck_bytes()
    dev = rt.devices[0]
    t = dev.alloc(64); dev.submit(t, bytearray(64)); dev.free(t)
out["after"] = pm.vmlck_bytes()
# too low a limit without CAP_IPC_LOCK: warn, do not fail
drop_ipc_lock(); set_limit(64 * 1024)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    with osh.Runtime([{bundled_path!r}], pinned="all") as rt:
        out["low_locked"] = rt.pinned_memory.stats()["all_locked"]
        dev = rt.devices[0]
        t = dev.alloc(64); dev.submit(t, bytearray(64)); dev.free(t)
out["low_warn"] = [str(x.message) for x in w if x.category is pm.PinnedMemoryWarning]
out["low_after"] = pm.vmlck_bytes()
print(json.dumps(out))
""")
    assert res["locked"] is True and res["vmlck"] > 1 << 20
    assert res["after"] == 0
    assert res["low_locked"] is False and res["low_after"] == 0
    assert len(res["low_warn"]) == 1 and "ulimit -l" in res["low_warn"][0]


# -- error types: typed by cause (the limit only when it explains the failure), sizes that
#    do not fit, failed mmaps, everything after close -------------------------------------
# (the test process usually runs with CAP_IPC_LOCK; the children below drop it)

UNMAPPED = 0x10            # page 0 is never mapped


def _unlimited_or_cap() -> bool:
    return pm.memlock_limit() is None or pm.has_cap_ipc_lock()


def test_unmapped_range_is_not_a_limit_error():
    with pm.PinnedRegistry() as reg:
        with pytest.raises(osh.PinnedMemoryError) as ei:
            reg.pin(UNMAPPED, PAGE)
        assert not isinstance(ei.value, osh.MemlockLimitError)
        assert "not (fully) mapped" in str(ei.value) and ei.value.code == errno.ENOMEM
        big = (0x7fff00000000, 1 << 30)
        if _unlimited_or_cap():
            with pytest.raises(osh.PinnedMemoryError) as ei:
                reg.pin(*big)
            assert not isinstance(ei.value, osh.MemlockLimitError)
        else:                                       # the pre-check: the limit is the reason
            with pytest.raises(osh.MemlockLimitError):
                reg.pin(*big)
        assert reg.ranges() == []


def test_unmapped_range_through_the_runtime_and_plugin(bundled_path):
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        for device in (None, dev):
            with pytest.raises(osh.PinnedMemoryError) as ei:
                rt.pinned_memory.pin(UNMAPPED, 4096, device=device)
            assert not isinstance(ei.value, osh.MemlockLimitError), device
        assert rt.pinned_memory.ranges() == []


@pytest.mark.parametrize("err, limit, cap, vmlck, want", [
    (errno.ENOMEM, None, False, 0, "pinned"),        # unlimited: never the limit
    (errno.ENOMEM, 1 << 20, True, 0, "pinned"),       # CAP_IPC_LOCK: limit ignored
    (errno.ENOMEM, 1 << 20, False, 0, "pinned"),      # well under the limit: unmapped
    (errno.ENOMEM, 1 << 20, False, 1 << 20, "limit"),  # past the limit
    (errno.EAGAIN, 1 << 20, False, 1 << 20, "limit"),
    (errno.EPERM, 0, False, 0, "limit"),              # limit 0 without privilege
    (errno.EAGAIN, None, False, 0, "pinned"),
    (errno.EINVAL, 1 << 20, False, 1 << 20, "pinned"),
])
def test_lock_error_classification(monkeypatch, err, limit, cap, vmlck, want):
    monkeypatch.setattr(pb, "memlock_limit", lambda: limit)
    monkeypatch.setattr(pb, "has_cap_ipc_lock", lambda: cap)
    monkeypatch.setattr(pb, "vmlck_bytes", lambda: vmlck)
    e = pb._lock_error("mlock(0x1000, 4096)", 0x1000, PAGE, err, function="mlock")
    assert isinstance(e, osh.PinnedMemoryError)
    assert isinstance(e, osh.MemlockLimitError) == (want == "limit")
    if want == "limit":
        assert e.errno == err and "RLIMIT_MEMLOCK" in str(e)
    else:
        assert e.code == err and "would exceed" not in str(e)


def test_unmapped_pin_without_cap_in_child(bundled_path):
    cp = run_child(_DROP_CAP + f"""
import json, mmap
import offload_shim as osh
from offload_shim.memory import pinned as pm
drop_ipc_lock(); set_soft_limit(64 * 1024)
out = {{}}
with osh.Runtime([{bundled_path!r}]) as rt:
    reg = rt.pinned_memory
    for name, dom in (("mlock", None), ("plugin", rt.devices[0])):
        try:
            reg.pin(0x10, 4096, device=dom)
        except osh.PinnedMemoryError as e:
            out[name] = type(e).__name__
        try:
            reg.pin(mmap.mmap(-1, 1 << 20), device=dom)
        except osh.PinnedMemoryError as e:
            out[name + "_big"] = type(e).__name__
print(json.dumps(out))
""")
    assert cp.returncode == 0, cp.stderr
    res = json.loads(cp.stdout.strip().splitlines()[-1])
    assert res == {"mlock": "PinnedMemoryError", "plugin": "PinnedMemoryError",
                   "mlock_big": "MemlockLimitError", "plugin_big": "MemlockLimitError"}


@pytest.mark.parametrize("n", [2**64 + 16, 2**64, 2**63, (1 << 63) - 1])
def test_alloc_host_sizes_that_do_not_fit(n):
    with pm.PinnedRegistry() as reg:
        with pytest.raises(ValueError, match="does not fit"):
            reg.alloc_host(n)
        assert reg.host_pool().stats()["in_use"] == 0


def test_alloc_host_failed_mmap_is_a_pinned_memory_error():
    with pm.PinnedRegistry() as reg:
        with pytest.raises(osh.PinnedMemoryError) as ei:
            reg.alloc_host(2**62)                    # more than any address space
        assert not isinstance(ei.value, osh.MemlockLimitError)
        assert ei.value.code == errno.ENOMEM and "mmap" in str(ei.value)
        assert reg.host_pool().stats()["in_use"] == 0
        with reg.alloc_host(100) as buf:             # the pool still works
            assert buf.nbytes == 100
    with pytest.raises(ValueError):
        pm.PinnedRegistry().alloc_host(0)


def test_everything_after_close_is_a_lifecycle_error(bundled_path):
    buf = mmap.mmap(-1, 2 * PAGE)
    rt = osh.Runtime([bundled_path])
    reg = rt.pinned_memory
    reg.pin(buf)
    pool = reg.host_pool()
    rt.close()
    calls = [lambda: reg.unpin(buf), lambda: reg.unpin(0x1000, 4096),
             lambda: reg.unpin(0x1000), lambda: reg.pin(buf), lambda: reg.pin(0x1000, 4096),
             lambda: reg.pin(0, 0), lambda: reg.alloc_host(10), lambda: reg.alloc_host(0),
             lambda: reg.host_pool(), lambda: pool.allocate(10)]
    for i, call in enumerate(calls):
        with pytest.raises(osh.LifecycleError, match="closed"):
            call()
    assert reg.ranges() == []


# -- a raw-address pin whose memory was unmapped and mapped again --------------------------

_REMAP = """
import ctypes, json, mmap, os, tempfile
import offload_shim as osh
from offload_shim.memory import pinned as pm
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
RW, ANON, FIXED = 3, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, 0x10
N = 4 * mmap.PAGESIZE

def remap(addr, fd=-1):
    assert libc.munmap(addr, N) == 0
    flags = (ANON if fd < 0 else mmap.MAP_SHARED) | FIXED
    assert libc.mmap(addr, N, RW, flags, fd, 0) == addr
    ctypes.memset(addr, 1, N)                     # touched: resident, like the old pages

def probe(reg, dom, fd=-1):
    out = {"counts": reg.pin_backend(dom).counts_memlock}
    a = libc.mmap(None, N, RW, ANON, -1, 0)
    ctypes.memset(a, 1, N)
    v0 = pm.vmlck_bytes()
    out["refs"] = reg.pin(a, N, device=dom).refs
    out["locked"] = pm.vmlck_bytes() - v0
    remap(a, fd)
    out["locked_after_remap"] = pm.vmlck_bytes() - v0
    out["is_pinned"] = reg.is_pinned(a, N, device=dom)
    out["listed"] = [r.refs for r in reg.ranges(dom) if r.address == a]
    made = []
    for key, args in (("again", (a, N)), ("nested", (a + mmap.PAGESIZE, mmap.PAGESIZE))):
        try:
            out[key] = reg.pin(*args, device=dom).refs
            made.append(args)
        except osh.PinnedRangeError as e:
            out[key] = [type(e).__name__, e.address == args[0], e.size == args[1], str(e)]
    out["unpin"] = reg.unpin(a, N, device=dom)
    for args in made:
        reg.unpin(*args, device=dom)
    out["fresh"] = reg.pin(a, N, device=dom).refs
    out["fresh_locked"] = pm.vmlck_bytes() - v0
    reg.unpin(a, N, device=dom)
    out["end_locked"] = pm.vmlck_bytes() - v0
    libc.munmap(a, N)
    return out

res = {}
with osh.Runtime(PLUGINS) as rt:
    reg = rt.pinned_memory
    first = {}
    for dev in rt.devices:                        # the first device of each plugin
        first.setdefault(dev.plugin.path, dev)
    for dev in [None, *first.values()]:
        name = "process" if dev is None else dev.label
        res[name + ":anon"] = probe(reg, dev)
        with tempfile.TemporaryFile() as f:
            f.truncate(N)
            res[name + ":file"] = probe(reg, dev, f.fileno())
print(json.dumps(res))
"""


def test_a_raw_pin_whose_memory_was_replaced_is_refused_in_child(bundled_path, request):
    """A raw address pinned, its memory unmapped without an unpin, new memory
    (anonymous, or a file) mapped at the same address with MAP_FIXED: the kernel
    holds no lock on the new pages (VmLck back to where it was), so the registry
    must not count a second reference on the dead pin nor report it pinned: the
    pin is refused with StalePinError (a PinnedRangeError); after the stale pin
    is unpinned, the new memory pins normally.  Backends: mlock (process), the
    bundled plugin's data_lock (mlock), the LLVM 16 nextgen plugin's (locks
    nothing: the mapping's identity from /proc/self/maps tells the file apart)."""
    plugins = [bundled_path]
    try:
        plugins.append(request.getfixturevalue("nextgen16"))
    except pytest.skip.Exception:
        pass
    cp = run_child(f"PLUGINS = {plugins!r}\n" + _REMAP)
    assert cp.returncode == 0, cp.stderr
    res = json.loads(cp.stdout.strip().splitlines()[-1])
    assert len(res) == 2 * (1 + len(plugins))
    for name, r in res.items():
        counts = r["counts"]                        # False: the nextgen plugin locks nothing
        tracked = counts or name.endswith(":file")   # what /proc can tell apart
        assert r["refs"] == 1 and r["fresh"] == 1, (name, r)
        if counts:
            assert r["locked"] == 4 * PAGE and r["fresh_locked"] == 4 * PAGE, (name, r)
            assert r["locked_after_remap"] == 0 and r["end_locked"] == 0, (name, r)
        if tracked:
            assert r["is_pinned"] is False and r["listed"] == [] and r["unpin"] == 0, (name, r)
            for key in ("again", "nested"):
                kind, addr_ok, size_ok, msg = r[key]
                assert kind == "StalePinError" and addr_ok and size_ok, (name, r)
                assert "unmapped" in msg and "unpin" in msg, (name, r)
        else:                       # same extent, anonymous: /proc shows the same mapping
            assert r["is_pinned"] is True and r["again"] == 2 and r["unpin"] == 2, (name, r)
    assert sum(not r["counts"] for r in res.values()) == 2 * (len(plugins) - 1)


# -- CUDA -------------------------------------------------------------------------------

@pytest.mark.gpu
def test_cuda_host_register():
    if not pm.cuda_driver_available():
        pytest.skip("no CUDA driver (cuda-python missing or cuInit failed)")
    """The backend registers the pages with the driver and unregisters them: while
    pinned the driver itself refuses to register them again (712,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED); afterwards it has nothing to
    unregister there (713, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)."""
    be = pm.CudaHostRegisterBackend(0)
    drv = be._drv
    buf = page_buf(4)
    a = addr_of(buf)
    try:
        be.lock(a, 4 * PAGE)
        assert be.registrations() == [(a, a + 4 * PAGE, 1)]
        with be._primary():
            err, = drv.cuMemHostRegister(a + PAGE, PAGE, 0)
        assert err == drv.CUresult.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, err
        be.unlock(a, 4 * PAGE)
        assert be.registrations() == []
        with be._primary():
            err, = drv.cuMemHostUnregister(a)
        assert err == drv.CUresult.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, err
    finally:
        be.close()
