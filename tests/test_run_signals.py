"""Issue 28 item 6: a program under ``offload-shim run`` keeps its own signal
dispositions, exactly as without ``run``.

The embedded CPython must not leave its handlers behind: ``import _signal`` installs
Python's SIGINT handler wherever SIGINT is SIG_DFL, even after ``Py_InitializeEx(0)``
(CPython Modules/signalmodule.c, ``signal_get_set_handlers``), and a program then
swallowed Ctrl-C in host code (it went on and exited 0) or turned it into a
KeyboardInterrupt inside a target region.  ``tests/data/run/signals.c`` (clang-16) is
run as it is (libomptarget 16 and its x86_64 plugin) and under ``offload-shim run``; it
must end the same way, by the same signal (the ``run`` command repeats its program's
death by a signal on itself).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "tests" / "data" / "run" / "signals.c"


@pytest.fixture(scope="module")
def prog():
    import clang_toolchains as ct
    why = ct.CLANG16.missing()
    if why:
        pytest.skip(why)
    return str(ct.CLANG16.build(SRC))


def _cmd(exe, how, mode):
    if how == "real":
        return [exe, mode]
    return [sys.executable, "-P", "-m", "offload_shim.cli", "run", exe, mode]


def _run(exe, how, mode, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run(_cmd(exe, how, mode), capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.mark.parametrize("mode,sig", [("host", signal.SIGINT), ("target", signal.SIGINT),
                                      ("term", signal.SIGTERM), ("pipe", signal.SIGPIPE)])
@pytest.mark.parametrize("policy", ["default", "mandatory"])
def test_a_signal_the_program_raises_ends_it_as_without_run(prog, mode, sig, policy):
    env = {"OMP_TARGET_OFFLOAD": policy}
    real = _run(prog, "real", mode, env)
    ours = _run(prog, "ours", mode, env)
    assert real.returncode == -sig, real
    assert (ours.returncode, ours.stdout) == (real.returncode, real.stdout), ours.stderr
    assert "survived" not in ours.stdout
    assert "KeyboardInterrupt" not in ours.stderr and "fatal" not in ours.stderr


@pytest.mark.parametrize("mode", ["wait", "twait"])
def test_ctrl_c_from_outside_ends_the_program_at_once(prog, mode):
    """SIGINT to the foreground process group (what a terminal's Ctrl-C sends): the
    ``run`` command ignores it as a shell does, the program dies by it."""
    results = []
    for how in ("real", "ours"):
        p = subprocess.Popen(_cmd(prog, how, mode), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            lines = []
            for line in p.stdout:             # "offloaded 1", then "ready"
                lines.append(line)
                if line == "ready\n":
                    break
            assert lines[-1:] == ["ready\n"], (how, lines, p.stderr.read())
            os.killpg(p.pid, signal.SIGINT)
            out, err = p.communicate(timeout=20)   # the program sleeps for 60 s
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        results.append((p.returncode, "".join(lines) + out))
        assert "KeyboardInterrupt" not in err, err
    assert results[0][0] == -signal.SIGINT
    assert results[1] == results[0]


def test_the_program_sees_the_dispositions_it_would_see_without_run(prog):
    real = _run(prog, "real", "dispositions")
    ours = _run(prog, "ours", "dispositions")
    assert real.returncode == 0 and "2 DFL" in real.stdout.splitlines()
    assert ours.stdout == real.stdout, ours.stderr
