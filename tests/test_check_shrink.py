"""``offload-shim check`` shrinks a failing sequence -- a crash of the plugin included --
and writes it as a trace that ``offload-shim replay`` re-runs to show the same failure
(issue 30 item 4; offload_shim/testing/sequences.py, cli/check.py, cli/replay.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from offload_shim.testing.sequences import (SequenceError, failure_signature, format_steps,
                                            run_steps, shrink, trace_steps, well_formed,
                                            write_trace)
from offload_shim.trace.format import TraceError, read_trace

from helpers import build_wrapped_host_plugin


# The bundled plugin with one bug added: init_device of a device that was deinitialised
# since init_plugin dereferences NULL (static state a deinit leaves behind).  Only a
# sequence that deinitialises a device and then uses it again reaches it: not the first
# sequence of a check, not a smoke run.
_REINIT_CRASH = r"""
#include <stdint.h>
#include <string.h>
#define EXPORT __attribute__((visibility("default")))
int32_t osh_orig_init_device(int32_t);
int32_t osh_orig_deinit_device(int32_t);
int32_t osh_orig_init_plugin(void);
static int deinited[64];
EXPORT int32_t __tgt_rtl_init_plugin(void) {
  memset(deinited, 0, sizeof deinited);
  return osh_orig_init_plugin();
}
EXPORT int32_t __tgt_rtl_deinit_device(int32_t id) {
  if (id >= 0 && id < 64) deinited[id] = 1;
  return osh_orig_deinit_device(id);
}
EXPORT int32_t __tgt_rtl_init_device(int32_t id) {
  if (id >= 0 && id < 64 && deinited[id]) { volatile int *p = 0; *p = 1; }
  return osh_orig_init_device(id);
}
"""


@pytest.fixture(scope="module")
def reinit_crash_plugin(tmp_path_factory):
    return build_wrapped_host_plugin(tmp_path_factory.mktemp("reinit_crash"),
                                     "libomptarget.rtl.reinit_crash.so", _REINIT_CRASH,
                                     ("init_device", "deinit_device", "init_plugin"))


def _shim(*args, cwd=None, timeout=900):
    return subprocess.run([sys.executable, "-m", "offload_shim.cli", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_a_crash_is_shrunk_written_as_a_trace_and_replayed(tmp_path, reinit_crash_plugin):
    """check finds the crash, shrinks the sequence that was running (each candidate in a
    child), prints it and writes it as a trace; replay of that trace crashes the same
    way in a child; on the bundled plugin (without the bug) the same steps pass."""
    trace = tmp_path / "crash.trace"
    cp = _shim("check", reinit_crash_plugin, "--abi", "llvm", "--max-examples", "50",
               "--steps", "20", "--seed", "1", "--json", "--trace-out", str(trace),
               cwd=tmp_path)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    res = json.loads(cp.stdout)
    crash = [f for f in res["findings"] if f["kind"] == "crash"]
    assert len(crash) == 1 and crash[0]["signal"] == "SIGSEGV", res
    f = crash[0]
    sh = f["shrunk"]
    assert sh["reproduced"], f
    assert len(sh["steps"]) < sh["from"] and len(sh["steps"]) <= 8, sh["program"]
    rules = [s["rule"] for s in sh["steps"]]
    assert rules[0] == "open_runtime" and "deinit_device" in rules, rules
    assert f["outcome"]["kind"] == "crash" and f["outcome"]["signal"] == "SIGSEGV"
    assert f["trace"] == str(trace)
    t = read_trace(trace)
    steps, recorded = trace_steps(t)
    assert steps == sh["steps"] and recorded["signal"] == "SIGSEGV"
    assert t.header["plugin"] == reinit_crash_plugin and t.header["abi"] == "llvm"

    rp = _shim("replay", str(trace), "--json")
    assert rp.returncode == 1, rp.stdout + rp.stderr
    got = json.loads(rp.stdout)
    assert got["same"] and got["outcome"]["kind"] == "crash", got
    assert got["outcome"]["signal"] == "SIGSEGV"
    assert got["outcome"]["step"]["i"] == steps[-1]["i"]

    ok = _shim("replay", str(trace), "--plugin", "bundled")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "outcome:  passed" in ok.stdout and "NOT the failure recorded" in ok.stdout


def test_the_text_report_prints_the_shrunk_steps_and_the_trace(tmp_path,
                                                                reinit_crash_plugin):
    """--no-shrink: the sequence that was running, run again alone in a fresh child
    (it crashes there too), printed as steps and written as the default trace."""
    cp = _shim("check", reinit_crash_plugin, "--abi", "llvm", "--max-examples", "50",
               "--steps", "20", "--seed", "1", "--no-shrink", cwd=tmp_path)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "FINDING  crash: the child died of SIGSEGV" in cp.stdout
    assert re.search(r"\nsequence \(\d+ steps, not shrunk; run again alone", cp.stdout), \
        cp.stdout
    assert "    state.open_runtime()" in cp.stdout and "-> SIGSEGV in step" in cp.stdout
    assert (tmp_path / "offload-shim-check.trace").exists()    # the default --trace-out
    assert "trace    offload-shim-check.trace" in cp.stdout


# -- the parts, without a plugin run ------------------------------------------------------

def _s(i, rule, **args):
    return {"i": i, "rule": rule, "args": args}


SEQ = [_s(0, "open_runtime"), _s(1, "new_image"), _s(2, "get_device", index=5),
       _s(3, "alloc", d={"ref": "v2"}, size=4096), _s(4, "register", img={"ref": "v1"}),
       _s(5, "init_device", d={"ref": "v2"}), _s(6, "deinit_device", d={"ref": "v2"}),
       _s(7, "free", buf={"ref": "v3"}, twice=True), _s(8, "init_device", d={"ref": "v2"})]
FLOORS = {("get_device", "index"): 0, ("alloc", "size"): 0, ("free", "twice"): False}


def _crashes(steps):
    """A stand-in for a plugin that crashes on init after deinit of the same device."""
    deinit = set()
    for s in steps:
        d = s["args"].get("d", {}).get("ref") if isinstance(s["args"].get("d"), dict) \
            else None
        if s["rule"] == "deinit_device":
            deinit.add(d)
        elif s["rule"] in ("init_device", "alloc") and d in deinit:
            return True
    return False


def test_shrink_removes_what_the_failure_does_not_need_deterministically():
    calls = []

    def fails(c):
        calls.append(c)
        return _crashes(c)

    best, runs = shrink(SEQ, fails, floors=FLOORS)
    assert [s["rule"] for s in best] == ["open_runtime", "get_device", "deinit_device",
                                         "init_device"]
    assert best[1]["args"] == {"index": 0}          # simplified to its strategy's floor
    assert runs == len(calls) and all(well_formed(c) for c in calls)
    again, runs2 = shrink(SEQ, _crashes, floors=FLOORS)
    assert again == best and runs2 == runs
    small, n = shrink(SEQ, _crashes, floors=FLOORS, max_runs=3)
    assert n == 3 and _crashes(small)               # bounded: the best found so far


def test_well_formed_refuses_dangling_references_and_a_missing_start():
    assert well_formed(SEQ)
    assert not well_formed([s for s in SEQ if s["i"] != 2])      # v2 is used later
    assert not well_formed(SEQ[1:])                              # no open_runtime first
    assert not well_formed([SEQ[0], SEQ[2], SEQ[1]])             # numbers must increase
    assert not well_formed([SEQ[0], _s(1, "alloc", d={"ref": "x"}, size=1)])
    assert not well_formed([])


def test_format_steps_names_only_results_that_are_used():
    text = format_steps(SEQ[:4])
    assert text[0] == "state.open_runtime()"
    assert text[1] == "state.new_image()"             # v1 not used in these four
    assert text[2] == "v2 = state.get_device(index=5)"
    assert text[3] == "state.alloc(d=v2, size=4096)"


def test_failure_signature():
    assert failure_signature({"kind": "crash", "signal": "SIGSEGV", "message": "x"}) == \
        failure_signature({"kind": "crash", "signal": "SIGSEGV", "message": "y"})
    assert failure_signature({"kind": "crash", "signal": "SIGSEGV"}) != \
        failure_signature({"kind": "crash", "signal": "SIGABRT"})
    assert failure_signature({"kind": "invariant", "exception": "ModelError", "message": "a"}) \
        == failure_signature({"kind": "invariant", "exception": "ModelError", "message": "b"})
    assert failure_signature({"kind": "passed"}) == ("passed",)


def test_steps_recorded_by_the_machine_run_again_in_process(bundled_path):
    """The steps a machine records re-run through run_steps (on the bundled plugin they
    pass); a step whose object its step did not return refuses to run."""
    from offload_shim.testing.machine import make_lifecycle_machine, run_first_sequence
    seen = []
    M = make_lifecycle_machine(bundled_path, "llvm", record=seen.append)
    run_first_sequence(M)
    rules = [s["rule"] for s in seen]
    assert rules[:4] == ["open_runtime", "new_image", "register", "get_device"]
    assert seen[0]["smoke"] is True
    assert well_formed(seen)
    seen2 = []
    M2 = make_lifecycle_machine(bundled_path, "llvm", record=seen2.append)
    assert run_steps(M2, seen) == len(seen)
    assert seen2 == seen                     # the same steps, the same names
    bad = [seen[0], _s(1, "get_device", index=0), _s(2, "alloc", d={"ref": "v1"}, size=0),
           _s(3, "free", buf={"ref": "v2"}, twice=False)]   # alloc(0) returns nothing
    with pytest.raises(SequenceError, match="v2"):
        run_steps(M2, bad)
    with pytest.raises(SequenceError, match="not a rule"):
        run_steps(M2, [seen[0], _s(1, "teleport")])


def test_a_check_trace_round_trips_and_is_not_an_allocation_stream(tmp_path):
    from offload_shim.trace.replay import replay
    p = write_trace(tmp_path / "c.trace", SEQ, {"kind": "crash", "signal": "SIGSEGV"},
                    {"plugin": "/x.so", "abi": "llvm"})
    t = read_trace(p)
    steps, outcome = trace_steps(t)
    assert steps == SEQ and outcome == {"kind": "crash", "signal": "SIGSEGV"}
    assert t.header["source"] == "check" and t.header["steps"] == len(SEQ)
    with pytest.raises(TraceError, match="offload-shim check"):
        replay(t)
    rp = _shim("replay", str(p), "--policy", "exact")
    assert rp.returncode == 2 and "--policy" in rp.stderr


def test_a_failure_the_steps_alone_do_not_repeat_is_written_as_check_saw_it(tmp_path):
    """A sequence that failed only after others in the same process: the trace's outcome
    is the failure check saw, marked ``reproduced: false`` -- not the rerun's pass."""
    from offload_shim.cli.check import write_finding_trace
    f = {"kind": "crash", "signal": "SIGSEGV", "message": "the child died of SIGSEGV",
         "sequence": SEQ, "shrunk": {"steps": SEQ, "reproduced": False},
         "outcome": {"kind": "passed", "message": "the sequence passed"}}
    p = write_finding_trace(f, str(tmp_path / "t.trace"), {"plugin": "/x.so"})
    steps, outcome = trace_steps(read_trace(p))
    assert steps == SEQ
    assert outcome == {"kind": "crash", "signal": "SIGSEGV",
                       "message": "the child died of SIGSEGV", "reproduced": False}
