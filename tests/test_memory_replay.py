"""Event log format and replay (offload_shim.memory.replay and its CLI)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from offload_shim.errors import OutOfDeviceMemoryError
from offload_shim.memory import MemoryManager, replay
from offload_shim.memory._replay import main, read_events
from offload_shim.memory.fake import FakeBackend

ROOT = Path(__file__).resolve().parent.parent
OPS = {"config", "alloc", "free", "evict", "trim", "oom_retry"}


@pytest.fixture(autouse=True)
def _bundled_plugin_stays_clean():
    """Pure-Python tests: conftest's bundled-plugin check does not apply."""
    yield


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
    assert res["binned"].hits > ex.hits                  # sizes 100..102 share a class
    assert res["binned"].peak_bytes_total < ex.peak_bytes_total


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
        replay(lines, policies=("best-fit",))


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
