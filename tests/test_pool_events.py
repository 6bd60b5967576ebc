"""The event log and its replay (``offload_shim.memory.replay`` and its
CLI): the format, what drain logs, malformed logs.

Source: docs/memory-manager.md "Event log and replay" (RMM's logging adaptor
and replay benchmark, docs/references.md, pools compared).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

import offload_shim as osh
from offload_shim.errors import OffloadError, OutOfDeviceMemoryError
from offload_shim.memory import MemoryManager, replay
from offload_shim.memory._replay import main, read_events
from offload_shim.memory.fake import FakeBackend

from helpers import FailOnce

ROOT = Path(__file__).resolve().parent.parent
OPS = {"config", "alloc", "free", "evict", "trim", "oom_retry"}


def workload(mm):
    """Sizes that differ slightly each round: exact misses, binned hits."""
    for r in range(20):
        ps = [mm.allocate(s + r % 3) for s in (100, 1000, 5000, 20000)]
        for p in ps:
            mm.free(p)
    keep = mm.allocate(64)
    return keep


def test_event_log_format(tmp_path):
    log = tmp_path / "ev.jsonl"
    b = FakeBackend(capacity=40000)
    mm = MemoryManager(b.alloc, b.free, event_log=log, cache_limit=8000, device_label="d0",
                       debug="")
    workload(mm)
    mm.trim()
    with pytest.raises(OutOfDeviceMemoryError):
        mm.allocate(50000)
    mm.drain()
    events = [json.loads(x) for x in log.read_text().splitlines()]
    assert events[0]["op"] == "config" and events[0]["threshold"] == 8192
    assert {e["op"] for e in events} <= OPS
    assert {"alloc", "free", "evict", "trim", "oom_retry"} <= {e["op"] for e in events}
    for e in events[1:]:
        assert {"op", "size", "ptr", "hit", "t_ns"} <= set(e)
        assert isinstance(e["hit"], bool) and e["dev"] == "d0"
    ts = [e["t_ns"] for e in events]
    assert ts == sorted(ts)
    allocs = [e for e in events if e["op"] == "alloc"]
    assert sum(e["hit"] for e in allocs) == mm.stats.hits
    assert len(allocs) == mm.stats.hits + mm.stats.misses


def test_replay_round_trip(tmp_path):
    log = tmp_path / "ev.jsonl"
    b = FakeBackend()
    mm = MemoryManager(b.alloc, b.free, event_log=str(log), debug="")
    workload(mm)
    original = mm.stats
    mm.drain()
    res = replay(log)
    assert set(res) == {"exact", "binned"}
    ex = res["exact"]
    for k in ("hits", "misses", "bytes_in_use", "bytes_cached", "peak_bytes_total",
              "backend_allocs", "live_blocks", "cached_blocks"):
        assert getattr(ex, k) == getattr(original, k), k
    assert res["binned"].hits == ex.hits                 # rising sizes: no block holds the next
    # falling sizes of one class: binned reuses the larger blocks, exact cannot
    log2 = tmp_path / "ev2.jsonl"
    mm = MemoryManager(b.alloc, b.free, event_log=str(log2), debug="")
    for r in range(20):
        ps = [mm.allocate(s + 2 - r % 3) for s in (100, 1000, 5000, 20000)]
        for p in ps:
            mm.free(p)
    mm.drain()
    res = replay(log2)
    assert res["binned"].hits > res["exact"].hits
    assert res["binned"].peak_bytes_total < res["exact"].peak_bytes_total


def test_replay_from_file_object_and_options():
    buf = io.StringIO()
    b = FakeBackend()
    mm = MemoryManager(b.alloc, b.free, event_log=buf, threshold=4096, debug="")
    workload(mm)
    mm.drain()
    assert not buf.closed                                # caller's stream: flushed, not closed
    lines = buf.getvalue().splitlines()
    res = replay(io.StringIO(buf.getvalue()), policies=("exact",))
    assert list(res) == ["exact"] and res["exact"].hits == mm.stats.hits == 34
    assert replay(lines, policies=("exact",), threshold=0)["exact"].hits == 0
    capped = replay(lines, policies=("binned",), cache_limit=0)["binned"]
    assert capped.bytes_cached == 0 and capped.hits == 0
    with pytest.raises(ValueError):
        replay(lines, policies=("first-fit",))      # no such policy


def test_replay_rejects_malformed_logs():
    with pytest.raises(ValueError, match="line 2"):
        replay(['{"op": "config", "threshold": 8192}', "not json"])
    with pytest.raises(ValueError, match="still live"):
        replay(['{"op":"alloc","size":8,"ptr":16,"hit":false}',
                '{"op":"alloc","size":8,"ptr":16,"hit":false}'])
    assert list(read_events(["", '{"op":"free","ptr":1}', "  "])) == [{"op": "free", "ptr": 1}]


def test_replay_cli(tmp_path, capsys):
    log = tmp_path / "ev.jsonl"
    b = FakeBackend()
    mm = MemoryManager(b.alloc, b.free, event_log=log, debug="")
    workload(mm)
    mm.drain()
    assert main([str(log)]) == 0
    out = capsys.readouterr().out
    assert "exact" in out and "binned" in out and "peak_bytes_total" in out
    assert main([str(log), "--json", "--policy", "binned"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert list(d) == ["binned"] and d["binned"]["hits"] > 0
    assert main([str(tmp_path / "missing.jsonl")]) == 2
    proc = subprocess.run([sys.executable, "-m", "offload_shim.memory.replay", str(log)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""                              # no runpy warning
    assert "hit_rate" in proc.stdout


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


def test_hits_with_an_event_log_take_no_block_from_the_backend():
    buf = io.StringIO()
    b = FakeBackend()
    mm = MemoryManager(b.alloc, b.free, event_log=buf, debug="")
    for _ in range(10):
        mm.free(mm.allocate(100))                     # one miss, then hits
    mm.flush_event_log()
    allocs = [json.loads(x) for x in buf.getvalue().splitlines() if '"alloc"' in x]
    assert b.alloc_calls == 1 and len(b.live) == 1
    assert [e["hit"] for e in allocs] == [False] + [True] * 9
    assert mm.stats.hits == 9 and mm.stats.misses == 1
    mm.drain()


def test_flush_event_log_writes_pending_events_through_to_the_file(tmp_path):
    """Events are buffered; ``flush_event_log`` writes them and flushes the file, so another
    reader sees them before the manager is drained.  Without a log it is a no-op."""
    from helpers import assert_unlocked, make_pool
    log = tmp_path / "ev.jsonl"
    b, mm = make_pool(event_log=log)
    p = mm.allocate(64)
    mm.flush_event_log()
    evs = [json.loads(x) for x in log.read_text().splitlines()]
    assert [e["op"] for e in evs] == ["config", "alloc"]
    assert (evs[0]["policy"], evs[0]["oom"]) == ("exact", "free-all")
    assert_unlocked(mm)                 # also the log's lock
    mm.free(p)
    mm.drain()
    make_pool()[1].flush_event_log()


def _events(buf):
    """The log's events without their time stamps."""
    out = []
    for x in buf.getvalue().splitlines():
        ev = json.loads(x)
        ev.pop("t_ns", None)
        out.append(ev)
    return out


def _batched_and_parked(mm, sizes, rounds):
    """A region run in a loop, as the cheap path does it: allocate_many, then the
    frees parked (last one first) and reclaimed by the next round; False if the pool
    refused to park."""
    ptrs = mm.allocate_many(sizes)
    parked = True
    for _ in range(rounds):
        parcel = mm.park(ptrs[::-1])
        parked = parked and parcel is not None
        if parcel is None:
            mm.free_many(ptrs[::-1])
            ptrs = mm.allocate_many(sizes)
            continue
        assert mm.reclaim(parcel, sizes) is True
        # the lease's reordering (DeviceLease.reclaim): per size, the first parked first
        ptrs = _fifo(ptrs, sizes)
    mm.free_many(ptrs[::-1])
    return parked


def _fifo(ptrs, sizes):
    """The pointers allocate_many(sizes) returns after free_many(ptrs[::-1]) (exact
    policy: per size, the least recently freed first)."""
    queues = {}
    for p, z in zip(ptrs[::-1], sizes[::-1]):
        queues.setdefault(z, []).append(p)
    return [queues[z].pop(0) for z in sizes]


def _one_by_one(mm, sizes, rounds):
    ptrs = [mm.allocate(z) for z in sizes]
    for _ in range(rounds):
        for p in ptrs[::-1]:
            mm.free(p)
        ptrs = [mm.allocate(z) for z in sizes]
    for p in ptrs[::-1]:
        mm.free(p)


@pytest.mark.parametrize("sizes", [[64], [64, 64, 32], [16, 32, 16, 48, 32, 16]])
def test_batched_hits_and_parked_frees_log_what_one_by_one_calls_log(sizes):
    """With an event log the pool keeps its batched hits (allocate_many), batched
    frees (free_many) and parked frees (park / reclaim), and logs each allocation
    and free of them: the same events, in the same order, with the same blocks, as
    allocate / free one at a time (docs/trace-format.md, "What recording changes")."""
    a, b = io.StringIO(), io.StringIO()
    fa, fb = FakeBackend(), FakeBackend()
    ma = MemoryManager(fa.alloc, fa.free, event_log=a, debug="", device_label="fake:0")
    mb = MemoryManager(fb.alloc, fb.free, event_log=b, debug="", device_label="fake:0")
    assert _batched_and_parked(ma, sizes, 4) is True
    _one_by_one(mb, sizes, 4)
    ma.flush_event_log()
    mb.flush_event_log()
    ea, eb = _events(a), _events(b)
    assert len(ea) == 1 + 2 * 5 * len(sizes)
    assert ea == eb
    assert ma.stats.hits == mb.stats.hits == 4 * len(sizes)
    ma.drain()
    mb.drain()
