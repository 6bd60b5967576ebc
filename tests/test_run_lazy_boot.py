"""The deferred boot of ``offload-shim run`` (``native/interposer.c`` boot_deferred,
``offload_shim/cli/run.py`` lazy_boot_ok): with no option or variable that makes the
registrations say anything, a clang-16 program's registration constructors are only
recorded and CPython starts at its first construct, where the recorded requires and
registrations are delivered in order.  A program that never offloads then never starts
the embedded interpreter; everything else stays as libomptarget 16 does it (the same
stdout, stderr and exit status), including the fatal error of a second, different
``requires`` before ``main``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from offload_shim.cli.run import lazy_boot_ok

CLANG_FLAGS = ["-O1", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-Xoffload-linker",
               "-Bsymbolic", "-Wl,-rpath,/usr/lib/llvm-16/lib"]

NO_CONSTRUCT = r"""
#include <stdio.h>
#pragma omp declare target
int unused = 0;
#pragma omp end declare target
int main(void) { printf("main\n"); return 4; }
"""

USM = r"""
#include <stdio.h>
#pragma omp requires unified_shared_memory
int main(void) {
  int x = 1;
  printf("before\n");
#pragma omp target map(to: x)
  { x = 5; }                     /* seen by the host only under unified shared memory */
  printf("x %d\n", x);
  return 0;
}
"""

USM_MAIN = r"""
#include <stdio.h>
#pragma omp requires unified_shared_memory
int other(void);
int main(void) {
  int x = 1;
  printf("before\n");
#pragma omp target map(tofrom: x)
  { x = 5; }
  printf("x %d %d\n", x, other());
  return 0;
}
"""

PLAIN_OTHER = r"""
int other(void) {
  int y = 2;
#pragma omp target map(tofrom: y)
  { y = 7; }
  return y;
}
"""


def _build(tmp_path, name, *sources):
    from test_interpose import _clang
    from offload_shim.cli.run import libpython_path
    clang = _clang()
    try:
        libpython_path()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    files = []
    for i, src in enumerate(sources):
        f = tmp_path / f"{name}_{i}.c"
        f.write_text(src)
        files.append(str(f))
    exe = tmp_path / name
    proc = subprocess.run([clang, *CLANG_FLAGS, *files, "-o", str(exe)], capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        pytest.fail(proc.stderr[-2000:])
    return str(exe)


def _run(cmd, **env_extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LIBOMPTARGET_", "OMP_TARGET_OFFLOAD", "OFFLOAD_SHIM_EMBED"))}
    env.update(env_extra)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def _ours(exe, *opts, **env_extra):
    return _run([sys.executable, "-P", "-m", "offload_shim.cli", "run", *opts, exe],
                **env_extra)


def _interpreters(stderr: str) -> int:
    """How many interpreters printed an import-time table (PYTHONPROFILEIMPORTTIME)."""
    return sum(1 for ln in stderr.splitlines()
               if ln.startswith("import time:") and "| imported package" in ln)


def test_lazy_boot_ok_only_where_registrations_say_nothing():
    assert lazy_boot_ok({})
    assert lazy_boot_ok({"OMP_TARGET_OFFLOAD": " Default "}, policy="default")
    assert not lazy_boot_ok({}, report="r.json")
    assert not lazy_boot_ok({}, record="t.trace")
    assert not lazy_boot_ok({}, gomp_host_device=True)
    assert not lazy_boot_ok({}, policy="mandatory")
    assert not lazy_boot_ok({}, policy="disabled")
    assert not lazy_boot_ok({"OMP_TARGET_OFFLOAD": "MANDATORY"})
    assert not lazy_boot_ok({"OMP_TARGET_OFFLOAD": "disabled"})
    assert not lazy_boot_ok({"LIBOMPTARGET_INFO": "0"})
    assert not lazy_boot_ok({"LIBOMPTARGET_NEXTGEN_PLUGINS": "false"})


def test_run_environment_sets_the_lazy_variable_by_the_rule():
    from offload_shim.cli.run import run_environment
    assert run_environment(base={})["OFFLOAD_SHIM_EMBED_LAZY"] == "1"
    for kw in ({"report": "r.json"}, {"record": "t"}, {"policy": "mandatory"},
               {"gomp_host_device": True}):
        env = run_environment(base={"OFFLOAD_SHIM_EMBED_LAZY": "1"}, **kw)
        assert "OFFLOAD_SHIM_EMBED_LAZY" not in env, kw
    assert "OFFLOAD_SHIM_EMBED_LAZY" not in run_environment(base={"LIBOMPTARGET_DEBUG": "1"})


def test_a_program_without_a_construct_never_starts_the_embedded_runtime(tmp_path):
    exe = _build(tmp_path, "noconstruct", NO_CONSTRUCT)
    real = _run([exe])
    lazy = _ours(exe, PYTHONPROFILEIMPORTTIME="1")
    assert (lazy.returncode, lazy.stdout) == (real.returncode, real.stdout) == (4, "main\n")
    assert _interpreters(lazy.stderr) == 1          # the launcher's only
    report = tmp_path / "r.json"
    eager = _ours(exe, "--report", str(report), PYTHONPROFILEIMPORTTIME="1")
    assert (eager.returncode, eager.stdout) == (4, "main\n")
    assert _interpreters(eager.stderr) == 2         # the runtime started at registration
    assert "plugins" in json.loads(report.read_text())


def test_the_recorded_requires_reaches_the_runtime_before_the_first_construct(tmp_path):
    """Unified shared memory, declared before main and recorded only, decides the first
    construct's mapping: ``map(to:)`` of a variable the region writes is seen by the
    host (as under libomptarget 16) only when the runtime got the requires."""
    exe = _build(tmp_path, "usm", USM)
    real = _run([exe])
    lazy = _ours(exe)
    eager = _ours(exe, "--report", str(tmp_path / "r.json"))
    assert real.stdout == "before\nx 5\n", real.stderr
    for ours in (lazy, eager):
        assert (ours.returncode, ours.stdout, ours.stderr) == (0, real.stdout, ""), ours.stderr


def test_a_second_different_requires_stops_the_program_before_main(tmp_path):
    exe = _build(tmp_path, "usm2", USM_MAIN, PLAIN_OTHER)
    real = _run([exe])
    lazy = _ours(exe)
    fatal = ("Libomptarget fatal error 1: '#pragma omp requires unified_shared_memory' "
             "not used consistently!\n")
    assert real.returncode == -6 and real.stdout == "" and fatal in real.stderr
    assert (lazy.returncode, lazy.stdout, lazy.stderr) == (-6, "", fatal)
