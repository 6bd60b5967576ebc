"""What `offload-shim run` imports at start-up: the embedded runtime of every program
imports neither logging nor pathlib (each pulls in a dozen modules: traceback, string,
urllib.parse, ipaddress...), nor dataclasses (inspect, ast, dis, tokenize) and typing, the launcher not argparse for the usual command lines --
whose fast reading (``parse_run_fast``) must agree with argparse's wherever it answers.  Checked from the interpreter's own import log
(``PYTHONPROFILEIMPORTTIME``) of a real run of a clang-16 program -- no timings here;
benchmarks/run_overhead.py measures the start-up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from conftest import NEXTGEN16
from test_interpose_run import prog  # noqa: F401  (fixture: the clang-16 sample program)

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


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
@pytest.mark.parametrize("options", [["--plugin", str(NEXTGEN16)], [], ["--policy=default"]],
                         ids=["plugin", "default-plugins", "policy"])
def test_the_embedded_runtime_imports_neither_logging_nor_pathlib(prog, options):  # noqa: F811
    # a first run stores the verdicts of the checks (the session's own verdict cache,
    # conftest.py, starts empty): the start-up measured is the usual one, the second run
    # -- in the same environment (the plugin verdicts are stored under it)
    cmd = [sys.executable, "-P", "-m", "offload_shim.cli", "run", *options, prog]
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    subprocess.run(cmd, capture_output=True, timeout=300, env=env)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 3, r.stderr[-3000:]      # omp_prog's own status, as under libomptarget
    assert "on_device 1" in r.stdout                  # its regions ran on the device
    tables = _imports_per_interpreter(r.stderr)
    assert len(tables) == 2, "expected the launcher's and the program's import logs"
    embedded = tables[1]
    assert "offload_shim.interposer.embed" in embedded       # it did start the runtime
    assert "offload_shim.plugins.plugin" in embedded      # ... and loaded the plugin
    # _hashlib (OpenSSL, ~5 ms): the image's content hash at start-up is the built-in one
    # re and json (offload_shim.jsontext reads the options and the verdicts): re's
    # compiler is Python, and json compiles patterns at import
    heavy = {"logging", "pathlib", "urllib.parse", "ipaddress", "dataclasses", "inspect",
             "typing", "glob", "argparse", "_hashlib", "re", "json"}
    assert not embedded & heavy, sorted(embedded & heavy)
    # nor the GCC side (GOMP_*: built at a GCC program's first call, gomp/lazy.py) or the
    # pinned memory registry (built when something pins: the default policy never does)
    unused = {"offload_shim.interposer.gomp.target", "offload_shim.interposer.gomp.api",
              "offload_shim.memory.pinned", "offload_shim.memory.pin_backends"}
    assert not embedded & unused, sorted(embedded & unused)
    launcher = tables[0]
    assert "offload_shim.cli.run" in launcher
    # nor (the launcher) signal.py's enums, threading (functools, collections), re/json
    # or math (a shared library of lib-dynload: the option types' check only)
    light = {"argparse", "logging", "pathlib", "glob", "re", "json", "enum", "signal",
             "threading", "math"}
    assert not launcher & light, sorted(launcher & light)


# -- start-up does not grow: every module a run imports is one listed here ----------------

#: What ``offload-shim run`` imports beyond a bare interpreter (``python -P -c pass`` in
#: the same environment: site, sitecustomize, .pth hooks), in the launcher and in the
#: program's embedded interpreter, over the three usual command lines below (issue 29:
#: start-up within 0.08 s of CPU; issue 27: start-up of run does not grow).  A module a
#: change adds to start-up fails the test below: import it where it is used, or list it
#: here with the reason in the commit (``bench --workloads run``'s ``startup`` row
#: measures what it costs).  ``-m``'s own runpy and importlib parts are not counted.
LAUNCHER_MODULES = frozenset({
    "__future__", "_collections", "_functools", "_json", "_operator", "_sha256", "_struct",
    "atexit", "collections", "contextlib", "errno", "functools", "gc", "importlib",
    "itertools", "keyword", "offload_shim", "offload_shim.cli", "offload_shim.cli.common",
    "offload_shim.cli.run", "offload_shim.errors", "offload_shim.jsontext",
    "offload_shim.safety", "offload_shim.safety.children", "offload_shim.safety.isolation",
    "offload_shim.safety.leftovers", "offload_shim.safety.verdicts", "operator", "reprlib",
    "struct", "types", "warnings",
})

EMBEDDED_MODULES = frozenset({
    "__future__", "_bisect", "_collections", "_ctypes", "_functools", "_json",
    "_operator", "_sha256", "_struct", "_weakrefset", "array", "atexit", "bisect",
    "collections", "collections.abc", "contextlib", "ctypes", "ctypes._endian", "enum",
    "errno", "fcntl", "functools", "gc", "importlib", "itertools", "keyword", "mmap",
    "offload_shim", "offload_shim.abi", "offload_shim.abi.gomp_interposer",
    "offload_shim.abi.native", "offload_shim.core", "offload_shim.core.compiled",
    "offload_shim.core.device", "offload_shim.core.device_images",
    "offload_shim.core.device_memory", "offload_shim.core.device_state",
    "offload_shim.core.images", "offload_shim.elf", "offload_shim.elf.imageinfo",
    "offload_shim.errors", "offload_shim.interposer", "offload_shim.interposer.bridge",
    "offload_shim.interposer.embed", "offload_shim.interposer.gomp",
    "offload_shim.interposer.gomp.lazy", "offload_shim.interposer.library",
    "offload_shim.interposer.llvm", "offload_shim.interposer.llvm.api",
    "offload_shim.interposer.llvm.diag", "offload_shim.interposer.llvm.interface",
    "offload_shim.interposer.llvm.launch", "offload_shim.interposer.llvm.mapping",
    "offload_shim.interposer.llvm.maptable", "offload_shim.interposer.llvm.omptarget",
    "offload_shim.interposer.llvm.pairs",
    "offload_shim.interposer.llvm.plan", "offload_shim.interposer.llvm.plan_data",
    "offload_shim.interposer.llvm.plan_target",
    "offload_shim.interposer.llvm.plugin_manager", "offload_shim.interposer.llvm.policy",
    "offload_shim.interposer.llvm.profile", "offload_shim.interposer.llvm.repeat",
    "offload_shim.interposer.llvm.rtl",
    "offload_shim.interposer.llvm.transfer", "offload_shim.jsontext",
    "offload_shim.lazylog", "offload_shim.memory", "offload_shim.memory.config",
    "offload_shim.memory._hit", "offload_shim.memory.eviction", "offload_shim.memory.hitpath",
    "offload_shim.memory.locking",
    "offload_shim.memory.oom", "offload_shim.memory.ownership",
    "offload_shim.memory.parking", "offload_shim.memory.plugin_cache",
    "offload_shim.memory.policies", "offload_shim.memory.queries",
    "offload_shim.memory.records", "offload_shim.memory.release",
    "offload_shim.memory.stats", "offload_shim.plugins", "offload_shim.plugins.discovery",
    "offload_shim.plugins.llvm", "offload_shim.plugins.loader",
    "offload_shim.plugins.plugin", "offload_shim.records", "offload_shim.safety",
    "offload_shim.safety.isolation", "offload_shim.safety.leftovers",
    "offload_shim.safety.verdicts", "operator", "reprlib", "struct", "threading", "types",
    "warnings", "weakref",
})

_DASH_M = {"runpy", "importlib.util", "importlib.machinery", "importlib._abc"}


def _bare_interpreter_modules() -> set[str]:
    r = subprocess.run([sys.executable, "-P", "-X", "importtime", "-c", "pass"],
                       capture_output=True, text=True, timeout=120)
    return {ln.rsplit("|", 1)[1].strip() for ln in r.stderr.splitlines()
            if ln.startswith("import time:") and "| imported package" not in ln}


@pytest.mark.skipif(not os.path.exists(NEXTGEN16), reason="LLVM 16 nextgen plugin not installed")
@pytest.mark.parametrize("options", [["--plugin", str(NEXTGEN16)], [], ["--policy=default"]],
                         ids=["plugin", "default-plugins", "policy"])
def test_run_start_up_imports_only_the_listed_modules(prog, options):  # noqa: F811
    # both runs with the same environment: the second finds the first's verdicts (they
    # are keyed on the environment), as every run after the first does
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    cmd = [sys.executable, "-P", "-m", "offload_shim.cli", "run", *options, prog]
    subprocess.run(cmd, capture_output=True, timeout=300, env=env)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 3, r.stderr[-3000:]
    tables = _imports_per_interpreter(r.stderr)
    assert len(tables) == 2, "expected the launcher's and the program's import logs"
    bare = _bare_interpreter_modules()
    launcher, embedded = tables[0] - bare - _DASH_M, tables[1] - bare
    assert "offload_shim.cli.run" in launcher and "offload_shim.interposer.embed" in embedded
    assert sorted(launcher - LAUNCHER_MODULES) == []
    assert sorted(embedded - EMBEDDED_MODULES) == []


def test_the_start_up_check_sees_a_module_imported_at_start_up():
    log = ("import time: self [us] | cumulative | imported package\n"
           "import time:       100 |        100 | offload_shim.cli.run\n"
           "import time:       900 |        900 | tempfile\n")
    assert _imports_per_interpreter(log)[0] - LAUNCHER_MODULES == {"tempfile"}


# -- the fast reading of `offload-shim run`'s options agrees with argparse -------------

_TOKENS = ["--plugin", "--plugin=p.so", "p.so", "--bundled", "--policy", "mandatory",
           "--policy=disabled", "bogus", "--report", "r.json", "--report=", "--gomp-host-device",
           "prog", "x", "--", "-h", "--help", "--bund", "", "-1", "a=b", "--bundled=1",
           "--plug", "-", "--policy=", "--x y", "run"]


def _argparse_run(argv):
    """argparse's reading (main_run's fallback parser), or the SystemExit code."""
    from offload_shim.cli.common import Parser
    from offload_shim.cli.run import register_cli
    ap = Parser(prog="offload-shim")
    register_cli(ap.add_subparsers(dest="cmd", required=True, prog="offload-shim"))
    import contextlib
    import io
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            return ap.parse_args(["run", *argv])
    except SystemExit as exc:
        return exc.code


_FIELDS = ("cmd", "plugin", "bundled", "policy", "report", "gomp_host_device", "program",
           "args", "func")


@given(st.lists(st.sampled_from(_TOKENS), max_size=7))
@settings(max_examples=400, deadline=None)
def test_fast_run_options_agree_with_argparse(argv):
    from offload_shim.cli.run import parse_run_fast
    fast = parse_run_fast(argv)
    if fast is None:            # left to argparse (help, errors, abbreviations...)
        return
    slow = _argparse_run(argv)
    assert not isinstance(slow, (int, str)) and slow is not None, (argv, slow)
    from offload_shim.cli.run import program_arguments
    slow.args = program_arguments(argv, slow.program, slow.args)   # as main_run does
    assert fast.args == argv[len(argv) - len(fast.args):]            # every token after it
    assert {f: getattr(fast, f) for f in _FIELDS} == {f: getattr(slow, f) for f in _FIELDS}


@pytest.mark.parametrize("argv", [
    ["prog"], ["--plugin", "a.so", "--plugin=b.so", "--bundled", "prog", "--plugin", "x"],
    ["--policy", "mandatory", "--report=r.json", "--gomp-host-device", "prog", "-h", "--"],
    ["--policy=disabled", "--policy", "default", "prog"]])
def test_fast_run_options_read_the_usual_command_lines(argv):
    from offload_shim.cli.run import parse_run_fast
    assert parse_run_fast(argv) is not None
    test_fast_run_options_agree_with_argparse.hypothesis.inner_test(argv)


@pytest.mark.parametrize("argv", [[], ["-h"], ["--bund", "p"], ["--plugin"], ["--policy", "x", "p"],
                                  ["--plugin", "-x", "p"], ["--", "p"], ["--bundled=1", "p"]])
def test_fast_run_options_leave_the_rest_to_argparse(argv):
    from offload_shim.cli.run import parse_run_fast
    assert parse_run_fast(argv) is None


def test_the_program_gets_a_double_dash_after_it():
    # as exec (env, nice, strace) gives it; argparse alone drops it (main_run's fallback)
    from offload_shim.cli.run import parse_run_fast, program_arguments
    assert parse_run_fast(["prog", "--", "x"]).args == ["--", "x"]
    assert program_arguments(["--bund", "prog", "--", "x"], "prog", ["x"]) == ["--", "x"]
    assert program_arguments(["--", "prog", "x"], "prog", ["x"]) == ["x"]
    assert program_arguments(["prog", "a", "--", "b"], "prog", ["a", "--", "b"]) == \
        ["a", "--", "b"]


# -- the program's interpreter imports the launcher's offload_shim -------------------------

@pytest.mark.skipif(not os.path.exists(NEXTGEN16), reason="LLVM 16 nextgen plugin not installed")
def test_the_embedded_runtime_is_the_launchers_copy_also_under_pythonpath(prog, tmp_path):  # noqa: F811
    """With PYTHONPATH naming another copy of the package (a source checkout, a build
    folder), the launcher imports that copy and preloads its interposer; the program's
    interpreter must import the same copy -- its sys.path starts with the launcher's, in
    order -- not the installed one, whose interposer would not be the one preloaded."""
    import shutil
    from pathlib import Path
    import offload_shim
    copy = tmp_path / "site"
    shutil.copytree(Path(offload_shim.__file__).parent, copy / "offload_shim")
    env = dict(os.environ, PYTHONPATH=str(copy))
    r = subprocess.run([sys.executable, "-P", "-c", "import sys; from offload_shim.cli "
                        "import main; sys.exit(main())", "run", prog], capture_output=True,
                       text=True, timeout=300, env=env, cwd=tmp_path)
    assert "failed to start" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 3, r.stderr[-3000:]
    assert "on_device 1" in r.stdout


_SIGINT_IN_BOOT = """
import os, sys, _signal
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
del sys.modules["threading"]
import threading as _real                    # the real module, in this one's place
sys.modules["threading"] = _real
if os.environ.get("OFFLOAD_SHIM_EMBED") == "1":   # the program's interpreter only
    os.kill(os.getpid(), _signal.SIGINT)     # Ctrl-C while the boot imports
"""


def test_ctrl_c_during_the_embedded_boot_ends_the_program(prog, tmp_path):  # noqa: F811
    """SIGINT while the program's interpreter is still importing the runtime ends the
    program as it would without offload-shim (SIGINT's default action).  Python's
    handler, which ``import _signal`` installs, stayed until the whole boot had run:
    the KeyboardInterrupt failed the boot and the program ran on without a device,
    exit 0.  (A ``threading`` on PYTHONPATH that sends the signal makes the moment
    certain: the boot imports ``threading``, the launcher does not need to.)"""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "threading.py").write_text(_SIGINT_IN_BOOT)
    env = dict(os.environ, PYTHONPATH=str(shadow))
    r = subprocess.run([sys.executable, "-P", "-m", "offload_shim.cli", "run", prog],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert "failed to start" not in r.stderr and "KeyboardInterrupt" not in r.stderr, \
        r.stderr[-3000:]
    assert r.returncode in (-signal.SIGINT, 128 + signal.SIGINT), (r.returncode, r.stderr)


# -- what start-up reads without regular expressions reads the same -----------------------

@given(st.text(alphabet=" \t\n\v\f\r+-0123456789ax\u0662\u00a0", max_size=14))
@settings(max_examples=400, deadline=None)
def test_stoi_reads_what_the_strtol_pattern_reads(text):
    import re
    from offload_shim.interposer.llvm.diag import StoiError, stoi
    m = re.match(r"[ \t\n\v\f\r]*([+-]?[0-9]+)", text)
    try:
        got = stoi(text)
    except StoiError as exc:
        assert (exc.kind == "invalid_argument") == (m is None), text
        assert m is None or not -(1 << 31) <= int(m.group(1)) < (1 << 31)
        return
    assert m is not None and got == int(m.group(1))


@pytest.mark.parametrize("name, refused", [
    ("libomptarget.so", True), ("libomptarget.so.16", True), ("libomptarget.sox", False),
    ("libomptarget.rtl.x86_64.so", False), ("libgomp.so.1", True), ("libomp.so.5", True),
    ("libiomp5.so", True), ("libompx.so", False), ("libgomp-plugin-nvptx.so.1", False)])
def test_host_runtimes_are_refused_by_name(name, refused):
    from offload_shim.errors import NotAPluginError
    from offload_shim.plugins.loader import _refuse_host_runtime
    try:
        _refuse_host_runtime(f"/x/{name}", f"/y/{name}")
    except NotAPluginError:
        assert refused
    else:
        assert not refused


@given(st.lists(st.sampled_from(["/", "usr/lib/", "libomptarget.so.", "16", ".1", "x", " ",
                                 "(deleted)", "a/b", "..", "7", "\t", "libomptarget.so"]),
                max_size=7), st.sampled_from(["\n", ""]))
@settings(max_examples=400, deadline=None)
def test_the_maps_line_reading_finds_what_the_pattern_finds(parts, end):
    import re
    from offload_shim.abi.interposer import _libomptarget_in_maps_line
    line = "7f00-7f01 r-xp 00000000 08:01 123 " + "".join(parts) + end
    m = re.search(r"(/\S*libomptarget\.so\.(\d+)[.\d]*)$", line.strip())
    assert _libomptarget_in_maps_line(line) == ((int(m.group(2)), m.group(1)) if m else None)


@given(st.lists(st.sampled_from(["/tmp/tmpfile_", "aB3x9Z", "abc", "7", "-", " ", "\t", "\n",
                                 "(deleted)", "/tmp/tmpfile_abcdefg", "\u00e9", "\u2003",
                                 "7f00-7f01 r-xp 00000000 08:01 123 "]), max_size=9))
@settings(max_examples=400, deadline=None)
def test_the_mapped_copies_reading_finds_what_the_pattern_finds(parts):
    # leftovers.mapped_copies (Runtime.close of every run) reads /proc/PID/maps by hand
    import re
    from offload_shim.safety.leftovers import _copies_named_in
    text = "".join(parts)
    want = set(re.findall(r"\s(/tmp/tmpfile_[A-Za-z0-9]{6})$", text, re.M))
    assert _copies_named_in(text) == want, text


@given(st.lists(st.sampled_from(["__KMP_REGISTERED_LIB_", "123", "0", "_", "x", "\u0662",
                                 "\u00b2", "-", " ", "__KMP_REGISTERED_LIB"]), max_size=6))
@settings(max_examples=400, deadline=None)
def test_the_kmp_segment_name_reading_finds_what_the_pattern_finds(parts):
    # leftovers.dead_kmp_segments (the launcher's cleanup after every run) reads by hand
    import re
    from offload_shim.safety.leftovers import _kmp_segment_pid
    name = "".join(parts)
    m = re.fullmatch(r"__KMP_REGISTERED_LIB_(\d+)(?:_\d+)?", name)
    assert _kmp_segment_pid(name) == (int(m.group(1)) if m else None), name


@given(st.lists(st.sampled_from(["libomptarget.so.", "16", ".1", ".", "1", "x", "\u0662",
                                 "\u00b2", "libomptarget.so", " "]), max_size=6))
@settings(max_examples=400, deadline=None)
def test_the_needed_soname_reading_finds_what_the_pattern_finds(parts):
    # abi.interposer.libomptarget_needed_by (every registration) reads by hand
    import re
    from offload_shim.abi.interposer import _libomptarget_soname_major
    name = "".join(parts)
    m = re.fullmatch(r"libomptarget\.so\.(\d+)(?:\.\d+)*", name)
    assert _libomptarget_soname_major(name) == (int(m.group(1)) if m else None), name


# -- offload_shim.jsontext reads and writes what json does ---------------------------------

_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8)
    | st.floats(allow_nan=False, width=32),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=4),
    max_leaves=12)


@given(_JSON_VALUES, st.sampled_from(["", " ", "\n\t", "\r "]), st.sampled_from(["", " \n"]))
@settings(max_examples=400, deadline=None)
def test_jsontext_reads_and_writes_what_json_does(value, before, after):
    import json
    from offload_shim import jsontext
    assert jsontext.dumps(value) == json.dumps(value)
    text = before + json.dumps(value) + after
    assert jsontext.loads(text) == json.loads(text)


@given(st.text(alphabet='{}[]",:0123456789.eE+-tfnrulasNIy \t\n\\x\ufeff', max_size=12))
@settings(max_examples=400, deadline=None)
def test_jsontext_refuses_what_json_refuses(text):
    import json
    from offload_shim import jsontext
    try:
        want = json.loads(text)
    except ValueError as exc:
        with pytest.raises(type(exc)):
            jsontext.loads(text)
        return
    got = jsontext.loads(text)
    assert got == want or (got != got and want != want), text    # NaN


def test_jsontext_refuses_bad_text_before_json_is_imported():
    """In an interpreter that has not imported json (the program's, under ``run``), a
    text bad after its first character gets json's JSONDecodeError, as json.loads gives
    it; the C scanner raised a SystemError there (its error needs json.decoder loaded),
    and a verdict file cut short failed every image's registration (no device)."""
    code = (
        "import sys\n"
        "from offload_shim import jsontext\n"
        "assert 'json.decoder' not in sys.modules, sorted(sys.modules)\n"
        "got = []\n"
        "for text in ['[1', '{\"a\" 1}', '\"abc', '[1,]', '{\"a\": [tru]}']:\n"
        "    try:\n"
        "        jsontext.loads(text)\n"
        "    except Exception as exc:\n"
        "        got.append((type(exc).__module__, type(exc).__name__, str(exc)))\n"
        "import json\n"
        "want = []\n"
        "for text in ['[1', '{\"a\" 1}', '\"abc', '[1,]', '{\"a\": [tru]}']:\n"
        "    try:\n"
        "        json.loads(text)\n"
        "    except Exception as exc:\n"
        "        want.append((type(exc).__module__, type(exc).__name__, str(exc)))\n"
        "assert got == want and len(got) == 5, (got, want)\n")
    r = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]


def test_the_launcher_ends_without_finalising_only_from_the_command_line(tmp_path):
    """The console script's `run` ends with os._exit once the program has ended (no
    interpreter finalisation: start-up cost), with the program's status; an atexit
    handler registered in the launcher still runs (then it exits as before), and
    main(argv) called in-process returns the status and leaves the collector on."""
    import gc
    from offload_shim.cli import main
    assert main(["run", "/bin/sh", "-c", "exit 3"]) == 3
    assert gc.isenabled()
    code = ("import atexit, sys; from offload_shim.cli import main; {pre}"
            "sys.exit(main())")
    for pre, out in (("", ""), ("atexit.register(lambda: print('atexit ran'));",
                                "atexit ran\n")):
        r = subprocess.run([sys.executable, "-c", code.format(pre=pre), "run", "/bin/sh",
                            "-c", "echo prog; exit 5"], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
        assert (r.returncode, r.stdout, r.stderr) == (5, "prog\n" + out, "")
