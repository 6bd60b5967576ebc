"""Nothing is left behind: every command, finished or interrupted part way with
SIGINT (Ctrl-C) or SIGTERM, leaves nothing new in /tmp or /dev/shm and no process of
its own running.

Counted are only the files the processes under test had open or mapped, their
private TMPDIR and their pids' libomp segments (tests/leftover_watch.py), so that
other test runs on the machine cannot make this fail.  Interrupted commands of our
own must also say so in one line and exit 130 (SIGINT) / 143 (SIGTERM).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import NEXTGEN16
from leftover_watch import Watch
from test_interpose_run import prog  # noqa: F401  (fixture: the clang-16 sample program)

CLI = [sys.executable, "-P", "-m", "offload_shim.cli"]
ROOT = Path(__file__).resolve().parent.parent

README_EXAMPLE = textwrap.dedent("""
    import offload_shim as osh
    from array import array

    with osh.Runtime.discover(host_only=True) as rt:        # bundled + LLVM x86_64 plugins
        img = osh.OffloadImage.sample()                      # host entries read from the ELF
        rt.register_image(img)                               # pending until a device initialises
        dev = rt.devices[0]                                  # initialised lazily, exactly once
        n = 1024
        a = dev.alloc(8 * n)                                 # bytes, through the memory manager
        dev.submit(a, array("q", range(n)))                  # increment(long *p, long n)
        dev.launch("increment", [a, n])                      # pointer-sized arguments
        out = array("q", bytes(8 * n)); dev.retrieve(out, a)
        assert list(out) == list(range(1, n + 1))
        dev.free(a)
        rt.unregister_image(img)
""")

# the same on every device of every host plugin (LLVM 16 nextgen and classic copy each
# image to /tmp), with a pause in the middle so that an interrupt lands there
README_ALL_DEVICES = textwrap.dedent("""
    import sys, time
    import offload_shim as osh
    from array import array
    rt = osh.Runtime.discover(host_only=True)               # closed by the exit hook
    img = osh.OffloadImage.sample()
    rt.register_image(img)
    for dev in rt.devices:
        a = dev.alloc(64)
        dev.submit(a, array("q", range(8)))
        dev.launch("increment", [a, 8])
    open(sys.argv[2], "w").close()             # part way: every image loaded
    time.sleep(float(sys.argv[1]))
""")


def _readme_script(tmp_path, text):
    p = tmp_path / "example.py"
    p.write_text(text)
    return p


def _started_children(n):
    """Part way: the command has ``n`` processes of its own running (itself included)."""
    return lambda w: len(w.tagged_alive()) >= n


def _after(seconds):
    import time
    t0 = []

    def when(w):
        if not t0:
            t0.append(time.monotonic())
        return time.monotonic() - t0[0] >= seconds
    return when


def _both(a, b):
    state = []

    def when(w):
        if not state and a(w):
            state.append(1)
        return bool(state) and b(w)
    return when


def _watch(cmd, interrupt=None, **kw):
    w = Watch(cmd, interrupt=interrupt, **kw)
    res = w.run()
    return w, res


def _assert_clean(w, res, *, ours=True, finished_rc=(0,), completed=None):
    problems = w.problems()
    assert not problems, (problems, res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    if w.interrupted_at is None:
        assert res.returncode in finished_rc, (res.returncode, res.stderr[-3000:])
        return
    if not ours:
        return
    sig = w.interrupt[0]
    if res.returncode in finished_rc and "offload-shim:" not in res.stderr:
        return                      # it ended before the signal landed: nothing to judge
    if res.returncode == -sig and completed is not None and completed(res):
        return                      # the signal came after the command had finished its work
                                    # (its handler removed): nothing was left, see above
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    want = {signal.SIGINT: (130, "offload-shim: interrupted"),
            signal.SIGTERM: (143, "offload-shim: terminated")}[sig]
    assert res.returncode == want[0], (res.returncode, res.stderr[-3000:])
    assert res.stderr.strip().splitlines()[-1] == want[1], res.stderr[-3000:]


INTERRUPTS = [pytest.param(None, id="finished"),
              pytest.param(signal.SIGINT, id="SIGINT"),
              pytest.param(signal.SIGTERM, id="SIGTERM")]


@pytest.mark.parametrize("sig", INTERRUPTS)
def test_demo_leaves_nothing(sig):
    # part way: the second plugin's child is running (the first one is done)
    when = _both(_started_children(2), _after(0.5))
    w, res = _watch([*CLI, "demo"], interrupt=(sig, when) if sig else None)
    _assert_clean(w, res, completed=lambda r: "verified" in r.stdout.split("result")[-1])


@pytest.mark.llvm16
@pytest.mark.parametrize("sig", INTERRUPTS)
def test_check_leaves_nothing(sig):
    cmd = [*CLI, "check", str(NEXTGEN16), "--max-examples", "20", "--steps", "8"]
    when = _both(_started_children(2), _after(2.0))
    w, res = _watch(cmd, interrupt=(sig, when) if sig else None)
    _assert_clean(w, res)


@pytest.mark.parametrize("sig", INTERRUPTS)
def test_bench_tiny_leaves_nothing(sig):
    when = _both(_started_children(2), _after(0.5))
    w, res = _watch([*CLI, "bench", "--profile", "tiny"],
                    interrupt=(sig, when) if sig else None)
    # exit status and message of an interrupted bench: the bench tests' business
    _assert_clean(w, res, ours=False)


@pytest.mark.parametrize("sig", INTERRUPTS)
def test_readme_example_leaves_nothing(sig, tmp_path):
    if sig is None:
        w, res = _watch([sys.executable, "-P", str(_readme_script(tmp_path, README_EXAMPLE))])
        _assert_clean(w, res)
    # every device of every host plugin, interrupted while the runtime is open (after the
    # loads: a plain script killed by SIGTERM in the middle of a plugin's load_binary
    # cannot remove the copy being written -- our commands turn SIGTERM into a clean exit)
    script = _readme_script(tmp_path, README_ALL_DEVICES)
    marker = tmp_path / "part_way"
    w, res = _watch([sys.executable, "-P", str(script), "60" if sig else "0", str(marker)],
                    interrupt=(sig, lambda w: marker.exists()) if sig else None)
    # a plain Python script: its SIGINT is a KeyboardInterrupt (the exit hook closes the
    # runtime); SIGTERM kills it without any exit code -- the plugin layer removed each
    # image copy right after its load, so nothing is left either way
    _assert_clean(w, res, ours=False, finished_rc=(0,))


@pytest.mark.parametrize("sig", INTERRUPTS)
def test_run_program_leaves_nothing(sig, prog):
    """``offload-shim run PROGRAM``: the program itself runs the Python runtime (embedded);
    the LLVM plugins' image copies are unlinked right after each load."""
    w, res = _watch([*CLI, "run", prog],
                    interrupt=(sig, _both(_started_children(1), _after(0.3))) if sig else None)
    _assert_clean(w, res, ours=False, finished_rc=(3,))


def test_run_library_crash_is_one_line_naming_the_library(tmp_path):
    """A library whose constructor crashes: tried in a child first (exit 2, one line
    naming it), nothing left."""
    src = tmp_path / "crash.c"
    src.write_text("__attribute__((constructor)) static void boom(void) "
                   "{ *(volatile int *)0 = 1; }\nint osh_f(void) { return 1; }\n")
    lib = tmp_path / "libcrash.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    w, res = _watch([*CLI, "run-library", "--library", str(lib), "--call", "osh_f",
                     "--bundled"])
    assert not w.problems()
    assert res.returncode == 2, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert lines[0].startswith("offload-shim: error: --library ") and str(lib) in lines[0]
    assert "SIGSEGV" in lines[0], lines[0]


def test_the_watch_sees_leftovers_and_orphans(tmp_path):
    """The check above can fail: a command that leaves a file it had open in a watched
    folder, a libomp-style segment of its own pid, something in its TMPDIR, and a process
    of its own still running is reported on each count.  The watched folders are
    private (stand-ins for /tmp and /dev/shm), so what other processes on the machine
    leave there cannot change the outcome."""
    tmp, shm = tmp_path / "tmp", tmp_path / "shm"
    tmp.mkdir()
    shm.mkdir()
    code = textwrap.dedent("""
        import os, subprocess, sys, tempfile, time
        tmp, shm = sys.argv[1:3]
        name = os.path.join(tmp, "osh_watch_probe")
        with open(name, "w") as f:
            f.write("x")
            time.sleep(1.0)                 # open long enough to be seen (polled)
        seg = os.path.join(shm, f"__KMP_REGISTERED_LIB_{os.getpid()}_{os.getuid()}")
        open(seg, "w").close()
        tempfile.mkstemp()
        subprocess.Popen(["sleep", "30"], start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(name, seg)
    """)
    w = Watch([sys.executable, "-c", code, str(tmp), str(shm)], tmp=str(tmp), shm=str(shm))
    res = w.run()
    assert res.returncode == 0, res.stderr
    name, seg = res.stdout.split()
    foreign = shm / f"__KMP_REGISTERED_LIB_{os.getpid()}_{os.getuid()}"
    foreign.touch()                     # another pid's segment in the folder: not counted
    problems = w.problems(grace_s=0.5)
    text = "\n".join(problems)
    assert "processes still running" in text and "sleep" in text
    assert "left in its TMPDIR" in text
    assert name in text and seg in text and str(foreign) not in text
    assert len(problems) == 4, problems


def test_the_watch_does_not_take_a_reused_pid_for_its_own(tmp_path):
    """A pid of the command's that another process takes after the command's process
    ended is not the command's: its files and the segment it makes do not count, and it
    is neither reported nor killed as an orphan.  Stands in for the reuse by rewriting
    the recorded start time of the (ended) command's pid to that of a live process of
    this test."""
    tmp, shm = tmp_path / "tmp", tmp_path / "shm"
    tmp.mkdir()
    shm.mkdir()
    w = Watch([sys.executable, "-c", "pass"], tmp=str(tmp), shm=str(shm))
    res = w.run()
    assert res.returncode == 0, res.stderr
    ended = time.time()
    time.sleep(0.05)
    other = subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL)
    try:
        from leftover_watch import _stat
        # as if `other` had taken the pid of a process of the command's, seen gone at
        # `ended`: its start time is not the recorded one
        w.pids.add(other.pid)
        w.starts[other.pid] = "0"
        w.gone[other.pid] = ended
        seg = shm / f"__KMP_REGISTERED_LIB_{other.pid}_{os.getuid()}"
        seg.touch()
        assert _stat(str(other.pid))[1] != "0"
        assert other.pid not in w.tagged_alive()
        assert w.problems(grace_s=0.2) == []
        assert other.poll() is None                     # not killed
    finally:
        other.kill()
        other.wait()


@pytest.mark.llvm16
@pytest.mark.parametrize("plugin", ["nextgen", "classic"])
def test_llvm_image_copies_are_unlinked_right_after_each_load(plugin):
    """The plugin layer unlinks the /tmp/tmpfile_* copy of every image an LLVM x86_64 plugin
    loads, right after the load (the mapping stays valid: the kernels still run), so even a
    process killed later leaves none."""
    from conftest import CLASSIC16
    path = NEXTGEN16 if plugin == "nextgen" else CLASSIC16
    code = textwrap.dedent(f"""
        import os, signal
        from array import array
        import offload_shim as osh
        from offload_shim.safety import leftovers
        rt = osh.Runtime([{str(path)!r}])
        img = osh.OffloadImage.sample()
        rt.register_image(img)
        for dev in rt.devices:
            a = dev.alloc(64)
            dev.submit(a, array("q", range(8)))
            dev.launch("increment", [a, 8])
            out = array("q", bytes(64)); dev.retrieve(out, a)
            assert list(out) == list(range(1, 9)), list(out)
        assert leftovers.mapped_copies() == set(), leftovers.mapped_copies()
        removed = leftovers.removed_copies()
        assert len(removed) >= len(rt.devices), removed
        print("removed", len(removed), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)     # no exit code, no close
    """)
    w, res = _watch([sys.executable, "-P", "-c", code])
    assert res.returncode == -signal.SIGKILL and "removed" in res.stdout, res.stderr[-3000:]
    assert not w.problems()


# -- the sweep of a scope's end: what counts as a leftover ---------------------------------

def _aged(path: Path, seconds: float) -> None:
    import os
    import time
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_sweep_removes_an_idle_file_written_long_ago_without_waiting(tmp_path, monkeypatch):
    import time
    import types
    from offload_shim.safety import leftovers
    old = tmp_path / "old"
    old.write_bytes(b"x")
    _aged(old, 10)
    waits = []
    monkeypatch.setattr(leftovers, "time", types.SimpleNamespace(
        time=time.time, time_ns=time.time_ns, sleep=waits.append))
    assert leftovers.sweep({str(old)}, settle_s=5.0) == [str(old)]
    assert waits == []                          # no settle wait: idle for 10 s already
    assert not old.exists()


def test_sweep_waits_for_a_young_idle_file_and_spares_one_rewritten_meanwhile(
        tmp_path, monkeypatch):
    """The rewrite lands while the sweep waits for the young files to settle, whatever
    the machine's load (a timer thread could fire after the sweep's re-check)."""
    import time
    import types
    from offload_shim.safety import leftovers
    young, busy = tmp_path / "young", tmp_path / "rewritten"
    young.write_bytes(b"x")
    busy.write_bytes(b"x")

    waits = []

    def sleep(s):                       # the sweep's wait: its writer goes on meanwhile
        waits.append(s)
        time.sleep(s / 2)               # past the file system's coarse mtime clock
        busy.write_bytes(b"yy")
        time.sleep(s / 2)
    monkeypatch.setattr(leftovers, "time", types.SimpleNamespace(
        time=time.time, time_ns=time.time_ns, sleep=sleep))
    assert leftovers.sweep({str(young), str(busy)}, settle_s=0.8) == [str(young)]
    assert len(waits) == 1 and 0 < waits[0] <= 0.8     # it waited for the young file once
    assert busy.exists() and not young.exists()


def test_sweep_spares_files_another_process_has_open_or_mapped(tmp_path):
    from offload_shim.safety import leftovers
    opened, mapped, idle = tmp_path / "opened", tmp_path / "mapped", tmp_path / "idle"
    for p in (opened, mapped, idle):
        p.write_bytes(b"x" * 4096)
        _aged(p, 10)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import mmap, sys\n"
         "f = open(sys.argv[1], 'rb'); g = open(sys.argv[2], 'rb')\n"
         "m = mmap.mmap(g.fileno(), 0, prot=mmap.PROT_READ); g.close()\n"
         "print('ready', flush=True); sys.stdin.read()", str(opened), str(mapped)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        paths = {str(opened), str(mapped), str(idle)}
        assert leftovers._in_use(paths) == {str(opened), str(mapped)}
        assert leftovers.sweep(paths, settle_s=0.2) == [str(idle)]
        assert opened.exists() and mapped.exists()
    finally:
        holder.communicate("")


def _holder(opened, mapped):
    return subprocess.Popen(
        [sys.executable, "-c", "import mmap, sys\n"
         "f = open(sys.argv[1], 'rb'); g = open(sys.argv[2], 'rb')\n"
         "m = mmap.mmap(g.fileno(), 0, prot=mmap.PROT_READ); g.close()\n"
         "print('ready', flush=True); sys.stdin.read()", str(opened), str(mapped)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def test_in_use_asks_the_kernel_and_reads_no_proc_where_leases_answer(tmp_path, monkeypatch):
    # issue 29: a copy another process holds cost every run a read of every process's
    # memory map; the lease answers per file in O(1)
    from offload_shim.safety import leftovers
    opened, mapped, idle = tmp_path / "opened", tmp_path / "mapped", tmp_path / "idle"
    for p in (opened, mapped, idle):
        p.write_bytes(b"x" * 4096)
    answers = {str(p): leftovers._lease_busy(str(p)) for p in (idle,)}
    if answers[str(idle)] is None:
        pytest.skip("the kernel grants no lease here (leases-enable 0, or the file system)")

    def no_scan(paths):
        raise AssertionError(f"/proc read for {sorted(paths)}")
    monkeypatch.setattr(leftovers, "_scanned_in_use", no_scan)
    holder = _holder(opened, mapped)
    try:
        assert holder.stdout.readline().strip() == "ready"
        paths = {str(opened), str(mapped), str(idle)}
        assert leftovers._in_use(paths) == {str(opened), str(mapped)}
        assert leftovers._lease_busy(str(tmp_path / "gone")) is False
    finally:
        holder.communicate("")
    assert leftovers._in_use({str(opened), str(mapped)}) == set()     # the holder ended


def test_in_use_reads_proc_for_files_the_kernel_cannot_answer_for(tmp_path, monkeypatch):
    from offload_shim.safety import leftovers
    opened, mapped, idle = tmp_path / "opened", tmp_path / "mapped", tmp_path / "idle"
    for p in (opened, mapped, idle):
        p.write_bytes(b"x" * 4096)
    monkeypatch.setattr(leftovers, "_lease_busy", lambda path: None)   # leases off
    holder = _holder(opened, mapped)
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert leftovers._in_use({str(opened), str(mapped), str(idle)}) == \
            {str(opened), str(mapped)}
    finally:
        holder.communicate("")


def test_dead_kmp_segments_skips_the_ignored_ones(tmp_path, monkeypatch):
    """In a private stand-in for /dev/shm: a dead process's segment is found, unless
    ignored; a live process's (this one's) is not."""
    from offload_shim.safety import leftovers
    monkeypatch.setattr(leftovers, "SHM_DIR", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    seg = str(tmp_path / f"__KMP_REGISTERED_LIB_{dead}_{os.getuid()}")
    live = str(tmp_path / f"__KMP_REGISTERED_LIB_{os.getpid()}_{os.getuid()}")
    open(seg, "w").close()
    open(live, "w").close()
    assert leftovers.kmp_segments(int(dead))[0] == seg
    assert leftovers.dead_kmp_segments() == [seg]
    assert leftovers.dead_kmp_segments(ignore={seg}) == []


def test_new_copy_check_asks_the_loader_only_about_copies_written_since_start(
        monkeypatch, tmp_path):
    """unlink_new_copies: a /tmp/tmpfile_* written before this process could load anything
    (another run's leftover; a busy /tmp holds hundreds) is set aside from its st_mtime, with
    no dlopen(RTLD_NOLOAD) -- which opens the file; a young one is still asked about.  In a
    private stand-in for /tmp (other test sessions on the machine sweep idle copies there)."""
    import secrets
    from offload_shim.abi import libc
    from offload_shim.safety import leftovers
    asked = []
    monkeypatch.setattr(libc, "library_loaded", lambda p, **kw: asked.append(p) or False)
    monkeypatch.setattr(leftovers, "COPY_DIR", str(tmp_path))

    def copy_like():            # the plugins' mkstemp("/tmp/tmpfile_XXXXXX") names
        while True:
            path = str(tmp_path / "tmpfile_") + secrets.token_hex(3)
            with contextlib.suppress(FileExistsError):
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
                return path
    old, young = copy_like(), copy_like()
    try:
        assert len(os.path.basename(old)) == len(os.path.basename(young)) == 14
        _aged(Path(old), time.time() - leftovers._IMPORTED_S + 60)   # a minute before start
        assert leftovers.unlink_new_copies() == []      # neither is loaded here
        assert young in asked and old not in asked, asked
        assert os.path.exists(old) and os.path.exists(young)   # another process's: kept
        asked.clear()
        leftovers.unlink_new_copies()
        assert old not in asked                          # set aside for good
        # with the listing taken before a load, only what appeared since is looked at
        before = leftovers.llvm_copies()
        assert {old, young} <= before
        newer = copy_like()
        asked.clear()
        try:
            leftovers.unlink_new_copies(before)
            assert asked == [newer], asked
        finally:
            os.unlink(newer)
    finally:
        for p in (old, young):
            with contextlib.suppress(OSError):
                os.unlink(p)


# -- the copy a load made, from inotify events (no listing of /tmp per load) ---------------

def _copy_like():
    """A file named like an image copy (the plugins' mkstemp("/tmp/tmpfile_XXXXXX")) in
    ``leftovers.COPY_DIR``, which the tests below point at a private folder: other test
    sessions on the machine sweep idle copies in /tmp."""
    import os
    import secrets
    from offload_shim.safety import leftovers
    while True:
        path = os.path.join(leftovers.COPY_DIR, "tmpfile_" + secrets.token_hex(3))
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            return path


@pytest.fixture
def private_copy_dir(monkeypatch, tmp_path):
    """``leftovers.COPY_DIR`` (/tmp) pointed at a private folder for the test."""
    from offload_shim.safety import leftovers
    d = tmp_path / "copies"
    d.mkdir()
    monkeypatch.setattr(leftovers, "COPY_DIR", str(d))
    return str(d)


@pytest.fixture
def watched(monkeypatch, private_copy_dir):
    """A fresh watch for the test (the process-wide one is put back afterwards) of a
    private stand-in for /tmp; a listing of it fails the test."""
    from offload_shim.safety import leftovers
    monkeypatch.setattr(leftovers, "_watch", leftovers._CopyWatch())
    monkeypatch.setattr(leftovers, "_pending", set())

    def no_listing(*a, **kw):
        raise AssertionError("/tmp was listed")
    monkeypatch.setattr(leftovers, "_listing", no_listing)
    token = leftovers.before_load()
    if token is not leftovers.WATCHED:
        leftovers.unlink_new_copies(token)
        pytest.skip("no inotify here (the listing fallback is tested below)")
    leftovers.unlink_new_copies(token)
    yield leftovers
    leftovers._watch.forget()


def test_a_watched_load_finds_its_copy_without_listing_tmp(watched, monkeypatch):
    import os
    from offload_shim.abi import libc
    made = []
    monkeypatch.setattr(libc, "library_loaded", lambda p, **kw: p == made[0])
    before_load = _copy_like()                   # not created during the load: not seen
    try:
        token = watched.before_load()
        assert token is watched.WATCHED
        made.append(_copy_like())                 # "the plugin's copy", loaded here
        foreign = _copy_like()                    # another process's, made meanwhile
        try:
            assert watched.unlink_new_copies(token) == [made[0]]
            assert not os.path.exists(made[0])
            assert os.path.exists(foreign) and os.path.exists(before_load)
            # no load of ours was running any more: the foreign copy is let go at once
            assert watched.held()["pending"] == 0
            assert made[0] in watched.removed_copies()
        finally:
            os.unlink(foreign)
        # between loads nothing is queued: a copy made now is not seen by the next load
        idle = _copy_like()
        try:
            token = watched.before_load()
            assert watched.unlink_new_copies(token) == []
            assert os.path.exists(idle)
        finally:
            os.unlink(idle)
    finally:
        os.unlink(before_load)


def test_overlapping_watched_loads_wait_for_each_other(watched, monkeypatch):
    """A copy that is not loaded here when one load ends may be another running load's
    (written, not yet dlopen-ed): it waits for that load's end."""
    import os
    from offload_shim.abi import libc
    loaded = set()
    monkeypatch.setattr(libc, "library_loaded", lambda p, **kw: p in loaded)
    first, second = watched.before_load(), watched.before_load()
    copy = _copy_like()                           # the second load's, not dlopen-ed yet
    try:
        assert watched.unlink_new_copies(first) == []
        assert watched.held()["pending"] == 1 and os.path.exists(copy)
        loaded.add(copy)                          # the second load dlopens it and ends
        assert watched.unlink_new_copies(second) == [copy]
        assert watched.held()["pending"] == 0
    finally:
        with contextlib.suppress(OSError):
            os.unlink(copy)


def test_without_inotify_or_after_lost_events_tmp_is_listed(monkeypatch, private_copy_dir):
    import os
    from offload_shim.abi import libc
    from offload_shim.safety import leftovers
    monkeypatch.setattr(leftovers, "_pending", set())
    made = []
    monkeypatch.setattr(libc, "library_loaded", lambda p, **kw: p in made)
    # no inotify instance (EMFILE: the user's max_user_instances reached)
    monkeypatch.setattr(leftovers, "_watch", leftovers._CopyWatch())
    monkeypatch.setattr(libc, "inotify_init", lambda: (-1, 24))
    before = leftovers.before_load()
    assert isinstance(before, set)
    made.append(_copy_like())
    assert leftovers.unlink_new_copies(before) == made and not os.path.exists(made[0])
    assert leftovers.before_load() is not leftovers.WATCHED       # not tried again
    # events lost (queue overflow): every copy not set aside is looked at
    monkeypatch.undo()
    monkeypatch.setattr(leftovers, "COPY_DIR", private_copy_dir)
    monkeypatch.setattr(leftovers, "_pending", set())
    monkeypatch.setattr(libc, "library_loaded", lambda p, **kw: p in made)
    watch = leftovers._CopyWatch()
    monkeypatch.setattr(leftovers, "_watch", watch)
    token = leftovers.before_load()
    if token is not leftovers.WATCHED:
        pytest.skip("no inotify here")
    try:
        monkeypatch.setattr(watch, "_drain", lambda names: True)
        made[:] = [_copy_like()]
        assert made[0] in leftovers.unlink_new_copies(token)
        assert not os.path.exists(made[0])
    finally:
        watch.forget()


def test_private_dir_is_made_where_tempfile_would_make_it(tmp_path, monkeypatch):
    # ChildScope's folder without importing tempfile (start-up of every run)
    import stat
    import tempfile
    from offload_shim.safety.children import private_dir
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    a, b = private_dir("osh_t_"), private_dir("osh_t_")
    assert a != b and os.path.dirname(a) == os.path.dirname(b) == str(tmp_path)
    assert os.path.basename(a).startswith("osh_t_")
    assert stat.S_IMODE(os.stat(a).st_mode) == 0o700
    # an unusable $TMPDIR: the next candidate, as tempfile.gettempdir
    monkeypatch.setenv("TMPDIR", str(tmp_path / "missing"))
    monkeypatch.setenv("TEMP", str(tmp_path / "second"))
    (tmp_path / "second").mkdir()
    assert os.path.dirname(private_dir("osh_t_")) == str(tmp_path / "second")
    # tempfile.tempdir set by the program: tempfile decides
    other = tmp_path / "chosen"
    other.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(other))
    assert os.path.dirname(private_dir("osh_t_")) == str(other)
