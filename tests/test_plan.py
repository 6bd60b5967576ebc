"""The cheap path of constructs (offload_shim/interposer/llvm/plan.py) against the general
code of the interposer, on the same random constructs.

A child process registers the bundled sample image through the interposer's own
``__tgt_register_lib`` (a ``__tgt_bin_desc`` built here: its kernel ``increment(long
*p, long n)`` and its global ``osh_scale``) and then calls the interposer's exported
entry points (``__tgt_target_data_{begin,end,update}_mapper``, ``__tgt_target_kernel``)
with random argument arrays: host buffers mapped whole or in part, every map type the
cheap path handles and some it hands over (``always``, ``present``, ``delete``,
literals in data constructs, overlapping ranges), kernels with new and existing rows.
After every construct it records the interposer's table (host range, reference
counts, the device address modulo 16, which device block each row has -- named by
the order in which the run first saw it, so both paths must take the same blocks from
the pool in the same order), the host buffers and the bytes of every row on the
device.  The same seed runs once with the cheap path and once with
``OFFLOAD_SHIM_NO_PLAN=1``; both records (and how the process ended: a failed
construct under mandatory offloading aborts it) must be equal.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import NEXTGEN16, need

CHILD = r'''
import ctypes, json, os, random, sys
from ctypes import POINTER, Structure, c_char_p, c_int32, c_int64, c_uint32, c_uint64, c_void_p
import offload_shim as osh
from offload_shim.abi import tgt_rtl as T
from offload_shim.interposer import load_interposer
from offload_shim.interposer.llvm.omptarget import (MAP_ALWAYS, MAP_DELETE, MAP_FROM,
    MAP_IMPLICIT, MAP_LITERAL, MAP_PRESENT, MAP_TARGET_PARAM, MAP_TO)

seed, steps, plugin, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
plain = mode == "plain"             # only what the cheap path serves
rnd = random.Random(seed)

class BinDesc(Structure):
    _fields_ = [("n", c_int32), ("images", c_void_p), ("hb", c_void_p), ("he", c_void_p)]

img = osh.OffloadImage.sample()
data = ctypes.create_string_buffer(img.data, len(img.data))
anchors = ctypes.create_string_buffer(8)
scale = ctypes.c_double(3.0)
names = [e.name.encode() for e in img.entries]
ents = (T.OffloadEntry * len(img.entries))()
for k, e in enumerate(img.entries):
    ents[k].addr = ctypes.addressof(scale) if e.size else ctypes.addressof(anchors) + k
    ents[k].name = names[k]
    ents[k].size = e.size
dimg = T.DeviceImage()
dimg.ImageStart = ctypes.addressof(data)
dimg.ImageEnd = ctypes.addressof(data) + len(img.data)
base = ctypes.addressof(ents)
dimg.EntriesBegin = ctypes.cast(base, T.OffloadEntryP)
dimg.EntriesEnd = ctypes.cast(base + ctypes.sizeof(ents), T.OffloadEntryP)
desc = BinDesc(1, ctypes.addressof(dimg), base, base + ctypes.sizeof(ents))
region = ctypes.addressof(anchors) + [e.name for e in img.entries].index("increment")

NBUF, BUFSZ, GAP = 6, 64, 64
# one block, buffers in ascending address order with gaps: both processes (cheap path,
# general code) see the same table order (separate small buffers come from pymalloc's
# free lists, in an order that depends on what the imports freed)
block = ctypes.create_string_buffer(NBUF * (BUFSZ + GAP) + 64)
start = -ctypes.addressof(block) % 64
bufs = [(ctypes.c_int64 * (BUFSZ // 8)).from_buffer(block, start + b * (BUFSZ + GAP))
        for b in range(NBUF)]
for b in range(NBUF):
    bufs[b][:] = [b * 100 + j for j in range(BUFSZ // 8)]
addrs = [ctypes.addressof(b) for b in bufs]

rt = osh.Runtime([plugin])
cm = osh.interpose(rt, policy="mandatory")
ip = cm.__enter__()
lib = load_interposer()
lib.__tgt_register_lib.argtypes = [c_void_p]
lib.__tgt_unregister_lib.argtypes = [c_void_p]
DATA = [c_void_p, c_int64, c_int32, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p]
for nm in ("begin", "end", "update"):
    f = getattr(lib, f"__tgt_target_data_{nm}_mapper"); f.argtypes = DATA; f.restype = None
lib.__tgt_target_kernel.argtypes = [c_void_p, c_int64, c_int32, c_int32, c_void_p, c_void_p]
lib.__tgt_target_kernel.restype = c_int32
lib.__tgt_register_lib(ctypes.addressof(desc))

def rng_range(taken=None):
    b = rnd.randrange(NBUF)
    if taken is not None:
        b = rnd.choice([x for x in range(NBUF) if x not in taken])
        taken.add(b)
    if plain or rnd.random() < 0.9:
        return b, 0, BUFSZ
    off = 8 * rnd.randrange(BUFSZ // 8)
    return b, off, 8 * rnd.randrange(1, (BUFSZ - off) // 8 + 1)

def maptype(kind):
    # a row is always created with `to`: device memory nobody wrote is undefined, and
    # copying it back would compare two arbitrary contents
    t = rnd.choice([MAP_TO, MAP_FROM, MAP_TO | MAP_FROM, 0])
    if kind in ("begin", "kernel"):
        t = rnd.choice([MAP_TO, MAP_TO | MAP_FROM])
    elif kind == "update":
        t = rnd.choice([MAP_TO, MAP_FROM])
    if rnd.random() < 0.2:
        t |= MAP_IMPLICIT
    r = 1.0 if plain else rnd.random()
    if r < 0.04:
        t |= MAP_ALWAYS
    elif r < 0.05:
        t |= MAP_PRESENT
    elif r < 0.08 and kind == "end":
        t |= MAP_DELETE
    return t

def construct():
    kind = rnd.choice(["begin", "begin", "end", "end", "update", "kernel", "kernel"])
    args = []                                   # (base, begin, size, type)
    taken = set() if plain else None
    if kind == "kernel":
        b, off, size = rng_range(taken)
        t = maptype("kernel") | MAP_TARGET_PARAM
        args.append((addrs[b] + off, addrs[b] + off, size, t))
        value = rnd.randrange(0, size // 8 + 1)       # clang: base = begin = the value
        args.append((value, value, 0, MAP_LITERAL | MAP_TARGET_PARAM))
    for _ in range(rnd.randrange(0 if kind == "kernel" else 1, 4)):
        b, off, size = rng_range(taken)
        args.append((addrs[b], addrs[b] + off, size, maptype(kind)))
    if kind != "kernel" and not plain and rnd.random() < 0.03:
        args.append((0, 5, 0, MAP_LITERAL))
    return kind, args

def call(kind, args):
    n = len(args)
    bases = (c_void_p * max(n, 1))(*[a[0] or None for a in args])
    ptrs = (c_void_p * max(n, 1))(*[a[1] or None for a in args])
    sizes = (c_int64 * max(n, 1))(*[a[2] for a in args])
    types = (c_int64 * max(n, 1))(*[a[3] for a in args])
    if kind == "kernel":
        ka = T.KernelArgs()
        ka.Version = 2; ka.NumArgs = n
        ka.ArgBasePtrs = bases; ka.ArgPtrs = ptrs; ka.ArgSizes = sizes; ka.ArgTypes = types
        return lib.__tgt_target_kernel(None, -1, 1, 1, region, ctypes.byref(ka))
    getattr(lib, f"__tgt_target_data_{kind}_mapper")(None, -1, n, bases, ptrs, sizes,
                                                      types, None, None)
    return None

def where(addr):
    for b, a in enumerate(addrs):
        if a <= addr < a + BUFSZ:
            return [b, addr - a]
    return ["other", 0]

blocks = {}                                     # device block -> first-seen ordinal

def snapshot(rc):
    rows = []
    dev = ip.devices[0] if ip.devices else None
    for e in ip.mappings(0):
        row = [where(e.begin), e.end - e.begin, str(e.dyn), e.hold, e.tgt % 16 == e.begin % 16,
               # which device block (named by when it was first seen): both paths must
               # take the same blocks from the pool, in the same order
               blocks.setdefault(e.alloc, len(blocks)) if e.alloc else None]
        if dev is not None and e.alloc:
            out = ctypes.create_string_buffer(e.end - e.begin)
            dev.retrieve_raw(ctypes.addressof(out), e.tgt, e.end - e.begin)
            row.append(out.raw.hex())
        rows.append(row)
    return {"rc": rc, "rows": rows, "host": [bytes(b).hex() for b in bufs]}

for step in range(steps):
    kind, args = construct()
    rc = call(kind, args)
    print(json.dumps({"step": step, "kind": kind, "args": [[where(a[1]), a[2], a[3]] for a in args],
                      **snapshot(rc)}), flush=True)
print(json.dumps({"general": ip.fast.general}), flush=True)
lib.__tgt_unregister_lib(ctypes.addressof(desc))
cm.__exit__(None, None, None)
rt.close()
'''


def _run(seed: int, steps: int, plan: bool, mode: str = "random"):
    env = dict(os.environ)
    env.pop("LIBOMPTARGET_INFO", None)
    if plan:
        env.pop("OFFLOAD_SHIM_NO_PLAN", None)
    else:
        env["OFFLOAD_SHIM_NO_PLAN"] = "1"
    proc = subprocess.run([sys.executable, "-P", "-c", CHILD, str(seed), str(steps),
                           str(NEXTGEN16), mode], capture_output=True, text=True,
                          timeout=300, env=env)
    recs = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    err = "\n".join(ln for ln in proc.stderr.splitlines() if "Libomptarget" in ln
                    or "offload_shim:" in ln)
    return recs, proc.returncode, re.sub(r"0x[0-9a-f]+", "0x?", err)    # addresses vary


@pytest.mark.parametrize("seed", range(8))
def test_cheap_path_equals_the_general_code(seed):
    need(NEXTGEN16, "the LLVM 16 x86_64 nextgen plugin")
    fast, rc_fast, err_fast = _run(seed, 60, True)
    slow, rc_slow, err_slow = _run(seed, 60, False)
    assert fast and slow, (err_fast, err_slow)
    assert len(fast) == len(slow), (err_fast, err_slow)
    for a, b in zip(fast, slow):
        if "general" in a:
            assert b["general"] >= a["general"]
            continue
        assert a == b, json.dumps({"fast": a, "general": b})
    assert rc_fast == rc_slow
    assert err_fast == err_slow


@pytest.mark.parametrize("seed", [7, 8])
def test_the_cheap_path_serves_plain_constructs(seed):
    """Plain maps (whole buffers, distinct per construct, no always/present/delete)
    never reach the general code, and give what the general code gives."""
    need(NEXTGEN16, "the LLVM 16 x86_64 nextgen plugin")
    fast, rc, err = _run(seed, 40, True, "plain")
    assert rc == 0, err
    assert fast[-1] == {"general": 0}
    slow, rc_slow, _ = _run(seed, 40, False, "plain")
    assert rc_slow == 0
    assert fast[:-1] == slow[:-1]
