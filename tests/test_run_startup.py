"""What `offload-shim run` imports at start-up: the embedded runtime of every program
imports neither logging nor pathlib (each pulls in a dozen modules: traceback, string,
urllib.parse, ipaddress...).  Checked from the interpreter's own import log
(``PYTHONPROFILEIMPORTTIME``) of a real run of a clang-16 program -- no timings here;
benchmarks/run_overhead.py measures the start-up."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import NEXTGEN16
from test_interpose_run import prog  # noqa: F401  (fixture: the clang-16 sample program)

import pytest


def _imports_per_interpreter(stderr: str) -> list[set[str]]:
    """The modules each interpreter imported, in start order (launcher, then the
    program's embedded one): one ``import time:`` table each."""
    out: list[set[str]] = []
    for line in stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        if "| imported package" in line:
            out.append(set())
            continue
        if out:
            out[-1].add(line.rsplit("|", 1)[1].strip())
    return out


@pytest.mark.skipif(not os.path.exists(NEXTGEN16), reason="LLVM 16 nextgen plugin not installed")
def test_the_embedded_runtime_imports_neither_logging_nor_pathlib(prog):  # noqa: F811
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    r = subprocess.run([sys.executable, "-P", "-m", "offload_shim.cli", "run", "--plugin",
                        str(NEXTGEN16), prog], capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 3, r.stderr[-3000:]      # omp_prog's own status, as under libomptarget
    assert "on_device 1" in r.stdout                  # its regions ran on the device
    tables = _imports_per_interpreter(r.stderr)
    assert len(tables) == 2, "expected the launcher's and the program's import logs"
    embedded = tables[1]
    assert "offload_shim.interposer.embed" in embedded       # it did start the runtime
    assert "offload_shim.plugins.plugin" in embedded      # ... and loaded the plugin
    assert not embedded & {"logging", "pathlib", "urllib.parse", "ipaddress"}, \
        sorted(embedded & {"logging", "pathlib", "urllib.parse", "ipaddress"})
