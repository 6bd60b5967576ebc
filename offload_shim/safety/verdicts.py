"""Verdicts of the checks that guard against hostile input, kept across runs.

Some checks exist only because a file could be hostile: the structural ELF checks
of an offload image (:func:`offload_shim.elf.machine`), the test ``dlopen`` of an
image in a child process (:func:`offload_shim.safety.isolation.verify_image`) and
the probe of a plugin file in a child process
(:func:`offload_shim.safety.isolation.probe_plugin`).  Their outcome depends only
on the bytes checked and on the code that checks them, so it is stored here under

    sha256(kind, fingerprint of the checking code, sha256 of the bytes)

and a later process (the next ``offload-shim run`` of the same program) reads it
instead of running the check again.  A plugin's constructors also see the environment,
so its verdicts are stored under :func:`environment_fingerprint` too: under another
environment the plugin is probed again.  The fingerprint is the SHA-256 of the source
files of the modules doing the check, so any change to a check invalidates what it
decided before.

Storage: one small JSON file per verdict in ``$OFFLOAD_SHIM_CACHE_DIR`` (default
``$XDG_CACHE_HOME/offload_shim/verdicts``, else ``~/.cache/offload_shim/verdicts``),
written atomically (temporary file + ``os.replace``).  A verdict can only make a
later process skip a check, so the directory must not be writable by anyone else:
it is created mode 0700, and a directory that is not owned by this user or is
group/world-writable is not used at all (every check then runs, as with
``OFFLOAD_SHIM_NO_CACHE=1``).  Reading and writing never raise: a cache that cannot
be used only costs the checks.

Bound: at most :data:`MAX_ENTRIES` (1,000) verdicts -- about 4 MB on disk, one file
system block each -- none older than :data:`MAX_AGE_S` (30 days).  The first write of
a process, and every write that takes the directory past the bound, runs
:func:`prune`: it removes the expired verdicts, then the oldest written until 800 are
left, and write leftovers (``.*`` temporary files of a process that died) older than
an hour.  ``offload-shim cache
info`` shows the directory and its use, ``offload-shim cache clear`` empties it
(:func:`usage`, :func:`clear`).
"""

from __future__ import annotations

import os
import stat
import _thread
import sys

from ..jsontext import dumps as _dumps, loads as _loads   # not json: start-up time

# _thread, not threading (its Lock and get_ident are these): threading imports functools
# and collections, which the launcher of `offload-shim run` needs not (start-up time)

try:                        # the built-in SHA-256: loads no OpenSSL (start-up time)
    from _sha256 import sha256 as _new_sha256
except ImportError:         # pragma: no cover - other Pythons (3.12: _sha2)
    try:
        from _sha2 import sha256 as _new_sha256
    except ImportError:
        from hashlib import sha256 as _new_sha256

CACHE_DIR_VAR = "OFFLOAD_SHIM_CACHE_DIR"
NO_CACHE_VAR = "OFFLOAD_SHIM_NO_CACHE"

_lock = _thread.allocate_lock()
_fingerprints: dict[tuple[str, ...], str] = {}
_dir_checked: dict[str, bool] = {}
_seen: dict[tuple[str, str], dict] = {}        # (directory, key) -> verdict read
_default_dirs: dict[tuple, str] = {}           # (XDG_CACHE_HOME, HOME) -> default directory


def cache_dir() -> str | None:
    """The verdict directory, or None when caching is off
    (``OFFLOAD_SHIM_NO_CACHE`` set to anything but ``""``/``0``)."""
    if os.environ.get(NO_CACHE_VAR, "") not in ("", "0"):
        return None
    return configured_dir()


def configured_dir() -> str:
    """The verdict directory the settings name, whether or not caching is off
    (``offload-shim cache info`` / ``clear``)."""
    env = os.environ
    d = env.get(CACHE_DIR_VAR)
    if not d:
        k = (env.get("XDG_CACHE_HOME"), env.get("HOME"))     # what the default depends on
        d = _default_dirs.get(k)
        if d is None:
            base = k[0] or os.path.join(os.path.expanduser("~"), ".cache")
            d = _default_dirs[k] = os.path.join(base, "offload_shim", "verdicts")
    return d


def _usable(d: str, create: bool) -> bool:
    """``d`` exists (created 0700 when ``create``), is a directory owned by this user
    and writable by nobody else."""
    ok = _dir_checked.get(d)
    if ok:
        return True
    try:
        if create and not os.path.isdir(d):
            os.makedirs(d, mode=0o700, exist_ok=True)
        st = os.stat(d)
    except OSError:
        return False
    ok = (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
          and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))
    _dir_checked[d] = ok
    return ok


def fingerprint(modules: tuple[str, ...]) -> str:
    """SHA-256 over the source files of ``modules`` (dotted names of this package's
    modules; read without importing them): what makes a stored verdict stale when a
    check changes."""
    fp = _fingerprints.get(modules)
    if fp is not None:
        return fp
    h = _new_sha256()
    for name in modules:
        mod = sys.modules.get(name)
        path = getattr(mod, "__file__", None) if mod is not None else None
        if mod is None:             # the file, without importing the module
            path = _source_path(name)
        h.update(name.encode() + b"\0")
        if path:
            try:
                with open(path, "rb") as f:
                    h.update(f.read())
            except OSError:
                h.update(b"?")
    fp = _fingerprints[modules] = h.hexdigest()
    return fp


def _source_path(name: str) -> str | None:
    """The source file of module ``name`` of this package (None when not found)."""
    parts = name.split(".")
    if parts[0] != "offload_shim":
        return None
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base = os.path.join(root, *parts[1:])
    for cand in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(cand):
            return cand
    return None


def key(kind: str, modules: tuple[str, ...], content_sha256: str) -> str:
    """The storage key of the verdict of check ``kind`` (done by ``modules``) on
    bytes whose SHA-256 is ``content_sha256``."""
    h = _new_sha256()
    h.update(kind.encode() + b"\0" + fingerprint(modules).encode() + b"\0"
             + content_sha256.encode())
    return h.hexdigest()


def get(kind: str, modules: tuple[str, ...], content_sha256: str) -> dict | None:
    """The stored verdict (a dict) or None.  A verdict read once is remembered for
    the process (one entry per distinct content: a library loaded again and again
    reads its file once)."""
    d = cache_dir()
    if d is None or not _usable(d, create=False):
        return None
    k = key(kind, modules, content_sha256)
    value = _seen.get((d, k))
    if value is not None:
        return dict(value)
    path = os.path.join(d, f"{kind}-{k}.json")
    try:
        with open(path, encoding="utf-8") as f:
            value = _loads(f.read())
    except (OSError, ValueError):
        return None
    if not isinstance(value, dict):
        return None
    _seen[(d, k)] = value
    return dict(value)


def remembered() -> int:
    """How many verdicts :func:`get` remembers for the process (one per distinct
    content and check)."""
    return len(_seen)


def put(kind: str, modules: tuple[str, ...], content_sha256: str, value: dict) -> None:
    """Store ``value`` (JSON-ready dict) as the verdict; errors are ignored."""
    d = cache_dir()
    if d is None:
        return
    with _lock:
        if not _usable(d, create=True):
            return
        name = f"{kind}-{key(kind, modules, content_sha256)}.json"
        tmp = os.path.join(d, f".{name}.{os.getpid()}.{_thread.get_ident()}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(_dumps(value))
            os.replace(tmp, os.path.join(d, name))
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        _bound(d)


# -- the bound ---------------------------------------------------------------------------

#: most verdict files kept; past it :func:`prune` removes the oldest down to
#: :data:`PRUNE_TO` of it (so the next writes do not prune again at once)
MAX_ENTRIES = 1000
PRUNE_TO = 0.8
#: verdicts older than this (seconds since written) are removed by :func:`prune`
MAX_AGE_S = 30 * 86400
_LEFTOVER_AGE_S = 3600
_pruned: set[str] = set()                       # directories pruned by this process


_HEX = frozenset("0123456789abcdef")


def _is_verdict(name: str) -> bool:
    """``name`` is one :func:`put` writes: ``KIND-KEY.json``, KEY 64 hex digits (:func:`key`).
    Nothing else in the directory is ever counted, pruned or cleared: a user may point
    ``OFFLOAD_SHIM_CACHE_DIR`` at a folder that holds other files."""
    if not name.endswith(".json") or name.startswith("."):
        return False
    kind, sep, k = name[:-5].rpartition("-")
    return bool(sep and kind) and len(k) == 64 and _HEX.issuperset(k)


def _is_leftover(name: str) -> bool:
    """``name`` is a write leftover of :func:`put`: ``.KIND-KEY.json.PID.TID``."""
    if not name.startswith("."):
        return False
    parts = name[1:].rsplit(".", 2)
    return (len(parts) == 3 and _is_verdict(parts[0]) and parts[1].isdigit()
            and parts[2].isdigit())


def _bound(d: str) -> None:
    """After a write: :func:`prune` at the first write of the process to ``d`` (a write
    follows a check that ran -- milliseconds to a child process -- so one pass over at
    most :data:`MAX_ENTRIES` files costs little beside it), and again whenever ``d``
    holds more than :data:`MAX_ENTRIES` verdicts.  Never raises."""
    try:
        if d not in _pruned or sum(1 for n in os.listdir(d) if _is_verdict(n)) > MAX_ENTRIES:
            _pruned.add(d)
            prune(d)
    except OSError:
        pass


def prune(d: str | None = None, *, max_entries: int | None = None,
          max_age_s: float = MAX_AGE_S, now: float | None = None) -> int:
    """Remove from verdict directory ``d`` (default :func:`cache_dir`) the verdicts older
    than ``max_age_s`` seconds, then the oldest written until at most ``max_entries``
    are left (default: :data:`PRUNE_TO` of :data:`MAX_ENTRIES`, 800), and write leftovers
    of :func:`put` older than an hour; files of other names stay.  Returns how many verdicts were removed (0 when ``d`` is None or not a
    directory this user owns alone).  Files that vanish meanwhile (another process
    pruning) are skipped; raises nothing but ``OSError`` of the directory listing."""
    import time
    d = cache_dir() if d is None else d
    if d is None or not _usable(d, create=False):
        return 0
    now = time.time() if now is None else now
    if max_entries is None:
        max_entries = int(MAX_ENTRIES * PRUNE_TO)
    kept, removed = [], 0
    with os.scandir(d) as it:
        for e in it:
            try:
                if not e.is_file(follow_symlinks=False):
                    continue
                mtime = e.stat(follow_symlinks=False).st_mtime
                if _is_verdict(e.name):
                    if now - mtime > max_age_s:
                        os.unlink(e.path)
                        removed += 1
                    else:
                        kept.append((mtime, e.path))
                elif _is_leftover(e.name) and now - mtime > _LEFTOVER_AGE_S:
                    os.unlink(e.path)
            except FileNotFoundError:
                continue
    kept.sort()
    for _, path in kept[:max(0, len(kept) - max_entries)]:
        try:
            os.unlink(path)
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def usage(d: str | None = None) -> dict:
    """The verdict directory ``d`` (default :func:`configured_dir`) as a dict:
    ``directory``, ``enabled`` (caching on and the directory usable or creatable),
    ``entries`` (verdict files), ``bytes`` (their sizes), ``disk_bytes`` (blocks they
    use), ``oldest_s`` (age of the oldest, seconds, or None), ``max_entries`` and
    ``max_age_s`` (the bound)."""
    import time
    d = configured_dir() if d is None else d
    entries = size = disk = 0
    oldest = None
    try:
        with os.scandir(d) as it:
            for e in it:
                if _is_verdict(e.name) and e.is_file(follow_symlinks=False):
                    try:
                        st = e.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    entries += 1
                    size += st.st_size
                    disk += st.st_blocks * 512
                    oldest = st.st_mtime if oldest is None else min(oldest, st.st_mtime)
    except (FileNotFoundError, NotADirectoryError):
        pass
    _dir_checked.pop(d, None)                   # look again: its mode may have changed
    on = cache_dir() is not None and (not os.path.exists(d) or _usable(d, create=False))
    return {"directory": d, "enabled": on, "entries": entries, "bytes": size,
            "disk_bytes": disk, "oldest_s": None if oldest is None else time.time() - oldest,
            "max_entries": MAX_ENTRIES, "max_age_s": MAX_AGE_S}


def clear(d: str | None = None) -> int:
    """Remove every verdict (and write leftover) from directory ``d`` (default
    :func:`configured_dir`); the directory itself stays, and so does every file of
    another name.  Returns how many verdicts
    were removed.  Raises ``PermissionError`` for a directory that is not this user's
    alone (it is not used, and not emptied either), ``OSError`` when it cannot be
    listed."""
    d = configured_dir() if d is None else d
    if not os.path.isdir(d):
        return 0
    _dir_checked.pop(d, None)                   # look again: its mode may have changed
    if not _usable(d, create=False):
        raise PermissionError(f"{d}: not a directory owned by this user and writable only "
                              f"by it; not used as the verdict cache, not emptied")
    removed = 0
    with os.scandir(d) as it:
        for e in it:
            if e.is_file(follow_symlinks=False) and (_is_verdict(e.name)
                                                      or _is_leftover(e.name)):
                try:
                    os.unlink(e.path)
                except FileNotFoundError:
                    continue
                removed += _is_verdict(e.name)
    _seen.clear()
    return removed


_openssl_sha256 = None          # OpenSSL's SHA-256, imported at a process's second hash
_hashed_once = False


def sha256(data: bytes) -> str:
    """SHA-256 of ``data`` (hex).  The first call of a process uses the built-in
    ``_sha256`` (importing OpenSSL's ``_hashlib`` costs about 5 ms of every start-up);
    later ones -- a process that registers images again and again, e.g. a host that
    loads and unloads an offload library in a loop -- use OpenSSL's, about eight times
    faster on images of tens of KiB.  Both give the same digest."""
    global _openssl_sha256, _hashed_once
    fn = _openssl_sha256
    if fn is None:
        if not _hashed_once:
            _hashed_once = True
            return _new_sha256(data).hexdigest()
        try:
            from _hashlib import openssl_sha256 as fn
        except ImportError:         # pragma: no cover - a Python built without OpenSSL
            fn = _new_sha256
        _openssl_sha256 = fn
    return fn(data).hexdigest()


#: variables left out of :func:`environment_fingerprint`: those a shell or a test runner
#: changes from one command to the next, and those ``offload-shim run`` adds for its
#: program (``cli/run.py`` ``run_environment``; its ``LD_PRELOAD`` entry is dropped too)
VOLATILE_VARIABLES = frozenset({
    "_", "OLDPWD", "SHLVL", "COLUMNS", "LINES", "PS1", "PS2", "PS3", "PS4",
    "PROMPT_COMMAND", "HISTCMD", "TERM_SESSION_ID", "WINDOWID", "PYTEST_CURRENT_TEST",
    "OFFLOAD_SHIM_EMBED", "OFFLOAD_SHIM_EMBED_LAZY", "OFFLOAD_SHIM_LIBPYTHON",
    "OFFLOAD_SHIM_PYTHON",
    "OFFLOAD_SHIM_PYTHONPATH", "OFFLOAD_SHIM_RUN_OPTIONS", "OSH_CHILD_SCOPES",
    # offload_shim gives the processes it starts (run's program, child processes) a
    # private TMPDIR per run: with it in the fingerprint every run would probe again
    "TMPDIR"})
_INTERPOSER_FILE = "libosh_interposer.so"
_env_fp: tuple[tuple, str] | None = None


def environment_fingerprint(env=None) -> str:
    """SHA-256 (hex) of what a library's constructors can see of the process's
    environment: every variable (name and value) but :data:`VOLATILE_VARIABLES`, with
    the interposer's entry taken out of ``LD_PRELOAD``.  A plugin whose constructor
    behaves differently under another environment (an ``exit()``, a crash or a hang
    only when a variable is set) must be probed again there, so the plugin verdicts
    (:func:`offload_shim.safety.isolation.probe_plugin`, ``plugin_known_good``) are
    stored under it as well as under the file's bytes.  ``env``: a mapping (default
    ``os.environ``); the last answer is kept while the environment is unchanged."""
    global _env_fp
    env = os.environ if env is None else env
    items = tuple(sorted((k, v) for k, v in env.items() if k not in VOLATILE_VARIABLES))
    last = _env_fp
    if last is not None and last[0] == items:
        return last[1]
    h = _new_sha256()
    for k, v in items:
        if k == "LD_PRELOAD":
            v = ":".join(p for p in v.replace(" ", ":").split(":")
                         if p and os.path.basename(p) != _INTERPOSER_FILE)
            if not v:
                continue        # only the interposer: as without LD_PRELOAD
        h.update(k.encode("utf-8", "surrogateescape") + b"=" +
                 v.encode("utf-8", "surrogateescape") + b"\0")
    fp = h.hexdigest()
    _env_fp = (items, fp)
    return fp


#: a file's digest is stored for :func:`file_sha256` only when its last change (the
#: later of ``st_mtime`` and ``st_ctime``) is at least this many seconds older than the
#: read: a change within the file system's timestamp granularity of the read would
#: otherwise leave the same stat key on other bytes (git's "racy clean" entries)
RACY_S = 2.0
_digests: dict[tuple, str] = {}


def _stat_key(st) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def file_sha256(path: str) -> str:
    """SHA-256 of a file's bytes (hex); OSError when it cannot be read.

    The digest is kept, in the process and as a verdict of kind ``file-sha256``
    (:func:`get`/:func:`put`), under the file's path and its stat identity -- device,
    inode, size, ``st_mtime_ns`` and ``st_ctime_ns``: any write changes the ctime
    (which no user can set back), a replaced file its inode -- so a plugin file is
    hashed once, not in every ``offload-shim run`` (the launcher's check of a
    ``--plugin`` and the program's probe hashed the 180 kB LLVM 16 nextgen plugin every
    time: some 16 million instructions).  A digest is stored only when the file did not
    change during the read and its last change is :data:`RACY_S` older than the
    read."""
    import time
    st = os.stat(path)
    sk = (path, *_stat_key(st))
    got = _digests.get(sk)
    if got is not None:
        return got
    skey = _new_sha256(repr(sk).encode("utf-8", "surrogateescape")).hexdigest()
    stored = get("file-sha256", (), skey)
    got = stored.get("sha256") if stored else None
    if isinstance(got, str) and len(got) == 64 and _HEX.issuperset(got):
        _digests[sk] = got
        return got
    now = time.time_ns()
    h = _new_sha256()
    with open(path, "rb") as f:
        same = _stat_key(os.fstat(f.fileno())) == sk[1:]
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
        same = same and _stat_key(os.fstat(f.fileno())) == sk[1:]
    digest = h.hexdigest()
    if same and max(st.st_mtime_ns, st.st_ctime_ns) < now - int(RACY_S * 1e9):
        _digests[sk] = digest
        put("file-sha256", (), skey, {"sha256": digest})
    return digest


__all__ = ["CACHE_DIR_VAR", "MAX_AGE_S", "MAX_ENTRIES", "NO_CACHE_VAR", "VOLATILE_VARIABLES",
           "cache_dir", "clear", "configured_dir", "environment_fingerprint", "file_sha256",
           "fingerprint", "get", "key", "prune", "put", "remembered", "sha256", "usage"]
