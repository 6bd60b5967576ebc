"""The ``record`` workload of ``offload-shim bench`` (``run --record`` against ``run``)
runs end to end on two of its programs and reports every figure; the traces it wrote
were complete and held one ``construct`` line per target region at least.  No timing
is asserted: the 1.5x goal lives only in the benchmark's output."""

from __future__ import annotations

import shutil

import pytest

from offload_shim.bench import record_overhead as rec

from conftest import NEXTGEN16, need


@pytest.fixture(scope="module")
def tiny():
    if not shutil.which("clang-16"):
        pytest.skip("clang-16 not installed")
    need(NEXTGEN16, "the LLVM 16 x86_64 nextgen plugin")
    return rec.run("tiny", only=["startup", "data-1"])


def test_rows_figures_and_traces(tiny):
    assert tiny["skipped"] is None and tiny["goal"] == rec.GOAL
    assert set(tiny["rows"]) == {"startup", "data-1"}
    for name, row in tiny["rows"].items():
        assert row["errors"] == [], row["errors"]      # same results, complete traces
        for mode in rec.MODES:
            assert set(row[mode]) == {"wall", "cpu"}
        assert "ratio" in row and "cpu_ratio" in row
    d1 = tiny["rows"]["data-1"]
    assert d1["trace_lines"] >= d1["counts"][1]           # a construct line per region
    table = rec.format_text(tiny)
    assert "run --record" in table and "data-1" in table
    # tiny's counts measure nothing (a slope over 80 regions came out negative): the
    # table says so first and gives no verdict
    assert table.startswith("**Profile `tiny` is a smoke test"), table
    assert all(line.rstrip().endswith("-") for line in table.splitlines()
               if line.startswith(("startup ", "data-1 "))), table
