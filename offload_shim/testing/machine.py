"""The lifecycle state machine: random register/unload and init/deinit
sequences against any plugin, checked against a model after every step.

:func:`make_lifecycle_machine` builds a hypothesis ``RuleBasedStateMachine``
for one plugin file (and ABI view) that drives only the public runtime API
(:class:`~offload_shim.Runtime`, :class:`~offload_shim.Device`,
:meth:`~offload_shim.OffloadImage.sample`).  A model kept on the side says
what must be registered, loaded, mapped, pending and allocated; invariants
compare it with what the runtime reports after every step.  On the bundled
host plugin they also compare it with what the plugin itself saw (call
counters, device state, live allocations; no contract violation may ever
be recorded), and extra rules inject faults there.

Semantics checked (docs/references.md):

* libgomp GOMP_offload_register_ver: an image registered while a device is initialised is
  loaded into it at once, otherwise it is pending and loaded at init;
  unregister unloads it, drops its host->target mappings and its pending
  entry.
* DeviceTy::initOnce, LLVM D120089, llvm-project #49284: first use initialises a device exactly once, also
  when several threads touch it at once; deinit drains the pool first (LLVM GenericDeviceTy::deinit).
* llvm-project #74507: creating a runtime makes no plugin call.
* ROCm aomp #159, llvm-project #148615: a failed ``init_device`` makes the Device FAILED (sticky, LLVM
  call_once) and close never deinitialises it; failed image loads and
  failed allocations leave nothing half set up.

Every value a rule draws is a plain int, so a failing run prints a
replayable program; runtime objects live in bundles (``devices``,
``images``, ``buffers``) and print by name.
"""

from __future__ import annotations

import functools
import inspect
import os
import struct
import sys
import threading
from dataclasses import dataclass, field

from hypothesis import strategies as st
from hypothesis.stateful import (Bundle, MultipleResults, RuleBasedStateMachine, consumes,
                                 initialize, invariant, multiple, precondition, rule)

from .. import errors as E
from ..core.device import Device, DeviceState
from ..core.images import OffloadImage
from ..plugins.loader import load_plugin
from ..core.runtime import Runtime
from . import strategies as S

__all__ = ["LifecycleMachine", "make_lifecycle_machine", "ModelError", "ProcessExhausted",
           "mapping_usage", "run_first_sequence"]

#: every sample image (native/samples/kernels.c) has five host entries
SAMPLE_ENTRIES = 5
#: a thread of a concurrency rule that is still running after this many
#: seconds is reported as a hang (a deadlock), not waited for
THREAD_HANG_S = 120.0

_ENTRY = {  # fault-injection entry names per ABI view of the bundled plugin
    "llvm": {"init": "__tgt_rtl_init_device", "deinit": "__tgt_rtl_deinit_device",
             "load": "__tgt_rtl_load_binary", "alloc": "__tgt_rtl_data_alloc",
             "init_plugin": "__tgt_rtl_init_plugin", "deinit_plugin": "__tgt_rtl_deinit_plugin"},
    "gomp": {"init": "GOMP_OFFLOAD_init_device", "deinit": "GOMP_OFFLOAD_fini_device",
             "load": "GOMP_OFFLOAD_load_image", "alloc": "GOMP_OFFLOAD_alloc",
             "init_plugin": None, "deinit_plugin": None},
    # liboffload: device init/deinit is the device's queue (plugins/liboffload.py)
    "liboffload": {"init": "olCreateQueue", "deinit": "olDestroyQueue",
                   "load": "olCreateProgram", "alloc": "olMemAlloc",
                   "init_plugin": "olInit", "deinit_plugin": "olShutDown"},
}
#: the bundled plugin's device table of each view (HostPluginControl.is_device_initialized)
_ABI_INDEX = {"llvm": 0, "gomp": 1, "liboffload": 2}


#: plugin calls the model predicts exactly (deltas of the bundled plugin's counters)
_COUNTED = ("init", "deinit", "init_plugin", "deinit_plugin")


class ModelError(AssertionError):
    """The runtime (or the plugin) disagrees with the model."""


class ProcessExhausted(BaseException):
    """This process has too little room left for another sequence: the real
    LLVM plugins never unload an image (LLVM <= 18 has no ``unload_image``;
    every ``load_binary`` dlopens a fresh temp copy for good), so each
    sequence leaves its loads mapped and the process runs into
    ``vm.max_map_count``, after which dlopen fails ("failed to map segment")
    for reasons no model can predict; hypothesis then sees a prefix that
    passed before fail early and reports ``FlakyStrategyDefinition``.
    Raised by the teardown of a sequence that passed (after its last draw,
    so hypothesis's record of the run stays consistent), never while a
    failure found in this process is being shrunk; a ``BaseException`` so
    that hypothesis does not take it for a failure but lets it through.  Run
    further sequences in a fresh process (``offload-shim check`` does).
    ``used``/``limit``: mappings in use and ``vm.max_map_count``."""

    def __init__(self, used: int, limit: int, plugin: str):
        self.used, self.limit, self.plugin = used, limit, plugin
        super().__init__(
            f"{used} of vm.max_map_count={limit} memory mappings of this process are in use: "
            f"{plugin} never unloads an image (every load_binary dlopens a new copy), so the "
            "next sequences could fail for reasons outside the model; run more sequences in "
            "fresh processes (offload-shim check PLUGIN does)")


def mapping_usage() -> tuple[int, int] | None:
    """``(memory mappings of this process, vm.max_map_count)``; None where
    unknown (no /proc)."""
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            limit = int(f.read())
        with open("/proc/self/maps", "rb") as f:
            used = sum(1 for _ in f)
    except (OSError, ValueError):
        return None
    return used, limit


def _pattern_bytes(p: int, n: int) -> bytes:
    return bytes((p + i) % 251 for i in range(n))


@dataclass(eq=False)
class Buf:
    """A device allocation handed out by a rule (bundle ``buffers``).
    ``content``: what the device block must hold (None: not written yet)."""
    device: object
    ptr: int
    size: int
    content: bytearray | None = None

    def __repr__(self) -> str:
        return f"Buf(device={self.device.label!r}, ptr={self.ptr:#x}, size={self.size})"


@dataclass
class _Dev:
    """Model of one Device object."""
    state: DeviceState = DeviceState.UNINIT
    live: dict = field(default_factory=dict)     # ptr -> Buf


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ModelError(msg)


def _step(fn):
    """Make rule ``fn`` record each call as a step (innermost decorator, under
    ``@rule``): ``{"i": n, "rule": name, "args": {...}}``, every argument a plain
    value or ``{"ref": "v<i>"}`` -- the object step ``i`` returned (``"v<i>_<k>"``:
    its ``k``-th of several); ``open_runtime`` also says whether it ran the smoke
    sequence (``"smoke"``).  The step goes to the machine's list ``steps`` and to the
    class's ``record`` callable BEFORE the rule runs, so a plugin that crashes the
    process leaves the step it crashed in as the last one recorded.  A rule called by
    another rule (the smoke sequence) is part of the outer step.
    :mod:`offload_shim.testing.sequences` re-runs such steps outside hypothesis."""
    sig = inspect.signature(fn)
    name = fn.__name__

    @functools.wraps(fn)
    def recorded(self, *a, **kw):
        if self._step_depth:
            return fn(self, *a, **kw)
        args = sig.bind(self, *a, **kw).arguments
        i = self._step_no
        self._step_no += 1
        rec = {"i": i, "rule": name,
               "args": {k: self._ref(v) for k, v in args.items() if k != "self"}}
        if name == "open_runtime":
            rec["smoke"] = not getattr(type(self), "_smoke_passed", False)
        self.steps.append(rec)
        sink = type(self).record
        if sink is not None:
            sink(rec)
        self._step_depth += 1
        try:
            result = fn(self, *a, **kw)
        finally:
            self._step_depth -= 1
        if isinstance(result, MultipleResults):
            for k, v in enumerate(result.values):
                self._bind(f"v{i}_{k}", v)
        elif result is not None:
            self._bind(f"v{i}", result)
        return result

    return recorded


class LifecycleMachine(RuleBasedStateMachine):
    """Base machine; use :func:`make_lifecycle_machine` to point it at a
    plugin.  Class attributes set by the factory: ``plugin_path``, ``abi``,
    ``faults`` (fault-injection rules; bundled plugin only), ``threads``
    (concurrency rules), ``pool`` (MemoryManager options), ``trace`` (a
    callable receiving one line per step, or None), ``record`` (a callable
    receiving each step as a dict before it runs, or None; every machine
    also keeps its steps in ``steps``)."""

    plugin_path: str = ""
    abi: str | None = None
    faults: bool = False
    threads: bool = True
    pool: dict | None = None
    trace = None
    record = None
    #: against a plugin that keeps what it loads (any but the bundled one),
    #: the teardown of a passing sequence raises :class:`ProcessExhausted`
    #: once the process uses more than this fraction of ``vm.max_map_count``
    max_mappings: float = 0.85
    _failure_seen: bool = False     # set on the class: a sequence failed here

    devices = Bundle("devices")
    images = Bundle("images")
    buffers = Bundle("buffers")

    # -- set-up / tear-down ---------------------------------------------------------
    def __init__(self):
        super().__init__()
        self.plugin = load_plugin(self.plugin_path, abi=self.abi)
        self.view = self.plugin.abi
        self.rt: Runtime | None = None
        self.dev: dict = {}               # Device -> _Dev (current runtime only)
        self.registered: list = []        # OffloadImage, registration order
        self.accepts: bool | None = None  # does the plugin accept the sample image
        self.n_images = 0
        self.ctl = None
        self.entry = _ENTRY[self.view]
        self.steps: list[dict] = []       # what the rules ran, as data (_step)
        self._step_no = 0
        self._step_depth = 0
        self._names: dict = {}            # id(object) -> "v<i>" (the step that returned it)
        self._objects: dict = {}          # "v<i>" -> object
        if self.plugin.bundled:
            from ..hostplugin import HostPluginControl
            self.ctl = HostPluginControl(self.plugin.path)
            self.base_viol = self.ctl.violation_count()
            self.base_live = self.ctl.live_allocs()
            self.base_calls = self._calls()
            self.exp_calls = dict.fromkeys(self.base_calls, 0)

    def _bind(self, name: str, obj) -> None:
        self._names[id(obj)] = name
        self._objects[name] = obj

    def _ref(self, v):
        """A rule argument as data: plain values as they are, an object of a bundle as
        ``{"ref": name}`` (``None`` and its ``repr`` when no step returned it)."""
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        name = self._names.get(id(v))
        return {"ref": name} if name else {"ref": None, "repr": repr(v)}

    def _log(self, line: str) -> None:
        tr = type(self).trace
        if tr is not None:
            tr(line)

    def teardown(self):
        in_flight = sys.exc_info()[1]     # a rule or invariant failed (teardown is in a finally)
        if isinstance(in_flight, Exception):
            type(self)._failure_seen = True   # shrinking follows: never stop it
        self._teardown_checked()
        if in_flight is None and not self.plugin.bundled and not type(self)._failure_seen:
            use = mapping_usage()
            if use is not None and use[0] > self.max_mappings * use[1]:
                raise ProcessExhausted(use[0], use[1], self.plugin.name)

    def _teardown_checked(self):
        try:
            if self.ctl is not None:
                for v in self.entry.values():
                    if v:
                        self.ctl.fail_nth(v, 0)
            if self.rt is not None:
                self._close_checked()
        finally:
            if self.ctl is not None:
                for v in self.entry.values():
                    if v:
                        self.ctl.fail_nth(v, 0)
        if self.ctl is not None:
            _check(self.ctl.violation_count() == self.base_viol,
                   f"contract violations recorded: {self.ctl.violations()[-5:]}")
            if self.plugin.users == 0:
                _check(self.ctl.live_allocs() == self.base_live,
                       f"{self.ctl.live_allocs() - self.base_live} allocations left in the "
                       "plugin after close")

    # -- helpers --------------------------------------------------------------------
    def _new_image(self) -> OffloadImage:
        """A sample image not yet used in this example.  Images are reused
        across examples (building one parses the ELF, ~10 ms): the pool
        lives on the machine class and grows on demand."""
        pool = type(self).__dict__.get("_image_pool")
        if pool is None:
            pool = []
            type(self)._image_pool = pool
        if self.n_images >= len(pool):
            if pool:
                data, entries = pool[0].data, pool[0].entries
            else:
                t = OffloadImage.sample()
                data, entries = t.data, t.entries
            pool.append(OffloadImage(data, entries, name=f"sample{len(pool) + 1}"))
        img = pool[self.n_images]
        self.n_images += 1
        return img

    def _open(self) -> None:
        before = self._calls()
        self.rt = Runtime([self.plugin], pool=self.pool)
        self.dev = {}
        self.registered = []
        if self.ctl is not None:
            _check(self._calls() == before,
                   "creating a Runtime called the plugin (llvm-project #74507)")
        self._log(f"open runtime {self.rt!r}")

    def _calls(self):
        if self.ctl is None:
            return None
        return {k: self.ctl.call_count(v) for k, v in self.entry.items()
                if v and k in _COUNTED}

    def _acquire(self) -> list:
        """rt.devices (acquires the plugin) and the acceptance of the sample."""
        was = self.plugin.initialized
        devs = self.rt.devices
        if not was and self.ctl is not None and self._exports("init_plugin"):
            self.exp_calls["init_plugin"] += 1
        if self.accepts is None:
            self.accepts = bool(self.plugin.is_valid_binary(self._new_image()))
        return devs

    def _exports(self, key: str) -> bool:
        """The plugin exports the entry point the model counts as ``key``."""
        full = self.entry[key]
        return bool(full) and full.removeprefix(self.plugin.prefix) in self.plugin.symbols

    def _model(self, d) -> _Dev:
        m = self.dev.get(d)
        if m is None:
            # a device of a closed runtime
            _check(d.state is DeviceState.CLOSED, f"{d!r} of a closed runtime is not CLOSED")
            return _Dev(DeviceState.CLOSED)
        return m

    def _expect_init(self, m: _Dev) -> None:
        """Model side of an initialisation (explicit or first use)."""
        if m.state is DeviceState.UNINIT:
            m.state = DeviceState.READY
            if self.ctl is not None:
                self.exp_calls["init"] += 1

    def _use_error(self, m: _Dev):
        """The exception a use of a device in this state must raise, or None."""
        if m.state is DeviceState.CLOSED:
            return E.LifecycleError
        if m.state is DeviceState.FAILED:
            return E.DeviceInitError
        return None

    def _expect_raises(self, exc, fn, *a, **kw):
        try:
            fn(*a, **kw)
        except exc as e:
            return e
        raise ModelError(f"{getattr(fn, '__name__', fn)} did not raise {exc.__name__}")

    def _valid(self, buf: Buf) -> bool:
        m = self.dev.get(buf.device)
        return m is not None and m.live.get(buf.ptr) is buf

    def _stale_reused(self, buf: Buf) -> bool:
        """A stale Buf whose address was handed out again (ABA: cannot be told apart)."""
        m = self.dev.get(buf.device)
        return (m is not None and not self._valid(buf) and buf.ptr in m.live)

    def _drop_live(self, m: _Dev) -> tuple[int, int]:
        n, b = len(m.live), sum(x.size for x in m.live.values())
        m.live.clear()
        return n, b

    # -- runtime rules --------------------------------------------------------------
    @initialize()
    @_step
    def open_runtime(self):
        self._open()
        if not getattr(type(self), "_smoke_passed", False):
            self._smoke()
            type(self)._smoke_passed = True

    def _smoke(self) -> None:
        """The first example of a process (and every one until this passes) registers an
        image, initialises device 0 and launches ``vec_add`` on it before its random
        steps: a plugin that fails only there (``exit()`` in ``init_plugin``, a crash in
        ``load_binary``) is found by the shortest run (``check --max-examples 3 --steps
        5``), whatever steps the first sequences draw.  Through the rules themselves, so
        the model follows; the device and image stay (outside the bundles) until the
        example's teardown closes the runtime."""
        self._log("smoke: register, init device 0, launch vec_add")
        img = self._new_image()
        self.register(img)
        devs = self.rt.devices
        if not devs:
            return
        d = devs[0]
        if d not in self.dev:
            _check(d.state is DeviceState.UNINIT, f"fresh {d!r} is not UNINIT")
            self.dev[d] = _Dev()
        self.init_device(d)
        self.launch_vec_add(d, img, 16)

    @precondition(lambda self: self.rt is None)
    @rule()
    @_step
    def reopen_runtime(self):
        self._open()

    @precondition(lambda self: self.rt is not None)
    @rule()
    @_step
    def close_runtime(self):
        self._close_checked()

    def _close_checked(self):
        expected = {}
        for d, m in self.dev.items():
            if m.state is DeviceState.READY:
                n, b = self._drop_live(m)
                if n:
                    expected[d.label] = (n, b)
                if self.ctl is not None:
                    self.exp_calls["deinit"] += 1
            m.state = DeviceState.CLOSED
        rt, self.rt = self.rt, None
        self._log(f"close runtime {rt!r}")
        was = self.plugin.initialized
        leaks = rt.close()
        _check(leaks == expected, f"close() reported leaks {leaks}, model {expected}")
        _check(rt.close() == {}, "second close() is not a no-op")
        if was and self.ctl is not None and self.plugin.users == 0 \
                and self._exports("deinit_plugin"):
            self.exp_calls["deinit_plugin"] += 1
        for d in self.dev:
            _check(d.state is DeviceState.CLOSED, f"{d!r} not CLOSED after close()")
        self._expect_raises(E.LifecycleError, rt.register_image, self._new_image())
        self.registered = []
        self.dev = {}
        self._check_plugin_counters()

    @precondition(lambda self: self.rt is not None)
    @rule(target=devices, index=S.device_indices())
    @_step
    def get_device(self, index):
        devs = self._acquire()
        if not devs:
            return multiple()
        d = devs[index % len(devs)]
        _check(self.rt.device(index % len(devs)) is d, "rt.device(i) is not rt.devices[i]")
        if d not in self.dev:
            _check(d.state is DeviceState.UNINIT, f"fresh {d!r} is not UNINIT")
            self.dev[d] = _Dev()
        self._log(f"device {d.label}")
        return d

    @rule(d=devices)
    @_step
    def init_device(self, d):
        m = self._model(d)
        self._log(f"init {d.label} ({m.state.value})")
        exc = self._use_error(m)
        if exc:
            self._expect_raises(exc, d.init)
            return
        d.init()
        self._expect_init(m)

    @rule(d=devices)
    @_step
    def deinit_device(self, d):
        m = self._model(d)
        self._log(f"deinit {d.label} ({m.state.value})")
        if m.state is not DeviceState.READY:
            self._expect_raises(E.LifecycleError, d.deinit)
            return
        n, b = self._drop_live(m)
        got = d.deinit()
        m.state = DeviceState.UNINIT
        if self.ctl is not None:
            self.exp_calls["deinit"] += 1
        _check(tuple(got) == (n, b), f"deinit() reported {got}, model {(n, b)}")

    # -- images ---------------------------------------------------------------------
    @rule(target=images)
    @_step
    def new_image(self):
        return self._new_image()

    @precondition(lambda self: self.rt is not None)
    @rule(img=images)
    @_step
    def register(self, img):
        self._log(f"register {img.name}")
        self._acquire()
        if not self.accepts:
            self._expect_raises(E.InvalidImageError, self.rt.register_image, img)
            return
        self.rt.register_image(img)
        if img not in self.registered:
            self.registered.append(img)

    @precondition(lambda self: self.rt is not None)
    @rule(img=images)
    @_step
    def unregister(self, img):
        self._log(f"unregister {img.name}")
        if img not in self.registered:
            self._expect_raises(E.ImageNotRegisteredError, self.rt.unregister_image, img)
            return
        self.rt.unregister_image(img)
        self.registered.remove(img)

    @rule(d=devices, img=images)
    @_step
    def read_global(self, d, img):
        """``osh_scale`` through global_address, translate and retrieve (3.0)."""
        m = self._model(d)
        self._log(f"read_global {d.label} {img.name}")
        exc = self._use_error(m)
        if exc:
            self._expect_raises(exc, d.global_address, "osh_scale", img)
            return
        if img not in self.registered:
            self._expect_raises(KeyError, d.global_address, "osh_scale", img)
            self._expect_init(m)
            return
        g = d.global_address("osh_scale", img)
        self._expect_init(m)
        _check(d.translate(img.host_address("osh_scale")) == g,
               "translate(host osh_scale) != global_address")
        out = bytearray(8)
        d.retrieve(out, g)
        _check(struct.unpack("d", out)[0] == 3.0, f"osh_scale reads {struct.unpack('d', out)}")

    # -- memory ---------------------------------------------------------------------
    @rule(target=buffers, d=devices, size=S.alloc_sizes())
    @_step
    def alloc(self, d, size):
        m = self._model(d)
        self._log(f"alloc {d.label} {size}")
        exc = self._use_error(m)
        if exc:
            self._expect_raises(exc, d.alloc, size)
            return multiple()
        ptr = d.alloc(size)
        self._expect_init(m)
        if size == 0:
            _check(ptr == 0, f"alloc(0) returned {ptr:#x}")
            return multiple()
        _check(ptr != 0 and ptr not in m.live, f"alloc returned {ptr:#x} (live: {ptr in m.live})")
        b = Buf(d, ptr, size)
        m.live[ptr] = b
        return b

    @rule(buf=consumes(buffers), twice=st.booleans())
    @_step
    def free(self, buf, twice):
        d = buf.device
        m = self._model(d)
        self._log(f"free {buf!r}")
        if self._stale_reused(buf):
            return
        if m.state is DeviceState.CLOSED:
            # the runtime freed everything at close; a free after it is a lifecycle error
            self._expect_raises(E.LifecycleError, d.free, buf.ptr)
            return
        if not self._valid(buf):
            self._expect_raises(E.UnknownPointerError, d.free, buf.ptr)
            return
        d.free(buf.ptr)
        del m.live[buf.ptr]
        if twice:
            self._expect_raises(E.UnknownPointerError, d.free, buf.ptr)

    @rule(buf=buffers, p=S.patterns())
    @_step
    def submit(self, buf, p):
        d = buf.device
        m = self._model(d)
        self._log(f"submit {buf!r}")
        if self._stale_reused(buf):
            return
        data = _pattern_bytes(p, buf.size)
        exc = self._use_error(m)
        if exc:
            self._expect_raises(exc, d.submit, buf.ptr, data)
            return
        if not self._valid(buf):
            self._expect_raises(E.UnknownPointerError, d.submit, buf.ptr, data)
            self._expect_init(m)
            return
        d.submit(buf.ptr, data)
        buf.content = bytearray(data)
        with_too_much = bytes(buf.size + 1)
        self._expect_raises(ValueError, d.submit, buf.ptr, with_too_much)

    @rule(buf=buffers)
    @_step
    def retrieve(self, buf):
        d = buf.device
        m = self._model(d)
        self._log(f"retrieve {buf!r}")
        if self._stale_reused(buf):
            return
        out = bytearray(buf.size)
        exc = self._use_error(m)
        if exc:
            self._expect_raises(exc, d.retrieve, out, buf.ptr)
            return
        if not self._valid(buf):
            self._expect_raises(E.UnknownPointerError, d.retrieve, out, buf.ptr)
            self._expect_init(m)
            return
        d.retrieve(out, buf.ptr)
        if buf.content is not None:
            _check(out == buf.content, f"retrieve of {buf!r} differs from what was written")

    # -- kernels --------------------------------------------------------------------
    @rule(buf=buffers, img=images)
    @_step
    def launch_increment(self, buf, img):
        """``increment(p, n)``: every int64 of the block + 1."""
        d = buf.device
        m = self._model(d)
        if not self._valid(buf) or buf.content is None or buf.size < 8:
            return                      # never launch on memory that is not ours
        n = buf.size // 8
        self._log(f"launch increment {buf!r} {img.name}")
        if img not in self.registered:
            self._expect_raises(E.KernelNotFoundError, d.launch, "increment", [buf.ptr, n],
                                image=img)
            return
        d.launch("increment", [buf.ptr, n], image=img)
        vals = struct.unpack_from(f"<{n}q", buf.content)
        struct.pack_into(f"<{n}q", buf.content, 0,
                         *[((v + 1 + (1 << 63)) % (1 << 64)) - (1 << 63) for v in vals])

    @rule(d=devices, img=images, n=S.vector_lengths())
    @_step
    def launch_vec_add(self, d, img, n):
        """Allocate a, b, c of ``n`` doubles, c = a + b, check, free."""
        m = self._model(d)
        self._log(f"launch vec_add {d.label} {img.name} n={n}")
        exc = self._use_error(m)
        if exc:
            self._expect_raises(exc, d.alloc, 8 * n)
            return
        ptrs = [d.alloc(8 * n) for _ in range(3)]
        self._expect_init(m)
        try:
            a = struct.pack(f"<{n}d", *[float(i) for i in range(n)])
            b = struct.pack(f"<{n}d", *[0.5 * i for i in range(n)])
            d.submit(ptrs[0], a)
            d.submit(ptrs[1], b)
            if img not in self.registered:
                self._expect_raises(E.KernelNotFoundError, d.launch, "vec_add",
                                    [*ptrs, n], image=img)
                return
            d.launch("vec_add", [*ptrs, n], image=img)
            out = bytearray(8 * n)
            d.retrieve(out, ptrs[2])
            got = struct.unpack(f"<{n}d", out)
            _check(list(got) == [1.5 * i for i in range(n)], "vec_add result is wrong")
        finally:
            for p in ptrs:
                d.free(p)

    # -- concurrency (llvm-project #49284) -------------------------------------------------
    @precondition(lambda self: self.threads and self.rt is not None)
    @rule(d=devices, nthreads=S.thread_counts(), size=S.alloc_sizes(max_size=1 << 15),
          reg=st.booleans())
    @_step
    def concurrent_use(self, d, nthreads, size, reg):
        """``nthreads`` threads first-touch ``d`` at once: alloc, submit,
        retrieve, free; with ``reg`` each also registers, launches from and
        unregisters its own image.  Init must run once (llvm-project #49284)."""
        m = self._model(d)
        self._log(f"concurrent_use {d.label} x{nthreads} size={size} reg={reg}")
        exc = self._use_error(m)
        size = max(size, 8)
        mine = [self._new_image() for _ in range(nthreads)] \
            if reg and self.accepts and not exc else []
        barrier = threading.Barrier(nthreads)
        errors: list = []
        done: list = []

        def work(i):
            try:
                barrier.wait()
                if mine:
                    self.rt.register_image(mine[i])
                for _ in range(3):
                    p = d.alloc(size)
                    data = _pattern_bytes(i, size)
                    d.submit(p, data)
                    if mine:
                        d.launch("increment", [p, 1], image=mine[i])
                    out = bytearray(size)
                    d.retrieve(out, p)
                    if mine:
                        v = struct.unpack_from("<q", data)[0] + 1
                        data = struct.pack("<q", v) + data[8:]
                    if out != data:
                        errors.append(ModelError(f"thread {i}: retrieve differs"))
                    d.free(p)
                if mine:
                    self.rt.unregister_image(mine[i])
                done.append(i)
            except BaseException as e:          # collected and judged below
                errors.append(e)

        ts = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(nthreads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(THREAD_HANG_S)
            _check(not t.is_alive(), f"a thread of concurrent_use hangs (> {THREAD_HANG_S} s)")
        if exc:
            _check(len(errors) == nthreads and all(isinstance(e, exc) for e in errors),
                   f"expected {exc.__name__} from every thread, got {errors!r}")
            return
        if errors:
            raise errors[0]
        self._expect_init(m)

    @precondition(lambda self: self.threads and self.rt is not None)
    @rule(nthreads=S.thread_counts(4))
    @_step
    def concurrent_register(self, nthreads):
        """Threads register and unregister their own images while one thread
        per device first-touches every device (libgomp GOMP_offload_register_ver under threads)."""
        devs = self._acquire()
        self._log(f"concurrent_register x{nthreads}")
        if not self.accepts:
            return
        mine = [self._new_image() for _ in range(nthreads)]
        for d in devs:
            self.dev.setdefault(d, _Dev(d.state))
        touch = [d for d in devs if self._model(d).state in (DeviceState.UNINIT,
                                                               DeviceState.READY)]
        barrier = threading.Barrier(nthreads + len(touch))
        errors: list = []

        def reg(i):
            try:
                barrier.wait()
                self.rt.register_image(mine[i])
                self.rt.unregister_image(mine[i])
            except BaseException as e:
                errors.append(e)

        def use(d):
            try:
                barrier.wait()
                d.free(d.alloc(64))
            except BaseException as e:
                errors.append(e)

        ts = [threading.Thread(target=reg, args=(i,), daemon=True) for i in range(nthreads)]
        ts += [threading.Thread(target=use, args=(d,), daemon=True) for d in touch]
        for t in ts:
            t.start()
        for t in ts:
            t.join(THREAD_HANG_S)
            _check(not t.is_alive(), f"a thread of concurrent_register hangs (> {THREAD_HANG_S} s)")
        if errors:
            raise errors[0]
        for d in touch:
            m = self._model(d)
            if m.state is DeviceState.UNINIT:
                m.state = DeviceState.READY
                if self.ctl is not None:
                    self.exp_calls["init"] += 1

    # -- fault injection (bundled plugin; ROCm aomp #159, llvm-project #148615) ------------
    def _faulty(self):
        return self.faults and self.ctl is not None and self.rt is not None

    @precondition(lambda self: self._faulty())
    @rule(d=devices)
    @_step
    def fail_init(self, d):
        """init_device fails: the Device is FAILED for this runtime (sticky),
        the plugin device is not initialised, close will not deinit it."""
        m = self._model(d)
        if m.state is not DeviceState.UNINIT:
            return
        self._log(f"fail_init {d.label}")
        self.ctl.fail_nth(self.entry["init"], 1)
        try:
            self._expect_raises(E.DeviceInitError, d.init)
        finally:
            self.ctl.fail_nth(self.entry["init"], 0)
        self.exp_calls["init"] += 1               # the call happened and failed
        m.state = DeviceState.FAILED
        self._expect_raises(E.DeviceInitError, d.alloc, 8)   # sticky

    @precondition(lambda self: self._faulty())
    @rule(img=images)
    @_step
    def fail_load_on_register(self, img):
        """An image load fails during register: the image is not registered
        and is unloaded from devices that took it (rollback)."""
        ready = [d for d, m in self.dev.items() if m.state is DeviceState.READY]
        if not ready or img in self.registered or not self.accepts:
            return
        self._log(f"fail_load_on_register {img.name}")
        self.ctl.fail_nth(self.entry["load"], len(ready))    # the last device fails
        try:
            self._expect_raises(E.InvalidImageError, self.rt.register_image, img)
        finally:
            self.ctl.fail_nth(self.entry["load"], 0)
        _check(img not in self.rt.images, "image registered although its load failed")

    @precondition(lambda self: self._faulty())
    @rule(d=devices)
    @_step
    def fail_load_on_init(self, d):
        """The pending image load fails during init: the device is
        deinitialised again (what was set up is torn down) and stays UNINIT."""
        m = self._model(d)
        if m.state is not DeviceState.UNINIT or not self.registered:
            return
        self._log(f"fail_load_on_init {d.label}")
        self.ctl.fail_nth(self.entry["load"], len(self.registered))
        try:
            self._expect_raises(E.InvalidImageError, d.init)
        finally:
            self.ctl.fail_nth(self.entry["load"], 0)
        self.exp_calls["init"] += 1
        self.exp_calls["deinit"] += 1
        _check(d.state is DeviceState.UNINIT, f"{d!r} after a failed load at init")

    @precondition(lambda self: self._faulty())
    @rule(target=buffers, d=devices, size=S.alloc_sizes(), nth=st.integers(1, 2))
    @_step
    def fail_alloc(self, d, size, nth):
        """The next (or next but one) plugin allocation fails: the pool's OOM
        ladder frees its cache and retries once; either the retry succeeds or
        OutOfDeviceMemoryError is raised, and nothing leaks (ROCm aomp #159)."""
        m = self._model(d)
        if m.state is not DeviceState.READY or size == 0:
            return multiple()
        self._log(f"fail_alloc {d.label} {size} nth={nth}")
        self.ctl.fail_nth(self.entry["alloc"], nth)
        try:
            ptr = d.alloc(size)
        except E.OutOfDeviceMemoryError as e:
            _check(e.requested == size, f"OutOfDeviceMemoryError.requested {e.requested}")
            return multiple()
        finally:
            self.ctl.fail_nth(self.entry["alloc"], 0)
        _check(ptr != 0 and ptr not in m.live, f"alloc returned {ptr:#x}")
        b = Buf(d, ptr, size)
        m.live[ptr] = b
        return b

    # -- invariants -------------------------------------------------------------------
    @invariant()
    def runtime_matches_model(self):
        if self.rt is None:
            return
        _check(self.rt.images == self.registered,
               f"rt.images {[i.name for i in self.rt.images]} != model "
               f"{[i.name for i in self.registered]}")
        for d, m in self.dev.items():
            _check(d.state is m.state, f"{d!r}: state {d.state.value}, model {m.state.value}")
            ready = m.state is DeviceState.READY
            loaded = self.registered if ready else []
            _check({i.id for i in d.loaded_images} == {i.id for i in loaded},
                   f"{d!r}: loaded {[i.name for i in d.loaded_images]}, model "
                   f"{[i.name for i in loaded]}")
            pend = [] if ready or m.state is DeviceState.CLOSED else self.registered
            _check(self.rt.pending(d) == pend,
                   f"{d!r}: pending {[i.name for i in self.rt.pending(d)]}, model "
                   f"{[i.name for i in pend]}")
            _check(len(d.address_map) == SAMPLE_ENTRIES * len(loaded),
                   f"{d!r}: {len(d.address_map)} mappings, model "
                   f"{SAMPLE_ENTRIES * len(loaded)}")
            for img in self.registered:
                try:
                    d.translate(img.host_address("osh_scale"))
                    mapped = True
                except KeyError:
                    mapped = False
                _check(mapped == ready, f"{d!r}: {img.name} osh_scale mapped={mapped}")
            n, b = len(m.live), sum(x.size for x in m.live.values())
            _check(d.allocations == (n, b), f"{d!r}: allocations {d.allocations}, model {(n, b)}")
            _check(self.plugin.device_initialized(d.index) == ready,
                   f"{d!r}: plugin device_initialized={self.plugin.device_initialized(d.index)}")
            if ready:
                st_ = d.pool.stats
                _check(st_.live_blocks == n, f"{d!r}: pool live_blocks {st_.live_blocks}, model {n}")
                if self.ctl is not None:
                    live = self.ctl.live_allocs(d.index)
                    _check(live == st_.live_blocks + st_.cached_blocks,
                           f"{d!r}: plugin holds {live} blocks, pool {st_.live_blocks} live + "
                           f"{st_.cached_blocks} cached")
            if self.ctl is not None:
                abi = _ABI_INDEX[self.view]
                _check(self.ctl.is_device_initialized(abi, d.index) == ready,
                       f"{d!r}: plugin says initialised="
                       f"{self.ctl.is_device_initialized(abi, d.index)}")
        self._check_plugin_counters()

    def _check_plugin_counters(self):
        if self.ctl is None:
            return
        _check(self.ctl.violation_count() == self.base_viol,
               f"contract violation recorded by the plugin: {self.ctl.violations()[-3:]}")
        now = self._calls()
        got = {k: now[k] - self.base_calls[k] for k in now}
        _check(got == self.exp_calls, f"plugin calls {got}, model {self.exp_calls}")


def run_first_sequence(machine_cls: type) -> int:
    """Run the sequence every ``offload-shim check`` starts with, through the rules of
    ``machine_cls`` (a :func:`make_lifecycle_machine` class) and its model: open the
    runtime, register a sample image, get device 0 and initialise it, allocate 64
    bytes, submit, launch ``increment``, retrieve, free, unregister, close -- so the
    plugin's ``init_plugin``/``number_of_devices``/``init_device``/``load_binary``,
    data and launch entry points always run once, whatever hypothesis draws (random
    sequences may register nothing or never reach a device).  Raises what a rule
    raises (a finding); a plugin with no device or that refuses the sample image ends
    the sequence early, as the model expects.  Returns the number of steps run."""
    m = machine_cls()
    steps = 0
    try:
        m.open_runtime()
        img = m.new_image()
        m.register(img)
        d = m.get_device(0)
        steps = 3
        if isinstance(d, Device):
            m.init_device(d)
            buf = m.alloc(d, 64)
            steps += 2
            if isinstance(buf, Buf):
                m.submit(buf, 1)
                m.launch_increment(buf, img)
                m.retrieve(buf)
                m.free(buf, False)
                steps += 4
        m.unregister(img)
        m.close_runtime()
        steps += 2
    except Exception as exc:
        exc.add_note(f"in the first sequence of the check (open, register, device 0, init, "
                     f"alloc, submit, launch, retrieve, free, unregister, close), after "
                     f"{steps} steps")
        raise
    finally:
        m.teardown()
    return steps


def make_lifecycle_machine(plugin_path, abi: str | None = None, *, faults: bool | None = None,
                           threads: bool = True, pool: dict | None = None, trace=None,
                           record=None, name: str | None = None) -> type:
    """A :class:`LifecycleMachine` subclass for one plugin.

    ``plugin_path``: the plugin ``.so``; ``abi``: ``"llvm"``/``"gomp"`` view
    (for the bundled plugin, which exports both; None: the loader's
    choice).  ``faults``: fault-injection rules (default: on for the
    bundled plugin, which is the only one that can inject them).
    ``threads``: concurrency rules.  ``pool``: MemoryManager options for
    every device.  ``trace``: callable receiving one line per step.
    ``record``: callable receiving each step as data before it runs (the
    form :mod:`offload_shim.testing.sequences` re-runs and shrinks).

    Run it with ``run_state_machine_as_test(M, settings=...)`` or as a
    ``unittest`` case ``M.TestCase``.  Raises the PluginLoadError family
    when the plugin cannot be loaded (loading makes no plugin call)."""
    plugin = load_plugin(os.fspath(plugin_path), abi=abi)
    attrs = dict(plugin_path=plugin.path, abi=abi, threads=threads,
                 faults=plugin.bundled if faults is None else bool(faults) and plugin.bundled,
                 pool=pool, trace=staticmethod(trace) if trace else None,
                 record=staticmethod(record) if record else None)
    cls_name = name or f"LifecycleMachine_{plugin.name.replace('.', '_')}_{plugin.abi}"
    return type(cls_name, (LifecycleMachine,), attrs)
