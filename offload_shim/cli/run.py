"""``offload-shim run-library``: load a compiled OpenMP library through the
interposer and call its functions.

    offload-shim run-library --library libomp_regions.so --call osh_region_saxpy \\
        [--call ...] [--plugin PATH ...] [--policy disabled|default|mandatory] [--json]

Each ``--call NAME`` calls ``int64_t NAME(void)`` and prints the value.

    offload-shim run [--plugin PATH ...] [--bundled] [--policy P] [--report FILE] \\
        [--record TRACE] PROGRAM [ARGS...]

runs an unmodified executable built by clang 16, 19 or 22 (``-fopenmp
-fopenmp-targets=...``) or GCC 12 with
the interposer preloaded and an embedded CPython serving its offload calls
(:mod:`offload_shim.interposer.embed`).  Without ``--plugin`` the runtime uses the host
plugins libomptarget 16 would load (:func:`offload_shim.interposer.embed.default_plugins`).
``--bundled`` adds the bundled host plugin.  Exit status 0 when every call returned and
the library unregistered cleanly on ``dlclose``.
"""

from __future__ import annotations

import sys

# argparse is imported by the parsers below only: the usual `offload-shim run` command
# lines are read by parse_run_fast (start-up of every program run); json only by
# run-library (the options of a run are written by offload_shim.jsontext)


def _error(message: str) -> None:
    """The one-line error of a command given bad input (exit status 2)."""
    sys.stdout.flush()
    print(f"offload-shim: error: {message}", file=sys.stderr, flush=True)


def _os_error_text(exc: OSError) -> str:
    """``exc`` without the ``[Errno N]`` prefix, naming the file once."""
    if not exc.strerror:
        return str(exc)
    name = "" if exc.filename is None else str(exc.filename)
    return exc.strerror if not name or name in exc.strerror else f"{name}: {exc.strerror}"


def check_plugins(paths) -> str | None:
    """Load every ``--plugin`` path with :func:`offload_shim.plugins.loader.load_plugin`
    (nothing is initialised); the first failure's one-line text, or None.  A file whose
    bytes loaded as a plugin in an earlier run is not loaded again
    (:func:`offload_shim.safety.isolation.plugin_known_good`): the program's own
    process loads it anyway."""
    from ..errors import OffloadError
    from ..safety.isolation import plugin_known_good, remember_good_plugin
    for path in paths:
        if plugin_known_good(path):   # these bytes loaded as a plugin before
            continue
        from ..plugins.loader import load_plugin
        try:
            load_plugin(path)
            remember_good_plugin(path)
        except OffloadError as exc:
            return f"--plugin {path}: {exc}"
        except OSError as exc:
            return f"--plugin {path}: {_os_error_text(exc)}"
        except ValueError as exc:      # an empty path (loader._resolve): no traceback
            return f"--plugin {path!r}: {exc}"
    return None


def _check_plugins_interruptible(paths) -> "str | int | None":
    """:func:`check_plugins` as every other command runs: SIGTERM and SIGHUP (turned
    into :class:`~offload_shim.cli.common.Terminated`) and Ctrl-C end it with the probe
    child stopped and its private ``TMPDIR`` removed
    (:func:`offload_shim.safety.children.run_child`), one line, and 143 / 130 (returned
    as an int).  Before, a SIGTERM to ``run --plugin hang.so`` killed the launcher at
    once, leaving the probe child running and ``/tmp/osh_child_*`` behind."""
    if not paths:
        return None
    import _signal as signal     # signal.py without its enums (enum: start-up time)
    from .common import (EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated, _raise_terminated)
    old = {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return check_plugins(paths)
    except (KeyboardInterrupt, Terminated) as exc:
        what = "interrupted" if isinstance(exc, KeyboardInterrupt) else "terminated"
        print(f"offload-shim: {what}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED if what == "interrupted" else EXIT_TERMINATED
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def cmd_run_library(args) -> int:
    import offload_shim as osh
    from ..errors import OffloadError
    from ..interposer import call_counts
    bad = check_plugins(args.plugin)
    if bad:
        _error(bad)
        return 2
    from ..interposer.embed import default_plugins
    from ..safety.isolation import probe_library
    try:                                      # constructors run at dlopen: try a child first
        probe_library(args.library)
    except OffloadError as exc:
        _error(f"--library {exc}")
        return 2
    try:
        rt = osh.Runtime(args.plugin or default_plugins(), bundled=args.bundled)
    except (OffloadError, OSError) as exc:
        _error(f"cannot start the runtime: {exc}")
        return 2
    out: dict = {"library": args.library, "plugins": [p.name for p in rt.plugins],
                 "results": {}}
    ok = True
    with rt, osh.interpose(rt, policy=args.policy,
                           gomp_host_device=args.gomp_host_device) as ip:
        try:
            lib = ip.load_library(args.library)
        except OSError as exc:                # missing, a directory, not a shared library
            _error(f"--library: {_os_error_text(exc)}")
            return 2
        try:                                  # every --call name before calling any
            for name in args.call:
                lib.function(name)
        except OffloadError as exc:
            ip.unload_library(lib)
            _error(f"--call {name}: {exc}")
            return 2
        out["images"] = [i.name for imgs in ip.libraries.values() for i in imgs]
        out["unsupported"] = [msg for _, msg in ip.unsupported]
        out["devices"] = len(ip.devices)
        out["compilers"] = ip.compilers()
        for name in args.call:
            out["results"][name] = int(lib.call(name))
            if not args.json:
                print(f"{name} = {out['results'][name]}", flush=True)
        out["device_labels"] = [d.label for d in ip.devices]
        out["initialised"] = [d.label for d in ip.devices if d.initialized]
        ip.unload_library(lib)
        out["registered_after_close"] = len(ip.libraries) + len(rt.images)
        out["mappings_after_close"] = sum(len(ip.mappings(i)) for i in range(len(ip.devices)))
        out["errors"] = list(ip.errors)
        out["gomp"] = ip.gomp.report()
        out["fixed_upstream"] = ip.fixed_upstream()
        out["compilers"] = ip.compilers()    # refined by launches
        ok = out["registered_after_close"] == 0 and not ip.errors
    out["calls"] = call_counts()
    if args.json:
        import json
        print(json.dumps(out))
    else:
        print(f"plugins: {', '.join(out['plugins']) or 'none'}; devices: {out['devices']}; "
              f"images: {out['images']}; unsupported: {out['unsupported']}")
        print(f"built by: {', '.join(out['compilers']) or 'no registered image'}")
        print(f"interposed calls: {out['calls']}")
        print(f"after dlclose: {out['registered_after_close']} images registered")
        g = out["gomp"]
        if g["registrations"] or sum(g["constructs"].values()):
            done = ", ".join(f"{k} {v}" for k, v in g["outcomes"].items() if v)
            print(f"GCC code ({g['mode']} mode, {g['devices']} devices): "
                  f"{sum(g['constructs'].values())} constructs ({done or 'none'}), "
                  f"{len(g.get('mappings', []))} mapping events")
        for e in out["errors"]:
            print(f"error: {e}")
    return 0 if ok else 1


def libpython_path() -> str:
    """The shared libpython of this interpreter: the ``libpython*.so*`` this process
    has mapped (``/proc/self/maps``), else ``LIBDIR/INSTSONAME`` from sysconfig;
    RuntimeError with the reason when CPython was not built with
    ``--enable-shared``."""
    import os
    try:                    # the file this interpreter runs on (no sysconfig import)
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(None, 5)[-1]
                if os.path.basename(path).startswith("libpython") and ".so" in path \
                        and os.path.isfile(path):
                    return path
    except OSError:
        pass
    import sysconfig
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        raise RuntimeError(f"{sys.executable} is not built with --enable-shared (no "
                           "libpython*.so to embed in the program): use an interpreter "
                           "that has one (e.g. pyenv with PYTHON_CONFIGURE_OPTS="
                           "--enable-shared, Debian's python3)")
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    for name in (sysconfig.get_config_var("INSTSONAME"), sysconfig.get_config_var("LDLIBRARY")):
        if name and os.path.isfile(os.path.join(libdir, name)):
            return os.path.join(libdir, name)
    raise RuntimeError(f"libpython not found in {libdir}")


def _interposer_path():
    """:func:`offload_shim.interposer.interposer_path` without importing the interposer
    package (the launcher only needs the file; the program's process imports it)."""
    import os
    d = os.environ.get("OFFLOAD_SHIM_NATIVE_DIR") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_native")
    p = os.path.join(d, "libosh_interposer.so")
    if not os.path.isfile(p):               # elsewhere (hostplugin knows where)
        from ..interposer import interposer_path
        return interposer_path()            # or FileNotFoundError with the advice
    return p


def run_environment(*, plugins=(), bundled=False, policy=None, report=None,
                    base: dict | None = None, gomp_host_device: bool = False,
                    record: str | None = None) -> dict:
    """The environment ``offload-shim run`` gives the program: ``LD_PRELOAD`` = the
    interposer (before any preload already set), ``OFFLOAD_SHIM_EMBED=1``,
    ``OFFLOAD_SHIM_LIBPYTHON``, ``OFFLOAD_SHIM_PYTHONPATH`` (the directory this
    offload_shim is imported from, then this interpreter's ``sys.path``) and
    ``OFFLOAD_SHIM_RUN_OPTIONS`` (:mod:`offload_shim.interposer.embed`), and
    ``OFFLOAD_SHIM_EMBED_LAZY=1`` where :func:`lazy_boot_ok` allows it.  Raises
    FileNotFoundError (interposer not built), RuntimeError (no shared libpython)."""
    import os                   # os.path, not pathlib: start-up of every run
    import offload_shim
    from ..jsontext import dumps
    env = dict(os.environ if base is None else base)
    pre = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = str(_interposer_path()) + (":" + pre if pre else "")
    env["OFFLOAD_SHIM_EMBED"] = "1"
    env["OFFLOAD_SHIM_LIBPYTHON"] = libpython_path()
    env["OFFLOAD_SHIM_PYTHON"] = sys.executable
    here = os.path.dirname(os.path.dirname(os.path.realpath(offload_shim.__file__)))
    paths = [here] + [p for p in sys.path if p and p != here and os.path.isabs(p)]
    env["OFFLOAD_SHIM_PYTHONPATH"] = os.pathsep.join(paths)
    if lazy_boot_ok(env, policy=policy, report=report, record=record,
                    gomp_host_device=gomp_host_device):
        env["OFFLOAD_SHIM_EMBED_LAZY"] = "1"
    else:
        env.pop("OFFLOAD_SHIM_EMBED_LAZY", None)
    env["OFFLOAD_SHIM_RUN_OPTIONS"] = dumps(
        {"plugins": [os.path.realpath(p) for p in plugins], "bundled": bool(bundled),
         "policy": policy, "report": os.path.realpath(report) if report else None,
         "gomp_host_device": bool(gomp_host_device),
         "record": os.path.abspath(record) if record else None})
    return env


def lazy_boot_ok(env: dict, *, policy=None, report=None, record=None,
                 gomp_host_device: bool = False) -> bool:
    """Whether the program's embedded runtime may start at its first construct instead
    of its first registration (``OFFLOAD_SHIM_EMBED_LAZY=1``, ``native/interposer.c``
    "deferred boot"): only where the registrations alone show nothing -- no ``--report``
    (written at exit from the runtime's state) or ``--record`` (a trace from the first
    registration), no ``--gomp-host-device``, the default policy (``--policy`` and
    ``OMP_TARGET_OFFLOAD``: under ``mandatory`` a runtime that cannot start ends the
    program before ``main``; under ``disabled`` nothing offloads anyway) and no
    ``LIBOMPTARGET_*`` variable (debug and info output, plugin and memory-manager
    settings read at the first registration).  A program that never offloads then never
    starts CPython (start-up: issue 29)."""
    if report is not None or record is not None or gomp_host_device:
        return False
    if policy not in (None, "default"):
        return False
    if env.get("OMP_TARGET_OFFLOAD", "default").strip().lower() != "default":
        return False
    return not any(k.startswith("LIBOMPTARGET_") for k in env)


def cmd_run(args) -> int:
    """Run the program with :func:`run_environment` in the foreground
    (:func:`offload_shim.safety.children.run_program`): its output and exit status
    are its own, and what it leaves (its libomp segment...) is removed after it.

    A program that cannot be started ends it as ``env``, ``nice``, ``timeout`` (coreutils,
    glibc ``execvp``) and the shells end: 127 when it is not found (ENOENT), 126 when it
    is found but cannot be executed (a directory, no execute permission, ELOOP...), with
    one line; a file the kernel does not take as a program (ENOEXEC: a script without
    ``#!``) is run by ``/bin/sh``, as ``execvp`` does."""
    import errno
    import os
    bad = _check_plugins_interruptible(args.plugin)   # before the program: no silent fallback
    if isinstance(bad, int):
        return bad
    record = getattr(args, "record", None)
    if not bad and record is not None:       # "" too: a name, not "no trace"
        from ..trace.record import trace_path_ok
        bad = trace_path_ok(record)
        bad = bad and f"--record {bad}"
    if not bad and (record is not None or args.report is not None):
        from .common import output_file_problem  # before the program: not after its work
        bad = ((record is not None and output_file_problem(record, "--record"))
               or (args.report is not None and output_file_problem(args.report, "--report"))
               or (record is not None and args.report is not None
                   and _same_file(record, args.report)
                   and f"--report {args.report} and --record {record} name the same "
                       f"file (the report would replace the trace)"))
    if bad:
        _error(bad)
        return 2
    try:
        env = run_environment(plugins=args.plugin, bundled=args.bundled, policy=args.policy,
                              report=args.report, gomp_host_device=args.gomp_host_device,
                              record=record)
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"offload-shim run: {exc}", file=sys.stderr)
        return 2
    prog = args.program
    if not prog:                # (posix_spawnp raises ValueError for an empty name)
        print("offload-shim run: cannot execute '': No such file or directory",
              file=sys.stderr)
        return 127              # as env '' and the shells
    if os.sep not in prog:
        import shutil
        prog = shutil.which(prog) or prog
    sys.stdout.flush()
    sys.stderr.flush()
    from ..safety.children import run_program
    if record and os.path.exists(record):
        os.unlink(record)                     # not a trace of an earlier run
    try:                  # as exec would, then remove what it left (libomp segment...)
        try:
            return _recorded(record, run_program([args.program, *args.args], env,
                                                 executable=prog))
        except OSError as exc:
            if exc.errno != errno.ENOEXEC:
                raise
        return _recorded(record, run_program(["/bin/sh", prog, *args.args], env,
                                             executable="/bin/sh"))
    except OSError as exc:
        print(f"offload-shim run: cannot execute {args.program}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 127 if exc.errno == errno.ENOENT else 126


def _same_file(a: str, b: str) -> bool:
    """Whether the paths ``a`` and ``b`` name one file: the same real path, or (both
    existing) the same inode (a hard link)."""
    import os
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _recorded(record, status: int) -> int:
    """After a ``run --record`` program: a program whose runtime never started (it
    registered no offload image) leaves no trace; write one with no events (header
    ``"runtime": false``) so that TRACE always exists after the run."""
    if record:
        import os
        if not os.path.exists(record):
            from ..trace.format import TraceWriter
            try:
                TraceWriter(record, {"runtime": False}).close({"status": status})
            except OSError as exc:
                print(f"offload-shim run: cannot write {record}: {exc}", file=sys.stderr)
    return status


def register_cli(subparsers) -> None:
    import argparse
    r = subparsers.add_parser(
        "run", help="run an unmodified OpenMP offload program (clang 16, 19 or 22 "
        "-fopenmp-targets=..., or GCC 12 -foffload=...) with the Python runtime in place "
        "of libomptarget",
        description="Run PROGRAM, built by clang 16, 19 or 22 with -fopenmp "
        "-fopenmp-targets=x86_64-pc-linux-gnu (or by GCC 12 with -fopenmp), with the "
        "Python runtime in place of libomptarget (GCC: on its own libgomp, or with "
        "--gomp-host-device).  Exit status: the program's; 2 for a bad option; 127/126 "
        "when PROGRAM cannot be started (docs/interpose.md).")
    r.add_argument("--plugin", action="append", default=[], help="plugin path (repeatable; "
                   "default: the host plugins the program's own libomptarget would load, "
                   "in its order -- LLVM 16's x86_64 nextgen plugin, or the classic one "
                   "with LIBOMPTARGET_NEXTGEN_PLUGINS=false; every host plugin found when "
                   "LLVM 16 is not installed)")
    r.add_argument("--bundled", action="store_true", help="add the bundled host plugin")
    r.add_argument("--policy", choices=["disabled", "default", "mandatory"],
                   help="override OMP_TARGET_OFFLOAD")
    r.add_argument("--report", metavar="FILE", help="write a JSON report (interposed "
                   "calls, devices, errors) when the program exits")
    r.add_argument("--gomp-host-device", action="store_true",
                   help="GCC-built code (gcc -fopenmp -foffload=...) gets one device with "
                   "separate host memory and libgomp 12's mapping (default: its own "
                   "libgomp)")
    r.add_argument("--record", metavar="TRACE", help="write a runtime trace (images, "
                   "devices, constructs, pool allocations and frees, copies, launches; "
                   "docs/trace-format.md) to TRACE; `offload-shim replay TRACE` re-issues it")
    r.add_argument("program")
    r.add_argument("args", nargs=argparse.REMAINDER)
    r.set_defaults(func=cmd_run)

    p = subparsers.add_parser("run-library",
                              help="load a compiled OpenMP library through the interposer "
                                   "and call its functions",
                              description="Load LIBRARY (built by clang 16, 19 or 22 with "
                              "-fopenmp -fopenmp-targets=x86_64-pc-linux-gnu, or GCC 12 "
                              "with -fopenmp) through the interposer, call each --call "
                              "function, unload it.  Exit status 0 when every call "
                              "returned and the library unregistered cleanly, 1 otherwise, "
                              "2 for a bad option.")
    p.add_argument("--library", required=True, help="shared library built with clang 16, "
                   "19 or 22 (-fopenmp -fopenmp-targets=x86_64-pc-linux-gnu) or GCC 12 "
                   "(-fopenmp)")
    p.add_argument("--call", action="append", default=[], metavar="FUNC",
                   help="call int64_t FUNC(void) (repeatable)")
    p.add_argument("--plugin", action="append", default=[], help="plugin path (repeatable; "
                   "default: the host plugins libomptarget 16 would load, as for run)")
    p.add_argument("--bundled", action="store_true", help="add the bundled host plugin")
    p.add_argument("--policy", choices=["disabled", "default", "mandatory"],
                   help="override OMP_TARGET_OFFLOAD")
    p.add_argument("--gomp-host-device", action="store_true",
                   help="GCC-built code gets one device with separate host memory and "
                   "libgomp 12's mapping (default: its own libgomp)")
    p.add_argument("--json", action="store_true",
                   help="print the result as one JSON object on stdout (library, plugins, "
                        "results, images, devices, calls, errors...)")
    p.set_defaults(func=cmd_run_library)


_RUN_FLAGS = {"--bundled": "bundled", "--gomp-host-device": "gomp_host_device"}
_RUN_VALUES = {"--plugin": "plugin", "--policy": "policy", "--report": "report",
               "--record": "record"}
_POLICIES = ("disabled", "default", "mandatory")


class _RunArgs:
    """The namespace :func:`parse_run_fast` returns (``types.SimpleNamespace`` without
    importing ``types``)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"_RunArgs({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"


def parse_run_fast(argv):
    """The options of ``offload-shim run ARGV...`` read without argparse, for the
    command lines people write: the full option names (``--plugin PATH`` or
    ``--plugin=PATH``...), then the program and its arguments.  The result has the
    attributes argparse's would (``plugin`` a list, ``bundled``, ``policy``,
    ``report``, ``gomp_host_device``, ``program``, ``args``, ``func``); None for
    anything else -- ``--help``, an abbreviated or unknown option, a missing or
    dash-led value, a policy not in the choices, no program -- which
    :func:`main_run` then gives to the argparse parser, so every answer and error
    stays argparse's (tests/test_run_startup.py compares the two)."""
    ns = _RunArgs(cmd="run", plugin=[], bundled=False, policy=None, report=None,
                  record=None, gomp_host_device=False, func=cmd_run)
    i = 0
    while i < len(argv):
        tok = argv[i]
        if not tok.startswith("-"):
            ns.program, ns.args = tok, list(argv[i + 1:])
            return ns
        name, eq, value = tok.partition("=")
        if name in _RUN_FLAGS and not eq:
            setattr(ns, _RUN_FLAGS[name], True)
            i += 1
            continue
        if name not in _RUN_VALUES:
            return None
        if not eq:
            if i + 1 >= len(argv):
                return None
            value = argv[i + 1]
            i += 1
        if not value or value.startswith("-") or (name == "--policy"
                                                  and value not in _POLICIES):
            return None
        if name == "--plugin":
            ns.plugin.append(value)
        else:
            setattr(ns, _RUN_VALUES[name], value)
        i += 1
    return None


def main_run(argv) -> int:
    """``offload-shim run ARGV...`` without building the other subcommands' parsers
    (they import the whole package): same options, errors and exit statuses.  The
    usual command lines do not even build this one (:func:`parse_run_fast`)."""
    args = parse_run_fast(argv)
    if args is None:
        from .common import Parser       # one-line usage errors, exit status 2
        ap = Parser(prog="offload-shim")
        register_cli(ap.add_subparsers(dest="cmd", required=True, prog="offload-shim"))
        args = ap.parse_args(["run", *argv])
        args.args = program_arguments(argv, args.program, args.args)
    return args.func(args)


def program_arguments(argv, program: str, parsed: list) -> list:
    """The program's arguments as ``exec`` gives them: every token after it.
    argparse's ``REMAINDER`` drops a ``--`` that comes right after the program
    (``run ./prog -- x`` gave ``['x']``); ``env``, ``nice`` or ``strace`` pass it on,
    and so does :func:`parse_run_fast`."""
    n = len(parsed)
    if len(argv) >= n + 2 and argv[len(argv) - n - 1] == "--" \
            and argv[len(argv) - n - 2] == program:
        return ["--", *parsed]
    return list(parsed)

