"""The conformance programs built by clang-19 and clang-22 (tests/programs/, the same
sources as tests/test_conformance.py) give the same exit status, stdout and runtime
diagnostics under ``offload-shim run`` as under the compiler's own runtime.

The reference is the program as built: its rpath makes the libomptarget of its own
release the runtime (libomptarget 19.1 from .cache/llvm19, 22.1 from
.cache/liboffload22; tests/clang_toolchains.py), with that release's host plugin linked
in.  Under ``offload-shim run`` the interposer follows that release
(offload_shim/interposer/llvm/profile.py), so the runtime's lines (``omptarget message:`` /
``error:`` / ``fatal error N:`` / ``device N info:``) are compared line for line in
19.1's and 22.1's own words (the API routines of 19.1 / 22.1 included).  Programs
whose header names the compilers that can build them (``clang: 19 22``) run only with
those.  The plugin's own lines are the LLVM 16 x86_64 plugin's
(offload_shim drives it): its ``Launching kernel NAME with ... blocks and ... threads``
line is compared without the two counts (:func:`plugin_neutral`; the LLVM 16 plugin
prints ``1``, 19.1's host plugin the numbers the construct asked for, 22.1's
``[1,1,1]``).  Only the executable variant runs, to keep CI short (the Python-host
variants exercise the same interposer paths and run with clang-16).  A program whose
reference loses data where upstream fixed the bug (``conformance.FIXED_UPSTREAM`` with
clang 19) must instead give the fixed result (libomptarget 22.1's) and name the bug in
its report (``conformance.check_fixed_upstream``).
"""

from __future__ import annotations

import os
import re

import pytest

import clang_toolchains as ct
import conformance as cf

TOOLCHAINS = {cc.name: cf.Toolchain.of(ct.toolchain_fields(cc)) for cc in (ct.CLANG19, ct.CLANG22)}
PROGRAMS = [p for p in cf.programs() if "exe" in p.modes]

#: the reference crashes, or not, by the order of the destructors at exit (not strict)
FLAKY_REFERENCE = {
    ("exit_atexit_offload.c", None):
        "a destructor function that offloads after main: libomptarget 19/22 free their "
        "plugin manager in their own destructor, and when that one runs first the "
        "program's region crashes (SIGSEGV in omp_get_num_devices, seen with gdb; no "
        "stdout, it was still buffered) -- in some runs and not in others; offload_shim "
        "runs the region and the program exits 0",
}

#: (program, toolchain name or None[, run label]) -> why the results differ
#: (docs/conformance.md)
_PLUGIN_DEBUG = ("the LLVM 16 x86_64 plugin reads LIBOMPTARGET_DEBUG itself (with "
                 "std::stoi, at its first INFO statement: 1 silences its 'Launching kernel' "
                 "line, abc ends the program with std::terminate at the first launch); "
                 "libomptarget 22.1 and its host plugin do not read it, and offload_shim, "
                 "which follows 22.1, drives the LLVM 16 plugin")
KNOWN = {
    ("api_print_device_info.c", None):
        "__tgt_print_device_info prints what the plugin prints: the LLVM 16 x86_64 plugin "
        "under offload_shim, the host plugin built into libomptarget 19/22 in the reference "
        "(another text)",
    ("env_info_parse.c", "clang-22", "LIBOMPTARGET_DEBUG=1 LIBOMPTARGET_INFO=-1"):
        _PLUGIN_DEBUG,
    ("env_info_parse.c", "clang-22", "LIBOMPTARGET_DEBUG=abc"): _PLUGIN_DEBUG,
    ("api_record_replay.c", None):
        "__tgt_activate_record_replay: the host plugin of libomptarget 19/22 prints its "
        "'\"PluginInterface\" error: WARNING RR did not intialize ...' line; offload_shim, "
        "driving the LLVM 16 plugins (which cannot record), prints one offload_shim line "
        "instead (docs/conformance.md); exit status and stdout agree",
    ("api_interop.c", "clang-19", "use"):
        "libomptarget 19.1's __tgt_interop_use dereferences omp_interop_none (its "
        "__tgt_interop_init gives none when the plugin has no device info): SIGSEGV; "
        "offload_shim does nothing, as 22.1",
    ("api_interop.c", "clang-19", "sync"):
        "libomptarget 19.1's __tgt_interop_init of a targetsync object asks the plugin "
        "for async info through the object it has just replaced by omp_interop_none: "
        "SIGSEGV; offload_shim gives omp_interop_none, as 22.1",
    ("declare_target_indirect_usm.c", "clang-19"):
        "the reference dies (SIGSEGV) at its first construct: under unified shared memory "
        "libomptarget 19.1 also copies the host function into the device global of an "
        "indirect entry, which is read-only (PluginManager::loadImagesOntoDevice); 22.1 "
        "skips indirect entries, and so does offload_shim (the program's results)",
}

_LAUNCH_COUNTS = re.compile(r"(Launching kernel \S+ with ).*( blocks and ).*( threads in )")


def plugin_neutral(lines: list[str]) -> list[str]:
    """``lines`` (normalised diagnostics) with the block and thread counts of the
    plugin's ``"PluginInterface" device N info: Launching kernel ...`` lines replaced
    by ``?``: they are the plugin's, and offload_shim drives the LLVM 16 x86_64 plugin
    (``1 blocks and 1 threads``) where 19.1's host plugin prints the numbers asked for
    and 22.1's ``[1,1,1] blocks and [1,1,1] threads``.  The kernel's name and mode stay,
    and every other line is unchanged."""
    return [_LAUNCH_COUNTS.sub(r"\1?\2?\3", l) if l.startswith('"PluginInterface"') else l
            for l in lines]


def _cases():
    for tc in TOOLCHAINS:
        for prog in PROGRAMS:
            if not prog.built_by(TOOLCHAINS[tc]):
                continue
            for run in prog.runs:
                why = (KNOWN.get((prog.name, tc, run.label)) or KNOWN.get((prog.name, tc))
                       or KNOWN.get((prog.name, None)))
                marks = [pytest.mark.xfail(reason=why, strict=True)] if why else []
                flaky = FLAKY_REFERENCE.get((prog.name, tc)) or FLAKY_REFERENCE.get((prog.name, None))
                if flaky:
                    marks = [pytest.mark.xfail(reason=flaky, strict=False)]
                yield pytest.param(tc, prog.name, run.label, id=f"{tc}-{prog.name}[{run.label}]",
                                   marks=marks)


@pytest.fixture(scope="session")
def clang_results(request):
    """Build (executables only) and run the programs the selected tests need, per
    toolchain: {toolchain: (builts, {(program, run label): (reference, shim)})}."""
    wanted: dict[str, set] = {}
    for item in request.session.items:
        if item.originalname == "test_program_clang" and hasattr(item, "callspec"):
            wanted.setdefault(item.callspec.params["tc"], set()).add(item.callspec.params["name"])
    out = {}
    for name, names in wanted.items():
        tc = TOOLCHAINS[name]
        if tc.missing():
            out[name] = tc.missing()
            continue
        builts = cf.build_all([p for p in PROGRAMS if p.name in names], tc, library=False)
        out[name] = (builts, cf.run_all_exe(builts, tc))
    return out


@pytest.mark.parametrize("tc,name,label", list(_cases()))
def test_program_clang(clang_results, tc, name, label):
    res = clang_results[tc]
    if isinstance(res, str):
        pytest.skip(f"{tc}: {res}")
    builts, outcomes = res
    b = builts[name]
    assert b.error is None, f"{name} does not build with {tc}:\n{b.error}"
    ref, got = outcomes[(name, label)]
    version = int(tc.split("-")[1])
    if (name, version) in cf.FIXED_UPSTREAM:
        fixed = cf.fixed_reference(name, label)
        if isinstance(fixed, str):
            pytest.skip(fixed)
        cf.check_fixed_upstream(name, version, ref, got, fixed)
        return
    want = (ref.status, ref.stdout, plugin_neutral(ref.diagnostics))
    have = (got.status, got.stdout, plugin_neutral(got.diagnostics))
    assert have == want, (
        f"\nreference: exit {ref.status}\n" + "\n".join(ref.stdout + ref.diagnostics)
        + f"\noffload-shim run: exit {got.status}\n" + "\n".join(got.stdout + got.diagnostics)
        + f"\n--- offload-shim stderr:\n{got.stderr[-3000:]}")
    if b.program.stderr_exact:
        assert cf.stderr_lines(got) == cf.stderr_lines(ref), (
            f"\nreference stderr:\n{ref.stderr[-3000:]}\noffload-shim stderr:\n"
            f"{got.stderr[-3000:]}")


def test_plugin_neutral_keeps_everything_but_the_counts():
    ref = ['"PluginInterface" device 0 info: Launching kernel k_l1 with [1,1,1] blocks and '
           '[1,1,1] threads in Generic mode', "omptarget device 0 info: Size=4 with 3 blocks "
           "and 2 threads in"]
    got = ['"PluginInterface" device 0 info: Launching kernel k_l1 with 1 blocks and 1 '
           'threads in Generic mode', ref[1]]
    assert plugin_neutral(ref) == plugin_neutral(got)
    assert plugin_neutral(ref)[1] == ref[1]                 # the runtime's lines stay
    other = [got[0].replace("k_l1", "k_l2")]
    assert plugin_neutral(other) != plugin_neutral(got[:1])
    assert plugin_neutral([got[0].replace("Generic", "SPMD")]) != plugin_neutral(got[:1])


def test_every_known_difference_names_a_program():
    names = {p.name for p in PROGRAMS}
    built = {p.name: p for p in PROGRAMS}
    for table in (KNOWN, FLAKY_REFERENCE):
        assert {key[0] for key in table} <= names
        assert all(key[1] is None or key[1] in TOOLCHAINS for key in table)
        # a compiler-specific difference names a compiler that builds the program
        assert all(key[1] is None or built[key[0]].built_by(TOOLCHAINS[key[1]])
                   for key in table)
        # a run label names one of the program's runs
        runs = {p.name: {r.label for r in p.runs} for p in PROGRAMS}
        assert all(key[2] in runs[key[0]] for key in table if len(key) > 2)
