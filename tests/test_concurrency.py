"""Concurrency as libomptarget 16's (issue 25 part 3): several host threads offloading
at once through the interposer, and API routines called by the threads of a kernel.

libomptarget 16 holds no lock across a kernel launch or the copies of a construct (its
table lock, ``DeviceTy::DataMapMtx``, covers look-ups and reference counts only), so

* the threads of a ``parallel for`` inside a target region may call
  ``omp_get_num_devices()``, ``omp_get_device_num()``, ``omp_target_is_present()``,
  ``omp_target_alloc()`` ... while the region's kernel is in flight (a runtime that held
  a lock across the launch would deadlock: its launching thread waits for the loop,
  the loop's threads for the lock);
* the kernels of two host threads run at the same time;
* a row that another thread maps while the kernel construct that created it runs is
  one row with two references.

Compiled programs of ``tests/programs/`` (also run by the conformance suite through
the default plugin) run here under ``offload-shim run`` on the LLVM 16 nextgen and
classic x86_64 plugins and on the bundled plugin, each against the program as built
(the real libomptarget 16), with a timeout: the output must be the reference's, the
run must end, and the report must show no error and no device memory left
(``leaks``).  ``threads_mapping.c`` is the property test: four threads draw their
operations (enter/exit data with reference counts, update, target data, kernels on
shared and private data, kernels whose threads ask ``omp_target_is_present``) from a
seed that hypothesis chooses; the final buffers, presence and reference counts
(``exit data`` until absent) must equal libomptarget's, with the cheap path and with
the general code (``OFFLOAD_SHIM_NO_PLAN=1``).

The in-process tests drive the interposer's own entry points from Python threads on
the bundled plugin (as ``tests/test_plan.py`` does from one thread), thread switches
forced every few microseconds: random constructs of several threads on shared and
private buffers (after the join the host buffers, the table and its reference counts
equal what the operations imply, and once everything is released the device holds no
memory); and a thread that registers, uses and unregisters a second copy of the image
again and again while two threads launch the first copy's kernel (the cached device
check and the plans must follow the registrations).  These two pass on a runtime that
serialises everything too: they guard the finer locking, the programs above show the
concurrency.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conformance as cf
from conftest import CLASSIC16, NEXTGEN16

#: the programs of tests/programs/ these tests run
PROGRAMS = ("api_in_region.c", "api_in_region_present.c", "kernels_overlap.c",
            "threads_shared_row.c", "threads_mapping.c")
#: seconds a run may take (the programs that wait inside a kernel give up after 20 s:
#: a runtime that serialises kernels makes them run into that bound);
#: OSH_CONCURRENCY_TIMEOUT overrides it (a shorter bound to see a deadlock fail sooner)
TIMEOUT = float(os.environ.get("OSH_CONCURRENCY_TIMEOUT", "90"))


def _configs() -> dict[str, dict]:
    """``offload-shim run`` options per plugin (run_environment keyword arguments)."""
    from offload_shim.hostplugin import bundled_plugin_path
    return {"nextgen": {"plugins": [str(NEXTGEN16)]},
            "classic": {"plugins": [str(CLASSIC16)]},
            "bundled": {"plugins": [str(bundled_plugin_path())], "bundled": True}}


CONFIGS = ("nextgen", "classic", "bundled")


@pytest.fixture(scope="module")
def exes():
    """The programs, built once (executables; cached by the conformance harness)."""
    why = cf.CLANG16.missing()
    if why:
        pytest.skip(f"{cf.CLANG16.name}: {why}")
    from offload_shim.cli.run import libpython_path
    try:
        libpython_path()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    for path in (NEXTGEN16, CLASSIC16):
        if not Path(path).exists():
            pytest.skip(f"{path} is not installed")
    progs = [p for p in cf.programs() if p.name in PROGRAMS]
    assert sorted(p.name for p in progs) == sorted(PROGRAMS)
    built = cf.build_all(progs, cf.CLANG16, library=False)
    bad = {n: b.error for n, b in built.items() if b.error}
    assert not bad, bad
    return {n: str(b.exe) for n, b in built.items()}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return tmp_path_factory.mktemp("reports")


_seq = iter(range(1 << 30))


def _pair(exe: str, args, config: str, reports: Path, env_extra=None):
    """(reference Outcome, offload-shim Outcome, its report or None)."""
    from offload_shim.cli.compare import run_outcome
    from offload_shim.cli.run import run_environment
    base = dict(os.environ, **(env_extra or {}))
    base.pop("LIBOMPTARGET_INFO", None)
    argv = [exe, *map(str, args)]
    ref = run_outcome(argv, env=base, timeout=TIMEOUT)
    report = reports / f"r{next(_seq)}.json"
    env = run_environment(base=base, report=str(report), **_configs()[config])
    got = run_outcome(argv, env=env, timeout=TIMEOUT)
    rep = json.loads(report.read_text()) if report.exists() else None
    return ref, got, rep


def _check(exe, args, config, reports, env_extra=None):
    """Run under both runtimes and assert: offload-shim finished, gave the reference's
    outcome, reported no error and left no device memory.  Returns the reference's
    stdout lines."""
    from offload_shim.cli.compare import Comparison
    ref, got, rep = _pair(exe, args, config, reports, env_extra)
    assert ref.status == 0, ref.render()
    assert got.status != "timeout", \
        f"offload-shim run did not finish in {TIMEOUT} s (a lock held across a launch?)" \
        f"\n{got.stderr[-2000:]}"
    c = Comparison([exe, *map(str, args)], ref, got)
    assert c.same, "\n" + "\n".join(c.diff()) + f"\n--- stderr:\n{got.stderr[-2000:]}"
    assert rep is not None, got.stderr[-2000:]
    assert rep["errors"] == [] and rep["leaks"] == {}, {k: rep[k] for k in ("errors", "leaks")}
    return ref.stdout


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("program", ["api_in_region.c", "api_in_region_present.c"])
def test_api_routines_from_the_threads_of_a_kernel(exes, reports, program, config):
    """The routines answer at once, as libomptarget 16's, while the kernel whose loop
    calls them is in flight (the region's own data is present to them)."""
    out = _check(exes[program], [], config, reports)
    assert any("iterations" in line for line in out)


@pytest.mark.parametrize("config", CONFIGS)
def test_kernels_of_two_threads_run_at_once(exes, reports, config):
    """Each of two kernels waits (at most 20 s) until it sees the other one running:
    both see each other under libomptarget 16 and under offload-shim; kernels run one
    after the other would leave the first waiting in vain and print 0 for it."""
    out = _check(exes["kernels_overlap.c"], [], config, reports)
    assert out == ["team of 2: thread 0 saw thread 1's kernel running: 1, thread 1 saw "
                   "thread 0's: 1"], out


@pytest.mark.parametrize("config", CONFIGS)
def test_a_row_mapped_while_its_kernel_runs_is_shared(exes, reports, config):
    """Thread 1 maps the data of thread 0's region while its kernel runs: one row,
    two references; the region's end copies nothing back, thread 1's ``exit data``
    brings what the kernel wrote (libomptarget 16's outcome, which the scenario only
    shows when the kernel was seen running)."""
    out = _check(exes["threads_shared_row.c"], [], config, reports)
    assert out[0] == "team of 2, kernel seen running: 1", out


@pytest.mark.parametrize("config", CONFIGS + ("nextgen-general",))
@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), steps=st.integers(1, 60))
def test_threads_mapping_equals_libomptarget(exes, reports, config, seed, steps):
    """Four threads on shared and private data (threads_mapping.c): what the program
    sees after the join -- buffers, presence, reference counts -- is what libomptarget
    16 gives, on every plugin, with the cheap path and with the general code; no
    device memory is left and no construct failed."""
    extra = None
    if config == "nextgen-general":
        config, extra = "nextgen", {"OFFLOAD_SHIM_NO_PLAN": "1"}
    out = _check(exes["threads_mapping.c"], [seed, steps], config, reports, extra)
    assert out[0] == "team of 4, shared data absent while held: 0 0 0 0", out


# -- in process: the interposer's entry points from Python threads ----------------------

class _BinDesc(ctypes.Structure):
    _fields_ = [("n", ctypes.c_int32), ("images", ctypes.c_void_p),
                ("hb", ctypes.c_void_p), ("he", ctypes.c_void_p)]


NBUF_SHARED, NBUF_PRIVATE, WORDS = 3, 2, 8


class _Harness:
    """The bundled plugin, an interposer, the sample image registered through
    ``__tgt_register_lib`` (kernel ``increment(long *p, long n)``) and the
    interposer's entry points bound with ctypes (calls release the GIL: the
    constructs of several Python threads run at once)."""

    def __init__(self, nthreads: int):
        import offload_shim as osh
        from offload_shim.abi import tgt_rtl as T
        from offload_shim.interposer import load_interposer
        self.T = T
        self._keep = []
        self.desc, self.region = self.descriptor()
        self.rt = osh.Runtime([], bundled=True)
        self._cm = osh.interpose(self.rt, policy="mandatory")
        self.ip = self._cm.__enter__()
        lib = self.lib = load_interposer()
        # getattr: a name starting with two underscores would be mangled in a class
        self.register = getattr(lib, "__tgt_register_lib")
        self.unregister = getattr(lib, "__tgt_unregister_lib")
        self.register.argtypes = self.unregister.argtypes = [ctypes.c_void_p]
        data_args = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32] + [ctypes.c_void_p] * 6
        self.fns = {}
        for nm in ("begin", "end", "update"):
            f = self.fns[nm] = getattr(lib, f"__tgt_target_data_{nm}_mapper")
            f.argtypes = data_args
            f.restype = None
        k = self.fns["kernel"] = getattr(lib, "__tgt_target_kernel")
        k.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32,
                      ctypes.c_void_p, ctypes.c_void_p]
        k.restype = ctypes.c_int32
        lib.omp_target_is_present.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.omp_target_is_present.restype = ctypes.c_int
        self.register(ctypes.addressof(self.desc))
        # buffers in one block: shared ones, then each thread's private ones
        n = NBUF_SHARED + nthreads * NBUF_PRIVATE
        self.block = (ctypes.c_int64 * (n * 2 * WORDS))()
        self.bufs = [ctypes.addressof(self.block) + 16 * WORDS * b for b in range(n)]
        self.nthreads = nthreads

    def descriptor(self):
        """A ``__tgt_bin_desc`` of the sample image with host entries of its own:
        (descriptor, the host address of its ``increment`` region)."""
        import offload_shim as osh
        T = self.T
        img = osh.OffloadImage.sample()
        data = ctypes.create_string_buffer(img.data, len(img.data))
        anchors = ctypes.create_string_buffer(8)
        scale = ctypes.c_double(3.0)
        names = [e.name.encode() for e in img.entries]
        ents = (T.OffloadEntry * len(img.entries))()
        for k, e in enumerate(img.entries):
            ents[k].addr = ctypes.addressof(scale) if e.size else ctypes.addressof(anchors) + k
            ents[k].name = names[k]
            ents[k].size = e.size
        dimg = T.DeviceImage()
        dimg.ImageStart = ctypes.addressof(data)
        dimg.ImageEnd = ctypes.addressof(data) + len(img.data)
        base = ctypes.addressof(ents)
        dimg.EntriesBegin = ctypes.cast(base, T.OffloadEntryP)
        dimg.EntriesEnd = ctypes.cast(base + ctypes.sizeof(ents), T.OffloadEntryP)
        desc = _BinDesc(1, ctypes.addressof(dimg), base, base + ctypes.sizeof(ents))
        self._keep += [data, anchors, scale, names, ents, dimg, desc]
        region = ctypes.addressof(anchors) + [e.name for e in img.entries].index("increment")
        return desc, region

    def shared(self, s: int) -> int:
        return self.bufs[s]

    def private(self, t: int, p: int) -> int:
        return self.bufs[NBUF_SHARED + t * NBUF_PRIVATE + p]

    def fill(self) -> None:
        for b, addr in enumerate(self.bufs):
            arr = (ctypes.c_int64 * WORDS).from_address(addr)
            arr[:] = [1000 * b + j for j in range(WORDS)]

    def rows(self) -> list:
        """The table rows of the buffers (not the image's global)."""
        lo, hi = self.bufs[0], self.bufs[-1] + 8 * WORDS
        return [e for e in self.ip.mappings(0) if lo <= e.begin < hi]

    def reset(self) -> None:
        """Unmap every buffer (``delete``), whatever an earlier example left."""
        from offload_shim.interposer.llvm.omptarget import MAP_DELETE
        for e in self.rows():
            self.data("end", [(e.begin, MAP_DELETE)])

    def words(self, addr: int) -> list[int]:
        return list((ctypes.c_int64 * WORDS).from_address(addr))

    def data(self, kind: str, maps) -> None:
        """``maps``: (host address, map type) of whole buffers."""
        n = len(maps)
        arr = (ctypes.c_void_p * n)(*[a for a, _t in maps])
        sizes = (ctypes.c_int64 * n)(*[8 * WORDS] * n)
        types = (ctypes.c_int64 * n)(*[t for _a, t in maps])
        self.fns[kind](None, 0, n, arr, arr, sizes, types, None, None)

    def kernel(self, target: int, target_type: int, extra=(), region=None) -> int:
        """``increment(target, WORDS)`` with ``target`` mapped as ``target_type`` and
        the ``extra`` (address, type) maps (``region``: the host address of another
        descriptor's ``increment``)."""
        from offload_shim.interposer.llvm.omptarget import MAP_LITERAL, MAP_TARGET_PARAM
        args = [(target, target, 8 * WORDS, target_type | MAP_TARGET_PARAM),
                (WORDS, WORDS, 0, MAP_LITERAL | MAP_TARGET_PARAM)]
        args += [(a, a, 8 * WORDS, t) for a, t in extra]
        n = len(args)
        bases = (ctypes.c_void_p * n)(*[a[0] for a in args])
        ptrs = (ctypes.c_void_p * n)(*[a[1] for a in args])
        sizes = (ctypes.c_int64 * n)(*[a[2] for a in args])
        types = (ctypes.c_int64 * n)(*[a[3] for a in args])
        ka = self.T.KernelArgs()
        ka.Version, ka.NumArgs = 2, n
        ka.ArgBasePtrs, ka.ArgPtrs, ka.ArgSizes, ka.ArgTypes = bases, ptrs, sizes, types
        return self.fns["kernel"](None, 0, 1, 1, region or self.region, ctypes.byref(ka))

    def close(self) -> None:
        self.unregister(ctypes.addressof(self.desc))
        self._cm.__exit__(None, None, None)
        self.rt.close()


def _ops(rnd: random.Random, steps: int) -> list[tuple]:
    """One thread's operations: ("enter"|"exit"|"update"|"present", s),
    ("kernel", p, s or None) (private p incremented, shared s mapped `to` too),
    ("bracket", p) (enter p, increment it through the existing row, exit from);
    every exit matches an earlier enter of the same thread."""
    ops, held = [], [0] * NBUF_SHARED
    for _ in range(steps):
        what = rnd.choice(["enter", "exit", "update", "present", "kernel", "kernel",
                           "bracket"])
        s = rnd.randrange(NBUF_SHARED)
        if what in ("exit", "update", "present") and not held[s]:
            what = "enter"
        if what == "enter":
            held[s] += 1
        elif what == "exit":
            held[s] -= 1
        if what == "kernel":
            ops.append(("kernel", rnd.randrange(NBUF_PRIVATE),
                        s if rnd.random() < 0.7 else None))
        elif what == "bracket":
            ops.append(("bracket", rnd.randrange(NBUF_PRIVATE)))
        else:
            ops.append((what, s))
    return ops


def _run_thread(h: _Harness, t: int, ops, barrier, problems: list) -> None:
    from offload_shim.interposer.llvm.omptarget import MAP_FROM, MAP_TO
    barrier.wait()
    for op in ops:
        if op[0] == "enter":
            h.data("begin", [(h.shared(op[1]), MAP_TO)])
        elif op[0] == "exit":
            h.data("end", [(h.shared(op[1]), MAP_FROM)])
        elif op[0] == "update":
            h.data("update", [(h.shared(op[1]), MAP_FROM)])
            h.data("update", [(h.shared(op[1]), MAP_TO)])
        elif op[0] == "present":
            if h.lib.omp_target_is_present(h.shared(op[1]), 0) != 1:
                problems.append(f"thread {t}: shared {op[1]} absent while held")
        elif op[0] == "kernel":
            extra = [(h.shared(op[2]), MAP_TO)] if op[2] is not None else []
            rc = h.kernel(h.private(t, op[1]), MAP_TO | MAP_FROM, extra)
            if rc != 0:
                problems.append(f"thread {t}: kernel returned {rc}")
        else:
            p = h.private(t, op[1])
            h.data("begin", [(p, MAP_TO)])
            rc = h.kernel(p, MAP_TO | MAP_FROM)
            h.data("end", [(p, MAP_FROM)])
            if rc != 0:
                problems.append(f"thread {t}: kernel returned {rc}")


@pytest.fixture
def harness():
    """Per test (all of its hypothesis examples): closed at its end, so the bundled
    plugin holds no memory between tests (conftest's check)."""
    from offload_shim.hostplugin import bundled_plugin_path
    try:
        bundled_plugin_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    h = _Harness(nthreads=3)
    yield h
    h.close()


@pytest.mark.parametrize("cheap", [True, False], ids=["cheap-path", "general-code"])
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 40))
def test_threads_in_process(harness, cheap, seed, steps):
    """Three Python threads call the interposer's entry points at once (thread switches
    forced every few microseconds).  After the join: each private buffer was
    incremented once per kernel on it, the shared ones are unchanged, the table holds
    exactly the shared buffers still entered with their summed reference counts
    (``omp_target_is_present`` agrees), nothing failed; after the remaining exits
    the table is empty and the device holds no memory once the C side's repeats are
    forgotten (the cheap path keeps none between constructs)."""
    h = harness
    ip = h.ip
    h.reset()
    ip.fast.enabled = cheap
    rnd = random.Random(seed)
    h.fill()
    before = {a: h.words(a) for a in h.bufs}
    plans = [_ops(rnd, steps) for _ in range(h.nthreads)]
    barrier = threading.Barrier(h.nthreads)
    problems: list[str] = []
    errors_before = len(ip.errors)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(5e-6)
    try:
        threads = [threading.Thread(target=_run_thread, args=(h, t, plans[t], barrier,
                                                              problems))
                   for t in range(h.nthreads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        assert not any(th.is_alive() for th in threads), "a thread did not finish"
    finally:
        sys.setswitchinterval(interval)
    assert problems == [] and ip.errors[errors_before:] == [], (problems, ip.errors)
    # the buffers
    for t in range(h.nthreads):
        for p in range(NBUF_PRIVATE):
            n = sum(1 for op in plans[t] if op[0] in ("kernel", "bracket") and op[1] == p)
            addr = h.private(t, p)
            assert h.words(addr) == [w + n for w in before[addr]], (t, p)
    for s in range(NBUF_SHARED):
        assert h.words(h.shared(s)) == before[h.shared(s)]
    # the table: the shared buffers still entered, with the sum of what stays entered
    held = [0] * NBUF_SHARED
    for ops in plans:
        for op in ops:
            if op[0] in ("enter", "exit"):
                held[op[1]] += 1 if op[0] == "enter" else -1
    rows = {(e.begin, e.end - e.begin): (e.dyn, e.hold) for e in h.rows()}
    want = {(h.shared(s), 8 * WORDS): (held[s], 0) for s in range(NBUF_SHARED) if held[s]}
    assert rows == want
    for s in range(NBUF_SHARED):
        assert h.lib.omp_target_is_present(h.shared(s), 0) == (1 if held[s] else 0)
    # release what is left: the table empties, the device memory is balanced
    from offload_shim.interposer.llvm.omptarget import MAP_FROM
    for s in range(NBUF_SHARED):
        for _ in range(held[s]):
            h.data("end", [(h.shared(s), MAP_FROM)])
    assert h.rows() == []
    # the C side's kernel repeats keep the device memory of the constructs they repeat
    # with rows of their own (interposer/llvm/repeat.py MAX_HELD_BYTES) until they are
    # forgotten: an invalidation gives it back
    ip.fast.invalidate()
    assert ip.devices[0].allocations == (0, 0)


@pytest.mark.parametrize("cheap", [True, False], ids=["cheap-path", "general-code"])
def test_registration_while_threads_offload(harness, cheap):
    """A thread registers a second copy of the image, runs its kernel and unregisters
    it, again and again, while two threads launch the first copy's kernel: the
    registration lock and the plans' invalidation keep both correct (each kernel ran
    exactly once per construct, nothing failed, no row is left)."""
    from offload_shim.interposer.llvm.omptarget import MAP_FROM, MAP_TO
    h = harness
    ip = h.ip
    h.reset()
    ip.fast.enabled = cheap
    h.fill()
    desc2, region2 = h.descriptor()
    stop = threading.Event()
    problems: list = []
    cycles = []

    def churn():
        buf = (ctypes.c_int64 * WORDS)()
        n = 0
        while not stop.is_set() or n < 3:
            h.register(ctypes.addressof(desc2))
            buf[:] = [0] * WORDS
            rc = h.kernel(ctypes.addressof(buf), MAP_TO | MAP_FROM, region=region2)
            if rc != 0 or list(buf) != [1] * WORDS:
                problems.append(("second copy", rc, list(buf)))
            h.unregister(ctypes.addressof(desc2))
            n += 1
        cycles.append(n)

    def work(t):
        p = h.private(t, 0)
        for _ in range(150):
            rc = h.kernel(p, MAP_TO | MAP_FROM, [(h.shared(0), MAP_TO)])
            if rc != 0:
                problems.append(("first copy", t, rc))

    before = {t: h.words(h.private(t, 0)) for t in range(2)}
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        churner = threading.Thread(target=churn)
        workers = [threading.Thread(target=work, args=(t,)) for t in range(2)]
        churner.start()
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        stop.set()
        churner.join(120)
        assert not churner.is_alive() and not any(w.is_alive() for w in workers)
    finally:
        sys.setswitchinterval(interval)
    assert problems == [] and ip.errors == [], (problems, ip.errors)
    assert cycles and cycles[0] >= 3
    for t in range(2):
        assert h.words(h.private(t, 0)) == [w + 150 for w in before[t]]
    assert h.rows() == []
    assert len(ip.libraries) == 1
