"""The differential conformance harness: tests/programs/ built by a compiler, each run
under the compiler's own offload runtime (the reference) and under offload_shim.

A :class:`Toolchain` names the compiler and how its reference runtime is found (clang-16
with the Debian libomptarget 16 and host plugins is :data:`CLANG16`; clang-19/22 with
their unpacked runtimes: ``Toolchain.of(clang_toolchains.toolchain_fields(CLANG19))``,
whose rpath makes the program's own libomptarget the reference; ``ref_env`` adds
environment to the reference runs).  Each program is compiled once per toolchain into an object, linked as an
executable and as a shared library (with ``support/entry.c``: ``osh_program_run``),
cached by content hash under ``$TMPDIR/osh-conformance`` so a second session builds
nothing.

A program's first comment holds its metadata::

    /* One line saying what it checks.
       feature: map-to, map-from        (rows of docs/conformance.md)
       run: ARGS                        (one run per line; leading VAR=value set env)
       modes: exe lib                   (default: both)
       cflags: -g                       (extra compiler flags)
       clang: 19 22                     (the compilers that can build it; default:
                                         16 19 22 -- an API an older omp.h or
                                         libomptarget lacks)
       stderr: exact                    (all of stderr is compared, not only the
                                         runtime's diagnostic lines)
    */

Variants of one run, each compared with its reference
(:class:`offload_shim.cli.compare.Outcome`: exit status, stdout, diagnostics):

* ``exe``: the executable as is vs under ``offload-shim run``;
* ``lib``: ``python support/host.py lib.so`` as is vs under ``offload-shim run``;
* ``run-library``: ``offload-shim run-library --call osh_program_run`` vs the ``lib``
  reference.

A program whose own runtime loses data where a later release fixed it (a bug of
:data:`offload_shim.interposer.llvm.profile.FIXED_UPSTREAM`, which offload_shim does not
reproduce) is listed in :data:`FIXED_UPSTREAM` for that compiler: its reference shows
the bug, and the harnesses check instead that the run under ``offload-shim run`` gives
the fixed result -- the same program's under libomptarget 22.1
(:func:`fixed_reference`) -- and that its report names the bug
(:func:`check_fixed_upstream`).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from offload_shim.cli.compare import Comparison, Outcome, run_outcome, run_shim_outcome

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "programs"
SUPPORT = PROGRAMS / "support"
BUILD_VERSION = "1"          # bump when the build recipe changes
OMP_FLAGS = ("-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-fopenmp-version=51")
VARIANTS = ("exe", "lib", "run-library")


@dataclass(frozen=True)
class Toolchain:
    """A compiler and its reference runtime.  ``cc``/``cxx``: compiler commands;
    ``flags``: OpenMP offload flags; ``ref_env``: environment added to reference runs
    (and to builds: ``LIBRARY_PATH`` & co.); ``ldflags``: extra link flags (rpath to
    the runtime); ``shim_options``: ``run_environment`` keyword arguments of the
    offload_shim runs."""
    name: str
    cc: str
    cxx: str
    flags: tuple = OMP_FLAGS
    ldflags: tuple = ()
    ref_env: tuple = ()              # (("VAR", "value"), ...)
    shim_options: tuple = ()         # (("plugins", (...)), ...)
    required: tuple = ()             # files that must exist

    def missing(self) -> str | None:
        """Why this toolchain cannot be used here, or None."""
        for tool in (self.cc, self.cxx):
            if shutil.which(tool) is None:
                return f"{tool} not installed"
        for f in self.required:
            if not Path(f).exists():
                return f"{f} missing"
        return None

    def identity(self) -> str:
        out = subprocess.run([self.cc, "--version"], capture_output=True, text=True)
        return out.stdout.splitlines()[0] if out.stdout else self.cc

    @classmethod
    def of(cls, fields: dict) -> "Toolchain":
        """From ``clang_toolchains.toolchain_fields(cc)`` (clang-19/22 with their
        unpacked runtimes: extra compile ``flags``, ``ldflags`` with the rpath that
        makes the program's own libomptarget the reference)."""
        return cls(fields["name"], fields["cc"], fields["cxx"],
                   flags=OMP_FLAGS + tuple(fields.get("flags", ())),
                   ldflags=tuple(fields.get("ldflags", ())),
                   required=tuple(fields.get("required", ())))

    def env(self, base=None) -> dict:
        env = dict(os.environ if base is None else base)
        env.update(dict(self.ref_env))
        return env


LLVM16_BIN = Path("/usr/lib/llvm-16/bin")
CLANG16 = Toolchain(
    "clang-16", "clang-16", "clang++-16",
    required=(str(LLVM16_BIN / "clang-linker-wrapper"), str(LLVM16_BIN / "clang-offload-packager"),
              "/usr/lib/llvm-16/lib/libomptarget.so.16"))


@dataclass
class Run:
    args: list[str]
    env: dict[str, str]

    @property
    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in self.env.items()] + self.args
        return " ".join(parts) if parts else "-"


@dataclass
class Program:
    """One source file of tests/programs/ with its metadata."""
    path: Path
    summary: str
    features: list[str]
    runs: list[Run]
    modes: tuple[str, ...]
    cflags: tuple[str, ...] = ()
    compilers: tuple[int, ...] = (16, 19, 22)
    stderr_exact: bool = False

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def cpp(self) -> bool:
        return self.path.suffix in (".cpp", ".cc")

    @classmethod
    def parse(cls, path: Path) -> "Program":
        text = path.read_text()
        m = re.search(r"/\*(.*?)\*/", text, re.S)
        head = m.group(1) if m else ""
        lines = [l.strip() for l in head.strip().splitlines()]
        summary = lines[0] if lines else path.stem
        features, runs, modes, cflags = [], [], ("exe", "lib"), ()
        compilers, stderr_exact = (16, 19, 22), False
        for line in lines[1:]:
            key, _, val = line.partition(":")
            key = key.strip().lower()
            if key == "feature":
                features += [f.strip() for f in val.split(",") if f.strip()]
            elif key == "run":
                toks = [t for t in val.split() if t != "-"]
                env = {}
                while toks and re.match(r"^[A-Z_][A-Z0-9_]*=", toks[0]):
                    k, _, v = toks.pop(0).partition("=")
                    env[k] = v
                runs.append(Run(toks, env))
            elif key == "modes":
                modes = tuple(val.split())
            elif key == "cflags":
                cflags = tuple(val.split())
            elif key == "clang":
                compilers = _versions(val, path, key)
            elif key == "stderr":
                stderr_exact = val.strip() == "exact"
        return cls(path, summary, features, runs or [Run([], {})], modes, cflags,
                   compilers, stderr_exact)

    def built_by(self, tc: "Toolchain") -> bool:
        """Whether ``tc`` (clang-N) can build this program (its ``clang:`` list)."""
        return _clang_version(tc.name) in self.compilers


def _versions(val: str, path: Path, key: str) -> tuple[int, ...]:
    """The compiler versions of a ``clang:`` header line; raises
    ValueError (naming the file) for anything but 16, 19 and 22."""
    out = []
    for tok in val.split():
        if tok not in ("16", "19", "22"):
            raise ValueError(f"{path.name}: {key}: {tok!r} is not one of 16 19 22")
        out.append(int(tok))
    if not out:
        raise ValueError(f"{path.name}: {key}: no compiler named")
    return tuple(out)


def _clang_version(name: str) -> int:
    """16 for ``clang-16`` (a toolchain's name); raises ValueError otherwise."""
    m = re.fullmatch(r"clang-(\d+)", name)
    if not m:
        raise ValueError(f"not a clang toolchain name: {name!r}")
    return int(m.group(1))


#: (program, clang version) -> id of the bug of that release's libomptarget the
#: program shows (offload_shim.interposer.llvm.profile.FIXED_UPSTREAM; docs/conformance.md
#: "Fixed upstream"): expected, labelled differences from the reference
FIXED_UPSTREAM: dict[tuple[str, int], str] = {
    ("fixed_upstream_padding.c", 16): "partial-struct-padding",
    ("fixed_upstream_struct_copy.c", 16): "struct-copy-over-attached-pointer",
    ("fixed_upstream_mapper.c", 16): "struct-copy-over-attached-pointer",
    ("fixed_upstream_mapper.c", 19): "struct-copy-over-attached-pointer",
    ("fixed_upstream_mapper_loop.c", 16): "struct-copy-over-attached-pointer",
    ("fixed_upstream_mapper_loop.c", 19): "struct-copy-over-attached-pointer",
    ("fixed_upstream_always.c", 16): "always-pointer-member-reattach",
    ("fixed_upstream_always.c", 19): "always-pointer-member-reattach",
    ("fixed_upstream_usm_attach.c", 16): "usm-attach-over-host-pointer",
    ("fixed_upstream_usm_attach.c", 19): "usm-attach-over-host-pointer",
}

_fixed_lock = threading.Lock()
_fixed_runs: dict[tuple[str, str], Outcome | str] = {}


def fixed_reference(name: str, label: str) -> Outcome | str:
    """The fixed result of program ``name``'s run ``label``: the executable built by
    clang-22 run as is (libomptarget 22.1, which has none of the bugs of
    :data:`FIXED_UPSTREAM`); or why it cannot be had (a string: clang-22 or its
    runtime missing, a build error).  Built and run once per session."""
    key = (name, label)
    with _fixed_lock:
        if key in _fixed_runs:
            return _fixed_runs[key]
        import clang_toolchains as ct
        tc = Toolchain.of(ct.toolchain_fields(ct.CLANG22))
        why = tc.missing()
        if why:
            _fixed_runs[key] = f"{tc.name}: {why}"
            return _fixed_runs[key]
        prog = next(p for p in programs() if p.name == name)
        b = build(prog, tc, tc.identity(), cache_root(), library=False)
        if b.error:
            _fixed_runs[key] = f"{name} does not build with {tc.name}:\n{b.error}"
            return _fixed_runs[key]
        run = next(r for r in prog.runs if r.label == label)
        _fixed_runs[key] = run_outcome([str(b.exe), *run.args],
                                       env=tc.env(dict(os.environ, **run.env)))
        return _fixed_runs[key]


def check_fixed_upstream(name: str, version: int, ref: Outcome, got: Outcome,
                         fixed: Outcome) -> None:
    """Assert what a :data:`FIXED_UPSTREAM` run must show: the release's profile lists
    the bug, the reference (``ref``) still shows it (differs from ``got``), the run
    under ``offload-shim run`` (``got``) gives the fixed exit status and stdout
    (``fixed``, :func:`fixed_reference`) and its report names the bug and nothing
    else, and ``offload-shim compare`` labels the difference known."""
    from offload_shim.interposer.llvm.profile import profile_for
    bug = FIXED_UPSTREAM[(name, version)]
    assert bug in profile_for(version).fixed_upstream, (bug, version)
    assert ref.key() != got.key(), (
        f"the reference no longer shows {bug}: {ref.render()}")
    assert (got.status, got.stdout) == (fixed.status, fixed.stdout), (
        f"\nfixed (libomptarget 22.1): exit {fixed.status}\n" + "\n".join(fixed.stdout)
        + f"\noffload-shim run: exit {got.status}\n" + "\n".join(got.stdout)
        + f"\n--- offload-shim stderr:\n{got.stderr[-3000:]}")
    assert set(got.fixed_upstream) == {bug} and got.fixed_upstream[bug] >= 1, \
        got.fixed_upstream
    c = Comparison([name], ref, got)
    assert c.verdict == "known" and c.known[0].startswith(
        f"known: fixed upstream ({bug}: "), c.known


def stderr_lines(outcome: Outcome) -> list[str]:
    """All of ``outcome``'s stderr, line by line, normalised (``stderr: exact``
    programs)."""
    from offload_shim.cli.compare import normalise
    return [normalise(line) for line in outcome.stderr.splitlines()]


def programs() -> list[Program]:
    return [Program.parse(p) for p in sorted(PROGRAMS.iterdir())
            if p.suffix in (".c", ".cpp") and p.is_file()]


@dataclass
class Built:
    program: Program
    exe: Path | None = None
    lib: Path | None = None
    error: str | None = None


def cache_root() -> Path:
    root = Path(os.environ.get("OSH_CONFORMANCE_CACHE")
                or Path(tempfile.gettempdir()) / f"osh-conformance-{os.getuid()}")
    root.mkdir(parents=True, exist_ok=True)
    return root


def _run(cmd, env, log) -> bool:
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    log.append(f"$ {' '.join(cmd)}\n{p.stdout}{p.stderr}")
    return p.returncode == 0


def build(program: Program, tc: Toolchain, identity: str, root: Path,
          library: bool = True) -> Built:
    """Compile ``program`` once (object), link it as an executable and (``library``)
    as a library.  Cached by the hash of the toolchain identity, flags, source and
    entry.c."""
    h = hashlib.sha256()
    for part in (BUILD_VERSION, identity, repr(tc.flags), repr(tc.ldflags), program.name,
                 repr(program.cflags), "lib" if library else "exe",
                 program.path.read_text(), (SUPPORT / "entry.c").read_text()):
        h.update(part.encode())
        h.update(b"\0")
    out = root / tc.name / f"{program.path.stem}-{h.hexdigest()[:16]}"
    exe, lib = out / program.path.stem, out / f"lib{program.path.stem}.so"
    if (out / "ok").exists():
        return Built(program, exe, lib if library else None)
    tmp = Path(tempfile.mkdtemp(prefix="build-", dir=root))
    cc = tc.cxx if program.cpp else tc.cc
    env = tc.env()
    log: list[str] = []
    obj, entry = tmp / "prog.o", tmp / "entry.o"
    texe, tlib = tmp / exe.name, tmp / lib.name
    ok = (_run([cc, *tc.flags, "-O1", *program.cflags, "-fPIC", "-c", str(program.path), "-o",
                str(obj)], env, log)
          and _run([cc, *tc.flags, str(obj), *tc.ldflags, "-o", str(texe)], env, log)
          and (not library
               or _run([tc.cc, "-O1", "-fPIC", "-c", str(SUPPORT / "entry.c"), "-o",
                        str(entry)], env, log)
               and _run([cc, *tc.flags, "-shared", str(obj), str(entry), *tc.ldflags, "-o",
                         str(tlib)], env, log)))
    if not ok:
        shutil.rmtree(tmp, ignore_errors=True)
        return Built(program, error="\n".join(log)[-3000:])
    (tmp / "ok").write_text("\n".join(log))
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(out)          # atomic: a finished build appears whole or not at all
    except OSError:              # another session built it meanwhile (and may be running
        shutil.rmtree(tmp, ignore_errors=True)      # it): keep theirs
    return Built(program, exe, lib if library else None)


def build_all(progs, tc: Toolchain, jobs: int = 2, library: bool = True) -> dict[str, Built]:
    identity, root = tc.identity(), cache_root()
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futs = {p.name: pool.submit(build, p, tc, identity, root, library) for p in progs}
        return {name: f.result() for name, f in futs.items()}


# -- running ------------------------------------------------------------------------------

def _shim_env(base: dict, tc: Toolchain) -> dict:
    from offload_shim.cli.run import run_environment
    return run_environment(base=base, **{k: v for k, v in tc.shim_options})


def _run_library_outcome(lib: Path, run: Run, env: dict, tc: Toolchain,
                         timeout: float) -> Outcome:
    env = dict(env, OSH_PROGRAM_ARGS="\x1f".join(run.args))
    opts = []
    for k, v in tc.shim_options:
        if k == "plugins":
            opts += [a for p in v for a in ("--plugin", str(p))]
        elif k == "bundled" and v:
            opts.append("--bundled")
    cmd = [sys.executable, "-m", "offload_shim.cli", "run-library", "--library", str(lib),
           "--call", "osh_program_run", "--json", *opts]
    o = run_outcome(cmd, env=env, timeout=timeout)
    result, lines = None, []
    for line in o.stdout:
        if line.startswith("{") and '"results"' in line:
            try:
                result = json.loads(line.replace("0x?", "0"))["results"]["osh_program_run"]
                continue
            except (ValueError, KeyError):
                pass
        lines.append(line)
    status = (result & 0xFF) if isinstance(result, int) else o.status
    return Outcome(status, lines, o.diagnostics, o.stderr)


def outcomes(built: Built, run: Run, tc: Toolchain, timeout: float = 120.0) -> dict:
    """{variant: (reference Outcome, offload_shim Outcome)} for the variants the program
    runs in."""
    base = tc.env(dict(os.environ, **run.env))
    res = {}
    if "exe" in built.program.modes:
        argv = [str(built.exe), *run.args]
        res["exe"] = (run_outcome(argv, env=base, timeout=timeout),
                      run_shim_outcome(argv, env=_shim_env(base, tc), timeout=timeout))
    if "lib" in built.program.modes:
        argv = [sys.executable, str(SUPPORT / "host.py"), str(built.lib), *run.args]
        ref = run_outcome(argv, env=base, timeout=timeout)
        res["lib"] = (ref, run_outcome(argv, env=_shim_env(base, tc), timeout=timeout))
        res["run-library"] = (ref, _run_library_outcome(built.lib, run, base, tc, timeout))
    return res


def run_all(builts: dict[str, Built], tc: Toolchain, jobs: int = 2) -> dict:
    """{(program name, run label): outcomes() or an error string}."""
    tasks = {}
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for name, b in builts.items():
            for run in b.program.runs:
                key = (name, run.label)
                if b.error:
                    continue
                tasks[key] = pool.submit(outcomes, b, run, tc)
        return {k: f.result() for k, f in tasks.items()}


def run_all_exe(builts: dict[str, Built], tc: Toolchain, jobs: int = 2,
                timeout: float = 120.0) -> dict:
    """{(program name, run label): (reference Outcome, offload_shim Outcome)} of the
    executables only (the program as built, then under ``offload-shim run``)."""
    def one(b: Built, run: Run):
        base = tc.env(dict(os.environ, **run.env))
        argv = [str(b.exe), *run.args]
        return (run_outcome(argv, env=base, timeout=timeout),
                run_shim_outcome(argv, env=_shim_env(base, tc), timeout=timeout))
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        tasks = {(name, run.label): pool.submit(one, b, run)
                 for name, b in builts.items() if not b.error for run in b.program.runs}
        return {k: f.result() for k, f in tasks.items()}


__all__ = ["CLANG16", "FIXED_UPSTREAM", "Built", "Program", "Run", "Toolchain", "VARIANTS",
           "build", "build_all", "check_fixed_upstream", "fixed_reference", "outcomes",
           "programs", "run_all", "run_all_exe", "stderr_lines"]
