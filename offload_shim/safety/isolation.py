"""Checks that run a library's loader work in a child process first.

A real plugin (or glibc's ``ld.so`` inside it) trusts what it ``dlopen``\\ s:
a corrupt offload image can make ``dlopen`` segfault, and a library's
constructors run at ``dlopen``, so a file that is not a plugin can kill the
interpreter before any symbol is looked up.  The static checks of
:mod:`offload_shim.elf` refuse what can be recognised in the bytes; what
remains is tried here, in a fresh interpreter, and only a clean exit lets the
caller go on in-process.

* :func:`verify_image` -- ``dlopen`` the image bytes (``RTLD_NOW |
  RTLD_LOCAL``, as the host plugins do) from a temporary file in a child;
  verdicts are cached process-wide and across runs (:mod:`offload_shim.safety.verdicts`)
  by the SHA-256 of the bytes.
* :func:`probe_plugin` -- load a plugin file in a child with
  :func:`offload_shim.plugins.loader.load_plugin` (``dlopen`` + symbol lookup + the
  GOMP version/caps probes); verdicts are cached per ``(realpath, size,
  mtime)`` in the process and by the SHA-256 of the file across runs.
* :func:`probe_library` -- ``dlopen`` a compiled OpenMP library in a child
  with the interposer in place (its constructors register its images).

All raise a typed :class:`~offload_shim.errors.OffloadError`; they never
let the bytes or the file reach this process.  Every child runs through
:func:`~offload_shim.safety.children.run_child`: a private ``TMPDIR``, its process group killed whatever
ends the wait (a timeout, Ctrl-C, SIGTERM), and what it leaves removed
(:class:`~offload_shim.safety.children.ChildScope`).
"""

from __future__ import annotations

import _thread
import os
import sys

# subprocess and .children are imported where they are used (start-up time of
# `offload-shim run`, whose embedded runtime reaches load_plugin); _thread, not
# threading (whose Lock it is): `run --plugin` checks its plugins in the launcher

from . import verdicts as _verdicts
from ..errors import InvalidImageError, LibraryLoadError, PluginDlopenError

#: the modules whose code decides the verdicts stored across runs (safety/verdicts.py)
_CHECKERS = ("offload_shim.safety.isolation",)
_PLUGIN_CHECKERS = ("offload_shim.safety.isolation", "offload_shim.plugins.loader",
                    "offload_shim.plugins.plugin", "offload_shim.plugins.llvm",
                    "offload_shim.plugins.gomp", "offload_shim.plugins.liboffload",
                    "offload_shim.abi.tgt_rtl", "offload_shim.abi.gomp",
                    "offload_shim.abi.liboffload")

#: seconds a child may take before its work counts as hung
IMAGE_TIMEOUT_S = 60.0
PLUGIN_TIMEOUT_S = 120.0

LDSO_EXIT = 127        # ld.so's _dl_signal_error / assertion exits use 127

_lock = _thread.allocate_lock()
_image_verdicts: dict[str, str | None] = {}        # sha256 -> None (ok) or message
_plugin_verdicts: dict[tuple[str, int, int, str], tuple[str, str] | None] = {}


def _tail(text: str, limit: int = 400) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else "..." + text[-limit:]


_IMAGE_CHILD = r"""
import ctypes, os, sys
try:
    ctypes.CDLL(sys.argv[1], os.RTLD_NOW | os.RTLD_LOCAL)
except OSError as exc:
    sys.stdout.write(str(exc))
    sys.stdout.flush()
    os._exit(3)
sys.exit(0)          # a normal exit also runs the image's destructors
"""


def _run_image_child(data: bytes) -> str | None:
    import subprocess
    from .children import run_child, signal_name
    import tempfile
    fd, path = tempfile.mkstemp(prefix="osh_verify_", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            proc = run_child([sys.executable, "-P", "-I", "-c", _IMAGE_CHILD, path],
                             timeout=IMAGE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"dlopen of the image did not finish within {IMAGE_TIMEOUT_S:.0f} s"
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    rc = proc.returncode
    if rc == 0:
        return None
    if rc < 0:
        return (f"image crashes the dynamic loader ({signal_name(rc)}) in a test dlopen "
                "in a child process; no plugin was given it")
    if rc == LDSO_EXIT:
        why = _tail(proc.stderr) or "no message"
        return (f"image makes the dynamic loader abort (exit {rc}: {why}) in a test dlopen "
                "in a child process; no plugin was given it")
    if rc == 3:
        return f"dlopen of the image fails: {_tail(proc.stdout.replace(path, '<image>'))}"
    return (f"test dlopen of the image exited with status {rc}: "
            f"{_tail(proc.stderr.replace(path, '<image>')) or 'no message'}")


def verify_image(data: bytes, *, name: str = "image") -> None:
    """``dlopen`` ``data`` in a child process (once per distinct content per
    process) and raise InvalidImageError unless it loads and unloads
    cleanly: a signal or ld.so's exit 127 -> "image crashes the dynamic
    loader (SIGSEGV) ...", a dlopen error -> its message.  Costs one
    interpreter start (measured ~12 ms for the sample image) the first time
    a given content is seen; ~30 us for a cached verdict."""
    key = _verdicts.sha256(data)
    with _lock:
        if key in _image_verdicts:
            verdict = _image_verdicts[key]
        else:
            stored = _verdicts.get("image-dlopen", _CHECKERS, key)
            if stored is not None and "verdict" in stored:
                verdict = stored["verdict"]
            else:
                verdict = _run_image_child(bytes(data))
                _verdicts.put("image-dlopen", _CHECKERS, key, {"verdict": verdict})
            _image_verdicts[key] = verdict
    if verdict is not None:
        raise InvalidImageError(f"image {name!r}: {verdict}")


def image_verdict_cached(data: bytes) -> bool:
    """True when :func:`verify_image` already ran for this content."""
    return _verdicts.sha256(data) in _image_verdicts


# -- plugins ----------------------------------------------------------------------

_PLUGIN_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from offload_shim.plugins.loader import load_plugin
from offload_shim.errors import OffloadError
try:
    load_plugin(sys.argv[2], abi=(sys.argv[3] or None), probe=False)
except OffloadError as exc:
    pass              # a typed refusal: the parent's own load will raise it again
sys.stdout.flush()
import os
os._exit(0)           # plugins are never dlclose'd in the parent either
"""


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _child_verdict(args: list[str], timeout: float, *, hung: str, crashed: str,
                   exited: str) -> tuple[str, str] | None:
    """Run ``python -P -c *args`` as a child (:func:`~offload_shim.safety.children
    .run_child`, ``timeout`` in seconds): None when it exits 0, else ``(short,
    message)`` -- ``("hung", hung)`` when it outlives ``timeout``, ``(signal name,
    crashed)`` when a signal ends it, ``("exit N", exited)`` on a non-zero status.  The
    messages are ``str.format`` templates of ``timeout``, ``sig``, ``rc`` and ``why``
    (the tail of the child's stderr)."""
    import subprocess                   # children only when a verdict is not known
    from .children import run_child, signal_name
    try:
        proc = run_child([sys.executable, "-P", "-c", *args], timeout=timeout)
    except subprocess.TimeoutExpired:
        return ("hung", hung.format(timeout=timeout))
    rc = proc.returncode
    if rc == 0:
        return None
    if rc < 0:
        sig = signal_name(rc)
        return (sig, crashed.format(sig=sig))
    why = _tail(proc.stderr) or "no message"
    return (f"exit {rc}", exited.format(rc=rc, why=why))


def _run_plugin_child(real: str, abi: str | None, timeout: float) -> tuple[str, str] | None:
    return _child_verdict(
        [_PLUGIN_CHILD, _package_root(), real, abi or ""], timeout,
        hung="did not finish loading within {timeout:g} s in a child process; its "
             "constructors run at dlopen",
        crashed="crashed while loading: {sig}; its constructors run at dlopen (seen in a "
                "child process, not loaded here)",
        exited="loading it exited the process with status {rc} ({why}); its constructors "
               "run at dlopen (seen in a child process, not loaded here)")


def probe_plugin(real: str, abi: str | None = None, *, timeout: float | None = None) -> None:
    """Load the plugin file ``real`` (a real path) in a child process the way
    :func:`~offload_shim.plugins.loader.load_plugin` does, once per ``(realpath,
    size, mtime)`` and environment (:func:`~offload_shim.safety.verdicts.environment_fingerprint`:
    a constructor may behave differently under another) per process, the verdict
    stored across processes under the file's bytes and the environment.  Raises PluginDlopenError when the child
    dies (``.dlerror`` names the signal or the exit status); typed failures
    (not a plugin, dlopen error) are left to the in-process load, which
    raises them without running any constructor.  Costs one interpreter
    start plus the package import and the dlopen (measured 0.04-0.06 s for
    the LLVM 16 and GCC 12 plugins).  ``timeout``: seconds (default
    :data:`PLUGIN_TIMEOUT_S`); past it the plugin is refused as hung
    (``.dlerror == "hung"``; a hang is not cached, a later call may wait
    longer)."""
    from .children import check_timeout
    timeout = check_timeout(PLUGIN_TIMEOUT_S if timeout is None else timeout)
    st = os.stat(real)
    env = _verdicts.environment_fingerprint()
    key = (real, st.st_size, st.st_mtime_ns, env)
    with _lock:
        if key in _plugin_verdicts:
            verdict = _plugin_verdicts[key]
        else:
            content = f"{_verdicts.file_sha256(real)}:{abi or ''}:{env}"
            stored = _verdicts.get("plugin-probe", _PLUGIN_CHECKERS, content)
            if stored is not None and "verdict" in stored:
                verdict = tuple(stored["verdict"]) if stored["verdict"] else None
            else:
                verdict = _run_plugin_child(real, abi, timeout)
                if verdict is None or verdict[0] != "hung":     # a hang depends on timeout=
                    _verdicts.put("plugin-probe", _PLUGIN_CHECKERS, content,
                                  {"verdict": list(verdict) if verdict else None})
            if verdict is None or verdict[0] != "hung":
                _plugin_verdicts[key] = verdict
    if verdict is not None:
        short, msg = verdict
        raise PluginDlopenError(f"{real}: {msg}", path=real, dlerror=short)


def plugin_known_good(path: str, abi: str | None = None) -> bool:
    """True when an earlier process loaded the plugin file at ``path`` (same bytes,
    same checking code) with :func:`~offload_shim.plugins.loader.load_plugin` and got
    a plugin (:func:`remember_good_plugin`) under the same environment
    (:func:`~offload_shim.safety.verdicts.environment_fingerprint`): ``offload-shim run``
    then skips its own test load of ``--plugin`` files.  False when unknown or
    unreadable."""
    try:
        content = (f"{_verdicts.file_sha256(os.path.realpath(path))}:{abi or ''}:"
                   f"{_verdicts.environment_fingerprint()}")
    except OSError:
        return False
    stored = _verdicts.get("plugin-load", _PLUGIN_CHECKERS, content)
    return bool(stored and stored.get("ok"))


def remember_good_plugin(path: str, abi: str | None = None) -> None:
    """Record that ``load_plugin(path)`` succeeded for these bytes."""
    try:
        content = (f"{_verdicts.file_sha256(os.path.realpath(path))}:{abi or ''}:"
                   f"{_verdicts.environment_fingerprint()}")
    except OSError:
        return
    _verdicts.put("plugin-load", _PLUGIN_CHECKERS, content, {"ok": True})


# -- compiled libraries ---------------------------------------------------------------

_LIBRARY_CHILD = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
os.environ.pop("OFFLOAD_SHIM_EMBED", None)       # no runtime: registration is recorded only
from offload_shim.interposer import load_interposer
load_interposer()                                # __tgt_register_lib & co. resolve to it
import ctypes
try:
    ctypes.CDLL(sys.argv[2], mode=os.RTLD_NOW | os.RTLD_LOCAL)
except OSError:
    pass             # a typed refusal: the parent's own load reports it
sys.stdout.flush()
sys.exit(0)          # a normal exit: the library's destructors run too
"""

_library_verdicts: dict[tuple[str, int, int], tuple[str, str] | None] = {}


def probe_library(path: str, *, timeout: float = PLUGIN_TIMEOUT_S) -> None:
    """``dlopen`` the compiled library ``path`` (``RTLD_NOW | RTLD_LOCAL``,
    as :meth:`Interposer.load_library` does) in a child process with the
    interposer loaded first, so that its constructors
    (``__tgt_register_lib``, ``GOMP_offload_register_ver``) run against the
    same symbols as here, and unload it at the child's exit.  Raises
    LibraryLoadError when the child dies of a signal, exits with another
    status, or runs past ``timeout`` seconds; a missing file or a dlopen
    error is left to the in-process load, which reports it.  Cached per
    ``(realpath, size, mtime)``."""
    if not os.fspath(path):
        return                                   # realpath("") is the working directory
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return                                   # the in-process load says what is wrong
    key = (real, st.st_size, st.st_mtime_ns)
    with _lock:
        if key in _library_verdicts:
            verdict = _library_verdicts[key]
        else:
            verdict = _run_library_child(real, timeout)
            if verdict is None or verdict[0] != "hung":
                _library_verdicts[key] = verdict
    if verdict is not None:
        short, msg = verdict
        raise LibraryLoadError(f"{path}: {msg}", path=real, reason=short)


def _run_library_child(real: str, timeout: float) -> tuple[str, str] | None:
    return _child_verdict(
        [_LIBRARY_CHILD, _package_root(), real], timeout,
        hung="loading it did not finish within {timeout:g} s in a child process; its "
             "constructors run at dlopen (not loaded here)",
        crashed="crashed while loading ({sig}) in a child process: its constructors run "
                "at dlopen (not loaded here)",
        exited="loading it exited a child process with status {rc} ({why}); its "
               "constructors run at dlopen (not loaded here)")


def mapped_in_process(real: str) -> bool:
    """True when ``real`` is already mapped into this process (its
    constructors ran already; a dlopen only takes a reference)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if line.rstrip("\n").endswith(" " + real):
                    return True
    except OSError:
        return False
    return False
