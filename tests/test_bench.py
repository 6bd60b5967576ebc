"""The benchmark harness (issue 5) runs end to end with tiny counts and its
JSON has the expected shape.  No timing is asserted here: speed targets live
only in the benchmark's output (docs/benchmarks.md)."""

from __future__ import annotations

import json

import pytest

from offload_shim import bench
from offload_shim.cli import main as cli_main

ROW_KEYS = {"pairs", "median_ns", "p99_ns", "mean_ns", "throughput_per_s", "hit_rate",
            "peak_cached_bytes", "speedup", "speedup_over"}


@pytest.fixture(scope="module")
def tiny():
    # no child process and no GPU probing: fast, and the bundled plugin ends clean
    return bench.run("tiny", gpu=False, child=False, progress=False)


def test_result_has_every_section(tiny):
    assert set(tiny) >= {"meta", "rows", "skipped", "results", "stats_overhead", "targets",
                         "replay"}
    assert set(tiny["meta"]["machine"]) >= {"cpu", "cores", "python", "date"}
    assert set(tiny["results"]) == set(bench.WORKLOADS)
    json.dumps(tiny)                                   # JSON-ready


def test_pool_and_direct_rows_have_every_figure(tiny):
    hot = tiny["results"]["hot"]
    for name in ("pool:exact", "pool:binned", "pool:exact,stats=off", "device:exact",
                 "device:binned", "direct:bundled", "direct:bundled+lat", "pool:exact+lat",
                 "device:exact+lat"):
        assert ROW_KEYS <= set(hot[name]), name
        assert hot[name]["pairs"] > 0
    assert hot["pool:exact"]["hit_rate"] is not None
    assert hot["pool:exact"]["speedup_over"] == "direct:bundled"
    for name in ("direct:ol", "device:exact/ol"):           # the liboffload (ol*) rows
        assert ROW_KEYS <= set(hot[name]) and hot[name]["pairs"] > 0, name
    assert hot["device:exact/ol"]["speedup_over"] == "direct:ol"
    for w in ("llvm-mm", "random", "replay"):
        assert ROW_KEYS <= set(tiny["results"][w]["pool:exact"]), w


def test_growth_points_and_targets(tiny):
    g = tiny["results"]["growth"]["pool:exact"]
    assert set(g["points"]) == set(bench.PROFILES["tiny"]["growth_points"])
    assert "flatness" in g
    statuses = {t["status"] for t in tiny["targets"]}
    assert statuses <= {"PASS", "MISS", "N/A"}
    assert len(tiny["targets"]) == 8
    assert set(tiny["stats_overhead"]) == {"stats_on_ns", "stats_off_ns", "overhead"}


def test_markdown_and_outputs(tiny, tmp_path):
    md = bench.format_markdown(tiny)
    assert "### Targets" in md and "pool:exact" in md
    paths = bench.write_outputs(tiny, tmp_path)
    assert json.loads(paths["json"].read_text())["meta"]["profile"] == "tiny"
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# B\n\nintro\n\n{bench.BEGIN_MARK}\nold\n{bench.END_MARK}\n\nafter\n")
    bench.update_docs(tiny, doc)
    text = doc.read_text()
    assert "old" not in text and "intro" in text and "after" in text and "### Targets" in text


def test_gpu_rows_skip_with_a_reason_without_a_driver():
    backends, skipped = bench.gpu_backends()
    try:
        if not backends:
            assert skipped and all(isinstance(v, str) and v for v in skipped.values())
    finally:
        for b in reversed(backends):
            b.close()


def test_cli_json_and_the_child_process(capsys):
    rc = cli_main(["bench", "--profile", "tiny", "--json", "--no-gpu", "--no-progress",
                   "--workloads", "hot,replay", "--only", "pool:exact", "--only", "nextgen"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["results"]) == {"hot", "replay"}
    hot = out["results"]["hot"]
    assert "pool:exact" in hot
    if "llvm16-nextgen" not in out["skipped"]:
        assert "llvm16-nextgen" in hot
    if "llvm16-nextgen,pool=off" not in out["skipped"]:
        assert ROW_KEYS <= set(hot["llvm16-nextgen,pool=off"])
