"""Debug modes of the pool (``off-pool``, ``poison``): directly, through a
runtime device, and on plugins that keep a cache of their own.

Sources: docs/memory-manager.md "Debug modes"; LLVM #214752 (no pooling
under tracing); LLVM 16 MemoryManager.h (which plugins read
``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD``, and when).
"""

from __future__ import annotations

import ctypes
import os

import pytest

import offload_shim as osh
from offload_shim.errors import OffloadError, UnknownPointerError
from offload_shim.memory import DEBUG_ENV, THRESHOLD_ENV, MemoryManager
from offload_shim.memory.fake import FakeBackend, FakeBackendError

from offload_shim.memory import plugin_cache
from offload_shim.plugins.loader import load_plugin

from helpers import assert_conserved, make_pool, run_child

DELETE = "__tgt_rtl_data_delete"

make = make_pool


@pytest.fixture(autouse=True)
def _no_pool_env(monkeypatch):
    """Tests here set the pool options they rely on; the caller's environment
    must not turn pooling off or change the threshold behind them."""
    monkeypatch.delenv(THRESHOLD_ENV, raising=False)
    monkeypatch.delenv(DEBUG_ENV, raising=False)


def test_debug_off_pool_really_frees():
    b, mm = make(debug="off-pool")
    assert not mm.enabled and mm.debug == "off-pool"
    p = mm.allocate(64)
    mm.free(p)
    assert p in b.freed and mm.stats.bytes_cached == 0
    with pytest.raises(FakeBackendError, match="double free"):
        mm.free(p)                                # use-after-free reaches the backend


def test_debug_from_env(monkeypatch):
    monkeypatch.setenv(DEBUG_ENV, "off-pool")
    b = FakeBackend()
    mm = MemoryManager(b.alloc, b.free)
    assert not mm.enabled
    monkeypatch.setenv(DEBUG_ENV, "shout")
    with pytest.raises(ValueError, match=DEBUG_ENV):
        MemoryManager(b.alloc, b.free)
    monkeypatch.setenv(DEBUG_ENV, "poison")
    with pytest.raises(ValueError, match="poison"):
        MemoryManager(b.alloc, b.free)             # no callback given
    assert MemoryManager(b.alloc, b.free, poison=lambda p, n: None).debug == "poison"


@pytest.mark.parametrize("policy", ["exact", "binned"])
def test_debug_poison_called_with_block_size(policy):
    seen = []
    b, mm = make(debug="poison", poison=lambda p, n: seen.append((p, n)), policy=policy)
    p = mm.allocate(100)
    big = mm.allocate(10000)
    mm.free(p)
    mm.free(big)                                  # bypass: freed, not poisoned
    assert seen == [(p, b.live[p])]
    assert b.live[p] == 100                       # the block is the request, both policies
    assert mm.allocate(100) == p                  # still pooled
    with pytest.raises(KeyError):
        mm.size_of(big)
    assert_conserved(mm, b)


def test_debug_poison_double_free_and_error():
    def bad_poison(p, n):
        raise OffloadError("data_submit failed", code=1)
    b, mm = make(debug="poison", poison=bad_poison)
    p = mm.allocate(64)
    with pytest.raises(OffloadError, match="data_submit"):
        mm.free(p)
    assert p in b.freed and mm.stats.bytes_total == 0   # released, not cached
    assert_conserved(mm, b)
    seen = []
    b, mm = make(debug="poison", poison=lambda p, n: seen.append(p))
    p = mm.allocate(64)
    mm.free(p)
    with pytest.raises(UnknownPointerError):
        mm.free(p)
    assert seen == [p]


# -- through a runtime device --------------------------------------------------


def test_poison_fills_freed_blocks_through_the_plugin(bundled_path, ctl):
    with osh.Runtime([bundled_path], pool={"debug": "poison"}) as rt:
        dev = rt.devices[0]
        p = dev.alloc(256)
        dev.submit(p, bytes(range(256)))
        s0 = ctl.call_count("__tgt_rtl_data_submit")
        dev.free(p)
        assert ctl.call_count("__tgt_rtl_data_submit") == s0 + 1
        assert ctl.live_allocs(dev.index) == 1          # cached, not freed
        raw = bytearray(256)
        dev.plugin.retrieve(dev.index, ctypes_addr(raw), p, 256)   # behind the runtime
        assert raw == b"\xdb" * 256
        q = dev.alloc(256)
        assert q == p and dev.pool.stats.hits == 1
        out = bytearray(256)
        dev.retrieve(out, q)
        assert out == b"\xdb" * 256                     # a stale read shows the pattern
        big = dev.alloc(10000)                          # bypassed: freed, not poisoned
        dev.free(big)
        assert ctl.call_count("__tgt_rtl_data_submit") == s0 + 1
        dev.free(q)


def ctypes_addr(buf: bytearray) -> int:
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))


@pytest.mark.parametrize("how", ["option", "env"])
def test_off_pool_every_free_reaches_the_plugin(bundled_path, ctl, monkeypatch, how):
    opts = {"debug": "off-pool"} if how == "option" else {}
    if how == "env":
        monkeypatch.setenv(DEBUG_ENV, "off-pool")
    with osh.Runtime([bundled_path], pool=opts) as rt:
        dev = rt.devices[0]
        d0 = ctl.call_count(DELETE)
        for s in (8, 100, 8192):
            dev.free(dev.alloc(s))
        assert ctl.call_count(DELETE) - d0 == 3
        assert ctl.live_allocs(dev.index) == 0
        st = dev.pool.stats
        assert not dev.pool.enabled and dev.pool.debug == "off-pool"
        assert st.hits == 0 and st.misses == 3 and st.cached_blocks == 0


# -- plugins with a cache of their own ------------------------------------------------

def test_which_plugins_keep_a_cache_of_their_own(bundled_path, nextgen16, classic16):
    assert plugin_cache.own_cache(load_plugin(nextgen16)) == plugin_cache.AT_DEVICE_INIT
    assert plugin_cache.own_cache(load_plugin(classic16)) is None
    assert plugin_cache.own_cache(load_plugin(bundled_path)) is None
    assert plugin_cache.own_cache(load_plugin(bundled_path, abi="gomp")) is None
    cuda = "/usr/lib/llvm-16/lib/libomptarget.rtl.cuda.so.16"
    if os.path.exists(cuda):
        assert plugin_cache.own_cache(load_plugin(cuda)) == plugin_cache.AT_LOAD


# glibc mallinfo2().uordblks: bytes malloc'ed.  The LLVM 16 nextgen x86_64
# plugin's "device memory" is libc malloc, so a block its own memory manager
# keeps stays counted; a block really freed does not.
_MALLINFO = """
import ctypes, os, sys
class MI2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks "
                "keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MI2
def held():
    return libc.mallinfo2().uordblks
os.environ.pop("LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD", None)
os.environ.pop("OFFLOAD_SHIM_POOL_DEBUG", None)
import offload_shim as osh
"""


@pytest.mark.parametrize("mode", ["", "off-pool", "poison"])
def test_debug_modes_see_through_the_nextgen_plugins_cache(nextgen16, mode):
    """A debug mode initialises the nextgen device with the plugin's own
    memory manager off (LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD=0 during
    init_device, restored after): blocks the pool gives back (off-pool: every
    free; poison: a trim of the poisoned blocks) really return to libc.
    Without a mode the plugin keeps them (LLVM's default)."""
    r = run_child(_MALLINFO + f"""
with osh.Runtime([{nextgen16!r}], pool={{"debug": {mode!r}}}) as rt:
    dev = rt.devices[0]
    dev.init()
    assert "LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD" not in os.environ
    ps = [dev.alloc(4096) for _ in range(64)]
    before = held()
    for p in ps:
        dev.free(p)
    dev.pool.trim(0)
    print("RESULT", before - held())
""")
    assert r.returncode == 0, r.stderr[-2000:]
    released = int(r.stdout.split("RESULT")[-1])
    if mode:
        assert released >= 60 * 4096               # really back to libc
    else:
        assert released < 16 * 4096                # kept by LLVM's manager


def test_debug_mode_refused_on_a_nextgen_device_already_initialised_with_its_cache(nextgen16):
    r = run_child(_MALLINFO + f"""
rt1 = osh.Runtime([{nextgen16!r}])
rt1.devices[0].init()                          # the plugin's cache on
rt2 = osh.Runtime([{nextgen16!r}], pool={{"debug": "off-pool"}})
try:
    rt2.devices[0].init()
except ValueError as e:
    print("REFUSED", e)
print("STATE", rt2.devices[0].state.value)
rt1.close()
rt2.devices[0].init()                          # the device was released: now it works
print("AFTER", rt2.devices[0].state.value, rt2.devices[0].pool.debug)
rt2.close()
""")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "REFUSED" in r.stdout and "already initialised" in r.stdout
    assert "STATE uninit" in r.stdout and "AFTER ready off-pool" in r.stdout


def test_threshold_variable_is_restored_after_a_debug_init(nextgen16, monkeypatch):
    monkeypatch.setenv(THRESHOLD_ENV, "4096")
    with osh.Runtime([nextgen16], pool={"debug": "off-pool"}) as rt:
        dev = rt.devices[1]
        dev.init()
        assert os.environ[THRESHOLD_ENV] == "4096"
        assert dev.pool.debug == "off-pool" and not dev.pool.enabled
        dev.free(dev.alloc(64))


# -- the LLVM 16 CUDA plugins, on the CUDA driver stand-in (NOT A GPU) -----------------------

_CUDA16 = {"nextgen": "/usr/lib/llvm-16/lib/libomptarget.rtl.cuda.nextgen.so.16",
           "classic": "/usr/lib/llvm-16/lib/libomptarget.rtl.cuda.so.16"}


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    import cuda_standin
    if cuda_standin.compiler() is None:
        pytest.skip("no C compiler to build the CUDA driver stand-in")
    return cuda_standin.build(tmp_path_factory.mktemp("cuda-standin"))


def _on_standin(standin, tmp_path, code, env=None):
    """Run ``code`` in a child whose libcuda is the stand-in (tests/cuda_standin);
    returns (completed process, [(entry point, args, rc)] of its driver calls)."""
    import subprocess
    import sys
    import textwrap

    import cuda_standin
    log = tmp_path / f"calls{len(list(tmp_path.iterdir()))}.log"
    e = cuda_standin.env(standin, log=log, base={**os.environ, **(env or {})})
    for k in (THRESHOLD_ENV, DEBUG_ENV):
        if k not in (env or {}):
            e.pop(k, None)
    # the LLVM 16 CUDA plugins dlopen "libcuda.so": the stand-in's folder has that link
    r = subprocess.run([sys.executable, "-P", "-c", textwrap.dedent(code)], env=e,
                       capture_output=True, text=True, timeout=120)
    return r, cuda_standin.read_log(log)


_CUDA_CHILD = """
import offload_shim as osh
with osh.Runtime([{path!r}], pool={pool!r}) as rt:
    devs = rt.devices
    assert devs, "no device on the stand-in"
    dev = devs[0]
    for _ in range(8):
        dev.free(dev.alloc(4096))
    print("POOL", dev.pool.debug, dev.pool.stats.cached_blocks)
"""


@pytest.mark.parametrize("mode", ["", "off-pool"])
def test_debug_mode_switches_the_cuda_nextgen_plugins_cache_off(standin, tmp_path, mode):
    """STAND-IN, NOT A GPU.  Off-pool on the LLVM 16 CUDA nextgen plugin: every
    free reaches cuMemFree (the plugin made no memory manager for the device).
    Without a mode the pool caches the block: one cuMemAlloc, no cuMemFree
    before the teardown."""
    path = need_path(_CUDA16["nextgen"])
    r, log = _on_standin(standin, tmp_path, _CUDA_CHILD.format(path=path,
                                                               pool={"debug": mode}))
    assert r.returncode == 0, r.stderr[-2000:]
    allocs = [c for c in log if c[0] in ("cuMemAlloc", "cuMemAlloc_v2") and c[2] == 0]
    frees = [c for c in log if c[0] in ("cuMemFree", "cuMemFree_v2") and c[2] == 0]
    if mode:
        assert "POOL off-pool 0" in r.stdout
        assert len(allocs) >= 8 and len(frees) >= 8
    else:
        assert "POOL None 1" in r.stdout
        assert len(allocs) == 1


def test_debug_mode_refused_on_the_classic_cuda_plugin_unless_loaded_without_its_cache(
        standin, tmp_path):
    """STAND-IN, NOT A GPU.  The LLVM 16 classic CUDA plugin makes its memory
    manager when it is loaded (``DeviceRTLTy`` constructor): a debug mode is
    refused with a ValueError unless the variable was 0 at load."""
    path = need_path(_CUDA16["classic"])
    code = _CUDA_CHILD.format(path=path, pool={"debug": "off-pool", "threshold": 8192})
    r, _ = _on_standin(standin, tmp_path, code)
    assert r.returncode == 1 and "ValueError" in r.stderr and "when it is loaded" in r.stderr
    r, log = _on_standin(standin, tmp_path, code, env={THRESHOLD_ENV: "0"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "POOL off-pool 0" in r.stdout


def test_bad_threshold_never_reaches_the_classic_cuda_plugins_stoul(standin, tmp_path):
    """STAND-IN, NOT A GPU.  The classic CUDA plugin parses the variable when it
    is loaded; with a driver present a bad value used to abort the process
    (std::stoul).  The runtime refuses it before loading any plugin."""
    path = need_path(_CUDA16["classic"])
    r, _ = _on_standin(standin, tmp_path, _CUDA_CHILD.format(path=path, pool={}),
                       env={THRESHOLD_ENV: "abc"})
    assert r.returncode == 1 and "terminate called" not in r.stderr
    assert f"ValueError: {THRESHOLD_ENV}='abc'" in r.stderr


def need_path(p):
    if not os.path.exists(p):
        pytest.skip(f"{p} not installed (libomp5-16)")
    return p


# -- the poison path in process (issue 17: the mutation run of _free_poisoned) ---------------

class ReusingBackend:
    """Device memory that hands a freed address out again (as a plugin's allocator does), so a
    second manager of the same memory sees whether the first one let go of an address."""

    def __init__(self):
        self.live, self.spare, self._next = {}, [], 0x100000

    def alloc(self, size):
        if self.spare:
            ptr = self.spare.pop()
        else:
            ptr, self._next = self._next, self._next + 0x10000
        self.live[ptr] = size
        return ptr

    def free(self, ptr):
        del self.live[ptr]
        self.spare.append(ptr)


def _events(mm, log, op="free"):
    import json
    mm.flush_event_log()
    return [(e["op"], e["size"], e["ptr"], e["hit"], e.get("reason"))
            for e in map(json.loads, log.getvalue().splitlines()) if e["op"] == op]


def _books(mm, bucket=128):
    s = mm.stats
    bs = s.per_bucket[bucket]
    return ((s.bytes_in_use, s.bytes_cached, s.bytes_total, s.live_blocks, s.cached_blocks),
            (bs.bytes_total, bs.live_blocks, bs.cached_blocks, bs.backend_frees))


def test_a_poisoned_free_caches_the_block_with_its_books_and_event():
    import io
    b, log = FakeBackend(), io.StringIO()
    mm = MemoryManager(b.alloc, b.free, debug="poison", poison=lambda p, n: None,
                       event_log=log, device_label="d0")
    p = mm.allocate(200)
    mm.free(p)
    assert _books(mm) == ((0, 200, 200, 0, 1), (200, 0, 1, 0))
    assert _events(mm, log) == [("free", 200, p, True, None)]
    assert mm.allocate(200) == p                    # the poisoned block is reused
    mm.drain()


def test_a_block_whose_poisoning_fails_goes_back_to_the_backend_with_its_books():
    """The poison call raises: the block is released through the backend (not cached), its
    bytes leave the books and its bucket, a ``free`` event says so, and the address is free
    for another manager of the same device memory."""
    import io
    be, log = ReusingBackend(), io.StringIO()

    def poison(ptr, size):
        raise OffloadError("data_submit failed", code=1)
    mm = MemoryManager(be.alloc, be.free, debug="poison", poison=poison, event_log=log,
                       backend_key="poison-fails")
    other = MemoryManager(be.alloc, be.free, debug="", backend_key="poison-fails")
    p = mm.allocate(200)
    with pytest.raises(OffloadError, match="data_submit"):
        mm.free(p)
    assert _books(mm) == ((0, 0, 0, 0, 0), (0, 0, 0, 1))
    assert be.live == {} and not mm.owns(p)
    assert _events(mm, log) == [("free", 200, p, False, None)]
    assert other.allocate(200) == p                 # not still claimed by mm
    other.drain()
    mm.drain()


def test_a_drain_while_a_block_is_poisoned_frees_it_through_the_backend():
    """``drain`` in another thread (here: from the poison callback) while a freed block is
    being poisoned: the block is no longer live, so the drain does not free it; the free then
    finds the manager closed and releases the block through the backend itself, once."""
    be = ReusingBackend()
    mm = None
    drained = []

    def poison(ptr, size):
        drained.append(mm.drain())
    mm = MemoryManager(be.alloc, be.free, debug="poison", poison=poison,
                       backend_key="poison-drained")
    other = MemoryManager(be.alloc, be.free, debug="", backend_key="poison-drained")
    p = mm.allocate(200)
    mm.free(p)
    assert drained == [(0, 0)]
    assert be.live == {} and be.spare == [p]
    assert _books(mm) == ((0, 0, 0, 0, 0), (0, 0, 0, 1))
    assert other.allocate(200) == p
    other.drain()


def test_a_poisoned_free_over_the_cache_limit_evicts_the_oldest_blocks_that_suffice():
    """The cap test of the poisoned free counts cached bytes only (not those in use), and
    asks the chooser for the excess alone: the oldest block that covers it goes."""
    b = FakeBackend()
    mm = MemoryManager(b.alloc, b.free, debug="poison", poison=lambda p, n: None,
                       cache_limit=128)
    x, y, z = mm.allocate(60), mm.allocate(64), mm.allocate(64)
    mm.free(x)                      # cached 60, in use 128: under the cap
    assert b.frees == 0 and mm.stats.cached_blocks == 1
    mm.free(y)                      # cached 124 <= 128, in use 64: still under the cap
    assert b.frees == 0 and mm.stats.bytes_cached == 124
    w = mm.allocate(8)
    mm.free(w)                      # cached 132 > 128: the oldest block that covers 4 bytes
    assert list(b.freed) == [x]
    assert mm.stats.bytes_cached == 72 and mm.stats.bytes_in_use == 64
    mm.free(z)                      # cached 136: x is gone, y (64) is now the oldest
    assert list(b.freed) == [x, y]
    mm.drain()


def test_a_poisoned_free_that_fills_the_cache_to_its_limit_evicts_nothing():
    b = FakeBackend()
    mm = MemoryManager(b.alloc, b.free, debug="poison", poison=lambda p, n: None,
                       cache_limit=64)
    mm.free(mm.allocate(64))
    assert b.frees == 0 and mm.stats.bytes_cached == 64
    mm.drain()


def test_a_poisoned_free_that_finds_the_manager_draining_is_logged_before_the_log_closes():
    """A drain in another thread closes the manager, then frees its blocks through the
    backend, then closes the event log.  A poisoned free that completes in between releases
    its block through the backend and logs it as a ``free`` (not a hit): the drain's close
    still writes it."""
    import io
    import threading
    b, log = FakeBackend(), io.StringIO()
    in_drain, go = threading.Event(), threading.Event()
    drainer = None

    def backend_free(ptr):
        if threading.current_thread() is drainer:
            in_drain.set()
            assert go.wait(60)
        b.free(ptr)

    def poison(ptr, size):
        drainer.start()
        assert in_drain.wait(60)            # the drain is closed and in its backend frees

    mm = MemoryManager(b.alloc, backend_free, debug="poison", poison=poison, event_log=log)
    drainer = threading.Thread(target=mm.drain)
    mm.allocate(64)                         # live at the drain: its backend free waits
    p = mm.allocate(200)
    try:
        mm.free(p)
    finally:
        go.set()
        drainer.join(60)
    assert b.live == {} and not drainer.is_alive()
    assert ("free", 200, p, False, None) in _events(mm, log)
