"""``offload-shim compare PROGRAM [ARGS...]``: run a program under the real runtime and
under ``offload-shim run``, and say whether the two agree.

    offload-shim compare [--plugin P ...] [--bundled] [--policy P] [--timeout S]
                         [--stdin FILE] [--full | --json] PROGRAM [ARGS...]

Both runs read an empty standard input (``/dev/null``), or the file ``--stdin FILE``
from its start: compare's own stdin is never passed on (one stream cannot be read
twice).  The reference run is the program as it is (the libomptarget it links, e.g. LLVM 16's
with the Debian host plugins); the other run is the same command under
``offload-shim run`` (:func:`offload_shim.cli.run.run_environment`).  The two agree when
the exit status, stdout and the runtime's diagnostic lines on stderr
(``Libomptarget message:`` -- ``omptarget`` from LLVM 19 on -- / ``error:`` /
``warning:`` / ``fatal error N:`` /
``device N info:``, the LLVM 16 nextgen plugins' ``"PluginInterface" error:`` /
``device N info:``, GCC's ``libgomp:``) are equal after addresses (``0x...``) are
normalised.  Shown with each result but not compared: offload_shim's own lines
(``offload_shim: ...``: why the run under it went as it did, e.g. an entry layout it
does not know) and the rest of stderr, what the program itself wrote.  Printed: one
verdict line, for a difference the differing lines (a unified diff, one line of
context, at most :data:`SUMMARY_DIFF_LINES`), and offload_shim's own lines of the run
under it; ``--full`` prints both complete results and the whole diff, ``--json`` both
results as JSON.  Exit status 0 only when they
agree, 1 when they differ or a run was killed at ``--timeout``, 2 when the program
cannot be run, 3 when they differ and the run under ``offload-shim run`` met a
data-losing bug of the program's libomptarget release that offload_shim does not
reproduce (it follows the upstream fix: the ``fixed_upstream`` counts of its
``--report``, :data:`offload_shim.interposer.llvm.profile.FIXED_UPSTREAM`): the difference is
labelled ``known: fixed upstream (ID: FIX)`` instead of ``DIFFERENT`` (the run may
still differ in other ways: the diff is printed all the same).  Each run has a private ``TMPDIR`` and a session of its own; what it
leaves (image copies, libomp segments, processes) is removed, also after a timeout,
Ctrl-C or SIGTERM.

The comparison itself (:func:`run_outcome`, :func:`compare`) is what the differential
conformance tests (tests/test_conformance.py) use.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field

ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
#: diff lines ``offload-shim compare`` prints without ``--full``
SUMMARY_DIFF_LINES = 40
#: stderr lines that are the runtime's diagnostics (libomptarget 16 private.h / Debug.h
#: MESSAGE, FAILURE_MESSAGE, FATAL_MESSAGE, INFO; libgomp gomp_fatal / gomp_error)
DIAGNOSTIC = re.compile(r"(Libomptarget|omptarget) (message|error|warning|fatal error -?\d+"
                        r"|device \d+ info)"
                        r"|\"PluginInterface\" (error|device \d+ info)|^libgomp: ")


def normalise(line: str) -> str:
    """``line`` with every hexadecimal address replaced by ``0x?`` and trailing blanks
    removed."""
    return ADDRESS.sub("0x?", line).rstrip()


#: stderr lines of offload_shim itself (the embedded runtime's ``offload_shim: ...``, the
#: command's ``offload-shim: ...``): why a run under ``offload-shim run`` went as it did
#: (an entry layout it does not know, a runtime that could not start, ...)
OWN_LINE = re.compile(r"^offload[_-]shim: ")


@dataclass
class Outcome:
    """What a run showed: ``status`` (exit status; negative = killed by that signal;
    ``"timeout"``), ``stdout`` lines and ``diagnostics`` (the runtime's stderr lines),
    both normalised and compared; shown but not compared: ``own`` (offload_shim's own
    stderr lines, :data:`OWN_LINE`) and ``program_stderr`` (every other stderr line:
    what the program itself wrote); ``stderr``: the raw stderr; ``fixed_upstream``
    (runs under ``offload-shim run`` with a report, :func:`run_shim_outcome`): the
    report's ``fixed_upstream`` counts, id -> times met (not compared)."""
    status: int | str
    stdout: list[str]
    diagnostics: list[str]
    stderr: str = field(default="", repr=False)
    own: list[str] = field(default_factory=list)
    program_stderr: list[str] = field(default_factory=list)
    fixed_upstream: dict = field(default_factory=dict)

    @classmethod
    def from_output(cls, status, stdout: str, stderr: str) -> "Outcome":
        diags, own, rest = [], [], []
        for line in stderr.splitlines():
            m = DIAGNOSTIC.search(line)
            if m:
                # a source location before a fatal error stays ("file:l:c: Libomptarget fatal
                # error 1: ..."), output glued to the front of the line does not
                start = m.start()
                loc = re.match(r"^(.*?:\d+:\d+: )(Libomptarget|omptarget) ", line)
                diags.append(normalise(line if loc or start == 0 else line[start:]))
            elif OWN_LINE.match(line):
                own.append(line.rstrip())
            elif line.strip():
                rest.append(line.rstrip())
        return cls(status, [normalise(l) for l in stdout.splitlines()], diags, stderr,
                   own, rest)

    @property
    def status_text(self) -> str:
        """The exit status as read: ``0``, ``3``, ``-11 (killed by SIGSEGV)``, ``timeout``."""
        if not isinstance(self.status, int) or self.status >= 0:
            return str(self.status)
        import signal
        try:
            name = signal.Signals(-self.status).name
        except ValueError:
            name = f"signal {-self.status}"
        return f"{self.status} (killed by {name})"

    def render(self) -> list[str]:
        """The compared parts (exit status, stdout, diagnostics), as lines."""
        return ([f"exit status: {self.status_text}", "stdout:"] + [f"  {l}" for l in self.stdout]
                + ["diagnostics:"] + [f"  {l}" for l in self.diagnostics])

    def render_context(self) -> list[str]:
        """What is shown but not compared: offload_shim's own lines and the program's
        own stderr (empty when there is neither)."""
        out = []
        if self.own:
            out += ["offload_shim said (not compared):"] + [f"  {l}" for l in self.own]
        if self.program_stderr:
            out += ["the program's stderr (not compared):"] + \
                [f"  {l}" for l in self.program_stderr]
        return out

    def key(self) -> tuple:
        return (self.status, tuple(self.stdout), tuple(self.diagnostics))


def run_outcome(argv, *, env=None, timeout: float = 120.0, cwd=None,
                isolated: bool = False, stdin: str | None = None) -> Outcome:
    """Run ``argv`` (stdin empty, or read from the file ``stdin``; stdout/stderr
    captured through pipes) and return its
    :class:`Outcome` (``status == "timeout"`` when it ran past ``timeout`` seconds and
    was killed).  ``isolated``: as :func:`offload_shim.plugins.isolation.run_child` --
    a session of its own and a private ``TMPDIR``; whatever ends it (its exit, the
    timeout, Ctrl-C, SIGTERM) its process group is killed and what it left is removed
    (the LLVM x86_64 plugins' ``/tmp/tmpfile_*`` image copies, libomp's
    ``/dev/shm/__KMP_REGISTERED_LIB_*`` segment); about 0.6 s more per run (the copies
    are removed only once nothing writes them).  Raises FileNotFoundError /
    PermissionError when it cannot be started."""
    if isolated:
        from ..safety.children import run_child
        try:
            p = run_child(list(argv), env=env, timeout=timeout, cwd=cwd, stdin=stdin)
        except subprocess.TimeoutExpired as exc:
            return Outcome.from_output("timeout", exc.stdout or "", exc.stderr or "")
        return Outcome.from_output(p.returncode, p.stdout, p.stderr)
    try:
        if stdin is None:
            p = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True,
                               env=env, timeout=timeout, cwd=cwd)
        else:
            with open(stdin, "rb") as source:
                p = subprocess.run(list(argv), stdin=source, capture_output=True,
                                   env=env, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if exc.stdout else ""
        err = exc.stderr.decode(errors="replace") if exc.stderr else ""
        return Outcome.from_output("timeout", out, err)
    return Outcome.from_output(p.returncode, p.stdout.decode(errors="replace"),
                               p.stderr.decode(errors="replace"))


def run_shim_outcome(argv, *, env: dict, timeout: float = 120.0, cwd=None,
                     isolated: bool = False, stdin: str | None = None) -> Outcome:
    """:func:`run_outcome` of a run under ``offload-shim run`` (``env`` made by
    :func:`offload_shim.cli.run.run_environment`) with its report (``--report``)
    written to a file of this process's temporary directory and removed afterwards:
    the Outcome's ``fixed_upstream`` is the report's (empty when the program wrote no
    report: killed, or ended before the runtime stopped).  Raises KeyError when
    ``env`` is no such environment, and what :func:`run_outcome` raises."""
    opts = json.loads(env["OFFLOAD_SHIM_RUN_OPTIONS"])
    fd, path = tempfile.mkstemp(prefix="osh-report-", suffix=".json")
    os.close(fd)
    try:
        opts["report"] = path
        env = dict(env, OFFLOAD_SHIM_RUN_OPTIONS=json.dumps(opts))
        out = run_outcome(argv, env=env, timeout=timeout, cwd=cwd, isolated=isolated,
                          stdin=stdin)
        try:
            with open(path) as f:
                report = json.load(f)
        except (OSError, ValueError):
            report = {}
        found = report.get("fixed_upstream") if isinstance(report, dict) else None
        out.fixed_upstream = dict(found) if isinstance(found, dict) else {}
        return out
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def shim_environment(*, plugins=(), bundled=False, policy=None, base=None) -> dict:
    """The environment of a run under ``offload-shim run`` (see
    :func:`offload_shim.cli.run.run_environment`)."""
    from .run import run_environment
    return run_environment(plugins=plugins, bundled=bundled, policy=policy, base=base)


@dataclass
class Comparison:
    """``reference`` and ``shim`` outcomes of one command; ``same`` when they agree."""
    argv: list[str]
    reference: Outcome
    shim: Outcome

    @property
    def timed_out(self) -> bool:
        """A run was killed at the timeout: nothing was compared."""
        return "timeout" in (self.reference.status, self.shim.status)

    @property
    def same(self) -> bool:
        """Both runs finished and agree (two runs killed at the timeout do not)."""
        return not self.timed_out and self.reference.key() == self.shim.key()

    @property
    def known(self) -> list[str]:
        """When the runs finished and differ: the labels (``known: fixed upstream
        (ID: FIX)``, :meth:`~offload_shim.interposer.llvm.profile.FixedUpstream.label`) of
        the bugs of the program's release that the ``offload-shim run`` run met and
        did not reproduce (its ``fixed_upstream`` counts), which explain a difference;
        otherwise empty."""
        if self.same or self.timed_out or not self.shim.fixed_upstream:
            return []
        from ..interposer.llvm.profile import FIXED_UPSTREAM
        return [FIXED_UPSTREAM[b].label() for b in sorted(self.shim.fixed_upstream)
                if b in FIXED_UPSTREAM]

    @property
    def verdict(self) -> str:
        """``"same"``, ``"known"`` (they differ and :attr:`known` names why),
        ``"different"`` or ``"timeout"`` (nothing compared)."""
        if self.timed_out:
            return "timeout"
        if self.same:
            return "same"
        return "known" if self.known else "different"

    def diff(self, context: int = 3) -> list[str]:
        """A unified diff of the compared parts (:meth:`Outcome.render`), ``context``
        lines around each change."""
        return list(difflib.unified_diff(self.reference.render(), self.shim.render(),
                                         "reference", "offload-shim run", lineterm="",
                                         n=context))

    def summary(self, max_lines: int = SUMMARY_DIFF_LINES) -> list[str]:
        """What ``offload-shim compare`` prints without ``--full``: one verdict line
        (exit statuses, how many stdout and diagnostic lines), then for a difference
        the differing lines (a unified diff with one line of context, at most
        ``max_lines`` of it), then offload_shim's own lines of the run under it (at
        most 5: why it went as it did).  Independent of the programs' output size."""
        r, s = self.reference, self.shim
        sizes = (f"{len(r.stdout)} stdout line{'s' if len(r.stdout) != 1 else ''}, "
                 f"{len(r.diagnostics)} diagnostic line{'s' if len(r.diagnostics) != 1 else ''}")
        if self.timed_out:
            out = [f"NOT COMPARED: a run took longer than the timeout (reference: exit "
                   f"status {r.status_text}, offload-shim run: {s.status_text})"]
        elif self.same:
            out = [f"same: exit status {r.status_text}, stdout and diagnostics agree ({sizes}; "
                   f"--full shows both)"]
        else:
            d = self.diff(context=1)[2:]          # without the ---/+++ header
            head = ("different, " + "; ".join(self.known)) if self.known else "DIFFERENT"
            out = [f"{head}: exit status {r.status_text} / {s.status_text} (reference / "
                   f"offload-shim run); reference: {sizes}; offload-shim run: "
                   f"{len(s.stdout)} stdout, {len(s.diagnostics)} diagnostic lines"]
            out += d[:max_lines]
            if len(d) > max_lines:
                out.append(f"... {len(d) - max_lines} more diff lines (--full shows all)")
        if s.own:
            out += ["offload_shim said (not compared):"] + [f"  {l}" for l in s.own[:5]]
            if len(s.own) > 5:
                out.append(f"  ... {len(s.own) - 5} more")
        return out


def compare(argv, *, env=None, plugins=(), bundled=False, policy=None,
            timeout: float = 120.0, isolated: bool = True,
            stdin: str | None = None) -> Comparison:
    """Run ``argv`` as is and under ``offload-shim run``; ``env`` is the base
    environment of both (default: this process's); ``timeout``: seconds per run;
    ``stdin``: a file both runs read as their standard input (default: empty);
    ``isolated``: see :func:`run_outcome` (``offload-shim compare`` leaves nothing
    behind, also when interrupted).  The ``offload-shim run`` run writes its report
    (:func:`run_shim_outcome`): :attr:`Comparison.known`."""
    base = dict(os.environ if env is None else env)
    ref = run_outcome(argv, env=base, timeout=timeout, isolated=isolated, stdin=stdin)
    got = run_shim_outcome(argv, env=shim_environment(plugins=plugins, bundled=bundled,
                                                      policy=policy, base=base),
                           timeout=timeout, isolated=isolated, stdin=stdin)
    return Comparison(list(argv), ref, got)


def _stdin_problem(path: str) -> str | None:
    """Why ``--stdin PATH`` cannot feed both runs the same bytes, or None: it must be a
    readable regular file or /dev/null (a pipe or terminal would be read up by the
    first run)."""
    import stat
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) and os.path.realpath(path) != os.devnull:
            return (f"--stdin {path}: not a regular file (both runs read it from the "
                    f"start: a pipe, a device or a directory cannot be read twice)")
        with open(path, "rb"):
            pass
    except OSError as exc:
        return f"--stdin {path}: {exc.strerror or exc}"
    return None


def cmd_compare(args) -> int:
    from .run import check_plugins
    prog = args.program
    if os.sep not in prog:
        prog = shutil.which(prog) or prog
    if not os.path.exists(prog):
        print(f"offload-shim: error: {args.program}: no such program", file=sys.stderr)
        return 2
    bad = check_plugins(args.plugin)
    if not bad and args.stdin is not None:
        bad = _stdin_problem(args.stdin)
    if bad:
        print(f"offload-shim: error: {bad}", file=sys.stderr)
        return 2
    import errno

    def both(argv):
        return compare(argv, plugins=args.plugin, bundled=args.bundled,
                       policy=args.policy, timeout=args.timeout, stdin=args.stdin)
    try:
        try:
            c = both([prog, *args.args])
        except OSError as exc:
            if exc.errno != errno.ENOEXEC:
                raise
            # a script without #!: /bin/sh runs it, as execvp, the shells and
            # offload-shim run do (cmd_run)
            c = both(["/bin/sh", prog, *args.args])
    except (OSError, RuntimeError) as exc:
        print(f"offload-shim: error: cannot run {args.program}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"argv": c.argv, "same": c.same, "timed_out": c.timed_out,
                          "verdict": c.verdict, "known": c.known,
                          "reference": {k: v for k, v in asdict(c.reference).items()
                                        if k != "stderr"},
                          "offload_shim": {k: v for k, v in asdict(c.shim).items()
                                           if k != "stderr"},
                          "diff": c.diff()}))
    elif args.full:
        for title, o in (("reference (the program's own runtime)", c.reference),
                         ("offload-shim run", c.shim)):
            print(f"== {title}")
            print("\n".join(o.render() + o.render_context()))
        if c.timed_out:
            print(f"== NOT COMPARED: a run took longer than --timeout {args.timeout:g} s")
        elif c.same:
            print("== same: exit status, stdout and diagnostics agree")
        elif c.known:
            print("== different, " + "; ".join(c.known) + ":")
        else:
            print("== DIFFERENT:")
        if not c.same and not c.timed_out:
            print("\n".join(c.diff()))
    else:
        print("\n".join(c.summary()))
    return {"same": 0, "known": 3}.get(c.verdict, 1)


def register_cli(subparsers) -> None:
    from .common import positive_float
    p = subparsers.add_parser(
        "compare", help="run a program under its real OpenMP runtime and under "
        "offload-shim run; print a verdict line and the differing lines (--full: both "
        "results) (exit 0 when they agree, 3 when a bug of the program's runtime that "
        "upstream fixed explains the difference)")
    p.add_argument("--plugin", action="append", default=[], help="plugin path for the "
                   "offload-shim run (repeatable; default: as libomptarget 16 chooses)")
    p.add_argument("--bundled", action="store_true", help="add the bundled host plugin")
    p.add_argument("--policy", choices=["disabled", "default", "mandatory"],
                   help="override OMP_TARGET_OFFLOAD in the offload-shim run")
    p.add_argument("--timeout", type=positive_float, default=120.0, metavar="SEC",
                   help="seconds each of the two runs may take (default 120); a run "
                        "past it is killed and the command exits 1")
    p.add_argument("--stdin", metavar="FILE", default=None,
                   help="a file both runs read as their standard input (default: "
                        "empty, /dev/null; compare's own stdin is not passed on)")
    p.add_argument("--json", action="store_true",
                   help="print both runs and the verdict as one JSON object on stdout")
    p.add_argument("--full", action="store_true",
                   help="print both complete results (exit status, stdout, diagnostics, "
                        "offload_shim's lines, the program's stderr) and the whole diff; "
                        "default: one verdict line, the differing lines (at most "
                        f"{SUMMARY_DIFF_LINES}) and offload_shim's own lines")
    p.add_argument("program")
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_compare)


__all__ = ["Comparison", "DIAGNOSTIC", "Outcome", "compare", "normalise", "run_outcome",
           "run_shim_outcome", "shim_environment"]
