"""The interposer's coverage of the API libomptarget 16, 19.1 and 22.1 export,
``offload-shim compare``, and libomptarget 16's plugin choice (device numbering)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import clang_toolchains as ct

LIBOMPTARGET16 = Path("/usr/lib/llvm-16/lib/libomptarget.so.16")
#: the libomptarget of every supported clang: 16 (Debian), 19.1 and 22.1 (unpacked by
#: scripts/setup.sh; tests/clang_toolchains.py)
LIBOMPTARGETS = (LIBOMPTARGET16, ct.LLVM19_LIB / "libomptarget.so.19.1",
                 ct.LLVM22_LIB / "libomptarget.so.22.1")


@pytest.fixture(params=LIBOMPTARGETS, ids=("libomptarget16", "libomptarget19.1",
                                           "libomptarget22.1"))
def libomptarget(request):
    if not request.param.exists():
        pytest.skip(f"{request.param} missing (libomp5-16; scripts/setup.sh for 19.1/22.1)")
    return request.param


def _defined(path) -> dict[str, set[str]]:
    """name -> version nodes of the dynamic symbols ``path`` defines."""
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) not installed")
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True,
                         text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and "@" in parts[2]:
            name, _, ver = parts[2].partition("@")
            syms.setdefault(name, set()).add(ver.lstrip("@"))
    return syms


def test_every_libomptarget_export_is_implemented_or_forwarded_on_purpose(libomptarget):
    """Every symbol the program's libomptarget (16, 19.1, 22.1) exports is defined by the
    interposer under the same version node, or listed in FORWARDED with the reason, so
    no call of a program under ``offload-shim run`` reaches its own libomptarget, which
    was never initialised there (19.1 and 22.1 segfault: their plugin manager is made
    by the first registration).  Names without a version (local symbols ``nm -D``
    lists, such as 19.1's OMPT thread-locals) are not entry points."""
    from offload_shim.interposer import interposer_path
    from offload_shim.interposer.llvm.api import FORWARDED
    real = _defined(libomptarget)
    ours = _defined(interposer_path())
    assert len(real) > 50
    missing = sorted(n for n in real if n not in ours and n not in FORWARDED)
    assert missing == [], f"{libomptarget.name} exports neither implemented nor forwarded: " \
                          f"{missing}"
    wrong_node = sorted(n for n in real if n in ours and not real[n] <= ours[n])
    assert wrong_node == [], wrong_node


def test_forwarded_names_are_left_alone_with_their_reason():
    """A forwarded name is really left to the program's libomptarget (the interposer does
    not define it), has its reason, and is exported by at least one of the three."""
    from offload_shim.interposer import interposer_path
    from offload_shim.interposer.llvm.api import FORWARDED
    present = [p for p in LIBOMPTARGETS if p.exists()]
    if not present:
        pytest.skip("no libomptarget installed (libomp5-16; scripts/setup.sh for 19.1/22.1)")
    ours = _defined(interposer_path())
    assert FORWARDED and not set(FORWARDED) & set(ours)
    assert all(len(why) > 40 for why in FORWARDED.values())
    exported = set().union(*(_defined(p) for p in present))
    assert set(FORWARDED) <= exported


def test_the_export_check_sees_a_missing_name(tmp_path):
    """The check reads real ``nm -D`` output: a library exporting one name more than the
    interposer at VERS1.0 is caught."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    src = tmp_path / "extra.c"
    src.write_text("void omp_target_no_such_routine(void) {}\nvoid omp_target_alloc(void) {}\n")
    ver = tmp_path / "v.map"
    ver.write_text("VERS1.0 { global: omp_*; local: *; };\n")
    lib = tmp_path / "libextra.so"
    subprocess.run(["cc", "-shared", "-fPIC", f"-Wl,--version-script={ver}", str(src), "-o",
                    str(lib)], check=True)
    from offload_shim.interposer import interposer_path
    real, ours = _defined(lib), _defined(interposer_path())
    assert real == {"omp_target_no_such_routine": {"VERS1.0"}, "omp_target_alloc": {"VERS1.0"}}
    assert sorted(n for n in real if n not in ours) == ["omp_target_no_such_routine"]


def _run(*args, **kw):
    return subprocess.run([sys.executable, "-P", "-m", "offload_shim.cli", *args],
                          capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def prog():
    import conformance as cf
    why = cf.CLANG16.missing()
    if why:
        pytest.skip(why)
    p = next(p for p in cf.programs() if p.name == "map_present_missing.c")
    b = cf.build(p, cf.CLANG16, cf.CLANG16.identity(), cf.cache_root())
    assert b.error is None, b.error
    return b


def test_compare_agrees_on_a_program(prog):
    r = _run("compare", str(prog.exe), "partial")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("same: exit status -6 (killed by SIGABRT), stdout and "
                               "diagnostics agree")
    assert "explicit extension not allowed" not in r.stdout      # the short form
    r = _run("compare", "--full", str(prog.exe), "partial")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "same: exit status, stdout and diagnostics agree" in r.stdout
    # both results are shown, diagnostics included
    assert r.stdout.count("exit status: -6") == 2
    assert r.stdout.count("explicit extension not allowed") == 2


def test_compare_json_and_a_difference():
    """A command whose output depends on running under offload-shim: exit 1, both
    results and the diff."""
    script = 'echo "embed=${OFFLOAD_SHIM_EMBED:-no}"'
    r = _run("compare", "--json", "/bin/sh", "-c", script)
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    assert data["same"] is False
    assert data["reference"]["stdout"] == ["embed=no"]
    assert data["offload_shim"]["stdout"] == ["embed=1"]
    assert "-  embed=no" in data["diff"] and "+  embed=1" in data["diff"]


def test_compare_labels_a_bug_fixed_upstream():
    """A clang-16 program whose own runtime (libomptarget 16) loses data where upstream
    fixed the bug: compare exits 3 and names the bug (the offload-shim run's report);
    the same program built by clang-22 agrees (exit 0)."""
    import conformance as cf
    p = next(p for p in cf.programs() if p.name == "fixed_upstream_padding.c")
    for cc, want in ((ct.CLANG16, 3), (ct.CLANG22, 0)):
        if cc.missing():
            pytest.skip(cc.missing())
        exe = cc.build(p.path)
        r = _run("compare", "--json", str(exe))
        assert r.returncode == want, r.stdout + r.stderr
        data = json.loads(r.stdout)
        if want == 0:
            assert (data["verdict"], data["known"]) == ("same", [])
            continue
        assert data["verdict"] == "known" and data["same"] is False
        from offload_shim.interposer.llvm.profile import FIXED_UPSTREAM
        assert data["known"] == [FIXED_UPSTREAM["partial-struct-padding"].label()]
        assert data["known"][0].startswith("known: fixed upstream (partial-struct-padding: ")
        assert data["offload_shim"]["fixed_upstream"]["partial-struct-padding"] >= 1
        assert data["reference"]["fixed_upstream"] == {}
        r = _run("compare", str(exe))
        assert r.returncode == 3
        assert r.stdout.startswith("different, known: fixed upstream (partial-struct-padding: ")
        assert "-  host s.a=1 s.b=2 s.d=4" in r.stdout        # the diff all the same


def test_comparison_verdicts():
    """Comparison.known / verdict: a label only for a difference, only for ids of
    FIXED_UPSTREAM; a run killed at the timeout is never "known"."""
    from offload_shim.cli.compare import Comparison, Outcome
    a = Outcome(0, ["x"], [])
    b = Outcome(0, ["y"], [], fixed_upstream={"always-pointer-member-reattach": 2})
    c = Comparison(["p"], a, b)
    assert c.verdict == "known"
    from offload_shim.interposer.llvm.profile import FIXED_UPSTREAM
    fix = FIXED_UPSTREAM["always-pointer-member-reattach"].fix
    assert "PR #149036" in fix
    assert c.known == [f"known: fixed upstream (always-pointer-member-reattach: {fix})"]
    same = Outcome(0, ["x"], [], fixed_upstream={"always-pointer-member-reattach": 1})
    assert (Comparison(["p"], a, same).verdict, Comparison(["p"], a, same).known) == \
        ("same", [])
    odd = Outcome(0, ["y"], [], fixed_upstream={"no-such-bug": 1})
    assert Comparison(["p"], a, odd).verdict == "different"
    late = Outcome("timeout", [], [], fixed_upstream={"partial-struct-padding": 1})
    assert Comparison(["p"], a, late).verdict == "timeout"
    assert Comparison(["p"], a, late).known == []


def test_compare_is_short_by_default(tmp_path):
    """An agreeing program that prints 100,000 lines: one verdict line (issue 32);
    a differing one: the verdict and the differing lines with one line of context,
    at most SUMMARY_DIFF_LINES of them; --full: everything."""
    from offload_shim.cli.compare import SUMMARY_DIFF_LINES
    r = _run("compare", "/bin/sh", "-c", "seq 100000")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["same: exit status 0, stdout and diagnostics agree "
                                     "(100000 stdout lines, 0 diagnostic lines; --full "
                                     "shows both)"]
    r = _run("compare", "--full", "/bin/sh", "-c", "seq 100000")
    assert r.returncode == 0 and len(r.stdout.splitlines()) > 200000
    one = 'seq 1000; [ -n "$OFFLOAD_SHIM_EMBED" ] && echo under-shim; echo end; exit 3'
    r = _run("compare", "/bin/sh", "-c", one)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("DIFFERENT: exit status 3 / 3 (reference / offload-shim run)")
    assert lines[1:] == ["@@ -1002,2 +1002,3 @@", "   1000", "+  under-shim", "   end"]
    many = 'for i in $(seq 100); do [ -n "$OFFLOAD_SHIM_EMBED" ] && echo x$i || echo y$i; done'
    r = _run("compare", "/bin/sh", "-c", many)
    lines = r.stdout.splitlines()
    assert r.returncode == 1 and len(lines) == 2 + SUMMARY_DIFF_LINES
    # the hunk: its header, "stdout:", 100 - and 100 + lines, "diagnostics:"
    assert lines[-1] == f"... {203 - SUMMARY_DIFF_LINES} more diff lines (--full shows all)"


def test_compare_bad_input():
    r = _run("compare", "/nonexistent/program")
    assert r.returncode == 2 and "no such program" in r.stderr
    r = _run("compare", "--plugin", "/nonexistent.so", "/bin/true")
    assert r.returncode == 2 and "--plugin" in r.stderr


def test_compare_feeds_both_runs_the_same_stdin_file(tmp_path):
    """``--stdin FILE``: both runs read FILE from its start (compare's own stdin is
    never passed on: ``compare PROG < input`` compared two runs that read nothing and
    said "same"); a file that cannot be read twice is refused in one line."""
    src = tmp_path / "in.txt"
    src.write_text("one\ntwo\n")
    r = _run("compare", "--json", "--stdin", str(src), "/bin/cat")
    got = json.loads(r.stdout)
    assert r.returncode == 0 and got["verdict"] == "same", r.stdout + r.stderr
    assert got["reference"]["stdout"] == ["one", "two"] == got["offload_shim"]["stdout"]
    r = _run("compare", "--json", "/bin/cat", input="piped\n")
    assert json.loads(r.stdout)["reference"]["stdout"] == []       # not passed on
    r = _run("compare", "--stdin", os.devnull, "/bin/cat")
    assert r.returncode == 0, r.stderr
    for bad in (tmp_path / "none.txt", tmp_path):
        r = _run("compare", "--stdin", str(bad), "/bin/cat")
        assert r.returncode == 2 and r.stderr.startswith("offload-shim: error: --stdin") \
            and len(r.stderr.splitlines()) == 1, r.stderr


def test_compare_runs_a_script_without_shebang_as_run_does(tmp_path):
    """A script without ``#!`` (ENOEXEC) is run by /bin/sh under ``offload-shim run``
    (as execvp and the shells do); compare once gave up on it ("cannot run ...: Exec
    format error", exit 2) instead of comparing the two runs."""
    script = tmp_path / "plain.sh"
    script.write_text('echo ran "$1"\n')
    script.chmod(0o755)
    r = _run("compare", "--json", str(script), "x")
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout)
    assert got["reference"]["stdout"] == ["ran x"] == got["offload_shim"]["stdout"]


def test_outcome_normalises_addresses_and_keeps_only_diagnostics():
    from offload_shim.cli.compare import Outcome
    o = Outcome.from_output(-6, "p=0x7ffd1234 q=0xABC\n",
                            "noise\nLibomptarget message: at 0x55aa (4 bytes)\n"
                            "a.c:3:1: Libomptarget fatal error 1: failure\n"
                            "Libomptarget device 0 info: x 0x1 \n")
    assert o.stdout == ["p=0x? q=0x?"]
    assert o.diagnostics == ["Libomptarget message: at 0x? (4 bytes)",
                             "a.c:3:1: Libomptarget fatal error 1: failure",
                             "Libomptarget device 0 info: x 0x?"]


def test_outcome_shows_own_lines_and_the_programs_stderr_apart():
    """compare shows offload_shim's own lines and the program's stderr beside the
    compared parts, without comparing them."""
    from offload_shim.cli.compare import Outcome
    err = ("my program: warning 1\n"
           "offload_shim: UnknownLayoutError: entry record of 40 bytes\n"
           "Libomptarget fatal error 1: failure\n\n"
           "offload-shim: error: --plugin x: not a plugin\n")
    o = Outcome.from_output(1, "", err)
    assert o.diagnostics == ["Libomptarget fatal error 1: failure"]
    assert o.own == ["offload_shim: UnknownLayoutError: entry record of 40 bytes",
                     "offload-shim: error: --plugin x: not a plugin"]
    assert o.program_stderr == ["my program: warning 1"]
    ctx = o.render_context()
    assert ctx == ["offload_shim said (not compared):",
                   "  offload_shim: UnknownLayoutError: entry record of 40 bytes",
                   "  offload-shim: error: --plugin x: not a plugin",
                   "the program's stderr (not compared):", "  my program: warning 1"]
    same = Outcome.from_output(1, "", "Libomptarget fatal error 1: failure\n")
    assert o.key() == same.key() and same.render_context() == []


def test_compare_prints_the_programs_stderr(tmp_path):
    prog = tmp_path / "say.sh"
    prog.write_text("#!/bin/sh\necho out\necho 'to stderr' >&2\n")
    prog.chmod(0o755)
    r = _run("compare", "--full", str(prog))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("the program's stderr (not compared):\n  to stderr") == 2
    r = _run("compare", "--json", str(prog))
    got = json.loads(r.stdout)
    assert got["reference"]["program_stderr"] == ["to stderr"] == \
        got["offload_shim"]["program_stderr"]


def test_plugin_choice_follows_libomptarget16(tmp_path):
    """rtl.cpp loadRTLs: per target the nextgen plugin unless
    LIBOMPTARGET_NEXTGEN_PLUGINS is false, else (or when it is missing) the classic."""
    from offload_shim.interposer.llvm.rtl import bool_env, select_plugins
    for name in ("libomptarget.rtl.x86_64.nextgen.so", "libomptarget.rtl.x86_64.so",
                 "libomptarget.rtl.cuda.so"):
        (tmp_path / name).write_bytes(b"")
    got = select_plugins(tmp_path, env={})
    assert [Path(p).name for p in got] == ["libomptarget.rtl.x86_64.nextgen.so"]
    for off in ("0", "false", "OFF", "no"):
        got = select_plugins(tmp_path, env={"LIBOMPTARGET_NEXTGEN_PLUGINS": off})
        assert [Path(p).name for p in got] == ["libomptarget.rtl.x86_64.so"], off
    (tmp_path / "libomptarget.rtl.x86_64.nextgen.so").unlink()
    assert [Path(p).name for p in select_plugins(tmp_path, env={})] == \
        ["libomptarget.rtl.x86_64.so"]
    all_names = select_plugins(tmp_path, env={}, names=("libomptarget.rtl.x86_64",
                                                        "libomptarget.rtl.cuda"))
    assert [Path(p).name for p in all_names] == ["libomptarget.rtl.x86_64.so",
                                                 "libomptarget.rtl.cuda.so"]
    # StringParser<bool>: lower-cased exact words; anything else keeps the default
    # (checked against the real runtime by tests/programs/env_info_parse.c)
    assert bool_env(None, True) and not bool_env("0", True) and not bool_env("OFF", True)
    assert bool_env("Yes", False) and bool_env("1", False)
    for other in ("2", "00", " 0", "0 ", "-1", "", "maybe"):
        assert bool_env(other, True) is True and bool_env(other, False) is False, other
