"""Every line the interposer prints as libomptarget (``Libomptarget error:`` /
``omptarget error:``, ``message:``, ``device N info:``, ``fatal error N:``) is one the
releases it follows can print: the literal parts of each format the interposer uses
must occur in the libraries' own strings (``strings`` of libomptarget.so.16, and of
19.1's and 22.1's when scripts/setup.sh unpacked them), each text a release's profile
holds (offload_shim/interposer/llvm/profile.py) in that release's library, and
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

from clang_toolchains import CLANG19, CLANG22

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "offload_shim" / "interposer"
LIBOMPTARGET16 = Path("/usr/lib/llvm-16/lib/libomptarget.so.16")
#: the library of each release the interposer follows (profile.py)
LIBRARIES = {"16": LIBOMPTARGET16, "19.1": CLANG19.runtime_lib / "libomptarget.so.19.1",
             "22.1": CLANG22.runtime_lib / "libomptarget.so.22.1"}
#: the modules that re-create libomptarget 16: the shared bridge and the llvm/ wing
#: (gomp/ re-creates libgomp)
LLVM_MODULES = ("llvm/api", "bridge", "llvm/diag", "embed", "llvm/interface", "llvm/launch",
                "library", "llvm/mapping", "llvm/maptable", "llvm/omptarget", "llvm/plan",
                "llvm/plan_data", "llvm/plan_target", "llvm/plugin_manager", "llvm/policy",
                "llvm/rtl", "llvm/transfer")
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


_C_HEAD = re.compile(r"^(Libomptarget|%s) (error|message|fatal error \d+|device %d info): ")


def _c_formats() -> list[tuple[str, list[str]]]:
    """(where, literal parts) of the ``Libomptarget ...`` lines native/interposer*.c
    print (printf conversions split the parts; ``%s error: ...`` is such a line with
    the runtime's name given by Python, ``osh_interposer_set_runtime_name``)."""
    found = []
    for path in sorted((ROOT / "native").glob("interposer*.c")):
        text = path.read_text()
        for m in re.finditer(r'fprintf\(stderr,\s*((?:"(?:[^"\\]|\\.)*"\s*)+)', text):
            lit = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1)))
            lit = lit.encode().decode("unicode_escape")
            if not _C_HEAD.match(lit):
                continue
            lit = _C_HEAD.sub("", lit)
            line = text.count("\n", 0, m.start()) + 1
            found.append((f"{path.name}:{line}", re.split(r"%[-0-9.*]*l*[a-zA-Z]", lit)))
    return found


def _strings(path: Path) -> str:
    return subprocess.run(["strings", "-n", "3", str(path)], capture_output=True,
                          text=True, check=True).stdout


@pytest.fixture(scope="module")
def release_strings() -> dict[str, str]:
    """``strings`` of each release's libomptarget (16 required; 19.1 and 22.1 when
    unpacked)."""
    if not LIBOMPTARGET16.exists():
        pytest.skip("libomptarget.so.16 not installed (libomp5-16)")
    if shutil.which("strings") is None:
        pytest.skip("strings (binutils) not installed")
    return {rel: _strings(p) for rel, p in LIBRARIES.items() if p.exists()}


@pytest.fixture(scope="module")
def real_strings(release_strings) -> str:
    """The strings of every release's library: a line the interposer prints is one of
    the release the program links (which one: the profile, checked below)."""
    if len(release_strings) < len(LIBRARIES):
        pytest.skip("libomptarget 19.1 / 22.1 not unpacked (scripts/setup.sh)")
    return "\n".join(release_strings.values())


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


def test_every_python_format_is_a_releases(real_strings):
    assert _missing(_python_formats(), real_strings) == []


def test_every_c_format_is_a_releases(real_strings):
    assert _missing(_c_formats(), real_strings) == []


def test_a_foreign_string_is_caught(real_strings, release_strings):
    """The check is not vacuous: a line of no release fails it, and the LLVM 17+
    EMPTY_MAPPING line is not libomptarget 16's."""
    assert _missing([("x", ["variable ", " does not have a valid device counterpart "
                                         "at all"])], real_strings)
    fake = [("x", ["variable ", " does not have a valid device counterpart"])]
    assert _missing(fake, release_strings["16"])


def _profile_texts(p) -> list[tuple[str, list[str]]]:
    """(field, literal parts) of the texts a profile holds for its lines."""
    out = [(f"region_names{k}", [v]) for k, v in p.region_names.items()]
    if p.invalid_device is not None:
        # 22.1 prints the error's code ("invalid value", which its error category
        # spells at run time: no string of the library) before the message
        out.append(("invalid_device", re.split(r'\{\w+\}|^"[a-z ]+" ', p.invalid_device)))
    if p.register_requires_message is not None:
        out.append(("register_requires_message",
                    p.register_requires_message.split("void __tgt_register_requires"
                                                      "(int64_t)")))
    num, clauses = p.requires_fatal
    text = p.requires_conflict(clauses[0], 0)[1]
    out.append(("requires_fatal", [text] if p.major == 16
                else ["'#pragma omp requires ", "' not used consistently!"]))
    return out


@pytest.mark.parametrize("release", list(LIBRARIES))
def test_each_profiles_texts_are_its_releases(release, release_strings):
    """The region names, fatal texts and messages of each profile occur in the strings
    of that release's own library (and a profile's name is the prefix its library
    prints)."""
    from offload_shim.interposer.llvm.profile import PROFILES
    if release not in release_strings:
        pytest.skip(f"{LIBRARIES[release]} missing (scripts/setup.sh)")
    p = next(q for q in PROFILES if q.release == release)
    real = release_strings[release]
    assert _missing(_profile_texts(p), real) == []
    assert f"{p.name} fatal error %d: %s" in real


def test_stoi_as_libstdcxx():
    """``std::stoi``: strtol's prefix rules, base 10, throws outside int."""
    from offload_shim.interposer.llvm.diag import StoiError, stoi
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
