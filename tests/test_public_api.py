"""The Python API for hosts (docs/usage.md, "Python API for hosts"): every documented
name imports from ``offload_shim`` and ``__all__`` is exactly the table; the old names of
the "Moved names" table are gone -- neither an attribute nor an importable module (no
alias, no meta-path finder, no module that replaces itself in ``sys.modules``) -- and
where each went imports."""

from __future__ import annotations

import importlib
import re
import sys
import types
from pathlib import Path

import pytest

import offload_shim

USAGE = Path(__file__).resolve().parent.parent / "docs" / "usage.md"


def _section(title: str) -> str:
    text = USAGE.read_text(encoding="utf-8")
    m = re.search(rf"^#+ {re.escape(title)}\n(.*?)(?=^#+ )", text, re.M | re.S)
    assert m, f"docs/usage.md has no section {title!r}"
    return m.group(1)


def _first_column(title: str) -> list[str]:
    return re.findall(r"^\| `([^`]+)` \|", _section(title), re.M)


DOCUMENTED = _first_column("Python API for hosts")
MOVED = [n.removeprefix("offload_shim.") for n in _first_column("Moved names")]


def test_all_is_the_documented_table():
    assert DOCUMENTED, "empty table"
    assert sorted(offload_shim.__all__) == sorted(DOCUMENTED)
    assert len(set(offload_shim.__all__)) == len(offload_shim.__all__)


@pytest.mark.parametrize("name", DOCUMENTED)
def test_every_documented_name_imports(name):
    value = getattr(offload_shim, name)
    assert value is not None
    assert name in dir(offload_shim)


def test_interpose_is_the_function():
    from offload_shim import interpose
    assert isinstance(interpose, types.FunctionType)
    assert interpose is offload_shim.interposer.interpose


def _now(name: str) -> str:
    """The module a moved name's row names (``module `X` `` or the name itself)."""
    row = next(r for r in _section("Moved names").splitlines()
               if r.startswith(f"| `offload_shim.{name}` |"))
    cell = row.split("|")[2]
    m = re.search(r"module `([^`]+)`", cell) or re.search(r"`([^`]+)`", cell)
    return m.group(1)


def test_the_moved_names_table_is_not_empty():
    assert "runtime" in MOVED and "hostplugin" in MOVED


@pytest.mark.parametrize("name", MOVED)
def test_a_moved_name_is_gone_and_its_new_home_imports(name):
    with pytest.raises(AttributeError):
        getattr(offload_shim, name)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"offload_shim.{name}")
    importlib.import_module(_now(name))


@pytest.mark.parametrize("old", ["runtime", "plugin", "embed", "plugins.isolation",
                                 "core.verdicts", "interpose"])
def test_old_module_paths_are_gone(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"offload_shim.{old}")


def test_no_finder_and_no_module_standing_in_for_another():
    assert not [f for f in sys.meta_path if "offload_shim" in getattr(f, "__module__", "")
                or "Moved" in getattr(f, "__qualname__", type(f).__qualname__)]
    assert not [m for m in sys.modules if m.startswith("offload_shim.")
                and getattr(sys.modules[m], "__name__", m) != m]


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        offload_shim.no_such_name
