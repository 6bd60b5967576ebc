"""PEP 517 build backend of offload-shim: scikit-build-core, after a check
that the tools to build ``native/`` are there.

``pip install .`` builds the bundled host plugin, the interposer and the
sample kernels with CMake and a C compiler.  Without them scikit-build-core
would fail deep inside CMake ("No CMAKE_C_COMPILER could be found") or try
to fetch CMake from PyPI; this wrapper says what is missing, with the Debian
packages that provide it, before anything is built.  ``sdist`` needs neither.

The build directory is scikit-build-core's temporary one (``build-dir`` is
not set in pyproject.toml), so a build from a source folder leaves no
``build/`` in it.
"""

from __future__ import annotations

import os
import shutil

# the C compilers CMake's project(... C) looks for first, and where they come from
_COMPILERS = ("cc", "gcc", "clang")
_MIN_CMAKE = "3.15"


def missing_tools(environ=None) -> list[tuple[str, str]]:
    """``[(what, Debian package)]`` for each build tool not found on ``PATH``
    (``$CC`` counts as the C compiler, ``$CMAKE_EXECUTABLE`` as CMake)."""
    env = os.environ if environ is None else environ
    path = env.get("PATH", os.defpath)
    out = []
    cc = env.get("CC", "").split()
    have_cc = bool(cc) and shutil.which(cc[0], path=path) is not None
    if not have_cc and not any(shutil.which(c, path=path) for c in _COMPILERS):
        out.append(("a C compiler (cc, gcc or clang; or set CC)", "gcc"))
    cmake = env.get("CMAKE_EXECUTABLE") or "cmake"
    if shutil.which(cmake, path=path) is None:
        out.append((f"CMake >= {_MIN_CMAKE}", "cmake"))
    return out


def check_build_tools(environ=None) -> None:
    """SystemExit with one message naming what is missing and the
    ``apt-get install`` line that provides it; nothing when all is there."""
    missing = missing_tools(environ)
    if not missing:
        return
    what = " and ".join(w for w, _ in missing)
    pkgs = " ".join(p for _, p in missing)
    raise SystemExit(
        f"offload-shim: cannot build the native libraries (native/): {what} not found on "
        f"PATH.  On Debian/Ubuntu: sudo apt-get install {pkgs}  (build-essential also "
        f"provides the compiler).  Nothing was built.")


try:
    from scikit_build_core import build as _skb
except ImportError:          # imported for its checks only (the tests)
    _skb = None

_CHECKED = {"get_requires_for_build_wheel", "get_requires_for_build_editable",
            "build_wheel", "build_editable"}
_HOOKS = ("get_requires_for_build_wheel", "get_requires_for_build_editable",
          "get_requires_for_build_sdist", "prepare_metadata_for_build_wheel",
          "prepare_metadata_for_build_editable", "build_wheel", "build_editable",
          "build_sdist")


def _wrap(name):
    target = getattr(_skb, name)

    def hook(*args, **kwargs):
        if name in _CHECKED:
            check_build_tools()
        return target(*args, **kwargs)

    hook.__name__ = name
    hook.__doc__ = f"scikit-build-core's {name}" + (
        ", after :func:`check_build_tools`" if name in _CHECKED else "")
    return hook


if _skb is not None:
    for _name in _HOOKS:
        if hasattr(_skb, _name):        # a frontend calls only the hooks a backend has
            globals()[_name] = _wrap(_name)
