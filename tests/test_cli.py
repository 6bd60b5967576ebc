"""The command line: offload-shim info / demo (issue 2)."""

import json
import re
import os
import shutil
import subprocess
import sys

import pytest

from conftest import CLASSIC16, NEXTGEN16, NVPTX12, GCN12


def _row(stdout: str, label: str) -> str | None:
    m = re.search(rf"^{re.escape(label)}\s+(\S.*)$", stdout, re.M)
    return m.group(1) if m else None


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli(*args, timeout=300, cwd=None):
    exe = shutil.which("offload-shim", path=os.path.dirname(sys.executable))
    cmd = [exe] if exe else [sys.executable, "-m", "offload_shim.cli"]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


def test_info_json_lists_every_plugin():
    r = _cli("info", "--json")
    assert r.returncode == 0, r.stderr
    recs = json.loads(r.stdout)
    for rec in recs:
        assert {"path", "abi", "generation", "num_devices"} <= set(rec)
    bundled = [r for r in recs if r["source"] == "bundled"]
    assert {r["abi"] for r in bundled} == {"llvm", "gomp", "liboffload"}
    assert all(r["num_devices"] == 4 for r in bundled)
    by_name = {os.path.basename(r["path"]).split(".so")[0]: r for r in recs}
    if NVPTX12.exists() and GCN12.exists():
        assert by_name["libgomp-plugin-nvptx"]["num_devices"] == 0
        assert by_name["libgomp-plugin-nvptx"]["gomp_version"] == 1
        assert by_name["libgomp-plugin-gcn"]["num_devices"] == 0
    if NEXTGEN16.exists():
        rec = next(r for r in recs if r["path"].endswith("x86_64.nextgen.so.16"))
        assert rec["generation"] == "llvm16-nextgen" and rec["num_devices"] == 4
        assert "generic-elf-64bit" in rec["devices"][0]["info"]


def test_info_reports_unusable_files(tmp_path):
    bad = tmp_path / "libomptarget.rtl.fake.so"
    bad.write_bytes(b"junk")
    r = _cli("info", "--no-system", str(bad))
    assert r.returncode == 1                  # the plugin named on the command line is unusable
    assert "not usable" in r.stdout and "dlopen failed" in r.stdout


def test_demo_bundled_only():
    # from the repository root, as `make demo` runs it: the source tree there must not
    # shadow the installed package in the demo's child processes
    r = _cli("demo", "--no-system", cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("VERIFIED") == 3          # the three views of the bundled plugin
    assert _row(r.stdout, "osh_hostplugin (gomp, gomp-v1)") == "verified"
    assert _row(r.stdout, "osh_hostplugin (llvm, llvm16-nextgen)") == "verified"


def test_demo_real_plugins():
    if not (NEXTGEN16.exists() and CLASSIC16.exists()):
        pytest.skip("LLVM 16 x86_64 plugins not installed")
    r = _cli("demo")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _row(r.stdout, "x86_64.nextgen (llvm, llvm16-nextgen)") == "verified"
    assert _row(r.stdout, "x86_64 (llvm, llvm16-classic)") == "verified"


def test_demo_explicit_non_plugin_fails(tmp_path):
    bad = tmp_path / "x.so"
    bad.write_bytes(b"junk")
    r = _cli("demo", "--no-system", str(bad))
    assert r.returncode == 1
    assert "failed" in r.stdout
