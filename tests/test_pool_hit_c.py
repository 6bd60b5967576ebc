"""The memory manager's hit path in C (native/pool_hit.c, offload_shim/memory/hitpath.py)
against its Python path, which is the whole of ``allocate``/``free`` without the
extension (or with ``OFFLOAD_SHIM_POOL_PURE=1``).

* The same random sequences go through one manager's ``allocate``/``free`` (the C entry
  points) and another's ``_allocate_py``/``_free_py`` (the Python path, the same code
  the pure build runs) over identical fake backends; the answers (which earlier block a
  request gets, errors), the statistics and the accounting words must agree, for every
  policy and option that changes the path.
* The C path never runs while another thread holds the manager's lock.
* The pool tests pass with the Python path alone (a child pytest with the variable set).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from offload_shim.errors import LifecycleError, OffloadError
from offload_shim.memory import MemoryManager
from offload_shim.memory.hitpath import CORE_FIELDS, PURE_ENV, hit_path
from offload_shim.memory.records import HITS, SHIFT

BUILT = importlib.util.find_spec("offload_shim.memory._hit") is not None
needs_c = pytest.mark.skipif(not BUILT or os.environ.get(PURE_ENV) == "1",
                             reason="the C hit path is not built here, or it is turned off")

SIZES = st.sampled_from([0, 1, 8, 24, 64, 100, 512, 4096, 5000, 8192, 8193, 1 << 16, -1])
OPS = st.lists(st.one_of(st.tuples(st.just("alloc"), SIZES),
                         st.tuples(st.just("alloc_odd"), st.sampled_from([True, 64.0, "64"])),
                         st.tuples(st.just("free"), st.integers(0, 40)),
                         st.tuples(st.just("free_strict"), st.integers(0, 40)),
                         st.tuples(st.just("free_twice"), st.integers(0, 40)),
                         st.tuples(st.just("free_unknown"), st.just(0x7000)),
                         st.tuples(st.just("free_null"), st.sampled_from([0, None]))),
               min_size=1, max_size=80)

OPTIONS = [dict(), dict(policy="binned"), dict(policy="best-fit"), dict(stats=False),
           dict(cache_limit=2048), dict(threshold=0), dict(strict=True),
           dict(debug="poison", poison=lambda ptr, size: None)]


class FakeBackend:
    """Addresses from a counter, so two backends fed the same calls give the same ones."""

    def __init__(self, capacity=1 << 20):
        self.next = 0x10000
        self.used = 0
        self.capacity = capacity
        self.sizes = {}
        self.unknown = []       # frees of addresses it never gave (the manager passes them on)

    def alloc(self, size):
        if self.used + size > self.capacity:
            return 0
        self.next += 0x10000
        self.sizes[self.next] = size
        self.used += size
        return self.next

    def free(self, ptr):
        if ptr not in self.sizes:
            self.unknown.append(ptr)
            return
        self.used -= self.sizes.pop(ptr)


def _drive(alloc, free, ops):
    names: dict[int, int] = {}
    live: list[int] = []
    out = []
    for op, arg in ops:
        try:
            if op == "alloc" or op == "alloc_odd":
                p = alloc(arg)
                if p:
                    live.append(p)
                out.append(("a", names.setdefault(p, len(names)) if p else 0))
            elif op == "free_null":
                out.append(("n", free(arg)))
            elif op == "free_unknown":
                free(arg)
                out.append(("u",))
            elif live:
                p = live.pop(arg % len(live))
                if op == "free_strict":
                    free(p, strict=True)
                else:
                    free(p)
                if op == "free_twice":
                    free(p)
                out.append(("f", names[p]))
        except (OffloadError, TypeError, ValueError) as exc:
            out.append(("e", type(exc).__name__))
    return out


def _books(mm):
    s = mm.stats
    return (mm._acc, mm._peak_acc, mm._held, mm._peak_open, s.hits, s.misses,
            s.bytes_in_use, s.bytes_cached, s.peak_bytes_in_use, s.foreign_frees)


@needs_c
def test_the_c_path_is_on_where_built():
    assert hit_path() == "c"
    assert type(MemoryManager.allocate).__name__ == "method_descriptor"
    assert "allocate" not in vars(MemoryManager) and "free" not in vars(MemoryManager)
    core = MemoryManager.__mro__[-2]
    assert core.__name__ == "PoolCore"
    assert set(CORE_FIELDS) == {n for n in vars(core) if n.startswith("_") and
                                not n.startswith("__")}
    assert not set(CORE_FIELDS) & set(MemoryManager.__slots__)   # no slot shadows a field


@needs_c
@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()
                                                                   if k != "poison") or "default")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_c_and_python_paths_give_the_same_answers(opts, ops):
    c_backend, py_backend = FakeBackend(), FakeBackend()
    kw = dict(threshold=8192, device_label="x")
    kw.update(opts)
    kw.setdefault("debug", "")
    c_mm = MemoryManager(c_backend.alloc, c_backend.free, **kw)
    py_mm = MemoryManager(py_backend.alloc, py_backend.free, **kw)
    got = _drive(c_mm.allocate, c_mm.free, ops)
    want = _drive(py_mm._allocate_py, py_mm._free_py, ops)
    assert got == want
    assert _books(c_mm) == _books(py_mm)
    assert c_backend.sizes == py_backend.sizes and c_backend.unknown == py_backend.unknown


@needs_c
def test_an_event_log_and_parked_frees_take_the_python_path(tmp_path):
    """``_slow`` (an event log, parked frees, a before-hook) sends every call to the
    Python path, which logs it: the log has one event per call."""
    backend = FakeBackend()
    log = tmp_path / "events.jsonl"
    mm = MemoryManager(backend.alloc, backend.free, threshold=8192, debug="", event_log=str(log))
    for _ in range(5):
        mm.free(mm.allocate(64))
    mm.drain()
    events = [line for line in log.read_text().splitlines() if '"alloc"' in line or '"free"' in line]
    assert len(events) == 10
    assert mm.stats.hits == 4


@needs_c
def test_the_accounting_words_read_and_write_as_ints():
    mm = MemoryManager(FakeBackend().alloc, lambda p: None, threshold=8192, debug="")
    mm._acc = (5 << SHIFT) | 3
    assert mm._acc == (5 << SHIFT) | 3 and mm._acc >> SHIFT == 5 and mm._acc & HITS == 3
    mm._peak_acc = (7 << SHIFT) | HITS
    assert mm._peak_acc == (7 << SHIFT) | HITS
    with pytest.raises(OverflowError):
        mm._acc = -1
    with pytest.raises(OverflowError):
        mm._acc = 1 << 128
    with pytest.raises(TypeError):
        mm._acc = 1.5
    assert mm._acc == (5 << SHIFT) | 3          # a refused write changes nothing


@needs_c
def test_the_c_path_waits_for_a_held_lock():
    """A thread that holds the manager's lock (a slow path's bookkeeping step) keeps
    another thread's hit and cached free out until it gives the lock back."""
    backend = FakeBackend()
    mm = MemoryManager(backend.alloc, backend.free, threshold=8192, debug="")
    mm.free(mm.allocate(64))
    done = []

    def other():
        p = mm.allocate(64)
        done.append(("a", p))
        mm.free(p)
        done.append(("f", p))

    with mm._lock:
        t = threading.Thread(target=other)
        t.start()
        t.join(0.3)
        assert t.is_alive() and done == []     # waiting for the token
    t.join(30)
    assert not t.is_alive() and [d[0] for d in done] == ["a", "f"]
    assert mm.stats.hits == 1


@needs_c
def test_many_threads_keep_the_books():
    backend = FakeBackend(capacity=1 << 30)
    mm = MemoryManager(backend.alloc, backend.free, threshold=8192, debug="")
    errors = []

    def worker(k):
        try:
            for i in range(3000):
                ps = [mm.allocate(64 * (1 + (i + j + k) % 4)) for j in range(3)]
                for p in ps:
                    mm.free(p)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        sys.setswitchinterval(old)
    assert not errors
    s = mm.stats
    assert s.bytes_in_use == 0 and s.hits + s.misses == 4 * 3000 * 3
    assert s.bytes_cached == sum(backend.sizes.values())
    assert mm._live == {}


def test_the_pool_tests_pass_on_the_python_path():
    """The pool's own tests with ``OFFLOAD_SHIM_POOL_PURE=1``: the Python path alone."""
    here = Path(__file__).parent
    env = dict(os.environ, **{PURE_ENV: "1"})
    files = ["test_pool_differential.py", "test_pool_free.py", "test_pool_park.py",
             "test_device_hit_path.py", "test_pool_concurrency.py"]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-x", *files], cwd=here, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    probe = subprocess.run([sys.executable, "-c", "from offload_shim.memory.hitpath import "
                            "hit_path; from offload_shim.memory import MemoryManager as M; "
                            "print(hit_path(), M.allocate is M._allocate_py)"],
                           env=env, capture_output=True, text=True, timeout=120, cwd=here)
    assert probe.stdout.split() == ["python", "True"], probe.stderr


def test_more_bytes_than_64_bits_hold_are_refused_before_booking():
    """A backend that hands out more than 2**64 bytes (overlapping blocks) is refused
    before any booking, on either path: the C path's 64-bit fields never overflow."""
    backend = FakeBackend(capacity=1 << 70)
    mm = MemoryManager(backend.alloc, backend.free, threshold=8192)
    big = (1 << 63) - 1
    mm.allocate(big)
    mm.allocate(big)
    with pytest.raises(OffloadError, match="more than 64-bit memory holds"):
        mm.allocate(big)
    assert mm._held == 2 * big and len(mm._live) == 2 and len(backend.sizes) == 2


def test_a_refused_free_keeps_the_order_of_live_blocks():
    """A free the other path refuses (the guard) leaves ``_live`` in its order on both
    paths (the Python path used to move the block to the end)."""
    class Guard:
        refuse = False

        def __enter__(self):
            if self.refuse:
                raise LifecycleError("tearing down")

        def __exit__(self, *exc):
            pass
    orders = []
    for name in ("free", "_free_py"):
        guard, backend = Guard(), FakeBackend(capacity=1 << 30)
        mm = MemoryManager(backend.alloc, backend.free, threshold=8192, guard=guard)
        a, b = mm.allocate(1 << 20), mm.allocate(1 << 20)
        guard.refuse = True
        with pytest.raises(LifecycleError):
            getattr(mm, name)(a)
        orders.append([p for p, _ in mm.live_allocations()] == [a, b])
    assert orders == [True, True]
