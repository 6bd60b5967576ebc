"""Shrinking a program that shows a divergence to a small one that still shows it.

Delta debugging over the program's structure (Zeller and Hildebrandt's ddmin, applied
greedily to one change at a time, as C-Reduce's passes are): each candidate removes one
step (at any depth), replaces a ``target data`` region or a chain of ``nowait``
constructs by its body (the chain's constructs then run one after the other, without
``nowait``), or drops one list item of a map clause.  A candidate is kept when the model accepts it
(:func:`offload_shim.fuzz.generator.valid`: no read of unwritten device memory) and the
predicate -- build it, run it, see the same divergence -- holds; then the passes start
again on the smaller program.  Candidates are tried in a fixed order, so the result is
deterministic for a deterministic predicate; ``deadline`` (``time.monotonic()``
seconds) bounds the time, and the smallest program found so far is returned.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from dataclasses import replace

from .generator import Chain, DataRegion, EnterData, ExitData, Kernel, Program, valid


def _paths(steps, prefix=()) -> Iterator[tuple[int, ...]]:
    for i, s in enumerate(steps):
        yield prefix + (i,)
        if isinstance(s, (DataRegion, Chain)):
            yield from _paths(s.body, prefix + (i,))


def _edit(steps: tuple, path: tuple[int, ...], fn) -> tuple:
    """``steps`` with the step at ``path`` replaced by the steps ``fn(step)`` returns."""
    i = path[0]
    if len(path) == 1:
        return steps[:i] + tuple(fn(steps[i])) + steps[i + 1:]
    region = steps[i]
    return steps[:i] + (replace(region, body=_edit(region.body, path[1:], fn)),) + \
        steps[i + 1:]


def candidates(prog: Program) -> Iterator[Program]:
    """Every one-change reduction of ``prog``, the largest cuts first: removing a step
    (top-level steps before inner ones), unwrapping a region or a chain, dropping a map
    item."""
    paths = list(_paths(prog.steps))
    for path in paths:
        yield prog.with_steps(_edit(prog.steps, path, lambda s: ()))
    for path in paths:
        if isinstance(_step_at(prog.steps, path), (DataRegion, Chain)):
            yield prog.with_steps(_edit(prog.steps, path, lambda s: s.body))
    for path in paths:
        s = _step_at(prog.steps, path)
        items = getattr(s, "items", ())
        if isinstance(s, (EnterData, ExitData, Kernel, DataRegion)) and len(items) > 1:
            for j in range(len(items)):
                kept = items[:j] + items[j + 1:]
                yield prog.with_steps(_edit(prog.steps, path,
                                            lambda s, kept=kept: (_with_items(s, kept),)))


def _step_at(steps, path):
    s = steps[path[0]]
    for i in path[1:]:
        s = s.body[i]
    return s


def _with_items(s, items):
    return replace(s, items=items)


def reduce(prog: Program, predicate: Callable[[Program], bool], *,
           deadline: float | None = None) -> tuple[Program, int]:
    """The smallest program reached from ``prog`` by accepted one-change reductions
    (each valid for the model and satisfying ``predicate``), and the number of
    predicate calls.  ``prog`` itself is assumed to satisfy the predicate.  Stops at
    ``deadline`` (monotonic seconds) with the best program so far."""
    calls = 0
    best = prog
    changed = True
    while changed:
        changed = False
        for cand in candidates(best):
            if deadline is not None and time.monotonic() > deadline:
                return best, calls
            if cand == best or cand.count_steps() == 0 or not valid(cand):
                continue
            calls += 1
            if predicate(cand):
                best = cand
                changed = True
                break
    return best, calls


__all__ = ["candidates", "reduce"]
