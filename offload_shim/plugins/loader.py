"""Load one offload plugin ``.so``: the file checks, the family, the process-wide registry.

:func:`load_plugin`:

* tells apart a missing file (:class:`PluginNotFoundError`), a failed ``dlopen``
  (:class:`PluginDlopenError`, with the dlerror text), a file built for another
  machine (:class:`WrongArchitectureError`, from the ELF header) and a library
  that is not a plugin (:class:`NotAPluginError`, naming the missing symbols);
* refuses the host runtimes by name and tries every other file's first load in
  a child process (:mod:`offload_shim.safety.isolation`): constructors run at
  ``dlopen``;
* classifies the ABI family and generation from the exported symbols only:
  loading makes **no** plugin call (a plugin doing work at load time: LLVM
  #74507) beyond GOMP's version probes, which libgomp makes too;
* applies libomptarget 16's and libgomp 12's required/optional rules
  (libomptarget 16 ``RTLsTy::loadRTLs`` in ``openmp/libomptarget/src/rtl.cpp``;
  libgomp 12 ``gomp_load_plugin_for_device`` in ``libgomp/target.c``) and binds
  every entry point once into the plugin object of the family
  (:mod:`.llvm`, :mod:`.gomp`, :mod:`.liboffload`).

A file is loaded once per process and never ``dlclose``\\ d; every runtime shares
the :class:`~.plugin.Plugin`.
"""

from __future__ import annotations

import ctypes
import os
import threading

from ..abi import gomp as _gomp
from ..abi import tgt_rtl as _tgt
from ..errors import (NotAPluginError, PluginDlopenError, PluginNotFoundError,
                      WrongArchitectureError)
from .plugin import LoadedImage, Plugin, TargetEntry

__all__ = ["LoadedImage", "Plugin", "TargetEntry", "load_plugin", "loaded_plugins", "probe"]

# process-wide registry (the only module-level mutable state, lock-protected)
_REGISTRY_LOCK = threading.Lock()
_HANDLES: dict[str, ctypes.CDLL] = {}
_PLUGINS: dict[tuple[str, str], "Plugin"] = {}


def _dlerror_text(exc: OSError) -> str:
    return str(exc).strip()


def _open_library(path: str) -> ctypes.CDLL:
    """dlopen once per process (RTLD_NOW|RTLD_LOCAL); never closed."""
    with _REGISTRY_LOCK:
        lib = _HANDLES.get(path)
        if lib is None:
            try:
                lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
            except OSError as exc:
                raise PluginDlopenError(
                    f"{path}: found but dlopen failed: {_dlerror_text(exc)}",
                    path=path, dlerror=_dlerror_text(exc)) from None
            _HANDLES[path] = lib
        return lib


def _exported(lib: ctypes.CDLL, prefix: str, names) -> set[str]:
    found = set()
    for name in names:
        try:
            getattr(lib, prefix + name)
        except AttributeError:
            continue
        found.add(name)
    return found


def _path_text(path) -> str:
    """``path`` as ``str``: ``str``, ``bytes`` (decoded as the file system
    does) or ``os.PathLike``; TypeError naming what was given otherwise."""
    if isinstance(path, (str, bytes)) or hasattr(path, "__fspath__"):
        try:
            text = os.fsdecode(path)
        except TypeError:                        # __fspath__ returned something else
            text = None
        if isinstance(text, str):
            return text
    raise TypeError(f"plugin path must be str, bytes or os.PathLike, not "
                    f"{type(path).__name__}")


# e_machine of the process (what dlopen accepts), by CPU as os.uname() names it
_HOST_MACHINE = {"x86_64": 62, "aarch64": 183, "ppc64le": 21, "ppc64": 21, "s390x": 22,
                 "riscv64": 243}


def _machine_name(value: int) -> str:
    try:
        from elftools.elf.enums import ENUM_E_MACHINE
    except ImportError:  # pragma: no cover - dependency declared
        return f"e_machine {value}"
    for name, v in ENUM_E_MACHINE.items():
        if v == value and name.startswith("EM_"):
            return name
    return f"e_machine {value}"


def _check_architecture(given: str, real: str) -> None:
    """WrongArchitectureError for an ELF file built for another machine or
    ELF class, read from its header (20 bytes) before any dlopen (glibc would
    say only "cannot open shared object file: No such file or directory").
    Files that are not ELF are left to dlopen, which names the problem."""
    try:
        with open(real, "rb") as f:
            head = f.read(20)
    except OSError:
        return                                   # dlopen reports it
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return
    order = "little" if head[5] == 1 else "big"
    machine = int.from_bytes(head[18:20], order)
    want = _HOST_MACHINE.get(os.uname().machine)
    if want is None:
        return                                   # a CPU without a table entry: dlopen says
    cls64 = head[4] == 2
    if machine != want or not cls64 or (order != "little" and want in (62, 183, 243)):
        got = _machine_name(machine) + ("" if cls64 else " ELFCLASS32")
        exp = _machine_name(want)
        raise WrongArchitectureError(
            f"{given}: wrong architecture ({got}): this process runs {exp} code and "
            "can only load plugins built for it", path=real, machine=got, expected=exp)


def _resolve(path: str) -> str:
    if not path:
        raise ValueError("empty plugin path")
    if os.path.exists(path) and not os.path.isdir(path):
        return os.path.realpath(path)   # the usual case, without importing pathlib
    from pathlib import Path            # pathlib's reading of the path ("lib.so/" is lib.so)
    p = Path(path)
    if not p.exists():
        raise PluginNotFoundError(f"plugin not found: {p}", path=str(p))
    if p.is_dir():
        raise NotAPluginError(f"{p} is a directory, not a plugin library",
                              path=str(p), missing=[])
    return os.path.realpath(p)


# Host runtimes that sit next to the plugins but are not plugins: their
# constructors (libomptarget's registers itself, looks for plugins, reads the
# environment) run at dlopen and may crash or hang the interpreter.
# Matched by name (``NAME`` or ``NAME.*``), not by regular expressions: compiling three
# patterns at import cost a tenth of the start-up of every ``offload-shim run``.
_HOST_RUNTIMES = (
    (("libomptarget.so",), "libomptarget, the host runtime", "libomptarget.rtl.*.so"),
    (("libgomp.so",), "libgomp, the GCC OpenMP host runtime", "libgomp-plugin-*.so.1"),
    (("libomp.so", "libiomp5.so"), "libomp, the LLVM OpenMP CPU runtime",
     "libomptarget.rtl.*.so"),
)


def _refuse_host_runtime(given: str, real: str) -> None:
    """NotAPluginError for a known host runtime, by name, before any dlopen."""
    for base in (os.path.basename(given), os.path.basename(real)):
        for names, what, plugins in _HOST_RUNTIMES:
            if any(base == n or base.startswith(n + ".") for n in names):
                raise NotAPluginError(
                    f"{given} is {what}, not a plugin (plugins are {plugins})",
                    path=real, missing=[])


def _bundled_real() -> str | None:
    try:
        from ..abi.native import PLUGIN_FILENAME, native_dir
    except ImportError:
        return None
    p = os.path.join(native_dir(), PLUGIN_FILENAME)      # bundled_plugin_path(), as a str
    return os.path.realpath(p) if os.path.isfile(p) else None


def _needs_probe(real: str, probe: bool | None) -> bool:
    if probe is False:
        return False
    with _REGISTRY_LOCK:
        if real in _HANDLES:
            return False                       # already dlopen'ed by us
    if probe is None:
        if real == _bundled_real():
            return False                       # built with the package: trusted
        from ..safety.isolation import mapped_in_process
        if mapped_in_process(real):
            return False                       # constructors already ran here
    return True


def probe(path: str | os.PathLike) -> dict:
    """Classify a library without keeping a Plugin: returns
    ``{"path", "abi", "generation"}`` or raises like :func:`load_plugin`."""
    plugin = load_plugin(path)
    return {"path": plugin.path, "abi": plugin.abi, "generation": plugin.generation}


def load_plugin(path: str | bytes | os.PathLike, *, abi: str | None = None,
                probe: bool | None = None, timeout: float | None = None) -> "Plugin":
    """Load the plugin at ``path`` and return the process-wide Plugin for it.

    ``abi``: ``"llvm"``, ``"gomp"`` or ``"liboffload"`` to pick a view of a
    library that exports several (the bundled host plugin); default: LLVM if
    its required symbols are present, else GOMP, else liboffload (``ol*``,
    ``libLLVMOffload.so``: :mod:`offload_shim.plugins.liboffload`).

    Known host runtimes (``libomptarget.so*``, ``libgomp.so*``,
    ``libomp.so*``) are refused by name before any
    ``dlopen`` (NotAPluginError).  ``probe``: a library's constructors run at
    ``dlopen`` and can crash the interpreter, so before the first in-process
    ``dlopen`` of a file the same load is tried in a child process
    (:func:`offload_shim.safety.isolation.probe_plugin`; verdicts cached per
    ``(realpath, size, mtime)`` for the process).  ``None`` (default): probe
    unless the file is the bundled plugin or is already loaded in this
    process; ``True``: probe unless already ``dlopen``-ed here; ``False``:
    never.  The probe costs one interpreter start plus the package import
    and the library's own dlopen: measured 0.04-0.06 s for the GCC 12 and
    LLVM 16 plugins (libLLVM included), once per file per process; loading
    the bundled plugin costs nothing extra.

    Raises PluginNotFoundError, PluginDlopenError (also when the probe
    crashed: ``.dlerror`` is the signal name, e.g. ``"SIGSEGV"``),
    NotAPluginError, ABIMismatchError (a known family in an unsupported
    generation), ValueError for an empty path or an unknown ``abi``.

    ``path``: ``str``, ``bytes`` or ``os.PathLike`` (TypeError otherwise).
    Before any ``dlopen`` the ELF header is read: a file built for another
    machine raises WrongArchitectureError ("wrong architecture
    (EM_AARCH64)"), a PluginDlopenError.  ``timeout``: seconds the
    child-process probe may take (default
    :data:`~offload_shim.safety.isolation.PLUGIN_TIMEOUT_S`); a plugin
    whose constructors run longer is refused as hung (``.dlerror ==
    "hung"``); a ``timeout`` that is not a number (TypeError) or not > 0
    (ValueError) is refused whether or not a probe runs.
    """
    if abi not in (None, "llvm", "gomp", "liboffload"):
        raise ValueError(f"abi must be 'llvm', 'gomp', 'liboffload' or None, not {abi!r}")
    path = _path_text(path)
    if timeout is not None:            # refused also when no probe would run
        from ..safety.children import check_timeout
        timeout = check_timeout(timeout)
    real = _resolve(path)
    with _REGISTRY_LOCK:
        # abi None: the default view chosen before (not any view loaded explicitly)
        if (real, abi) in _PLUGINS:
            return _PLUGINS[(real, abi)]
    _refuse_host_runtime(path, real)
    _check_architecture(path, real)
    if _needs_probe(real, probe):
        from ..safety.isolation import probe_plugin
        probe_plugin(real, abi, timeout=timeout)
    lib = _open_library(real)
    llvm_syms = _exported(lib, _tgt.PREFIX, _tgt.all_names())
    gomp_syms = _exported(lib, _gomp.PREFIX, _gomp.PROTOTYPES[_gomp.GOMP_VERSION_GCC12])
    llvm_gen = _tgt.classify(llvm_syms)
    candidates = []
    if abi in (None, "llvm") and llvm_gen is not None:
        candidates.append("llvm")
    if abi in (None, "gomp") and "version" in gomp_syms | set():
        candidates.append("gomp")
    ol_syms: set = set()
    if abi == "liboffload" or (abi is None and not candidates):
        # the third family (plugins/liboffload.py), looked at only when it could be
        # the one chosen (its tables are large: start-up of every run)
        from ..abi import liboffload as _olabi
        ol_syms = _exported(lib, "", _olabi.all_names())
        if _olabi.classify(ol_syms) is not None:
            candidates.append("liboffload")
    if not candidates and abi == "liboffload":
        missing = _olabi.missing(ol_syms)
        raise NotAPluginError(f"{real} is not a liboffload (ol*): it lacks {', '.join(missing)}",
                              path=real, missing=missing)
    if not candidates:
        # say what is missing for the closest ABI
        llvm_missing = [_tgt.PREFIX + n for n in _tgt.GENERATIONS["llvm16-classic"][1]
                        if n not in llvm_syms]
        gomp_missing = [_gomp.PREFIX + n for n in _gomp.REQUIRED_BASE if n not in gomp_syms]
        if abi == "gomp" or (abi is None and len(gomp_missing) < len(llvm_missing)):
            missing, family = gomp_missing, "libgomp (GOMP_OFFLOAD_*)"
        else:
            missing, family = llvm_missing, "libomptarget (__tgt_rtl_*)"
        raise NotAPluginError(
            f"{real} is not an offload plugin: as a {family} plugin it lacks "
            f"{', '.join(missing)}", path=real, missing=missing)
    kind = candidates[0]
    if kind == "liboffload":
        from .liboffload import LiboffloadPlugin
        plugin = LiboffloadPlugin(real, lib, ol_syms)
    elif kind == "llvm":
        from .llvm import LLVMPlugin     # each family's module when a plugin of it loads
        plugin = LLVMPlugin(real, lib, llvm_syms)
    else:
        from .gomp import GompPlugin
        plugin = GompPlugin(real, lib, gomp_syms)
    with _REGISTRY_LOCK:
        got = _PLUGINS.setdefault((real, kind), plugin)
        if abi is None:
            _PLUGINS.setdefault((real, None), got)
        return got


def loaded_plugins() -> list["Plugin"]:
    """Every Plugin loaded in this process so far (one per file and ABI view)."""
    with _REGISTRY_LOCK:
        return list({id(p): p for p in _PLUGINS.values()}.values())
