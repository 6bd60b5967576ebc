"""Child processes that leave nothing behind, whatever ends them.

* :func:`run_child` -- ``subprocess.run`` with a private ``TMPDIR``, a session of
  its own and its process group killed whatever ends the wait (the child's exit,
  a timeout, Ctrl-C, a SIGTERM turned into an exception); every check of
  :mod:`.isolation` and every command's child runs through it.
* :func:`run_program` -- how ``offload-shim run`` starts the user's program: in
  the foreground, as ``exec`` would, with a private ``TMPDIR`` and its leftovers
  removed after it ended.
* :class:`ChildScope` -- the private folder, the children's pids and what they
  leave (libomp segments, image copies: :mod:`.leftovers`), removed on exit;
  :func:`signals_deferred` keeps Ctrl-C out of a cleanup half done.
* :func:`stop_child`, :func:`signal_name`, :func:`check_timeout`: the parts.

subprocess and shutil are imported where they are used, and the private folder is
made without tempfile (:func:`private_dir`): start-up of ``offload-shim run``, whose
launcher imports this module.  For the same reason it imports neither ``signal`` (whose
enums import ``enum``: its C half ``_signal`` has every function and number used here),
``threading`` nor ``contextlib`` (``functools``, ``collections``).
"""

from __future__ import annotations

import _signal as signal        # signal.py without its enums: see the docstring
import os
import sys
import time

from .leftovers import (copies_since, copy_dir_names, dead_kmp_segments, kmp_segment_files,
                        process_state, remove_kmp_segment, sweep)

__all__ = ["CRASH_SIGNALS", "ChildScope", "check_timeout", "private_dir", "run_child",
           "run_program", "signal_name", "signals_deferred", "stop_child"]

_SCOPES_VAR = "OSH_CHILD_SCOPES"


#: where :func:`private_dir` looks, after ``$TMPDIR``, ``$TEMP``, ``$TMP`` (the order of
#: ``tempfile.gettempdir``, CPython ``Lib/tempfile.py`` ``_candidate_tempdir_list``)
_TMP_CANDIDATES = ("/tmp", "/var/tmp", "/usr/tmp")


def private_dir(prefix: str) -> str:
    """``tempfile.mkdtemp(prefix=prefix)`` without importing ``tempfile``, which pulls
    in ``shutil``, ``random`` and the three compression modules (some 15 modules, a
    fifth of the launcher's imports on every ``offload-shim run``).  A new folder,
    mode 0700, named ``prefix`` + 10 random hex digits, in the first of
    ``$TMPDIR``, ``$TEMP``, ``$TMP``, ``/tmp``, ``/var/tmp``, ``/usr/tmp`` and the
    current folder where one can be made (``tempfile.gettempdir``'s order; a name
    taken is drawn again, as ``mkdtemp`` does).  Returns its absolute path.  When
    ``tempfile.tempdir`` is set, or no candidate takes a folder, ``tempfile.mkdtemp``
    decides (and raises its ``FileNotFoundError`` when nothing is writable)."""
    tf = sys.modules.get("tempfile")
    if tf is None or tf.tempdir is None:
        dirs = [d for d in (os.environ.get(v) for v in ("TMPDIR", "TEMP", "TMP")) if d]
        for d in dirs + list(_TMP_CANDIDATES) + [os.getcwd()]:
            for _ in range(100):
                name = os.urandom(5).hex()
                path = os.path.abspath(os.path.join(d, prefix + name))
                try:
                    os.mkdir(path, 0o700)
                    return path
                except FileExistsError:
                    continue
                except OSError:
                    break                   # not a writable folder: the next candidate
    import tempfile
    return tempfile.mkdtemp(prefix=prefix)


#: signals a process's own code raises when it fails (a fault, abort(), a trap): a crash
#: of the plugin it was running.  Any other signal that ends a child came from outside (a
#: user's kill, Ctrl-C sent to the child's group, a hang-up, the kernel's out-of-memory
#: killer) or from a resource limit: ``check`` and ``demo`` never count it against the
#: plugin.
CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE,
                           signal.SIGABRT, signal.SIGTRAP, signal.SIGSYS})


def signal_name(rc: int) -> str:
    """``SIGSEGV`` for a child return code of -11."""
    import signal as _signal_enums
    try:
        return _signal_enums.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def stop_child(proc: subprocess.Popen) -> None:
    """Kill ``proc`` and its process group (it was started in a session of
    its own) and reap it; SIGINT and SIGTERM wait until it is done."""
    with signals_deferred():
        _stop_child(proc)


def _stop_child(proc: subprocess.Popen) -> None:
    import subprocess
    try:                                  # the group: also grandchildren still running
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        if proc.poll() is None:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
        pass


def check_timeout(value, name: str = "timeout") -> float:
    """``value`` as a finite number of seconds > 0, as the command line's
    ``--timeout`` takes.  Raises TypeError naming ``name`` for a value that is
    not a real number (a str, a bool), ValueError for zero, a negative number,
    NaN or infinity (the child-process wait cannot take it)."""
    import math
    import numbers
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
    return float(value)


def _off_main_thread() -> bool:
    """Whether this code runs on a thread other than the main one.  Without
    ``threading`` imported no thread of ``threading`` exists (the launcher of
    ``offload-shim run`` never imports it)."""
    threading = sys.modules.get("threading")
    return threading is not None and threading.current_thread() is not threading.main_thread()


class _signals_deferred:
    """SIGINT and SIGTERM, where Python handlers of this (main) thread take them, are
    noted instead of handled while the block runs, then handled -- by the handlers that
    were installed -- once it has ended (normally or not).  Off the main thread, and for
    a signal ignored or left to its default action, nothing changes."""

    def __enter__(self):
        self.noted: list[int] = []
        self.old: dict = {}
        if _off_main_thread():
            return self
        for sig in (signal.SIGINT, signal.SIGTERM):
            h = signal.getsignal(sig)
            if callable(h):
                self.old[sig] = h
                signal.signal(sig, lambda signum, frame: self.noted.append(signum))
        return self

    def __exit__(self, *exc) -> None:
        for sig, h in self.old.items():
            signal.signal(sig, h)
        for signum in self.noted:
            self.old[signum](signum, None)


def run_child(cmd: list[str], *, timeout: float | None = None, env: dict | None = None,
              merge_stderr: bool = False, scope: ChildScope | None = None,
              cwd: str | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=...)``
    that leaves nothing behind: the child runs in a session of its own with
    stdin from /dev/null (or the file ``stdin``, opened here: OSError) and a private ``TMPDIR`` (``scope``, default a new
    :class:`ChildScope`); whatever ends the wait -- the child's exit, the
    ``timeout`` (TimeoutExpired is raised, as ``subprocess.run`` does),
    KeyboardInterrupt, a SIGTERM turned into an exception -- its process group
    is killed and reaped, then the scope removes the child's leftovers
    (libomp segment, image copies, the private folder).  ``merge_stderr``:
    stderr into stdout."""
    import subprocess
    own = scope is None
    sc = ChildScope() if own else scope
    proc = None
    source = subprocess.DEVNULL if stdin is None else open(stdin, "rb")
    try:
        if own:
            sc.__enter__()
        # (no signal mask around Popen -- the child would inherit it; the Python-level
        # handlers wait instead, so that an interrupt cannot land between the fork and
        # the assignment of ``proc``, which would leave the child running unknown)
        with _signals_deferred():
            proc = subprocess.Popen(cmd, stdin=source, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT if merge_stderr
                                    else subprocess.PIPE,
                                    text=True, errors="replace", env=sc.env(env), cwd=cwd,
                                    start_new_session=True)
            sc.track(proc.pid)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_child(proc)
            # a grandchild in a session of its own may hold the pipes open: it goes too,
            # and the rest of the output is waited for a bounded time only
            sc.stop_strays()
            out, err = _drain(proc)
            raise subprocess.TimeoutExpired(cmd, timeout, output=out, stderr=err) from None
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    finally:
        if proc is not None:
            sc.track(proc.pid)                # (again: an interrupt may have come first)
            stop_child(proc)                  # the child and its group (grandchildren)
            if proc.returncode != 0:          # it may have left children of its own
                sc.stop_strays()
        if own:
            sc.cleanup()
        if stdin is not None:
            source.close()


def _drain(proc, wait_s: float = 5.0) -> tuple[str, str]:
    """What is left of ``proc``'s output after it was killed, waiting at most ``wait_s``
    for the pipes to close (a process outside the child's group and scope -- one that
    changed its environment -- could hold them for ever: they are closed then, and
    what had not been read is lost)."""
    import subprocess
    try:
        return proc.communicate(timeout=wait_s)
    except subprocess.TimeoutExpired:
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        return "", ""


# -- a program in the foreground --------------------------------------------------------

def run_program(argv: list[str], env: dict, *, executable: str | None = None) -> int:
    """Run ``argv`` in the foreground as ``exec`` would -- the same stdin,
    stdout, stderr and process group (a terminal's Ctrl-C reaches it
    directly) -- with a private ``TMPDIR``, and wait; then remove what it left
    (its libomp segment, image copies no process has open, the private
    folder) and end like it: its exit status is returned, and a
    death by a signal is repeated on this process (the caller's caller sees
    the same status as after ``exec``).  ``executable`` (default ``argv[0]``): a
    name without ``/`` is looked up in ``PATH`` as ``execvp`` does.  While waiting,
    SIGINT and SIGQUIT are ignored here (the program has them, as with a shell),
    SIGTERM and SIGHUP sent to this process are passed on to the program.  Raises
    OSError (with the errno of ``execve``: ENOENT, EACCES, ENOEXEC...) when the
    program cannot be started.

    The program is started with ``posix_spawn`` (the C library's ``vfork`` +
    ``exec``), its signal dispositions reset to the defaults (SIG_IGN would be
    inherited through exec; Python ignores SIGPIPE and SIGXFSZ), no file
    descriptor closed: nothing of ``subprocess`` is needed on this path, which
    every ``offload-shim run`` takes."""
    executable = argv[0] if executable is None else executable
    scope = ChildScope(prefix="osh_run_")
    scope.__enter__()
    pid = None
    status = None                          # the wait status once reaped
    passed = (signal.SIGTERM, signal.SIGHUP)
    ignored = (signal.SIGINT, signal.SIGQUIT)
    old = {s: signal.getsignal(s) for s in passed + ignored}
    try:
        for s in ignored:
            signal.signal(s, signal.SIG_IGN)
        spawn = os.posix_spawn if "/" in executable else os.posix_spawnp
        pid = spawn(executable, list(argv), scope.env(env), setsigdef=_DEFAULT_SIGNALS)
        scope.track(pid)

        def forward(signum, frame):
            if status is None:             # never signal a pid already reaped (reuse)
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass
        for s in passed:
            signal.signal(s, forward)
        status = os.waitpid(pid, 0)[1]     # retried after a forwarded signal (PEP 475)
        rc = os.waitstatus_to_exitcode(status)
    finally:
        if pid is not None and status is None:     # interrupted by an exception
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            status = os.waitpid(pid, 0)[1]
        for s, h in old.items():
            signal.signal(s, h)
        if pid is None or os.waitstatus_to_exitcode(status) < 0:
            scope.stop_strays()            # what a killed program had started
        scope.cleanup()
    if rc < 0:
        sig = -rc
        sys.stdout.flush()
        sys.stderr.flush()
        if sig not in _UNCATCHABLE:        # (their disposition cannot be set: EINVAL)
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)          # die the way the program did
    return rc


#: signals whose disposition is always the default: ``signal.signal`` refuses them
#: (EINVAL, POSIX sigaction), and ``os.kill`` ends this process by them as it is
_UNCATCHABLE = (signal.SIGKILL, signal.SIGSTOP)

#: reset to SIG_DFL in a program ``run_program`` starts: the launcher's own
#: handlers and ignores (SIGINT/SIGQUIT ignored while waiting; Python's SIGPIPE and
#: SIGXFSZ ignores, which ``subprocess``'s ``restore_signals`` resets)
_DEFAULT_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP,
                    signal.SIGPIPE, signal.SIGXFSZ)



class signals_deferred:
    """``with signals_deferred():`` holds SIGINT and SIGTERM back while the block runs
    (main thread; a no-op elsewhere): a cleanup half done because Ctrl-C landed in it
    would leave what it was removing.  A signal that arrives meanwhile is delivered
    when the block ends."""

    def __enter__(self):
        self.old = None
        if not _off_main_thread():
            self.old = signal.pthread_sigmask(signal.SIG_BLOCK,
                                              {signal.SIGINT, signal.SIGTERM})
        return self

    def __exit__(self, *exc) -> None:
        if self.old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.old)


def _tagged_processes(needle: bytes) -> list[int]:
    """Live processes of this user whose ``OSH_CHILD_SCOPES`` holds ``needle``
    (``b":<tag>"``; the variable's value is read with a leading ':')."""
    uid = os.getuid()
    me = os.getpid()
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        i = env.find(_SCOPES_VAR.encode() + b"=")
        if i < 0:
            continue
        value = b":" + env[i + len(_SCOPES_VAR) + 1:].split(b"\0", 1)[0] + b":"
        if needle + b":" in value and process_state(int(entry.name)) != "Z":
            out.append(int(entry.name))
    return out


class ChildScope:
    """The leftovers of child processes, removed whatever ended them.

    ``with ChildScope() as scope:`` start children with ``env=scope.env()``
    (a private ``TMPDIR``) and tell the scope their pids
    (:meth:`track`).  On exit: the private folder is removed with all in it,
    each tracked child's libomp segment is removed, and so are the segments
    and ``/tmp/tmpfile_*`` copies that appeared meanwhile and whose process
    is gone (segments) or that no process of this user has open or mapped
    (copies): a killed child or grandchild cannot remove its own.
    ``prefix``: of the private folder's name.

    Every process started with :meth:`env` -- and every process those start
    -- carries the scope's tag in ``OSH_CHILD_SCOPES``; :meth:`stop_strays`
    kills those still running after a child ended abnormally (grandchildren
    in sessions of their own, which a process-group kill does not reach)."""

    def __init__(self, prefix: str = "osh_child_"):
        self.prefix = prefix
        self.tmpdir: str | None = None
        self.tag = f"{os.getpid()}.{id(self):x}.{time.monotonic_ns():x}"
        self.pids: list[int] = []
        self._before: set[str] = set()
        self._kmp_before: set[str] = set()

    def __enter__(self) -> "ChildScope":
        with signals_deferred():
            self._before = copy_dir_names()
            self._kmp_before = kmp_segment_files()
            self.tmpdir = private_dir(self.prefix)
        return self

    def env(self, base: dict | None = None) -> dict:
        """``base`` (default ``os.environ``) with ``TMPDIR`` set to the private
        folder and the scope's tag added to ``OSH_CHILD_SCOPES``."""
        env = dict(os.environ if base is None else base)
        env["TMPDIR"] = self.tmpdir
        tags = [t for t in env.get(_SCOPES_VAR, "").split(":") if t]
        env[_SCOPES_VAR] = ":".join(tags + [self.tag])
        return env

    def stop_strays(self, grace_s: float = 2.0) -> list[int]:
        """SIGKILL every live process of this user that carries the scope's tag
        (started by a child, directly or not) and wait up to ``grace_s`` for
        them to go; returns their pids (remembered for their libomp segments)."""
        needle = f":{self.tag}".encode()
        strays = []
        for pid in _tagged_processes(needle):
            try:
                os.kill(pid, signal.SIGKILL)
                strays.append(pid)
            except OSError:
                pass
        deadline = time.monotonic() + grace_s
        while strays and time.monotonic() < deadline:
            if not any(os.path.exists(f"/proc/{p}") and process_state(p) != "Z" for p in strays):
                break
            time.sleep(0.02)
        self.pids.extend(strays)
        return strays

    def track(self, pid: int) -> None:
        """Remember a child's pid (for its libomp segment)."""
        self.pids.append(pid)

    def cleanup(self) -> None:
        """Remove the leftovers now (the children must have ended); SIGINT and
        SIGTERM wait until it is done."""
        with signals_deferred():
            self._cleanup()

    def _cleanup(self) -> None:
        for pid in self.pids:
            remove_kmp_segment(pid)
        self.pids.clear()
        # grandchildren (killed with the child's process group) have pids we never saw:
        # the segments that appeared meanwhile and whose process is gone
        for seg in dead_kmp_segments(ignore=self._kmp_before):
            try:
                os.unlink(seg)
            except OSError:
                pass
        sweep(copies_since(self._before))
        if self.tmpdir:
            try:
                os.rmdir(self.tmpdir)       # the usual case: the children left it empty
            except OSError:
                import shutil
                shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    def __exit__(self, *exc) -> None:
        self.cleanup()
