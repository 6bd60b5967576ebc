"""Regression tests of the memory manager fixes (tester findings 1-4):
drain logs the live blocks it frees and replay understands them; replay
rejects malformed events; sizes/options/pointers beyond 64 bits are refused;
a failing backend free leaves the block live."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

import offload_shim as osh
from offload_shim.errors import LifecycleError, OffloadError, UnknownPointerError
from offload_shim.memory import MemoryManager, replay
from offload_shim.memory._replay import main
from offload_shim.memory.fake import FakeBackend
from offload_shim.memory.manager import MAX_SIZE, THRESHOLD_ENV, read_threshold_env

from helpers import assert_conserved, make_pool


make = make_pool


class FailOnce:
    """A backend_free that raises on the first call for the chosen pointers."""

    def __init__(self, backend, fail=None):
        self.b = backend
        self.fail = fail            # None: the first call whatever the pointer
        self.failed = []

    def __call__(self, ptr):
        if (self.fail is None and not self.failed) or (self.fail is not None
                                                       and ptr in self.fail
                                                       and ptr not in self.failed):
            self.failed.append(ptr)
            raise OffloadError("data_delete failed", code=1, function="__tgt_rtl_data_delete")
        self.b.free(ptr)


# -- finding 1: drain of live blocks is logged; replay reads it -------------------------

def test_drain_logs_live_blocks_and_replay_reads_reused_addresses(tmp_path):
    log = tmp_path / "ev.jsonl"
    for r in range(3):
        # a backend that hands out the same addresses again (like a real plugin)
        b = FakeBackend(base=0x10000)
        mm = MemoryManager(b.alloc, b.free, event_log=str(log), debug="", device_label="d0")
        ps = [mm.allocate(100) for _ in range(5)]
        mm.free(ps[0])
        assert mm.drain() == (4, 400)
    events = [json.loads(x) for x in log.read_text().splitlines()]
    drained = [e for e in events if e["op"] == "free" and e.get("reason") == "drain"]
    assert len(drained) == 12 and all(e["hit"] is False and e["size"] == 100 for e in drained)
    assert len([e for e in events if e["op"] == "trim"]) == 3
    res = replay(log)
    assert res["exact"].hits + res["exact"].misses == 15
    # the 12 drained blocks were leaked by the caller: they stay in use in the replay
    assert res["exact"].live_blocks == 12 and res["exact"].bytes_in_use == 1200
    assert main([str(log)]) == 0


def test_runtime_deinit_with_live_blocks_replays(tmp_path):
    log = tmp_path / "ev.log"
    rt = osh.Runtime(bundled=True, pool={"event_log": str(log)})
    try:
        dev = rt.devices[0]
        for _ in range(3):
            ps = [dev.alloc(100) for _ in range(5)]
            dev.free(ps[0])
            dev.deinit()
    finally:
        rt.close()
    proc = subprocess.run([sys.executable, "-m", "offload_shim.memory.replay", str(log)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "hit_rate" in proc.stdout


@pytest.mark.parametrize("line, what", [
    ('{"op":"alloc"}', "without 'size'"),
    ('{"op":"alloc","size":8}', "without 'ptr'"),
    ('{"op":"alloc","size":"8","ptr":16}', "size='8'"),
    ('{"op":"alloc","size":8.0,"ptr":16}', "size=8.0"),
    ('{"op":"alloc","size":true,"ptr":16}', "size=True"),
    ('{"op":"alloc","size":-1,"ptr":16}', "size=-1"),
    ('{"op":"alloc","size":18446744073709551632,"ptr":16}', "size="),
    ('{"op":"alloc","size":8,"ptr":-16}', "ptr=-16"),
    ('{"op":"free"}', "without 'ptr'"),
    ('{"op":"free","ptr":null}', "ptr=None"),
    ('{"op":"frobnicate","size":8,"ptr":16}', "unknown op 'frobnicate'"),
    ('{"size":8,"ptr":16}', "not an event object"),
    ('{"op":"alloc","size":8,"ptr":16,"dev":3}', "'dev' must be a string"),
    ('{"op":"config","threshold":"big"}', "threshold='big'"),
])
def test_replay_rejects_malformed_events(tmp_path, capsys, line, what):
    lines = ['{"op":"config","threshold":8192}', line]
    with pytest.raises(ValueError, match="event 2|line 2") as ei:
        replay(lines)
    assert what in str(ei.value)
    log = tmp_path / "bad.jsonl"
    log.write_text("\n".join(lines) + "\n")
    assert main([str(log)]) == 2
    assert "replay:" in capsys.readouterr().err


def test_free_failed_event_is_replayed():
    buf = io.StringIO()
    b = FakeBackend()
    bf = FailOnce(b)
    mm = MemoryManager(b.alloc, bf, event_log=buf, threshold=64, debug="", device_label="d")
    p = mm.allocate(1000)                           # bypass: freed straight to the backend
    with pytest.raises(OffloadError):
        mm.free(p)
    mm.free(p)                                      # the retry works
    mm.drain()
    ops = [json.loads(x)["op"] for x in buf.getvalue().splitlines()]
    assert ops == ["config", "alloc", "free", "free_failed", "free"]
    res = replay(io.StringIO(buf.getvalue()), policies=("exact",))
    assert res["exact"].live_blocks == 0 and res["exact"].backend_frees == 2


# -- finding 2: sizes and options beyond int64 --------------------------------------------

@pytest.mark.parametrize("size", [2**64 + 16, 2**64, 2**63, MAX_SIZE + 1])
@pytest.mark.parametrize("policy", ["exact", "binned"])
def test_allocate_refuses_sizes_beyond_int64(size, policy):
    b, mm = make(policy=policy)
    with pytest.raises(ValueError, match="int64"):
        mm.allocate(size)
    assert b.alloc_calls == 0 and mm.stats.live_blocks == 0 and mm.stats.misses == 0
    assert mm.live_allocations() == []


def test_threshold_and_cache_limit_must_fit(monkeypatch):
    for kw in ({"threshold": 2**63}, {"threshold": 2**64 + 16}, {"cache_limit": 2**63}):
        with pytest.raises(ValueError, match="at most"):
            make(**kw)
    _, mm = make(threshold=MAX_SIZE, cache_limit=MAX_SIZE)
    assert mm.threshold == MAX_SIZE and mm.cache_limit == MAX_SIZE
    monkeypatch.setenv(THRESHOLD_ENV, str(2**64 + 16))
    with pytest.raises(ValueError, match=THRESHOLD_ENV):
        read_threshold_env()
    monkeypatch.setenv(THRESHOLD_ENV, str(MAX_SIZE))
    assert read_threshold_env() == MAX_SIZE


def test_binned_size_class_never_passes_int64():
    seen = []

    def alloc(size):
        seen.append(size)
        return 0x1000
    mm = MemoryManager(alloc, lambda p: None, threshold=MAX_SIZE, policy="binned", debug="")
    big = (1 << 63) - 1                              # its class (2**63) would not fit
    assert mm.allocate(big) == 0x1000 and seen == [big]
    assert mm.block_size_of(0x1000) == big


# -- finding 3: non-strict free of a pointer that is not a 64-bit address ----------------

@pytest.mark.parametrize("ptr", [-5, -1, 2**64, 2**64 + 16])
def test_free_refuses_pointers_outside_64_bits(ptr):
    b, mm = make()
    with pytest.raises(ValueError, match="64-bit"):
        mm.free(ptr)
    with pytest.raises(UnknownPointerError):
        mm.free(ptr, strict=True)
    assert b.errors == [] and mm.stats.foreign_frees == 0


# -- finding 4: a failing backend free keeps the block live -------------------------------

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
