"""``offload-shim``: the command line.

    offload-shim info [--json] [PLUGIN ...]       every plugin found, its ABI and devices
    offload-shim info --image FILE                the offload images inside a compiled file
    offload-shim demo [--json] [PLUGIN ...]       the main job, end to end, on every plugin
                                                  that has a device
    offload-shim check PLUGIN                     property-test a plugin (cli/check.py)
    offload-shim check --probe-misuse PLUGIN      its answers to known misuse
    offload-shim bench [--json]                   the pool against the plugins, side by side
    offload-shim run-library --library LIB --call F   a compiled OpenMP library (cli/run.py)
    offload-shim run PROGRAM [ARGS...]            an OpenMP executable, Python in charge
    offload-shim compare PROGRAM                  it under the real runtime and under ours

``demo`` runs each plugin in its own child process, so a plugin that
crashes becomes a failed row instead of killing the command.  Exit status
and interrupts: :mod:`offload_shim.cli.common`.
"""

from __future__ import annotations

import os
import sys

# argparse, contextlib, json, subprocess, signal, tempfile, time and array are imported
# where they are used: `offload-shim run` starts every program through this module
# (start-up time: json pulls in re and enum, contextlib functools and collections)
from .common import (EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE, Terminated, UsageError,
                     install_sigterm, positive_float)
from .common import error as _error


def _capture_c_stdout(fn):
    """Run fn() with file descriptor 1 redirected; returns (result, text)."""
    import tempfile
    from ..abi import libc
    sys.stdout.flush()
    libc.fflush_all()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            result = fn()
        finally:
            libc.fflush_all()
            os.dup2(saved, 1)
            os.close(saved)
        tmp.seek(0)
        return result, tmp.read().decode(errors="replace")


# -- info -----------------------------------------------------------------------

def _plugin_views(path, timeout: float | None = None):
    """The plugin views of one file: the bundled plugin exports both ABIs.
    ``timeout``: seconds the child-process probe of a new file may take."""
    from ..plugins.loader import load_plugin
    first = load_plugin(path, timeout=timeout)
    views = [first]
    if first.bundled:
        views.append(load_plugin(path, abi="gomp"))
        views.append(load_plugin(path, abi="liboffload"))
    return views


def host_runtime_info(env=None) -> list[dict]:
    """One "not usable" row per LLVM host runtime found (``libomptarget.so.<N>``,
    :func:`offload_shim.plugins.discovery.host_runtime_paths`): ``generation``
    (``llvm19``), ``host_runtime`` and the reason it is not a plugin.  LLVM 19+ link
    their plugins in (llvm-project PR #87009; Debian 19.1.7 / 22.1.8 ship no
    ``libomptarget.rtl.*.so``), so they cannot be loaded on their own; the programs
    built for them run on the plugins listed above under ``offload-shim run``."""
    import re
    from ..plugins import discovery
    out = []
    for path in discovery.host_runtime_paths(env):
        m = re.search(r"libomptarget\.so\.(\d+)(?:\.(\d+))?", os.path.basename(path))
        major = int(m.group(1)) if m else 0
        version = ".".join(g for g in m.groups() if g) if m else "?"
        if major >= 19:
            why = (f"LLVM {version} host runtime: its plugins are linked in and cannot be "
                   f"loaded on their own; clang-{major} programs run on the plugins above "
                   f"with `offload-shim run`")
        else:
            why = (f"LLVM {version} host runtime (what offload-shim re-creates); its "
                   f"plugins are the libomptarget.rtl.*.so files above")
        out.append({"path": path, "source": "host-runtime", "abi": None,
                    "generation": f"llvm{major}", "num_devices": None,
                    "host_runtime": f"libomptarget {version}", "error": why})
    return out


def collect_info(paths=(), *, system=True, bundled=True, devices=True,
                 timeout: float | None = None, isolate: bool = False) -> list[dict]:
    """One dict per plugin view found: path, source, abi, generation,
    num_devices, (GOMP) gomp_version/caps/target_name, and per device what
    the plugin prints with ``print_device_info`` (LLVM; needs a device init,
    done and undone here when ``devices``) or an ``error``.  ``timeout``:
    seconds the load of each new plugin file may take (its constructors run
    in a child first); past it the row says it hung.

    ``isolate`` (``offload-shim info``): each plugin file's rows are made in a child
    process of their own (:func:`plugin_records` there, through
    :func:`offload_shim.safety.children.run_child`): a plugin that crashes, exits or
    hangs in ``init_plugin``, ``number_of_devices``, ``init_device`` or
    ``print_device_info`` is one row saying so (``error``: the signal or exit status,
    or "did not finish within N s": twice ``timeout``, default
    :data:`~offload_shim.safety.isolation.PLUGIN_TIMEOUT_S`), the others are still
    listed, no plugin's destructor decides the command's exit status, and SIGTERM and
    Ctrl-C end the command at once (the parent only waits; its child is stopped)."""
    from ..plugins import discovery
    out = []
    for cand in discovery.candidates(paths, system=system, bundled=bundled):
        if isolate:
            out.extend(_plugin_records_in_child(cand.path, cand.source, devices, timeout))
        else:
            out.extend(plugin_records(cand.path, cand.source, devices, timeout))
    if system:
        out.extend(host_runtime_info())
    return out


def plugin_records(path: str, source: str, devices: bool = True,
                   timeout: float | None = None, init: bool = True) -> list[dict]:
    """The rows of :func:`collect_info` for one plugin file, made in this process;
    ``init`` False: only what loading tells (path, name, abi, generation...: no
    ``init_plugin``, no device count)."""
    from ..errors import OffloadError
    from ..core.runtime import Runtime
    base = {"path": path, "source": source}
    try:
        views = _plugin_views(path, timeout)
    except (OffloadError, OSError, ValueError, TypeError) as exc:
        # a bad candidate is one "not usable" row; the others are still listed
        return [{**base, "abi": None, "generation": None, "num_devices": None,
                 "error": f"{type(exc).__name__}: {exc}"}]
    out = []
    for p in views:
        rec = {**base, **p.info()}
        rec.pop("symbols", None)
        rec["entry_points"] = len(p.symbols)
        if not init:
            out.append(rec)
            continue
        try:
            with Runtime([p]) as rt:
                devs = rt.devices
                rec["num_devices"] = len(devs)
                if hasattr(p, "devices_info"):    # liboffload: platforms and devices
                    rec["ol_platforms"] = p.platforms_info()
                    rec["ol_devices"] = p.devices_info()
                rec["devices"] = []
                for d in devs:
                    drec = {"index": d.index}
                    if devices and p.has("print_device_info"):
                        d.init()
                        _, text = _capture_c_stdout(lambda: p.print_device_info(d.index))
                        drec["info"] = " ".join(text.split())
                    rec["devices"].append(drec)
        except (OffloadError, OSError) as exc:
            rec.setdefault("num_devices", None)
            rec["error"] = f"{type(exc).__name__}: {exc}"
        out.append(rec)
    return out


_INFO_MARK = "@@offload_shim info rows@@"
_INFO_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from offload_shim.cli import plugin_records, _INFO_MARK
rows = plugin_records(*json.loads(sys.argv[2]))
sys.stdout.write("\n" + _INFO_MARK + json.dumps(rows) + "\n")
sys.stdout.flush()
"""


def _plugin_records_in_child(path: str, source: str, devices: bool,
                             timeout: float | None, init: bool = True) -> list[dict]:
    import json
    import subprocess
    from ..safety.children import run_child, signal_name
    from ..safety.isolation import PLUGIN_TIMEOUT_S
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    limit = 2 * (timeout or PLUGIN_TIMEOUT_S)
    base = {"path": path, "source": source, "abi": None, "generation": None,
            "num_devices": None}
    try:
        proc = run_child([sys.executable, "-P", "-c", _INFO_CHILD, root,
                          json.dumps([path, source, devices, timeout, init])],
                         timeout=limit)
    except subprocess.TimeoutExpired:
        return [{**base, "error": f"hung: the plugin's calls did not finish within "
                 f"{limit:g} s (in a child process)"}]
    rows = None
    head, mark, tail = proc.stdout.rpartition(_INFO_MARK)
    if mark:
        try:
            rows = json.loads(tail.strip())
        except ValueError:
            rows = None
    if rc := proc.returncode:
        how = signal_name(rc) if rc < 0 else f"exit status {rc}"
        why = " ".join((proc.stderr or "").split())[-300:]
        if rows is None:
            return [{**base, "error": f"the plugin ended the process ({how}) while it was "
                     "loaded, initialised or asked for its devices, in a child process"
                     + (f": {why}" if why else "")}]
        for r in rows:                  # listed, then its destructor took the process down
            r["error"] = (r.get("error") + "; " if r.get("error") else "") + \
                f"the process ended with {how} after the listing (the plugin's destructors)"
    if rows is None:
        return [{**base, "error": "the child process listed nothing"}]
    return rows


def cmd_info(args) -> int:
    import json
    if getattr(args, "image", None):
        # the offload images and entries inside compiled files, without running them
        from ..errors import InvalidImageError
        from ..elf.imageinfo import describe, format_description
        infos = []
        for p in args.image:
            try:
                infos.append(describe(p))
            except OSError as exc:            # missing, a directory, unreadable
                _error(f"{p}: cannot read: {exc.strerror or exc}")
                return 2
            except InvalidImageError as exc:  # not ELF / corrupt ELF
                _error(str(exc))
                return 2
        if args.json:
            print(json.dumps(infos, indent=2, default=lambda o: {
                k: v for k, v in vars(o).items() if k != "image"} | {"image_bytes": len(o.image)}))
        else:
            print("\n".join(format_description(i) for i in infos))
        return 0
    recs = collect_info(args.plugins, system=not args.no_system, devices=not args.no_devices,
                        timeout=args.timeout, isolate=True)
    # what the user named on the command line must be usable
    named_bad = [r for r in recs if r.get("source") == "explicit"
                 and (r.get("abi") is None or r.get("error"))]
    status = 1 if named_bad else 0
    if args.json:
        print(json.dumps(recs, indent=2))
        return status
    if not recs:
        print("no plugins found")
        return 1
    for r in recs:
        head = f"{r['path']}  [{r['source']}]"
        print(head)
        if r.get("abi") is None:
            print(f"    not usable: {r.get('error')}")
            continue
        line = f"    abi={r['abi']} generation={r['generation']} devices={r.get('num_devices')}"
        if r["abi"] == "gomp":
            line += (f" GOMP_OFFLOAD_version={r['gomp_version']} caps={r['caps']:#x} "
                     f"name={r['target_name']} type={r['target_type']}")
        print(line)
        if r.get("error"):
            print(f"    error: {r['error']}")
        for d in r.get("devices", []) if "ol_devices" not in r else []:
            info = d.get("info")
            print(f"    device {d['index']}" + (f": {info}" if info else ""))
        for pl in r.get("ol_platforms", []):
            print(f"    platform {pl.get('name')!r}: backend={pl['backend']} "
                  f"vendor={pl.get('vendor')!r} version={pl.get('version')!r} "
                  f"devices={pl['devices']}")
        for d in r.get("ol_devices", []):
            where = f"device {d['index']}" if d["index"] is not None else "host device"
            extra = "".join(f" {k}={d[k]!r}" for k in ("vendor", "driver", "global_mem_size")
                            if k in d)
            print(f"    {where}: {d['name']!r} type={d['type']} platform={d.get('platform')!r} "
                  f"backend={d['backend']}{extra}"
                  + (" (memcpy endpoint only)" if d["index"] is None else ""))
    for r in named_bad:
        _error(f"{r['path']}: not usable: {r.get('error')}")
    return status


# -- demo -----------------------------------------------------------------------

def _demo_one(path: str, abi: str | None) -> int:
    """The main job on one plugin view; prints one line per step; exit 0 if verified."""
    import time
    from array import array

    import offload_shim as osh

    def step(msg):
        print(f"  {msg}", flush=True)

    n = 1024
    plugin = osh.load_plugin(path, abi=abi)
    step(f"loaded {plugin.name} ({plugin.abi}, {plugin.generation}) from {plugin.path}")
    with osh.Runtime([plugin]) as rt:
        img = osh.OffloadImage.sample()
        step(f"image {img.name}: kernels {', '.join(img.kernels)}; globals {', '.join(img.globals)}")
        rt.register_image(img)
        dev = rt.devices[0]
        step(f"registered before init: pending on {dev.label}: "
             f"{[i.name for i in rt.pending(dev)]}")
        t0 = time.perf_counter()
        dev.init()
        step(f"init_device({dev.index}) in {1e3 * (time.perf_counter() - t0):.1f} ms; "
             f"image loaded, {len(dev.address_map)} host->target mappings, "
             f"pending now {[i.name for i in rt.pending(dev)]}")
        a_h = array("d", (float(i) for i in range(n)))
        b_h = array("d", (2.0 * i for i in range(n)))
        nbytes = n * a_h.itemsize
        a, b, c = dev.alloc(nbytes), dev.alloc(nbytes), dev.alloc(nbytes)
        step(f"data_alloc 3 x {nbytes} bytes -> {a:#x} {b:#x} {c:#x}")
        dev.submit(a, a_h)
        dev.submit(b, b_h)
        step("data_submit a, b")
        dev.launch("vec_add", [a, b, c, n])
        c_h = array("d", bytes(nbytes))
        dev.retrieve(c_h, c)
        ok1 = all(c_h[i] == 3.0 * i for i in range(n))
        step(f"launch vec_add, data_retrieve c: c[i] == 3*i for all {n}: {ok1}")
        alpha = array("d", [0.5])
        al = dev.alloc(8)
        dev.submit(al, alpha)
        dev.launch("axpy", [c, a, al, n])
        dev.launch("scale_by_global", [c, n])
        dev.retrieve(c_h, c)
        ok2 = all(c_h[i] == 3.0 * (3.5 * i) for i in range(n))
        g = dev.global_address("osh_scale")
        gval = array("d", [0.0])
        dev.retrieve(gval, g)
        step(f"launch axpy + scale_by_global (global osh_scale={gval[0]} at {g:#x}, "
             f"host {img.host_address('osh_scale'):#x} -> "
             f"{dev.translate(img.host_address('osh_scale')):#x}): {ok2}")
        for p in (a, b, c, al):
            dev.free(p)
        st = dev.pool.stats
        step(f"data_delete x4 through the pool: {st.bytes_cached} bytes cached, "
             f"{st.bytes_in_use} in use")
        rt.unregister_image(img)
        step(f"unregister: loaded images {len(dev.loaded_images)}, mappings "
             f"{len(dev.address_map)}")
        ok3 = len(dev.address_map) == 0 and not dev.loaded_images
    step("close: pool drained -> images unloaded -> deinit_device -> deinit_plugin")
    ok = ok1 and ok2 and ok3
    step("VERIFIED" if ok else "FAILED")
    return 0 if ok else 1


def demo_targets(paths=(), *, system=True,
                 timeout: float | None = None) -> list[tuple[str, str | None, str]]:
    """(path, abi view, label) of every plugin view that runs on this CPU (vendor GPU
    plugins report 0 devices here).  The views are read in a child process per file
    (:func:`collect_info`'s isolation): this process never loads a plugin, so no
    plugin's destructor decides ``demo``'s exit status.  A file that cannot be listed
    there (not a plugin, a crash or hang while listing) is still a target when named on
    the command line or when it crashed or hung: its own demo child says how it ends.
    ``timeout``: seconds the child-process probe of each new plugin may take."""
    from ..plugins import discovery
    out = []
    for cand in discovery.candidates(paths, system=system):
        if not discovery.is_host_plugin(cand.path) and cand.source not in ("explicit",):
            continue
        for r in _plugin_records_in_child(cand.path, cand.source, False, timeout,
                                          init=False):
            if r.get("abi") is None:
                err = r.get("error") or ""
                if cand.source == "explicit" or err.startswith(("the plugin ended", "hung")):
                    out.append((cand.path, None, os.path.basename(cand.path)))
                break
            label = f"{r['name']} ({r['abi']}, {r['generation']})"
            out.append((cand.path, r["abi"] if r.get("bundled") else None, label))
    return out


def plugin_view(path: str, abi: str | None = None, timeout: float | None = None):
    """The view ``load_plugin(path, abi=abi)`` gives -- ``path`` (real), ``name``,
    ``abi``, ``generation``, ``bundled`` as attributes -- read in a child process, so
    that this process never loads the plugin (``check`` and ``demo`` parents: no
    plugin's constructor or destructor runs in them).  Raises PluginLoadError with the
    child's reason (its typed error, or how the child ended)."""
    from types import SimpleNamespace
    from ..errors import PluginLoadError
    rows = _plugin_records_in_child(path, "explicit", False, timeout, init=False)
    usable = [r for r in rows if r.get("abi") is not None]
    pick = [r for r in usable if r["abi"] == abi] if abi else usable[:1]
    if not pick:
        why = rows[0].get("error") if rows and rows[0].get("error") else \
            f"no {abi} view (views: {', '.join(r['abi'] for r in usable) or 'none'})"
        raise PluginLoadError(why)
    r = pick[0]
    return SimpleNamespace(path=r["path"], name=r["name"], abi=r["abi"],
                           generation=r["generation"], bundled=bool(r.get("bundled")))


def cmd_demo(args) -> int:
    if args.one:
        try:
            return _demo_one(args.one, args.abi)
        except Exception as exc:  # report, as a failed row
            print(f"  FAILED: {type(exc).__name__}: {exc}", flush=True)
            return 1
    import json
    import subprocess
    from ..safety.children import run_child, signal_name
    targets = demo_targets(args.plugins, system=not args.no_system, timeout=args.timeout)
    # --json: stdout holds the JSON only; the children's logs and the table go to stderr
    log = sys.stderr if args.json else sys.stdout
    if not targets:
        print("no plugin with a device found", file=log)
        if args.json:
            print(json.dumps([]))
        return 1
    rows = []
    for path, abi, label in targets:
        print(f"== {label}", file=log, flush=True)
        # -P: do not put the working directory first on sys.path (a source checkout there
        # would shadow the installed package)
        cmd = [sys.executable, "-P", "-m", "offload_shim.cli", "demo", "--one", path]
        if abi:
            cmd += ["--abi", abi]
        try:
            proc = run_child(cmd, timeout=args.timeout, merge_stderr=True)
            log.write(proc.stdout)
            log.flush()
            rc = proc.returncode
            from ..safety.children import CRASH_SIGNALS
            if rc == 0:
                status = "verified"
            elif rc < 0 and -rc in CRASH_SIGNALS:
                status = f"crashed ({signal_name(rc)})"
            elif rc < 0:        # SIGKILL, SIGTERM, SIGHUP...: from outside, not the plugin
                status = f"interrupted ({signal_name(rc)} from outside" + (
                    " or the out-of-memory killer)" if rc == -9 else ")")
            else:
                status = "failed"
        except subprocess.TimeoutExpired as exc:
            log.write(exc.output or "")
            status = f"hung (>{args.timeout:g}s)"
        rows.append((label, path, status))
    print(file=log)
    w = max(len(r[0]) for r in rows)
    print(f"{'plugin'.ljust(w)}  result", file=log)
    print(f"{'-' * w}  --------", file=log)
    for label, _, status in rows:
        print(f"{label.ljust(w)}  {status}", file=log)
    log.flush()
    if args.json:
        print(json.dumps([{"plugin": l, "path": p, "result": s} for l, p, s in rows]))
    return 0 if all(r[2] == "verified" for r in rows) else 1


#: the variables :func:`offload_shim.core.runtime.check_environment` reads
CONFIG_VARIABLES = ("LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD", "OFFLOAD_SHIM_POOL_DEBUG",
                    "OFFLOAD_SHIM_PINNED", "OFFLOAD_SHIM_NATIVE_DIR", "OFFLOAD_SHIM_PLUGINS")


def _check_config() -> None:
    """UsageError naming the variable for a bad configuration variable
    (:func:`offload_shim.core.runtime.check_environment`)."""
    from ..core.runtime import check_environment
    try:
        check_environment()
    except ValueError as exc:
        raise UsageError(str(exc)) from None


_SUBCOMMAND_MODULES = ("offload_shim.cli.check", "offload_shim.bench", "offload_shim.cli.run",
                       "offload_shim.cli.compare", "offload_shim.cli.replay",
                       "offload_shim.cli.fuzz", "offload_shim.cli.cache")


def build_parser() -> argparse.ArgumentParser:
    """The ``offload-shim`` argument parser with every subcommand."""
    import argparse
    from .. import __version__
    from .common import Parser
    ap = Parser(prog="offload-shim", description=__doc__.split("\n\n")[0].replace("``", ""))
    ap.add_argument("--version", action="version", version=f"offload-shim {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    pi = sub.add_parser("info", help="list plugins, ABIs and devices")
    pi.add_argument("plugins", nargs="*", help="extra plugin paths (exit status 1 when one "
                    "of them is not usable)")
    pi.add_argument("--json", action="store_true",
                    help="print the plugin list (or the --image description) as JSON on "
                         "stdout: one object per plugin view")
    pi.add_argument("--no-system", action="store_true", help="skip the standard locations")
    pi.add_argument("--no-devices", action="store_true",
                    help="do not initialise devices to print their info")
    pi.add_argument("--timeout", type=positive_float, default=None, metavar="SEC",
                    help="seconds the first load of each plugin may take (its constructors "
                         "run in a child process first; default 120)")
    pi.add_argument("--image", action="append", metavar="FILE",
                    help="list the offload images and host entries inside FILE "
                         "(clang .llvm.offloading / omp_offloading_entries, GCC "
                         ".gnu.offload_funcs/vars) instead of plugins (repeatable)")
    pi.set_defaults(func=cmd_info)
    pd = sub.add_parser("demo", help="the main job on every plugin with a device")
    pd.add_argument("plugins", nargs="*", help="extra plugin paths")
    pd.add_argument("--json", action="store_true",
                    help="print the result table as JSON on stdout ([{plugin, path, "
                         "result}]); the children's logs go to stderr")
    pd.add_argument("--no-system", action="store_true", help="skip the standard locations")
    pd.add_argument("--timeout", type=positive_float, default=120.0, metavar="SEC",
                    help="seconds each plugin's child process may take (default 120)")
    pd.add_argument("--one", help=argparse.SUPPRESS)
    pd.add_argument("--abi", help=argparse.SUPPRESS)
    pd.set_defaults(func=cmd_demo)
    # Other subcommands live in their own modules, each exposing
    # ``register_cli(subparsers)`` (sets ``func`` on its parser).
    import importlib
    for modname in _SUBCOMMAND_MODULES:
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name != modname:
                raise
            continue
        mod.register_cli(sub)
    return ap


def main(argv=None) -> int:
    """Run one command; returns the exit status (see :mod:`offload_shim.cli.common`):
    usage and configuration errors are one line and 2, Ctrl-C is one line
    ``interrupted`` and 130, SIGTERM one line ``terminated`` and 143, after the
    command's children were stopped and their leftovers removed."""
    command_line = argv is None            # the console script, python -m offload_shim
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:
        if command_line:  # the launcher's few objects live until its exit: no collections
            import gc
            gc.disable()
        # the start-up of every `offload-shim run`: only its own parser and module; the
        # configuration variables are checked (a module import) only when one is set
        if any(os.environ.get(v) is not None for v in CONFIG_VARIABLES):
            try:
                _check_config()
            except UsageError as exc:
                _error(str(exc))
                return EXIT_USAGE
        from .run import main_run
        rc = main_run(argv[1:])
        if command_line:
            _exit_now(rc)
        return rc
    import contextlib
    import signal
    args = build_parser().parse_args(argv)
    previous = install_sigterm()
    try:
        # a bad configuration variable is the user's mistake, named before any work (LLVM
        # plugins would abort on a bad LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD: std::stoul)
        _check_config()
        with contextlib.suppress(BrokenPipeError):
            return args.func(args)
        return 0
    except UsageError as exc:
        _error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        _interrupted("interrupted")
        return EXIT_INTERRUPTED
    except Terminated:
        _interrupted("terminated")
        return EXIT_TERMINATED
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_now(rc: int) -> None:
    """End the launcher of ``offload-shim run`` with status ``rc`` without finalising
    the interpreter (``os._exit``): the program has ended and its leftovers are gone,
    and the finalisation (a garbage collection, every module torn down) was about a
    sixth of the launcher's instructions.  Only when it would do nothing else: stdout
    and stderr flush without an error and no ``atexit`` handler is registered
    (``atexit._ncallbacks``); otherwise it returns, and ``sys.exit`` finalises as
    before (a broken pipe's message and status 120 included)."""
    import atexit
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - the interpreter's own exit reports it
        return
    if atexit._ncallbacks() == 0:
        os._exit(rc)


def _interrupted(what: str) -> None:
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - the one line below matters more
        pass
    print(f"offload-shim: {what}", file=sys.stderr, flush=True)
