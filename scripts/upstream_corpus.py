#!/usr/bin/env python3
"""Run llvm-project's libomptarget test programs as they are and under `offload-shim run`.

The programs are llvm-project's own lit tests of the offload runtime
(``offload/test/`` of the LLVM 22 era: ``mapping/``, ``api/``, ``offloading/``, ...;
``openmp/libomptarget/test/`` of release/16.x), C and C++ files whose ``// RUN:`` lines
say how lit builds and runs them and whose ``// CHECK:`` lines what FileCheck expects.
They are NOT part of this repository: put a copy of the files in a folder and give
that folder (docs/conformance.md "The upstream test programs" says which files were
used).  Nothing is downloaded here.

For every program and compiler (clang-16, -19, -22; flags and runtimes as
tests/clang_toolchains.py) the script

* reads its lit lines: ``REQUIRES:`` other than ``unified_shared_memory``, an
  ``UNSUPPORTED:`` naming x86_64 or the host, or a ``RUN:`` line with a substitution
  other than the ``%libomptarget-compile[opt][xx][-run-and-check|-and-run]-<triple>`` (``opt``: ``-O3``),
  ``%libomptarget-run[-fail]-<triple>`` and ``%fcheck-<triple>`` family (``<triple>``:
  ``generic`` or ``x86_64-unknown-linux-gnu``) make it *skipped*;
* builds each compile line's variant (its ``-D`` and other extra flags);
* runs each run line as is (the reference: the program's own libomptarget) and under
  ``offload-shim run`` (:func:`offload_shim.cli.compare.compare`);
* checks each run as lit would: the exit status (``run-fail``: not 0, a signal counts)
  and the ``CHECK`` lines with a FileCheck subset (:func:`filecheck`: ``CHECK``,
  ``-NEXT``, ``-NOT``, ``-LABEL``, ``-SAME``, ``{{regex}}``, ``[[NAME:regex]]``,
  ``[[NAME]]``, ``[[#%x,NAME:]]`` / ``[[#%u,NAME:]]`` / ``[[#NAME]]``);
* says whether the two runs agree (exit status, stdout and the runtime's diagnostic
  lines, as ``offload-shim compare``).

Usage (from the repository root, after scripts/setup.sh)::

    .venv/bin/python scripts/upstream_corpus.py CORPUS [--cc 16 22] [--only mapping/]
        [--jobs 2] [--json out.json] [-v]

Prints one line per program and compiler and a table of counts; exit status 0.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import clang_toolchains as ct  # noqa: E402  (tests/: the compilers and their runtimes)
from offload_shim.cli.compare import compare, shim_environment  # noqa: E402
from offload_shim.safety.children import run_child  # noqa: E402

SOURCES = (".c", ".cpp", ".cc")
TRIPLE = r"(?:generic|x86_64-unknown-linux-gnu|x86_64-pc-linux-gnu)"
COMPILE = re.compile(rf"%libomptarget-compile(opt)?(xx)?(-run-and-check|-and-run)?-{TRIPLE}\b")
RUN = re.compile(rf"%libomptarget-run(-fail)?-{TRIPLE}\b")
FCHECK = re.compile(rf"%fcheck-{TRIPLE}\b")
ANY_TRIPLE_SUBST = re.compile(r"%libomptarget-[a-z-]+-(?!generic\b|x86_64-unknown-linux-gnu\b)"
                              r"[A-Za-z0-9_.-]+")


class Unsupported(Exception):
    """A program (or RUN line) this script cannot run as lit would; the reason."""


# ----------------------------------------------------------------------------- lit lines

@dataclass
class RunStep:
    """One run of a variant: ``env`` (NAME=value), ``fail`` (lit's ``run-fail``: the
    exit status must not be 0), ``check`` (stdout, and stderr with ``2>&1``, through
    FileCheck with ``prefixes``; None = no FileCheck)."""
    env: dict
    fail: bool
    stderr_too: bool
    prefixes: tuple | None


@dataclass
class Variant:
    """A compile line: C++ or not, its extra flags, and the runs that follow it."""
    cxx: bool
    extra: list
    runs: list = field(default_factory=list)


def lit_lines(text: str, key: str) -> list[str]:
    """The ``// KEY:`` lines of ``text`` (RUN lines joined at a trailing ``\\``)."""
    out, cont = [], None
    for line in text.splitlines():
        m = re.search(rf"//\s*{key}:(.*)$", line)
        if not m:
            continue
        body = m.group(1).strip()
        if cont is not None:
            body = cont + " " + body
        if body.endswith("\\"):
            cont = body[:-1].strip()
            continue
        cont = None
        out.append(body)
    return out


def check_prefixes(cmd: str) -> tuple:
    found = [p for m in re.finditer(r"--?check-prefix(?:es)?[= ]([\w,-]+)", cmd)
             for p in m.group(1).split(",")]
    return tuple(found) or ("CHECK",)


def parse(text: str) -> list[Variant]:
    """The variants of a program from its lit lines; raises :class:`Unsupported`."""
    for req in lit_lines(text, "REQUIRES"):
        feats = {f.strip() for f in req.replace("&&", ",").split(",") if f.strip()}
        if feats - {"unified_shared_memory"}:
            raise Unsupported(f"REQUIRES: {req}")
    for uns in lit_lines(text, "UNSUPPORTED"):
        if re.search(r"x86_64|host|\bclang-1[0-9]\b", uns):
            raise Unsupported(f"UNSUPPORTED: {uns}")
    variants: list[Variant] = []
    cmds = [c.strip() for line in lit_lines(text, "RUN") for c in line.split("&&")]
    for cmd in cmds:
        if ANY_TRIPLE_SUBST.search(cmd) and not (COMPILE.search(cmd) or RUN.search(cmd)):
            continue        # a line for another target (aarch64, nvptx, ...)
        c = COMPILE.search(cmd)
        if c:
            rest = cmd[c.end():]
            if re.search(r"[|&;]|%(?!libomptarget)", rest):
                raise Unsupported(f"RUN: {cmd}")
            v = Variant(bool(c.group(2)), (["-O3"] if c.group(1) else []) + shlex.split(rest))
            variants.append(v)
            if c.group(3) == "-run-and-check":
                v.runs.append(RunStep({}, False, False, ("CHECK",)))
            elif c.group(3) == "-and-run":
                v.runs.append(RunStep({}, False, False, None))
            continue
        r = RUN.search(cmd)
        if r and variants:
            head = cmd[:r.start()].split()
            env = {}
            if head[:1] == ["env"]:
                for tok in head[1:]:
                    if "=" not in tok:
                        raise Unsupported(f"RUN: {cmd}")
                    k, _, val = tok.partition("=")
                    env[k] = val
            elif head:
                raise Unsupported(f"RUN: {cmd}")
            tail = cmd[r.end():]
            if re.search(r"%(?!fcheck)", tail) or (tail.strip() and not FCHECK.search(tail)
                                                    and tail.strip() != "2>&1"):
                raise Unsupported(f"RUN: {cmd}")
            prefixes = check_prefixes(tail) if FCHECK.search(tail) else None
            variants[-1].runs.append(RunStep(env, bool(r.group(1)), "2>&1" in tail, prefixes))
            continue
        raise Unsupported(f"RUN: {cmd}")
    if not variants:
        raise Unsupported("no RUN line for x86_64 host offloading")
    return variants


# ----------------------------------------------------------------------------- FileCheck

def _pattern(pat: str, vars_: dict) -> tuple[re.Pattern, list]:
    """A CHECK pattern as a regex and the variables it defines ((name, kind) in group
    order); whitespace runs match any horizontal whitespace run, as FileCheck's
    canonicalisation does."""
    out, defs, i = [], [], 0
    token = re.compile(r"\{\{(.*?)\}\}|\[\[#(?:(%[xXud]),)?(\w+)(:?)\]\]|\[\[(\w+)(?::(.*?))?\]\]")
    for m in token.finditer(pat):
        out.append(re.sub(r"(?:\\ )+|\s+", "[ \t]+", re.escape(pat[i:m.start()])))
        i = m.end()
        if m.group(1) is not None:
            out.append(f"(?:{m.group(1)})")
        elif m.group(3) is not None:            # numeric variable
            name = m.group(3)
            if m.group(4):                      # definition
                fmt = m.group(2) or "%u"
                out.append("([0-9a-fA-F]+)" if fmt in ("%x", "%X") else "(-?[0-9]+)")
                defs.append((name, fmt))
            else:
                if name not in vars_:
                    raise Unsupported(f"undefined numeric variable {name}")
                val, fmt = vars_[name]
                out.append(re.escape(format(val, "x") if fmt in ("%x", "%X") else str(val)))
        else:
            name, rx = m.group(5), m.group(6)
            if rx is not None:
                out.append(f"({rx})")
                defs.append((name, "str"))
            else:
                if name not in vars_:
                    raise Unsupported(f"undefined variable {name}")
                out.append(re.escape(vars_[name][0]))
    out.append(re.sub(r"(?:\\ )+|\s+", "[ \t]+", re.escape(pat[i:])))
    return re.compile("".join(out)), defs


def filecheck(source: str, output: str, prefixes=("CHECK",)) -> str | None:
    """Check ``output`` against the ``PREFIX:`` lines of ``source`` as FileCheck does
    for the subset in the module's documentation; None when it passes, else why not.
    Raises :class:`Unsupported` for a directive it does not know."""
    alt = "|".join(map(re.escape, prefixes))
    directives = []
    for line in source.splitlines():
        m = re.search(rf"(?<![\w-])({alt})(-[A-Z]+)?:(.*)$", line)
        if m:
            kind = (m.group(2) or "")[1:] or "CHECK"
            if kind not in ("CHECK", "NEXT", "NOT", "LABEL", "SAME", "EMPTY"):
                raise Unsupported(f"FileCheck directive {m.group(1)}{m.group(2)}")
            directives.append((kind, m.group(3).strip()))
    if not directives:
        return None
    lines = output.splitlines()
    vars_: dict = {}
    pos, col = 0, 0       # next line to search; the last match's line index
    last = -1
    nots: list = []

    def bind(m, defs):
        for g, (name, fmt) in enumerate(defs, 1):
            vars_[name] = (m.group(g), fmt) if fmt == "str" else \
                (int(m.group(g), 16 if fmt in ("%x", "%X") else 10), fmt)

    for kind, pat in directives:
        if kind == "NOT":
            nots.append(pat)
            continue
        if kind == "EMPTY":
            if last + 1 >= len(lines) or lines[last + 1].strip():
                return f"CHECK-EMPTY after line {last + 1} failed"
            last = pos = last + 1
            continue
        rx, defs = _pattern(pat, vars_)
        if kind == "SAME":
            m = rx.search(lines[last][col:]) if 0 <= last < len(lines) else None
            if not m:
                return f"CHECK-SAME: {pat}: not on line {last + 1}"
            bind(m, defs)
            col += m.end()
            continue
        found = None
        rng = [pos] if kind == "NEXT" else range(pos, len(lines))
        for i in rng:
            if i < len(lines):
                m = rx.search(lines[i])
                if m:
                    found = (i, m)
                    break
        if found is None:
            return f"{'CHECK-' + kind if kind != 'CHECK' else 'CHECK'}: {pat}: no match"
        i, m = found
        for n in nots:
            nrx, _ = _pattern(n, vars_)
            for j in range(pos, i):
                if nrx.search(lines[j]):
                    return f"CHECK-NOT: {n}: matched line {j + 1}"
        nots = []
        bind(m, defs)
        last, col, pos = i, m.end(), i + 1
    for n in nots:
        nrx, _ = _pattern(n, vars_)
        for j in range(pos, len(lines)):
            if nrx.search(lines[j]):
                return f"CHECK-NOT: {n}: matched line {j + 1}"
    return None


# ----------------------------------------------------------------------------- running

@dataclass
class Result:
    """One program built by one compiler: ``status`` "skipped" (``why``), "build-failed"
    (``why``: the compiler's last line) or "ran"; per run: ``ref_pass`` / ``shim_pass``
    (lit's verdict: exit status and CHECK lines) and ``same`` (the runs agree)."""
    program: str
    cc: int
    status: str
    why: str = ""
    runs: list = field(default_factory=list)

    @property
    def ref_pass(self) -> bool:
        return self.status == "ran" and all(r["ref_pass"] for r in self.runs)

    @property
    def shim_pass(self) -> bool:
        return self.status == "ran" and all(r["shim_pass"] for r in self.runs)

    @property
    def same(self) -> bool:
        return self.status == "ran" and all(r["same"] for r in self.runs)


def verdict(step: RunStep, text: str, argv: list, env: dict, timeout: float) -> str | None:
    """lit's verdict on one run of ``argv`` in ``env`` (None: pass, else why it fails):
    the exit status, then FileCheck over stdout (with ``2>&1``: stdout and stderr as
    one stream, in the order written), unnormalised."""
    try:
        p = run_child(argv, env=env, timeout=timeout, merge_stderr=step.stderr_too)
    except subprocess.TimeoutExpired:
        return "timeout"
    st = p.returncode
    if step.fail and st == 0:
        return "exit status 0 (run-fail)"
    if not step.fail and st != 0:
        return f"exit status {st}"
    if step.prefixes is None:
        return None
    return filecheck(text, p.stdout, step.prefixes)


def build(cc: ct.Clang, src: Path, v: Variant, out: Path) -> str | None:
    comp = cc.cxx if v.cxx or src.suffix in (".cpp", ".cc") else cc.cc
    cmd = [comp, *cc.flags(), *v.extra, str(src), "-o", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode:
        lines = [l for l in p.stderr.splitlines() if "error" in l] or p.stderr.splitlines()
        return (lines[0] if lines else f"exit {p.returncode}")[:200]
    return None


def run_one(corpus: Path, src: Path, cc: ct.Clang, work: Path, timeout: float) -> Result:
    rel = str(src.relative_to(corpus))
    text = src.read_text(errors="replace")
    try:
        variants = parse(text)
    except Unsupported as exc:
        return Result(rel, cc.version, "skipped", str(exc))
    res = Result(rel, cc.version, "ran")
    for k, v in enumerate(variants):
        exe = work / f"{rel.replace('/', '_')}.{cc.version}.{k}"
        why = build(cc, src, v, exe)
        if why:
            return Result(rel, cc.version, "build-failed", why)
        for step in v.runs:
            env = dict(os.environ, **step.env)
            c = compare([str(exe)], env=env, timeout=timeout)
            try:
                ref_v = verdict(step, text, [str(exe)], env, timeout)
                shim_v = verdict(step, text, [str(exe)], shim_environment(base=env),
                                 timeout)
            except Unsupported as exc:
                return Result(rel, cc.version, "skipped", str(exc))
            res.runs.append({"variant": " ".join(v.extra), "env": step.env,
                             "ref_pass": ref_v is None, "ref_why": ref_v,
                             "shim_pass": shim_v is None, "shim_why": shim_v,
                             "same": c.same, "diff": [] if c.same else c.diff()[:40]})
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", type=Path, help="folder holding the test programs")
    ap.add_argument("--cc", type=int, nargs="+", default=[16, 22], choices=(16, 19, 22))
    ap.add_argument("--only", default="", help="programs whose path (in the corpus) "
                    "starts with this")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per run")
    ap.add_argument("--json", type=Path, help="write every result here")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the differences")
    args = ap.parse_args(argv)
    if not args.corpus.is_dir():
        ap.error(f"{args.corpus}: not a folder")
    compilers = {c.version: c for c in ct.COMPILERS}
    sources = sorted(p for p in args.corpus.rglob("*") if p.suffix in SOURCES
                     and str(p.relative_to(args.corpus)).startswith(args.only))
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="osh-upstream-") as tmp, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        jobs = []
        for v in args.cc:
            cc = compilers[v]
            why = cc.missing()
            if why:
                print(f"clang-{v}: {why}", file=sys.stderr)
                continue
            jobs += [pool.submit(run_one, args.corpus, s, cc, Path(tmp), args.timeout)
                     for s in sources]
        for j in concurrent.futures.as_completed(jobs):
            r = j.result()
            results.append(r)
            tag = r.status if r.status != "ran" else \
                f"ref {'pass' if r.ref_pass else 'FAIL'}, run {'pass' if r.shim_pass else 'FAIL'}," \
                f" {'same' if r.same else 'DIFFERENT'}"
            print(f"clang-{r.cc} {r.program}: {tag}" + (f" ({r.why})" if r.why else ""),
                  flush=True)
            if args.verbose and r.status == "ran" and not (r.same and r.ref_pass == r.shim_pass):
                for run in r.runs:
                    print(f"    {run['variant']} {run['env']}: ref {run['ref_why']}; "
                          f"run {run['shim_why']}")
                    for line in run["diff"]:
                        print(f"      {line}")
    print()
    print("| compiler | programs | skipped | build failed | ran | reference passes "
          "| passes under run | same under run |")
    print("|---|---|---|---|---|---|---|---|")
    for v in args.cc:
        rs = [r for r in results if r.cc == v]
        if not rs:
            continue
        ran = [r for r in rs if r.status == "ran"]
        print(f"| clang-{v} | {len(rs)} | {sum(r.status == 'skipped' for r in rs)} "
              f"| {sum(r.status == 'build-failed' for r in rs)} | {len(ran)} "
              f"| {sum(r.ref_pass for r in ran)} | {sum(r.shim_pass for r in ran)} "
              f"| {sum(r.same for r in ran)} |")
    if args.json:
        args.json.write_text(json.dumps([dict(asdict(r), ref_pass=r.ref_pass,
                                              shim_pass=r.shim_pass, same=r.same)
                                         for r in sorted(results, key=lambda r:
                                                         (r.cc, r.program))], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
