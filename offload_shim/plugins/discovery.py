"""Where plugins are looked for.

Order: explicit paths, then ``$OFFLOAD_SHIM_PLUGINS`` (an ``os.pathsep``
separated list of files or directories), then the standard locations
(``/usr/lib/llvm-*/lib/libomptarget.rtl.*.so*``, liboffload
``/usr/lib/llvm-*/lib/libLLVMOffload.so*``, the multiarch directory's
``libgomp-plugin-*.so.1``, LLVM 14 plugins unpacked under
``$OFFLOAD_SHIM_LLVM14_ROOT`` and liboffload unpacked under
``$OFFLOAD_SHIM_LIBOFFLOAD_ROOT``), then the bundled host plugin.
Duplicates (the same real file through symlinks) are listed once.

The three ``*_ROOT`` variables need not be set by hand: ``scripts/setup.sh`` (run by
``make demo`` / ``make test``) records the folders it unpacked the runtimes into in
``<venv>/offload_shim-roots.env`` (:data:`ROOTS_FILE`), which :func:`root` reads for a
variable that is not set.  A variable set (even to ``""``) wins over the record.
"""

from __future__ import annotations

import os
from collections import namedtuple

# glob and sysconfig are imported by the functions that search: the runtime imports this
# module, and the embedded runtime of `offload-shim run` never searches (start-up)

ENV_VAR = "OFFLOAD_SHIM_PLUGINS"


class Candidate(namedtuple("Candidate", "path source")):
    """A plugin file found: its ``path`` and ``source``, where it was found
    (``"explicit"``, ``"env"``, ``"system"`` or ``"bundled"``)."""
    __slots__ = ()


def _multiarch_dirs() -> list[str]:
    import sysconfig
    arch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    return [f"/usr/lib/{arch}", f"/lib/{arch}", "/usr/lib64", "/usr/lib"]


def _plugin_files_in(directory: str) -> list[str]:
    import glob
    pats = ["libomptarget.rtl.*.so*", "libgomp-plugin-*.so.1", "libLLVMOffload.so*"]
    out = []
    for pat in pats:
        out.extend(sorted(glob.glob(os.path.join(directory, pat))))
    return out


LLVM14_ROOT_VAR = "OFFLOAD_SHIM_LLVM14_ROOT"
#: where scripts/setup.sh unpacks liboffload-22 + libllvm22 (they conflict with libomp5-16)
LIBOFFLOAD_ROOT_VAR = "OFFLOAD_SHIM_LIBOFFLOAD_ROOT"
#: where scripts/setup.sh unpacks libomp5-19 + libomp-19-dev (clang-19's own runtime)
LLVM19_ROOT_VAR = "OFFLOAD_SHIM_LLVM19_ROOT"
#: the file scripts/setup.sh writes into the virtual environment it installs into:
#: ``VAR=/absolute/folder`` lines for the three ``*_ROOT`` variables
ROOTS_FILE = "offload_shim-roots.env"
_ROOT_VARS = (LLVM14_ROOT_VAR, LIBOFFLOAD_ROOT_VAR, LLVM19_ROOT_VAR)
_recorded: dict[str, dict[str, str]] = {}


def recorded_roots(prefix: str | None = None) -> dict[str, str]:
    """The runtime folders ``scripts/setup.sh`` recorded in ``<prefix>/offload_shim-roots.env``
    (``prefix``: default ``sys.prefix``, the virtual environment the package is installed
    in): ``{variable: folder}`` for the ``*_ROOT`` variables it names; ``{}`` when there
    is no such file.  Lines other than ``VAR=VALUE`` for those variables are ignored."""
    import sys
    prefix = sys.prefix if prefix is None else prefix
    got = _recorded.get(prefix)
    if got is None:
        got = {}
        try:
            with open(os.path.join(prefix, ROOTS_FILE), encoding="utf-8") as f:
                for line in f:
                    var, sep, value = line.strip().partition("=")
                    if sep and var in _ROOT_VARS and value:
                        got[var] = value
        except OSError:
            pass
        _recorded[prefix] = got
    return got


def root(var: str, env=None) -> str | None:
    """The folder of runtime root variable ``var`` (:data:`LLVM14_ROOT_VAR`,
    :data:`LIBOFFLOAD_ROOT_VAR`, :data:`LLVM19_ROOT_VAR`): its value in ``env`` (default
    ``os.environ``) when set there, ``""`` meaning none; else the folder
    :func:`recorded_roots` names; else None."""
    env = os.environ if env is None else env
    if var in env:
        return env[var] or None
    return recorded_roots().get(var)


def system_plugin_paths(env=None) -> list[str]:
    """Installed LLVM and GCC plugins (no loading), plus the LLVM 14 plugins
    unpacked under ``$OFFLOAD_SHIM_LLVM14_ROOT`` (libomp-14-dev conflicts with
    libomp5-16, so scripts/setup.sh unpacks it with dpkg -x; :func:`root`)."""
    import glob
    env = os.environ if env is None else env
    out = sorted(glob.glob("/usr/lib/llvm-*/lib/libomptarget.rtl.*.so*"))
    r14 = root(LLVM14_ROOT_VAR, env)
    if r14:
        out.extend(sorted(glob.glob(os.path.join(r14, "usr/lib/llvm-*/lib/libomptarget.rtl.*.so*"))))
    for d in _multiarch_dirs():
        out.extend(sorted(glob.glob(os.path.join(d, "libgomp-plugin-*.so.1"))))
    out.extend(liboffload_paths(env))
    return out


def liboffload_paths(env=None) -> list[str]:
    """liboffload libraries (``libLLVMOffload.so.*``, the ``ol*`` family):
    installed under ``/usr/lib/llvm-*/lib`` or unpacked under
    ``$OFFLOAD_SHIM_LIBOFFLOAD_ROOT``; versioned files only (the ``.so``
    development symlink is the same library)."""
    import glob
    env = os.environ if env is None else env
    roots = ["/"]
    if root(LIBOFFLOAD_ROOT_VAR, env):
        roots.append(root(LIBOFFLOAD_ROOT_VAR, env))
    out = []
    for top in roots:
        out.extend(sorted(glob.glob(os.path.join(top, "usr/lib/llvm-*/lib/libLLVMOffload.so.*"))))
    return out


def host_runtime_paths(env=None) -> list[str]:
    """LLVM host runtimes (``libomptarget.so.<N>``, what clang-N programs link) installed
    under ``/usr/lib/llvm-*/lib`` or unpacked under ``$OFFLOAD_SHIM_LLVM19_ROOT`` /
    ``$OFFLOAD_SHIM_LIBOFFLOAD_ROOT`` (LLVM 22), one per file name.  They are not
    plugins: since LLVM 19 the plugins are linked into them (llvm-project PR #87009)."""
    import glob
    env = os.environ if env is None else env
    roots = ["/"] + [r for r in (root(LLVM19_ROOT_VAR, env), root(LIBOFFLOAD_ROOT_VAR, env))
                     if r]
    out, seen = [], set()
    for top in roots:
        for p in sorted(glob.glob(os.path.join(top, "usr/lib/llvm-*/lib/libomptarget.so.*"))):
            name = os.path.basename(os.path.realpath(p))
            if name not in seen and os.path.isfile(p):
                seen.add(name)
                out.append(p)
    return out


def check_env_paths(env=None) -> list[str]:
    """The entries of ``$OFFLOAD_SHIM_PLUGINS`` (``os.pathsep``-separated plugin files
    or directories; empty entries are skipped).  Raises ``ValueError`` naming the
    variable and the entry for one that is neither a file nor a directory: a path the
    user set that cannot be found is a configuration error (as a bad
    ``OFFLOAD_SHIM_NATIVE_DIR`` is), not a plugin that failed to load."""
    env = os.environ if env is None else env
    value = env.get(ENV_VAR, "")
    items = [item for item in value.split(os.pathsep) if item]
    for item in items:
        if not os.path.exists(item):
            raise ValueError(f"{ENV_VAR}={value!r}: no file or directory {item!r} (plugin "
                             f"files or directories, {os.pathsep!r}-separated)")
    return items


def candidates(paths=(), *, env=None, system: bool = True, bundled: bool = True) -> list[Candidate]:
    """Every plugin file to try, deduplicated by real path."""
    env = os.environ if env is None else env
    found: list[Candidate] = []
    seen: set[str] = set()

    def add(p: str, source: str) -> None:
        real = os.path.realpath(p)
        if real in seen:
            return
        seen.add(real)
        found.append(Candidate(str(p), source))

    for p in paths:                 # str, bytes or os.PathLike (str(b"...") is "b'...'")
        add(os.fsdecode(p) if isinstance(p, bytes) or hasattr(p, "__fspath__") else str(p),
            "explicit")
    for item in filter(None, env.get(ENV_VAR, "").split(os.pathsep)):
        if os.path.isdir(item):
            for p in _plugin_files_in(item):
                add(p, "env")
        else:
            add(item, "env")
    if system:
        for p in system_plugin_paths(env):
            add(p, "system")
    if bundled:
        from ..abi.native import bundled_plugin_path
        try:
            add(str(bundled_plugin_path()), "bundled")
        except FileNotFoundError:
            pass
    return found


def is_host_plugin(path: str) -> bool:
    """True for plugins that run on this CPU (x86_64 host plugins, bundled)."""
    from pathlib import Path
    base = Path(path).name
    return ".x86_64." in base or base.startswith("libosh_hostplugin")
