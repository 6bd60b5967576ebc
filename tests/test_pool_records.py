"""The pool's records and its locking rule, checked on the installed source and on a
manager over the fake backend.

* every block is one named :class:`~offload_shim.memory.records.Block` record, read
  by field name -- no ``rec[N]`` anywhere in the pool's modules;
* the locking rule of ``memory/manager.py``'s docstring: a method whose name ends in
  ``_locked`` takes no lock and calls neither the backend nor ``poison`` nor the
  guard; no method calls the backend or ``poison`` while it holds the lock (a ``with
  self._lock`` block, or the hot paths' ``lockq.pop()`` ... ``finally: lockq.append``);
* one hit path: both policies are the same class, the binned hit sets the record's
  requested size."""

from __future__ import annotations

import ast
import os

import pytest

from offload_shim.memory import manager
from offload_shim.memory.fake import FakeBackend
from offload_shim.memory.manager import MemoryManager
from offload_shim.memory.records import Block

MEMORY = os.path.dirname(os.path.abspath(manager.__file__))
POOL_MODULES = ["manager", "release", "parking", "queries", "records", "stats", "eviction",
                "oom", "policies", "ownership", "locking", "events", "config"]
MANAGER_PARTS = ["manager", "release", "parking", "queries", "oom"]
#: what the rule forbids under the lock: the backend, the poison callback, the guard
OUTSIDE = {"_balloc", "_bfree", "_poison", "_guard"}


def _tree(name):
    with open(os.path.join(MEMORY, name + ".py"), encoding="utf-8") as f:
        return ast.parse(f.read())


def _self_attr(node):
    """``X`` for an expression ``self.X``, else None."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and node.value.id == "self":
        return node.attr
    return None


def _methods():
    for mod in MANAGER_PARTS:
        for cls in ast.walk(_tree(mod)):
            if isinstance(cls, ast.ClassDef):
                for fn in cls.body:
                    if isinstance(fn, ast.FunctionDef):
                        yield f"{mod}.{cls.name}.{fn.name}", fn


def _locks_taken(fn):
    """``with self._lock`` blocks and uses of the hot paths' lock queue in ``fn``."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.With):
            out += [node for item in node.items if _self_attr(item.context_expr) == "_lock"]
        if _self_attr(node) == "_lockq":
            out.append(node)
    return out


def _held_bodies(fn):
    """The statements run with the lock held: the bodies of ``with self._lock`` and
    of a ``try`` whose ``finally`` gives the lock's token back (``lockq.append``;
    ``put``/``put_nowait`` of the queue it once was)."""
    for node in ast.walk(fn):
        if isinstance(node, ast.With) and any(_self_attr(i.context_expr) == "_lock"
                                              for i in node.items):
            yield node.body
        if isinstance(node, ast.Try) and any(
                isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                and c.func.attr in ("append", "put", "put_nowait") for s in node.finalbody for c in ast.walk(s)):
            yield node.body


def _bound_outside(fn):
    """Locals of ``fn`` bound to ``self._bfree`` & co."""
    names = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and _self_attr(n.value) in OUTSIDE:
            names |= {t.id for t in n.targets if isinstance(t, ast.Name)}
    return names


def _calls_outside(node, names=frozenset()):
    """Calls of the backend, ``poison`` or the guard (``self._bfree(...)``, ``with
    self._guard``, or a call of one of the locals ``names`` bound to them) under
    ``node``."""
    names = set(names) | _bound_outside(node)
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and (_self_attr(n.func) in OUTSIDE
                                        or isinstance(n.func, ast.Name) and n.func.id in names):
            out.append(ast.unparse(n))
        if isinstance(n, ast.With) and any(_self_attr(i.context_expr) == "_guard"
                                           for i in n.items):
            out.append("with self._guard")
    return out


def _index_reads(tree):
    return [ast.unparse(n) for n in ast.walk(tree)
            if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant)
            and isinstance(n.slice.value, int)]


def test_no_record_is_read_by_index():
    found = {mod: _index_reads(_tree(mod)) for mod in POOL_MODULES}
    assert {mod: reads for mod, reads in found.items() if reads} == {}


def test_the_check_sees_an_index_read():
    assert _index_reads(ast.parse("def f(rec):\n    return rec[4] + rec.size\n")) == ["rec[4]"]


def test_locked_methods_take_no_lock_and_call_nothing_outside():
    bad = {}
    for name, fn in _methods():
        if fn.name.endswith("_locked"):
            why = [ast.unparse(n) for n in _locks_taken(fn)] + _calls_outside(fn)
            if why:
                bad[name] = why
    assert bad == {}
    assert sum(1 for name, fn in _methods() if fn.name.endswith("_locked")) >= 9


def test_no_backend_call_while_the_lock_is_held():
    bad = {}
    held = 0
    for name, fn in _methods():
        names = _bound_outside(fn)
        for body in _held_bodies(fn):
            held += 1
            calls = [c for stmt in body for c in _calls_outside(stmt, names)]
            if calls:
                bad[name] = calls
    assert bad == {}
    assert held >= 20           # the with blocks and the hot paths' try blocks were seen


@pytest.mark.parametrize("source, found", [
    ("class M:\n    def f(self):\n        with self._lock:\n            self._bfree(1)\n",
     ["self._bfree(1)"]),
    ("class M:\n    def f(self):\n        q = self._lockq\n        q.get()\n        try:\n"
     "            b = self._balloc\n            b(8)\n        finally:\n"
     "            q.put(True)\n", ["b(8)"]),
])
def test_the_rule_check_sees_a_backend_call_under_the_lock(source, found):
    fn = ast.parse(source).body[0].body[0]
    names = _bound_outside(fn)
    assert [c for body in _held_bodies(fn) for stmt in body
            for c in _calls_outside(stmt, names)] == found


@pytest.mark.parametrize("policy", ["exact", "binned"])
def test_a_block_travels_as_one_named_record(policy):
    b = FakeBackend()
    mm = MemoryManager(b.alloc, b.free, threshold=4096, policy=policy)
    assert type(mm) is MemoryManager            # one class, one hit path, both policies
    p = mm.allocate(1000)
    rec = mm._live[p]
    assert isinstance(rec, Block)
    assert (rec.requested, rec.size) == (1000, 1000)
    assert rec.free_list is mm._free[1000] and rec.bucket is not None
    assert rec.free_step == 1000 << 64 and rec.hit_step == rec.free_step + 1
    mm.free(p)
    assert rec.free_list[-1] is rec and rec.ptr == p   # cached: the same record
    q = mm.allocate(1000 if policy == "exact" else 990)  # binned: a request of its class
    assert q == p and mm._live[q] is rec
    assert rec.requested == (1000 if policy == "exact" else 990) and rec.size == 1000
    assert mm.size_of(q) == rec.requested and mm.block_size_of(q) == 1000
    assert mm.live_allocations() == [(q, rec.requested)]
    mm.free(q)
    if policy == "binned":
        assert mm.allocate(1000) == p and rec.requested == 1000    # the block's own size
        mm.free(p)
    assert mm.drain() == (0, 0) and b.live == {}


def test_stats_off_records_count_no_hit():
    b = FakeBackend()
    mm = MemoryManager(b.alloc, b.free, threshold=4096, stats=False)
    p = mm.allocate(64)
    assert mm._live[p].bucket is None and mm._live[p].hit_step == 64 << 64
    mm.drain()
