"""The Python API for hosts (docs/usage.md, "Python API for hosts"): every documented
name imports from ``offload_shim`` and ``__all__`` is exactly the table; every deprecated
name of the "Deprecated names" table still answers, with one DeprecationWarning per
process; the old module paths are no longer importable (no meta-path finder, no module
that replaces itself in ``sys.modules``)."""

from __future__ import annotations

import importlib
import re
import subprocess
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
DEPRECATED = [n.removeprefix("offload_shim.") for n in _first_column("Deprecated names")]


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


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "always::DeprecationWarning", "-c", code],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", [n for n in DEPRECATED if not n.endswith(".*")])
def test_deprecated_name_warns_once_and_still_works(name):
    new = offload_shim._DEPRECATED[name][0]
    r = _run("import warnings, importlib, offload_shim\n"
             "with warnings.catch_warnings(record=True) as w:\n"
             "    warnings.simplefilter('always')\n"
             f"    from offload_shim import {name} as a\n"
             f"    b = offload_shim.{name}\n"
             f"assert a is b is importlib.import_module('offload_shim{new}'), a\n"
             "print(len([x for x in w if issubclass(x.category, DeprecationWarning)]))\n"
             "print(w[0].message)\n")
    assert r.returncode == 0, r.stderr
    count, message = r.stdout.splitlines()[:2]
    assert count == "1"
    assert f"offload_shim.{name} is deprecated" in message
    assert offload_shim._DEPRECATED[name][1] in message


def test_every_deprecated_name_is_in_the_table():
    listed = {n for n in DEPRECATED if not n.endswith(".*")}
    assert listed == set(offload_shim._DEPRECATED)
    rows = _section("Deprecated names")
    for name, (_new, release) in offload_shim._DEPRECATED.items():
        assert re.search(rf"^\| `offload_shim\.{name}` \|.*\| {re.escape(release)} \|$", rows,
                         re.M), name


def test_the_flat_hostplugin_names_warn_and_are_the_plugins_ones():
    r = _run("import warnings\n"
             "with warnings.catch_warnings(record=True) as w:\n"
             "    warnings.simplefilter('always')\n"
             "    from offload_shim.hostplugin import HostPluginControl, bundled_plugin_path\n"
             "    from offload_shim.hostplugin import HostPluginControl as again\n"
             "from offload_shim.plugins import hostplugin as h\n"
             "assert HostPluginControl is again is h.HostPluginControl\n"
             "assert bundled_plugin_path is h.bundled_plugin_path\n"
             "print(len([x for x in w if issubclass(x.category, DeprecationWarning)]))\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2"]                # one per name, not per use
    import offload_shim.hostplugin as flat
    with pytest.raises(AttributeError):
        flat._encode
    with pytest.raises(AttributeError):
        flat.no_such_name


@pytest.mark.parametrize("old", ["runtime", "plugin", "embed", "plugins.isolation",
                                 "core.verdicts", "interpose"])
def test_old_module_paths_are_gone(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"offload_shim.{old}")


def test_no_finder_and_no_module_standing_in_for_another():
    assert not [f for f in sys.meta_path if "offload_shim" in getattr(f, "__module__", "")
                or "Moved" in getattr(f, "__qualname__", type(f).__qualname__)]
    import offload_shim.hostplugin as flat
    assert flat.__name__ == "offload_shim.hostplugin"
    assert sys.modules["offload_shim.hostplugin"] is flat


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        offload_shim.no_such_name
