"""Sequences of the lifecycle machine as data: re-run outside hypothesis, shrunk, and
written as a trace that ``offload-shim replay`` re-runs.

Every rule of :class:`~offload_shim.testing.machine.LifecycleMachine` records its calls
as steps (``machine._step``)::

    {"i": 3, "rule": "alloc", "args": {"d": {"ref": "v2"}, "size": 64}}

``i`` numbers the steps of one sequence; an argument is a plain value or a reference
to the object step ``i`` returned (``"v<i>"``, ``"v<i>_<k>"`` for the ``k``-th of
several); ``open_runtime`` (always the first step) carries ``"smoke"``: whether it ran
the smoke sequence (register, init device 0, launch) of a process's first example.

* :func:`run_steps` runs a list of steps through a machine class's rules, with its
  invariants after every step and its teardown at the end, as hypothesis runs a
  sequence -- so a sequence that failed under hypothesis fails the same way here.
* :func:`shrink` reduces a failing list of steps (delta debugging: remove chunks of
  steps, then simplify arguments), the caller's predicate deciding -- ``offload-shim
  check`` runs each candidate in a child process of its own, so a crash of the plugin
  is a failure like any other (hypothesis shrinks inside the process it runs in and
  cannot shrink a sequence that killed it).
* :func:`write_trace` / :func:`trace_steps`: the steps and how the sequence ended,
  as a trace of ``source`` ``"check"`` (docs/trace-format.md, "Check traces").

Nothing here loads a plugin: :func:`run_steps` does, through the machine.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

__all__ = ["SequenceError", "run_steps", "well_formed", "format_steps", "failure_signature",
           "argument_floors", "shrink", "write_trace", "trace_steps"]

_REF = re.compile(r"v(\d+)(?:_\d+)?$")


class SequenceError(ValueError):
    """A list of steps that cannot run: not a list of step dicts, an unknown rule, or
    an argument referring to an object no earlier step returned."""


def _ref_step(arg) -> int | None:
    """The step number a ``{"ref": "v<i>..."}`` argument refers to; None for a plain
    value; raises :class:`SequenceError` for a malformed reference."""
    if not isinstance(arg, dict):
        return None
    m = _REF.match(str(arg.get("ref")))
    if m is None:
        raise SequenceError(f"argument {arg!r} refers to an object no step returned")
    return int(m.group(1))


def well_formed(steps: list[dict]) -> bool:
    """Every step is a dict with ``i``, ``rule`` and ``args``, the numbers increase,
    the first step is ``open_runtime`` and every reference names an earlier step of
    the list (a candidate of :func:`shrink` that removed a step others use is not)."""
    seen: set[int] = set()
    last = -1
    for k, s in enumerate(steps):
        if not (isinstance(s, dict) and isinstance(s.get("i"), int)
                and isinstance(s.get("rule"), str) and isinstance(s.get("args"), dict)):
            return False
        if s["i"] <= last or (k == 0) != (s["rule"] == "open_runtime"):
            return False
        try:
            if any(r is not None and r not in seen
                   for r in map(_ref_step, s["args"].values())):
                return False
        except SequenceError:
            return False
        seen.add(s["i"])
        last = s["i"]
    return bool(steps)


def run_steps(machine_cls: type, steps: list[dict]) -> int:
    """Run ``steps`` through the rules of ``machine_cls`` (a
    :func:`~offload_shim.testing.machine.make_lifecycle_machine` class), as hypothesis
    runs a sequence (``hypothesis.stateful.run_state_machine``): one machine, each
    step's rule with its arguments resolved (a reference: the object that step
    returned here), the invariants after every step, the teardown at the end (also
    when a step failed).  A step whose preconditions do not hold is skipped (hypothesis
    would not have drawn it).  Returns the number of steps run; raises what a rule, an
    invariant or the teardown raises, and :class:`SequenceError` for steps that are
    not :func:`well_formed` or name an unknown rule.  The machine records the steps
    it runs (its class's ``record``), so a crash leaves the step it happened in."""
    if not isinstance(steps, list) or not well_formed(steps):
        raise SequenceError("not a list of steps that starts with open_runtime and refers "
                            "only to objects of earlier steps")
    state = machine_cls.setup_state()
    rules = {r.function.__name__: r for r in [*state.initializers, *state.rules]}
    for s in steps:
        if s["rule"] not in rules:
            raise SequenceError(f"step {s['i']}: {s['rule']!r} is not a rule of "
                                f"{machine_cls.__name__}")
    m = machine_cls()
    ran = 0
    try:
        for s in steps:
            rule = rules[s["rule"]]
            args = {}
            for k, v in s["args"].items():
                if isinstance(v, dict):
                    if v["ref"] not in m._objects:    # the step that made it returned nothing
                        raise SequenceError(f"step {s['i']} ({s['rule']}): {v['ref']} was "
                                            "not returned by its step in this run")
                    v = m._objects[v["ref"]]
                args[k] = v
            if not all(p(m) for p in rule.preconditions):
                continue
            if s["rule"] == "open_runtime":
                machine_cls._smoke_passed = not s.get("smoke", False)
            m._step_no = s["i"]                  # the objects keep their recorded names
            rule.function(m, **args)
            ran += 1
            for inv in state.invariants:
                if all(p(m) for p in inv.preconditions):
                    inv.function(m)
    finally:
        m.teardown()
    return ran


def _arg_text(v) -> str:
    if isinstance(v, dict):
        return str(v.get("ref") or v.get("repr"))
    return repr(v)


def format_steps(steps: list[dict]) -> list[str]:
    """The steps as hypothesis prints a sequence: ``v2 = state.get_device(index=0)``
    (a result is named when a later step uses it), ``state.init_device(d=v2)``;
    ``open_runtime`` with ``# + smoke`` when it ran the smoke sequence."""
    used = set()
    for s in steps:
        for v in s.get("args", {}).values():
            if isinstance(v, dict) and v.get("ref"):
                used.add(v["ref"])
    out = []
    for s in steps:
        names = sorted((u for u in used if _REF.match(u) and int(_REF.match(u).group(1))
                        == s["i"]), key=lambda u: (len(u), u))
        lhs = f"{', '.join(names)} = " if names else ""
        args = ", ".join(f"{k}={_arg_text(v)}" for k, v in s.get("args", {}).items())
        tail = "  # + smoke: register, init device 0, launch vec_add" \
            if s.get("rule") == "open_runtime" and s.get("smoke") else ""
        out.append(f"{lhs}state.{s.get('rule')}({args}){tail}")
    return out


def failure_signature(outcome: dict) -> tuple:
    """What makes two failures the same: ``("crash", signal)``; for an exception its
    kind and type (``("invariant", "ModelError")``); for an exit without a result
    ``("error", message)``; ``("passed",)`` when the sequence passed."""
    kind = outcome.get("kind")
    if kind == "crash":
        return ("crash", outcome.get("signal"))
    if outcome.get("exception"):
        return (kind, outcome["exception"])
    if kind == "passed":
        return ("passed",)
    return (kind, outcome.get("signal"), outcome.get("message"))


def _chunk_removals(steps: list[dict]):
    """Candidates removing ``k`` consecutive steps (never the first), the largest cuts
    first: k = n/2, n/4, ..., 1, each start from the end backwards (a step others use
    comes before them: removing from the end first frees more)."""
    n = len(steps) - 1
    k = max(n // 2, 1)
    while True:
        for start in range(len(steps) - k, 0, -1):
            yield steps[:start] + steps[start + k:]
        if k == 1:
            return
        k //= 2


def argument_floors(machine_cls: type | None = None, only=None) -> dict:
    """``{(rule, argument): the smallest value its strategy draws}`` for the plain
    (non-bundle) arguments of the machine's rules (default: the base
    :class:`~offload_shim.testing.machine.LifecycleMachine`; no plugin is loaded):
    hypothesis's own minimal example of each strategy (``hypothesis.find``), so a
    shrunk argument stays a value hypothesis could have drawn.  ``only``: the
    ``(rule, argument)`` pairs wanted (None: all)."""
    from hypothesis import HealthCheck, find, settings
    from hypothesis.stateful import Bundle

    if machine_cls is None:
        from .machine import LifecycleMachine as machine_cls
    quiet = settings(database=None, max_examples=50, deadline=None,
                     suppress_health_check=list(HealthCheck))
    out = {}
    for r in [*machine_cls.setup_state().initializers, *machine_cls.setup_state().rules]:
        for k, strat in r.arguments.items():
            if isinstance(strat, Bundle) or (only is not None
                                             and (r.function.__name__, k) not in only):
                continue
            try:
                out[(r.function.__name__, k)] = find(strat, lambda x: True, settings=quiet)
            except Exception:           # noqa: BLE001 - no floor: the argument stays
                pass
    return out


def _arg_simplifications(steps: list[dict], floors: dict):
    """Candidates with one argument simpler, never below the smallest value its
    strategy draws (``floors``, :func:`argument_floors`; an argument without one is left
    alone): a bool made False, an int made its floor or halved toward it;
    ``open_runtime`` without its smoke sequence."""
    for j, s in enumerate(steps):
        if s.get("smoke"):
            yield steps[:j] + [dict(s, smoke=False)] + steps[j + 1:]
        for k, v in s["args"].items():
            lo = floors.get((s["rule"], k))
            if isinstance(v, bool):
                tries = [False] if v and lo is False else []
            elif isinstance(v, int) and isinstance(lo, int) and not isinstance(lo, bool):
                tries = [x for x in dict.fromkeys((lo, max(lo, v // 2))) if lo <= x < v]
            else:
                tries = []
            for t in tries:
                yield steps[:j] + [dict(s, args=dict(s["args"], **{k: t}))] + steps[j + 1:]


def shrink(steps: list[dict], fails: Callable[[list[dict]], bool], *,
           deadline: float | None = None, max_runs: int = 400,
           floors: dict | None = None) -> tuple[list[dict], int]:
    """The smallest list of steps reached from ``steps`` by accepted one-change
    reductions, and the number of times ``fails`` ran.  ``fails(candidate)`` says
    whether a candidate still fails the same way; ``steps`` is assumed to.  A pass
    removes chunks of steps (:func:`_chunk_removals`), then simplifies arguments
    (:func:`_arg_simplifications`, toward ``floors``: default
    :func:`argument_floors`); after an accepted candidate the passes start over
    on it; candidates that are not :func:`well_formed` are dropped without a run.
    Candidates come in a fixed order, so the result is deterministic for a
    deterministic ``fails``.  Stops at ``deadline`` (``time.monotonic()`` seconds) or
    after ``max_runs`` runs with the smallest list found so far."""
    import json
    best = list(steps)
    runs = 0
    tried: set[str] = set()
    if floors is None:
        floors = argument_floors(only={(s["rule"], k) for s in steps for k in s["args"]})

    def out_of_time():
        return runs >= max_runs or (deadline is not None and time.monotonic() >= deadline)

    changed = True
    while changed and not out_of_time():
        changed = False
        for cands in (_chunk_removals(best), _arg_simplifications(best, floors)):
            for cand in cands:
                if out_of_time():
                    return best, runs
                if not well_formed(cand):
                    continue
                key = json.dumps(cand, sort_keys=True)
                if key in tried:
                    continue
                tried.add(key)
                runs += 1
                if fails(cand):
                    best = cand
                    changed = True
                    break
            if changed:
                break
    return best, runs


def write_trace(path, steps: list[dict], outcome: dict, header: dict) -> str:
    """Write ``steps`` and how they ended (``outcome``: ``kind``, ``signal``,
    ``exception``, ``message``, ``step``) as a trace of ``source`` ``"check"`` to
    ``path``: the header (with ``header``'s fields: ``plugin``, ``abi``, ``threads``,
    ``faults``...), one ``step`` line per step, an ``outcome`` line
    (docs/trace-format.md).  Returns the path written; raises ``OSError``."""
    from ..trace.format import TraceWriter
    w = TraceWriter(path, dict(header, source="check", steps=len(steps)))
    try:
        for s in steps:
            w.event(dict(s, op="step"))
        w.event(dict(outcome, op="outcome"))
    finally:
        w.close()
    return w.path


def trace_steps(trace) -> tuple[list[dict], dict | None]:
    """The steps of a check trace (a :class:`~offload_shim.trace.format.Trace`) and its
    recorded outcome (None if it has none).  Raises
    :class:`~offload_shim.trace.format.TraceError` for a trace that is not one of
    ``check``."""
    from ..trace.format import TraceError
    if trace.header.get("source") != "check":
        raise TraceError("not a trace of offload-shim check (its header has no "
                         "\"source\": \"check\")")
    drop = ("op", "tid", "t_ns")
    steps = [{k: v for k, v in e.items() if k not in drop}
             for e in trace.events if e["op"] == "step"]
    outcome = next(({k: v for k, v in e.items() if k not in drop}
                    for e in trace.events if e["op"] == "outcome"), None)
    return steps, outcome
