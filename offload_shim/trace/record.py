"""The recorder of ``offload-shim run --record TRACE``: runtime events to a trace.

:func:`start` is called by the embedded runtime (:mod:`offload_shim.interposer.embed`)
when the run options carry ``record``: it opens the trace
(:class:`~offload_shim.trace.format.TraceWriter`), gives the runtime's devices a memory
manager event log that writes into it (``pool={"event_log": writer}``: every pool
allocation and free with hit or miss and block size, :mod:`offload_shim.memory.events`),
and :meth:`Recorder.attach` installs the other hooks on the objects of that one
runtime, as instance attributes that call the original:

* ``Runtime.register_image`` / ``unregister_image``: ``image_register`` (name, bytes,
  entries with name, size and kind), ``image_unregister``;
* each ``Device``'s ``_ready`` and ``_teardown``: ``device_init`` / ``device_deinit``
  (with what the teardown found still allocated);
* each ``Plugin``'s ``submit``, ``retrieve``, ``submit_many``, ``retrieve_many`` and
  ``launch``: ``copy`` (direction, bytes, device address) and ``launch`` (kernel name,
  argument count, the construct's teams and threads);
* the interposer's construct callbacks (``FastPath`` ``slow_data`` / ``slow_kernel``):
  ``construct`` with each map entry's size, map type and reference counts after the
  construct, its return code and duration.

Nothing of this exists when not recording: ``run`` without ``--record`` installs no
hook, so its cost there is nil.  While recording, the interposer's cheap path
(:class:`~offload_shim.interposer.plan.FastPath`) is turned off, so every construct
takes the general code (the path ``OFFLOAD_SHIM_NO_PLAN=1`` takes; same results, the
same pool calls one by one), and the pool runs with an event log (its batched hit
path is off, as for any event log).  ``benchmarks/`` measures what that costs
(docs/trace-format.md, "Overhead").

Events are written by the thread that caused them, when it caused them (a construct
when it returns, after the events it caused), each line in one ``write``: a program
that crashes or is killed leaves a trace of everything up to the line in flight.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from .format import TraceWriter

__all__ = ["Recorder", "start", "stop", "active"]

_KINDS = {0: "begin", 1: "end", 2: "update"}

_active: "Recorder | None" = None


def active() -> "Recorder | None":
    """The recorder of this process, or None."""
    return _active


def start(path, argv=None) -> "Recorder":
    """Open the trace at ``path`` and make this process's recorder (``OSError`` if the
    file cannot be created).  Call :meth:`Recorder.attach` once the runtime and the
    interposer exist."""
    global _active
    rec = Recorder(path, argv=argv)
    _active = rec
    return rec


def stop(**end) -> None:
    """Write the ``end`` line (with ``end``'s fields) and close the trace.  Never
    raises (runs at exit)."""
    global _active
    rec, _active = _active, None
    if rec is not None:
        try:
            rec.close(**end)
        except Exception as exc:  # noqa: BLE001 - at exit
            sys.stderr.write(f"offload_shim: cannot finish the trace: {exc}\n")


class Recorder:
    """Hooks one :class:`~offload_shim.Runtime` and its
    :class:`~offload_shim.interposer.interface.Interposer` and writes their events to
    a trace.  ``path``: the trace file; ``argv``: the program's command line (in the
    header)."""

    def __init__(self, path, argv=None):
        self.writer = TraceWriter(path, {"argv": list(argv or []),
                                         "python": sys.version.split()[0]})
        self._undo: list = []
        self._here = threading.local()
        self._names: dict = {}              # (plugin id, dev, entry) -> kernel name
        self._devices: dict = {}            # (plugin id, dev) -> Device
        self._hooked: set = set()
        self._rt = self._ip = None

    # -- wiring ------------------------------------------------------------------------
    def pool_options(self) -> dict:
        """The ``pool=`` options of the runtime to record: the event log of every
        device's memory manager is this trace."""
        return {"event_log": self.writer}

    def _patch(self, obj, name, make):
        old = getattr(obj, name)
        had = name in getattr(obj, "__dict__", {})
        setattr(obj, name, make(old))
        self._undo.append((obj, name, had, old))

    def attach(self, runtime, interposer=None) -> None:
        """Install the hooks on ``runtime`` (its plugins and devices, also devices made
        later) and ``interposer`` (its construct callbacks; its cheap path is turned
        off while attached)."""
        self._rt, self._ip = runtime, interposer
        w = self.writer
        ev = w.event

        def reg(orig):
            def register_image(image):
                orig(image)
                self._names.clear()
                ev({"op": "image_register", "image": image.id, "name": image.name,
                    "bytes": len(image.data), "machine": image.machine,
                    "entries": [{"name": e.name, "size": e.size,
                                 "kind": "kernel" if e.is_kernel else "global"}
                                for e in image.entries]})
            return register_image

        def unreg(orig):
            def unregister_image(image):
                orig(image)
                self._names.clear()
                ev({"op": "image_unregister", "image": image.id, "name": image.name})
            return unregister_image

        self._patch(runtime, "register_image", reg)
        self._patch(runtime, "unregister_image", unreg)

        def acquire(orig):
            def _acquire_plugins():
                orig()
                self._hook_devices(runtime._devices or [])
            return _acquire_plugins
        self._patch(runtime, "_acquire_plugins", acquire)
        for p in runtime.plugins:
            self._hook_plugin(p)
        if runtime._devices is not None:
            self._hook_devices(runtime._devices)
        if interposer is not None:
            self._hook_interposer(interposer)

    def detach(self) -> None:
        """Remove every hook (the interposer's cheap path is restored)."""
        while self._undo:
            obj, name, had, old = self._undo.pop()
            if had:
                setattr(obj, name, old)
            else:
                try:
                    delattr(obj, name)
                except AttributeError:
                    pass
        if self._ip is not None and getattr(self, "_fast_was", None) is not None:
            self._ip.fast.enabled = self._fast_was

    def close(self, **end) -> None:
        """Detach and write the ``end`` line.  Idempotent."""
        self.detach()
        self.writer.close(end)

    # -- devices and plugins -----------------------------------------------------------
    def _hook_devices(self, devices) -> None:
        ev = self.writer.event
        for dev in devices:
            if id(dev) in self._hooked:
                continue
            self._hooked.add(id(dev))
            self._devices[(id(dev.plugin), dev.index)] = dev
            label = dev.label

            def ready(orig, dev=dev, label=label):
                def _ready():
                    before = dev.init_count
                    orig()
                    if dev.init_count != before:
                        self._names.clear()
                        pool = dev.pool
                        ev({"op": "device_init", "dev": label, "plugin": dev.plugin.name,
                            "index": dev.index, "policy": pool.policy,
                            "threshold": pool.threshold})
                return _ready

            def teardown(orig, label=label):
                def _teardown(final):
                    try:
                        leaked = orig(final)
                    except BaseException as exc:
                        ev({"op": "device_deinit", "dev": label, "error": str(exc)})
                        raise
                    ev({"op": "device_deinit", "dev": label, "leaked": list(leaked)})
                    return leaked
                return _teardown

            self._patch(dev, "_ready", ready)
            self._patch(dev, "_teardown", teardown)

    def _hook_plugin(self, plugin) -> None:
        if id(plugin) in self._hooked:
            return
        self._hooked.add(id(plugin))
        ev = self.writer.event
        name = plugin.name
        here = self._here

        def copy(direction, tgt_of):
            def make(orig):
                def one(dev, a, b, size):
                    orig(dev, a, b, size)
                    ev({"op": "copy", "dev": f"{name}:{dev}", "dir": direction,
                        "size": int(size), "tgt": int(tgt_of(a, b))})
                return one
            return make

        def copies(direction, tgt_at):
            def make(orig):
                def many(dev, ops):
                    orig(dev, ops)
                    label = f"{name}:{dev}"
                    for a, b, size in _triples(ops):
                        ev({"op": "copy", "dev": label, "dir": direction,
                            "size": int(size), "tgt": int((a, b)[tgt_at])})
                return many
            return make

        def launch(orig):
            def launch(dev, entry, args, offsets=None):
                t0 = time.monotonic_ns()
                orig(dev, entry, args, offsets)
                c = getattr(here, "construct", None)
                ev({"op": "launch", "dev": f"{name}:{dev}",
                    "kernel": self._kernel_name(plugin, dev, entry), "nargs": len(args),
                    "teams": c[0] if c else None, "threads": c[1] if c else None,
                    "t_ns": t0, "dur_ns": time.monotonic_ns() - t0})
            return launch

        self._patch(plugin, "submit", copy("h2d", lambda tgt, host: tgt))
        self._patch(plugin, "retrieve", copy("d2h", lambda host, tgt: tgt))
        self._patch(plugin, "submit_many", copies("h2d", 0))
        self._patch(plugin, "retrieve_many", copies("d2h", 1))
        self._patch(plugin, "launch", launch)

    def _kernel_name(self, plugin, dev: int, entry: int) -> str | None:
        key = (id(plugin), dev, entry)
        name = self._names.get(key)
        if name is None:
            d = self._devices.get((id(plugin), dev))
            for kname, cands in dict(getattr(d, "_kernels", {})).items():
                if any(c[0] == entry for c in cands):
                    name = self._names[key] = kname
                    break
        return name

    # -- constructs --------------------------------------------------------------------
    def _hook_interposer(self, ip) -> None:
        from ..abi import interposer as _abi
        nowait = _abi.DATA_NOWAIT
        fast = ip.fast
        self._fast_was = fast.enabled
        fast.enabled = False                # every construct takes the general code
        ev = self.writer.event
        here = self._here

        def rows(dev_id, m):
            """Reference counts of each map entry's row after the construct."""
            num = dev_id if dev_id >= 0 else ip._default_device()
            dm = ip._mappers.get(num)
            out = []
            for i in range(m.n):
                e = None
                if dm is not None and m.args[i]:
                    with dm.lock:
                        e = dm.table.find(m.args[i])
                        rc = None if e is None else (
                            ["inf" if e.infinite else e.dyn, e.hold])
                else:
                    rc = None
                out.append({"size": m.sizes[i], "type": m.types[i], "rc": rc})
            return num, out

        def data(orig):
            def slow_data(kind, loc, dev_id, n, bases, args, sizes, types, names,
                          mappers):
                t0 = time.monotonic_ns()
                rc = orig(kind, loc, dev_id, n, bases, args, sizes, types, names, mappers)
                try:
                    m = _abi.MapArgs(n, bases, args, sizes, types, None, None)
                    num, maps = rows(dev_id, m)
                except Exception as exc:  # noqa: BLE001 - the construct's result stands
                    num, maps = dev_id, [{"error": str(exc)}]
                ev({"op": "construct", "kind": _KINDS.get(kind & ~nowait, str(kind)),
                    "nowait": bool(kind & nowait), "device": num, "n": int(n),
                    "maps": maps, "rc": rc, "t_ns": t0,
                    "dur_ns": time.monotonic_ns() - t0})
                return rc
            return slow_data

        def kernel(orig):
            def slow_kernel(loc, dev_id, teams, threads, host_ptr, kargs):
                t0 = time.monotonic_ns()
                here.construct = (teams, threads)
                try:
                    rc = orig(loc, dev_id, teams, threads, host_ptr, kargs)
                finally:
                    here.construct = None
                try:
                    m = _abi.kernel_map_args(kargs)[0]
                    num, maps = rows(dev_id, m)
                except Exception as exc:  # noqa: BLE001 - unknown layouts fail in orig
                    num, maps = dev_id, [{"error": str(exc)}]
                ev({"op": "construct", "kind": "kernel", "device": num, "n": len(maps),
                    "teams": teams, "threads": threads, "maps": maps, "rc": rc,
                    "t_ns": t0, "dur_ns": time.monotonic_ns() - t0})
                return rc
            return slow_kernel

        self._patch(fast, "_slow_data", data)
        self._patch(fast, "_slow_kernel", kernel)


def _triples(ops):
    """``(a, b, size)`` triples of a list of them or of a flat ``array('Q')``."""
    if isinstance(ops, (list, tuple)):
        return ops
    return zip(ops[0::3], ops[1::3], ops[2::3])


def trace_path_ok(path) -> str | None:
    """Why ``path`` cannot be a trace file (its directory does not exist, it is a
    directory), or None."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return f"{path} is a directory"
    parent = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(parent):
        return f"no directory {parent}"
    return None
