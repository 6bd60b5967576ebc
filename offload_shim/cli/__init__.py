"""``offload-shim``: the command line.

    offload-shim info [--json] [PLUGIN ...]    every plugin found, its ABI and devices
    offload-shim demo [--json] [PLUGIN ...]    the main job, end to end, on every plugin
                                               that has a device

``demo`` runs each plugin in its own child process, so a plugin that
crashes becomes a failed row instead of killing the command.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

# ctypes, subprocess, signal, tempfile, time and array are imported where they are used:
# `offload-shim run` starts every program through this module (start-up time)


def _capture_c_stdout(fn):
    """Run fn() with file descriptor 1 redirected; returns (result, text)."""
    import ctypes
    import tempfile
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    libc.fflush(None)
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            result = fn()
        finally:
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
        tmp.seek(0)
        return result, tmp.read().decode(errors="replace")


def _error(message: str) -> None:
    """The one-line error of a command given bad input (the caller exits 2)."""
    sys.stdout.flush()
    print(f"offload-shim: error: {message}", file=sys.stderr, flush=True)


# -- info -----------------------------------------------------------------------

def _plugin_views(path):
    """The plugin views of one file: the bundled plugin exports both ABIs."""
    from ..plugins.plugin import load_plugin
    first = load_plugin(path)
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


def collect_info(paths=(), *, system=True, bundled=True, devices=True) -> list[dict]:
    """One dict per plugin view found: path, abi, generation, num_devices,
    (GOMP) gomp_version/caps/target_name, and per device what the plugin
    prints with ``print_device_info`` (LLVM; needs a device init, done and
    undone here when ``devices``) or an ``error``."""
    from ..plugins import discovery
    from ..errors import OffloadError
    from ..core.runtime import Runtime
    out = []
    for cand in discovery.candidates(paths, system=system, bundled=bundled):
        base = {"path": cand.path, "source": cand.source}
        try:
            views = _plugin_views(cand.path)
        except (OffloadError, OSError, ValueError) as exc:
            # a bad candidate is one "not usable" row; the others are still listed
            out.append({**base, "abi": None, "generation": None, "num_devices": None,
                        "error": f"{type(exc).__name__}: {exc}"})
            continue
        for p in views:
            rec = {**base, **p.info()}
            rec.pop("symbols", None)
            rec["entry_points"] = len(p.symbols)
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
    if system:
        out.extend(host_runtime_info())
    return out


def cmd_info(args) -> int:
    if getattr(args, "image", None):
        # issue 7: the offload images and entries inside compiled files, without running them
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
    recs = collect_info(args.plugins, system=not args.no_system, devices=not args.no_devices)
    if args.json:
        print(json.dumps(recs, indent=2))
        return 0
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
    return 0


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


def demo_targets(paths=(), *, system=True) -> list[tuple[str, str | None, str]]:
    """(path, abi view, label) of every plugin view that runs on this CPU and
    has at least one device (vendor GPU plugins report 0 devices here)."""
    from ..plugins import discovery
    from ..errors import OffloadError
    out = []
    for cand in discovery.candidates(paths, system=system):
        if not discovery.is_host_plugin(cand.path) and cand.source not in ("explicit",):
            continue
        try:
            views = _plugin_views(cand.path)
        except (OffloadError, OSError):
            if cand.source == "explicit":
                out.append((cand.path, None, os.path.basename(cand.path)))
            continue
        for p in views:
            label = f"{p.name} ({p.abi}, {p.generation})"
            out.append((cand.path, p.abi if p.bundled else None, label))
    return out


def cmd_demo(args) -> int:
    if args.one:
        try:
            return _demo_one(args.one, args.abi)
        except Exception as exc:  # report, as a failed row
            print(f"  FAILED: {type(exc).__name__}: {exc}", flush=True)
            return 1
    import signal
    import subprocess
    targets = demo_targets(args.plugins, system=not args.no_system)
    if not targets:
        print("no plugin with a device found")
        return 1
    rows = []
    for path, abi, label in targets:
        print(f"== {label}", flush=True)
        # -P: do not put the working directory first on sys.path (a source checkout there
        # would shadow the installed package)
        cmd = [sys.executable, "-P", "-m", "offload_shim.cli", "demo", "--one", path]
        if abi:
            cmd += ["--abi", abi]
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=args.timeout, text=True)
            sys.stdout.write(proc.stdout)
            rc = proc.returncode
            status = "verified" if rc == 0 else (
                f"crashed ({signal.Signals(-rc).name})" if rc < 0 else "failed")
        except subprocess.TimeoutExpired:
            status = f"hung (>{args.timeout}s)"
        rows.append((label, path, status))
    print()
    w = max(len(r[0]) for r in rows)
    print(f"{'plugin'.ljust(w)}  result")
    print(f"{'-' * w}  --------")
    for label, _, status in rows:
        print(f"{label.ljust(w)}  {status}")
    if args.json:
        print(json.dumps([{"plugin": l, "path": p, "result": s} for l, p, s in rows]))
    return 0 if all(r[2] == "verified" for r in rows) else 1


_SUBCOMMAND_MODULES = ("offload_shim.cli.check", "offload_shim.bench", "offload_shim.cli.run",
                       "offload_shim.cli.compare")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:
        # the start-up of every `offload-shim run`: only its own parser and module
        from .run import main_run
        return main_run(argv[1:])
    ap = argparse.ArgumentParser(prog="offload-shim", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pi = sub.add_parser("info", help="list plugins, ABIs and devices")
    pi.add_argument("plugins", nargs="*", help="extra plugin paths")
    pi.add_argument("--json", action="store_true")
    pi.add_argument("--no-system", action="store_true", help="skip the standard locations")
    pi.add_argument("--no-devices", action="store_true",
                    help="do not initialise devices to print their info")
    pi.add_argument("--image", action="append", metavar="FILE",
                    help="list the offload images and host entries inside FILE "
                         "(clang .llvm.offloading / omp_offloading_entries, GCC "
                         ".gnu.offload_funcs/vars) instead of plugins (repeatable)")
    pi.set_defaults(func=cmd_info)
    pd = sub.add_parser("demo", help="the main job on every plugin with a device")
    pd.add_argument("plugins", nargs="*", help="extra plugin paths")
    pd.add_argument("--json", action="store_true")
    pd.add_argument("--no-system", action="store_true")
    pd.add_argument("--timeout", type=float, default=120.0)
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
    args = ap.parse_args(argv)
    from ..memory import read_threshold_env
    try:
        read_threshold_env()        # LLVM plugins would abort on a bad value (std::stoul)
    except ValueError as exc:
        _error(str(exc))
        return 2
    with contextlib.suppress(BrokenPipeError):
        return args.func(args)
    return 0
