"""The ``run`` workload of ``offload-shim bench`` (offload-shim run against the real
libomptarget 16) runs end to end on two of its programs and reports every figure.
No timing is asserted: the targets live only in the benchmark's output."""

from __future__ import annotations

import json
import os
import random
import shutil
import string
import subprocess
import time
from pathlib import Path

import pytest

from offload_shim import bench
from offload_shim.bench import run_overhead as ro
from offload_shim.safety import leftovers

from conftest import NEXTGEN16, need

RT_SLOPE_KEYS = {"wall_us", "wall_us_spread", "cpu_us", "cpu_us_spread", "loop_us",
                 "startup_wall_s"}
RT_WHOLE_KEYS = {"wall_s", "wall_s_spread", "cpu_s", "cpu_s_spread", "loop_s"}


_LEFT: dict = {}        # what the `tiny` run left in /tmp


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    if not shutil.which("clang-16"):
        pytest.skip("clang-16 not installed")
    need(NEXTGEN16, "the LLVM 16 x86_64 nextgen plugin")
    work = tmp_path_factory.mktemp("bench-run")      # the programs stay there
    before = leftovers.copy_dir_names()
    out = ro.run("tiny", only=["startup", "data-1", "nowait", "threads-8"], workdir=work)
    new = leftovers.copies_since(before)
    # what the run left: image copies that appeared meanwhile and hold the image of one
    # of its programs -- other processes on the machine leave copies in /tmp all the
    # time (a busy machine: dozens a minute), none of them of these programs
    _LEFT["copies"] = _copies_of(new, [p for p in work.iterdir() if p.suffix != ".c"])
    return out


def _copies_of(paths, exes) -> list[str]:
    """Those of ``paths`` whose bytes are the image of one of ``exes`` (the x86_64
    plugins write the image out as it is embedded in the program)."""
    blobs = [e.read_bytes() for e in exes]
    out = []
    for p in sorted(paths):
        try:
            data = Path(p).read_bytes()
        except OSError:             # removed meanwhile
            continue
        if data and any(data in b for b in blobs):
            out.append(p)
    return out


def test_rows_and_fields(tiny):
    assert tiny["skipped"] is None
    assert set(tiny["rows"]) == {"startup", "data-1", "nowait", "threads-8"}
    d1 = tiny["rows"]["data-1"]
    assert len(d1["counts"]) == 2 and d1["counts"][0] < d1["counts"][1]
    for rt in ro.RUNTIMES:
        assert RT_SLOPE_KEYS <= set(d1[rt]), rt
        assert RT_WHOLE_KEYS <= set(tiny["rows"]["startup"][rt]), rt
        assert tiny["rows"]["startup"][rt]["wall_s"] > 0
    assert {"ratio", "ratio_spread", "cpu_ratio", "loop_ratio", "same_result",
            "errors", "ratio_range", "cpu_ratio_range", "floor_us", "floor_ratio"} <= set(d1)
    # issue 29: per row min / median / max over the repetitions, the load of the run,
    # and the floor (crossing + the plugin calls the construct needs) beside it
    for name, row in tiny["rows"].items():
        lo, med, hi = row["ratio_range"]
        assert lo is None or lo <= med <= hi, name
    lpr = tiny["meta"]["loadavg_per_repetition"]
    assert lpr is None or lpr[0] <= lpr[1] <= lpr[2]
    fl = tiny["floor"]
    assert fl["call_us"] > 0 and fl["crossing_us"] >= 0
    assert d1["floor_us"] == pytest.approx(fl["crossing_us"] + fl["call_us"])
    assert tiny["rows"]["startup"].get("floor_us") is None       # a whole-process row
    json.dumps(tiny)


def test_both_runtimes_print_the_same_result(tiny):
    # the programs print what their regions computed: the offload-shim run must agree
    for name, row in tiny["rows"].items():
        assert row["same_result"], (name, row["errors"])
        assert not row["errors"], (name, row["errors"])


def test_reference_runs_leave_no_image_copies(tiny):
    # libomptarget 16's x86_64 nextgen plugin leaves a /tmp/tmpfile_* copy of the image
    # per run and never removes it: the benchmark removes those of its reference runs
    # between repetitions (run_overhead.remove_copies_since)
    assert _LEFT["copies"] == []


@pytest.mark.parametrize("stop", [subprocess.TimeoutExpired("prog", 600), KeyboardInterrupt()])
def test_a_repetition_cut_short_removes_its_copies(monkeypatch, stop):
    # a reference run timing out, or Ctrl-C, ends the repetition early: the copies its
    # runs left are removed all the same (they were left in /tmp before)
    made = []

    def run_once(cmd, env, timeout=600.0):
        if made:
            raise stop
        # what libomptarget 16's nextgen plugin leaves: /tmp/tmpfile_XXXXXX, closed
        name = "tmpfile_" + "".join(random.choices(string.ascii_letters, k=6))
        path = os.path.join(leftovers.COPY_DIR, name)
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        os.utime(path, (time.time() - 60,) * 2)     # written a while ago: no settling
        made.append(path)
        return {"wall_s": 0.0, "cpu_s": 0.0, "rc": 0, "result": "", "loop_s": None,
                "stderr": ""}
    monkeypatch.setattr(ro, "run_once", run_once)
    row = ro.Row("startup", (0,), "process", "no target region")
    try:
        with pytest.raises(type(stop)):
            ro.measure({"startup": "/bin/true"}, [row], 2, "plugin.so", shim=["shim"])
        assert made and not os.path.lexists(made[0])
    finally:
        for p in made:
            if os.path.lexists(p):
                os.unlink(p)


def test_targets_and_tables(tiny):
    statuses = {t["row"]: t["status"] for t in tiny["targets"]}
    assert set(statuses) == {"startup", "data-1", "maps-1", "maps-4", "maps-16",
                             "enter-exit", "update", "nowait", "threads-8", "copy-64M"}
    # tiny is a smoke profile: no target judged (start-up was PASS/MISS on it), and the
    # tables say so (docs/benchmarks.md "Profiles")
    assert set(statuses.values()) == {"N/A"}, statuses
    md = ro.format_markdown(tiny)
    assert "is a smoke test of the harness" in md and "| - | N/A |" in md
    assert "`data-1`" in md and "`startup`" in md and "Targets" in md
    assert "min / median / max" in md and "Floor" in md and "`threads-8`" in md


def test_docs_block_is_replaced(tiny, tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nintro\n")
    ro.update_docs(tiny, doc)
    ro.update_docs(tiny, doc)
    text = doc.read_text()
    assert text.count(ro.BEGIN_MARK) == 1 and text.count(ro.END_MARK) == 1
    assert text.startswith("# Benchmarks\n\nintro\n")


def test_programs_are_distinct_per_map_count():
    srcs = {k: ro.source(f"maps-{k}") for k in (1, 4, 16, 64)}
    for k, src in srcs.items():
        assert src.count("a%d += " % (k - 1)) == 1
        assert f"a{k} " not in src
    assert {r.name for r in ro.rows_for("quick")} >= {
        "startup", "data-1", "maps-1", "maps-4", "maps-16", "maps-64", "enter-exit",
        "update", "nowait", "threads-8", "copy-64M"}
    for r in ro.rows_for("tiny"):                      # every slope has two counts
        assert not r.slope or r.counts[0] < r.counts[1], r.name


def test_cli_accepts_the_run_workload(monkeypatch, capsys):
    seen = {}

    def fake_run(profile, **kw):
        seen["profile"] = profile
        return {"meta": {"machine": {"cpu": "x", "cores": 1, "python": "3", "date": "d"},
                         "profile": profile, "repeats": 1, "plugin": "p"},
                "rows": {}, "targets": [], "skipped": "nothing to run here"}
    monkeypatch.setattr(ro, "run", fake_run)
    assert bench.main(["--workloads", "run", "--profile", "tiny", "--no-progress"]) == 0
    assert seen["profile"] == "tiny"
    assert "nothing to run here" in capsys.readouterr().out


def test_noise_is_no_ratio():
    # a slope at or below zero (noise at tiny counts) gives no ratio, and no verdict
    assert ro._ratio(-3.0, 1.0) is None and ro._ratio(3.0, 0.0) is None
    assert ro._ratio(3.0, 1.5) == 2.0
    rows = {"maps-16": {"ratio": None, "offload-shim": {}, "errors": []},
            "data-1": {"ratio": 12.0, "offload-shim": {}, "errors": []}}
    st = {t["row"]: t["status"] for t in ro.check_targets(rows)}
    assert st["maps-16"] == "N/A" and st["data-1"] == "MISS"
    assert {t["status"] for t in ro.check_targets(rows, smoke=True)} == {"N/A"}


def test_a_cost_below_the_noise_is_judged_on_an_upper_bound():
    # offload-shim's slope at or below zero (its cost below what the counts resolve,
    # an update repeated in C): the row's ratio_bound (its own loop time per iteration
    # over libomptarget's slope) decides, shown as "at most"
    rows = {"update": {"ratio": None, "ratio_bound": 0.08, "offload-shim": {},
                       "errors": []},
            "nowait": {"ratio": None, "ratio_bound": 4.0, "offload-shim": {},
                       "errors": []},
            "maps-1": {"ratio": None, "offload-shim": {}, "errors": []}}
    got = {t["row"]: t for t in ro.check_targets(rows)}
    assert (got["update"]["status"], got["update"]["bound"]) == ("PASS", True)
    assert (got["nowait"]["status"], got["nowait"]["bound"]) == ("MISS", True)
    assert (got["maps-1"]["status"], got["maps-1"]["bound"]) == ("N/A", False)
    assert {t["status"] for t in ro.check_targets(rows, smoke=True)} == {"N/A"}
