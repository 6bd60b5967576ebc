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
* each ``Plugin``'s ``launcher`` (the cheap path's repeated launches): ``launch``;
* the interposer's constructs (``FastPath`` ``_serve`` / ``_general``, the frame of
  each): ``construct`` with each map entry's size, map type and reference counts after
  the construct, its return code, the path that did it and its duration.

Nothing of this exists when not recording: ``run`` without ``--record`` installs no
hook, so its cost there is nil.  While recording, the pool runs with an event log:
its batched hits, batched frees and the parked frees of the interposer's cheap path
stay on and log each block's event in the same round trip
(:meth:`~offload_shim.memory.events.EventLog.record_many`).  ``offload-shim bench
--workloads record`` measures what recording costs (docs/trace-format.md, "Overhead").

Events are written by the thread that caused them: outside a construct each as it
happens, inside one all together with the construct's own line when it returns (one
``write``; :meth:`TraceWriter.hold <offload_shim.trace.format.TraceWriter.hold>`): a
program that crashes or is killed leaves a trace of everything but the constructs in
flight.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from array import array

from .format import TraceWriter

__all__ = ["Recorder", "start", "stop", "active"]

_KINDS = {0: "begin", 1: "end", 2: "update"}

_active: "Recorder | None" = None


def active() -> "Recorder | None":
    """The recorder of this process, or None."""
    return _active


def start(path, argv=None) -> "Recorder":
    """Open the trace at ``path`` and make this process's recorder (``OSError`` if the
    file cannot be created).  ``offload-shim run --record`` removes ``path`` before the
    program starts, so the first process of the run that starts the runtime writes
    ``path``; another one (a child that offloads too) writes ``path.<pid>``.  Call
    :meth:`Recorder.attach` once the runtime and the interposer exist."""
    global _active
    rec = Recorder(path, argv=argv, exclusive=True)
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
    :class:`~offload_shim.interposer.llvm.interface.Interposer` and writes their events to
    a trace.  ``path``: the trace file; ``argv``: the program's command line (in the
    header)."""

    def __init__(self, path, argv=None, *, exclusive: bool = False):
        self.writer = TraceWriter(path, {"argv": list(argv or []),
                                         "python": sys.version.split()[0]},
                                  exclusive=exclusive)
        self._undo: list = []
        self._here = _Here()
        self._names: dict = {}              # (plugin id, dev, entry) -> kernel name JSON
        self._labels: dict = {}             # (plugin name, dev) -> label JSON
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
        later) and ``interposer`` (its constructs)."""
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
        name = plugin.name
        here = self._here

        put = self.writer.line
        heads: dict = {}                    # (dev, direction) -> the line's first part
        tid = threading.get_native_id
        now = time.monotonic_ns

        def head(dev, direction):
            h = heads.get((dev, direction))
            if h is None:
                h = heads[(dev, direction)] = (
                    '{"op":"copy","dev":' + _json_str(f"{name}:{dev}")
                    + f',"dir":"{direction}"')
            return h

        # copy lines are formatted here (the most frequent event): the same text as
        # TraceWriter.event({"op": "copy", "dev", "dir", "size", "tgt", "tid", "t_ns"})
        def copy(direction, tgt_at):
            def make(orig):
                def one(dev, a, b, size):
                    orig(dev, a, b, size)
                    put(f'{head(dev, direction)},"size":{int(size)},'
                        f'"tgt":{int((a, b)[tgt_at])},"tid":{tid()},"t_ns":{now()}}}\n')
                return one
            return make

        def copies(direction, tgt_at):
            def make(orig):
                def many(dev, ops):
                    orig(dev, ops)
                    h, t, ns = head(dev, direction), tid(), now()
                    if type(ops) is array:      # flat (a, b, size) words: ints already
                        put("".join(f'{h},"size":{z},"tgt":{g},"tid":{t},"t_ns":{ns}}}\n'
                                    for g, z in zip(ops[tgt_at::3], ops[2::3])))
                        return
                    put("".join(f'{h},"size":{int(x[2])},"tgt":{int(x[tgt_at])},'
                                f'"tid":{t},"t_ns":{ns}}}\n' for x in _triples(ops)))
                return many
            return make

        def launch_line(dev, entry, nargs, t0):
            # the same text as TraceWriter.event({"op": "launch", "dev", "kernel",
            # "nargs", "teams", "threads", "t_ns", "dur_ns", "tid"})
            c = here.construct
            put(f'{{"op":"launch","dev":{self._label(name, dev)},'
                f'"kernel":{self._kernel_name(plugin, dev, entry)},"nargs":{nargs},'
                f'"teams":{c[0] if c else "null"},"threads":{c[1] if c else "null"},'
                f'"t_ns":{t0},"dur_ns":{now() - t0},"tid":{tid()}}}\n')

        def launch(orig):
            def launch(dev, entry, args, offsets=None):
                t0 = now()
                orig(dev, entry, args, offsets)
                if not here.launcher:       # else the launcher logs it
                    launch_line(dev, entry, len(args), t0)
            return launch

        self._patch(plugin, "submit", copy("h2d", 0))
        self._patch(plugin, "retrieve", copy("d2h", 1))
        self._patch(plugin, "submit_many", copies("h2d", 0))
        self._patch(plugin, "retrieve_many", copies("d2h", 1))
        self._patch(plugin, "launch", launch)

        def launcher(orig):
            def launcher(dev, entry, nargs):
                run = orig(dev, entry, nargs)
                # Plugin's default launcher calls Plugin.launch (hooked too: it must not
                # log the launch again); a family's own one (the LLVM nextgen plugins: one
                # prepared argument block) does not.  Asked per launcher, not per family:
                # plugins/llvm.py hands LLVM 14 and classic LLVM 16 plugins to the default
                calls_launch = getattr(run, "calls_plugin_launch", False)
                # the launch line's fixed part, made once per launcher (the device and
                # kernel are the launcher's); the same text as launch_line's
                head = (f'{{"op":"launch","dev":{self._label(name, dev)},'
                        f'"kernel":{self._kernel_name(plugin, dev, entry)},"nargs":')

                def launch(args, offsets=None):
                    t0 = now()
                    if calls_launch:
                        # the default launcher calls Plugin.launch (hooked too)
                        here.launcher = True
                        try:
                            run(args, offsets)
                        finally:
                            here.launcher = False
                    else:
                        run(args, offsets)
                    c = here.construct
                    if c is None:
                        put(f'{head}{len(args)},"teams":null,"threads":null,"t_ns":{t0},'
                            f'"dur_ns":{now() - t0},"tid":{tid()}}}\n')
                        return
                    # inside a kernel construct: its thread id, and its held lines
                    c[3].append(f'{head}{len(args)},"teams":{c[0]},"threads":{c[1]},'
                                f'"t_ns":{t0},"dur_ns":{now() - t0},"tid":{c[2]}}}\n')
                return launch
            return launcher
        self._patch(plugin, "launcher", launcher)

    def _kernel_name(self, plugin, dev: int, entry: int) -> str:
        """The JSON text of the name of the kernel at ``entry`` (``null`` if unknown)."""
        key = (id(plugin), dev, entry)
        name = self._names.get(key)
        if name is None:
            d = self._devices.get((id(plugin), dev))
            name = "null"
            for kname, cands in dict(getattr(d, "_kernels", {})).items():
                if any(c[0] == entry for c in cands):
                    name = _json_str(kname)
                    break
            self._names[key] = name
        return name

    def _label(self, plugin_name: str, dev: int) -> str:
        """The JSON text of a device label."""
        key = (plugin_name, dev)
        j = self._labels.get(key)
        if j is None:
            j = self._labels[key] = _json_str(f"{plugin_name}:{dev}")
        return j

    # -- constructs --------------------------------------------------------------------
    def _hook_interposer(self, ip) -> None:
        """Every construct reaches :meth:`FastPath.on_construct
        <offload_shim.interposer.llvm.plan.FastPath.on_construct>` as a frame, and is done
        by its cheap path (``_serve``, not None) or by the general code
        (``_general``): both are wrapped, the frame read after the construct."""
        from ..abi import interposer as _abi
        fast = ip.fast
        here = self._here
        head, kernel_kind = _abi.FRAME_HEAD, _abi.FRAME_KERNEL
        kinds = {_abi.FRAME_BEGIN: "begin", _abi.FRAME_END: "end",
                 _abi.FRAME_UPDATE: "update", kernel_kind: "kernel"}

        def maps_of(v, kind, n):
            """(args, sizes, types) of the construct's map entries."""
            if v[_abi.FRAME_COPIED]:
                if n == 1:                  # the commonest construct: its words, no lists
                    z = v[head + 2]
                    return (v[head + 1],), (z - (1 << 64) if z >> 63 else z,), (v[head + 3],)
                return (v[head + n:head + 2 * n].tolist(),
                        [x - (1 << 64) if x >> 63 else x
                         for x in v[head + 2 * n:head + 3 * n].tolist()],
                        v[head + 3 * n:head + 4 * n].tolist())
            if kind == kernel_kind:
                m = _abi.kernel_map_args(v[_abi.FRAME_KARGS])[0]
            else:
                ptrs = _abi.frame_pointer_args(v)
                m = _abi.MapArgs(n, *ptrs[:4], None, None)
            return m.args, m.sizes, m.types

        tid = threading.get_native_id
        default = ip._default_device
        mappers = ip._mappers
        heads = {k: f'{{"op":"construct","kind":"{name}"' for k, name in kinds.items()}

        # the construct line is formatted here (one per construct): the same text as
        # TraceWriter.event({"op", "kind", "device", "n", "maps", "rc", "path", "t_ns",
        # "dur_ns", "teams"/"threads" or "nowait", "tid"}) -- tests/test_trace.py
        def record(v, kind, rc, t0, path, tt, buf):
            n = v[n_w]
            dev = v[dev_w]
            dev = dev - (1 << 64) if dev >> 63 else dev
            extra = ""
            try:
                num = dev if dev >= 0 else default()
                dm = mappers.get(num)
                args, sizes, types = maps_of(v, kind, n)
                if dm is None:
                    maps = ",".join(f"[{z},{t},null,null]" for z, t in zip(sizes, types))
                else:
                    find = dm.table.find
                    out = []
                    with dm.lock:
                        for hp, z, t in zip(args, sizes, types):
                            row = find(hp) if hp else None
                            if row is None:
                                out.append(f"[{z},{t},null,null]")
                            else:
                                d = '"inf"' if row.infinite else row.dyn
                                out.append(f"[{z},{t},{d},{row.hold}]")
                    maps = ",".join(out)
                maps = f"[{maps}]"
            except Exception as exc:  # noqa: BLE001 - the construct's result stands
                num, maps = dev, "null"
                extra = ',"maps_error":' + _json_str(f"{type(exc).__name__}: {exc}")
            if tt is not None:
                extra += f',"teams":{tt[0]},"threads":{tt[1]}'
            else:
                extra += ',"nowait":' + ("true" if v[host_w] else "false")
            hd = heads.get(kind)
            if hd is None:
                hd = f'{{"op":"construct","kind":"{kind}"'
            buf.append(f'{hd},"device":{num},"n":{n},"maps":{maps},"rc":{int(rc)},'
                       f'"path":"{path}","t_ns":{t0},"dur_ns":{now() - t0}'
                       f'{extra},"tid":{tt[2] if tt is not None else tid()}}}\n')

        n_w, dev_w, host_w = _abi.FRAME_N, _abi.FRAME_DEV, _abi.FRAME_HOST_PTR
        teams_w, threads_w = _abi.FRAME_TEAMS, _abi.FRAME_THREADS
        now = time.monotonic_ns
        hold, release = self.writer.hold, self.writer.release

        def wrap(path):
            def make(orig):
                def construct(v, kind, *plan):    # _serve: (v, kind, n, plan)
                    t0 = now()
                    # this thread's lines are kept until the construct's line: one write
                    buf = hold()
                    tt = None
                    if kind == kernel_kind:
                        # (teams, threads, tid, held lines): for the launch line too
                        here.construct = tt = (_s32(v[teams_w]), _s32(v[threads_w]),
                                               tid(), buf)
                    try:
                        rc = orig(v, kind, *plan)
                        if rc is not None:
                            record(v, kind, rc, t0, path, tt, buf)
                    finally:
                        here.construct = None
                        release()
                    return rc
                return construct
            return make

        self._patch(fast, "_serve", wrap("cheap"))
        self._patch(fast, "_general", wrap("general"))
        fast.invalidate()       # no construct may be repeated by the C side unrecorded


class _Here(threading.local):
    """Per thread: ``construct``, the (teams, threads, thread id, held lines) of the
    kernel construct in flight (None outside one); ``launcher``: inside a launcher's
    call."""

    construct = None
    launcher = False


def _s32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >> 31 else x


def _json_str(text: str) -> str:
    import json
    return json.dumps(text)


def _triples(ops):
    """``(a, b, size)`` triples of a list of them or of a flat ``array('Q')``."""
    if isinstance(ops, (list, tuple)):
        return ops
    return zip(ops[0::3], ops[1::3], ops[2::3])


def trace_path_ok(path) -> str | None:
    """Why ``path`` cannot be a trace file, or None: its directory does not exist, it
    is a directory, or it exists and is not an earlier trace -- not a regular file
    (``/dev/null``, a pipe) or a file whose first line is not a trace header (the
    program itself, the user's data): ``run --record`` replaces the file, so only an
    empty file or a trace may be replaced."""
    import stat
    from .format import FORMAT
    path = os.fspath(path)
    if not path:
        return "needs a file name"
    if os.path.isdir(path):
        return f"{path} is a directory"
    parent = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(parent):
        return f"no directory {parent}"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} exists and is not a regular file (not replaced)"
    if st.st_size == 0:
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    import json
    try:
        first = json.loads(head.split(b"\n", 1)[0])
    except ValueError:
        first = None
    if not (isinstance(first, dict) and first.get("op") == "trace"
            and first.get("format") == FORMAT):
        return f"{path} exists and is not an offload-shim trace (not replaced)"
    return None
