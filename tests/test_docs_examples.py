"""Every example of README.md and docs/*.md runs as written (issue 32).

The fenced blocks tagged ``python``, ``sh`` or ``console`` are extracted and run, file by
file, in document order, in a scratch folder that looks like the repository root after
the README's set-up (its top-level entries, ``.venv`` and ``.cache`` included, linked
there), with ``.venv/bin`` first on ``PATH``:

* a ``sh`` block runs with ``bash -e -o pipefail``: any command that fails fails the
  test, so a command that is meant to end non-zero says so in the block itself
  (``./omp_prog || echo "exit status $?"``);
* a ``console`` block is a shell session: its ``$ `` lines run, the others are output;
* a ``python`` block runs in a fresh interpreter after the file's earlier ``python``
  blocks (so a later block may use the names an earlier one made).

Comments on the lines right before the fence change that (docs/testing.md, "Examples
in the documentation"):

* ``<!-- no-run: REASON -->``: not run (the set-up itself, a long suite, a download);
  the test reports the reason as a skip;
* ``<!-- file: NAME -->``: the block is written to ``NAME`` in the scratch folder (a
  test module an example shows), for a later block to run;
* ``<!-- reduced: OLD => NEW; ... -->``: run with each ``OLD`` text replaced by ``NEW``
  (a long run in a representative reduced form; the text around the block says so).

Fenced blocks without one of the three tags (diagrams, synopses, output) are not run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_TAGS = ("python", "sh", "console")
MARK = re.compile(r"^<!--\s*(no-run|file|reduced):\s*(.*?)\s*-->\s*$")
#: seconds one block may take
BLOCK_TIMEOUT = 240


@dataclass
class Block:
    doc: str            # README.md, docs/usage.md
    line: int           # line of the opening fence (1-based)
    tag: str
    code: str
    marks: dict             # no-run / file / reduced -> its text

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of ``path`` tagged python/sh/console, with the marker comment
    right before each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        if m.group(1) in RUN_TAGS:
            marks, k = {}, i - 1
            while k >= 0 and MARK.match(lines[k]):        # the comments right above
                mk = MARK.match(lines[k])
                marks[mk.group(1)] = mk.group(2)
                k -= 1
            out.append(Block(str(path.relative_to(ROOT)), i + 1, m.group(1),
                             "\n".join(lines[i + 1:j]) + "\n", marks))
        i = j + 1
    return out


def _reduced(b: Block) -> str:
    code = b.code
    for pair in filter(None, (p.strip() for p in b.marks["reduced"].split(";"))):
        old, sep, new = pair.partition("=>")
        old, new = old.strip(), new.strip()
        assert sep and old in code, f"{b.where}: reduced: {old!r} is not in the block"
        code = code.replace(old, new)
    return code


def _console(code: str) -> str:
    return "\n".join(l[2:] for l in code.splitlines() if l.startswith("$ ")) + "\n"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder that looks like the repository root after the set-up: every top-level
    entry linked (outputs of the examples land here, not in the checkout)."""
    d = tmp_path_factory.mktemp("docs_examples")
    for entry in ROOT.iterdir():
        if entry.name not in (".git",):
            (d / entry.name).symlink_to(entry)
    return d


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONPATH", None)
    return env


_PY_RUNNER = r"""
import json, sys
blocks = json.loads(sys.argv[1])
ns = {"__name__": "__main__"}
for where, code in blocks:
    exec(compile(code, where, "exec"), ns)
"""


def _docs_with_examples():
    return [p for p in DOCS if blocks_of(p)]


def test_the_marker_comments_are_understood():
    """Every ``<!-- ... -->`` marker names a known kind and sits right before a block it
    applies to; reasons are given; few blocks are skipped."""
    skipped, total = [], 0
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines):
            if re.match(r"^<!--\s*(no-run|file|reduced)\b", line):
                assert MARK.match(line), f"{path.name}:{n + 1}: malformed marker {line!r}"
                k = n + 1
                while k < len(lines) and MARK.match(lines[k]):
                    k += 1
                nxt = lines[k] if k < len(lines) else ""
                assert re.match(r"^```(python|sh|console)\s*$", nxt), \
                    f"{path.name}:{n + 1}: a marker must sit right before a python/sh block"
                assert MARK.match(line).group(2), f"{path.name}:{n + 1}: no reason/argument"
        for b in blocks_of(path):
            total += 1
            if "no-run" in b.marks:
                skipped.append(b.where)
    assert total >= 10 and len(skipped) <= total // 3, (total, skipped)


def _missing(blocks: list[Block]) -> list[str]:
    """The system files (``/usr/lib/...``) and compilers (``clang-N``) the runnable blocks
    name that this machine lacks: scripts/setup.sh installs them when it may (root)."""
    import shutil
    text = "".join(b.code for b in blocks if "no-run" not in b.marks)
    files = {f for f in re.findall(r"/usr/lib/[\w./+-]+\.so[\w.]*", text) if not os.path.exists(f)}
    tools = {t for t in re.findall(r"\b(clang-\d+)\s", text) if shutil.which(t) is None}
    return sorted(files | tools)


@pytest.mark.parametrize("doc", _docs_with_examples(),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_run_as_written(doc, workdir):
    missing = _missing(blocks_of(doc))
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (scripts/setup.sh installs them as root)")
    env = _env()
    python_so_far: list[tuple[str, str]] = []
    not_run = []
    for b in blocks_of(doc):
        if "no-run" in b.marks:
            not_run.append(f"{b.where}: {b.marks['no-run']}")
            continue
        code = _reduced(b) if "reduced" in b.marks else b.code
        if "file" in b.marks:
            (workdir / b.marks["file"]).write_text(code, encoding="utf-8")
            continue
        if b.tag == "python":
            python_so_far.append((b.where, code))
            argv = [sys.executable, "-c", _PY_RUNNER, json.dumps(python_so_far)]
        else:
            argv = ["bash", "-e", "-o", "pipefail", "-c",
                    _console(code) if b.tag == "console" else code]
        try:
            p = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True,
                               timeout=BLOCK_TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{b.where}: the {b.tag} block ran longer than {BLOCK_TIMEOUT} s")
        assert p.returncode == 0, (f"{b.where}: the {b.tag} block failed (exit "
                                   f"{p.returncode})\n--- stdout\n{p.stdout[-3000:]}\n"
                                   f"--- stderr\n{p.stderr[-3000:]}")
    if not_run and all("no-run" in b.marks for b in blocks_of(doc)):
        pytest.skip("; ".join(not_run))
