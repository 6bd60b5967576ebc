"""The Python API for hosts (docs/usage.md, "Python API for hosts"): every documented
name imports from ``offload_shim`` and ``__all__`` is exactly the table; the flat names of
0.1 are gone, as attributes and as module paths (no meta-path finder, no module that
replaces itself in ``sys.modules``, no module-level ``__getattr__`` standing in for
another module)."""

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


FLAT_0_1 = ["runtime", "device", "images", "plugin", "discovery", "isolation", "imageinfo",
            "embed", "interpose_cli", "check"]


@pytest.mark.parametrize("name", FLAT_0_1)
def test_flat_names_of_0_1_are_gone(name):
    with pytest.raises(AttributeError, match=name):
        getattr(offload_shim, name)
    with pytest.raises(ImportError):
        exec(f"from offload_shim import {name}", {})


def test_hostplugin_is_the_module_itself():
    import offload_shim.hostplugin as h
    assert not hasattr(h, "__getattr__")          # it defines its names, it forwards none
    assert h.HostPluginControl.__module__ == "offload_shim.hostplugin"
    assert set(h.__all__) >= {"HostPluginControl", "bundled_plugin_path", "sample_image_path"}
    assert all(getattr(h, n) is not None for n in h.__all__)


@pytest.mark.parametrize("old", ["runtime", "plugin", "embed", "plugins.isolation",
                                 "core.verdicts", "interpose", "plugins.hostplugin"])
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
