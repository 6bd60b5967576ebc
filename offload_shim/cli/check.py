"""``offload-shim check PLUGIN``: property-test a plugin, or probe its misuse.

    offload-shim check PLUGIN [--abi llvm|gomp] [--max-examples N] [--steps N]
                              [--seed S] [--timeout SEC] [--no-shrink]
                              [--shrink-timeout SEC] [--trace-out PATH] [--json]
    offload-shim check --probe-misuse PLUGIN [--abi ...] [--timeout SEC] [--json]

Without ``--probe-misuse`` the lifecycle state machine
(:mod:`offload_shim.testing.machine`) runs ``--max-examples`` random
sequences of ``--steps`` steps against the plugin through the runtime, in a
CHILD process: a segfault becomes a finding with its signal and the steps
of the sequence that was running, a run past ``--timeout`` becomes a hang,
a model mismatch is reported with hypothesis's shrunk, replayable program.
The failing sequence is then shrunk -- each candidate in a child process of
its own, so a crash shrinks too (:mod:`offload_shim.testing.sequences`) --
printed as steps and written to ``--trace-out`` as a trace that
``offload-shim replay`` re-runs, in a child, to show the same failure.
A real plugin keeps every image it ever loaded mapped, so a child stops
before its mappings near ``vm.max_map_count`` and a fresh child runs the
remaining sequences (``run_check``).

With ``--probe-misuse`` every known misuse sequence
(:mod:`offload_shim.testing.probes`) runs in its own child, straight
against the plugin's entry points, and a conformance table says what the
plugin did: error code, silently accepted, exit, crash (signal), hang.

Progress goes to stderr (a bar: sequences started of ``--max-examples``;
hypothesis starts more sequences than it counts, see ``_print_result``),
the result to stdout.

Exit status: 0 only when nothing was found (no crash, hang, invariant
violation; with ``--probe-misuse``: every misuse answered with an error);
1 findings; 2 a usage or configuration error (a bad option value, a bad
``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD``..., a plugin that cannot be
loaded), never reported as a finding; 130 Ctrl-C, 143 SIGTERM (children
stopped, their leftovers removed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from .common import (ProgressBar, UsageError, output_file_problem, positive_float,
                     positive_int)

#: where ``check`` writes a failing sequence's trace unless ``--trace-out`` says
DEFAULT_TRACE_OUT = "offload-shim-check.trace"

__all__ = ["register_cli", "run_check", "cmd_check", "run_sequence", "write_finding_trace"]


def register_cli(subparsers) -> None:
    """Add the ``check`` subcommand to ``offload-shim`` (cli.py calls this)."""
    pc = subparsers.add_parser("check", help="property-test a plugin (lifecycle state machine) "
                               "or probe its behaviour under misuse")
    pc.add_argument("plugin", help="plugin .so (libomptarget.rtl.* or libgomp-plugin-*); "
                    "'bundled' for the bundled host plugin")
    pc.add_argument("--abi", choices=("llvm", "gomp", "liboffload"), default=None,
                    help="ABI view of a plugin that exports several (the bundled one)")
    pc.add_argument("--probe-misuse", action="store_true",
                    help="run the known misuse sequences, each in its own child process")
    pc.add_argument("--max-examples", type=positive_int, default=200, metavar="N",
                    help="sequences hypothesis counts as examples (it starts a few more: "
                         "invalid ones and replays do not count)")
    pc.add_argument("--steps", type=positive_int, default=30, metavar="N",
                    help="steps per sequence")
    pc.add_argument("--seed", type=int, default=None,
                    help="random seed (default: derandomized, the same run every time)")
    pc.add_argument("--timeout", type=positive_float, default=None, metavar="SEC",
                    help="seconds for the whole child run (default 600; probes: 60 each); "
                         "also bounds the first load of the plugin")
    pc.add_argument("--no-threads", action="store_true", help="leave out the concurrency rules")
    pc.add_argument("--no-faults", action="store_true",
                    help="leave out fault injection (bundled plugin only)")
    pc.add_argument("--no-shrink", action="store_true",
                    help="report a failing sequence as found, without reducing it")
    pc.add_argument("--shrink-timeout", type=positive_float, default=300.0, metavar="SEC",
                    help="seconds for shrinking the failing sequences, every candidate "
                         "in a child process of its own (default 300)")
    pc.add_argument("--trace-out", default=DEFAULT_TRACE_OUT, metavar="PATH",
                    help="where a failing sequence (shrunk) is written as a trace that "
                         "'offload-shim replay PATH' re-runs (default: "
                         "offload-shim-check.trace; written only when something is found)")
    pc.add_argument("--json", action="store_true",
                    help="print the result as JSON on stdout (run: plugin, view, examples, "
                         "steps, seed, children, ok, findings; --probe-misuse: plugin, view, "
                         "rows, ok)")
    pc.add_argument("--child", help=__import__("argparse").SUPPRESS)
    pc.set_defaults(func=cmd_check)


def _resolve(plugin: str) -> str:
    if plugin == "bundled":
        from ..abi.native import bundled_plugin_path
        return str(bundled_plugin_path())
    return plugin


def cmd_check(args) -> int:
    if args.child:
        return _child_main(args)
    path = _resolve(args.plugin)
    from ..errors import PluginLoadError
    from . import plugin_view
    try:            # in a child: no constructor or destructor of the plugin runs here
        plugin = plugin_view(path, abi=args.abi, timeout=args.timeout)
    except (PluginLoadError, OSError) as exc:
        raise UsageError(f"check {args.plugin}: {exc}") from None
    if args.probe_misuse:
        return _probe_main(args, path, plugin)
    if args.trace_out != DEFAULT_TRACE_OUT:     # a path the user chose: checked before the run
        bad = output_file_problem(args.trace_out, "--trace-out")
        if bad:
            raise UsageError(bad)
    bar = ProgressBar(args.max_examples, "sequences", enabled=not args.json)
    try:
        result = run_check(path, args.abi, max_examples=args.max_examples, steps=args.steps,
                           seed=args.seed, timeout=args.timeout or 600.0,
                           threads=not args.no_threads, faults=not args.no_faults,
                           progress=bar.update, shrink=not args.no_shrink,
                           shrink_timeout=args.shrink_timeout, trace_out=args.trace_out)
    finally:
        bar.close()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_result(result)
    return 0 if result["ok"] else 1


def _print_result(r: dict) -> None:
    print(f"plugin   {r['plugin']} ({r['view']})")
    kids = r.get("children", 1)
    seed = "derandomized (no --seed)" if r["seed"] is None else r["seed"]
    n = r["examples"]
    print(f"ran      {n} sequence{'' if n == 1 else 's'} of up to {r['steps']} steps, "
          f"seed {seed}"
          + (f" ({kids} child processes)" if kids > 1 else ""))
    print("         (every sequence hypothesis started; --max-examples counts only the "
          "valid ones, so this may be more)")
    if r["ok"]:
        print("result   nothing found")
        return
    for f in r["findings"]:
        head = "STOPPED " if f["kind"] in NOT_PLUGIN_FAULTS else "FINDING "
        print(f"{head} {f['kind']}: {f['message']}")
        for c in f.get("causes", []):
            print(f"    cause: {c}")
        sh = f.get("shrunk")
        if sh and sh["reproduced"]:
            if sh["runs"] > 1 or len(sh["steps"]) < sh["from"]:
                print(f"shrunk sequence ({len(sh['steps'])} of {sh['from']} steps; "
                      f"{sh['runs']} runs, each in a child process of its own, "
                      f"{sh['seconds']} s):")
            else:
                print(f"sequence ({sh['from']} steps, not shrunk; run again alone in a "
                      "child process, it fails the same way):")
            print("    state = Machine()")
            for s in sh["program"]:
                print("    " + s)
            o = f.get("outcome") or {}
            at = o.get("step")
            print(f"    -> {o.get('signal') or o.get('message', '')}"
                  + (f" in step {at['i']} ({at['rule']})" if at else ""))
        else:
            if f.get("program"):
                print("shrunk program:\n" + f["program"])
            elif f.get("steps"):
                print("steps of the sequence that was running (not shrunk):")
                for s in f["steps"]:
                    print("    " + s)
            if sh:
                print(f"    (run again alone in a fresh process it ended: "
                      f"{(f.get('outcome') or {}).get('message', '?')}; not shrunk)")
        if f.get("trace"):
            print(f"trace    {f['trace']} (offload-shim replay {f['trace']} re-runs it in a "
                  "child process)")
        elif f.get("trace_error"):
            print(f"trace    not written: {f['trace_error']}")


def run_check(path: str, abi: str | None = None, *, max_examples: int = 200, steps: int = 30,
              seed: int | None = None, timeout: float = 600.0, threads: bool = True,
              faults: bool = True, progress=None, max_mappings: float | None = None,
              shrink: bool = True, shrink_timeout: float = 300.0,
              trace_out: str | None = None) -> dict:
    """Run the lifecycle machine against ``path`` in child processes.

    Returns ``{"plugin", "view", "examples", "steps", "seed", "children",
    "ok", "findings": [{"kind": "crash"|"hang"|"invariant"|"error"|
    "resource", "message", "signal"?, "exception"? (the type raised), "program"?
    (hypothesis's shrunk program), "steps"? (text log of the last sequence),
    "sequence"? (its steps as data), "shrunk"?, "outcome"?, "trace"?}]}``.
    ``timeout`` in seconds for the whole run (a hang is a finding).

    A ``crash``, ``invariant`` or ``error`` finding keeps the steps of the sequence
    that failed (``sequence``: hypothesis's shrunk one for an exception, the one that
    was running for a crash, which hypothesis cannot shrink: the process died).  That
    sequence is then run again, alone, in a fresh child, and -- with ``shrink`` --
    reduced to a minimal one that still fails the same way (same signal, or same
    exception type), each candidate in a child of its own
    (:func:`offload_shim.testing.sequences.shrink`, :func:`run_sequence`), within
    ``shrink_timeout`` seconds for all findings together: ``shrunk`` = ``{"steps",
    "program" (the steps as text), "from" (steps before), "runs", "seconds",
    "reproduced"}`` (``reproduced`` false: the sequence alone did not fail the same
    way in a fresh process, it is left as it was), ``outcome``: how the final sequence
    ended.  ``trace_out``: a path to write the (shrunk) sequence to as a check trace
    (``offload-shim replay`` re-runs it; the second finding's goes to
    ``trace_out.2``...): ``trace`` is the path written, ``trace_error`` why not.
    Raises ``ValueError`` for a ``max_examples``/``steps`` that is not a positive int or
    a ``timeout``/``shrink_timeout`` that is not a positive number of seconds.

    A real plugin never unloads what it loaded (each ``load_binary``
    dlopens a new temp copy for good), so a child ends its part of the run
    before its memory mappings near ``vm.max_map_count``
    (:class:`~offload_shim.testing.machine.ProcessExhausted`) and a fresh
    child carries on with the sequences still to run, under a seed derived
    from ``seed`` and the child's number (the same run every time).
    ``children``: how many were started; ``max_mappings``: the fraction of
    ``vm.max_map_count`` at which a child stops (default
    :data:`CHILD_MAX_MAPPINGS`).  ``progress(n)``: called with the number
    of sequences started so far.

    Each child runs in a session of its own with a private ``TMPDIR``; when
    the run ends -- normally, past ``timeout``, or by an exception such as
    KeyboardInterrupt -- the child's process group is killed and what it left
    is removed (:class:`~offload_shim.safety.children.ChildScope`).  How a
    child ended is reported as what it was (:func:`child_end`): a crash only
    for the signals a plugin raises itself (:data:`CRASH_SIGNALS`), any other
    signal ``"interrupted"`` (from outside: never counted against the
    plugin), exit status 2 ``"usage"``; a sequence that failed because the
    environment did (a full ``TMPDIR``, no file descriptors:
    :func:`environment_fault`) ``"environment"``.  These kinds
    (:data:`NOT_PLUGIN_FAULTS`) still make ``ok`` false (nothing verified)
    and print as ``STOPPED``, not ``FINDING``."""
    import threading
    import time

    from ..safety.children import ChildScope, check_timeout, stop_child
    from . import plugin_view
    for name, value in (("max_examples", max_examples), ("steps", steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, not {value!r}")
    timeout = check_timeout(timeout)
    shrink_timeout = check_timeout(shrink_timeout, "shrink_timeout")
    plugin = plugin_view(path, abi=abi)     # read in a child: never loaded here
    base = {"plugin": plugin.path, "view": f"{plugin.abi} {plugin.generation}",
            "examples": 0, "steps": steps, "seed": seed, "children": 0, "findings": []}
    deadline = time.monotonic() + timeout
    with ChildScope(prefix="osh_check_") as scope:
        tmp = scope.tmpdir
        while True:
            k = base["children"]
            base["children"] += 1
            res_file = os.path.join(tmp, f"result{k}.json")
            trace_file = os.path.join(tmp, "trace.txt")
            steps_file = os.path.join(tmp, "steps.jsonl")
            cfg = dict(path=plugin.path, abi=abi, max_examples=max_examples - base["examples"],
                       steps=steps, seed=seed, child=k, done=base["examples"],
                       threads=threads, faults=faults, result=res_file, trace=trace_file,
                       steps_log=steps_file,
                       max_mappings=CHILD_MAX_MAPPINGS if max_mappings is None else max_mappings)
            cmd = [sys.executable, "-m", "offload_shim.cli", "check", plugin.path,
                   "--child", json.dumps(cfg)]
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, errors="replace",
                                    env=scope.env(), start_new_session=True)
            scope.track(proc.pid)
            tail: list[str] = []
            started = [base["examples"]]    # sequences started, as the child reports them
            killed = False

            def pump(proc=proc, tail=tail, started=started):
                for line in proc.stdout:
                    line = line.rstrip("\n")
                    if line.startswith("progress "):
                        try:
                            started[0] = int(line.split()[1])
                        except (ValueError, IndexError):
                            continue
                        if progress:
                            progress(started[0])
                    else:
                        tail.append(line)
                        del tail[:-40]

            t = threading.Thread(target=pump, daemon=True)
            t.start()
            try:
                rc = proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                killed = True
                stop_child(proc)
                rc = proc.wait()
            finally:
                stop_child(proc)          # Ctrl-C / SIGTERM here: the child goes too
                if proc.returncode != 0:
                    scope.stop_strays()   # and whatever it had started
            t.join(10)
            steps_run = _read_trace(trace_file)
            child: dict = {}
            try:
                with open(res_file) as f:
                    child = json.load(f)
            except FileNotFoundError:
                pass
            except (OSError, ValueError):      # cut short: a full TMPDIR, a kill
                child = {}
            # a child that died without its result ran the sequences it reported started
            # (the one it died in included)
            base["examples"] = (base["examples"] + child["examples"] if "examples" in child
                                else max(base["examples"], started[0]))
            n_before = len(base["findings"])
            base["findings"] += child.get("findings", [])
            full = tmpdir_full() if (rc != 0 or not child) and not killed else None
            if full is not None:
                base["findings"].append({"kind": "environment", "message": f"{full}; the "
                                         f"child ended ({_status(rc)}) without a result, not "
                                         "counted against the plugin", "steps": steps_run,
                                         "output": tail[-10:]})
            elif killed:
                base["findings"].append({"kind": "hang",
                                         "message": f"no result after {timeout} s",
                                         "steps": steps_run})
            elif rc != 0:
                end = child_end(rc)
                end["steps"] = steps_run
                if end["kind"] in ("crash", "error", "usage"):
                    end["output"] = tail[-20:]
                base["findings"].append(end)
            elif not child:
                base["findings"].append({"kind": "error", "message": "the child exited 0 "
                                         "without a result (exit() in a plugin call?)",
                                         "output": tail[-20:], "steps": steps_run})
            elif child.get("exhausted") and not child.get("findings"):
                if child.get("examples", 0) == 0:
                    base["findings"].append({"kind": "resource", "message": "a fresh child "
                                             "has no room for one sequence: "
                                             + child["exhausted"]})
                elif base["examples"] < max_examples:
                    continue                    # a fresh child runs the rest
            sequence = _read_steps(steps_file)  # the sequence that failed (hypothesis's
            for f in base["findings"][n_before:]:   # shrunk one: it ran last), as data
                if f["kind"] in SHRINK_KINDS and sequence:
                    f["sequence"] = sequence
            break
    found = [f for f in base["findings"] if f.get("sequence")]
    if found and (shrink or trace_out):
        shrink_deadline = time.monotonic() + shrink_timeout
        header = {"plugin": plugin.path, "abi": abi, "view": base["view"],
                  "threads": threads, "faults": faults, "seed": seed}
        for n, f in enumerate(found):
            _shrink_finding(f, plugin.path, abi, threads=threads, faults=faults,
                            deadline=shrink_deadline, shrink=shrink)
            if trace_out:
                dest = trace_out if n == 0 else f"{trace_out}.{n + 1}"
                try:
                    f["trace"] = write_finding_trace(f, dest, header)
                except OSError as exc:
                    f["trace_error"] = f"{dest}: {exc.strerror or exc}"
    base["ok"] = not base["findings"]
    return base


from ..safety.children import CRASH_SIGNALS  # noqa: E402 - (re-exported here)
_LIMIT_SIGNALS = frozenset({signal.SIGXCPU, signal.SIGXFSZ})

#: kinds of a result entry that say why a run stopped, not what the plugin did
NOT_PLUGIN_FAULTS = frozenset({"interrupted", "environment", "usage"})


def child_end(rc: int) -> dict:
    """How a child that wrote no result ended, as a result entry ``{"kind", "message",
    "signal"?}``: ``crash`` (a signal of :data:`CRASH_SIGNALS`: the plugin's fault),
    ``interrupted`` (any other signal, from outside; SIGKILL also by the out-of-memory
    killer; or the exit status 130/143 the CLI gives Ctrl-C/SIGTERM), ``environment``
    (SIGXCPU/SIGXFSZ: a resource limit), ``usage`` (exit status 2: the child refused its
    configuration), ``error`` (any other exit status)."""
    from ..safety.children import signal_name
    from .common import EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE
    if rc < 0:
        sig = signal_name(rc)
        if -rc in CRASH_SIGNALS:
            return {"kind": "crash", "signal": sig, "message": f"the child died of {sig}"}
        if -rc in _LIMIT_SIGNALS:
            return {"kind": "environment", "signal": sig,
                    "message": f"the child was ended by {sig}: a resource limit "
                    "(ulimit) of the environment, not counted against the plugin"}
        who = "from outside or by the kernel's out-of-memory killer" \
            if -rc == signal.SIGKILL else "from outside"
        return {"kind": "interrupted", "signal": sig,
                "message": f"the child was ended by {sig} {who} "
                "(not counted as a crash of the plugin)"}
    if rc in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        sig = "SIGINT" if rc == EXIT_INTERRUPTED else "SIGTERM"
        return {"kind": "interrupted", "signal": sig,
                "message": f"the child was ended by {sig} from outside before it ran "
                "a sequence (not counted against the plugin)"}
    if rc == EXIT_USAGE:
        return {"kind": "usage", "message": "the child refused its configuration (exit 2): "
                "see its output"}
    return {"kind": "error", "message": f"the child exited {rc} without a result "
            "(exit() in a plugin call?)"}


def environment_fault(exc: BaseException) -> str | None:
    """Why ``exc`` (a sequence's failure) is the environment's fault, or None: an OSError
    for a full or read-only file system, too many open files or no memory anywhere in its
    chain (``__cause__``/``__context__``, exception groups), or ``TMPDIR`` found full
    after the failure (a plugin writes each image it loads there: LLVM's
    ``loadBinary`` with ``sys::fs::createTemporaryFile``, libgomp's plugins likewise;
    its refusal then reads as an invalid image)."""
    import errno
    codes = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
             errno.EROFS: "read-only file system", errno.EMFILE: "too many open files",
             errno.ENFILE: "too many open files in the system",
             errno.ENOMEM: "out of host memory"}
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in codes:
            return f"{codes[e.errno]} ({type(e).__name__}: {e})"
        todo += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]
    return tmpdir_full()


def tmpdir_full() -> str | None:
    """What is wrong when the temporary directory (``TMPDIR``, else
    ``tempfile.gettempdir()``: where a child's private folder is) has under
    :data:`TMPDIR_FULL_BYTES` or no inode free, else None.  (Not gettempdir() first: on a
    full file system its probe file cannot be written and it answers another folder.)"""
    import tempfile
    tmp = os.environ.get("TMPDIR") or tempfile.gettempdir()
    try:
        st = os.statvfs(tmp)
    except OSError:
        return None
    if st.f_bavail * st.f_frsize < TMPDIR_FULL_BYTES or (st.f_files and st.f_favail == 0):
        return (f"the temporary directory {tmp} is full "
                f"({st.f_bavail * st.f_frsize} bytes, {st.f_favail} inodes free): plugins "
                "write every image they load there")
    return None


def _status(rc: int) -> str:
    from ..safety.children import signal_name
    return signal_name(rc) if rc < 0 else f"exit {rc}"


#: free bytes under which ``TMPDIR`` counts as full when a sequence fails (a plugin's
#: temporary copy of the sample image is about 16 KiB)
TMPDIR_FULL_BYTES = 1 << 20


def _read_trace(path: str) -> list[str]:
    try:
        with open(path) as f:
            return [ln.rstrip("\n") for ln in f][-60:]
    except OSError:
        return []


#: a child ends its part of the run when its memory mappings pass this
#: fraction of vm.max_map_count (room left for the sequence in progress)
CHILD_MAX_MAPPINGS = 0.5


def _child_seed(seed: int | None, child: int) -> int | None:
    """Seed of child ``child``: the first runs the run as asked (None:
    derandomized), the next ones a seed derived from both."""
    if child == 0:
        return seed
    import zlib
    return zlib.crc32(f"offload-shim check {seed} {child}".encode())


def _sub_exceptions(exc: BaseException, limit: int = 6) -> list[str]:
    """``"Type: message (file:line)"`` of each exception inside an exception group
    (hypothesis's FlakyFailure holds the failures of the runs that disagreed)."""
    import traceback
    out = []
    for sub in getattr(exc, "exceptions", ())[:limit]:
        tb = traceback.extract_tb(sub.__traceback__)
        where = f" ({tb[-1].filename}:{tb[-1].lineno})" if tb else ""
        out.append(f"{type(sub).__name__}: {sub}{where}"[:2000])
    return out


def _child_main(args) -> int:
    """In the child: run the machine, write the result file.  SIGTERM ends
    it after removing its image copies, by that signal (the parent tells it
    from a crash)."""
    import logging
    from ..abi import libc
    from ..safety.leftovers import unlink_mapped_copies
    libc.set_parent_death_signal(signal.SIGKILL)     # no orphan if the parent is killed

    def die_by(signum, frame):
        # never an exception: hypothesis would take it for the plugin's failure (and,
        # replayed without the signal, report a FlakyFailure against the plugin)
        unlink_mapped_copies()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)             # the parent sees the very signal

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, die_by)
    cfg = json.loads(args.child)
    logging.getLogger("offload_shim").setLevel(logging.ERROR)
    from hypothesis import HealthCheck, settings
    from hypothesis import seed as hseed
    from hypothesis.stateful import get_state_machine_test

    from ..testing.machine import (ProcessExhausted, make_lifecycle_machine, mapping_usage,
                                   run_first_sequence)
    trace = open(cfg["trace"], "w", buffering=1)
    steps_log = open(cfg["steps_log"], "w", buffering=1) if cfg.get("steps_log") else None
    done = cfg.get("done", 0)
    counter = {"n": 0}

    def tr(line):
        trace.write(line + "\n")

    def rec(step):             # each step as data, before it runs (the last one survives a crash)
        if steps_log is not None:
            steps_log.write(json.dumps(step) + "\n")

    base = make_lifecycle_machine(cfg["path"], cfg["abi"], threads=cfg["threads"],
                                  faults=None if cfg["faults"] else False, trace=tr,
                                  record=rec)
    if cfg.get("mode") == "steps":
        return _child_steps(cfg, base, trace, steps_log)

    class Machine(base):
        max_mappings = cfg.get("max_mappings", CHILD_MAX_MAPPINGS)

        def __init__(self):
            counter["n"] += 1
            trace.seek(0)
            trace.truncate()
            if steps_log is not None:
                steps_log.seek(0)
                steps_log.truncate()
            print(f"progress {done + counter['n']}", flush=True)
            super().__init__()

    Machine.__name__ = base.__name__
    seed = _child_seed(cfg["seed"], cfg.get("child", 0))
    s = settings(max_examples=cfg["max_examples"], stateful_step_count=cfg["steps"],
                 deadline=None, database=None, derandomize=seed is None,
                 suppress_health_check=list(HealthCheck), print_blob=False)
    test = get_state_machine_test(Machine, settings=s)
    if seed is not None:
        test = hseed(seed)(test)
    findings = []
    exhausted = None
    try:
        if not done:                  # the first child: register, init, launch once first
            run_first_sequence(Machine)   # (counted; a ProcessExhausted after it: the next
                                          # child runs hypothesis's sequences)
        test()
    except ProcessExhausted as exc:   # not a finding: the parent starts a fresh child
        exhausted = str(exc)          # (raised after a sequence that passed)
    except BaseException as exc:   # the finding itself
        notes = "\n".join(getattr(exc, "__notes__", []))
        kind = "invariant" if isinstance(exc, AssertionError) else "error"
        msg = f"{type(exc).__name__}: {exc}"
        env = environment_fault(exc)
        if env is not None:
            kind = "environment"
            msg = (f"{env}; not counted against the plugin (what the sequence raised: "
                   f"{msg})")
        use = mapping_usage()
        if use is not None and use[0] > 0.95 * use[1]:
            # the safety margin did not hold: say so, not just what hypothesis made of it
            kind = "resource"
            msg = (f"the process ran out of memory mappings ({use[0]} of vm.max_map_count="
                   f"{use[1]}); what hypothesis reported then: {msg}")
        finding = {"kind": kind, "message": msg, "program": notes,
                   "exception": type(exc).__name__}
        subs = _sub_exceptions(exc)
        if subs:                       # hypothesis's Flaky*: what each run actually raised
            finding["causes"] = subs
        findings.append(finding)
    finally:
        unlink_mapped_copies()
    res = {"examples": counter["n"], "findings": findings, "exhausted": exhausted}
    with open(cfg["result"], "w") as f:
        json.dump(res, f)
    trace.close()
    sys.stdout.flush()
    return 0


def _child_steps(cfg, machine_cls, trace, steps_log) -> int:
    """In a child: run one list of steps (:func:`run_sequence`) and write how it ended."""
    from ..testing.sequences import SequenceError, run_steps
    with open(cfg["steps"]) as f:
        steps = json.load(f)
    outcome: dict = {"kind": "passed", "message": "the sequence passed"}
    try:
        outcome["ran"] = run_steps(machine_cls, steps)
    except SequenceError as exc:
        outcome = {"kind": "invalid", "message": str(exc)}
    except BaseException as exc:   # how the sequence failed
        env = environment_fault(exc)
        kind = "environment" if env else (
            "invariant" if isinstance(exc, AssertionError) else "error")
        outcome = {"kind": kind, "exception": type(exc).__name__,
                   "message": (f"{env}; " if env else "") + f"{type(exc).__name__}: {exc}"}
    finally:
        from ..safety.leftovers import unlink_mapped_copies
        unlink_mapped_copies()
    with open(cfg["result"], "w") as f:
        json.dump({"outcome": outcome}, f)
    trace.close()
    if steps_log is not None:
        steps_log.close()
    sys.stdout.flush()
    return 0


def _read_steps(path: str) -> list[dict]:
    """The steps a child recorded (JSON Lines; a line cut short by a crash is left out)."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    break
    except OSError:
        pass
    return out


def run_sequence(path: str, abi: str | None, steps: list[dict], *, threads: bool = True,
                 faults: bool = True, timeout: float = 60.0) -> dict:
    """Run one list of lifecycle-machine steps (:mod:`offload_shim.testing.sequences`)
    against the plugin at ``path`` in a child process of its own (a private ``TMPDIR``,
    its leftovers removed, as every check child) and say how it ended: ``{"kind":
    "passed"|"invariant"|"error"|"crash"|"hang"|"invalid"|"interrupted"|"environment"|
    "usage", "message", "signal"? (crash, interrupted), "exception"? (the type a step
    raised), "step"? (``{"i", "rule"}`` of the last step started)}``.  ``invalid``: the
    steps cannot run here (a reference to an object its step did not return).
    ``timeout``: seconds (a run past it is a ``hang``; the child is killed)."""
    import subprocess

    from ..safety.children import ChildScope, check_timeout, run_child
    timeout = check_timeout(timeout)
    with ChildScope(prefix="osh_seq_") as scope:
        tmp = scope.tmpdir
        files = {k: os.path.join(tmp, f"{k}.json") for k in ("steps", "result", "trace",
                                                             "steps_log")}
        with open(files["steps"], "w") as f:
            json.dump(steps, f)
        cfg = dict(mode="steps", path=path, abi=abi, threads=threads, faults=faults,
                   **files)
        cmd = [sys.executable, "-m", "offload_shim.cli", "check", path, "--child",
               json.dumps(cfg)]
        try:
            cp = run_child(cmd, timeout=timeout, scope=scope, merge_stderr=True)
            rc, out = cp.returncode, cp.stdout
        except subprocess.TimeoutExpired:
            rc, out = None, ""
        ran = _read_steps(files["steps_log"])
        try:
            with open(files["result"]) as f:
                outcome = json.load(f)["outcome"]
        except (OSError, ValueError, KeyError):
            outcome = None
    if rc is None:
        outcome = {"kind": "hang", "message": f"no result after {timeout} s"}
    elif outcome is None or rc != 0:
        outcome = child_end(rc) if rc != 0 else {
            "kind": "error", "message": "the child exited 0 without a result (exit() in a "
            "plugin call?)"}
        outcome["output"] = out.splitlines()[-10:]
    if ran:
        outcome["step"] = {"i": ran[-1].get("i"), "rule": ran[-1].get("rule")}
    return outcome


#: finding kinds whose sequence is shrunk and written as a trace: what the plugin did
SHRINK_KINDS = frozenset({"crash", "invariant", "error"})


def _shrink_finding(finding: dict, path: str, abi: str | None, *, threads: bool,
                    faults: bool, deadline: float, shrink: bool) -> None:
    """Reduce the finding's recorded sequence (``finding["sequence"]``) to a minimal one
    that still fails the same way, each candidate in its own child
    (:func:`run_sequence`); sets ``finding["shrunk"]`` (``steps`` and their text,
    ``from`` (steps before), ``runs``, ``seconds``, ``reproduced``: the sequence alone,
    in a fresh process, fails the same way) and ``finding["outcome"]`` (how the shrunk
    sequence ends)."""
    import time

    from ..testing.sequences import failure_signature, format_steps, shrink as reduce
    seq = finding.get("sequence") or []
    t0 = time.monotonic()
    first = run_sequence(path, abi, seq, threads=threads, faults=faults,
                         timeout=max(min(deadline - t0, 120.0), 1.0))
    took = time.monotonic() - t0
    want = failure_signature(finding)       # the same signal, exception type or exit
    reproduced = failure_signature(first) == want
    best, runs, outcome = seq, 1, first
    if reproduced and shrink:
        per = min(max(10.0, 5 * took), 120.0)
        last: dict = {"outcome": first}

        def fails(cand):
            left = deadline - time.monotonic()
            if left <= 1:
                return False
            got = run_sequence(path, abi, cand, threads=threads, faults=faults,
                               timeout=min(per, left))
            if failure_signature(got) == want:
                last["outcome"] = got          # the last candidate kept is the result
                return True
            return False

        best, n = reduce(seq, fails, deadline=deadline)
        runs += n
        outcome = last["outcome"]
    outcome.pop("output", None)
    finding["outcome"] = outcome          # how the (shrunk) sequence ended, run alone
    finding["shrunk"] = {"steps": best, "program": format_steps(best), "from": len(seq),
                         "runs": runs, "seconds": round(time.monotonic() - t0, 1),
                         "reproduced": reproduced}


def write_finding_trace(finding: dict, dest: str, header: dict) -> str:
    """Write the finding's shrunk sequence (else the recorded one) as a check trace
    (:func:`offload_shim.testing.sequences.write_trace`) to ``dest``; returns the
    path.  Raises ``OSError``."""
    from ..testing.sequences import write_trace
    sh = finding.get("shrunk") or {}
    steps = sh.get("steps") or finding.get("sequence") or []
    if sh.get("reproduced"):
        outcome = dict(finding["outcome"])
    else:               # what check saw; the steps alone did not do it again (or not run)
        outcome = {k: finding[k] for k in ("kind", "signal", "exception", "message")
                   if k in finding}
        outcome["reproduced"] = False
    outcome.pop("output", None)
    return write_trace(dest, steps, outcome, header)


# -- --probe-misuse -------------------------------------------------------------------

def _probe_main(args, path, plugin) -> int:
    from ..testing.probes import run_probes
    rows = run_probes(path, args.abi, timeout=args.timeout or 60.0,
                      progress=None if args.json else (lambda n: print(f"  probe {n}",
                                                                       flush=True)))
    found = [r for r in rows if not (r["outcome"].startswith(("error", "returned", "void", "n/a")))]
    if args.json:
        print(json.dumps({"plugin": plugin.path, "view": f"{plugin.abi} {plugin.generation}",
                          "rows": rows, "ok": not found}, indent=2))
    else:
        print(format_table(rows, f"{plugin.name} ({plugin.abi} {plugin.generation})"))
        print(f"\n{len(found)} of {len(rows)} misuse sequences crashed, hung, exited or were "
              "accepted silently" if found else "\nevery misuse was answered with an error")
    return 0 if not found else 1


def format_table(rows: list[dict], title: str = "") -> str:
    """A Markdown conformance table: sequence | outcome | detail."""
    out = [f"#### {title}", ""] if title else []
    out += ["| sequence | outcome | detail |", "|---|---|---|"]
    for r in rows:
        out.append(f"| `{r['probe']}`: {r['what']} | {r['outcome']} | "
                   f"{r['detail'].replace('|', '/')} |")
    return "\n".join(out)
