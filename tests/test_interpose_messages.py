"""Every line the interposer prints as libomptarget 16 (``Libomptarget error:``,
``message:``, ``device N info:``, ``fatal error N:``) is one libomptarget.so.16 can
print: the literal parts of each format the interposer uses must occur in the
library's own strings (``strings`` of /usr/lib/llvm-16/lib/libomptarget.so.16), and
libomptarget 16's reading of its environment variables (``std::stoi`` of
``LIBOMPTARGET_INFO`` and ``LIBOMPTARGET_DEBUG``, ``BoolEnvar``) is followed to the
letter (differential runs: tests/programs/env_info_parse.c)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "offload_shim" / "interposer"
LIBOMPTARGET16 = Path("/usr/lib/llvm-16/lib/libomptarget.so.16")
#: the modules that re-create libomptarget 16 (gomp*.py re-create libgomp)
LLVM_MODULES = ("api", "bridge", "diag", "embed", "interface", "launch", "library",
                "mapping", "omptarget", "plan", "rtl")
#: diag function -> index of its text argument
_TEXT_ARG = {"report": 0, "message": 0, "info": 2, "fatal": 1, "_info": 1}


def _fragments(node, assigns) -> list[list[str]]:
    """The alternatives of a string expression, each a list of its literal parts (the
    text between the formatted values)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [[node.value]]
    if isinstance(node, ast.JoinedStr):
        parts, cur = [], ""
        for v in node.values:
            if isinstance(v, ast.Constant):
                cur += v.value
            else:
                parts.append(cur)
                cur = ""
        parts.append(cur)
        return [parts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        def side(n):
            # a conditional inside a concatenation is a %s argument of the C format:
            # its texts are parts of their own
            alts = _fragments(n, assigns)
            return [["", *a, ""] for a in alts] if isinstance(n, ast.IfExp) else alts
        out = []
        for a in side(node.left):
            for b in side(node.right):
                out.append(a[:-1] + [a[-1] + b[0]] + b[1:])   # adjacent literals join
        return out
    if isinstance(node, ast.IfExp):
        return _fragments(node.body, assigns) + _fragments(node.orelse, assigns)
    if isinstance(node, ast.Name) and node.id in assigns:
        return [f for v in assigns[node.id] for f in _fragments(v, assigns)]
    return [["", ""]]           # a value only known at run time: a placeholder


def _python_formats() -> list[tuple[str, list[str]]]:
    """(where, literal parts) of every diag.report/message/info/fatal and
    DeviceMapper._info call of the LLVM modules."""
    found = []
    for mod in LLVM_MODULES:
        path = PKG / f"{mod}.py"
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            assigns: dict[str, list] = {}
            for n in ast.walk(fn):
                if isinstance(n, ast.Assign):
                    for t in n.targets:
                        if isinstance(t, ast.Name):
                            assigns.setdefault(t.id, []).append(n.value)
            for n in ast.walk(fn):
                if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
                    continue
                attr, owner = n.func.attr, n.func.value
                ok = (attr in ("report", "message", "info", "fatal")
                      and isinstance(owner, ast.Name) and owner.id == "diag") or \
                     (attr == "_info" and isinstance(owner, ast.Name) and owner.id == "self")
                if not ok:
                    continue
                i = _TEXT_ARG[attr]
                if len(n.args) <= i:
                    continue
                for parts in _fragments(n.args[i], assigns):
                    found.append((f"{path.name}:{n.lineno}", parts))
    return found


def _c_formats() -> list[tuple[str, list[str]]]:
    """(where, literal parts) of the ``Libomptarget ...`` lines native/interposer*.c
    print (printf conversions split the parts)."""
    found = []
    for path in sorted((ROOT / "native").glob("interposer*.c")):
        text = path.read_text()
        for m in re.finditer(r'fprintf\(stderr,\s*((?:"(?:[^"\\]|\\.)*"\s*)+)', text):
            lit = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1)))
            lit = lit.encode().decode("unicode_escape")
            if not lit.startswith("Libomptarget"):
                continue
            lit = re.sub(r"^Libomptarget (error|message|fatal error \d+|device %d info): ",
                         "", lit)
            line = text.count("\n", 0, m.start()) + 1
            found.append((f"{path.name}:{line}", re.split(r"%[-0-9.*]*l*[a-zA-Z]", lit)))
    return found


@pytest.fixture(scope="module")
def real_strings() -> str:
    if not LIBOMPTARGET16.exists():
        pytest.skip("libomptarget.so.16 not installed (libomp5-16)")
    if shutil.which("strings") is None:
        pytest.skip("strings (binutils) not installed")
    out = subprocess.run(["strings", "-n", "3", str(LIBOMPTARGET16)], capture_output=True,
                         text=True, check=True).stdout
    return out


def _missing(formats, real: str) -> list[str]:
    bad = []
    for where, parts in formats:
        for part in parts:
            p = part.strip().rstrip("\n")
            if len(re.sub(r"[^A-Za-z]", "", p)) < 3:
                continue                # punctuation between values
            if p not in real:
                bad.append(f"{where}: {p!r}")
    return bad


def test_extraction_finds_the_interposer_formats():
    """The scan sees the formats (a scan that finds nothing proves nothing)."""
    py, c = _python_formats(), _c_formats()
    assert len(py) > 50 and len(c) >= 2
    flat = {p for _w, parts in py for p in parts}
    assert "Creating new map entry with HstPtrBase=" in flat
    assert any("Device " in p for p in flat)


def test_every_python_format_is_libomptarget16s(real_strings):
    assert _missing(_python_formats(), real_strings) == []


def test_every_c_format_is_libomptarget16s(real_strings):
    assert _missing(_c_formats(), real_strings) == []


def test_a_newer_llvm_string_is_caught(real_strings):
    """The check is not vacuous: the LLVM 17+ EMPTY_MAPPING line fails it."""
    fake = [("x", ["variable ", " does not have a valid device counterpart"])]
    assert _missing(fake, real_strings)


def test_stoi_as_libstdcxx():
    """``std::stoi``: strtol's prefix rules, base 10, throws outside int."""
    from offload_shim.interposer.diag import StoiError, stoi
    assert [stoi(t) for t in ("0x40", "64", " \t64", "+64", "64abc", "-1", "1e3",
                              "2147483647", "-2147483648", "007")] == \
        [0, 64, 64, 64, 64, -1, 1, 2147483647, -2147483648, 7]
    for bad, kind in (("abc", "invalid_argument"), ("", "invalid_argument"),
                      ("+", "invalid_argument"), (" x1", "invalid_argument"),
                      ("2147483648", "out_of_range"), ("4294967295", "out_of_range"),
                      ("-2147483649", "out_of_range")):
        with pytest.raises(StoiError) as exc:
            stoi(bad)
        assert exc.value.kind == kind, bad
