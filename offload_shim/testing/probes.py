"""Known misuse sequences, run straight against a plugin through ctypes.

Each probe is a short sequence of plugin entry-point calls that breaks the
contract (docs/references.md, plugin contracts: data before init, out-of-range
device, double init/deinit, anything after ``deinit_plugin``, garbage
images, unknown pointers and kernels...).  The runtime refuses all of them
in Python; the probes go *around* it (the plugin's bound ctypes functions,
:meth:`Plugin.entry_point`, unchecked) to record what the plugin itself does: return an error
code, accept silently, exit, or crash.  Every probe runs in its own child
process (:func:`run_probe`), so a segfault becomes a row of the
conformance table (docs/conformance.md), not the end of the run.

The child protocol: ``python -m offload_shim.testing.probes PATH ABI NAME``
prints one JSON line per call *before* the call (``{"call": ...}``) and
one after (``{"result": ...}``), flushed, so the parent knows the call
that crashed.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

__all__ = ["PROBES", "Probe", "probes_for", "run_probe", "run_probes"]


@dataclass(frozen=True)
class Probe:
    """A misuse sequence: ``name``, ``abi`` (``"llvm"``/``"gomp"``),
    ``what`` (one line), ``steps`` (the function, run in the child)."""
    name: str
    abi: str
    what: str
    steps: object
    needs: tuple = ()


PROBES: list[Probe] = []


def _probe(abi, what, needs=()):
    """Register a probe; ``needs``: entry points without which it is n/a."""
    def deco(fn):
        PROBES.append(Probe(fn.__name__.removeprefix(f"{abi}_"), abi, what, fn, tuple(needs)))
        return fn
    return deco


# -- the child side -----------------------------------------------------------------

class _Ctx:
    """Calls entry points by short name and logs each call (JSON lines)."""

    def __init__(self, plugin):
        self.p = plugin
        self.keep = []

    def has(self, name):
        return self.p.has(name)

    def call(self, name, *args):
        fn = self.p.entry_point(name)
        shown = [a if isinstance(a, (int, str, type(None))) else type(a).__name__ for a in args]
        print(json.dumps({"call": f"{name}({', '.join(map(_fmt, shown))})"}), flush=True)
        value = fn(*args)
        print(json.dumps({"result": _value(value)}), flush=True)
        return value

    # LLVM helpers
    def init(self):
        if self.has("init_plugin"):
            self.call("init_plugin")
        return self.call("number_of_devices")

    def garbage_image(self):
        from ..abi import tgt_rtl as T
        buf = ctypes.create_string_buffer(b"\x7fELF-not-really-an-image" + bytes(200))
        ent = (T.OffloadEntry * 1)()
        img = T.DeviceImage()
        img.ImageStart = ctypes.addressof(buf)
        img.ImageEnd = ctypes.addressof(buf) + len(buf)
        img.EntriesBegin = ctypes.cast(ctypes.addressof(ent), T.OffloadEntryP)
        img.EntriesEnd = ctypes.cast(ctypes.addressof(ent) + ctypes.sizeof(T.OffloadEntry),
                                     T.OffloadEntryP)
        self.keep += [buf, ent, img]
        return ctypes.byref(img)

    def host_buffer(self, n=64):
        buf = ctypes.create_string_buffer(n)
        self.keep.append(buf)
        return ctypes.addressof(buf)

    def free_arg(self, dev, ptr):
        if self.p.generation == "llvm14":
            return self.call("data_delete", dev, ptr)
        return self.call("data_delete", dev, ptr, 0)

    def launch(self, dev, entry):
        from ..abi import tgt_rtl as T
        argv = (ctypes.c_void_p * 1)(None)
        offs = (T.c_ptrdiff_t * 1)(0)
        self.keep += [argv, offs]
        if self.p.generation == "llvm14":
            return self.call("run_target_team_region", dev, entry, argv, offs, 0, 1, 1, 0)
        ka = T.KernelArgs()
        ka.Version = T.KERNEL_ARGS_VERSION
        ka.NumTeams[0] = 1
        ka.ThreadLimit[0] = 1
        self.keep.append(ka)
        return self.call("launch_kernel", dev, entry, argv, offs, ctypes.byref(ka), None)


def _fmt(a):
    return hex(a) if isinstance(a, int) and a > 4096 else repr(a) if isinstance(a, str) else str(a)


def _value(v):
    if v is None or isinstance(v, (bool, int)):
        return v
    if isinstance(v, ctypes._Pointer):
        return 0 if not v else ctypes.cast(v, ctypes.c_void_p).value
    return str(v)


# -- LLVM probes ----------------------------------------------------------------------

@_probe("llvm", "number_of_devices before init_plugin", needs=("init_plugin",))
def llvm_number_of_devices_before_init_plugin(c):
    c.call("number_of_devices")


@_probe("llvm", "data_alloc on device 0 before init_device")
def llvm_data_alloc_before_init_device(c):
    c.init()
    c.call("data_alloc", 0, 64, None, 0)


@_probe("llvm", "data_submit to device 0 before init_device")
def llvm_data_submit_before_init_device(c):
    c.init()
    c.call("data_submit", 0, c.host_buffer(), c.host_buffer(), 8)


@_probe("llvm", "init_device(N) with N = number_of_devices")
def llvm_init_device_out_of_range(c):
    n = c.init()
    c.call("init_device", n)


@_probe("llvm", "init_device(-1)")
def llvm_init_device_negative(c):
    c.init()
    c.call("init_device", -1)


@_probe("llvm", "data_alloc on device N (out of range)")
def llvm_data_alloc_out_of_range(c):
    n = c.init()
    c.call("data_alloc", n, 64, None, 0)


@_probe("llvm", "init_device(0) twice")
def llvm_double_init_device(c):
    c.init()
    c.call("init_device", 0)
    c.call("init_device", 0)


@_probe("llvm", "deinit_device(0) without init_device", needs=("deinit_device",))
def llvm_deinit_device_without_init(c):
    c.init()
    if c.has("deinit_device"):
        c.call("deinit_device", 0)


@_probe("llvm", "init_device(0), deinit_device(0) twice", needs=("deinit_device",))
def llvm_double_deinit_device(c):
    c.init()
    c.call("init_device", 0)
    if c.has("deinit_device"):
        c.call("deinit_device", 0)
        c.call("deinit_device", 0)


@_probe("llvm", "data_alloc after deinit_device", needs=("deinit_device",))
def llvm_data_alloc_after_deinit_device(c):
    c.init()
    c.call("init_device", 0)
    if c.has("deinit_device"):
        c.call("deinit_device", 0)
        c.call("data_alloc", 0, 64, None, 0)


@_probe("llvm", "is_valid_binary of garbage bytes")
def llvm_is_valid_binary_garbage(c):
    c.init()
    c.call("is_valid_binary", c.garbage_image())


@_probe("llvm", "load_binary of garbage bytes on an initialised device")
def llvm_load_binary_garbage(c):
    c.init()
    c.call("init_device", 0)
    c.call("load_binary", 0, c.garbage_image())


@_probe("llvm", "data_delete of a pointer the plugin never returned")
def llvm_free_unknown_pointer(c):
    c.init()
    c.call("init_device", 0)
    c.free_arg(0, c.host_buffer())


@_probe("llvm", "data_delete of the same pointer twice")
def llvm_double_free(c):
    c.init()
    c.call("init_device", 0)
    p = c.call("data_alloc", 0, 64, None, 0)
    c.free_arg(0, p)
    c.free_arg(0, p)


@_probe("llvm", "launch of an entry that is no loaded kernel")
def llvm_launch_unknown_entry(c):
    c.init()
    c.call("init_device", 0)
    c.launch(0, c.host_buffer())


@_probe("llvm", "init_plugin twice", needs=("init_plugin",))
def llvm_double_init_plugin(c):
    if c.has("init_plugin"):
        c.call("init_plugin")
        c.call("init_plugin")


@_probe("llvm", "deinit_plugin twice", needs=("deinit_plugin",))
def llvm_double_deinit_plugin(c):
    if c.has("deinit_plugin"):
        c.init()
        c.call("deinit_plugin")
        c.call("deinit_plugin")


@_probe("llvm", "deinit_plugin while device 0 is initialised", needs=("deinit_plugin",))
def llvm_deinit_plugin_with_live_device(c):
    if c.has("deinit_plugin"):
        c.init()
        c.call("init_device", 0)
        c.call("deinit_plugin")


@_probe("llvm", "number_of_devices after deinit_plugin", needs=("deinit_plugin",))
def llvm_number_of_devices_after_deinit_plugin(c):
    if c.has("deinit_plugin"):
        c.init()
        c.call("deinit_plugin")
        c.call("number_of_devices")


@_probe("llvm", "init_device after deinit_plugin", needs=("deinit_plugin",))
def llvm_init_device_after_deinit_plugin(c):
    if c.has("deinit_plugin"):
        c.init()
        c.call("deinit_plugin")
        c.call("init_device", 0)


@_probe("llvm", "data_alloc after deinit_plugin (device was initialised)", needs=("deinit_plugin",))
def llvm_data_alloc_after_deinit_plugin(c):
    if c.has("deinit_plugin"):
        c.init()
        c.call("init_device", 0)
        if c.has("deinit_device"):
            c.call("deinit_device", 0)
        c.call("deinit_plugin")
        c.call("data_alloc", 0, 64, None, 0)


# -- GOMP probes ----------------------------------------------------------------------

def _gomp_n(c):
    return c.call("get_num_devices", 0)


@_probe("gomp", "alloc on device 0 before init_device")
def gomp_alloc_before_init_device(c):
    _gomp_n(c)
    c.call("alloc", 0, 64)


@_probe("gomp", "host2dev to device 0 before init_device")
def gomp_host2dev_before_init_device(c):
    _gomp_n(c)
    c.call("host2dev", 0, c.host_buffer(), c.host_buffer(), 8)


@_probe("gomp", "init_device(N) with N = get_num_devices")
def gomp_init_device_out_of_range(c):
    c.call("init_device", _gomp_n(c))


@_probe("gomp", "init_device(-1)")
def gomp_init_device_negative(c):
    _gomp_n(c)
    c.call("init_device", -1)


@_probe("gomp", "init_device(0) twice")
def gomp_double_init_device(c):
    _gomp_n(c)
    c.call("init_device", 0)
    c.call("init_device", 0)


@_probe("gomp", "fini_device(0) without init_device")
def gomp_fini_device_without_init(c):
    _gomp_n(c)
    c.call("fini_device", 0)


@_probe("gomp", "init_device(0), fini_device(0) twice")
def gomp_double_fini_device(c):
    _gomp_n(c)
    c.call("init_device", 0)
    c.call("fini_device", 0)
    c.call("fini_device", 0)


@_probe("gomp", "alloc after fini_device")
def gomp_alloc_after_fini_device(c):
    _gomp_n(c)
    c.call("init_device", 0)
    c.call("fini_device", 0)
    c.call("alloc", 0, 64)


@_probe("gomp", "load_image of garbage target_data")
def gomp_load_image_garbage(c):
    from ..abi import gomp as G
    _gomp_n(c)
    c.call("init_device", 0)
    table = ctypes.POINTER(G.AddrPair)()
    c.keep.append(table)
    c.call("load_image", 0, G.version_pack(1, 0), c.host_buffer(256), ctypes.byref(table), None)


@_probe("gomp", "unload_image of a target_data never loaded")
def gomp_unload_image_unknown(c):
    from ..abi import gomp as G
    _gomp_n(c)
    c.call("init_device", 0)
    c.call("unload_image", 0, G.version_pack(1, 0), c.host_buffer(256))


@_probe("gomp", "free of a pointer the plugin never returned")
def gomp_free_unknown_pointer(c):
    _gomp_n(c)
    c.call("init_device", 0)
    c.call("free", 0, c.host_buffer())


@_probe("gomp", "free of the same pointer twice")
def gomp_double_free(c):
    _gomp_n(c)
    c.call("init_device", 0)
    p = c.call("alloc", 0, 64)
    c.call("free", 0, p)
    c.call("free", 0, p)


@_probe("gomp", "run of a function that is no loaded kernel")
def gomp_run_unknown_entry(c):
    _gomp_n(c)
    c.call("init_device", 0)
    args = (ctypes.c_void_p * 1)(None)
    c.keep.append(args)
    c.call("run", 0, c.host_buffer(), None, args)


# -- liboffload probes (ol_probes.py) -------------------------------------------------

def _register_ol_probes() -> None:
    from .ol_probes import OL_PROBES
    for name, what, fn, needs in OL_PROBES:
        PROBES.append(Probe(name, "liboffload", what, fn, needs))


_register_ol_probes()


def probes_for(abi: str) -> list[Probe]:
    """The probes of one ABI family, in table order."""
    return [p for p in PROBES if p.abi == abi]


# -- the parent side ------------------------------------------------------------------

def _classify(call: str, value) -> str:
    if isinstance(value, dict):                 # a liboffload ol_result_t (ol_probes.py)
        from .ol_probes import ol_outcome
        return ol_outcome(value)
    name = call.split("(", 1)[0]
    if name in ("data_alloc", "alloc", "load_binary"):
        return "error (NULL)" if not value else "accepted (non-NULL)"
    if value is None:
        return "void (no error channel)"
    if name in ("number_of_devices", "get_num_devices", "is_valid_binary"):
        return f"returned {value}"
    if name in ("data_alloc", "alloc", "load_binary"):
        return "error (NULL)" if not value else "accepted (non-NULL)"
    if isinstance(value, bool):
        return "accepted (true)" if value else "error (false)"
    if name == "load_image":
        return f"error ({value})" if value < 0 else f"accepted ({value} entries)"
    return "accepted (0)" if value == 0 else f"error ({value})"


def run_probe(path: str, abi: str | None, name: str, *, timeout: float = 60.0) -> dict:
    """Run probe ``name`` in a child process.  Returns ``{"probe", "abi",
    "what", "calls": [(call, result)...], "outcome", "detail"}``;
    ``outcome`` classifies the *last* call: ``"error (...)"``,
    ``"accepted (...)"``, ``"returned N"``, ``"crash SIG..."`` (signal),
    ``"exit N"`` (the plugin exited the process), ``"hang"`` (timeout),
    ``"n/a"`` (entry point not exported)."""
    from ..plugins.loader import load_plugin
    family = load_plugin(path, abi=abi).abi
    cmd = [sys.executable, "-m", "offload_shim.testing.probes", str(path), abi or "-", name]
    from ..safety.children import run_child
    try:
        cp = run_child(cmd, timeout=timeout)      # private TMPDIR, leftovers removed
        out, err, rc = cp.stdout, cp.stderr, cp.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err, rc = "", None
    calls, pending, extra = [], None, {}
    for line in out.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if "call" in rec:
            pending = rec["call"]
        elif "result" in rec and pending is not None:
            calls.append((pending, rec["result"]))
            pending = None
        elif "violations" in rec:
            extra.update(rec)
        elif "na" in rec:                       # the probe found nothing to run on
            extra["na"] = rec["na"]
    plugin = load_plugin(path, abi=abi)
    probe = next((p for p in PROBES if p.name == name and p.abi == family), None)
    missing = [n for n in (probe.needs if probe else ()) if not plugin.has(n)]
    if missing:
        return {"probe": name, "abi": family, "what": probe.what, "calls": [],
                "outcome": "n/a", "detail": f"no {', '.join(missing)}"}
    res = {"probe": name, "abi": family, "what": probe.what if probe else "",
           "calls": [f"{c} -> {v}" for c, v in calls], "detail": ""}
    if rc is None:
        res["outcome"] = "hang" + (f" in {pending}" if pending else "")
    elif rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        res["outcome"] = f"crash {sig}" + (f" in {pending.split('(')[0]}" if pending else "")
    elif pending is not None:
        tail = err.strip().splitlines()[-1:] if err.strip() else []
        res["outcome"] = f"exit {rc} in {pending.split('(')[0]}"
        res["detail"] = tail[0][:200] if tail else ""
    elif rc != 0:
        tail = err.strip().splitlines()[-1:] if err.strip() else []
        res["outcome"] = f"probe error (rc {rc})"
        res["detail"] = tail[0][:200] if tail else ""
    elif not calls:
        res["outcome"] = "n/a"
    elif probe and calls and len(calls) == 1 and _is_setup_only(probe, calls):
        res["outcome"] = "n/a"
    else:
        res["outcome"] = _classify(*calls[-1])
        from .ol_probes import ol_detail
        res["detail"] = ol_detail(calls[-1][1])
    if extra.get("na") and rc == 0:
        res["outcome"], res["detail"] = "n/a", extra["na"]
    if extra.get("violations"):
        res["detail"] = "violations: " + ", ".join(extra["violations"])
    return res


def _is_setup_only(probe, calls) -> bool:
    """A probe that stopped after its set-up call (entry point missing)."""
    return calls[0][0].startswith(("init_plugin", "number_of_devices")) and \
        probe.name not in ("number_of_devices_before_init_plugin",)


def run_probes(path: str, abi: str | None = None, *, timeout: float = 60.0,
               progress=None) -> list[dict]:
    """Every probe of the plugin's ABI family, each in its own child."""
    from ..plugins.loader import load_plugin
    family = load_plugin(path, abi=abi).abi
    rows = []
    for p in probes_for(family):
        if progress:
            progress(p.name)
        rows.append(run_probe(path, abi, p.name, timeout=timeout))
    return rows


def _child(path: str, abi: str | None, name: str) -> int:
    from ..plugins.loader import load_plugin
    plugin = load_plugin(path, abi=abi)
    probe = next(p for p in PROBES if p.name == name and p.abi == plugin.abi)
    ctl = None
    if plugin.bundled:
        from ..hostplugin import HostPluginControl
        ctl = HostPluginControl(plugin.path)
        before = ctl.violation_count()
    probe.steps(_Ctx(plugin))
    if ctl is not None:
        kinds = [f"{k} in {e}" for k, e, _ in ctl.violations()[before:]] \
            if ctl.violation_count() > before else []
        print(json.dumps({"violations": kinds}), flush=True)
    sys.stdout.flush()
    os._exit(0)     # no atexit, no plugin destructors: the probe's own state is the point


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(_child(a[0], None if a[1] == "-" else a[1], a[2]))
