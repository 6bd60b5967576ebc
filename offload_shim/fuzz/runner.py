"""A fuzzing campaign: generated programs built by each compiler, run under their own
runtime and under ``offload-shim run``, compared, divergences classed and shrunk.

Classes of a divergence:

* ``"offload_shim"``: under ``offload-shim run`` a program gives another result (exit
  status, stdout, the runtime's diagnostic lines: :class:`offload_shim.cli.compare.Outcome`)
  than under the runtime its compiler links, and the reference gives the same result
  when run again;
* ``"fixed_upstream"``: as ``"offload_shim"``, but the run's report
  (``offload-shim run --report``) names a data-losing bug of the program's runtime
  that offload_shim does not reproduce because upstream fixed it
  (docs/conformance.md, "Fixed upstream"): a known, deliberate difference;
* ``"nondeterministic"``: the reference disagrees with itself;
* ``"runtimes"``: the real runtimes (libomptarget 16, 19.1, 22.1) give different results
  for the same program: a behaviour change between releases or an upstream bug.

Programs are drawn eight at a time and built into one binary
(:func:`offload_shim.fuzz.render.render_batch`: the first argument picks one, each
run is a fresh process), so a build serves many runs; those with ``requires
unified_shared_memory`` (a requirement of the whole binary) get a binary of their
own.  Every run has ``OMP_TARGET_OFFLOAD=mandatory`` (a program that cannot offload
stops instead of falling back, under both runtimes) and a private ``TMPDIR`` removed at
the end (the LLVM x86_64 plugins' image copies).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import json

from ..cli.compare import Outcome
from ..cli.run import run_environment
from . import generator as gen
from . import render
from .reduce import reduce
from .toolchains import Toolchain

BATCH = 8
RUN_TIMEOUT = 60.0


@dataclass
class Divergence:
    """One divergence: ``cls`` (see the module), the compilers concerned, the program
    (``source``: a standalone C file), the outputs per run name, whether it was shrunk."""
    cls: str
    compilers: list[str]
    seed: int
    source: str
    outputs: dict
    minimized: bool = False
    steps: int = 0
    original_steps: int = 0

    def as_json(self, path: str | None = None) -> dict:
        return {"class": self.cls, "compilers": self.compilers, "seed": self.seed,
                "program": path or self.source, "outputs": self.outputs,
                "minimized": self.minimized, "steps": self.steps,
                "original_steps": self.original_steps}


@dataclass
class Campaign:
    """A run of the fuzzer: ``toolchains``, the master ``seed``, a ``budget`` in
    seconds (and at most ``limit`` programs); :meth:`run` fills ``programs`` (how many
    were compared) and ``divergences``.  The programs are those of the seed, in order,
    whatever the budget: a budget cut only shortens the list."""
    toolchains: list[Toolchain]
    seed: int = 0
    budget: float = 60.0
    features: gen.Features = field(default_factory=gen.Features)
    shrink: bool = True
    limit: int | None = None            # stop after this many programs (None: the budget)
    programs: int = 0
    builds: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    log: object = None

    def run(self) -> "Campaign":
        start = time.monotonic()
        deadline = start + self.budget
        rng = random.Random(self.seed)
        work = Path(tempfile.mkdtemp(prefix="osh-fuzz-"))
        try:
            self._work = work
            self._tmp = work / "tmp"
            self._tmp.mkdir()
            while time.monotonic() < deadline and self._more():
                seeds = [rng.getrandbits(32) for _ in range(BATCH)]
                progs = [gen.generate(s, self.features) for s in seeds]
                # requires unified_shared_memory binds a whole binary: those programs
                # are built apart from the others
                groups = {usm: [p for p in progs if p.usm == usm] for usm in (False, True)}
                exes = {usm: self._build_batch(g) for usm, g in groups.items() if g}
                for prog in progs:
                    if time.monotonic() >= deadline or not self._more():
                        break
                    k = str(groups[prog.usm].index(prog))
                    self._one(prog, [(tc, exe, k) for tc, exe in exes[prog.usm]], deadline)
                    self.programs += 1
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return self

    def _more(self) -> bool:
        return self.limit is None or self.programs < self.limit

    # -- building and running -----------------------------------------------------------
    def _build_batch(self, progs):
        src = render.render_batch(progs)
        out = []
        for tc in self.toolchains:
            out.append((tc, tc.build(src, self._work, "batch")))
            self.builds += 1
        return out

    def _build_one(self, prog: gen.Program, tc: Toolchain) -> Path:
        self.builds += 1
        return tc.build(render.render_batch([prog]), self._work, "one")

    def _env(self) -> dict:
        env = dict(os.environ)
        env["OMP_TARGET_OFFLOAD"] = "mandatory"
        env["TMPDIR"] = str(self._tmp)
        for v in ("LIBOMPTARGET_INFO", "LIBOMPTARGET_DEBUG"):
            env.pop(v, None)
        return env

    def _outcome(self, exe: Path, arg: str, shim: bool) -> Outcome:
        """The outcome of ``exe arg`` as it is or (``shim``) under ``offload-shim run``;
        the latter's ``fixed`` attribute holds the fixed-upstream cases its report
        names (``{}`` when none)."""
        env = self._env()
        report = None
        if shim:
            report = self._tmp / "report.json"
            with contextlib.suppress(FileNotFoundError):
                report.unlink()
            env = run_environment(base=env, report=str(report))
        try:
            p = subprocess.run([str(exe), arg], stdin=subprocess.DEVNULL,
                               capture_output=True, env=env, timeout=RUN_TIMEOUT)
            o = Outcome.from_output(p.returncode, p.stdout.decode(errors="replace"),
                                    p.stderr.decode(errors="replace"))
        except subprocess.TimeoutExpired as exc:
            o = Outcome.from_output("timeout", (exc.stdout or b"").decode(errors="replace"),
                                    (exc.stderr or b"").decode(errors="replace"))
        o.fixed = {}
        if report is not None:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                o.fixed = dict(json.loads(report.read_text()).get("fixed_upstream") or {})
        return o

    # -- one program ---------------------------------------------------------------------
    def _one(self, prog, runs, deadline) -> None:
        refs = {}
        known: set[str] = set()
        for tc, exe, arg in runs:
            ref = self._outcome(exe, arg, False)
            got = self._outcome(exe, arg, True)
            refs[tc.name] = ref
            known |= set(got.fixed)
            if ref.key() != got.key():
                again = self._outcome(exe, arg, False)
                # a known bug of the reference first: it may itself make the reference
                # read memory nobody wrote (a kernel that wrote the host copy instead)
                cls = ("fixed_upstream" if got.fixed
                       else "nondeterministic" if again.key() != ref.key() else "offload_shim")
                outputs = {f"{tc.name} reference": ref.render(),
                           f"{tc.name} offload-shim run": got.render() + got.render_context()}
                if cls == "nondeterministic":
                    outputs[f"{tc.name} reference again"] = again.render()
                if got.fixed:
                    outputs[f"{tc.name} fixed upstream"] = sorted(got.fixed)
                self._found(cls, [tc], prog, outputs, deadline)
        keys = {name: o.key() for name, o in refs.items()}
        if len(set(keys.values())) > 1:
            outputs = {f"{name} reference": o.render() for name, o in refs.items()}
            if known:
                outputs["fixed upstream"] = sorted(known)
            self._found("runtimes", [tc for tc, _e, _a in runs], prog, outputs, deadline,
                        shrink=not known)

    def _found(self, cls, tcs, prog, outputs, deadline, shrink=True) -> None:
        d = Divergence(cls, [tc.name for tc in tcs], prog.seed, "", outputs,
                       original_steps=prog.count_steps())
        small = prog
        # a known bug (fixed upstream) is not shrunk again: the time goes to new programs
        if self.shrink and shrink and cls not in ("nondeterministic", "fixed_upstream"):
            pred = self._predicate(cls, tcs)
            small, _calls = reduce(prog, pred, deadline=min(deadline, time.monotonic() + 90))
            d.minimized = small is not prog
            if d.minimized:
                d.outputs = self._outputs_of(cls, tcs, small)
        d.steps = small.count_steps()
        d.source = render.render_batch([small])
        self.divergences.append(d)
        if self.log:
            self.log(f"{cls} divergence (seed {prog.seed}, {d.original_steps} -> {d.steps} "
                     f"steps, {', '.join(d.compilers)})")

    def _predicate(self, cls, tcs):
        def still(prog: gen.Program) -> bool:
            try:
                exes = [(tc, self._build_one(prog, tc)) for tc in tcs]
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                return False
            if cls in ("offload_shim", "fixed_upstream"):
                tc, exe = exes[0]
                got = self._outcome(exe, "0", True)
                return (self._outcome(exe, "0", False).key() != got.key()
                        and bool(got.fixed) == (cls == "fixed_upstream"))
            keys = {self._outcome(exe, "0", False).key() for _tc, exe in exes}
            return len(keys) > 1
        return still

    def _outputs_of(self, cls, tcs, prog) -> dict:
        out = {}
        for tc in tcs:
            exe = self._build_one(prog, tc)
            out[f"{tc.name} reference"] = self._outcome(exe, "0", False).render()
            if cls in ("offload_shim", "fixed_upstream"):
                got = self._outcome(exe, "0", True)
                out[f"{tc.name} offload-shim run"] = got.render() + got.render_context()
                if got.fixed:
                    out[f"{tc.name} fixed upstream"] = sorted(got.fixed)
        return out

    def counts(self) -> dict:
        out = {"offload_shim": 0, "fixed_upstream": 0, "runtimes": 0, "nondeterministic": 0}
        for d in self.divergences:
            out[d.cls] += 1
        return out


__all__ = ["BATCH", "Campaign", "Divergence"]
