"""Loading and classifying plugins; clear errors for what is not a plugin."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import offload_shim as osh
from offload_shim.plugins import discovery
from offload_shim.plugins.loader import load_plugin

from conftest import GCN12, NVPTX12, need


def test_bundled_plugin_is_nextgen_shaped_and_also_gomp(bundled_path):
    llvm = load_plugin(bundled_path)
    gomp = load_plugin(bundled_path, abi="gomp")
    assert (llvm.abi, llvm.generation, llvm.bundled) == ("llvm", "llvm16-nextgen", True)
    assert (gomp.abi, gomp.generation, gomp.version) == ("gomp", "gomp-v1", 1)
    assert load_plugin(bundled_path) is llvm          # once per process (cuda-python #1011)


def test_llvm16_plugins_classify(nextgen16, classic16):
    assert load_plugin(nextgen16).generation == "llvm16-nextgen"
    assert load_plugin(classic16).generation == "llvm16-classic"


def test_llvm14_plugin_classifies(llvm14):
    p = load_plugin(llvm14)
    assert p.generation == "llvm14"
    assert p.has("run_target_team_region") and not p.has("init_plugin")


def test_every_installed_plugin_loads_or_says_why():
    paths = discovery.system_plugin_paths()
    if not paths:
        pytest.skip("no system plugins installed")
    for path in paths:
        try:
            p = load_plugin(path)
        except osh.PluginDlopenError as exc:
            assert exc.dlerror            # e.g. a missing vendor library, spelled out
            continue
        assert p.abi in ("llvm", "gomp", "liboffload")


def test_missing_file(tmp_path):
    with pytest.raises(osh.PluginNotFoundError) as ei:
        load_plugin(tmp_path / "nope.so")
    assert isinstance(ei.value, FileNotFoundError)
    assert "nope.so" in str(ei.value)


def test_non_elf_file(tmp_path):
    f = tmp_path / "junk.so"
    f.write_bytes(b"this is not an ELF file" * 10)
    with pytest.raises(osh.PluginDlopenError) as ei:
        load_plugin(f)
    assert ei.value.dlerror


def test_shared_object_that_is_not_a_plugin(sample_path):
    with pytest.raises(osh.NotAPluginError) as ei:
        load_plugin(sample_path)
    assert "__tgt_rtl_load_binary" in str(ei.value)
    assert "__tgt_rtl_data_alloc" in ei.value.missing


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_dlopen_failure_names_the_missing_dependency(tmp_path):
    dep = tmp_path / "libgone.so"
    src = tmp_path / "p.c"
    src.write_text("int gone(void){return 1;}\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(dep), str(src)], check=True)
    user = tmp_path / "user.c"
    user.write_text("int gone(void); int __tgt_rtl_number_of_devices(void){return gone();}\n")
    lib = tmp_path / "libplugin.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(user), f"-L{tmp_path}",
                    "-lgone"], check=True)
    dep.unlink()
    with pytest.raises(osh.PluginDlopenError) as ei:
        load_plugin(lib)
    assert "libgone.so" in ei.value.dlerror


def test_directory_is_refused(tmp_path):
    with pytest.raises(osh.NotAPluginError):
        load_plugin(tmp_path)


def test_bad_abi_argument(bundled_path):
    with pytest.raises(ValueError):
        load_plugin(bundled_path, abi="cuda")


def test_discovery_lists_bundled_and_env(tmp_path, bundled_path):
    cands = discovery.candidates(env={discovery.ENV_VAR: bundled_path}, system=False)
    assert [c.source for c in cands] == ["env"]          # deduplicated against bundled
    cands = discovery.candidates(env={}, system=False)
    assert cands[-1].source == "bundled"


def test_gcc12_plugins_report_zero_devices_without_gpu():
    need(NVPTX12, "GCC 12 nvptx plugin")
    need(GCN12, "GCC 12 gcn plugin")
    if os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/kfd"):
        pytest.skip("a GPU driver is present")
    with osh.Runtime([str(NVPTX12), str(GCN12)]) as rt:
        assert rt.devices == []


def test_recorded_roots_are_read_and_a_set_variable_wins(tmp_path, monkeypatch):
    """scripts/setup.sh records where it unpacked the runtimes (``<venv>/
    offload_shim-roots.env``); discovery reads it for a variable that is not set, and a
    variable set (even to "") wins."""
    (tmp_path / discovery.ROOTS_FILE).write_text(
        "# comment\nOFFLOAD_SHIM_LLVM14_ROOT=/opt/x14\nOFFLOAD_SHIM_OTHER=/no\n"
        "OFFLOAD_SHIM_LLVM19_ROOT=\nnot a line\n")
    assert discovery.recorded_roots(str(tmp_path)) == {discovery.LLVM14_ROOT_VAR: "/opt/x14"}
    assert discovery.recorded_roots(str(tmp_path / "none")) == {}
    monkeypatch.setattr(discovery, "recorded_roots", lambda prefix=None: {
        discovery.LLVM14_ROOT_VAR: "/opt/x14"})
    assert discovery.root(discovery.LLVM14_ROOT_VAR, {}) == "/opt/x14"
    assert discovery.root(discovery.LLVM14_ROOT_VAR, {discovery.LLVM14_ROOT_VAR: "/y"}) == "/y"
    assert discovery.root(discovery.LLVM14_ROOT_VAR, {discovery.LLVM14_ROOT_VAR: ""}) is None
    assert discovery.root(discovery.LLVM19_ROOT_VAR, {}) is None


def test_info_in_a_plain_shell_lists_what_make_demo_lists():
    """After the set-up, ``offload-shim info`` without the variables the Makefile exports
    lists the same plugin views and host runtimes as with them (issue 32)."""
    import json
    import sys
    root = Path(__file__).resolve().parent.parent
    make_vars = {discovery.LLVM14_ROOT_VAR: root / ".cache/llvm14",
                 discovery.LIBOFFLOAD_ROOT_VAR: root / ".cache/liboffload22",
                 discovery.LLVM19_ROOT_VAR: root / ".cache/llvm19"}
    if not any(p.is_dir() for p in make_vars.values()):
        pytest.skip("scripts/setup.sh unpacked no runtime into .cache (no apt-get download)")
    plain = {k: v for k, v in os.environ.items() if k not in make_vars}

    def listing(env):
        p = subprocess.run([sys.executable, "-m", "offload_shim.cli", "info", "--json",
                            "--no-devices"], env=env, capture_output=True, text=True,
                           timeout=300, cwd="/")
        assert p.returncode in (0, 1), p.stderr
        return sorted((os.path.realpath(r["path"]), r.get("abi") or "", r.get("generation")
                       or "") for r in json.loads(p.stdout))

    with_vars = listing({**plain, **{k: str(v) for k, v in make_vars.items()}})
    assert any(".cache" in path for path, _, _ in with_vars)
    assert listing(plain) == with_vars
