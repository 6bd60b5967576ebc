"""The benchmark harness runs end to end with tiny counts, its JSON has the
expected shape, its rows are what their labels say, a failing row is
reported instead of ending the run, and the command refuses bad options and
stops cleanly on Ctrl-C / SIGTERM.  No timing is asserted here: speed
targets live only in the benchmark's output (docs/benchmarks.md)."""

from __future__ import annotations

import enum
import json
import os
import signal
import subprocess
import sys
import threading
import types

import pytest

from offload_shim import bench
from offload_shim.bench import workloads as wl
from offload_shim.bench.backends import THRESHOLD_ENV, Backend
from offload_shim.bench.gpu import CudaError
from offload_shim.bench.timing import Progress
from offload_shim.cli import main as cli_main
from offload_shim.errors import OutOfDeviceMemoryError

ROW_KEYS = {"pairs", "median_ns", "p99_ns", "mean_ns", "throughput_per_s", "hit_rate",
            "peak_cached_bytes", "speedup", "median_ratio", "speedup_over"}


@pytest.fixture(scope="module")
def tiny():
    # no GPU probing: fast, and the bundled plugin ends clean
    return bench.run("tiny", gpu=False, progress=False)


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
                 "device:exact+lat", "floor:ctypes-nop"):
        assert ROW_KEYS <= set(hot[name]), name
        assert hot[name]["pairs"] == (bench.PROFILES["tiny"]["hot_rounds"]
                                      * bench.PROFILES["tiny"]["hot_pairs"]), name
    assert hot["pool:exact"]["hit_rate"] == 1.0       # warm-up excluded: every pair a hit
    assert hot["pool:exact"]["speedup_over"] == "direct:bundled"
    for name in ("direct:ol", "device:exact/ol"):           # the liboffload (ol*) rows
        assert ROW_KEYS <= set(hot[name]) and hot[name]["pairs"] > 0, name
    assert hot["device:exact/ol"]["speedup_over"] == "direct:ol"
    for w in ("llvm-mm", "random", "replay"):
        assert ROW_KEYS <= set(tiny["results"][w]["pool:exact"]), w


def test_every_row_runs_the_same_operations(tiny):
    """No row gets a shorter run (the latency rows used to run a quarter)."""
    for w in ("hot", "llvm-mm", "random", "replay"):
        per = tiny["results"][w]
        pairs = {name: r["pairs"] for name, r in per.items()}
        assert len(set(pairs.values())) == 1, (w, pairs)


def test_llvm_mm_reuses_after_warm_up(tiny):
    """After the untimed warm-up round every size at or under the threshold
    is served from the pool: 12 of the 14 sizes of LLVM's pattern."""
    r = tiny["results"]["llvm-mm"]["pool:exact"]
    assert r["rounds"] == bench.PROFILES["tiny"]["mm_rounds"] >= 2
    assert r["hit_rate"] >= 0.5
    assert r["passthrough_median_ns"] is not None


def test_nextgen_rows_have_their_threshold_set_and_observed(tiny):
    rows = tiny["rows"]
    if "llvm16-nextgen" in tiny["skipped"]:
        pytest.skip(tiny["skipped"]["llvm16-nextgen"])
    on, off = rows["llvm16-nextgen"], rows["llvm16-nextgen,pool=off"]
    assert on["env"] == {THRESHOLD_ENV: "8192"} and off["env"] == {THRESHOLD_ENV: "0"}
    assert on["pool_observed"] is True and off["pool_observed"] is False
    assert tiny["meta"]["peer_env"]["llvm16-nextgen,pool=off"] == {THRESHOLD_ENV: "0"}
    assert f"{THRESHOLD_ENV}=0" in bench.format_markdown(tiny)
    for w in ("hot", "llvm-mm", "random", "replay"):
        assert "llvm16-nextgen,pool=off" in tiny["results"][w], w
        assert tiny["results"][w]["llvm16-nextgen"]["speedup_over"] == "llvm16-nextgen,pool=off"


def test_threshold_env_of_the_caller_is_restored(monkeypatch):
    monkeypatch.setenv(THRESHOLD_ENV, "0")
    out = bench.run("tiny", gpu=False, progress=False, workloads=("hot",),
                    only=["nextgen"])
    assert os.environ[THRESHOLD_ENV] == "0"
    if "llvm16-nextgen" not in out["skipped"]:
        assert out["rows"]["llvm16-nextgen"]["pool_observed"] is True


def test_growth_points_and_targets(tiny):
    g = tiny["results"]["growth"]["pool:exact"]
    assert set(g["points"]) == set(bench.PROFILES["tiny"]["growth_points"])
    assert "flatness" in g
    # the smoke-test profile judges nothing
    assert {t["status"] for t in tiny["targets"]} == {"N/A"}
    names = [t["target"] for t in tiny["targets"]]
    pool_growth = [n for n in tiny["results"]["growth"] if tiny["rows"][n]["group"] == "pool"]
    assert len(pool_growth) == 4                        # every pool row that runs growth
    assert len(names) == 2 + 8 + len(pool_growth) + 1
    for w in ("hot", "llvm-mm", "random", "replay"):
        assert sum(n.startswith(f"{w}: ") and "latency" in n for n in names) == 2, w
    limits = {t["target"].split(" <=")[0]: t["limit"] for t in tiny["targets"]}
    assert limits["hot: pool-hit pair via MemoryManager.allocate/free"] == 0.3
    assert limits["hot: pool-hit pair via Device.alloc/free (user path)"] == 0.35
    assert set(tiny["stats_overhead"]) == {"stats_on_ns", "stats_off_ns", "overhead"}


def test_targets_are_judged_outside_the_smoke_profile(tiny):
    out = json.loads(json.dumps(tiny))
    out["meta"]["profile"] = "quick"
    statuses = {t["status"] for t in bench.check_targets(out)}
    assert statuses <= {"PASS", "MISS"}


def test_markdown_and_outputs(tiny, tmp_path):
    md = bench.format_markdown(tiny)
    assert "### Targets" in md and "pool:exact" in md and "floor:ctypes-nop" in md
    assert "smoke test" in md
    paths = bench.write_outputs(tiny, tmp_path)
    assert json.loads(paths["json"].read_text())["meta"]["profile"] == "tiny"
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# B\n\nintro\n\n{bench.BEGIN_MARK}\nold\n{bench.END_MARK}\n\nafter\n")
    bench.update_docs(tiny, doc)
    text = doc.read_text()
    assert "old" not in text and "intro" in text and "after" in text and "### Targets" in text


# -- a failing row ------------------------------------------------------------------------

def _rows(fail_after):
    live = {}
    counter = [0]

    def alloc(size):
        counter[0] += 1
        p = 0x1000 * counter[0]
        live[p] = size
        return p

    def free(p):
        del live[p]

    def bad_alloc(size, n=[0]):
        n[0] += 1
        if n[0] > fail_after:
            raise RuntimeError("device lost")
        return alloc(size)

    ok = Backend("ok", "direct", "works", alloc, free)
    bad = Backend("bad", "direct", "fails", bad_alloc, free)
    return ok, bad, live


@pytest.mark.parametrize("fail_after", [0, 30, 130])
def test_a_row_that_raises_is_reported_and_the_others_go_on(fail_after):
    ok, bad, live = _rows(fail_after)
    prm = dict(bench.PROFILES["tiny"])
    failed = {}
    res = wl.run_workloads([ok, bad], prm, 0, Progress(1, False), None,
                           ("hot", "llvm-mm", "random"), failed)
    assert set(failed) == {"bad"}
    assert "RuntimeError: device lost" in failed["bad"] and "failed in" in failed["bad"]
    for w in ("hot", "llvm-mm", "random"):
        assert "ok" in res[w] and res[w]["ok"]["pairs"] > 0
    where = failed["bad"].split(":")[0].removeprefix("failed in ")
    assert "bad" not in res[where]              # no figures from the workload it failed in
    assert live == {}                     # what the failed row held was freed


def test_llvm_mm_thread_error_reaches_the_main_thread():
    ok, bad, live = _rows(3)
    failed = {}
    prm = dict(bench.PROFILES["tiny"], mm_threads=4)
    wl.wl_llvm_mm([bad, ok], prm, 0, Progress(1, False), failed)
    assert "device lost" in failed["bad"]
    assert live == {}


# -- GPU rows over a stand-in of cuda-python's driver module --------------------------------

class _CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_ILLEGAL_ADDRESS = 700


def _fake_driver(alloc_error=None):
    """A Python stand-in for ``cuda.bindings.driver``: host integers as
    pointers; ``cuMemAlloc``/``cuMemAllocAsync`` answer ``alloc_error`` when
    given.  Labelled as a stand-in; nothing here is a GPU result."""
    ok = _CUresult.CUDA_SUCCESS
    n = [0]

    def mem_alloc(size, *stream):
        if alloc_error is not None:
            return alloc_error, 0
        n[0] += 1
        return ok, 0x10000 * n[0]

    return types.SimpleNamespace(
        CUresult=_CUresult,
        cuInit=lambda flags: (ok,),
        cuDeviceGetCount=lambda: (ok, 1),
        cuDeviceGet=lambda i: (ok, 0),
        cuDeviceGetName=lambda n, d: (ok, b"Python stand-in in tests/test_bench.py"),
        cuDevicePrimaryCtxRetain=lambda d: (ok, "ctx"),
        cuDevicePrimaryCtxRelease=lambda d: (ok,),
        cuCtxSetCurrent=lambda c: (ok,),
        cuMemAlloc=mem_alloc, cuMemFree=lambda p: (ok,),
        cuStreamCreate=lambda flags: (ok, "stream"), cuStreamDestroy=lambda s: (ok,),
        cuStreamSynchronize=lambda s: (ok,),
        cuMemAllocAsync=mem_alloc, cuMemFreeAsync=lambda p, s: (ok,))


class _FailingCupy:
    """CuPy that imports but fails at its first allocation."""
    __version__ = "13.0.0-standin"

    class cuda:
        class MemoryPool:
            def malloc(self, size):
                raise RuntimeError("cudaErrorInsufficientDriver")

            def free_all_blocks(self):
                pass


def _gpu_rows(**kw):
    backends, skipped = bench.gpu_backends(driver=_fake_driver(**kw), cupy_module=_FailingCupy)
    return {b.name: b for b in backends}, skipped, backends


def test_gpu_driver_error_is_an_error_not_pointer_0():
    rows, skipped, backends = _gpu_rows(alloc_error=_CUresult.CUDA_ERROR_ILLEGAL_ADDRESS)
    try:
        for name in ("cuda:cuMemAlloc", "cuda:cuMemAllocAsync", "pool:exact/cuMemAlloc",
                     "pool:exact/cuMemAllocAsync"):
            with pytest.raises(CudaError, match="CUDA_ERROR_ILLEGAL_ADDRESS") as ei:
                rows[name].alloc(1024)
            assert ei.value.code == "CUDA_ERROR_ILLEGAL_ADDRESS"
        failed = {}
        res = wl.run_workloads([rows["cuda:cuMemAlloc"], rows["pool:exact/cuMemAlloc"]],
                               dict(bench.PROFILES["tiny"]), 0, Progress(1, False), None,
                               ("hot",), failed)
        assert res["hot"] == {}
        assert all("CUDA_ERROR_ILLEGAL_ADDRESS" in failed[n]
                   for n in ("cuda:cuMemAlloc", "pool:exact/cuMemAlloc"))
    finally:
        for b in reversed(backends):
            b.close()


def test_gpu_out_of_memory_is_pointer_0_for_the_pool_ladder():
    rows, _skipped, backends = _gpu_rows(alloc_error=_CUresult.CUDA_ERROR_OUT_OF_MEMORY)
    try:
        assert rows["cuda:cuMemAlloc"].alloc(1024) == 0
        with pytest.raises(OutOfDeviceMemoryError):
            rows["pool:exact/cuMemAlloc"].alloc(1024)
    finally:
        for b in reversed(backends):
            b.close()


def test_cupy_failing_at_its_first_allocation_skips_only_its_row():
    rows, skipped, backends = _gpu_rows()
    try:
        assert "cupy:MemoryPool" not in rows
        assert "first allocation failed" in skipped["cupy:MemoryPool"]
        assert "cudaErrorInsufficientDriver" in skipped["cupy:MemoryPool"]
        assert {"cuda:cuMemAlloc", "pool:exact/cuMemAlloc"} <= set(rows)
        p = rows["pool:exact/cuMemAlloc"].alloc(4096)
        rows["pool:exact/cuMemAlloc"].free(p)
    finally:
        for b in reversed(backends):
            b.close()


def test_gpu_rows_skip_with_a_reason_without_a_driver():
    backends, skipped = bench.gpu_backends()
    try:
        if not backends:
            assert set(skipped) == set(bench.gpu.GPU_ROWS)
            assert all(isinstance(v, str) and v for v in skipped.values())
    finally:
        for b in reversed(backends):
            b.close()


# -- the command ----------------------------------------------------------------------------

def test_cli_json(capsys):
    rc = cli_main(["bench", "--profile", "tiny", "--json", "--no-gpu", "--no-progress",
                   "--workloads", "hot,replay", "--only", "pool:exact", "--only", "nextgen"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["results"]) == {"hot", "replay"}
    hot = out["results"]["hot"]
    assert "pool:exact" in hot
    if "llvm16-nextgen" not in out["skipped"]:
        assert ROW_KEYS <= set(hot["llvm16-nextgen"])
        assert ROW_KEYS <= set(hot["llvm16-nextgen,pool=off"])


@pytest.mark.parametrize("args, option", [
    (["--latency-alloc-ns", "-5"], "--latency-alloc-ns"),
    (["--latency-free-ns", "-1"], "--latency-free-ns"),
    (["--latency-free-ns", str(10 ** 12)], "--latency-free-ns"),
    (["--only", "NO_SUCH_ROW"], "--only"),
    (["--only", ""], "--only"),          # '' is in every name: it ran the whole bench
    (["--workloads", "hot,nope"], "--workloads"),
    (["--workloads", ","], "--workloads"),
])
def test_bad_option_is_one_line_naming_it_exit_2(capsys, args, option):
    rc = cli_main(["bench", "--profile", "tiny", "--no-progress", *args])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and option in err and "Traceback" not in err
    if option == "--workloads":         # every workload offered, the process ones too
        from offload_shim.bench.cli import PROCESS_WORKLOADS, WORKLOADS
        assert err.rstrip().endswith(f"(choose from {', '.join(WORKLOADS + PROCESS_WORKLOADS)})")


def test_out_naming_an_existing_file_is_refused_before_running(capsys, tmp_path):
    f = tmp_path / "results"
    f.write_text("keep me")
    rc = cli_main(["bench", "--profile", "tiny", "--no-progress", "--out", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and "--out" in err and "not a directory" in err
    assert err.count("\n") == 1 and f.read_text() == "keep me"


class _NoMatplotlib:
    """A meta-path finder that makes ``import matplotlib`` fail."""
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "matplotlib":
            raise ImportError("matplotlib hidden by the test")
        return None


@pytest.mark.parametrize("hidden", [False, True])
def test_out_writes_plots_or_says_why_not(capsys, tmp_path, monkeypatch, hidden):
    """--out promises PNG plots: written with matplotlib (the bench extra, installed by
    make demo / make bench), else one line why not (issue 32)."""
    if hidden:
        for name in [m for m in sys.modules if m.split(".")[0] == "matplotlib"]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setattr(sys, "meta_path", [_NoMatplotlib(), *sys.meta_path])
    else:
        pytest.importorskip("matplotlib")
    rc = cli_main(["bench", "--profile", "tiny", "--no-progress", "--no-gpu", "--workloads",
                   "hot", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc in (0, None)
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    why = [l for l in err.splitlines() if "no PNG plots" in l]
    if hidden:
        assert pngs == [] and why == ["bench: no PNG plots: matplotlib is not installed "
                                      "(pip install 'offload-shim[bench]' or pip install "
                                      "matplotlib)"]
    else:
        assert pngs == ["workloads.png"] and why == []


def test_only_naming_a_gpu_row_is_not_a_usage_error(capsys):
    rc = cli_main(["bench", "--profile", "tiny", "--no-progress", "--json", "--workloads",
                   "hot", "--only", "cuMemAlloc"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["results"]["hot"] == {} or "cuda:cuMemAlloc" in out["results"]["hot"]


@pytest.mark.parametrize("workload, row", [("run", "startup"), ("record", "maps-16")])
def test_only_picks_rows_of_the_program_workloads(monkeypatch, workload, row):
    # `--only` names the rows of the workloads asked for: `--workloads run --only
    # startup` used to be refused (only the alloc/free rows were known) and, when not,
    # ignored by the run workload
    from offload_shim.bench import record_overhead, run_overhead
    seen = []
    mod = run_overhead if workload == "run" else record_overhead

    def fake_run(profile, **kw):
        seen.append(kw.get("only"))
        return {"skipped": "not run here", "rows": {}, "meta": {}}
    monkeypatch.setattr(mod, "run", fake_run)
    monkeypatch.setattr(mod, "format_text", lambda out: "", raising=False)
    rc = cli_main(["bench", "--profile", "tiny", "--no-progress", "--json",
                   "--workloads", workload, "--only", row])
    assert rc == 0 and seen == [[row]]


def test_only_naming_no_row_of_the_workloads_is_a_usage_error(capsys):
    rc = cli_main(["bench", "--profile", "tiny", "--no-progress", "--workloads", "run",
                   "--only", "pool:exact"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--only 'pool:exact'" in err


def test_only_with_a_workload_without_rows_says_so(capsys):
    # lifecycle has no rows: the error named an empty list ("rows: ")
    rc = cli_main(["bench", "--no-progress", "--workloads", "lifecycle", "--only", "host"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "--workloads lifecycle has no rows to pick" in err and "rows: )" not in err


def _interrupt(sig, after, tmp_path):
    """Run ``python -m offload_shim.bench`` (quick profile, progress lines on
    stderr), send ``sig`` once the progress line ``after`` appears; returns
    (exit status, stderr).  Bounded: a run that does not stop is killed and
    the test fails."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    p = subprocess.Popen([sys.executable, "-P", "-m", "offload_shim.bench", "--no-gpu",
                          "--workloads", "hot,llvm-mm,random"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=str(tmp_path))
    lines = []

    def read():
        sent = False
        for line in p.stderr:
            lines.append(line)
            if not sent and after in line:
                p.send_signal(sig)
                sent = True

    t = threading.Thread(target=read, daemon=True)
    t.start()
    try:
        rc = p.wait(timeout=180)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        pytest.fail(f"bench did not stop after {sig.name}: {''.join(lines)[-2000:]}")
    t.join(timeout=10)
    return rc, "".join(lines)


@pytest.mark.parametrize("sig, after, rc_want, word", [
    (signal.SIGINT, "llvm-mm: round 1/", 130, "bench: interrupted"),
    (signal.SIGTERM, "hot: round 2/", 143, "bench: interrupted (SIGTERM)"),
])
def test_interrupt_prints_one_line_and_leaves_nothing(tmp_path, sig, after, rc_want, word):
    rc, err = _interrupt(sig, after, tmp_path)
    assert rc == rc_want, err[-2000:]
    assert "Traceback" not in err
    assert err.rstrip("\n").splitlines()[-1] == word
    assert list(tmp_path.iterdir()) == []            # the replay log's folder is gone


def test_growth_keeps_every_block_count_live_at_once_taking_turns(monkeypatch):
    # issue 29: a pool per block count, all filled before the first timed batch and
    # closed after the last; the (row, count) pairs take turns batch by batch, so a
    # drift of the machine's load falls on every count alike
    from offload_shim.memory import MemoryManager
    from offload_shim.memory.fake import FakeBackend
    events = []
    fb = FakeBackend()
    clock = iter(range(10 ** 6))
    # a timed batch reads the CPU clock at its start and its end: mark them
    monkeypatch.setattr(wl, "cpu", lambda: events.append(("cpu", None)) or next(clock))

    def make(tag):
        mm = MemoryManager(fb.alloc, fb.free, threshold=8192, debug="")

        def alloc(size):
            events.append(("alloc", tag))
            return mm.allocate(size)

        return Backend("pool:x", "pool", "test row", alloc, mm.free, pools=[mm],
                       close=[mm.drain, lambda: events.append(("close", tag))], growth=True)

    made = []

    def replica():
        made.append(len(made))
        events.append(("made", made[-1]))
        return make(made[-1])

    row = make("row")
    row.replica = replica
    prm = dict(growth_points=(10, 100, 1000), growth_pairs=6, growth_blocks=3)
    out = wl.wl_growth([row], prm, 0, Progress(1, enabled=False), {})
    res = out["pool:x"]
    assert res["interleaved"] is True and sorted(res["points"]) == [10, 100, 1000]
    assert all(res["points"][n]["cached_blocks"] >= n for n in (10, 100, 1000))
    kinds = [k for k, _ in events]
    first_batch = kinds.index("cpu")
    last_batch = len(kinds) - 1 - kinds[::-1].index("cpu")
    assert kinds.count("made") == 3
    assert max(i for i, k in enumerate(kinds) if k == "made") < first_batch   # all filled first
    assert min(i for i, k in enumerate(kinds) if k == "close") > last_batch    # closed after
    # the timed batches: 3 rounds, each visiting every count once, in rotated order
    batches, cur = [], None
    for k, tag in events[first_batch:last_batch + 1]:
        if k == "cpu":
            cur = [] if cur is None else batches.append(cur)
        elif k == "alloc" and cur is not None:
            cur.append(tag)
    owners = [set(b) for b in batches]
    assert len(owners) == 9 and all(len(o) == 1 for o in owners)
    order = [o.pop() for o in owners]
    assert [set(order[i:i + 3]) for i in (0, 3, 6)] == [{0, 1, 2}] * 3
    assert order[:3] != order[3:6]                      # the turn order rotates
    assert "row" not in order and ("close", "row") not in events   # the row stays open
    row.close()
    assert fb.live == {}
