"""Watch a command and everything it starts: what it leaves in /tmp and /dev/shm,
and whether any of its processes outlive it.

Only what the processes under test create is counted, so that other test runs on
the same machine (they create /tmp/tmpfile_* and /dev/shm/__KMP_REGISTERED_LIB_*
too, and reuse pids: pid_max is often 32768) cannot break the check:

* the command runs with a unique tag in its environment (inherited by every
  process it starts, also through ``exec``) and a private ``TMPDIR``;
* a thread polls ``/proc`` for processes carrying the tag, and records their pids
  with their start times (``/proc/PID/stat`` field 22: a pid that another process
  reused after ours ended is not ours) and every file under the watched folders
  (/tmp, /dev/shm) they have open or mapped;
* afterwards: the private ``TMPDIR`` must be empty, none of the recorded files may
  still exist (unless it existed before the command started), no pid of ours may
  have a libomp segment ``<shm>/__KMP_REGISTERED_LIB_<pid>_*`` left that was made
  while that process ran (made after the command started, before the process was
  seen gone), and no process of ours may still run (an orphan).

``tmp`` and ``shm`` name the folders watched (a test of the watch itself passes
private ones).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid

TAG_VAR = "OSH_LEFTOVER_TAG"


def _environ_has(pid: str, needle: bytes) -> bool | None:
    """True/False: the environment holds ``needle`` or not; None when it cannot be
    read or reads empty -- a process in the middle of its exec (or its exit) shows an
    empty environ, which says nothing and must not be cached as "not ours"."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return None
    return (needle in env) if env else None


def _stat(pid: str) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) of process ``pid``; None when it is
    gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], fields[19]
    except (OSError, IndexError):
        return None


def _files_of(pid: str, watched: tuple[str, ...]) -> set[str]:
    out: set[str] = set()
    try:
        for fd in os.scandir(f"/proc/{pid}/fd"):
            try:
                t = os.readlink(fd.path)
            except OSError:
                continue
            if t.startswith(watched):
                out.add(t.removesuffix(" (deleted)"))
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                i = line.find(" /")
                if i < 0:
                    continue
                path = line[i + 1:].rstrip("\n")
                if path.startswith(watched) and not path.endswith(" (deleted)"):
                    out.add(path)
    except OSError:
        pass
    return out


def _cmdline(pid) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")[:160]
    except OSError:
        return "?"


def _created_since(path: str, t0: float) -> bool:
    """``path`` exists and its inode changed at or after ``t0`` (a file that was there
    before, like the program under test, does not count)."""
    try:
        return os.stat(path).st_ctime >= t0
    except OSError:
        return False


class Watch:
    """Run ``cmd`` tagged; see the module docstring.  ``interrupt``: None, or
    ``(signal, when)`` where ``when(watch)`` returns True once the command is
    "part way" (polled); the signal goes to the command's process group for
    SIGINT (as a terminal's Ctrl-C does) and to the command's process alone
    for SIGTERM (as ``kill PID`` does)."""

    def __init__(self, cmd, *, env=None, cwd=None, timeout=300.0, interrupt=None,
                 poll_s=0.03, tmp="/tmp", shm="/dev/shm"):
        self.cmd = cmd
        self.tag = uuid.uuid4().hex
        self.tmp, self.shm = tmp.rstrip("/"), shm.rstrip("/")
        self.watched = (self.tmp + "/", self.shm + "/")
        self.pids: set[int] = set()
        self.starts: dict[int, str] = {}        # pid of ours -> its start time
        self.gone: dict[int, float] = {}        # pid of ours -> time.time() it was seen gone
        self.cmdlines: dict[int, str] = {}
        self.files: set[str] = set()
        self.timeout = timeout
        self.interrupt = interrupt
        self.poll_s = poll_s
        self.cwd = cwd
        self._env = env
        self._seen_no: set[str] = set()
        self._stop = threading.Event()
        self.interrupted_at: float | None = None
        self.proc = None

    # -- polling -----------------------------------------------------------------
    def tagged_alive(self) -> set[int]:
        """Live (not zombie) processes carrying the tag.  A pid's environment is
        read once, when the pid first appears in /proc (a pid that vanished and
        came back is read again); a pid of ours counts while its start time is the
        one recorded (a pid reused by another process is not ours)."""
        needle = f"{TAG_VAR}={self.tag}\0".encode()
        names = {n for n in os.listdir("/proc") if n.isdigit()}
        self._seen_no &= names                   # vanished pids may be reused
        alive = set()
        # pids of ours are looked at whatever was cached: the command's own pid may have
        # been read (and cached as not ours) between its fork and its exec
        ours = {str(p) for p in self.starts} & names
        for name in (names - self._seen_no) | ours:
            st = _stat(name)
            if st is None:
                continue
            pid = int(name)
            # the command's own pid is recorded from Popen: right after fork, before
            # exec, its environment is still the parent's (no tag)
            mine = self.starts.get(pid) == st[1]
            if not mine:
                has = _environ_has(name, needle)
                if has:
                    self.starts[pid] = st[1]
                    mine = True
                elif has is False:
                    self._seen_no.add(name)      # an environment never changes
            if mine and st[0] != "Z":
                alive.add(pid)
        return alive

    def _poll(self):
        while not self._stop.is_set():
            self._poll_once()
            self._stop.wait(self.poll_s)

    def _poll_once(self) -> set[int]:
        alive = self.tagged_alive()
        for pid in alive:
            if pid not in self.cmdlines:
                self.cmdlines[pid] = _cmdline(pid)
            self.pids.add(pid)
            self.files |= _files_of(str(pid), self.watched)
        now = time.time()
        for pid in self.pids - alive:
            self.gone.setdefault(pid, now)
        for pid in alive:                       # e.g. the command's pid, seen before its exec
            self.gone.pop(pid, None)
        return alive

    # -- run -----------------------------------------------------------------------
    def run(self) -> subprocess.CompletedProcess:
        self.tmpdir = tempfile.mkdtemp(prefix="osh_leftover_test_")
        env = dict(os.environ if self._env is None else self._env)
        env[TAG_VAR] = self.tag
        env["TMPDIR"] = self.tmpdir
        self.before = set(glob.glob(self.tmp + "/*")) | set(glob.glob(self.shm + "/*"))
        self.t0 = time.time()
        self._poller = poller = threading.Thread(target=self._poll, daemon=True)
        poller.start()
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True, env=env,
                                     cwd=self.cwd, start_new_session=True)
        self.pids.add(self.proc.pid)
        st = _stat(str(self.proc.pid))          # not reaped yet: this is our child
        if st is not None:
            self.starts[self.proc.pid] = st[1]
        try:
            if self.interrupt:
                sig, when = self.interrupt
                deadline = time.monotonic() + self.timeout
                while self.proc.poll() is None and time.monotonic() < deadline:
                    if when(self):
                        self.interrupted_at = time.monotonic()
                        if sig == signal.SIGINT:
                            os.killpg(self.proc.pid, sig)
                        else:
                            os.kill(self.proc.pid, sig)
                        break
                    time.sleep(0.02)
            out, err = self.proc.communicate(timeout=self.timeout)
        except BaseException:
            self.kill_all()
            raise
        self.result = subprocess.CompletedProcess(self.cmd, self.proc.returncode, out, err)
        return self.result

    def kill_all(self):
        for pid in self.tagged_alive():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    # -- verdict ---------------------------------------------------------------------
    def problems(self, grace_s: float = 10.0) -> list[str]:
        """What was left: orphans (killed afterwards), files, segments; [] if nothing."""
        out = []
        deadline = time.monotonic() + grace_s
        alive = self.tagged_alive()
        while alive and time.monotonic() < deadline:
            time.sleep(0.1)
            alive = self.tagged_alive()
        if alive:
            cmds = []
            for pid in alive:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        line = f.read().replace(b"\0", b" ")[:120]
                    cmds.append(f"{pid}: {line!r}")
                except OSError:
                    pass
            out.append(f"processes still running {grace_s:g} s after the command ended: {cmds}")
            self.kill_all()
        self._stop.set()
        self._poller.join(30)
        self._poll_once()                       # pids seen gone since the last poll
        left = sorted(os.listdir(self.tmpdir))
        if left:
            out.append(f"left in its TMPDIR: {left}")
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        # the verdict cache is meant to stay (a user's lives in ~/.cache; the suite's,
        # OFFLOAD_SHIM_CACHE_DIR, under its TMPDIR, is made by whichever command runs first)
        cache = (os.environ if self._env is None else self._env).get("OFFLOAD_SHIM_CACHE_DIR")
        kept = tuple(d for d in (self.tmpdir, cache) if d)
        files = sorted(p for p in self.files if _created_since(p, self.t0)
                       and p not in self.before
                       and not any(p == d or p.startswith(d + "/") for d in kept))
        if files:
            out.append(f"files it had open or mapped, still there: {files}")
        # by pid, among those that were not there before and made while our process of
        # that pid ran (a pid is reused: a process of another run may have made a
        # segment under the same number, before the command or after ours ended)
        segs = sorted(s for pid in self.pids
                      for s in glob.glob(f"{self.shm}/__KMP_REGISTERED_LIB_{pid}_*")
                      + glob.glob(f"{self.shm}/__KMP_REGISTERED_LIB_{pid}")
                      if s not in self.before and _created_since(s, self.t0)
                      and not _created_since(s, self.gone.get(pid, time.time())))
        if segs:
            who = {pid: self.cmdlines.get(pid, "?") for pid in self.pids
                   if any(f"_LIB_{pid}_" in s for s in segs)}
            out.append(f"libomp segments of its processes: {segs} ({who})")
        return out
