"""Every citation of the repository resolves inside it or upstream: no file cites a
document that no clone contains -- the development notes once cited by section or id
("prior-art" invariants and failure ids, "abi-reference" sections, "seed" numbers) or a
path outside the repository (``../shared/``).  Upstream citations are written in place
(file and function with the release, a review, a pull request, an issue) or name an entry
of docs/references.md."""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: what is scanned: the package, its tests, docs, native code, benchmarks and scripts
SCANNED = ("offload_shim", "tests", "docs", "native", "benchmarks", "scripts", "README.md",
           "Makefile", "pyproject.toml")
# written in pieces so that this file does not match itself
FORBIDDEN = re.compile("|".join([
    r"prior" + r"-art", r"abi" + r"-reference", r"\bseed\s+0\d\d\b", r"\.\./" + r"shared\b",
    r"(?-i:\b[I]\d+\b)",    # invariant ids ("I6"; not LLVM IR's "i64")
    r"(?-i:\b[B]\d+\b)",    # failure ids ("B7")
]), re.I)
#: rooms another change is rewriting (issue 27: the pool's records, Device's copies); their
#: citations are replaced when that work lands.  The test fails when one of them no longer
#: cites, so the set only shrinks.
PENDING: set[str] = set()


def _files() -> list[Path]:
    """The tracked text files under SCANNED (git ls-files; binary files skipped)."""
    out = subprocess.run(["git", "ls-files", "-z", "--", *SCANNED], cwd=ROOT,
                         capture_output=True, check=True).stdout.decode().split("\0")
    files = []
    for rel in filter(None, out):
        path = ROOT / rel
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        files.append(path)
    return files


@functools.cache
def _hits() -> dict[str, list[str]]:
    hits: dict[str, list[str]] = {}
    for path in _files():
        if path == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = text.splitlines()
        for n, line in enumerate(lines, 1):
            # a citation broken over two lines ("seed" / "000") counts too
            joined = line.rstrip() + " " + (lines[n].lstrip(" \t#*/\"'") if n < len(lines) else "")
            if FORBIDDEN.search(line) or FORBIDDEN.search(joined):
                hits.setdefault(str(path.relative_to(ROOT)), []).append(f"{n}: {line.strip()}")
    return hits


def test_no_file_cites_a_document_the_repository_does_not_hold():
    hits = {f: lines for f, lines in _hits().items() if f not in PENDING}
    assert hits == {}


def test_the_pending_rooms_still_cite_and_only_shrink():
    stale = {f for f in PENDING if f not in _hits()}
    assert not stale, f"no longer cites: drop from PENDING: {sorted(stale)}"


def test_the_pattern_catches_each_kind():
    for text in ("(prior" + "-art I6)", "abi" + "-reference 1.9", "Seed 004 summary",
                 "Seed" + "\n    004",
                 "../" + "shared/docs/x.md", "(B7)", "I3, B4"):
        assert FORBIDDEN.search(text), text
    for text in ("LLVM D81054", "GCC PR 93481", "llvm-project #74507", "B-tree", "I/O",
                 "type { i64, i32 }"):
        assert not FORBIDDEN.search(text), text


def test_references_named_in_the_code_exist():
    refs = (ROOT / "docs" / "references.md").read_text(encoding="utf-8")
    for title in ("Device memory pools compared",
                  "Plugin contracts that upstream does not write down"):
        assert f"## {title}" in refs
