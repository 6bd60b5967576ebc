"""The ``lifecycle`` workload of ``offload-shim bench`` (dlopen / region / dlclose cycles
and two threads' kernels, offload-shim run against the real libomptarget 16) runs end to
end in its ``tiny`` profile and prints its table; its overlap measure is exact on
constructed intervals.  No figure is asserted: the ratios live only in the benchmark's
output (docs/benchmarks.md)."""

from __future__ import annotations

import json
import shutil

import pytest

from offload_shim import bench
from offload_shim.bench import lifecycle as lc

from conftest import NEXTGEN16, need

ROW_KEYS = ("rss_kib", "wall_us", "cpu_us", "maps", "overlap")


@pytest.fixture(scope="module")
def tiny():
    if not shutil.which("clang-16"):
        pytest.skip("clang-16 not installed")
    need(NEXTGEN16, "the LLVM 16 x86_64 nextgen plugin")
    return lc.run("tiny")


def test_rows_and_fields(tiny):
    assert tiny["skipped"] is None
    assert tuple(tiny["rows"]) == ROW_KEYS
    for key, row in tiny["rows"].items():
        assert {"libomptarget", "offload-shim", "ratio", "ratio_spread", "what",
                "unit"} <= set(row), key
        for rt in ("libomptarget", "offload-shim"):
            assert len(row[rt]["values"]) == lc.PROFILES["tiny"]["repeats"], (key, rt)
            assert set(row[rt]) == {"median", "spread", "values"}
    for rt in ("libomptarget", "offload-shim"):
        assert tiny["process"][rt]["host_wall_s"] > 0
    json.dumps(tiny)


def test_every_region_offloaded_under_both_runtimes(tiny):
    # the host counts the regions that ran on a device; the overlap program too, with
    # its two threads: a run that fell back to the host would be an error here
    assert tiny["errors"] == [], tiny["errors"]
    for rt in ("libomptarget", "offload-shim"):
        share = tiny["rows"]["overlap"][rt]["median"]
        assert share is not None and 0.0 <= share <= 1.0


def test_tiny_judges_no_target(tiny):
    assert [t["row"] for t in tiny["targets"]] == [t[0] for t in lc.TARGETS]
    assert {t["status"] for t in tiny["targets"]} == {"N/A"}


def test_the_table_is_printed(tiny, monkeypatch, capsys):
    monkeypatch.setattr(lc, "run", lambda profile, **kw: tiny)
    assert bench.main(["--workloads", "lifecycle", "--profile", "tiny", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("## lifecycle")
    for key in ROW_KEYS:
        assert lc.ROWS[key][0] in text, key
    assert "libomptarget 16" in text and "offload-shim run" in text and "Targets" in text


def test_docs_block_is_replaced(tiny, tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nintro\n")
    lc.update_docs(tiny, doc)
    lc.update_docs(tiny, doc)
    text = doc.read_text()
    assert text.count(lc.BEGIN_MARK) == 1 and text.count(lc.END_MARK) == 1
    assert text.startswith("# Benchmarks\n\nintro\n")


def test_overlap_share_on_constructed_intervals():
    share = lc.overlap_share
    assert share([(0, 10)], [(0, 10)]) == 1.0
    assert share([(0, 10)], [(10, 20)]) == 0.0                  # back to back: never both
    assert share([(0, 10), (20, 30)], [(15, 18)]) == 0.0
    assert share([(0, 10)], [(5, 15)]) == pytest.approx(5 / 15)
    assert share([(0, 10), (10, 20)], [(0, 20)]) == 1.0          # one thread's gapless pair
    assert share([(0, 4), (6, 10)], [(0, 10)]) == pytest.approx(8 / 10)
    assert share([], [(0, 10)]) == 0.0
    assert share([(3, 3)], [(3, 3)]) is None                     # no kernel took any time
    with pytest.raises(ValueError):
        share([(5, 1)], [])


def test_host_and_overlap_output_are_read():
    host = ("on_device 12\ncycles 12\nmeasured 8\nwall_ns 8000000\ncpu_ns 4000000\n"
            "rss_bytes 1048576 1056768\nmaps 100 140\n")
    f = lc.parse_host(host)
    assert f == {"rss_kib": 1.0, "wall_us": 1000.0, "cpu_us": 500.0, "maps": 5.0,
                 "on_device": 12, "cycles": 12}
    ov = lc.parse_overlap("threads 2\non_device 4\nkernels0 0 10 20 30\nkernels1 5 15 25 35\n")
    assert ov == {"overlap": pytest.approx(10 / 30), "threads": 2, "on_device": 4,
                  "regions": 4}
    with pytest.raises(KeyError):
        lc.parse_host("on_device 1\n")
    with pytest.raises(ValueError):
        lc.parse_host(host.replace("measured 8", "measured 0"))


def test_cli_accepts_the_lifecycle_workload(monkeypatch, capsys):
    seen = {}

    def fake_run(profile, **kw):
        seen["profile"] = profile
        return {"meta": {"machine": {"cpu": "x", "cores": 1, "python": "3", "date": "d"},
                         "profile": profile, "repeats": 1, "plugin": "p", "cycles": 1,
                         "warmup": 0, "regions": 1, "spin_us": 1},
                "rows": {}, "targets": [], "errors": [], "skipped": "nothing to run here"}
    monkeypatch.setattr(lc, "run", fake_run)
    assert bench.main(["--workloads", "lifecycle", "--profile", "tiny", "--no-progress"]) == 0
    assert seen["profile"] == "tiny"
    assert "nothing to run here" in capsys.readouterr().out
