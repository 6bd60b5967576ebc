"""``offload-shim check`` and ``check --probe-misuse`` (issue 4)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "offload_shim.cli", "check", *args],
                          capture_output=True, text=True, timeout=timeout)


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
