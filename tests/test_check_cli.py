"""``offload-shim check`` and ``check --probe-misuse`` (issue 4)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from helpers import (SEGV_IN_INIT_PLUGIN, build_shared, build_wrapped_host_plugin,
                     stub_llvm_plugin)


def _cli(*args, timeout=600, cwd=None):
    # a finding is written as a trace to ./offload-shim-check.trace: give those a cwd
    return subprocess.run([sys.executable, "-m", "offload_shim.cli", "check", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


@pytest.mark.parametrize("abi", ["llvm", "gomp"])
def test_check_bundled_finds_nothing(abi):
    cp = _cli("bundled", "--abi", abi, "--max-examples", "40", "--steps", "15", "--json")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    res = json.loads(cp.stdout)
    assert res["ok"] and res["findings"] == [] and res["examples"] >= 40


def test_check_hang_is_a_finding():
    """A run that does not finish inside --timeout is reported as a hang
    (exit 1) with the steps that were running."""
    cp = _cli("bundled", "--max-examples", "1000000", "--timeout", "5", "--json")
    assert cp.returncode == 1
    res = json.loads(cp.stdout)
    assert [f["kind"] for f in res["findings"]] == ["hang"]


def test_check_text_output_and_seed():
    cp = _cli("bundled", "--max-examples", "10", "--steps", "5", "--seed", "7")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "nothing found" in cp.stdout and "seed 7" in cp.stdout


def test_check_not_a_plugin(tmp_path):
    bad = tmp_path / "libnothing.so"
    bad.write_bytes(b"not an ELF")
    cp = _cli(str(bad))
    assert cp.returncode == 2 and "PluginDlopenError" in cp.stderr


@pytest.mark.parametrize("abi", ["llvm", "gomp"])
def test_probe_misuse_bundled_answers_every_misuse_with_an_error(abi):
    cp = _cli("bundled", "--abi", abi, "--probe-misuse", "--json")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    res = json.loads(cp.stdout)
    assert res["ok"] and len(res["rows"]) >= 13
    for row in res["rows"]:
        if row["outcome"].startswith("void"):        # GOMP run: no error channel,
            assert row["detail"].startswith("violations:"), row   # but refused and logged
        else:
            assert row["outcome"].startswith(("error", "returned")), row


@pytest.mark.llvm16
def test_probe_misuse_nextgen16_crash_is_a_row(nextgen16):
    """docs/references.md, plugin contracts: nextgen segfaults on data_alloc before
    init_device and accepts init_device(N)."""
    cp = _cli(nextgen16, "--probe-misuse", "--json")
    assert cp.returncode == 1
    rows = {r["probe"]: r for r in json.loads(cp.stdout)["rows"]}
    assert rows["data_alloc_before_init_device"]["outcome"] == "crash SIGSEGV in data_alloc"
    assert rows["init_device_out_of_range"]["outcome"] == "accepted (0)"
    assert rows["load_binary_garbage"]["outcome"] == "error (NULL)"


_EXIT_IN_INIT = stub_llvm_plugin("exit(0);")


def test_the_first_sequence_always_registers_and_initialises(tmp_path):
    """A plugin that calls exit() in init_plugin is found even by a 3-sequence run of
    1 step, which hypothesis alone fills with steps that never reach the plugin (issue
    32): every check starts with register, init, alloc, submit, launch, retrieve."""
    so = build_shared(tmp_path, "libexit_in_init.so", _EXIT_IN_INIT)
    cp = _cli(str(so), "--max-examples", "3", "--steps", "1", "--seed", "1", "--json",
              cwd=tmp_path)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    res = json.loads(cp.stdout)
    assert [f["kind"] for f in res["findings"]] == ["error"]
    assert "register sample1" in res["findings"][0]["steps"]


# -- how a child ended (issue 28 item 6) ----------------------------------------------


EXIT_IN = {"init_plugin": "int32_t __tgt_rtl_init_plugin(void)",
           "init_device": "int32_t __tgt_rtl_init_device(int32_t id)"}


def _exit_plugin(tmp_path, entry):
    """The bundled plugin with ``__tgt_rtl_<entry>`` replaced by one that calls exit(3)."""
    wrapper = ("#include <stdint.h>\n#include <stdlib.h>\n"
               f"__attribute__((visibility(\"default\"))) {EXIT_IN[entry]} "
               "{ exit(3); }\n")
    return build_wrapped_host_plugin(tmp_path, f"libomptarget.rtl.exit_{entry}.so", wrapper,
                                     (entry,))


@pytest.mark.parametrize("entry", sorted(EXIT_IN))
def test_a_short_check_finds_a_plugin_that_exits(tmp_path, entry):
    """The first sequence registers, initialises and launches before its random steps
    (issue 32): exit() in init_device went unnoticed by 3 sequences of 5 steps."""
    plugin = _exit_plugin(tmp_path, entry)
    cp = _cli(plugin, "--abi", "llvm", "--max-examples", "3", "--steps", "5", "--json",
              cwd=tmp_path)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    res = json.loads(cp.stdout)
    assert [f["kind"] for f in res["findings"]] == ["error"], res
    assert "exited 3 without a result" in res["findings"][0]["message"]


@pytest.mark.parametrize("rc,kind,sig", [
    (-signal.SIGSEGV, "crash", "SIGSEGV"), (-signal.SIGABRT, "crash", "SIGABRT"),
    (-signal.SIGINT, "interrupted", "SIGINT"), (-signal.SIGTERM, "interrupted", "SIGTERM"),
    (-signal.SIGHUP, "interrupted", "SIGHUP"), (-signal.SIGKILL, "interrupted", "SIGKILL"),
    (-signal.SIGXFSZ, "environment", "SIGXFSZ"), (130, "interrupted", "SIGINT"),
    (143, "interrupted", "SIGTERM"), (2, "usage", None), (3, "error", None)])
def test_child_end_names_what_happened(rc, kind, sig):
    from offload_shim.cli.check import child_end
    end = child_end(rc)
    assert end["kind"] == kind and end.get("signal") == sig, end
    if sig:
        assert sig in end["message"]
    if rc == -signal.SIGKILL:
        assert "out-of-memory" in end["message"]


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_child_signalled_from_outside_is_reported_as_interrupted(sig):
    """The same signal is the same entry every time: the signal's own name, kind
    ``interrupted``, never a crash, a FlakyFailure or "exited 143" against the plugin."""
    p = subprocess.Popen([sys.executable, "-m", "offload_shim.cli", "check", "bundled",
                          "--max-examples", "100000", "--steps", "10", "--timeout", "120",
                          "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        deadline = time.monotonic() + 60
        kids = []
        while not kids and time.monotonic() < deadline:   # the sequences' child
            kids = [k for k in _children(p.pid) if b"--child" in _cmdline(k)]
            time.sleep(0.1)
        assert kids, "the check started no child"
        time.sleep(3)                          # inside its sequences by now
        os.kill(kids[0], sig)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 1, err
    res = json.loads(out)
    assert [(f["kind"], f.get("signal")) for f in res["findings"]] == \
        [("interrupted", signal.Signals(sig).name)], res
    assert "FINDING" not in out


def test_a_full_tmpdir_is_the_environment_not_the_plugin(tmp_path):
    """TMPDIR on a full file system (a private tmpfs, in a mount namespace of its own):
    ``environment``, printed as STOPPED, never an InvalidImageError finding or a
    traceback of the parent."""
    if shutil.which("unshare") is None or os.geteuid() != 0 or subprocess.run(
            ["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs root and unshare -m for a private tmpfs")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = (f"mount -t tmpfs -o size=512k tmpfs {mnt} && "
              f"dd if=/dev/zero of={mnt}/fill bs=1k count=508 2>/dev/null; "
              f"TMPDIR={mnt} exec {sys.executable} -m offload_shim.cli check bundled "
              "--max-examples 5 --steps 5")
    cp = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                        text=True, timeout=600, cwd=tmp_path)   # (a finding's trace goes there)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "STOPPED  environment: the temporary directory" in cp.stdout, cp.stdout
    assert "FINDING" not in cp.stdout and "Traceback" not in cp.stderr, cp.stderr


def test_a_child_that_crashes_counts_the_sequence_it_died_in(tmp_path):
    """The child dies before writing its result: the sequences it reported started are
    the ones run (it said 'ran 0 sequences' above a crash in the first one)."""
    so = build_shared(tmp_path, "libomptarget.rtl.segv.so", SEGV_IN_INIT_PLUGIN)
    cp = _cli(so, "--max-examples", "3", "--steps", "2", "--no-shrink", "--json",
              cwd=tmp_path)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    res = json.loads(cp.stdout)
    assert [f["kind"] for f in res["findings"]] == ["crash"], res
    assert res["examples"] == 1, res
    cp = _cli(so, "--max-examples", "3", "--steps", "2", "--no-shrink", cwd=tmp_path)
    assert "ran      1 sequence of up to 2 steps" in cp.stdout, cp.stdout
