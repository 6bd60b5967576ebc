"""``Device.alloc`` / ``Device.free`` check the device's state and call the pool
(offload_shim/core/device_memory.py); the pool's hit path runs in C where it is built
(offload_shim/memory/hitpath.py; the C and the Python path side by side:
tests/test_pool_hit_c.py).  These tests
drive the same random sequences through a device's ``alloc``/``free`` and through
another device's pool directly (``MemoryManager.allocate``/``free``) on the bundled
host plugin, and require the same answers: which earlier block each request gets back
(pointers numbered in order of first appearance), the same errors and the same pool
statistics.  (A pool with an event log: tests/test_pool_events.py.)"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import offload_shim as osh
from offload_shim.memory import DEBUG_ENV, THRESHOLD_ENV

SIZES = st.sampled_from([1, 8, 24, 64, 100, 512, 4096, 5000, 1 << 16, (1 << 20) + 1])
OPS = st.lists(st.one_of(st.tuples(st.just("alloc"), SIZES),
                         st.tuples(st.just("free"), st.integers(0, 40)),
                         st.tuples(st.just("free_twice"), st.integers(0, 40)),
                         st.tuples(st.just("free_null"), st.just(0))),
               min_size=1, max_size=60)


@pytest.fixture(autouse=True)
def _no_pool_env(monkeypatch):
    monkeypatch.delenv(THRESHOLD_ENV, raising=False)
    monkeypatch.delenv(DEBUG_ENV, raising=False)


def _drive(alloc, free, ops):
    """Apply ``ops``; returns the answers with pointers numbered by first sight."""
    names: dict[int, int] = {}
    live: list[int] = []
    freed: list[int] = []
    out = []
    for op, arg in ops:
        try:
            if op == "alloc":
                p = alloc(arg)
                names.setdefault(p, len(names))
                live.append(p)
                out.append(("alloc", arg, names[p]))
            elif op == "free_null":
                free(0)
                out.append(("free_null",))
            elif op == "free":
                if not live:
                    continue
                p = live.pop(arg % len(live))
                free(p)
                freed.append(p)
                out.append(("free", names[p]))
            else:                                   # a pointer freed before
                if not freed:
                    continue
                p = freed[arg % len(freed)]
                if p in live:
                    continue                        # handed out again: not stale
                free(p)
                out.append(("free_twice", names[p], "accepted"))
        except Exception as exc:                    # noqa: BLE001 - compared below
            out.append((op, type(exc).__name__))
    for p in live:
        free(p)
    return out


def _stats(pool):
    return pool.stats._asdict()


@pytest.mark.parametrize("pool_opts", [{"policy": "exact"}, {"policy": "binned"},
                                       {"policy": "exact", "stats": False}])
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_device_alloc_free_answer_as_the_pool(bundled_path, pool_opts, ops):
    with osh.Runtime([bundled_path], pool=dict(pool_opts)) as rt:
        rt.register_image(osh.OffloadImage.sample())
        d0, d1 = rt.devices[0], rt.devices[1]
        d0.init()
        d1.init()
        got = _drive(d0.alloc, d0.free, ops)
        want = _drive(d1.pool.allocate, d1.pool.free, ops)
        assert got == want
        assert _stats(d0.pool) == _stats(d1.pool)


@pytest.mark.parametrize("call", ["alloc", "free"])
def test_device_alloc_free_run_the_pools_before_hook(bundled_path, call):
    """``MemoryManager.set_before`` (the interposer's repeats keep device blocks outside
    the pool between their runs): ``Device.alloc`` / ``free``, which call the pool's
    ``allocate`` / ``free`` (hooked: memory/parking.py), run the hook first too, so the request finds the blocks the hook gives
    back (an ``omp_target_alloc`` after a repeated loop gets the block the loop's last
    construct freed: tests/programs/repeat_pool_other_uses.c); a hook that sets itself
    again does not loop."""
    with osh.Runtime([bundled_path]) as rt:
        rt.register_image(osh.OffloadImage.sample())
        dev = rt.devices[0]
        dev.init()
        pool = dev.pool
        held = dev.alloc(64)
        other = dev.alloc(64)
        runs = []

        def hook(op, args):
            runs.append(op)
            if len(runs) == 1:
                dev.pool.free(held)             # gives the kept block back
                pool.set_before(hook)           # and stays (a repeat still busy)
        pool.set_before(hook)
        if call == "alloc":
            assert dev.alloc(64) == held
        else:
            dev.free(other)
            assert dev.alloc(64) == held        # the least recently freed first
            dev.free(held)
            assert dev.alloc(64) == other
        assert 1 <= len(runs) <= 3
        pool._run_before()                      # (the hook set again: done with it)
        assert pool.before is None
