"""Issue 30: ``offload-shim run --record TRACE`` and ``offload-shim replay TRACE``.

Programs of tests/programs/ built by clang-16 are recorded under ``run --record`` (on
the LLVM 16 host plugins libomptarget 16 would load, or the bundled plugin) and
replayed on the bundled plugin under each of the four policies: the replay re-issues
exactly the recorded allocations, frees and copies and counts the recorded launches.
The recorded counts are checked against what the program's constructs do (the
mapping rules of libomptarget 16 ``omptarget.cpp``: one allocation per mapped item of
a new mapping, copies for ``to``/``from`` at the first/last reference).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offload_shim.trace.format import (VERSION, TraceError, TraceWriter, encode,
                                       read_trace, summary)
from offload_shim.trace.replay import POLICIES, replay

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"


def _shim(*args, timeout=180):
    return subprocess.run([sys.executable, "-P", "-m", "offload_shim.cli", *args],
                          capture_output=True, text=True, timeout=timeout)


def _built(name_or_source: str | Path) -> str:
    import clang_toolchains as ct
    from offload_shim.cli.run import libpython_path
    why = ct.CLANG16.missing()
    if why:
        pytest.skip(why)
    try:
        libpython_path()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    src = name_or_source if isinstance(name_or_source, Path) else PROGRAMS / name_or_source
    return str(ct.CLANG16.build(src))


def _record(tmp_path, exe, *opts) -> tuple[subprocess.CompletedProcess, Path]:
    trace = tmp_path / "trace.jsonl"
    proc = _shim("run", "--record", str(trace), *opts, exe)
    return proc, trace


# -- record, then replay on the bundled plugin under every policy -------------------

#: program -> (allocs, copies, launches) its constructs make (libomptarget 16 rules)
EXPECTED = {
    # one kernel: in, s, out, both mapped (4 allocations), to: in, s, both; from: out,
    # both
    "map_to_from.c": (4, 5, 1),
    # a mapped once by the outer target data, the inner data region and the kernels
    # find it present: 1 allocation, 1 copy in, 1 copy out, 2 kernels
    "target_data_nested.c": (1, 2, 2),
    # 8 kernels on 4 host threads, each mapping data[t][0:16] (to) and s (tofrom)
    "host_threads.c": (16, 24, 8),
}


@pytest.mark.parametrize("plugin", ["default", "bundled"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_program_replays_with_the_same_counts_under_every_policy(tmp_path, name,
                                                                          plugin):
    from offload_shim.hostplugin import bundled_plugin_path
    exe = _built(name)
    real = subprocess.run([exe], capture_output=True, text=True, timeout=120)
    opts = ["--plugin", str(bundled_plugin_path())] if plugin == "bundled" else []
    proc, trace = _record(tmp_path, exe, *opts)
    assert (proc.returncode, proc.stdout) == (real.returncode, real.stdout), proc.stderr
    t = read_trace(trace)
    assert t.complete and not t.truncated
    # every line, however the recorder formats it, is the canonical JSON of its event
    for line in trace.read_text().splitlines(keepends=True):
        assert encode(json.loads(line)) == line
    s = summary(t)
    allocs, copies, launches = EXPECTED[name]
    assert (s["allocs"], s["frees"], s["copies"], s["launches"]) == \
        (allocs, allocs, copies, launches), s
    kernels = [e for e in t.events if e["op"] == "construct" and e["kind"] == "kernel"]
    assert len(kernels) == launches and all(e["rc"] == 0 for e in kernels)
    assert {e["op"] for e in t.events} >= {"image_register", "image_unregister",
                                          "device_init", "device_deinit", "alloc",
                                          "free", "copy", "launch", "construct"}
    if name == "host_threads.c":
        assert s["threads"] > 1                   # the recorded threads

    out = _shim("replay", str(trace), "--compare-policies", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["recorded"]["allocs"] == allocs and res["recorded"]["launches"] == launches
    assert [p["policy"] for p in res["policies"]] == list(POLICIES)
    for p in res["policies"]:
        assert (p["allocs"], p["frees"], p["copies"], p["copies_skipped"],
                p["launches"], p["oom_events"], p["errors"]) == \
            (allocs, allocs, copies, 0, launches, 0, []), p
        assert p["hits"] + p["misses"] == allocs
        assert p["peak_requested_bytes"] <= p["peak_device_bytes"]
    by = {p["policy"]: p for p in res["policies"]}
    assert by["none"]["hits"] == 0 and by["none"]["backend_allocs"] == allocs


def test_construct_lines_carry_map_entries_and_reference_counts(tmp_path):
    exe = _built("target_data_nested.c")
    proc, trace = _record(tmp_path, exe)
    assert proc.returncode == 0, proc.stderr
    cons = [e for e in read_trace(trace).events if e["op"] == "construct"]
    # outer begin, inner begin, kernel, inner end, kernel, outer end; a[4] of int
    assert [c["kind"] for c in cons] == ["begin", "begin", "kernel", "end", "kernel", "end"]
    counts = [[m[2] for m in c["maps"]][0] for c in cons]
    # the row of a: 1 after the outer begin, 2 inside, back to 1, none at the end
    assert counts[0] == 1 and counts[1] == 2 and counts[3] == 1 and counts[5] is None
    assert all(c["maps"][0][0] == 16 for c in cons if c["kind"] != "kernel")
    assert all(c["tid"] == cons[0]["tid"] and c["dur_ns"] >= 0 for c in cons)


_KILLED = r"""
#include <signal.h>
#include <stdio.h>
int main(void) {
  int a[8] = {0};
  for (int r = 0; r < 5; r++) {
#pragma omp target map(tofrom : a)
    for (int i = 0; i < 8; i++) a[i] += r;
  }
  printf("%d\n", a[0]);
  fflush(stdout);
  raise(SIG);
  return 0;
}
"""


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGSEGV"])
def test_a_killed_or_crashed_program_leaves_every_finished_construct(tmp_path, sig):
    src = tmp_path / f"killed_{sig}.c"
    src.write_text(_KILLED.replace("SIG)", f"{sig})"))
    exe = _built(src)
    proc, trace = _record(tmp_path, exe)
    assert proc.returncode != 0 and proc.stdout == "10\n"
    t = read_trace(trace)
    assert not t.complete                         # no end line: the runtime never stopped
    s = summary(t)
    assert (s["constructs"], s["launches"], s["allocs"], s["copies"]) == (5, 5, 5, 10)
    res = replay(t, ("exact",))
    assert res["policies"][0]["allocs"] == 5 and res["policies"][0]["copies"] == 10


def test_run_without_record_writes_nothing_and_bad_paths_are_refused(tmp_path):
    exe = _built("map_to_from.c")
    proc = _shim("run", "--record", str(tmp_path / "no" / "such" / "t.jsonl"), exe)
    assert proc.returncode == 2 and "--record" in proc.stderr and proc.stdout == ""
    proc = _shim("run", "--record", str(tmp_path), exe)
    assert proc.returncode == 2 and "directory" in proc.stderr


def test_record_replaces_only_an_earlier_trace(tmp_path):
    """``--record`` never deletes a file that is not a trace: the program itself, the
    user's data, a device node; an earlier trace or an empty file is replaced."""
    import shutil
    exe = tmp_path / "prog"
    shutil.copy(_built("map_to_from.c"), exe)
    data = tmp_path / "data.txt"
    data.write_text("mine\n")
    for path in (exe, data, "/dev/null"):
        before = os.stat(path)
        proc = _shim("run", "--record", str(path), str(exe))
        assert proc.returncode == 2 and "--record" in proc.stderr, proc.stderr
        assert "not replaced" in proc.stderr and proc.stdout == ""
        after = os.stat(path)
        assert (after.st_ino, after.st_size, after.st_mode) == \
            (before.st_ino, before.st_size, before.st_mode)
    assert data.read_text() == "mine\n"
    trace = tmp_path / "t.jsonl"
    for _ in range(2):                           # the second run replaces the first trace
        proc = _shim("run", "--record", str(trace), str(exe))
        assert proc.returncode == 0, proc.stderr
        assert read_trace(trace).complete
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert _shim("run", "--record", str(empty), str(exe)).returncode == 0
    assert read_trace(empty).complete


def test_record_and_report_on_one_file_are_refused_before_the_program(tmp_path):
    """``run --report F --record F`` (or a link to F) once ran the program and left F
    holding the report only: the trace it had streamed was replaced, silently.  Now
    one line, exit 2, before the program runs; the file is untouched."""
    exe = _built("map_to_from.c")
    trace = tmp_path / "t.jsonl"
    link = tmp_path / "link.json"
    for report, record in ((trace, trace), (tmp_path / "." / "t.jsonl", trace)):
        proc = _shim("run", "--report", str(report), "--record", str(record), exe)
        assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
        assert proc.stderr.startswith("offload-shim: error: --report") \
            and "same file" in proc.stderr and len(proc.stderr.splitlines()) == 1
        assert not trace.exists()
    proc = _shim("run", "--record", str(trace), exe)
    assert proc.returncode == 0 and read_trace(trace).complete
    os.link(trace, link)
    before = trace.read_bytes()
    proc = _shim("run", "--report", str(link), "--record", str(trace), exe)
    assert proc.returncode == 2 and "same file" in proc.stderr, proc.stderr
    assert trace.read_bytes() == before


@pytest.mark.parametrize("fork", ["os.fork", "libc fork"])
def test_a_forked_child_writes_its_own_trace_file(tmp_path, fork):
    """A program that forks after its runtime started hands the child the recorder
    and the trace's descriptor: the child's lines (its own device_init, allocations at
    the same addresses as the parent's, its end) went into the parent's trace, where
    replay took them for another thread of one process.  The child now writes
    ``TRACE.<pid>`` (docs/trace-format.md) with a header naming ``forked_from``."""
    path = tmp_path / "t.jsonl"
    w = TraceWriter(path, {"argv": ["prog"]}, exclusive=True)
    w.event({"op": "alloc", "size": 64, "ptr": 0x1000, "hit": False, "block": 64,
             "dev": "d:0"})
    parent = os.getpid()
    # libc's fork() runs none of Python's fork handlers: the writer's own test
    # (format._fork_flag, else getpid) must see the child
    pid = os.fork() if fork == "os.fork" else ctypes.CDLL(None, use_errno=True).fork()
    assert pid >= 0
    if pid == 0:                                         # the child: as a C fork() would
        try:
            w.event({"op": "alloc", "size": 8, "ptr": 0x1000, "hit": False, "block": 8,
                     "dev": "d:0"})
            w.close({"status": 0})
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    w.event({"op": "free", "size": 64, "ptr": 0x1000, "hit": False, "dev": "d:0"})
    w.close({"status": 0})
    mine = read_trace(path)
    assert mine.header["pid"] == parent and mine.complete
    assert [(e["op"], e.get("size")) for e in mine.events] == [("alloc", 64), ("free", 64)]
    assert {e["tid"] for e in mine.events} == {threading.get_native_id()}
    child = read_trace(f"{path}.{pid}")
    assert child.header["pid"] == pid and child.header["forked_from"] == parent
    assert child.header["argv"] == ["prog"] and child.complete
    assert [(e["op"], e.get("size")) for e in child.events] == [("alloc", 8)]


def test_a_program_that_never_offloads_leaves_an_empty_trace(tmp_path):
    proc, trace = _record(tmp_path, "/bin/true")
    assert proc.returncode == 0
    t = read_trace(trace)
    assert t.header["runtime"] is False and t.events == [] and t.complete


# -- the recorder in process: nothing stays installed --------------------------------

def test_recorder_detach_restores_every_object(tmp_path, bundled_path):
    import offload_shim as osh
    from offload_shim.trace.record import Recorder
    rec = Recorder(tmp_path / "t.jsonl")
    with osh.Runtime([bundled_path], pool=rec.pool_options()) as rt, \
            osh.interpose(rt) as ip:
        objs = [rt, ip.fast, *rt.plugins, *rt.devices]
        before = [dict(vars(o)) for o in objs]
        rec.attach(rt, ip)
        assert "submit_many" in vars(rt.plugins[0]) and "_serve" in vars(ip.fast)
        dev = rt.devices[0]
        p = dev.alloc(100)
        dev.free(p)
        rec.close()
        assert [set(vars(o)) for o in objs] == [set(b) for b in before]
    t = read_trace(tmp_path / "t.jsonl")
    ops = [e["op"] for e in t.events]
    assert ops[:4] == ["config", "device_init", "alloc", "free"] and t.complete
    assert all("tid" in e and "t_ns" in e for e in t.events)


# -- the file ----------------------------------------------------------------------

_value = st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | st.text(max_size=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.text(alphabet="abc_xyz", min_size=1, max_size=6),
                       _value | st.lists(_value, max_size=4), max_size=8))
def test_encode_is_json_dumps(ev):
    assert encode(ev) == json.dumps(ev, separators=(",", ":")) + "\n"


def test_read_trace_skips_a_cut_line_and_refuses_other_files(tmp_path):
    w = TraceWriter(tmp_path / "t.jsonl")
    w.event({"op": "alloc", "size": 8, "ptr": 4096, "hit": False, "block": 8, "dev": "d:0"})
    w.close()
    text = (tmp_path / "t.jsonl").read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text.rsplit("\n", 2)[0] + '\n{"op":"fr')      # end line lost, one cut
    t = read_trace(cut)
    assert t.truncated and not t.complete and [e["op"] for e in t.events] == ["alloc"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"op": "config"}\n')
    with pytest.raises(TraceError, match="line 1"):
        read_trace(bad)
    newer = tmp_path / "v9.jsonl"
    newer.write_text(text.replace(f'"version":{VERSION}', '"version":9'))
    with pytest.raises(TraceError, match="version 9"):
        read_trace(newer)
    odd = tmp_path / "odd.jsonl"
    odd.write_text(text.replace('"op":"alloc"', '"op":"teleport"'))
    with pytest.raises(TraceError, match="line 2"):
        read_trace(odd)


@pytest.mark.parametrize("line,why", [
    ('{"op":"copy","dev":"d:0","dir":"h2d","size":8}', "copy without 'tgt'"),
    ('{"op":"copy","dev":"d:0","dir":"h2d","size":"8","tgt":4096}', "size is '8'"),
    ('{"op":"alloc","size":null,"ptr":4096}', "size is None"),
    ('{"op":"alloc","size":-8,"ptr":4096}', "negative size"),
    ('{"op":"free","size":8,"ptr":true}', "ptr is True"),
    ('{"op":"launch","dev":"d:0","kernel":"k","dur_ns":"zz"}', "dur_ns is 'zz'"),
    ('{"op":"free","size":8,"ptr":4096,"tid":"main"}', "tid is 'main'"),
])
def test_read_trace_refuses_fields_readers_use_of_the_wrong_type(tmp_path, line, why):
    w = TraceWriter(tmp_path / "t.jsonl")
    w.close()
    head = (tmp_path / "t.jsonl").read_text().splitlines()[0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(f"{head}\n{line}\n")
    with pytest.raises(TraceError, match=f"line 2: .*{re.escape(why)}"):
        read_trace(bad)
    proc = subprocess.run([sys.executable, "-m", "offload_shim.cli", "replay", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().startswith("offload-shim: error: ") and why in proc.stderr

def test_a_second_process_of_the_run_writes_its_own_trace(tmp_path):
    first = TraceWriter(tmp_path / "t.jsonl", exclusive=True)
    second = TraceWriter(tmp_path / "t.jsonl", exclusive=True)   # as a child would
    assert first.path == str(tmp_path / "t.jsonl")
    assert second.path == f"{tmp_path / 't.jsonl'}.{os.getpid()}"
    first.close()
    second.close()
    assert read_trace(first.path).complete and read_trace(second.path).complete


# -- replay of written traces ----------------------------------------------------------

def _trace(tmp_path, ops, tid=1):
    """A trace of pool allocations / frees (``("a", ptr, size)``, ``("f", ptr)``)."""
    w = TraceWriter(tmp_path / "s.jsonl")
    w.event({"op": "config", "threshold": 8192, "dev": "d:0", "tid": tid})
    for op in ops:
        if op[0] == "a":
            w.event({"op": "alloc", "size": op[2], "ptr": op[1], "hit": False,
                     "block": op[2], "dev": "d:0", "tid": tid})
        else:
            w.event({"op": "free", "size": 0, "ptr": op[1], "hit": True, "dev": "d:0",
                     "tid": tid})
    w.close()
    return tmp_path / "s.jsonl"


def test_best_fit_reuses_a_larger_block_within_its_bound(tmp_path):
    # 1000 freed, then 600 (best-fit reuses it: 1000 < 1200), then 400 (nobody may)
    path = _trace(tmp_path, [("a", 0x1000, 1000), ("f", 0x1000), ("a", 0x2000, 600),
                             ("a", 0x3000, 400), ("f", 0x2000), ("f", 0x3000)])
    res = {p["policy"]: p for p in replay(path)["policies"]}
    assert res["best-fit"]["hits"] == 1 and res["exact"]["hits"] == 0
    assert res["binned"]["hits"] == 0 and res["none"]["hits"] == 0
    assert res["best-fit"]["max_waste"] == pytest.approx(400 / 600)
    assert res["best-fit"]["peak_device_bytes"] == 1400
    assert res["exact"]["peak_device_bytes"] == 2000          # 1000 cached + 600 + 400
    assert res["best-fit"]["waste_bound"] == 1.0 and res["binned"]["waste_bound"] == 0.125
    for p in res.values():
        assert p["peak_requested_bytes"] == 1000 and p["allocs"] == 3


def test_capacity_makes_out_of_memory_events(tmp_path):
    path = _trace(tmp_path, [("a", 0x1000, 3000), ("a", 0x2000, 3000), ("f", 0x1000),
                             ("f", 0x2000)])
    res = replay(path, ("exact",), capacity=4096)["policies"][0]
    assert res["oom_events"] == 1 and res["allocs"] == 1 and res["frees"] == 1


def test_replay_threads_take_turns_in_recorded_order(tmp_path):
    w = TraceWriter(tmp_path / "m.jsonl")
    for i in range(40):             # alloc on thread i % 4, freed by the next thread
        w.event({"op": "alloc", "size": 64, "ptr": 0x1000 + i * 64, "hit": False,
                 "block": 64, "dev": "d:0", "tid": i % 4})
        w.event({"op": "free", "size": 64, "ptr": 0x1000 + i * 64, "hit": True,
                 "dev": "d:0", "tid": (i + 1) % 4})
    w.close()
    for threads in (True, False):
        p = replay(tmp_path / "m.jsonl", ("exact",), threads=threads)["policies"][0]
        assert (p["allocs"], p["frees"], p["misses"], p["errors"]) == (40, 40, 1, [])


def test_replay_refuses_bad_input(tmp_path):
    path = _trace(tmp_path, [("a", 0x1000, 8)])
    with pytest.raises(ValueError, match="unknown policy"):
        replay(path, ("first-fit",))
    with pytest.raises(ValueError, match="bundled"):
        replay(path, ("exact",), plugin="/x.so", latency=(1, 1))
    proc = _shim("replay", str(tmp_path / "nope.jsonl"))
    assert proc.returncode == 2 and proc.stderr.startswith("offload-shim: error:")
    proc = _shim("replay", str(path), "--policy", "first-fit")
    assert proc.returncode == 2
    # both: which was meant? (--compare-policies used to win silently)
    proc = _shim("replay", str(path), "--policy", "exact", "--compare-policies")
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 \
        and "not allowed with" in proc.stderr and proc.stdout == "", proc.stderr


def test_replay_refuses_capacity_zero_and_names_a_missing_plugin(tmp_path):
    """``--capacity 0`` once replayed an unlimited device (the bundled plugin's
    capacity 0 is "no limit") and passed the --plugin check: refused now, one line;
    a ``--plugin`` that does not exist is named as the plugin's problem, not the
    trace's ("TRACE: plugin not found")."""
    path = _trace(tmp_path, [("a", 0x1000, 8), ("f", 0x1000)])
    with pytest.raises(ValueError, match="capacity must be > 0"):
        replay(path, ("exact",), capacity=0)
    with pytest.raises(ValueError, match="bundled"):
        replay(path, ("exact",), plugin="/x.so", capacity=0)
    proc = _shim("replay", str(path), "--capacity", "0")
    assert proc.returncode == 2 and proc.stderr.startswith("offload-shim: error:") \
        and "--capacity" in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    # 'bundled' names the bundled plugin, as for check traces and `check bundled`
    proc = _shim("replay", str(path), "--plugin", "bundled", "--capacity", "4096", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["plugin"] == "bundled"
    proc = _shim("replay", str(path), "--plugin", str(tmp_path / "libnope.so"))
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("offload-shim: error: cannot start the runtime: ") \
        and "libnope.so" in proc.stderr and f"{path}:" not in proc.stderr, proc.stderr


def test_a_launcher_that_calls_launch_is_recorded_once(tmp_path):
    """A plugin family whose own ``_launcher_impl`` hands some generations to
    Plugin's default one (plugins/llvm.py: LLVM 14 and classic LLVM 16 plugins with
    ``synchronize``), which calls ``Plugin.launch`` -- hooked too: each launch of its
    launcher is one ``launch`` line, not two."""
    from offload_shim.plugins.plugin import Plugin
    from offload_shim.trace.record import Recorder

    class Family:                       # the hooked surface of a plugin, nothing else
        name = "fake"

        def __init__(self):
            self.launched = []

        def submit(self, dev, a, b, size): pass
        def retrieve(self, dev, a, b, size): pass
        def submit_many(self, dev, ops): pass
        def retrieve_many(self, dev, ops): pass

        def launch(self, dev, entry, args, offsets=None):
            self.launched.append(entry)

        def launcher(self, dev, entry, nargs):
            return self._launcher_impl(dev, entry, nargs)

        def _launcher_impl(self, dev, entry, nargs):     # an override: llvm.py's
            return Plugin._launcher_impl(self, dev, entry, nargs)

    plugin = Family()
    rec = Recorder(tmp_path / "t.jsonl")
    rec._hook_plugin(plugin)
    run = plugin.launcher(0, 0x40, 1)
    run([4096], [0])
    run([4096], [0])
    rec.close()
    assert plugin.launched == [0x40, 0x40]
    # (read as JSON lines: read_trace wants the kernel's name, which a fake lacks)
    lines = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    launches = [e for e in lines if e["op"] == "launch"]
    assert len(launches) == 2, launches
