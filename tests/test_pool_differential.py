"""Differential oracle: the Python MemoryManager against LLVM's own C++ one
(LLVM D81054, LLVM 16 MemoryManager.h): the exact policy against LLVM's reference.

The LLVM 16 nextgen x86_64 plugin runs LLVM's ``MemoryManagerTy`` over host
``malloc``: a request of at most ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD``
bytes (default 8192) is served from a cached block of exactly the same size
when there is one.  The same seeded alloc/free sequences are driven

(a) straight through the nextgen plugin (``Plugin.alloc/free``, no Python
    pool), in a child process so the threshold variable is exactly what the
    test says and the plugin's cache starts empty; an allocation is a *hit*
    when the returned pointer is one that was freed (at a pooled size) and
    not yet handed out again.  This is well defined: a pooled block is never
    really freed (LLVM keeps it), so libc cannot hand its address out for
    another size; blocks above the threshold are really freed and libc may
    reuse them, so their pointers are never counted as cached;
(b) through ``MemoryManager(policy="exact")`` under a ``Runtime`` device of
    the bundled plugin, reading ``hit`` from the manager's event log.

The hit/miss sequences must agree exactly, and so must the block each hit
reuses (named by the allocation that first obtained it): among cached blocks of
the requested size LLVM's ``std::multiset::find`` gives the least recently
freed one, and so does the exact policy (a program that reads device memory
before writing it sees the same data under ``offload-shim run``).
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys

import pytest

import offload_shim as osh
from offload_shim.memory import THRESHOLD_ENV, read_threshold_env

from helpers import run_child

LARGE = (8193, 9000, 12288, 65536)      # above the default threshold


def _palette(rnd: random.Random, kind: str) -> list[int]:
    if kind == "small-palette":          # many repeats -> many hits
        return sorted({rnd.randint(1, 8192) for _ in range(12)} | {1, 8192})
    if kind == "powers":
        return [1 << k for k in range(14)] + [3, 8191]
    if kind == "wide":
        return sorted({rnd.randint(1, 8192) for _ in range(300)} | {8192})
    raise ValueError(kind)


def make_ops(seed: int, kind: str, n_ops: int = 4000, p_large: float = 0.03) -> list:
    """A sequence of ``["a", handle, size]`` / ``["f", handle]`` operations
    (handles, not pointers, so both sides replay it); every handle is freed
    by the end."""
    rnd = random.Random(seed)
    pal = _palette(rnd, kind)
    ops, live, nxt = [], [], 0
    for _ in range(n_ops):
        if live and (rnd.random() < 0.45 or len(live) > 64):
            h = live.pop(rnd.randrange(len(live)))
            ops.append(["f", h])
        else:
            size = rnd.choice(LARGE) if rnd.random() < p_large else rnd.choice(pal)
            ops.append(["a", nxt, size])
            live.append(nxt)
            nxt += 1
    rnd.shuffle(live)
    ops.extend(["f", h] for h in live)
    return ops


def classify(ops, alloc, free, threshold: int) -> list[bool]:
    """Replay ``ops`` with ``alloc(size) -> ptr`` and ``free(ptr)``; returns
    one bool per allocation: True when the pointer was a freed pooled block
    not yet handed out again (a cache hit)."""
    ptrs, sizes, cached, hits = {}, {}, set(), []
    for op in ops:
        if op[0] == "a":
            _, h, size = op
            p = alloc(size)
            assert p, f"allocation of {size} bytes failed"
            hits.append(p in cached)
            cached.discard(p)
            ptrs[h], sizes[h] = p, size
        else:
            p = ptrs.pop(op[1])
            free(p)
            if sizes.pop(op[1]) <= threshold:
                cached.add(p)
    return hits


def reuse(ops, alloc, free, threshold: int) -> list:
    """Replay ``ops`` like :func:`classify`; returns one item per allocation: the
    handle of the allocation that first obtained the block a hit reuses, or -1 for a
    miss (pointers differ between the two sides, these names do not)."""
    ptrs, sizes, origin, cached, out = {}, {}, {}, set(), []
    for op in ops:
        if op[0] == "a":
            _, h, size = op
            p = alloc(size)
            assert p, f"allocation of {size} bytes failed"
            if p in cached:
                out.append(origin[p])
                cached.discard(p)
            else:
                out.append(-1)
                origin[p] = h
            ptrs[h], sizes[h] = p, size
        else:
            p = ptrs.pop(op[1])
            free(p)
            if sizes.pop(op[1]) <= threshold:
                cached.add(p)
            else:
                origin.pop(p, None)             # really freed: libc may reuse it
    return out


# The LLVM side, run in a child: a fresh nextgen plugin, the threshold
# variable set (or unset) before init_device reads it.
_CHILD = """
import json, os, sys
sys.path.insert(0, {tests!r})
from test_pool_differential import classify, reuse
env = {env!r}
if env is None:
    os.environ.pop({var!r}, None)
else:
    os.environ[{var!r}] = env
from offload_shim.plugins.loader import load_plugin
p = load_plugin({plugin!r})
p.acquire()
out = []
for ops in json.load(open({ops_path!r})):
    # a fresh device per sequence: deinit_device destroys LLVM's manager and
    # its cache, so every sequence starts with an empty cache on both sides
    p.acquire_device(0)
    out.append(classify(ops, lambda s: p.alloc(0, s), lambda q: p.free(0, q), {threshold}))
    p.release_device(0)
    p.acquire_device(0)
    out.append(reuse(ops, lambda s: p.alloc(0, s), lambda q: p.free(0, q), {threshold}))
    p.release_device(0)
p.release()
print("RESULT", json.dumps(out))
"""


def llvm_hits(nextgen: str, seqs, tmp_path, env, threshold: int) -> list:
    ops_path = tmp_path / "ops.json"
    ops_path.write_text(json.dumps(seqs))
    tests = os.path.dirname(os.path.abspath(__file__))
    r = run_child(_CHILD.format(tests=tests, env=env, var=THRESHOLD_ENV, plugin=nextgen,
                                ops_path=str(ops_path), threshold=threshold), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    out = json.loads(line[len("RESULT "):])
    return out[0::2], out[1::2]                 # (hits, reuses) per sequence


def python_reuse(bundled_path: str, ops, threshold: int) -> list:
    """:func:`reuse` through a Runtime device of the bundled plugin (exact pool)."""
    with osh.Runtime([bundled_path], pool={"policy": "exact", "threshold": threshold,
                                           "debug": ""}) as rt:
        dev = rt.devices[0]
        return reuse(ops, dev.alloc, dev.free, threshold)


def python_hits(bundled_path: str, ops, threshold: int) -> tuple:
    """Replay through a Runtime device of the bundled plugin with an exact
    pool; returns (hits from the event log, hits by pointer, final stats)."""
    log = io.StringIO()
    with osh.Runtime([bundled_path], pool={"policy": "exact", "threshold": threshold,
                                           "event_log": log, "debug": ""}) as rt:
        dev = rt.devices[0]
        by_ptr = classify(ops, dev.alloc, dev.free, threshold)
        stats = dev.pool.stats
        dev.pool.flush_event_log()
        events = [json.loads(ln) for ln in log.getvalue().splitlines()]
    by_log = [ev["hit"] for ev in events if ev["op"] == "alloc"]
    return by_log, by_ptr, stats


SEQS = [(11, "small-palette"), (12, "powers"), (13, "wide"), (14, "small-palette")]


@pytest.mark.parametrize("env,threshold", [(None, 8192), ("64", 64), ("1000", 1000),
                                           # std::stoul's largest: every size is pooled
                                           (str((1 << 64) - 1), (1 << 64) - 1)],
                         ids=["unset", "64", "1000", "2**64-1"])
def test_hit_miss_sequences_match_llvm(nextgen16, bundled_path, tmp_path, env, threshold):
    seqs = [make_ops(seed, kind) for seed, kind in SEQS]
    want, want_reuse = llvm_hits(nextgen16, seqs, tmp_path, env, threshold)
    # the Python pool's threshold as the runtime reads the same variable
    ours = read_threshold_env({} if env is None else {THRESHOLD_ENV: env})
    total_hits = large_hits = 0
    for (seed, kind), ops, llvm, llvm_reuse in zip(SEQS, seqs, want, want_reuse):
        assert len(ops) >= 4000
        by_log, by_ptr, stats = python_hits(bundled_path, ops, ours)
        n_alloc = sum(op[0] == "a" for op in ops)
        assert len(llvm) == len(by_log) == len(by_ptr) == n_alloc
        assert by_log == by_ptr, "event log and pointer classification disagree"
        if by_log != llvm:
            i = next(k for k, (x, y) in enumerate(zip(by_log, llvm)) if x != y)
            pytest.fail(f"seq {seed}/{kind}: allocation #{i} is a "
                        f"{'hit' if by_log[i] else 'miss'} in Python, "
                        f"{'hit' if llvm[i] else 'miss'} in LLVM")
        assert stats.hits == sum(by_log) and stats.misses == n_alloc - sum(by_log)
        # which block each hit reuses: the least recently freed of its size
        got_reuse = python_reuse(bundled_path, ops, ours)
        assert [r >= 0 for r in llvm_reuse] == llvm
        if got_reuse != llvm_reuse:
            i = next(k for k, (x, y) in enumerate(zip(got_reuse, llvm_reuse)) if x != y)
            pytest.fail(f"seq {seed}/{kind}: allocation #{i} reuses the block of "
                        f"allocation {got_reuse[i]} in Python, {llvm_reuse[i]} in LLVM")
        # above the threshold: always a miss on both sides
        sizes = [op[2] for op in ops if op[0] == "a"]
        assert not any(h for h, s in zip(llvm, sizes) if s > threshold)
        large_hits += sum(h for h, s in zip(llvm, sizes) if s > 8192)
        total_hits += sum(llvm)
    # a threshold past the default pools the large sizes too (on both sides, above)
    assert (large_hits > 0) == (threshold > 8192)
    assert total_hits > 500, "sequences too weak: hardly any cache hits"


# Child prologue: glibc mallinfo2() (bytes malloc'ed: uordblks) and the
# threshold variable from argv[1] ("unset" or a value), set before any plugin
# reads it.
_MALLINFO_PROLOGUE = """
import ctypes, os, sys
class MI2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks "
                 "keepcost").split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MI2
if sys.argv[1] == "unset":
    os.environ.pop(%r, None)
else:
    os.environ[%r] = sys.argv[1]
""" % (THRESHOLD_ENV, THRESHOLD_ENV)


def _run_with_threshold(code: str, env: str) -> tuple:
    """Run ``code`` in a child with the threshold variable ``env``; returns
    the ints it printed after ``RESULT``."""
    r = subprocess.run([sys.executable, "-c", code, env], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return tuple(int(x) for x in line.split()[1:])


def test_threshold_zero_really_frees(nextgen16):
    """With ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD=0`` the nextgen plugin has
    no memory manager: freed blocks go back to libc at once, whereas with the
    default a freed 4 KiB block stays held.  Measured with glibc
    ``mallinfo2().uordblks`` (bytes malloc'ed) around freeing 64 blocks."""
    code = _MALLINFO_PROLOGUE + """
from offload_shim.plugins.loader import load_plugin
p = load_plugin({plugin!r})
p.acquire(); p.acquire_device(0)
ps = [p.alloc(0, 4096) for _ in range(64)]
before = libc.mallinfo2().uordblks
for q in ps:
    p.free(0, q)
after = libc.mallinfo2().uordblks
again = [p.alloc(0, 4096) for _ in range(64)]
reused = len(set(again) & set(ps))
for q in again:
    p.free(0, q)
p.release_device(0); p.release()
print("RESULT", before - after, reused)
""".format(plugin=nextgen16)
    results = {env: _run_with_threshold(code, env) for env in ("unset", "0")}
    released_on, reused_on = results["unset"]
    released_off, _ = results["0"]
    assert released_off >= 64 * 4096          # really freed
    assert released_on < 16 * 4096            # held by LLVM's manager
    assert reused_on == 64                    # and every block handed out again


def test_python_trim_on_nextgen_lands_in_llvm_cache(nextgen16):
    """docs/memory-manager.md "Plugins with their own cache": blocks the Python
    pool trims go to the nextgen plugin's own cache (still held from libc)
    unless the plugin runs with ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD=0``
    and the pool's threshold is given explicitly."""
    code = _MALLINFO_PROLOGUE + """
import offload_shim as osh
with osh.Runtime([{plugin!r}], pool={{"threshold": 8192, "debug": ""}}) as rt:
    dev = rt.devices[0]
    ps = [dev.alloc(4096) for _ in range(64)]
    for q in ps:
        dev.free(q)
    assert dev.pool.stats.cached_blocks == 64
    before = libc.mallinfo2().uordblks
    released = dev.pool.trim(0)
    after = libc.mallinfo2().uordblks
print("RESULT", released, before - after)
""".format(plugin=nextgen16)
    out = {env: _run_with_threshold(code, env) for env in ("unset", "0")}
    assert out["unset"][0] == out["0"][0] == 64 * 4096      # the pool released them all
    assert out["unset"][1] < 16 * 4096                       # ... into LLVM's cache
    assert out["0"][1] >= 64 * 4096                          # ... really back to libc
