"""``offload-shim fuzz``: the program generator and its model, the minimiser, and a short
fixed-seed campaign with clang-16 (offload_shim/fuzz/, docs/fuzzing.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from offload_shim.fuzz import generator as gen
from offload_shim.fuzz import render as rnd
from offload_shim.fuzz.reduce import candidates, reduce
from offload_shim.fuzz.toolchains import ToolchainError, toolchain


def test_the_same_seed_gives_the_same_program():
    for seed in (0, 1, 7, 2**31 + 5):
        a, b = gen.generate(seed), gen.generate(seed)
        assert a == b
        assert rnd.render_batch([a]) == rnd.render_batch([b])
    sources = {rnd.render(gen.generate(s)) for s in range(20)}
    assert len(sources) == 20


WORDS = ("enter data", "exit data", "target update", "target data", "always",
         "omp_target_alloc", "nowait", "q0[", "s0.p[", ":2]", "declare target",
         "delete:", "release:", "alloc:", "close, ", "present, ", ": m0)", "depend(inout:",
         "use_device_ptr(r", "use_device_addr(", "omp_target_memcpy_rect",
         "omp_target_associate_ptr", "target device(", "unified shared memory")


def _kinds(steps):
    for s in steps:
        yield type(s).__name__ + ":" + getattr(s, "kind", "")
        yield from _kinds(getattr(s, "body", ()))


ALL_KINDS = {"HostWrite:", "EnterData:", "ExitData:", "Update:", "Kernel:", "DataRegion:",
             "Chain:", "UseDevice:ptr", "UseDevice:addr", "ImplicitPointer:",
             "DeviceMemory:memcpy", "DeviceMemory:rect", "DeviceMemory:associate",
             "GlobalKernel:", "OtherDevice:"}


def test_every_generated_program_is_valid_for_the_model_and_covers_the_features():
    seen, kinds = set(), set()
    for seed in range(300):
        prog = gen.generate(seed)
        gen.simulate(prog)                      # raises ModelError otherwise
        src = rnd.render(prog)
        seen |= {w for w in WORDS if w in src}
        kinds |= set(_kinds(prog.steps))
        if prog.usm:                            # the model's view: no present/close there
            assert "present, " not in src and "close, " not in src
            assert "omp_target_associate_ptr" not in src and "use_device_" not in src
    assert seen == set(WORDS), set(WORDS) - seen
    assert kinds == ALL_KINDS, ALL_KINDS - kinds


def test_the_model_refuses_reading_device_memory_nobody_wrote():
    arrays = (gen.Array("a0", 8, 0, 8),)
    alloc = gen.MapItem(0, "alloc")
    bad = gen.Program(1, arrays, (gen.EnterData((alloc,)),
                                  gen.ExitData((gen.MapItem(0, "from"),))))
    with pytest.raises(gen.ModelError, match="unwritten"):
        gen.simulate(bad)
    bad_update = gen.Program(1, arrays, (gen.EnterData((alloc,)), gen.Update(0, "from")))
    assert not gen.valid(bad_update)
    # a kernel writes the whole section: afterwards the copy back is defined
    good = gen.Program(1, arrays, (gen.EnterData((alloc,)),
                                   gen.Kernel((gen.MapItem(0, "alloc"),), 3),
                                   gen.ExitData((gen.MapItem(0, "from"),))))
    gen.simulate(good)
    # reference counts: a second entry keeps the array present past one exit
    two = gen.Program(1, arrays, (gen.EnterData((gen.MapItem(0, "to"),)),
                                  gen.EnterData((alloc,)),
                                  gen.ExitData((gen.MapItem(0, "release"),)),
                                  gen.Update(0, "from")))
    gen.simulate(two)
    # an update of an array that is not present does nothing (and reads nothing)
    gen.simulate(gen.Program(1, arrays, (gen.Update(0, "from"),)))
    # delete drops the count to zero at once
    deleted = gen.Program(1, arrays, (gen.EnterData((gen.MapItem(0, "to"),)),
                                      gen.EnterData((gen.MapItem(0, "to"),)),
                                      gen.ExitData((gen.MapItem(0, "delete"),)),
                                      gen.EnterData((alloc,)),
                                      gen.ExitData((gen.MapItem(0, "from"),))))
    assert not gen.valid(deleted)


def test_the_model_of_modifiers_chains_use_device_and_unified_shared_memory():
    arrays = (gen.Array("a0", 8, 0, 8), gen.Array("a1", 4, 1, 0))
    to = gen.MapItem(0, "to")

    def prog(*steps, usm=False):
        return gen.Program(1, arrays, steps, usm=usm)
    # present only where the section is present (else the program stops)
    assert not gen.valid(prog(gen.Kernel((gen.MapItem(0, "to", present=True),), 1)))
    assert gen.valid(prog(gen.EnterData((to,)),
                          gen.Kernel((gen.MapItem(0, "to", present=True),), 1)))
    # use_device_ptr/addr and implicit pointers: only while present; they write the
    # device copy, so a copy back afterwards is defined
    for s in (gen.UseDevice(0, "ptr", 1), gen.UseDevice(0, "addr", 1),
              gen.ImplicitPointer(0, 1)):
        assert not gen.valid(prog(s))
        assert gen.valid(prog(gen.EnterData((gen.MapItem(0, "alloc"),)), s,
                              gen.ExitData((gen.MapItem(0, "from"),))))
    # associate_ptr needs an absent, non-empty section
    assert gen.valid(prog(gen.DeviceMemory(0, 1, "associate")))
    assert not gen.valid(prog(gen.EnterData((to,)), gen.DeviceMemory(0, 1, "associate")))
    assert not gen.valid(prog(gen.DeviceMemory(1, 1, "associate")))
    assert not gen.valid(prog(gen.DeviceMemory(0, 1, "rect", rows=3)))      # 3 does not divide 8
    # a chain is followed step by step, and holds only constructs that take nowait
    bad_chain = gen.Chain((gen.EnterData((gen.MapItem(0, "alloc"),)), gen.Update(0, "from")))
    assert not gen.valid(prog(bad_chain))
    assert not gen.valid(prog(gen.Chain((gen.HostWrite(0, 1),))))
    assert not gen.valid(prog(gen.Chain(())))
    assert not gen.valid(prog(gen.Chain((gen.Update(0, "to", stride=2),))))
    # always through a mapper copies the struct, not the section (clang 16-22)
    a_to = gen.MapItem(0, "to", always=True, via="mapper")
    assert not gen.valid(prog(gen.EnterData((gen.MapItem(0, "alloc"),)), gen.EnterData((a_to,)),
                              gen.Update(0, "from")))
    assert gen.valid(prog(gen.EnterData((gen.MapItem(0, "alloc"),)),
                          gen.EnterData((gen.MapItem(0, "to", always=True),)),
                          gen.Update(0, "from")))
    # unified shared memory: the device copy is the host's memory, always written
    alloc_from = (gen.EnterData((gen.MapItem(0, "alloc"),)),
                  gen.ExitData((gen.MapItem(0, "from"),)))
    assert not gen.valid(prog(*alloc_from))
    assert gen.valid(prog(*alloc_from, usm=True))
    assert not gen.valid(prog(gen.Kernel((gen.MapItem(0, "to", close=True),), 1), usm=True))
    assert not gen.valid(prog(gen.DeviceMemory(0, 1, "associate"), usm=True))
    # use_device_*: null under libomptarget 16/19.1 there, the host address under 22.1
    assert not gen.valid(prog(gen.EnterData((to,)), gen.UseDevice(0, "ptr", 1), usm=True))
    assert gen.valid(prog(gen.ImplicitPointer(0, 1), usm=True))


def test_the_source_of_the_new_constructs():
    arrays = (gen.Array("a0", 8, 2, 4), gen.Array("a1", 4, 0, 4))
    steps = (gen.EnterData((gen.MapItem(0, "to"), gen.MapItem(1, "alloc", via="mapper"))),
             gen.Chain((gen.Kernel((gen.MapItem(0, "tofrom", present=True),
                                    gen.MapItem(1, "to", via="mapper")), 5),
                        gen.Update(0, "from"))),
             gen.UseDevice(0, "ptr", 6), gen.UseDevice(0, "addr", 7),
             gen.ImplicitPointer(1, 8), gen.OtherDevice(1, 2, 9))
    src = rnd.render(gen.Program(1, arrays, steps), "p")
    assert "#pragma omp declare mapper(struct p_t1 v) map(tofrom: v, v.p[0:4])" in src
    assert "map(alloc: m1)" in src
    assert ("#pragma omp target map(present, tofrom: p_a0[2:4]) map(to: m1) nowait "
            "depend(inout: p_a0, p_a1)") in src
    assert "#pragma omp target update from(p_a0[2:4]) nowait depend(inout: p_a0)" in src
    assert src.count("#pragma omp taskwait") == 1
    assert "m1.p[i] = (unsigned)i * 7u + 5u;" in src   # alloc: its copy not yet written
    assert "#pragma omp target data use_device_ptr(r0)" in src
    assert "#pragma omp target data use_device_addr(p_a0[2:4])" in src
    assert 'printf("use_device_ptr %d\\n", omp_get_mapped_ptr(&p_a0[2], dev) == (void *)r0);' \
        in src
    assert "r0[i] = r0[i] * 23u + 6u;" in src           # a0's copy: written by "to"
    assert "r1[i] = r1[i] * 31u + 8u;" in src           # a1's: by the kernel
    assert "#pragma omp target enter data device(2) map(to: p_a1[0:4])" in src
    # requires unified_shared_memory binds a translation unit
    usm = gen.Program(2, arrays, (gen.Kernel((gen.MapItem(0, "alloc"),), 1),), usm=True)
    assert "#pragma omp requires unified_shared_memory" in rnd.render_batch([usm])
    assert "requires" not in rnd.render_batch([gen.Program(1, arrays, steps)])
    with pytest.raises(ValueError, match="unified_shared_memory"):
        rnd.render_batch([usm, gen.Program(1, arrays, steps)])


@pytest.mark.parametrize("version", [16, 19, 22])
def test_generated_programs_build_without_warnings(version, tmp_path):
    """Programs holding every kind of step build with each compiler, the
    unified-shared-memory ones in a unit of their own, without a warning (clang warns,
    and drops the clause, where it does not take one)."""
    try:
        tc = toolchain(version)
    except ToolchainError as exc:
        pytest.fail(f"clang-{version} is part of the set-up: {exc}")
    progs, kinds = {False: [], True: []}, set()
    for seed in range(200):
        prog = gen.generate(seed)
        new = set(_kinds(prog.steps)) - kinds
        if new or (prog.usm and len(progs[True]) < 2):
            progs[prog.usm].append(prog)
            kinds |= new
    assert kinds == ALL_KINDS and progs[True]
    for usm, group in progs.items():
        src = tmp_path / f"batch{int(usm)}.c"
        src.write_text(rnd.render_batch(group))
        p = subprocess.run([tc.cc, "-O1", "-Wall", "-Wextra", *tc.flags(), str(src), "-o",
                            str(tmp_path / f"batch{int(usm)}")], capture_output=True,
                           text=True, timeout=900)
        assert p.returncode == 0 and "warning:" not in p.stderr, p.stderr[-3000:]


def test_the_kernel_reads_only_valid_device_copies_in_the_source():
    arrays = (gen.Array("a0", 4, 0, 4),)
    prog = gen.Program(1, arrays, (gen.Kernel((gen.MapItem(0, "alloc"),), 5),
                                   gen.Kernel((gen.MapItem(0, "to"),), 6)))
    src = rnd.render(prog, "p")
    assert "p_a0[i] = (unsigned)i * 7u + 5u;" in src         # alloc: written only
    assert "p_a0[i] = p_a0[i] * 3u + 6u;" in src              # to: read and written


def _has_kernel_c(prog, c):
    def walk(steps):
        for s in steps:
            if isinstance(s, gen.Kernel) and s.c == c:
                return True
            if isinstance(s, gen.DataRegion) and walk(s.body):
                return True
        return False
    return walk(prog.steps)


def test_the_minimiser_keeps_what_the_predicate_needs_and_nothing_else():
    # a program with a kernel of constant 77 deep inside a data region
    arrays = (gen.Array("a0", 8, 0, 8), gen.Array("a1", 4, 1, 2))
    target = gen.Kernel((gen.MapItem(0, "tofrom"), gen.MapItem(1, "to")), 77)
    prog = gen.Program(3, arrays, (
        gen.HostWrite(0, 4),
        gen.EnterData((gen.MapItem(1, "to"),)),
        gen.DataRegion((gen.MapItem(0, "to"),), (gen.HostWrite(1, 2), target,
                                                  gen.Update(0, "from"))),
        gen.ExitData((gen.MapItem(1, "from"),)),
    ))
    gen.simulate(prog)
    calls = []

    def pred(p):
        calls.append(p)
        return _has_kernel_c(p, 77)

    small, n = reduce(prog, pred)
    assert n == len(calls) and n > 0
    assert small.count_steps() == 1
    assert isinstance(small.steps[0], gen.Kernel) and small.steps[0].c == 77
    assert len(small.steps[0].items) == 1                   # one map item is enough
    assert all(gen.valid(c) for c in calls)                  # only valid candidates tried
    assert reduce(prog, pred) == (small, n)                  # deterministic
    # a deadline in the past returns the program as it was
    assert reduce(prog, pred, deadline=0.0)[0] == prog


def test_candidates_are_one_change_each():
    prog = gen.generate(11)
    n = prog.count_steps()
    items = sum(len(getattr(s, "items", ())) for s in _all_steps(prog.steps))
    for cand in candidates(prog):
        assert cand != prog
        m = cand.count_steps()
        cand_items = sum(len(getattr(s, "items", ())) for s in _all_steps(cand.steps))
        # a step (with what a removed region held), a region's wrapper, or one map item
        assert m < n or (m == n and cand_items == items - 1)


def _all_steps(steps):
    for s in steps:
        yield s
        yield from _all_steps(getattr(s, "body", ()))


def test_the_minimiser_unwraps_a_chain():
    arrays = (gen.Array("a0", 8, 0, 8),)
    chain = gen.Chain((gen.EnterData((gen.MapItem(0, "to"),)),
                       gen.Kernel((gen.MapItem(0, "tofrom"),), 77)))
    prog = gen.Program(3, arrays, (gen.HostWrite(0, 1), chain))
    unwrapped = prog.with_steps((gen.HostWrite(0, 1),) + chain.body)
    assert unwrapped in list(candidates(prog))
    small, _n = reduce(prog, lambda p: any(
        isinstance(s, gen.Chain) and any(getattr(k, "c", 0) == 77 for k in s.body)
        for s in p.steps))
    assert small.steps == (gen.Chain((chain.body[1],)),)


def test_toolchain_names_what_is_missing(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="16, 19 and 22"):
        toolchain(17)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match="clang-16 is not installed"):
        toolchain(16)


def _shim_cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "offload_shim", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_fuzz_refuses_an_unknown_compiler():
    p = _shim_cli("fuzz", "--compilers", "16,17", timeout=60)
    assert p.returncode == 2
    assert "compilers are 16, 19 and 22" in p.stderr


def test_a_short_fixed_seed_campaign_with_clang16_finds_no_offload_shim_divergence(tmp_path):
    try:
        toolchain(16)
    except ToolchainError as exc:
        pytest.fail(f"clang-16 is part of the set-up: {exc}")
    # a count of programs, not a time: the same programs on a busy machine as on an idle
    # one (the budget only guards against a hang)
    p = _shim_cli("fuzz", "--seed", "7", "--programs", "8", "--budget", "900",
                  "--compilers", "16", "--json", "--out", str(tmp_path), timeout=1200)
    assert p.returncode in (0, 1), p.stderr
    res = json.loads(p.stdout)
    assert res["programs"] == 8 and res["compilers"] == ["clang-16"]
    bad = [d for d in res["divergences"] if d["class"] == "offload_shim"]
    assert bad == [] and p.returncode == 0, json.dumps(bad, indent=1)[:4000]
    # what a divergence leaves is a program that builds on its own
    for d in res["divergences"]:
        assert os.path.exists(d["program"])
