"""What plugins and the libraries they load leave on the machine, and its removal.

Two kinds of leftovers come from code we do not control:

* **Image copies in /tmp.**  The LLVM x86_64 plugins (14 classic, 16 classic
  and nextgen) write every image they load to ``/tmp/tmpfile_XXXXXX``
  (``mkstemp``, the directory hard-coded, ``TMPDIR`` ignored) and
  ``dlopen`` that file.  The nextgen plugins never remove it; the classic
  ones only from a destructor at a normal exit (LLVM
  ``plugins/generic-elf-64bit/src/rtl.cpp``,
  ``plugins-nextgen/host/src/rtl.cpp``).  The copy is not needed once it is
  mapped, so the plugin layer unlinks the copies its process has mapped right
  after each load (:func:`unlink_mapped_copies`); only files this process
  maps are touched, so a copy another process is writing or loading right
  now is safe.  The bundled plugin writes ``$TMPDIR/tmposh_image_*`` and
  unlinks it itself after ``dlopen``.
* **libomp's registration segment.**  libomp (the LLVM OpenMP CPU runtime,
  loaded with compiled OpenMP code) creates
  ``/dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid>`` at start-up and removes it
  from its exit code (``kmp_runtime.cpp``, ``__kmp_register_library_startup``
  / ``__kmp_unregister_library``); a process that dies by a signal or
  ``os._exit`` leaves it.  The segment names its pid, so the parent of a
  child removes the child's own (:func:`remove_kmp_segment`).

A parent that runs work in child processes wraps them in a
:class:`~offload_shim.safety.children.ChildScope`: each child gets a private ``TMPDIR`` (removed with
everything in it afterwards) and, whatever ended the child, the scope removes
the child's libomp segment and the ``/tmp/tmpfile_*`` copies that appeared
while it ran and that no process of this user still has open or mapped.
"""

from __future__ import annotations

import _thread
import os
import struct
import time

# _thread, not threading (its Lock and get_ident are these): threading imports functools
# and collections, which the launcher of `offload-shim run` needs not (start-up time)
# no re: the names are read with str methods (the launcher of `offload-shim run` imports
# this module; re's compiler is Python)

# shutil and tempfile are imported where they are used (start-up: the plugin layer
# imports this module)

__all__ = ["LLVM_COPY_GLOB", "WATCHED", "before_load", "copies_since", "copy_dir_names",
           "llvm_copies", "kmp_segment_files",
           "mapped_copies", "unlink_mapped_copies", "unlink_new_copies", "removed_copies", "held",
           "kmp_segments", "remove_kmp_segment", "sweep", "dead_kmp_segments", "process_state"]

#: where the LLVM x86_64 plugins put their image copies (hard-coded template)
LLVM_COPY_GLOB = "/tmp/tmpfile_??????"
_KMP_GLOB = "/dev/shm/__KMP_REGISTERED_LIB_*"
#: the folders :func:`llvm_copies`, :func:`unlink_new_copies` (listing and inotify
#: watch), the libomp segment functions look in; tests point them at a private folder, so that what other
#: processes on the machine do in /tmp and /dev/shm cannot change their outcome
COPY_DIR = "/tmp"
SHM_DIR = "/dev/shm"


def _listing(directory: str, match) -> list:
    """The ``os.DirEntry`` of ``directory`` whose name ``match`` accepts ([] when it
    cannot be read).  One ``scandir`` and a string test per entry -- ``glob`` matches
    each name through ``fnmatch``, several times slower on a ``/tmp`` or ``/dev/shm``
    holding hundreds of entries, and this runs twice per ``offload-shim run``."""
    try:
        with os.scandir(directory) as it:
            return [e for e in it if match(e.name)]
    except OSError:
        return []


def _is_copy(name: str) -> bool:
    """``tmpfile_XXXXXX``: the name :data:`LLVM_COPY_GLOB` matches."""
    return name.startswith("tmpfile_") and len(name) == 14


def llvm_copies() -> set[str]:
    """The ``/tmp/tmpfile_XXXXXX`` files there now (:data:`LLVM_COPY_GLOB`): one
    ``scandir``, no ``stat``.  The plugin layer takes it before a load and gives it to
    :func:`unlink_new_copies` after."""
    return {e.path for e in _listing(COPY_DIR, _is_copy)}


def copy_dir_names() -> set[str]:
    """Every name in ``/tmp`` now (:data:`COPY_DIR`; empty when it cannot be read): what
    :func:`copies_since` needs.  A bare ``os.listdir`` -- no ``DirEntry`` objects, no
    test per name -- because a busy machine's ``/tmp`` holds thousands of other runs'
    copies (7,300 here: about 7 ms of CPU against 12 for :func:`llvm_copies`) and a
    :class:`~offload_shim.safety.children.ChildScope` lists it twice per
    ``offload-shim run``."""
    try:
        return set(os.listdir(COPY_DIR))
    except OSError:
        return set()


def copies_since(before: set[str]) -> set[str]:
    """The ``/tmp/tmpfile_XXXXXX`` paths there now whose names were not in ``before``
    (a :func:`copy_dir_names`): the copies created since (or removed and made again)."""
    return {os.path.join(COPY_DIR, n) for n in copy_dir_names() - before if _is_copy(n)}


def kmp_segment_files() -> set[str]:
    """The libomp registration segments in ``/dev/shm`` now (any process's)."""
    return {e.path for e in _listing(SHM_DIR,
                                     lambda n: n.startswith("__KMP_REGISTERED_LIB_"))}
_KMP_PREFIX = "__KMP_REGISTERED_LIB_"


def _kmp_segment_pid(name: str) -> int | None:
    """The pid a libomp segment's name gives (``__KMP_REGISTERED_LIB_<pid>`` or
    ``..._<pid>_<uid>``), None for any other name: what the pattern
    ``__KMP_REGISTERED_LIB_(\\d+)(?:_\\d+)?`` matched in full (tests/test_run_startup.py
    compares the two), read without ``re``."""
    if not name.startswith(_KMP_PREFIX):
        return None
    pid, sep, uid = name[len(_KMP_PREFIX):].partition("_")
    if not pid.isdecimal() or (sep and not uid.isdecimal()):
        return None
    return int(pid)

_lock = _thread.allocate_lock()
_removed: list[str] = []
#: how many of the removed copies' paths :func:`removed_copies` remembers (a long run
#: loads an image per cycle: the list must not grow with the run)
_REMEMBERED = 64


def mapped_copies(pid: int | str = "self") -> set[str]:
    """The ``/tmp/tmpfile_*`` files process ``pid`` has mapped and that still
    exist (``/proc/PID/maps``; an unlinked file shows as ``(deleted)``)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            text = f.read()
    except OSError:
        return set()
    return _copies_named_in(text)


def _copies_named_in(maps: str) -> set[str]:
    """The ``/tmp/tmpfile_XXXXXX`` paths (six letters or digits) that end a line of
    ``maps`` (a ``/proc/PID/maps`` text: an unlinked file's line ends in ``(deleted)``
    and is not one), found with ``str.find`` -- the same answer as the pattern
    ``\\s(/tmp/tmpfile_[A-Za-z0-9]{6})$`` (multi-line; tests/test_run_startup.py compares
    the two), without compiling it: ``Runtime.close`` of every ``offload-shim run``
    asks once, and ``re``'s compiler is Python."""
    out = set()
    marker = "/tmp/tmpfile_"
    i = maps.find(marker)
    while i >= 0:
        end = i + len(marker) + 6
        name = maps[i + len(marker):end]
        if (len(name) == 6 and name.isascii() and name.isalnum() and i > 0
                and maps[i - 1].isspace() and (end == len(maps) or maps[end] == "\n")):
            out.add(maps[i:end])
        i = maps.find(marker, i + 1)
    return out


def unlink_mapped_copies() -> list[str]:
    """Unlink the image copies this process has mapped (the mappings stay
    valid); returns the paths removed.  Called by the plugin layer after
    every image load of an LLVM plugin, and by ``Runtime.close`` and the exit
    hook."""
    out = []
    for path in sorted(mapped_copies()):
        try:
            os.unlink(path)
        except OSError:
            continue
        out.append(path)
    if out:
        with _lock:
            _removed.extend(out)
            del _removed[:-_REMEMBERED]
    return out


_foreign: set[tuple[str, int]] = set()        # (path, inode) seen in /tmp, not mapped here
_SETTLE_S = 5.0
#: when this module was imported (``time.time()``, s); the plugin layer imports it
#: before it loads any image, so a copy last written well before is another process's
_IMPORTED_S = time.time()
#: slack for the file system's coarse clock (an ``st_mtime`` can trail ``time.time()``
#: by a scheduler tick)
_CLOCK_SLACK_S = 1.0


class _CopyWatch:
    """The ``/tmp`` entries created while image loads run, from inotify(7)
    ``IN_CREATE`` events: what a load made, without listing ``/tmp`` (hundreds of
    entries on a busy machine, two listings per load: about a third of what a
    dlopen / region / dlclose cycle of a compiled library cost on the nextgen
    plugin).  One inotify instance and one watch of ``/tmp`` per process, made at
    the first load; between loads the watch asks for ``IN_DELETE_SELF`` only (never
    sent for ``/tmp``), so no events pile up (changing the mask is cheaper than
    removing the watch: ``inotify_rm_watch`` waits for an SRCU grace period, up to
    a millisecond on a busy machine).  Unavailable (no inotify, the user's
    ``max_user_instances`` or ``max_user_watches`` reached) or overflowed (more than
    ``/proc/sys/fs/inotify/max_queued_events`` events during one load): the caller
    lists ``/tmp`` as before.  A child made by ``fork`` drops the parent's instance
    (reading it would take the parent's events)."""

    def __init__(self) -> None:
        self.fd = -1
        self.active = 0
        self.failed = False

    def _mask(self, mask: int) -> bool:
        from ..abi import libc
        wd, _err = libc.inotify_add_watch(self.fd, COPY_DIR, mask | libc.IN_ONLYDIR)
        return wd >= 0

    def start(self) -> bool:
        """A load begins: ``/tmp``'s creations are queued from now on (caller holds
        ``_lock``).  False when events cannot be had (the caller lists ``/tmp``
        instead)."""
        from ..abi import libc
        if self.failed:
            return False
        if self.fd < 0:
            self.fd, _err = libc.inotify_init()
            if self.fd < 0:
                self.failed = True
                return False
        if self.active == 0 and not self._mask(libc.IN_CREATE):
            return False
        self.active += 1
        return True

    def finish(self) -> set[str] | None:
        """A load ended (caller holds ``_lock``): the paths of the
        ``/tmp/tmpfile_XXXXXX`` files created since the load began or since another
        load read the events; None when events were lost (queue overflow).  When no
        other load runs, the watch falls quiet again."""
        from ..abi import libc
        names: set[str] = set()
        self.active -= 1
        if self.active <= 0:
            self.active = 0
            self._mask(libc.IN_DELETE_SELF)
        lost = self._drain(names)
        return None if lost else names

    def _drain(self, names: set[str]) -> bool:
        """Read the queued events; add the copies' paths to ``names``.  True when the
        kernel reported lost events.  A read that does not fill the buffer took every
        event queued when it ran: the creations of the load that just ended were
        queued before its ``load_binary`` returned, so no second read (an EAGAIN) is
        needed for them; later events are no load's of ours."""
        from ..abi import libc
        lost = False
        while True:
            try:
                buf = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                return lost
            except OSError:
                return True
            if not buf:
                return lost
            i = 0
            while i + _EVENT.size <= len(buf):
                _wd, mask, _cookie, n = _EVENT.unpack_from(buf, i)
                if mask & libc.IN_Q_OVERFLOW:
                    lost = True
                elif mask & libc.IN_CREATE and n:
                    start = i + _EVENT.size
                    name = buf[start:start + n].split(b"\0", 1)[0].decode(errors="replace")
                    if _is_copy(name):
                        names.add(os.path.join(COPY_DIR, name))
                i += _EVENT.size + n
            if len(buf) <= _READ_SIZE - _EVENT_MAX:
                return lost

    def forget(self) -> None:
        """In a child made by ``fork``: drop the instance inherited from the parent."""
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.fd = -1
        self.active = 0
        self.failed = False


_EVENT = struct.Struct("iIII")                # struct inotify_event: wd, mask, cookie, len
_READ_SIZE = 65536
_EVENT_MAX = _EVENT.size + 256                # one event with the longest name (NAME_MAX + 1)
_watch = _CopyWatch()
_pending: set[str] = set()     # copies created while loads overlapped, not yet decided
#: a token of :func:`before_load`: the load is watched (no listing of /tmp)
WATCHED = object()
os.register_at_fork(after_in_child=_watch.forget)


def before_load():
    """What :func:`unlink_new_copies` needs to find the copy an LLVM x86_64 plugin is
    about to write: :data:`WATCHED` (inotify watches ``/tmp`` until the load ends; no
    listing), or -- without inotify -- :func:`llvm_copies` now.  Pass the result to
    :func:`unlink_new_copies` after the load, whatever the load did."""
    with _lock:
        if _watch.start():
            return WATCHED
    return llvm_copies()


def _unlink_watched() -> list[str] | None:
    r""":func:`unlink_new_copies` after a watched load: the copies created meanwhile
    that this process has loaded are unlinked.  A plugin ``dlopen``\ s its copy before
    its load returns, so a copy not loaded here once no load of ours is running is
    another process's and is let go at once (asked about once); while another load of
    ours still runs it may be that load's, and waits for that load's end.  None when
    events were lost: the caller lists ``/tmp``."""
    from ..abi.libc import library_loaded
    out = []
    with _lock:                          # probes under the lock: see the docstring
        created = _watch.finish()
        if created is None:
            return None
        _pending.update(created)
        others = _watch.active > 0
        for path in list(_pending):
            if library_loaded(path):
                try:
                    os.unlink(path)
                    out.append(path)
                except OSError:
                    pass
                _pending.discard(path)
            elif not others:
                _pending.discard(path)         # not ours: another process's, or gone
        if out:
            _removed.extend(out)
            del _removed[:-_REMEMBERED]
    return sorted(out)


def unlink_new_copies(before=None) -> list[str]:
    """The cheap form of :func:`unlink_mapped_copies` for after each load:
    list ``/tmp`` and ask the dynamic loader about each copy not seen before
    (``dlopen(path, RTLD_NOLOAD)``: the LLVM plugins ``dlopen`` their copy,
    so a copy of this process is a loaded library here; nothing is loaded
    and no constructor runs).  Reading ``/proc/self/maps`` instead costs
    time in the number of images loaded so far (a plugin never unloads one),
    which made long ``check`` runs several times slower.  A copy last written
    before this module was imported (less a second of clock slack) is another
    process's and is set aside from its ``st_mtime`` alone: the loader opens
    every file it is asked about.  ``before``: what :func:`before_load` returned
    before the load -- :data:`WATCHED` (the load's own new files are known from
    inotify events: ``/tmp`` is not listed at all) or the :func:`llvm_copies` taken
    then: only the copies that appeared since are looked at (a busy ``/tmp`` holds
    hundreds of other runs' copies: no ``stat`` of each).  Returns the paths removed."""
    if before is WATCHED:
        out = _unlink_watched()
        if out is not None:
            return out
        before = None                            # events lost: look at every copy
    names = {(e.path, e.inode()) for e in _listing(COPY_DIR, _is_copy)
             if before is None or e.path not in before}
    with _lock:
        _foreign.intersection_update(names)
        unknown = names - _foreign
    if not unknown:
        return []
    out = []
    now = time.time()
    settled = set()
    probe = []
    for path, ino in unknown:
        # written before this process could load anything through this layer: another
        # process's copy (a dead run's leftover: /tmp of a busy machine holds hundreds,
        # and the loader opens each file it is asked about) -- no dlopen needed
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            continue
        if mtime < _IMPORTED_S - _CLOCK_SLACK_S:
            settled.add((path, ino))
        else:
            probe.append((path, ino, mtime))
    if probe:
        from ..abi.libc import library_loaded
    for path, ino, mtime in probe:
        if library_loaded(path):
            try:
                os.unlink(path)
                out.append(path)
            except OSError:
                pass
            continue
        # not loaded here: another process's copy -- or one a thread of ours is still
        # writing; only copies older than a few seconds are set aside for good
        if now - mtime > _SETTLE_S:
            settled.add((path, ino))
    with _lock:
        _foreign.update(settled)
        _removed.extend(out)
        del _removed[:-_REMEMBERED]
    return sorted(out)


def held() -> dict[str, int]:
    """What this module keeps between loads, counted: ``pending`` (copies created
    while loads overlapped, not yet decided), ``foreign`` (other processes' copies set
    aside by the listing path), ``removed`` (paths :func:`removed_copies` remembers;
    at most :data:`_REMEMBERED`)."""
    with _lock:
        return {"pending": len(_pending), "foreign": len(_foreign), "removed": len(_removed)}


def removed_copies() -> list[str]:
    """The copies removed in this process (the last :data:`_REMEMBERED`)."""
    with _lock:
        return list(_removed)


def kmp_segments(pid: int) -> list[str]:
    """libomp's registration segment names of process ``pid``: LLVM 12+ uses
    ``__KMP_REGISTERED_LIB_<pid>_<uid>``, older ones ``__KMP_REGISTERED_LIB_<pid>``."""
    return [f"{SHM_DIR}/__KMP_REGISTERED_LIB_{pid}_{os.getuid()}",
            f"{SHM_DIR}/__KMP_REGISTERED_LIB_{pid}"]


def remove_kmp_segment(pid: int) -> bool:
    """Remove the libomp segment of the ENDED process ``pid`` (a child of
    ours); True if one was there."""
    found = False
    for path in kmp_segments(pid):
        try:
            os.unlink(path)
            found = True
        except OSError:
            pass
    return found


def _lease_busy(path: str) -> bool | None:
    """Whether some process has ``path`` open or mapped, asked of the kernel in O(1):
    a write lease (``fcntl(F_SETLEASE, F_WRLCK)``, fcntl(2)) is granted only on a file
    no other open file description refers to -- a mapping keeps the description of
    the ``open`` that made it (``dlopen`` maps, then closes its fd), so a loaded image
    copy counts as open (the kernel's ``check_conflicting_open`` in ``fs/locks.c``
    compares the inode's reader and writer counts with the caller's own).  The lease,
    if granted, is given up at once; a process that opens the file in that instant
    waits for the ``F_UNLCK`` (its lease-break signal is set to SIGURG, whose default
    is to be ignored, not SIGIO, which would end this process).  True: open or mapped
    (``EAGAIN``); False: neither, or the file is gone; None: the kernel cannot tell
    (leases off in ``/proc/sys/fs/leases-enable``, another user's file, a file system
    without leases): the caller reads ``/proc``."""
    import _signal as signal        # signal.py without its enums (the launcher's sweep)
    import fcntl
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return None
    try:
        try:
            fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        except BlockingIOError:
            return True
        except OSError:
            return None
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        except OSError:
            pass                                # closing the fd below gives it up too
        return False
    finally:
        os.close(fd)


def _in_use(paths: set[str]) -> set[str]:
    """Those of ``paths`` that a process of this user has open or mapped (any
    process's, for the files the kernel answers for: :func:`_lease_busy`; the others
    by reading every process's ``/proc/PID/maps`` and ``fd`` links -- a file another
    process left in /tmp while a program ran made every ``offload-shim run`` read the
    memory map of every process of the user)."""
    if not paths:
        return set()
    busy: set[str] = set()
    unknown = set()
    for p in paths:
        state = _lease_busy(p)
        if state is None:
            unknown.add(p)
        elif state:
            busy.add(p)
    if not unknown:
        return busy
    return busy | _scanned_in_use(unknown)


def _scanned_in_use(paths: set[str]) -> set[str]:
    """:func:`_in_use` by reading ``/proc``: the maps and open fds of every process of
    this user, until each of ``paths`` was seen."""
    busy: set[str] = set()
    uid = os.getuid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/maps") as f:
                text = f.read()
        except OSError:
            continue
        if "/tmp/tmpfile_" in text or not all(p.startswith("/tmp/tmpfile_") for p in paths):
            busy |= {p for p in paths if p in text}
        if len(busy) == len(paths):        # all of them in use: no need to look further
            break
        try:
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                try:
                    target = os.readlink(fd.path)
                except OSError:
                    continue
                if target in paths:
                    busy.add(target)
        except OSError:
            continue
        if len(busy) == len(paths):
            break
    return busy


def sweep(paths, *, settle_s: float = 0.5) -> list[str]:
    """Unlink those of ``paths`` that no process of this user has open or
    mapped any more (the leftovers of processes that died); returns them.
    A copy another process is loading right now is open from ``mkstemp`` to
    ``fclose`` and mapped from ``dlopen`` on; only between the two (its
    writer's ``fclose`` and ``dlopen``'s ``open``) is it neither, so a file
    counts as a leftover only when it is still neither ``settle_s`` seconds
    after it was last written (its ``st_mtime``: the writer's last flush) and
    was not modified meanwhile; a younger one is checked again when it is that
    old."""
    def idle(candidates):
        candidates = {p for p in candidates if os.path.lexists(p)}
        return candidates - _in_use(candidates)

    first = {}
    for p in idle(paths):
        try:
            first[p] = os.stat(p).st_mtime_ns
        except OSError:
            pass
    if not first:
        return []
    # a file last written settle_s or more ago and idle now has been neither open nor
    # mapped for that long already (the same test as idle now and settle_s later,
    # unmodified): it goes at once; only younger ones wait out the rest of settle_s
    now = time.time_ns()
    window = int(settle_s * 1e9)
    out = []
    for path in sorted(p for p, m in first.items() if now - m >= window):
        try:
            os.unlink(path)
            out.append(path)
        except OSError:
            pass
    young = {p: m for p, m in first.items() if now - m < window}
    if not young:
        return out
    time.sleep((window - (now - min(young.values()))) / 1e9)
    for path in sorted(idle(young)):
        try:
            if os.stat(path).st_mtime_ns != young[path]:
                continue
            os.unlink(path)
            out.append(path)
        except OSError:
            pass
    return out


def process_state(pid: int) -> str:
    """The state letter of ``/proc/PID/stat`` (``R``, ``S``, ``Z``...), ``X`` when
    the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def dead_kmp_segments(ignore=frozenset()) -> list[str]:
    """libomp segments in /dev/shm of this user whose process is gone (or a
    zombie: killed, not yet reaped).  ``ignore``: paths not to look at (a
    :class:`~offload_shim.safety.children.ChildScope` skips the segments that were there before it: /dev/shm of
    a busy machine can hold hundreds of dead processes' segments, one
    ``/proc/PID/stat`` read each)."""
    out = []
    uid = os.getuid()
    for path in sorted(kmp_segment_files() - set(ignore)):
        pid = _kmp_segment_pid(os.path.basename(path))
        try:
            if pid is None or os.stat(path).st_uid != uid:
                continue
        except OSError:
            continue
        if process_state(pid) in ("Z", "X"):          # gone, or a zombie (killed)
            out.append(path)
    return out


