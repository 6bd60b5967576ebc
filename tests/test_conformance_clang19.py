"""Differential conformance of programs built by clang-19 (tests/conformance.py with
``Toolchain.of(clang_toolchains.toolchain_fields(CLANG19))``): the program as built
runs on its own libomptarget 19.1 (rpath into the unpacked runtime, the reference) and
under ``offload-shim run``; exit status and stdout must agree.

clang 19 passes ``requires`` flags in the image's offload entries instead of
``__tgt_register_requires``: the programs here are those whose results depend on them
(unified shared memory) and a few plain ones.  Only runs without
``LIBOMPTARGET_INFO`` are compared: offload_shim prints libomptarget 16's INFO lines
(under 19.1's ``omptarget`` name), 19.1 has lines of its own (docs/conformance.md)."""

from __future__ import annotations

import pytest

import clang_toolchains as ct
import conformance as cf

NAMES = ("requires_usm.c", "requires_usm_close.c", "requires_usm_enter_data.c",
         "requires_unified_address.c", "map_to_from.c", "firstprivate_pack_sizes.c")
TOOLCHAIN = cf.Toolchain.of(ct.toolchain_fields(ct.CLANG19))
PROGRAMS = [p for p in cf.programs() if p.name in NAMES]


def _cases():
    for prog in PROGRAMS:
        for run in prog.runs:
            if "LIBOMPTARGET_INFO" in run.env or "exe" not in prog.modes:
                continue
            yield pytest.param(prog.name, run.label, id=f"{prog.name}[{run.label}]")


@pytest.fixture(scope="module")
def results():
    why = ct.CLANG19.missing()
    if why:
        pytest.skip(why)
    from offload_shim.cli.run import libpython_path
    try:
        libpython_path()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    builts = cf.build_all(PROGRAMS, TOOLCHAIN)
    out = {}
    for name, b in builts.items():
        if b.error:
            continue
        prog = cf.Program(b.program.path, b.program.summary, b.program.features,
                          b.program.runs, ("exe",), b.program.cflags)
        exe_only = cf.Built(prog, exe=b.exe)
        for run in b.program.runs:
            if "LIBOMPTARGET_INFO" not in run.env:
                out[(name, run.label)] = cf.outcomes(exe_only, run, TOOLCHAIN)["exe"]
    return builts, out


def test_the_programs_exist():
    assert sorted(p.name for p in PROGRAMS) == sorted(NAMES)


@pytest.mark.parametrize("name,label", list(_cases()))
def test_program(results, name, label):
    builts, outcomes = results
    assert builts[name].error is None, builts[name].error
    ref, got = outcomes[(name, label)]
    from offload_shim.cli.compare import Comparison
    c = Comparison([name, label, "exe"], ref, got)
    assert (got.status, got.stdout) == (ref.status, ref.stdout), \
        "\n" + "\n".join(c.diff()) + f"\n--- offload-shim stderr:\n{got.stderr[-3000:]}"
