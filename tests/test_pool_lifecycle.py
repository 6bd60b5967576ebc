"""The pool's life: drain at teardown, use after drain, the device around it
(deinit racing with frees, copies checked against the pool's table), and the
threshold variable, checked before any plugin reads it.

Sources: LLVM GenericDeviceTy::deinit, D81054 TODO "plugin destroyed before the memory
manager"; LLVM 16 MemoryManager.h (``std::stoul`` aborts on a bad threshold).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import offload_shim as osh
from offload_shim.errors import LifecycleError, OffloadError
from offload_shim.memory import DEBUG_ENV, THRESHOLD_ENV, MemoryManager
from offload_shim.memory.fake import FakeBackend

from helpers import FailOnce, make_pool

DELETE = "__tgt_rtl_data_delete"

make = make_pool


@pytest.fixture(autouse=True)
def _no_pool_env(monkeypatch):
    """Tests here set the pool options they rely on; the caller's environment
    must not turn pooling off or change the threshold behind them."""
    monkeypatch.delenv(THRESHOLD_ENV, raising=False)
    monkeypatch.delenv(DEBUG_ENV, raising=False)


# -- drain ---------------------------------------------------------------------


def test_drain_frees_everything_and_reports_live():
    b, mm = make()
    live = [mm.allocate(s) for s in (16, 100, 9000)]
    cached = [mm.allocate(s) for s in (8, 32)]
    for p in cached:
        mm.free(p)
    assert mm.drain() == (3, 16 + 100 + 9000)
    assert b.live == {} and set(b.freed) == set(live + cached)
    assert mm.closed and not mm.owns(live[0])
    s = mm.stats
    assert s.bytes_total == 0 and s.live_blocks == s.cached_blocks == 0
    assert s.backend_allocs == s.backend_frees == 5
    with pytest.raises(LifecycleError):
        mm.allocate(16)
    with pytest.raises(LifecycleError):
        mm.free(live[0])
    assert mm.drain() == (0, 0)                   # idempotent
    assert mm.trim() == 0 and mm.release_all() == 0
    assert mm.allocate(0) == 0                    # size 0 never touches anything


def test_drain_continues_after_a_backend_free_error():
    b = FakeBackend()
    calls = []

    def flaky_free(p):
        calls.append(p)
        if len(calls) == 1:
            raise OffloadError("data_delete failed", code=1)
        b.free(p)
    mm = MemoryManager(b.alloc, flaky_free, debug="")
    ps = [mm.allocate(8) for _ in range(3)]
    with pytest.raises(OffloadError):
        mm.drain()
    assert len(calls) == 3 and len(b.live) == 1 and mm.closed
    assert ps


def test_context_manager_and_close():
    b = FakeBackend()
    with MemoryManager(b.alloc, b.free, debug="") as mm:
        mm.free(mm.allocate(8))
        mm.allocate(8)
    assert mm.closed and b.live == {}
    mm.close()


# -- the device around the pool ------------------------------------------------


def test_device_allocations_and_copies_use_the_pool_table(bundled_path):
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        assert dev.allocations == (0, 0)            # before init: no pool, no init
        assert dev.state is osh.DeviceState.UNINIT
        p = dev.alloc(100)
        q = dev.alloc(3000)
        assert dev.allocations == (2, 3100)
        dev.submit(p, bytes(100))
        with pytest.raises(ValueError):
            dev.submit(p, bytes(101))
        dev.free(p)
        with pytest.raises(osh.UnknownPointerError):
            dev.submit(p, bytes(4))                 # cached, not live
        with pytest.raises(osh.UnknownPointerError, match="already freed"):
            dev.free(p)
        assert dev.pool.stats.foreign_frees == 0
        assert dev.allocations == (1, 3000)
        assert dev.deinit() == (1, 3000)
        assert dev.allocations == (0, 0)
        with pytest.raises(osh.UnknownPointerError):
            dev.free(q)                             # drained: never re-initialises
        assert dev.state is osh.DeviceState.UNINIT


def test_free_racing_with_deinit_never_reaches_a_new_pool(bundled_path, ctl, monkeypatch):
    """A ``free`` whose pointer is drained by a concurrent ``deinit`` (the
    deinit runs between the device's state check and the pool's table) must
    not hand the pointer to the re-initialised device's new pool, which would
    pass it to the plugin a second time (double free, or the free of a block
    libc has given to someone else).  Deterministic: the deinit runs from a
    stand-in for the pool's lock token deque, when ``free`` takes the pool's lock
    (the pool's free, finding a stand-in where its C hit path wants the deque, hands
    the call to its Python path, which takes the lock there)."""
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        p = dev.alloc(100)
        d0 = ctl.call_count(DELETE)
        pool = dev.pool
        tokens = pool._lockq

        class DeinitFirst:
            def pop(self):
                pool._lockq = tokens
                assert dev.deinit() == (1, 100)      # drains p: the plugin frees it once
                dev.init()                           # a new pool, which never saw p
                return tokens.pop()

            def append(self, token):
                tokens.append(token)

        monkeypatch.setattr(pool, "_lockq", DeinitFirst())
        with pytest.raises(osh.UnknownPointerError, match="deinit that ran concurrently") as e:
            dev.free(p)
        assert e.value.device == dev.label
        assert ctl.call_count(DELETE) == d0 + 1
        assert dev.pool is not pool and dev.pool.stats.foreign_frees == 0
        # a pointer that is not live never initialises the device
        dev.deinit()
        with pytest.raises(osh.UnknownPointerError):
            dev.free(p)
        assert dev.state is osh.DeviceState.UNINIT


# -- the threshold variable ----------------------------------------------------


def test_threshold_env_read_by_devices(bundled_path, ctl, monkeypatch):
    monkeypatch.setenv(THRESHOLD_ENV, "64")
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        assert dev.pool is None                         # read at init, not before
        d0 = ctl.call_count(DELETE)
        dev.free(dev.alloc(65))                         # above: straight back
        assert ctl.call_count(DELETE) == d0 + 1
        dev.free(dev.alloc(64))                         # pooled
        assert ctl.call_count(DELETE) == d0 + 1
        assert dev.pool.threshold == 64 and dev.pool.stats.cached_blocks == 1
        monkeypatch.setenv(THRESHOLD_ENV, "0")
        assert dev.pool.threshold == 64                 # an initialised device keeps it
        dev2 = rt.devices[1]
        dev2.init()
        assert dev2.pool.threshold == 0 and not dev2.pool.enabled
        dev2.free(dev2.alloc(8))
        assert ctl.live_allocs(dev2.index) == 0
    monkeypatch.delenv(THRESHOLD_ENV)
    with osh.Runtime([bundled_path], pool={"threshold": 100}) as rt:
        monkeypatch.setenv(THRESHOLD_ENV, "5")          # an explicit option wins
        rt.devices[0].init()
        assert rt.devices[0].pool.threshold == 100
    monkeypatch.delenv(THRESHOLD_ENV)
    with osh.Runtime([bundled_path]) as rt:
        rt.devices[0].init()
        assert rt.devices[0].pool.threshold == 8192


BAD_THRESHOLDS = ["8k", "abc", "", "-1", "99999999999999999999999"]


@pytest.mark.parametrize("bad", BAD_THRESHOLDS)
def test_bad_threshold_env_is_refused_before_any_plugin_reads_it(bundled_path, ctl,
                                                                  monkeypatch, bad):
    """LLVM plugins parse the variable with ``std::stoul`` (nextgen: at
    init_device; classic CUDA: when loaded), which aborts the process on an
    empty or non-numeric value or one beyond 64 bits.  The runtime refuses it
    with the documented ValueError naming the variable, before loading a
    plugin and before any init_device."""
    monkeypatch.setenv(THRESHOLD_ENV, bad)
    with pytest.raises(ValueError, match=THRESHOLD_ENV):
        osh.Runtime([bundled_path])
    with pytest.raises(ValueError, match=THRESHOLD_ENV):
        osh.Runtime.discover(host_only=True)
    monkeypatch.delenv(THRESHOLD_ENV)
    init0 = ctl.call_count("__tgt_rtl_init_device")
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        monkeypatch.setenv(THRESHOLD_ENV, bad)       # set after the runtime was made
        with pytest.raises(ValueError, match=THRESHOLD_ENV):
            dev.alloc(8)
        assert ctl.call_count("__tgt_rtl_init_device") == init0     # never reached the plugin
        assert dev.state is osh.DeviceState.UNINIT and dev.pool is None
        monkeypatch.delenv(THRESHOLD_ENV)
        dev.free(dev.alloc(8))                          # fixed: the next touch works
        assert dev.state is osh.DeviceState.READY and dev.pool.threshold == 8192


_README = """
import offload_shim as osh
from array import array
with osh.Runtime.discover(host_only=True) as rt:
    img = osh.OffloadImage.sample()
    rt.register_image(img)
    dev = rt.devices[0]
    n = 1024
    a = dev.alloc(8 * n)
    dev.submit(a, array("q", range(n)))
    dev.launch("increment", [a, n])
    out = array("q", bytes(8 * n)); dev.retrieve(out, a)
    assert list(out) == list(range(1, n + 1))
    dev.free(a)
    rt.unregister_image(img)
print("OK")
"""


@pytest.mark.parametrize("bad", ["abc", "", "99999999999999999999999"])
def test_bad_threshold_env_on_the_cli_and_the_readme_example(nextgen16, tmp_path, bad):
    """``offload-shim`` commands end in one error line and exit status 2; the
    README example ends in the ValueError naming the variable, not in the
    nextgen plugin's C++ abort (SIGABRT)."""
    env = dict(os.environ, **{THRESHOLD_ENV: bad})
    for args in (["demo"], ["info"], ["bench", "--profile", "tiny", "--no-gpu"]):
        r = subprocess.run([sys.executable, "-P", "-m", "offload_shim", *args], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, (args, r.stderr[-500:])
        assert r.stdout == "" and r.stderr.count("\n") == 1
        assert r.stderr.startswith("offload-shim: error: ") and THRESHOLD_ENV in r.stderr
    script = tmp_path / "example.py"
    script.write_text(_README)
    r = subprocess.run([sys.executable, "-P", str(script)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1 and "terminate called" not in r.stderr
    assert f"ValueError: {THRESHOLD_ENV}=" in r.stderr
    # set only after the runtime exists: the nextgen device's init is refused in Python
    late = _README.replace("    img = osh.OffloadImage.sample()", "    import os\n"
                           f"    os.environ[{THRESHOLD_ENV!r}] = {bad!r}\n"
                           "    img = osh.OffloadImage.sample()").replace(
                           "rt.devices[0]", "rt.device(0, plugin='x86_64.nextgen')")
    script.write_text(late)
    env.pop(THRESHOLD_ENV)
    r = subprocess.run([sys.executable, "-P", str(script)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1 and "terminate called" not in r.stderr, r.stderr[-800:]
    assert f"ValueError: {THRESHOLD_ENV}=" in r.stderr


def test_drain_books_out_the_leaked_blocks_and_logs_the_cached_ones_as_trim():
    """``drain`` frees live (leaked) blocks and cached ones through the backend: afterwards
    nothing is in use, cached or held; cached blocks are logged as ``trim`` events and live
    ones as ``free`` events, both with ``"reason": "drain"``."""
    import io
    import json
    log = io.StringIO()
    b, mm = make_pool(event_log=log)
    p, q = mm.allocate(100), mm.allocate(300)
    mm.free(p)
    assert mm.drain() == (1, 300)
    s = mm.stats
    assert (s.bytes_in_use, s.bytes_cached, s.bytes_total, s.live_blocks) == (0, 0, 0, 0)
    assert b.live == {}
    evs = [json.loads(x) for x in log.getvalue().splitlines()]
    drained = [(e["op"], e["ptr"], e["size"], e["hit"]) for e in evs if e.get("reason") == "drain"]
    assert sorted(drained) == [("free", q, 300, False), ("trim", p, 100, False)]
