"""The repeat path of ``target update`` (native/interposer_repeat.c,
offload_shim/interposer/llvm/repeat.py): compiled programs that run the same update
again and again while the mapping table changes under it.

``update_repeated.c`` updates data that is absent, then mapped, unmapped and mapped
again (a new row, new device memory), a row with an update of a part of it, and
sections that cycle through four places; ``update_repeated_threads.c`` has four threads
update their own parts of a mapped array while a fifth maps and unmaps another array
400 times (every map and unmap moves the device's stamp).  Each runs as built (the
real libomptarget 16), under ``offload-shim run`` with the repeat path and without it
(``OFFLOAD_SHIM_NO_REPEAT=1``); the outputs must be the reference's, the report must
show that the C side repeated most updates (and none without it), no error and no
device memory left.  Under ``run --record`` every update reaches Python: the trace
has one construct line per update the program made.  (The conformance suite runs the
same two programs through clang 16, 19 and 22 against their own runtimes.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import conformance as cf
from conftest import NEXTGEN16

PROGRAMS = ("update_repeated.c", "update_repeated_threads.c", "update_repeated_reservation.c",
            "kernel_repeated.c", "kernel_repeated_threads.c", "kernel_repeated_reuse.c",
            "kernel_repeated_exit_general.c", "kernel_repeated_queries.c",
            "kernel_repeated_over_release.c", "pair_repeated.c", "pair_repeated_threads.c",
            "repeat_pool_other_uses.c", "kernel_repeated_rotation.c",
            "kernel_repeated_reservations.c")
TIMEOUT = 120


@pytest.fixture(scope="module")
def exes():
    why = cf.CLANG16.missing()
    if why:
        pytest.skip(f"{cf.CLANG16.name}: {why}")
    from offload_shim.cli.run import libpython_path
    try:
        libpython_path()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    if not Path(NEXTGEN16).exists():
        pytest.skip(f"{NEXTGEN16} is not installed")
    progs = [p for p in cf.programs() if p.name in PROGRAMS]
    assert sorted(p.name for p in progs) == sorted(PROGRAMS)
    built = cf.build_all(progs, cf.CLANG16, library=False)
    bad = {n: b.error for n, b in built.items() if b.error}
    assert not bad, bad
    return {n: str(b.exe) for n, b in built.items()}


def _shim(exe, tmp_path, name, extra_env=None, record=None):
    from offload_shim.cli.compare import run_outcome
    from offload_shim.cli.run import run_environment
    base = dict(os.environ, **(extra_env or {}))
    for k in ("LIBOMPTARGET_INFO", "OFFLOAD_SHIM_NO_REPEAT", "OFFLOAD_SHIM_NO_PLAN"):
        if k not in (extra_env or {}):
            base.pop(k, None)
    report = tmp_path / f"{name}.json"
    env = run_environment(base=base, report=str(report), plugins=[str(NEXTGEN16)],
                          record=record)
    got = run_outcome([exe], env=env, timeout=TIMEOUT)
    assert got.status != "timeout", got.stderr[-2000:]
    assert report.exists(), got.stderr[-2000:]
    rep = json.loads(report.read_text())
    assert rep["errors"] == [] and rep["leaks"] == {}, {k: rep[k] for k in ("errors", "leaks")}
    return got, rep["calls"]


@pytest.mark.parametrize("program", PROGRAMS)
def test_repeated_updates_equal_libomptarget(exes, tmp_path, program):
    from offload_shim.cli.compare import Comparison, run_outcome
    exe = exes[program]
    env = dict(os.environ)
    env.pop("LIBOMPTARGET_INFO", None)
    ref = run_outcome([exe], env=env, timeout=TIMEOUT)
    assert ref.status == 0, ref.render()
    on, calls_on = _shim(exe, tmp_path, "on")
    off, calls_off = _shim(exe, tmp_path, "off", {"OFFLOAD_SHIM_NO_REPEAT": "1"})
    for got in (on, off):
        c = Comparison([exe], ref, got)
        assert c.same, "\n" + "\n".join(c.diff()) + f"\n--- stderr:\n{got.stderr[-2000:]}"
    assert calls_off["update_repeated"] == calls_off["kernel_repeated"] == 0
    assert calls_off["enter_repeated"] == calls_off["exit_repeated"] == 0
    assert calls_on["target_data"] == calls_off["target_data"]
    assert calls_on["target_kernel"] == calls_off["target_kernel"]
    # most updates repeat: only the first two of each after a change of the table go to
    # Python (the single-threaded program changes its table 8 times in 300 iterations)
    if program == "update_repeated.c":
        assert calls_on["update_repeated"] >= 0.8 * 6 * 300, calls_on
    elif program == "kernel_repeated.c":
        # 600 + 400 + 250 + 100 + 100 + 1800 kernel constructs; those with the same
        # arguments as before (not those that pass the loop's counter) on a table that
        # did not change (not the loop that maps and unmaps around its region) repeat
        # from their third run: 300 + 400 + 250 and 600 of the last 1800
        assert calls_on["kernel_repeated"] >= 0.8 * (300 + 400 + 250 + 600), calls_on
    elif program == "kernel_repeated_queries.c":
        # omp_target_is_present / omp_get_mapped_ptr between them drop no reference:
        # they must not move the stamp (all but the first two of each loop repeat)
        assert calls_on["kernel_repeated"] >= 0.9 * 400, calls_on
    elif program == "kernel_repeated_over_release.c":
        # two releases beyond the enter data while two repeated kernels hold the row:
        # the second is taken from their references (osh_interposer_repeat_steal)
        assert calls_on["kernel_repeated"] >= 16 and calls_on["kernel_orphaned"] >= 1, \
            calls_on
    elif program == "kernel_repeated_exit_general.c":
        # the last kernel of each phase is repeated and waits for the other thread's
        # exit: with `always` and `release` its row is left to it (`delete` takes no
        # notice of it, nor of a row a `release` left to it)
        assert calls_on["kernel_repeated"] >= 28 and calls_on["kernel_orphaned"] >= 3, \
            calls_on
    elif program == "pair_repeated.c":
        # the loops whose pool holds no other block of the pair's size repeat from the
        # third iteration (1: 198 of 200; 3: 98 of 100 -- the others find blocks of
        # 512 bytes cached by the loops before and run in Python, as do the loops
        # with a kernel, an update or a query between enter and exit after two
        # take-ins); every pair a repeated enter left out is ended by a repeated exit
        # or taken in by a look-up
        assert calls_on["enter_repeated"] >= 0.9 * (198 + 98), calls_on
        assert calls_on["exit_repeated"] <= calls_on["enter_repeated"], calls_on
    elif program == "repeat_pool_other_uses.c":
        # the pair loops repeat (the blocks they keep go back before omp_target_alloc,
        # omp_target_free and the general code's allocations); the kernel loop does not
        # (the pool holds other blocks of its size: libomptarget rotates through them)
        assert calls_on["enter_repeated"] >= 100, calls_on
    elif program == "kernel_repeated_rotation.c":
        # the loop and the stale reads take the cached blocks in turn from the third
        # run on (38 + 4 of 46), the threads' constructs too (at least 1,100 of 1,200:
        # a thread's first two runs, and those of a thread that another one's Python
        # run held up, go to Python)
        assert calls_on["kernel_repeated"] >= 38 + 4 + 1100, calls_on
    elif program == "pair_repeated_threads.c":
        assert calls_on["enter_repeated"] > 0, calls_on
    elif program.startswith("kernel"):
        assert calls_on["kernel_repeated"] > 0, calls_on
    else:
        assert calls_on["update_repeated"] > 0, calls_on


def test_another_thread_maps_and_unmaps_what_repeated_kernels_use(exes, tmp_path):
    """kernel_repeated_threads.c: another thread's `exit data` drops what Python counts
    as the row's last reference while a kernel repeated in C holds it (the row is left
    to that kernel, whose end copies it back: ``kernel_orphaned``); another thread's
    `enter data` looks up data a repeat maps itself (the look-up waits for it:
    ``kernel_waited``).  Every increment must reach the host, in every run; the races
    are hit within a few runs."""
    exe = exes["kernel_repeated_threads.c"]
    orphaned = waited = 0
    for k in range(8):
        got, calls = _shim(exe, tmp_path, f"orph{k}")
        assert got.status == 0 and got.stdout[:2] == ["x 3000", "x 3000"], got.render()
        orphaned += calls["kernel_orphaned"]
        waited += calls["kernel_waited"]
        if orphaned and waited:
            break
    # (and the other thread's `enter data` of the data a repeat maps itself waited
    # for that repeat: ``kernel_waited``)
    assert orphaned > 0 and waited > 0, (orphaned, waited)


def test_a_recorded_run_sees_every_update(exes, tmp_path):
    exe = exes["update_repeated.c"]
    trace = tmp_path / "t.jsonl"
    got, calls = _shim(exe, tmp_path, "rec", record=str(trace))
    assert got.status == 0, got.render()
    assert calls["update_repeated"] == 0
    updates = sum(1 for line in trace.read_text().splitlines()
                  if '"op":"construct"' in line and '"kind":"update"' in line)
    assert updates == 6 * 300


_LIB = r"""
static double a[64];
void setup(void) {
  for (int i = 0; i < 64; i++) a[i] = i;
#pragma omp target enter data map(to: a[0:64])
}
double bump(void) {
  for (int it = 0; it < 20; it++) {
    a[it % 64] += 1.0;
#pragma omp target update to(a[0:64])
#pragma omp target update from(a[0:64])
  }
  double s = 0;
  for (int i = 0; i < 64; i++) s += a[i];
  return s;
}
/* kernel constructs on the row setup() made (repeated in C from the third) */
double kbump(void) {
  for (int it = 0; it < 20; it++) {
#pragma omp target map(tofrom: a[0:64])
    { a[0] += 1.0; }
  }
#pragma omp target update from(a[0:64])
  double s = 0;
  for (int i = 0; i < 64; i++) s += a[i];
  return s;
}
"""

_DRIVER = r"""
import ctypes, json, sys
import offload_shim as osh
from offload_shim.interposer import call_counts
with osh.Runtime([sys.argv[2]]) as rt, osh.interpose(rt) as ip:
    lib = ip.load_library(sys.argv[1])
    bump = lib.function("bump", restype=ctypes.c_double)
    lib.function("setup", restype=None)()
    first = bump()
    print(json.dumps({"first": first, "repeated": call_counts()["update_repeated"]}))
    sys.stdout.flush()
    rt.devices[0].deinit()              # the rows' device memory is freed
    bump()                              # the first copy finds no allocation there
    print("survived")
"""

_KERNEL_DRIVER = r"""
import ctypes, json, sys
import offload_shim as osh
from offload_shim.interposer import call_counts
with osh.Runtime([sys.argv[2]]) as rt, osh.interpose(rt) as ip:
    lib = ip.load_library(sys.argv[1])
    kbump = lib.function("kbump", restype=ctypes.c_double)
    lib.function("setup", restype=None)()
    first = kbump()
    before = call_counts()["kernel_repeated"]
    print(json.dumps({"first": first, "repeated": before}))
    sys.stdout.flush()
    rt.devices[0].deinit()              # the image is unloaded, the rows' memory freed
    try:
        kbump()
    except Exception as exc:
        pass
    print(json.dumps({"after": call_counts()["kernel_repeated"] - before}))
"""


def test_no_kernel_repeat_on_a_device_torn_down_meanwhile(tmp_path):
    """The same for kernel constructs: after a deinit the C side launches nothing it
    remembered (the kernel's image is unloaded: a launch would jump into unmapped
    code); the next construct reaches Python."""
    r = _drive(tmp_path, _KERNEL_DRIVER)
    lines = [json.loads(x) for x in r.stdout.strip().splitlines()]
    assert lines[0]["first"] == sum(range(64)) + 20
    assert lines[0]["repeated"] >= 15, lines
    # Python refuses the construct (its row's memory is gone: fatal under the
    # in-process default `mandatory`), where a repeat would have crashed or returned
    assert r.returncode == -6 and len(lines) == 1, (r.returncode, r.stdout)
    assert "failure of target construct" in r.stderr, r.stderr[-3000:]


_KCLOSE_DRIVER = r"""
import ctypes, json, sys, threading
import offload_shim as osh
from offload_shim.interposer import call_counts
seen = {}
with osh.Runtime([sys.argv[2]]) as rt, osh.interpose(rt) as ip:
    lib = ip.load_library(sys.argv[1])
    kbump = lib.function("kbump", restype=ctypes.c_double)
    lib.function("setup", restype=None)()
    kbump()
    seen["before_close"] = call_counts()["kernel_repeated"]
    wait = ip._wait_for_calls

    def wait_for_calls():
        # the interposer closes (its library still registered): another thread's
        # kernel constructs now must not be repeated in C
        t = threading.Thread(target=kbump)
        t.start()
        t.join()
        seen["during_close"] = call_counts()["kernel_repeated"] - seen["before_close"]
        wait()
    ip._wait_for_calls = wait_for_calls
    ip.close()
print(json.dumps(seen))
"""


def test_no_kernel_repeat_while_the_interposer_closes(tmp_path):
    r = _drive(tmp_path, _KCLOSE_DRIVER)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["before_close"] >= 15, out
    assert out["during_close"] == 0, (out, r.stderr[-3000:])


def test_no_repeat_copies_into_a_device_torn_down_meanwhile(tmp_path):
    """A deinit while the interposer is active frees the device memory the remembered
    updates copy into: the repeats are forgotten at the teardown (Device
    ``TEARDOWN_HOOKS``), so the next update reaches Python, which refuses the copy
    (the construct fails, fatal under the in-process default ``mandatory``) instead of
    a copy into freed memory."""
    r = _drive(tmp_path, _DRIVER)
    lines = r.stdout.strip().splitlines()
    out = json.loads(lines[0])
    assert out["first"] == sum(range(64)) + 20
    assert out["repeated"] >= 30, out       # 40 updates, the first two of each in Python
    # the next update comes to Python, which finds the copy outside any allocation
    # (a repeat would have copied into the freed memory and returned)
    assert "survived" not in lines, r.stdout
    assert "Copying data to device failed" in r.stderr, r.stderr[-3000:]


_CLOSE_DRIVER = r"""
import ctypes, json, sys, threading
import offload_shim as osh
from offload_shim.interposer import call_counts
from offload_shim.interposer.llvm.mapping import DeviceMapper
seen = {}
free_rows = DeviceMapper.release_all


def release_all(dm):
    # the interposer closes: another thread's updates now, just before the rows'
    # device memory is freed
    before = call_counts()["update_repeated"]
    t = threading.Thread(target=bump)
    t.start()
    t.join()
    seen["during_close"] = call_counts()["update_repeated"] - before
    free_rows(dm)


with osh.Runtime([sys.argv[2]]) as rt, osh.interpose(rt) as ip:
    lib = ip.load_library(sys.argv[1])
    # a second reference: the library stays mapped once the interposer closes it
    keep = ctypes.CDLL(sys.argv[1])
    bump = keep.bump
    bump.restype = ctypes.c_double
    keep.setup()
    # unregistered before the close (as a program's own destructor does at exit, while
    # its other threads go on updating)
    for desc in list(ip.libraries):
        ip._on_unregister(desc)
    bump()
    seen["before_close"] = call_counts()["update_repeated"]
    DeviceMapper.release_all = release_all
    ip.close()
print(json.dumps(seen))
"""


def test_no_repeat_while_the_interposer_closes(tmp_path):
    """Once :meth:`Interposer.close` begins, the other threads' constructs reach
    Python, which does nothing for them, and the devices' memory is then freed
    (``DeviceMapper.release_all``): the C side must not repeat their updates then (it
    copied into the freed memory: a program whose threads update while ``main``
    returns crashed at exit under ``offload-shim run``, 4 runs in 6: the program's
    own unregistration at exit forgets the repeats, its threads' next updates are
    handed over again, and nothing turned them off before the close freed the rows)."""
    r = _drive(tmp_path, _CLOSE_DRIVER)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["before_close"] >= 30, out           # the repeats were on
    assert out["during_close"] == 0, (out, r.stderr[-3000:])


_SHADOW_LIB = r"""
struct S { double *p; double v[8]; };
struct S s;
double buf[16];
void setup(void) {
  s.p = buf;
#pragma omp target enter data map(to: s)
}
void attach(void) {
#pragma omp target enter data map(to: s.p[0:16])
}
void upd(void) {
#pragma omp target update to(s)
}
/* writes through the device's copy of s.p: the device's buf while it is attached,
   the host's buf when a copy of s left the host's pointer there */
double poke(void) {
#pragma omp target map(alloc: s)
  { s.p[0] = 42.0; }
  return buf[0];
}
"""

_SHADOW_DRIVER = r"""
import ctypes, json, sys, threading
import offload_shim as osh
from offload_shim.interposer import call_counts
from offload_shim.interposer.llvm import plan_data
with osh.Runtime([sys.argv[2]]) as rt, osh.interpose(rt) as ip:
    lib = ip.load_library(sys.argv[1])
    f = {n: lib.function(n, restype=ctypes.c_double if n == "poke" else None)
         for n in ("setup", "attach", "upd", "poke")}
    f["setup"]()
    update = plan_data.update
    once = []

    def racing_update(v, n, plan, dm, repeat=None):
        # another thread attaches the pointer inside s after the cheap path saw no
        # shadow pointer and before this update takes the table lock
        if not once:
            once.append(1)
            t = threading.Thread(target=f["attach"])
            t.start()
            t.join()
        return update(v, n, plan, dm, repeat)
    plan_data.update = racing_update
    before = call_counts()["update_repeated"]
    for _ in range(5):
        f["upd"]()
    out = {"repeated": call_counts()["update_repeated"] - before, "host_buf0": f["poke"]()}
print(json.dumps(out))
"""


def test_an_update_racing_a_pointer_attachment_is_not_repeated_plain(tmp_path):
    """A pointer attached inside a mapped struct (a shadow pointer) between the cheap
    path's look at the table (FastPath._serve, without the lock) and the update's
    look-ups: under the lock the update sees it and hands the construct to the general
    code, whose copy of ``to(s)`` writes the device's pointer back (libomptarget 16
    targetDataUpdate).  Before, the plain copy was made and handed to the C side,
    which repeated it while the table stayed so: the device's ``s.p`` kept the host's
    address and a kernel wrote through it into the host's ``buf`` (42.0 here)."""
    import subprocess
    import sys
    why = cf.CLANG16.missing()
    if why:
        pytest.skip(f"{cf.CLANG16.name}: {why}")
    if not Path(NEXTGEN16).exists():
        pytest.skip(f"{NEXTGEN16} is not installed")
    src = tmp_path / "sh.c"
    src.write_text(_SHADOW_LIB)
    so = tmp_path / "libsh.so"
    subprocess.run([cf.CLANG16.cc, "-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu",
                    "-shared", "-fPIC", str(src), "-o", str(so)], check=True,
                   capture_output=True, timeout=300)
    env = {k: v for k, v in os.environ.items()
           if k not in ("OFFLOAD_SHIM_NO_REPEAT", "OFFLOAD_SHIM_NO_PLAN", "LIBOMPTARGET_INFO")}
    r = subprocess.run([sys.executable, "-c", _SHADOW_DRIVER, str(so), str(NEXTGEN16)],
                       capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"repeated": 0, "host_buf0": 0.0}, (out, r.stderr[-3000:])


def test_concurrent_invalidations_leave_the_later_state():
    """Two threads invalidate the cheap path at once (``__tgt_set_info_flag`` turning
    tracing on in one, a registration in the other): the state each reads and the
    reset it makes of the C side's repeats are one step (``FastPath.invalidate``
    under its own lock), so the one that read the older state cannot turn the repeats
    back on after the other turned them off for tracing (repeated updates would print
    no INFO lines)."""
    import threading
    from offload_shim.interposer.llvm.plan import FastPath

    tracing = [False]
    applied = []
    first_reset = threading.Event()
    second_done = threading.Event()

    class FakeRepeats:
        wanted = True

        def reset(self, on):
            if not first_reset.is_set():
                first_reset.set()
                # the other thread's invalidation runs now, if nothing holds it off
                second_done.wait(1.0)
            applied.append(on)

    rp = FakeRepeats()
    fp = FastPath(check_device=None, default_device=None, slow_kernel=None, slow_data=None,
                  failed=None, tracing=lambda: tracing[0], repeats=lambda: rp)
    applied.clear()

    def first():
        fp.invalidate()                 # reads tracing off

    def second():
        first_reset.wait(10.0)
        tracing[0] = True               # __tgt_set_info_flag
        fp.invalidate()
        second_done.set()
    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30.0)
    assert len(applied) == 2 and applied[-1] is False, applied
    assert fp._repeat is None


def _drive(tmp_path, driver):
    """``driver`` (Python) run in a child with ``_LIB`` built by clang-16 as a shared
    library and the LLVM 16 nextgen plugin as its arguments; the CompletedProcess."""
    import subprocess
    import sys
    why = cf.CLANG16.missing()
    if why:
        pytest.skip(f"{cf.CLANG16.name}: {why}")
    if not Path(NEXTGEN16).exists():
        pytest.skip(f"{NEXTGEN16} is not installed")
    src = tmp_path / "upd.c"
    src.write_text(_LIB)
    so = tmp_path / "libupd.so"
    subprocess.run([cf.CLANG16.cc, "-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu",
                    "-shared", "-fPIC", str(src), "-o", str(so)], check=True,
                   capture_output=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("OFFLOAD_SHIM_NO_REPEAT",)}
    return subprocess.run([sys.executable, "-c", driver, str(so), str(NEXTGEN16)],
                          capture_output=True, text=True, timeout=TIMEOUT, env=env)
