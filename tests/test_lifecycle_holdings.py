"""Resources per cycle: a host that ``dlopen``\\ s an offload library, runs a target
region and ``dlclose``\\ s it, again and again, under ``offload-shim run`` (the
differential side of such hosts -- every cycle offloads, every exit is clean -- is
tests/test_lifecycle.py).

Every cycle registers and unregisters an image (libomptarget 16 ``__tgt_register_lib``
/ ``__tgt_unregister_lib``) on a runtime that stays up for the whole process.  What the
Python side holds must not grow with the cycles: the host (a Python program, so that it
can look at the embedded runtime it shares an interpreter with) counts it with
:func:`offload_shim.interposer.holdings.holdings` after a warm-up and again 200 cycles
later, on the bundled plugin and on the LLVM 16 x86_64 nextgen plugin.  Counts only: the
memory and time a cycle costs against libomptarget 16 are the benchmark's
(``offload-shim bench --workloads lifecycle``, docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import NEXTGEN16

WARMUP = 100            # more than leftovers._REMEMBERED: that list is full by then
CYCLES = 200

LIB_SRC = r"""
#include <omp.h>
#pragma omp declare target
long osh_scale = 3;
#pragma omp end declare target
int where(int x) {
  int dev = 0, y = 0;
#pragma omp target map(from : dev, y)
  { dev = !omp_is_initial_device(); y = (int)osh_scale * x; }
  return y == 3 * x ? dev : -1;
}
"""

HOST = textwrap.dedent("""
    import ctypes, _ctypes, json, os, sys
    path, warm, n = os.path.abspath(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

    def cycle(i):
        lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)   # registers
        rc = lib.where(i)                                           # one region
        _ctypes.dlclose(lib._handle)                                # unregisters
        return rc

    from offload_shim.interposer import embed
    from offload_shim.interposer.holdings import holdings
    rcs = [cycle(i) for i in range(warm)]
    first = holdings(embed._state["interposer"])
    rcs += [cycle(warm + i) for i in range(n)]
    last = holdings(embed._state["interposer"])
    print(json.dumps({"rcs": rcs, "first": first, "last": last}))
""")


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    from test_interpose import _clang
    from offload_shim.cli.run import libpython_path
    clang = _clang()
    try:
        libpython_path()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    d = tmp_path_factory.mktemp("lifecycle")
    (d / "lib.c").write_text(LIB_SRC)
    cmd = [clang, "-O1", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-shared",
           "-fPIC", "-Xoffload-linker", "-Bsymbolic", "-Wl,-Bsymbolic", str(d / "lib.c"),
           "-o", str(d / "lib.so")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        # the toolchain is there (_clang): this test's own library must build
        pytest.fail(f"cannot build the library: {proc.stderr[-2000:]}")
    (d / "host.py").write_text(HOST)
    return d


def _cycles(lib, opts):
    env = dict(os.environ, OMP_TARGET_OFFLOAD="mandatory")
    cmd = [sys.executable, "-P", "-m", "offload_shim.cli", "run", *opts, sys.executable,
           str(lib / "host.py"), str(lib / "lib.so"), str(WARMUP), str(CYCLES)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def _plugin_opts(which):
    if which == "bundled":
        from offload_shim.hostplugin import bundled_plugin_path
        return ["--bundled", "--plugin", str(bundled_plugin_path())]
    if not Path(NEXTGEN16).exists():
        pytest.skip(f"{NEXTGEN16} not installed (libomp5-16)")
    return ["--plugin", str(NEXTGEN16)]


@pytest.mark.parametrize("which", ["bundled", "nextgen"])
def test_nothing_grows_per_cycle(lib, which):
    out = _cycles(lib, _plugin_opts(which))
    # every cycle offloaded (1 = ran on a device, with the declare-target global's value)
    assert out["rcs"] == [1] * (WARMUP + CYCLES)
    first, last = out["first"], out["last"]
    assert set(first) == set(last)
    grown = {k: (first[k], last[k]) for k in first
             if k != "gc_objects" and last[k] != first[k]}
    assert not grown, grown
    # between two cycles nothing of a library is left: no registration, no image, no
    # bytes, no row (the runtime and its device stay up: libomptarget 16 keeps them too)
    for key in ("libraries", "registered", "images", "image_bytes", "loaded_images",
                "address_map_rows", "mapping_rows", "retired_rows", "plans",
                "plugin_keepalive", "copies_pending"):
        assert last[key] == 0, (key, last)
    # the catch-all: a leak of one object per cycle would show as CYCLES more; a
    # collection's timing may leave a handful either way
    assert last["gc_objects"] - first["gc_objects"] < CYCLES // 10, (first, last)
