"""Differential conformance: every program of tests/programs/ behaves under offload_shim
exactly as under the real libomptarget 16 (tests/conformance.py).

Each program is built once per session (cached by content hash), then every run of it
is executed in every variant (executable, Python host with ctypes, ``run-library``) under
the real runtime and under offload_shim, two processes at a time.  A test compares exit
status, stdout and the runtime's diagnostic lines; differences that are known and
explained in docs/conformance.md are listed in :data:`KNOWN` (marked xfail strict, so a
fix is noticed).  A program whose reference loses data where upstream fixed the bug
(``conformance.FIXED_UPSTREAM`` with clang 16) must instead give the fixed result and
name the bug in its report (``conformance.check_fixed_upstream``).
"""

from __future__ import annotations

import pytest

import conformance as cf

TOOLCHAIN = cf.CLANG16
#: the programs clang-16 can build (the others call routines its libomptarget lacks:
#: tests/test_conformance_clang.py runs them with clang-19 and clang-22)
ALL_PROGRAMS = cf.programs()
PROGRAMS = [p for p in ALL_PROGRAMS if p.built_by(TOOLCHAIN)]

_REF_CRASH = ("the reference crashes: in a Python host, libomptarget 16 runs the library's "
              "device destructors from the library's own destructor at exit, after the "
              "plugins it loaded were finalised (SIGSEGV); offload_shim runs them before "
              "the interpreter exits (docs/conformance.md, exit path)")
#: (program, run label or None, variant or None) -> reason (docs/conformance.md)
KNOWN: dict[tuple, str] = {
    ("declare_target_ctor.cpp", None, "lib"): _REF_CRASH,
    ("declare_target_ctor.cpp", None, "run-library"): _REF_CRASH,
    ("declare_target_ctor_print.cpp", None, "lib"): _REF_CRASH,
    ("declare_target_ctor_print.cpp", None, "run-library"): _REF_CRASH,
    ("exit_atexit_offload.c", None, "lib"): _REF_CRASH,
    ("exit_atexit_offload.c", None, "run-library"): _REF_CRASH,
}


def _known(name, label, variant):
    for (p, l, v), why in KNOWN.items():
        if p == name and l in (None, label) and v in (None, variant):
            return why
    return None


def _cases():
    for prog in PROGRAMS:
        for run in prog.runs:
            variants = [v for v in cf.VARIANTS if ("exe" if v == "exe" else "lib") in prog.modes]
            for v in variants:
                marks = []
                why = _known(prog.name, run.label, v)
                if why:
                    marks.append(pytest.mark.xfail(reason=why, strict=True))
                yield pytest.param(prog.name, run.label, v, id=f"{prog.name}[{run.label}]-{v}",
                                   marks=marks)


@pytest.fixture(scope="session")
def results(request):
    """Build and run (two at a time) the programs the selected tests need."""
    wanted = {item.callspec.params["name"] for item in request.session.items
              if item.originalname == "test_program" and hasattr(item, "callspec")}
    why = TOOLCHAIN.missing()
    if why:
        pytest.skip(f"{TOOLCHAIN.name}: {why}")
    from offload_shim.cli.run import libpython_path
    try:
        libpython_path()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    builts = cf.build_all([p for p in PROGRAMS if p.name in wanted], TOOLCHAIN)
    return builts, cf.run_all(builts, TOOLCHAIN)


def test_enough_programs():
    """The harness covers the feature table with at least 60 programs."""
    assert len(PROGRAMS) >= 60
    assert all(p.features for p in ALL_PROGRAMS), \
        [p.name for p in ALL_PROGRAMS if not p.features]


def test_feature_table_lists_every_program_and_difference():
    """docs/conformance.md: every program appears in the feature table, every program
    named there exists, every known difference is explained under "Differences"."""
    import re
    from pathlib import Path
    doc = (Path(__file__).resolve().parent.parent / "docs" / "conformance.md").read_text()
    section = doc[doc.index("# libomptarget 16's host side"):]
    end = section.find("\n# ")                   # the next part of the document
    section = section if end < 0 else section[:end]
    names = {p.name for p in ALL_PROGRAMS}
    missing = sorted(n for n in names if n not in section)
    assert missing == [], f"programs not in the feature table: {missing}"
    unknown = sorted({n for n in re.findall(r"\b([a-z0-9_]+\.(?:cpp|c))\b", section)}
                     - names - {"entry.c"})
    assert unknown == [], f"the table names programs that do not exist: {unknown}"
    diffs = section[section.index("## Differences"):]
    assert all(p in diffs for p, _l, _v in KNOWN)


@pytest.mark.parametrize("name,label,variant", list(_cases()))
def test_program(results, name, label, variant):
    builts, outcomes = results
    b = builts[name]
    assert b.error is None, f"{name} does not build:\n{b.error}"
    ref, got = outcomes[(name, label)][variant]
    if (name, 16) in cf.FIXED_UPSTREAM:
        fixed = cf.fixed_reference(name, label)
        if isinstance(fixed, str):
            pytest.skip(fixed)
        cf.check_fixed_upstream(name, 16, ref, got, fixed)
        return
    from offload_shim.cli.compare import Comparison
    c = Comparison([name, label, variant], ref, got)
    assert c.same, "\n" + "\n".join(c.diff()) + f"\n--- offload-shim stderr:\n{got.stderr[-3000:]}"
    if b.program.stderr_exact and variant != "run-library":
        # the whole of stderr, not only the runtime's lines (run-library's stderr is
        # its own command's)
        assert cf.stderr_lines(got) == cf.stderr_lines(ref), (
            f"\nreference stderr:\n{ref.stderr[-3000:]}\noffload-shim stderr:\n"
            f"{got.stderr[-3000:]}")
