"""What ``scripts/gpu-check.sh`` ran, counted: the GPU tests (pytest's JUnit XML, or its
``-v`` text when a timeout cut it short) and the GPU rows of the benchmark.

    python scripts/gpu_check_tally.py tests XML TXT [--stand-in]   # prints, exit 0/1/5
    python scripts/gpu_check_tally.py bench TXT ROW...              # prints, exit 0/1

``tests``: one line ``N passed, N skipped, N failed, N errors`` and one line per skip with
its reason, each marked ``expected`` (a reason the lent machine is known to give:
:data:`EXPECTED_SKIPS`, and under the stand-in :data:`STAND_IN_SKIPS`) or ``NOT RUN``.
Exit status 0 only when something passed, nothing failed and every skip is expected: a
GPU check that tested nothing, or only part of what it should, did not pass (1: failures
or unexpected skips; 5: nothing ran, pytest's own status for that).

``bench``: each row named, ``measured`` when it has a line in a result table, its reason
when it is listed under "Skipped", ``MISSING`` otherwise; exit status 1 when a row is
missing (the row filter dropped it).  Standard library only: it runs on the lent machine.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET

#: skip reasons the lent machine gives by design (docs/testing.md, "GPU check"): no
#: clang-16 there; the bundle does not carry liboffload 22 (its CUDA plugin needs
#: libLLVM-22, about 130 MB: over the device tool's 64 MiB)
EXPECTED_SKIPS = (r"clang-16 not installed", r"liboffload 22 not unpacked")
#: and under the CUDA driver stand-in, which runs no kernel and is no device liboffload's
#: CUDA plugin enumerates
STAND_IN_SKIPS = (r"stand-in", r"enumerates no CUDA device", r"cannot build for nvptx64",
                  r"nvcc")


def _expected(reason: str, stand_in: bool) -> bool:
    pats = EXPECTED_SKIPS + (STAND_IN_SKIPS if stand_in else ())
    return any(re.search(p, reason) for p in pats)


def tests_from_xml(path: str) -> dict:
    """``{"passed", "failed", "errors", "skips": [(test, reason)]}`` from JUnit XML."""
    root = ET.parse(path).getroot()
    out = {"passed": 0, "failed": 0, "errors": 0, "skips": []}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        kinds = {child.tag: child for child in case}
        if "failure" in kinds:
            out["failed"] += 1
        elif "error" in kinds:
            out["errors"] += 1
        elif "skipped" in kinds:
            sk = kinds["skipped"]
            out["skips"].append((name, sk.get("message") or (sk.text or "").strip()))
        else:
            out["passed"] += 1
    return out


_VERBOSE = re.compile(r"^(\S+::\S+)\s+(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")


def tests_from_text(path: str) -> dict:
    """The same from ``pytest -v`` output (no reasons): when no XML was written."""
    out = {"passed": 0, "failed": 0, "errors": 0, "skips": []}
    with open(path, errors="replace") as f:
        for line in f:
            m = _VERBOSE.match(line)
            if not m:
                continue
            what = m.group(2)
            if what in ("PASSED", "XFAIL"):
                out["passed"] += 1
            elif what in ("FAILED", "XPASS"):
                out["failed"] += 1
            elif what == "ERROR":
                out["errors"] += 1
            else:
                out["skips"].append((m.group(1), "(no reason: pytest was cut short)"))
    return out


def tally_tests(xml: str, txt: str, stand_in: bool) -> tuple[list[str], int]:
    """The summary lines and the exit status (see the module's docstring)."""
    try:
        t = tests_from_xml(xml)
        src = ""
    except (OSError, ET.ParseError):
        t = tests_from_text(txt)
        src = " (from the -v output: no JUnit XML, pytest was cut short)"
    lines = [f"{t['passed']} passed, {len(t['skips'])} skipped, {t['failed']} failed, "
             f"{t['errors']} errors{src}"]
    unexpected = 0
    for name, reason in t["skips"]:
        ok = _expected(reason, stand_in)
        unexpected += not ok
        lines.append(f"  skipped ({'expected' if ok else 'NOT RUN'}): {name}: "
                     f"{' '.join(reason.split())[:300]}")
    if t["passed"] == 0 and not t["failed"] and not t["errors"]:
        return lines + ["  nothing ran"], 5
    if t["failed"] or t["errors"] or unexpected:
        if unexpected:
            lines.append(f"  {unexpected} GPU test(s) did not run for a reason the lent "
                         "machine should not give")
        return lines, 1
    return lines, 0


def tally_bench(txt: str, rows: list[str]) -> tuple[list[str], int]:
    """Each of ``rows`` measured, skipped (with the reason) or MISSING."""
    try:
        with open(txt, errors="replace") as f:
            text = f.read()
    except OSError as exc:
        return [f"no benchmark output: {exc}"], 1
    lines, missing, measured = [], 0, 0
    for row in rows:
        label = re.escape(row) + r"(?: \[STAND-IN, not a GPU\])?"
        skip = re.search(r"^\* `" + label + r"`: (.*)$", text, re.M)
        if re.search(r"^\| " + label + r" \|", text, re.M):
            measured += 1
            lines.append(f"  {row}: measured")
        elif skip:
            lines.append(f"  {row}: skipped: {skip.group(1)[:200]}")
        else:
            missing += 1
            lines.append(f"  {row}: MISSING (not in the output)")
    head = f"{measured} of {len(rows)} GPU rows measured, {len(rows) - measured - missing} " \
           f"skipped, {missing} missing"
    return [head] + lines, 1 if missing or measured == 0 else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["tests"] and len(argv) >= 3:
        lines, rc = tally_tests(argv[1], argv[2], "--stand-in" in argv[3:])
    elif argv[:1] == ["bench"] and len(argv) >= 3:
        lines, rc = tally_bench(argv[1], argv[2:])
    else:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    print("\n".join(lines))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
