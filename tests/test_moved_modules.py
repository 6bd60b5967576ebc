"""Scripts written against the flat layout (``offload_shim.runtime``,
``offload_shim.plugin``, ...) keep importing: each old path is the module that now holds
the code, and the public ``offload_shim.interpose`` stays the function."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import offload_shim

MOVED = {"runtime": ("core.runtime", "Runtime"), "device": ("core.device", "Device"),
         "images": ("core.images", "OffloadImage"), "plugin": ("plugins.loader", "load_plugin"),
         "discovery": ("plugins.discovery", None), "isolation": ("safety.isolation", None),
         "imageinfo": ("elf.imageinfo", None), "embed": ("interposer.embed", None),
         "interpose_cli": ("cli.run", None), "check": ("cli.check", None),
         "hostplugin": ("plugins.hostplugin", "HostPluginControl"),
         "plugins.isolation": ("safety.isolation", "probe_plugin"),
         "plugins.leftovers": ("safety.leftovers", "sweep"),
         "core.verdicts": ("safety.verdicts", "sha256")}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_is_the_new_module(old):
    new, name = MOVED[old]
    a = importlib.import_module(f"offload_shim.{old}")
    b = importlib.import_module(f"offload_shim.{new}")
    assert a is b
    if name:
        assert getattr(a, name) is getattr(offload_shim, name, getattr(b, name))


def test_unknown_submodule_still_fails():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("offload_shim.no_such_module")


def test_interpose_stays_the_function():
    out = subprocess.run(
        [sys.executable, "-c", "import offload_shim.runtime, offload_shim as o; "
         "from offload_shim.plugin import load_plugin; print(callable(o.interpose), "
         "type(o.interpose).__name__)"], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "function"]
