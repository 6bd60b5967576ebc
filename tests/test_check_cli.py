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


_EXIT_IN_INIT = r"""
#include <stdint.h>
#include <stdlib.h>
int32_t __tgt_rtl_init_plugin(void) { exit(0); }
int32_t __tgt_rtl_deinit_plugin(void) { return 0; }
int32_t __tgt_rtl_deinit_device(int32_t d) { return 0; }
int32_t __tgt_rtl_is_valid_binary(void *img) { return 1; }
int32_t __tgt_rtl_number_of_devices(void) { return 1; }
int32_t __tgt_rtl_init_device(int32_t d) { return 0; }
void *__tgt_rtl_load_binary(int32_t d, void *img) { return 0; }
void *__tgt_rtl_data_alloc(int32_t d, int64_t n, void *h, int32_t k) { return 0; }
int32_t __tgt_rtl_data_submit(int32_t d, void *t, void *h, int64_t n) { return 1; }
int32_t __tgt_rtl_data_retrieve(int32_t d, void *h, void *t, int64_t n) { return 1; }
int32_t __tgt_rtl_data_delete(int32_t d, void *t, int32_t k) { return 1; }
int32_t __tgt_rtl_launch_kernel(int32_t d, void *e, void **a, int64_t *o, void *k,
                                void *i) { return 1; }
"""


def test_the_first_sequence_always_registers_and_initialises(tmp_path):
    """A plugin that calls exit() in init_plugin is found even by a 3-sequence run of
    1 step, which hypothesis alone fills with steps that never reach the plugin (issue
    32): every check starts with register, init, alloc, submit, launch, retrieve."""
    import shutil
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    (tmp_path / "exit_in_init.c").write_text(_EXIT_IN_INIT)
    so = tmp_path / "libexit_in_init.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(tmp_path / "exit_in_init.c")],
                   check=True, timeout=120)
    cp = _cli(str(so), "--max-examples", "3", "--steps", "1", "--seed", "1", "--json")
    assert cp.returncode == 1, cp.stdout + cp.stderr
    res = json.loads(cp.stdout)
    assert [f["kind"] for f in res["findings"]] == ["error"]
    assert "register sample1" in res["findings"][0]["steps"]
