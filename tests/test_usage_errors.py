"""A user's mistake is a usage error, never a finding against a plugin; what the user
named must be usable; typed errors that say what was expected; command-line
conventions (--version, --json help, progress on stderr, py.typed).

Commands run in a child process (``python -P -m offload_shim.cli``) from a scratch
directory, so the installed package is what is tested.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import offload_shim as osh
from offload_shim.errors import (DeviceNotFoundError, PluginDlopenError, PluginNotFoundError,
                                 WrongArchitectureError)

from conftest import NEXTGEN16

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args, cwd, env_extra=None, timeout=300):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-P", "-m", "offload_shim.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def _usage_error(proc, *needles):
    """Exit 2, stderr exactly one ``offload-shim: error: ...`` line holding every
    needle, nothing reported as a finding, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("offload-shim: error: "), proc.stderr
    assert "FINDING" not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# -- bad option values and configuration ------------------------------------------------

@pytest.mark.parametrize("option, value", [("--max-examples", "-5"), ("--max-examples", "0"),
                                           ("--steps", "0"), ("--steps", "x"),
                                           ("--timeout", "-1"), ("--timeout", "nan"),
                                           ("--shrink-timeout", "0")])
def test_check_bad_option_is_a_usage_error(tmp_path, option, value):
    p = _cli("check", "bundled", option, value, cwd=tmp_path)
    _usage_error(p, option, value)


@pytest.mark.parametrize("value", ["abc", "-1", "12abc", str(1 << 70)])
def test_check_bad_threshold_variable_is_a_usage_error(tmp_path, value):
    p = _cli("check", "bundled", "--max-examples", "2", "--steps", "2", cwd=tmp_path,
             env_extra={"LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD": value})
    _usage_error(p, "LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD", repr(value))


def test_check_bad_pool_debug_variable_is_a_usage_error(tmp_path):
    p = _cli("check", "bundled", cwd=tmp_path, env_extra={"OFFLOAD_SHIM_POOL_DEBUG": "bogus"})
    _usage_error(p, "OFFLOAD_SHIM_POOL_DEBUG")


def test_demo_bad_timeout_and_variable(tmp_path):
    _usage_error(_cli("demo", "--timeout", "-1", cwd=tmp_path), "--timeout", "-1")
    _usage_error(_cli("demo", "--timeout", "0", cwd=tmp_path), "--timeout")
    _usage_error(_cli("demo", "--no-system", cwd=tmp_path,
                      env_extra={"LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD": "x"}),
                 "LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD")


def test_unknown_command_and_option_are_one_line(tmp_path):
    _usage_error(_cli("chekc", cwd=tmp_path), "chekc")
    _usage_error(_cli("info", "--no-such-option", cwd=tmp_path), "--no-such-option")


def test_check_of_a_missing_plugin_is_a_usage_error(tmp_path):
    _usage_error(_cli("check", tmp_path / "nope.so", cwd=tmp_path), "nope.so",
                 "PluginNotFoundError")


@pytest.mark.parametrize("cmd", ["run", "compare"])
def test_run_and_compare_refuse_an_empty_plugin_path_in_one_line(tmp_path, cmd):
    """``--plugin=`` (an empty path, a shell variable left unset): exit 2 and one line,
    before the program runs (it was a ValueError traceback and exit 1)."""
    proc = _cli(cmd, "--plugin=", "/bin/echo", "ran", cwd=tmp_path, timeout=120)
    _usage_error(proc, "--plugin", "empty plugin path")
    assert "ran" not in proc.stdout


# -- run: a program that cannot be started ends it as env / execvp do -------------------

def _program(tmp_path: Path, case: str) -> str:
    """What ``offload-shim run`` is given: a path (or a bare name looked up in PATH)."""
    p = tmp_path / case
    if case == "not-executable":
        p.write_text("echo ran\n")
    elif case == "directory":
        p.mkdir()
    elif case == "symlink-loop":
        (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
        (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
        return str(tmp_path / "loop-a")
    elif case == "not-a-directory":
        p.write_text("")
        return str(p / "prog")
    elif case == "missing-in-path":
        return "osh-no-such-program-anywhere"
    elif case == "bad-interpreter":
        p.write_text("#!/nonexistent/interpreter\n")
        p.chmod(0o755)
    elif case == "no-shebang":                 # ENOEXEC: execvp hands it to /bin/sh
        p.write_text("echo ran \"$1\"\n")
        p.chmod(0o755)
    elif case == "empty-name":                 # once a ValueError traceback (posix_spawnp)
        return ""
    return str(p)


RUN_START = {"not-executable": 126, "directory": 126, "symlink-loop": 126,
             "not-a-directory": 126, "missing": 127, "missing-in-path": 127,
             "bad-interpreter": 127, "no-shebang": 0, "empty-name": 127}


@pytest.mark.parametrize("case", sorted(RUN_START))
def test_run_of_a_program_that_cannot_start_exits_like_env(tmp_path, case):
    """126 found but not executable, 127 not found (POSIX shell "Exit Status for
    Commands"; coreutils env/nice/timeout), a script without ``#!`` run by /bin/sh
    (glibc ``execvp``): the same status as ``env PROGRAM`` on this machine."""
    prog = _program(tmp_path, case)
    ref = subprocess.run(["env", prog, "arg"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=60)
    ours = _cli("run", prog, "arg", cwd=tmp_path, timeout=120)
    assert ours.returncode == ref.returncode == RUN_START[case], (ours, ref)
    assert ours.stdout == ref.stdout
    if RUN_START[case]:
        lines = ours.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in ours.stderr, ours.stderr
        shown = prog or repr(prog)
        assert lines[0].startswith(f"offload-shim run: cannot execute {shown}: "), lines
    else:
        assert ours.stdout == "ran arg\n"


def test_run_passes_the_programs_signal_through_without_a_line_of_its_own(tmp_path):
    """``run`` is the exception to "one line, 143 on SIGTERM" (README): as after
    ``exec``, a program killed by a signal ends ``run`` by the same signal, stderr
    the program's own; SIGTERM sent to ``run`` goes to the program, whose handler
    decides the status (safety/children.py ``run_program``)."""
    killed = ["sh", "-c", "echo before; kill -TERM $$; echo after"]
    ref = subprocess.run(killed, capture_output=True, text=True, timeout=60)
    ours = _cli("run", *killed, cwd=tmp_path, timeout=120)
    assert ref.returncode == ours.returncode == -signal.SIGTERM, (ref, ours)
    assert ours.stdout == ref.stdout == "before\n" and ours.stderr == ref.stderr == ""

    script = tmp_path / "trap.sh"
    # ready a second after it started (run has passed SIGTERM on since Popen returned);
    # bounded, so that nothing is left running if the test fails
    script.write_text("trap 'echo got TERM; exit 7' TERM\nsleep 1\necho ready\n"
                      "i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; exit 9\n")
    proc = subprocess.Popen([sys.executable, "-P", "-m", "offload_shim.cli", "run", "sh",
                             str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path)
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 7 and out == "got TERM\n" and err == "", (proc.returncode,
                                                                          out, err)


def test_run_passes_sigkill_through(tmp_path):
    """A program that dies of SIGKILL (the OOM killer, ``kill -9``) ends ``run`` by
    SIGKILL, as after ``exec``: SIGKILL's disposition cannot be set (``signal.signal``
    raises EINVAL), which once made ``run`` say "cannot execute PROG: Invalid argument"
    and exit 126 after the program had run."""
    killed = ["sh", "-c", "echo before; kill -KILL $$; echo after"]
    ref = subprocess.run(killed, capture_output=True, text=True, timeout=60)
    ours = _cli("run", *killed, cwd=tmp_path, timeout=120)
    assert ref.returncode == ours.returncode == -signal.SIGKILL, (ref, ours)
    assert ours.stdout == ref.stdout == "before\n" and ours.stderr == ref.stderr == ""


# -- what the user named must be usable --------------------------------------------------

def test_info_exits_nonzero_when_a_named_plugin_is_unusable(tmp_path, bundled_path):
    bad = tmp_path / "libomptarget.rtl.bogus.so"
    bad.write_bytes(b"not a library")
    p = _cli("info", "--no-system", "--no-devices", bad, cwd=tmp_path)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "not usable" in p.stdout and str(bad) in p.stderr
    p = _cli("info", "--no-system", "--no-devices", "--json", bad, cwd=tmp_path)
    assert p.returncode == 1
    assert any(r["path"] == str(bad) and r["abi"] is None for r in json.loads(p.stdout))
    p = _cli("info", "--no-system", "--no-devices", bundled_path, cwd=tmp_path)
    assert p.returncode == 0, (p.stdout, p.stderr)


def _foreign_copy(src: str, dst: Path, machine: int = 183) -> Path:
    """A copy of a plugin with e_machine patched (183 = EM_AARCH64)."""
    data = bytearray(Path(src).read_bytes())
    struct.pack_into("<H", data, 18, machine)
    dst.write_bytes(bytes(data))
    return dst


def test_plugin_for_another_architecture(tmp_path, bundled_path):
    arm = _foreign_copy(bundled_path, tmp_path / "libomptarget.rtl.aarch64.so")
    with pytest.raises(WrongArchitectureError) as ei:
        osh.load_plugin(arm)
    e = ei.value
    assert "wrong architecture (EM_AARCH64)" in str(e) and e.machine == "EM_AARCH64"
    assert e.expected == "EM_X86_64" and isinstance(e, PluginDlopenError)
    assert "No such file" not in str(e)
    line = _usage_error(_cli("check", arm, cwd=tmp_path), "wrong architecture (EM_AARCH64)")
    assert str(arm) in line
    p = _cli("info", "--no-system", arm, cwd=tmp_path)
    assert p.returncode == 1 and "wrong architecture (EM_AARCH64)" in p.stdout


def test_load_plugin_path_types(bundled_path, tmp_path):
    p = osh.load_plugin(os.fsencode(bundled_path))          # bytes are a path, as for open()
    assert p is osh.load_plugin(bundled_path)
    with pytest.raises(PluginNotFoundError):
        osh.load_plugin(os.fsencode(str(tmp_path / "missing.so")))
    with pytest.raises(TypeError, match="str, bytes or os.PathLike, not int"):
        osh.load_plugin(42)
    with pytest.raises(TypeError, match="not list"):
        osh.load_plugin([bundled_path])
    with pytest.raises(ValueError, match="empty"):
        osh.load_plugin(b"")


def test_device_index_out_of_range_is_typed(bundled_path):
    with osh.Runtime([bundled_path]) as rt:
        n = len(rt.devices)
        with pytest.raises(DeviceNotFoundError) as ei:
            rt.devices[999]
        assert isinstance(ei.value, IndexError)
        assert ei.value.index == 999 and ei.value.count == n
        assert str(ei.value) == f"no device 999: this runtime has {n} devices (0..{n - 1})"
        with pytest.raises(DeviceNotFoundError, match="of plugin nosuch"):
            rt.device(0, plugin="nosuch")
        with pytest.raises(TypeError, match="not str"):
            rt.devices["0"]
        assert rt.devices[-1] is rt.devices[n - 1]          # still a list


# -- a plugin whose constructor hangs ----------------------------------------------------

@pytest.fixture(scope="module")
def hanging_plugin(tmp_path_factory):
    d = tmp_path_factory.mktemp("hang")
    src = d / "hang.c"
    src.write_text("#include <unistd.h>\n__attribute__((constructor)) static void h(void)"
                   " { for (;;) sleep(100); }\nint __tgt_rtl_number_of_devices(void)"
                   " { return 0; }\n")
    so = d / "libomptarget.rtl.hang.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    return so


def test_hanging_constructor_is_bounded_by_timeout(tmp_path, hanging_plugin):
    t0 = time.monotonic()
    p = _cli("check", hanging_plugin, "--timeout", "2", cwd=tmp_path)
    _usage_error(p, str(hanging_plugin), "did not finish loading within 2 s")
    t1 = time.monotonic()
    p = _cli("info", "--no-system", "--timeout", "2", hanging_plugin, cwd=tmp_path)
    assert p.returncode == 1 and "did not finish loading within 2 s" in p.stdout, p
    assert time.monotonic() - t1 < 60 and t1 - t0 < 60     # not the fixed 120 s


# -- output conventions --------------------------------------------------------------------

def test_demo_json_stdout_is_only_json(tmp_path):
    p = _cli("demo", "--no-system", "--json", cwd=tmp_path)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    rows = json.loads(p.stdout)                              # nothing else on stdout
    assert rows and all(r["result"] == "verified" for r in rows)
    assert "VERIFIED" in p.stderr and "== " in p.stderr      # the children's logs


def test_check_progress_goes_to_stderr_and_says_what_it_counts(tmp_path):
    p = _cli("check", "bundled", "--max-examples", "30", "--steps", "3", "--no-threads",
             cwd=tmp_path)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "progress" not in p.stdout and "/30 sequences" in p.stderr
    assert "[" in p.stderr and "#" in p.stderr                  # a bar
    ran = [ln for ln in p.stdout.splitlines() if ln.startswith("ran ")]
    assert ran and "sequences" in ran[0], p.stdout
    n = int(ran[0].split()[1])
    assert n >= 30                          # hypothesis starts at least --max-examples


def test_version_and_json_help(tmp_path):
    p = _cli("--version", cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.strip() == f"offload-shim {osh.__version__}"
    from offload_shim.cli import build_parser
    ap = build_parser()
    sub = next(a for a in ap._actions if a.__class__.__name__ == "_SubParsersAction")
    seen = []
    for name, parser in sub.choices.items():
        for action in parser._actions:
            if "--json" in action.option_strings:
                seen.append(name)
                assert action.help and "JSON" in action.help, (name, action.help)
    assert {"info", "demo", "check"} <= set(seen), seen
    p = _cli("-h", cwd=tmp_path)
    for cmd in ("info", "demo", "check", "bench", "run-library", "run"):
        assert cmd in p.stdout


def test_python_m_offload_shim_and_py_typed(tmp_path):
    p = subprocess.run([sys.executable, "-P", "-m", "offload_shim", "--version"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0 and "offload-shim" in p.stdout
    assert (Path(osh.__file__).parent / "py.typed").is_file()


# -- building without the tools -----------------------------------------------------------

def _backend():
    sys.path.insert(0, str(ROOT / "native"))
    try:
        import osh_build_backend
    finally:
        sys.path.pop(0)
    return osh_build_backend


def test_build_says_what_is_missing(tmp_path):
    b = _backend()
    empty = tmp_path / "bin"
    empty.mkdir()
    missing = b.missing_tools({"PATH": str(empty)})
    assert [p for _, p in missing] == ["gcc", "cmake"]
    with pytest.raises(SystemExit) as ei:
        b.check_build_tools({"PATH": str(empty)})
    msg = str(ei.value)
    assert "C compiler" in msg and "CMake" in msg and "apt-get install gcc cmake" in msg
    assert b.missing_tools({"PATH": os.environ["PATH"]}) == []


def test_pip_install_without_compiler_stops_before_building(tmp_path):
    """A real ``pip wheel`` of a copy of the source tree with no C compiler on PATH: the
    message names the Debian packages, nothing is built, no build/ folder appears."""
    src = _copy_source(tmp_path / "src")
    bindir = tmp_path / "bin"                 # python and cmake, no cc/gcc/clang
    bindir.mkdir()
    (bindir / "python3").symlink_to(sys.executable)
    if shutil.which("cmake"):
        (bindir / "cmake").symlink_to(shutil.which("cmake"))
    env = dict(os.environ, PATH=str(bindir))
    env.pop("CC", None)
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w",
                        str(tmp_path / "wheels"), str(src)], capture_output=True, text=True,
                       env=env, timeout=600)
    out = p.stdout + p.stderr
    if "No matching distribution found for scikit-build-core" in out:
        pytest.skip("scikit-build-core not installable here (no package index)")
    assert p.returncode != 0
    assert "apt-get install gcc" in out and "C compiler" in out, out[-3000:]
    assert not (src / "build").exists()
    assert not list((tmp_path / "wheels").glob("*.whl")) if (tmp_path / "wheels").exists() \
        else True


def _copy_source(dst: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dst / f)
    return dst


def test_build_backend_is_scikit_build_core_without_a_build_dir():
    """The quick form of the next test: pyproject names the checking backend and sets no
    build-dir (scikit-build-core then builds in a temporary folder)."""
    import tomllib
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert cfg["build-system"]["build-backend"] == "osh_build_backend"
    assert cfg["build-system"]["backend-path"] == ["native"]
    assert "build-dir" not in cfg["tool"]["scikit-build"]


@pytest.mark.slow
def test_pip_build_from_a_source_folder_leaves_no_build_dir(tmp_path):
    src = _copy_source(tmp_path / "src")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                        str(tmp_path / "wheels"), str(src)], capture_output=True, text=True,
                       timeout=900)
    out = p.stdout + p.stderr
    if "No matching distribution found for scikit-build-core" in out:
        pytest.skip("scikit-build-core not installable here (no package index)")
    assert p.returncode == 0, out[-3000:]
    assert list((tmp_path / "wheels").glob("offload_shim-*.whl"))
    assert not (src / "build").exists(), sorted(os.listdir(src))
