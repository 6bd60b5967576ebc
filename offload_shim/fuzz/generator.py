"""Small, deterministic OpenMP offload programs over the mapping rules, and the model
that keeps them free of undefined behaviour.

A :class:`Program` is a list of steps (:class:`HostWrite`, :class:`EnterData`,
:class:`ExitData`, :class:`Update`, :class:`Kernel`, :class:`DataRegion` with steps
inside, :class:`DeviceMemory`, :class:`GlobalKernel`) over a few ``unsigned`` arrays,
each mapped through one fixed section ``[lo:len]`` (the same section every time: a map
that extends an existing one is an error in OpenMP, not a case) either directly
(``a0[lo:len]``), through a pointer (``q0[lo:len]``: the pointee mapped and the pointer
attached) or, in a kernel, as the member of a struct (``map(to: s0)
map(tofrom: s0.p[lo:len])``).  After every step the program prints one digest line:
an FNV-1a hash of each array's host values and ``omp_target_is_present`` of each
non-empty section, so everything a runtime decides (what is copied when, which
reference count drops to zero, what is present) shows in stdout.

Undefined behaviour is avoided by construction: :func:`simulate` replays the OpenMP
5.1 reference-count rules (2.21.7.1 "map clause": a list item's reference count rises
at each entry, the copy to the device happens when it becomes present or with
``always``; at exit it drops (``delete``: to zero) and the copy back happens when it
reaches zero or with ``always``) and tracks whether each array's device copy holds
written values.  A kernel only reads a device copy that is valid (otherwise it only
writes it), and nothing copies an unwritten device copy back.  The generator draws
each step from the ones the model accepts at that point; the minimiser
(:mod:`offload_shim.fuzz.reduce`) keeps only candidates the model accepts.

Everything is drawn from ``random.Random(seed)``: the same seed gives the same
program, byte for byte.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

#: map types of an entry (structured construct or ``enter data``)
ENTRY_TYPES = ("to", "tofrom", "from", "alloc")
#: map types of ``exit data``
EXIT_TYPES = ("from", "release", "delete")


class ModelError(Exception):
    """A program whose run would read device memory nobody wrote (its output would be
    undefined): the generator and the minimiser drop it."""


@dataclass(frozen=True)
class Array:
    """``unsigned aN[size]`` mapped through ``[lo:len]`` (``len`` may be 0: a
    zero-length section)."""
    name: str
    size: int
    lo: int
    len: int

    def element(self, via: str = "array", prefix: str = "") -> str:
        """The expression a section of this array is taken from: the array itself
        (``prefix`` + name), the pointer ``qN`` or the struct member ``sN.p``."""
        n = self.name[1:]
        return {"array": prefix + self.name, "pointer": "q" + n, "struct": f"s{n}.p"}[via]

    def section(self, via: str = "array", prefix: str = "") -> str:
        return f"{self.element(via, prefix)}[{self.lo}:{self.len}]"


@dataclass(frozen=True)
class MapItem:
    """One list item of a map clause: ``array`` (index), map ``type``, the ``always``
    modifier, and how the section is named (``via``: array, pointer, struct)."""
    array: int
    type: str
    always: bool = False
    via: str = "array"
    member_first: bool = False


@dataclass(frozen=True)
class HostWrite:
    """The host changes its copy of an array: ``a[i] = a[i] * 5 + c``."""
    array: int
    c: int


@dataclass(frozen=True)
class EnterData:
    items: tuple[MapItem, ...]


@dataclass(frozen=True)
class ExitData:
    items: tuple[MapItem, ...]


@dataclass(frozen=True)
class Update:
    """``target update to|from(section)``; ``stride`` > 1: the strided
    (non-contiguous) form ``[lo:count:stride]`` of OpenMP 5.0."""
    array: int
    direction: str
    stride: int = 1


@dataclass(frozen=True)
class Kernel:
    """``target`` with ``items`` mapped; each array of ``items`` is read and written
    (``a[i] = a[i] * 3 + c``) when its device copy is valid on entry, else written
    (``a[i] = i * 7 + c``); ``nowait`` then ``taskwait``."""
    items: tuple[MapItem, ...]
    c: int
    nowait: bool = False


@dataclass(frozen=True)
class DataRegion:
    """``target data`` with ``items`` mapped around ``body``."""
    items: tuple[MapItem, ...]
    body: tuple = ()


@dataclass(frozen=True)
class DeviceMemory:
    """``omp_target_alloc`` of an array's section, ``omp_target_memcpy`` in, a kernel
    with ``is_device_ptr``, ``omp_target_memcpy`` back, ``omp_target_free``."""
    array: int
    c: int


@dataclass(frozen=True)
class GlobalKernel:
    """A ``declare target`` global: ``update to`` (``direction`` "to"), a kernel on the
    device copy (``"kernel"``), or ``update from`` (``"from"``)."""
    action: str
    c: int = 0


Step = HostWrite | EnterData | ExitData | Update | Kernel | DataRegion | DeviceMemory | GlobalKernel


@dataclass(frozen=True)
class Program:
    """``arrays``, ``steps``, the size of the ``declare target`` global (0: none), and
    the seed it was drawn from."""
    seed: int
    arrays: tuple[Array, ...]
    steps: tuple
    global_size: int = 0

    def with_steps(self, steps) -> "Program":
        return replace(self, steps=tuple(steps))

    def count_steps(self) -> int:
        """Steps, those inside data regions included."""
        def n(steps):
            return sum(1 + (n(s.body) if isinstance(s, DataRegion) else 0) for s in steps)
        return n(self.steps)


# -- the model ------------------------------------------------------------------------
@dataclass
class _State:
    rc: list[int]
    valid: list[bool]
    global_valid: bool = True       # the global's device copy: initialised at image load


def _enter(state: _State, arrays, item: MapItem) -> None:
    a = item.array
    if arrays[a].len == 0:
        return
    if state.rc[a] == 0:
        state.rc[a] = 1
        state.valid[a] = item.type in ("to", "tofrom")
    else:
        state.rc[a] += 1
        if item.always and item.type in ("to", "tofrom"):
            state.valid[a] = True


def _exit(state: _State, arrays, item: MapItem) -> None:
    a = item.array
    if arrays[a].len == 0 or state.rc[a] == 0:
        return
    state.rc[a] = 0 if item.type == "delete" else state.rc[a] - 1
    copy = item.type in ("from", "tofrom") and (state.rc[a] == 0 or item.always)
    if copy and not state.valid[a]:
        raise ModelError(f"a{a}: copied back while its device copy holds unwritten values")
    if state.rc[a] == 0:
        state.valid[a] = False


def _kernel_reads(state: _State, arrays, items) -> tuple[bool, ...]:
    """After the entry maps: which arrays of ``items`` the kernel reads (valid copy)."""
    return tuple(state.valid[it.array] for it in items)


def _step(state: _State, prog: Program, s) -> None:
    arrays = prog.arrays
    if isinstance(s, HostWrite) or isinstance(s, DeviceMemory):
        return
    if isinstance(s, EnterData):
        for it in s.items:
            _enter(state, arrays, it)
    elif isinstance(s, ExitData):
        for it in s.items:
            _exit(state, arrays, it)
    elif isinstance(s, Update):
        a = s.array
        if arrays[a].len and state.rc[a]:
            if s.direction == "from" and not state.valid[a]:
                raise ModelError(f"a{a}: update from an unwritten device copy")
            if s.direction == "to" and s.stride == 1:
                state.valid[a] = True
    elif isinstance(s, Kernel):
        for it in s.items:
            _enter(state, arrays, it)
        for it in s.items:                       # the kernel writes every mapped array
            if arrays[it.array].len:
                state.valid[it.array] = True
        for it in reversed(s.items):
            _exit(state, arrays, it)
    elif isinstance(s, DataRegion):
        for it in s.items:
            _enter(state, arrays, it)
        for inner in s.body:
            _step(state, prog, inner)
        for it in reversed(s.items):
            _exit(state, arrays, it)
    elif isinstance(s, GlobalKernel):
        if not prog.global_size:
            raise ModelError("no declare target global")
    else:
        raise TypeError(f"not a step: {s!r}")


def simulate(prog: Program) -> None:
    """Run ``prog``'s steps through the model; raises :class:`ModelError` when a run
    would show device memory nobody wrote, TypeError for something that is not a
    step."""
    state = _State([0] * len(prog.arrays), [False] * len(prog.arrays))
    for s in prog.steps:
        _step(state, prog, s)


def valid(prog: Program) -> bool:
    try:
        simulate(prog)
    except ModelError:
        return False
    return True


# -- drawing programs -----------------------------------------------------------------
@dataclass
class Features:
    """What the generator may use (all on by default)."""
    strided: bool = True
    pointers: bool = True
    structs: bool = True
    nowait: bool = True
    device_memory: bool = True
    globals: bool = True
    zero_length: bool = True
    max_steps: int = 12
    max_depth: int = 2


def _draw_arrays(rng: random.Random, f: Features) -> tuple[Array, ...]:
    out = []
    for i in range(rng.randint(1, 3)):
        size = rng.choice((4, 8, 16, 33))
        if f.zero_length and rng.random() < 0.08:
            lo, ln = rng.randrange(size), 0
        elif rng.random() < 0.5:
            lo, ln = 0, size
        else:
            lo = rng.randrange(size - 1)
            ln = rng.randint(1, size - lo)
        out.append(Array(f"a{i}", size, lo, ln))
    return tuple(out)


def _draw_items(rng, prog_arrays, types, f: Features) -> tuple[MapItem, ...]:
    n = len(prog_arrays)
    chosen = rng.sample(range(n), rng.randint(1, n))
    items = []
    struct_used = False
    for a in chosen:
        via = "array"
        if f.pointers and rng.random() < 0.25:
            via = "pointer"
        elif f.structs and not struct_used and rng.random() < 0.15:
            via, struct_used = "struct", True
        t = rng.choice(types)
        always = t in ("to", "from", "tofrom") and rng.random() < 0.2
        items.append(MapItem(a, t, always, via, via == "struct" and rng.random() < 0.3))
    return tuple(items)


def _copy(state: _State) -> _State:
    return _State(list(state.rc), list(state.valid), state.global_valid)


def _draw_step(rng, prog: Program, f: Features, depth: int, budget: list[int]):
    """One step drawn at random (a data region with its body drawn too)."""
    n = len(prog.arrays)
    kinds = ["host", "enter", "exit", "update", "kernel", "kernel"]
    if depth < f.max_depth:
        kinds.append("region")
    if f.device_memory:
        kinds.append("devmem")
    if prog.global_size:
        kinds.append("global")
    k = rng.choice(kinds)
    if k == "host":
        return HostWrite(rng.randrange(n), rng.randint(1, 99))
    if k == "enter":
        return EnterData(_draw_items(rng, prog.arrays, ("to", "alloc"), f))
    if k == "exit":
        return ExitData(_draw_items(rng, prog.arrays, EXIT_TYPES, f))
    if k == "update":
        a = rng.randrange(n)
        stride = 1
        if f.strided and prog.arrays[a].len >= 2 and rng.random() < 0.35:
            stride = rng.choice((2, 3))
        return Update(a, rng.choice(("to", "from")), stride)
    if k == "kernel":
        return Kernel(_draw_items(rng, prog.arrays, ENTRY_TYPES, f, ),
                      rng.randint(1, 99), f.nowait and rng.random() < 0.2)
    if k == "devmem":
        return DeviceMemory(rng.randrange(n), rng.randint(1, 99))
    if k == "global":
        return GlobalKernel(rng.choice(("to", "kernel", "kernel", "from")), rng.randint(1, 99))
    return DataRegion(_draw_items(rng, prog.arrays, ENTRY_TYPES, f))


def _draw_steps(rng, prog: Program, f: Features, depth: int, budget: list[int],
                state: _State) -> tuple:
    """Steps drawn one by one while ``budget[0]`` lasts (a region's body: also until a
    random stop), each one the model accepts after those before it (``state`` is
    advanced past them)."""
    steps = []
    while budget[0] > 0 and (depth == 0 or rng.random() < 0.7):
        for _attempt in range(8):
            s = _draw_step(rng, prog, f, depth, budget)
            trial = _copy(state)
            try:
                if isinstance(s, DataRegion):
                    for it in s.items:
                        _enter(trial, prog.arrays, it)
                    budget[0] -= 1
                    body = _draw_steps(rng, prog, f, depth + 1, budget, trial)
                    for it in reversed(s.items):
                        _exit(trial, prog.arrays, it)
                    s = DataRegion(s.items, body)
                else:
                    _step(trial, prog, s)
                    budget[0] -= 1
            except ModelError:
                continue
            steps.append(s)
            state.rc[:], state.valid[:] = trial.rc, trial.valid
            break
        else:
            break
    return tuple(steps)


def generate(seed: int, features: Features | None = None) -> Program:
    """The program of ``seed`` (deterministic) under ``features``; valid for the model
    (:func:`simulate`)."""
    f = features or Features()
    rng = random.Random(seed)
    arrays = _draw_arrays(rng, f)
    gsize = rng.choice((0, 8)) if f.globals else 0
    prog = Program(seed, arrays, (), gsize)
    state = _State([0] * len(arrays), [False] * len(arrays))
    steps = _draw_steps(rng, prog, f, 0, [rng.randint(3, f.max_steps)], state)
    prog = prog.with_steps(steps or (HostWrite(0, 1),))
    simulate(prog)          # the drawing kept every step valid: a check of the model
    return prog


# -- C source ---------------------------------------------------------------------------
def _map_clause(prog: Program, items, p: str, exit: bool = False) -> str:
    out = []
    for it in items:
        arr = prog.arrays[it.array]
        mod = "always, " if it.always else ""
        if it.via == "struct":
            # the struct itself and its member's section: as an exit, the struct is
            # released; the order of the two clauses is drawn (llvm-project PR #70821:
            # map(to: s.p[:n]) map(to: s) in one enter data)
            whole = f"map({'release' if exit else 'to'}: s{arr.name[1:]})"
            member = f"map({mod}{it.type}: {arr.section('struct')})"
            out.append(f"{member} {whole}" if it.member_first else f"{whole} {member}")
        else:
            out.append(f"map({mod}{it.type}: {arr.section(it.via, p)})")
    return " ".join(out)


def _render_steps(prog: Program, steps, p: str, lines: list[str], counter: list[int],
                  indent: str, state: _State) -> None:
    arrays = prog.arrays
    for s in steps:
        if isinstance(s, HostWrite):
            a = arrays[s.array]
            lines.append(f"{indent}for (int i = {a.lo}; i < {a.lo + a.len}; i++) "
                         f"{p}{a.name}[i] = {p}{a.name}[i] * 5u + {s.c}u;")
        elif isinstance(s, EnterData):
            lines.append(f"{indent}#pragma omp target enter data "
                         f"{_map_clause(prog, s.items, p)}")
            _step(state, prog, s)
        elif isinstance(s, ExitData):
            lines.append(f"{indent}#pragma omp target exit data "
                         f"{_map_clause(prog, s.items, p, exit=True)}")
            _step(state, prog, s)
        elif isinstance(s, Update):
            a = arrays[s.array]
            if s.stride > 1:
                count = (a.len + s.stride - 1) // s.stride
                sec = f"{p}{a.name}[{a.lo}:{count}:{s.stride}]"
            else:
                sec = a.section("array", p)
            lines.append(f"{indent}#pragma omp target update {s.direction}({sec})")
            _step(state, prog, s)
        elif isinstance(s, Kernel):
            for it in s.items:
                _enter(state, arrays, it)
            reads = _kernel_reads(state, arrays, s.items)
            clause = _map_clause(prog, s.items, p) + (" nowait" if s.nowait else "")
            lines.append(f"{indent}#pragma omp target {clause}")
            lines.append(f"{indent}{{")
            for it, rd in zip(s.items, reads):
                a = arrays[it.array]
                e = a.element(it.via, p)
                rhs = f"{e}[i] * 3u + {s.c}u" if rd else f"(unsigned)i * 7u + {s.c}u"
                lines.append(f"{indent}  for (int i = {a.lo}; i < {a.lo + a.len}; i++) "
                             f"{e}[i] = {rhs};")
            lines.append(f"{indent}}}")
            if s.nowait:
                lines.append(f"{indent}#pragma omp taskwait")
            for it in s.items:
                if arrays[it.array].len:
                    state.valid[it.array] = True
            for it in reversed(s.items):
                _exit(state, arrays, it)
        elif isinstance(s, DataRegion):
            for it in s.items:
                _enter(state, arrays, it)
            lines.append(f"{indent}#pragma omp target data {_map_clause(prog, s.items, p)}")
            lines.append(f"{indent}{{")
            counter[0] += 1
            lines.append(f"{indent}  {p}report({counter[0]}, dev);")
            _render_steps(prog, s.body, p, lines, counter, indent + "  ", state)
            lines.append(f"{indent}}}")
            for it in reversed(s.items):
                _exit(state, arrays, it)
        elif isinstance(s, DeviceMemory):
            a = arrays[s.array]
            nb = f"{a.len} * sizeof(unsigned)"
            host = f"&{p}{a.name}[{a.lo}]"
            lines += [f"{indent}{{",
                      f"{indent}  unsigned *d = (unsigned *)omp_target_alloc({nb} + 4, dev);",
                      f"{indent}  int rc = omp_target_memcpy(d, {host}, {nb}, 0, 0, dev, "
                      f"omp_get_initial_device());",
                      f"{indent}  #pragma omp target is_device_ptr(d)",
                      f"{indent}  for (int i = 0; i < {a.len}; i++) d[i] = d[i] * 11u + {s.c}u;",
                      f"{indent}  rc |= omp_target_memcpy({host}, d, {nb}, 0, 0, "
                      f"omp_get_initial_device(), dev);",
                      f"{indent}  omp_target_free(d, dev);",
                      f'{indent}  printf("memcpy %d\\n", rc);',
                      f"{indent}}}"]
        elif isinstance(s, GlobalKernel):
            if s.action == "kernel":
                lines += [f"{indent}#pragma omp target",
                          f"{indent}for (int i = 0; i < {prog.global_size}; i++) "
                          f"{p}g[i] = {p}g[i] * 13u + {s.c}u;"]
            else:
                lines.append(f"{indent}#pragma omp target update {s.action}({p}g)")
        else:
            raise TypeError(f"not a step: {s!r}")
        counter[0] += 1
        lines.append(f"{indent}{p}report({counter[0]}, dev);")


def render(prog: Program, fn: str = "program") -> str:
    """The C source of ``prog`` as one function ``static int fn(void)`` with its own
    arrays and digest printer (named with the prefix ``fn_``), without the
    :data:`HEADER`; :func:`render_batch` puts several into one translation unit.
    Raises :class:`ModelError` for a program the model refuses."""
    simulate(prog)
    p = fn + "_"
    lines = [f"/* seed {prog.seed} */"]
    for a in prog.arrays:
        lines.append(f"static unsigned {p}{a.name}[{a.size}];")
    if prog.global_size:
        init = ", ".join(str(i * 3 + 1) for i in range(prog.global_size))
        lines += ["#pragma omp declare target",
                  f"unsigned {p}g[{prog.global_size}] = {{{init}}};",
                  "#pragma omp end declare target"]
    fields, args = [], []
    for a in prog.arrays:
        fields.append(f"{a.name}=%08x")
        args.append(f"osh_digest({p}{a.name}, {a.size})")
        if a.len:
            fields.append("p%d")
            args.append(f"omp_target_is_present(&{p}{a.name}[{a.lo}], dev)")
    if prog.global_size:
        fields.append("g=%08x")
        args.append(f"osh_digest({p}g, {prog.global_size})")
    lines += [f"static void {p}report(int step, int dev) {{",
              f'  printf("%d {" ".join(fields)}\\n", step, {", ".join(args)});',
              "}",
              f"static int {fn}(void) {{",
              "  int dev = omp_get_default_device();"]
    for a in prog.arrays:
        n = a.name[1:]
        lines += [f"  for (int i = 0; i < {a.size}; i++) {p}{a.name}[i] = "
                  f"(unsigned)i * 2654435761u + {a.size}u;",
                  f"  unsigned *q{n} = {p}{a.name};",
                  f"  struct {{ unsigned *p; int n; }} s{n} = {{{p}{a.name}, {a.size}}};",
                  f"  (void)q{n}; (void)s{n};"]
    lines.append(f"  {p}report(0, dev);")
    state = _State([0] * len(prog.arrays), [False] * len(prog.arrays))
    _render_steps(prog, prog.steps, p, lines, [0], "  ", state)
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


HEADER = """#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned osh_digest(const unsigned *p, int n) {
  unsigned h = 2166136261u;
  for (int i = 0; i < n; i++) { h ^= p[i]; h *= 16777619u; }
  return h;
}
"""


def render_batch(progs) -> str:
    """One translation unit holding ``progs`` as ``prog0`` ... and a ``main`` that runs
    the one its first argument names (one process per program: each starts with a
    fresh runtime), so one build serves many programs."""
    parts = [HEADER]
    for i, prog in enumerate(progs):
        parts.append(render(prog, f"prog{i}"))
    parts.append("int main(int argc, char **argv) {")
    parts.append("  int k = argc > 1 ? atoi(argv[1]) : 0;")
    parts.append("  switch (k) {")
    for i in range(len(progs)):
        parts.append(f"  case {i}: return prog{i}();")
    parts.append("  }")
    parts.append("  return 99;")
    parts.append("}")
    return "\n".join(parts) + "\n"


__all__ = ["Array", "DataRegion", "DeviceMemory", "EnterData", "ExitData", "Features",
           "GlobalKernel", "HostWrite", "Kernel", "MapItem", "ModelError", "Program",
           "Update", "generate", "render", "render_batch", "simulate", "valid"]
