"""``offload-shim fuzz``: the program generator and its model, the minimiser, and a short
fixed-seed campaign with clang-16 (offload_shim/fuzz/, docs/fuzzing.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from offload_shim.fuzz import generator as gen
from offload_shim.fuzz.reduce import candidates, reduce
from offload_shim.fuzz.toolchains import ToolchainError, toolchain


def test_the_same_seed_gives_the_same_program():
    for seed in (0, 1, 7, 2**31 + 5):
        a, b = gen.generate(seed), gen.generate(seed)
        assert a == b
        assert gen.render_batch([a]) == gen.render_batch([b])
    sources = {gen.render(gen.generate(s)) for s in range(20)}
    assert len(sources) == 20


def test_every_generated_program_is_valid_for_the_model_and_covers_the_features():
    seen = set()
    for seed in range(300):
        prog = gen.generate(seed)
        gen.simulate(prog)                      # raises ModelError otherwise
        src = gen.render(prog)
        for word in ("enter data", "exit data", "target update", "target data", "always",
                     "omp_target_alloc", "nowait", "q0[", "s0.p[", ":2]", "declare target",
                     "delete:", "release:", "alloc:"):
            if word in src:
                seen.add(word)
    assert len(seen) == 14, seen


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


def test_the_kernel_reads_only_valid_device_copies_in_the_source():
    arrays = (gen.Array("a0", 4, 0, 4),)
    prog = gen.Program(1, arrays, (gen.Kernel((gen.MapItem(0, "alloc"),), 5),
                                   gen.Kernel((gen.MapItem(0, "to"),), 6)))
    src = gen.render(prog, "p")
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
        if isinstance(s, gen.DataRegion):
            yield from _all_steps(s.body)


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
