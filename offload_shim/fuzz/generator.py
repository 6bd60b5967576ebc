"""Small, deterministic OpenMP offload programs over the mapping rules, and the model
that keeps them free of undefined behaviour.

A :class:`Program` is a list of steps (:class:`HostWrite`, :class:`EnterData`,
:class:`ExitData`, :class:`Update`, :class:`Kernel`, :class:`DataRegion` with steps
inside, :class:`Chain` of ``nowait`` constructs ordered by ``depend`` clauses,
:class:`UseDevice` (``use_device_ptr`` / ``use_device_addr``), :class:`ImplicitPointer`,
:class:`DeviceMemory`, :class:`GlobalKernel`, :class:`OtherDevice`) over a few
``unsigned`` arrays, each mapped through one fixed section ``[lo:len]`` (the same
section every time: a map that extends an existing one is an error in OpenMP, not a
case) either directly (``a0[lo:len]``), through a pointer (``q0[lo:len]``: the pointee
mapped and the pointer attached), as the member of a struct (``map(to: s0)
map(tofrom: s0.p[lo:len])``) or through the struct's ``declare mapper`` (``map(to:
m0)``, the mapper mapping ``m0`` and ``m0.p[lo:len]``).  A program may carry
``#pragma omp requires unified_shared_memory`` (:attr:`Program.usm`): its maps then
share the host's memory (no copies), which the model follows.  After every step the program prints one digest line:
an FNV-1a hash of each array's host values and ``omp_target_is_present`` of each
non-empty section, so everything a runtime decides (what is copied when, which
reference count drops to zero, what is present) shows in stdout.

Undefined behaviour is avoided by construction: :func:`simulate` replays the OpenMP
5.1 reference-count rules (2.21.7.1 "map clause": a list item's reference count rises
at each entry, the copy to the device happens when it becomes present or with
``always``; at exit it drops (``delete``: to zero) and the copy back happens when it
reaches zero or with ``always``) and tracks whether each array's device copy holds
written values (under ``requires unified_shared_memory`` the device copy is the host's
memory: always written; the ``present`` and ``close`` modifiers,
``omp_target_associate_ptr`` and ``use_device_ptr`` / ``use_device_addr``, whose
meaning changes there, are not drawn).  A
``present`` modifier is drawn only where the list item is present.  A kernel only reads a device copy that is valid (otherwise it only
writes it), and nothing copies an unwritten device copy back.  The generator draws
each step from the ones the model accepts at that point; the minimiser
(:mod:`offload_shim.fuzz.reduce`) keeps only candidates the model accepts.

Everything is drawn from ``random.Random(seed)``: the same seed gives the same
program, byte for byte.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

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
        return {"array": prefix + self.name, "pointer": "q" + n, "struct": f"s{n}.p",
                "mapper": f"m{n}.p"}[via]

    def section(self, via: str = "array", prefix: str = "") -> str:
        return f"{self.element(via, prefix)}[{self.lo}:{self.len}]"


@dataclass(frozen=True)
class MapItem:
    """One list item of a map clause: ``array`` (index), map ``type``, the ``always``
    modifier, how the section is named (``via``: array, pointer, struct, mapper: the
    struct ``mN`` through its type's ``declare mapper``), the ``close`` and
    ``present`` modifiers (OpenMP 5.0 / 5.1)."""
    array: int
    type: str
    always: bool = False
    via: str = "array"
    member_first: bool = False
    close: bool = False
    present: bool = False


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
class GlobalKernel:
    """A ``declare target`` global: ``update to`` (``direction`` "to"), a kernel on the
    device copy (``"kernel"``), or ``update from`` (``"from"``)."""
    action: str
    c: int = 0


@dataclass(frozen=True)
class Chain:
    """``body`` (enter data, exit data, contiguous update, kernels) as deferred target
    tasks: each construct with ``nowait depend(inout: aN, ...)`` naming the arrays it
    maps, then one ``taskwait``.  Constructs on different arrays may run at once;
    those on one array run in program order, so the result is the sequential one."""
    body: tuple = ()


@dataclass(frozen=True)
class UseDevice:
    """``target data use_device_ptr(rN)`` (``kind`` "ptr", ``rN = &aN[lo]``) or
    ``use_device_addr(aN[lo:len])`` (``kind`` "addr") around a kernel with
    ``is_device_ptr`` on the device address and a print of whether
    ``omp_get_mapped_ptr`` gives the same address: drawn only while the section is
    present; the kernel writes the device copy (reading it when it is defined)."""
    array: int
    kind: str
    c: int


@dataclass(frozen=True)
class ImplicitPointer:
    """A ``target`` region using ``rN = &aN[lo]`` with no map clause: the pointer is
    mapped implicitly as a zero-length array section (OpenMP 5.1, 2.21.7.2) and
    translated to the device copy of the present section; drawn only while present."""
    array: int
    c: int


@dataclass(frozen=True)
class DeviceMemory:
    """Device memory routines on an array's section: ``kind`` "memcpy":
    ``omp_target_alloc``, ``omp_target_memcpy`` in, a kernel with ``is_device_ptr``,
    ``omp_target_memcpy`` back, ``omp_target_free``; "rect": the same with
    ``omp_target_memcpy_rect`` over the section as ``rows`` x (len / rows);
    "associate": ``omp_target_associate_ptr`` of the buffer to the (absent) section, a
    ``map(tofrom)`` kernel on it (no copy: the association's count is infinite),
    ``omp_target_disassociate_ptr``."""
    array: int
    c: int
    kind: str = "memcpy"
    rows: int = 1


@dataclass(frozen=True)
class OtherDevice:
    """On device ``device`` (not the default one): ``enter data map(to)``, a kernel,
    ``update from``, ``exit data map(delete)`` of an array's section, each with a
    ``device`` clause; the default device's state is untouched."""
    array: int
    device: int
    c: int


Step = (HostWrite | EnterData | ExitData | Update | Kernel | DataRegion | Chain | UseDevice
        | ImplicitPointer | DeviceMemory | GlobalKernel | OtherDevice)


@dataclass(frozen=True)
class Program:
    """``arrays``, ``steps``, the size of the ``declare target`` global (0: none), the
    seed it was drawn from, and whether it holds ``requires unified_shared_memory``
    (``usm``: a requirement of the whole translation unit, so
    :func:`offload_shim.fuzz.render.render_batch` builds such programs only with each other)."""
    seed: int
    arrays: tuple[Array, ...]
    steps: tuple
    global_size: int = 0
    usm: bool = False

    def with_steps(self, steps) -> "Program":
        return replace(self, steps=tuple(steps))

    def count_steps(self) -> int:
        """Steps, those inside data regions included."""
        def n(steps):
            return sum(1 + n(getattr(s, "body", ())) for s in steps)
        return n(self.steps)


# -- the model ------------------------------------------------------------------------
@dataclass
class _State:
    rc: list[int]
    valid: list[bool]
    global_valid: bool = True       # the global's device copy: initialised at image load
    usm: bool = False               # requires unified_shared_memory: no device copies


def _new_state(prog: "Program") -> _State:
    n = len(prog.arrays)
    return _State([0] * n, [prog.usm] * n, usm=prog.usm)


def _always(item: MapItem) -> bool:
    """Whether ``always`` reaches the array's section: not through a mapper (clang 16 to
    22 keep the clause's ALWAYS off the entries the mapper emits; OpenMP 6.0 propagates
    it, clang from llvm-project PR #210210), so there it copies the struct only."""
    return item.always and item.via != "mapper"


def _enter(state: _State, arrays, item: MapItem) -> None:
    a = item.array
    if state.usm and (item.close or item.present):
        raise ModelError(f"a{a}: close/present under unified shared memory")
    if item.present and (arrays[a].len == 0 or state.rc[a] == 0):
        raise ModelError(f"a{a}: present modifier on an absent section")
    if arrays[a].len == 0:
        return
    if state.usm:
        state.rc[a] += 1
        return
    if state.rc[a] == 0:
        state.rc[a] = 1
        state.valid[a] = item.type in ("to", "tofrom")
    else:
        state.rc[a] += 1
        if _always(item) and item.type in ("to", "tofrom"):
            state.valid[a] = True


def _exit(state: _State, arrays, item: MapItem) -> None:
    a = item.array
    if arrays[a].len == 0 or state.rc[a] == 0:
        return
    state.rc[a] = 0 if item.type == "delete" else state.rc[a] - 1
    if state.usm:
        return
    copy = item.type in ("from", "tofrom") and (state.rc[a] == 0 or _always(item))
    if copy and not state.valid[a]:
        raise ModelError(f"a{a}: copied back while its device copy holds unwritten values")
    if state.rc[a] == 0:
        state.valid[a] = False


def _kernel_reads(state: _State, arrays, items) -> tuple[bool, ...]:
    """After the entry maps: which arrays of ``items`` the kernel reads (valid copy)."""
    return tuple(state.valid[it.array] for it in items)


def _present(state: _State, prog: Program, a: int, what: str) -> None:
    if prog.arrays[a].len == 0 or state.rc[a] == 0:
        raise ModelError(f"a{a}: {what} of an absent section")


def _step(state: _State, prog: Program, s) -> None:
    arrays = prog.arrays
    if isinstance(s, (HostWrite, OtherDevice)):
        return
    if isinstance(s, DeviceMemory):
        if s.kind == "associate" and (state.usm or state.rc[s.array] or
                                      not arrays[s.array].len):
            raise ModelError(f"a{s.array}: associate_ptr needs an absent, non-empty "
                             "section and no unified shared memory")
        if s.kind == "rect" and (s.rows < 1 or not arrays[s.array].len
                                 or arrays[s.array].len % s.rows):
            raise ModelError(f"a{s.array}: rect rows must divide the section")
        return
    if isinstance(s, UseDevice) and state.usm:
        # no mapping exists under unified shared memory: libomptarget 16 and 19.1 give
        # a null device pointer (the kernel faults), 22.1 the host address (OpenMP
        # 5.1's fallback): docs/fuzzing.md, "What it found"
        raise ModelError(f"a{s.array}: use_device_* under unified shared memory")
    if isinstance(s, (UseDevice, ImplicitPointer)):
        if not state.usm:
            _present(state, prog, s.array, type(s).__name__)
            state.valid[s.array] = True
        return
    if isinstance(s, Chain):
        if not s.body:
            raise ModelError("an empty chain")
        for inner in s.body:
            if not isinstance(inner, (EnterData, ExitData, Update, Kernel)):
                raise ModelError(f"not a step of a chain: {type(inner).__name__}")
            if isinstance(inner, Update) and inner.stride != 1:
                raise ModelError("a strided update in a chain")
            _step(state, prog, inner)
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
            if s.direction == "to" and s.stride == 1 and not state.usm:
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
    state = _new_state(prog)
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
    mappers: bool = True
    modifiers: bool = True          # close, present
    depend: bool = True             # chains of nowait constructs ordered by depend
    use_device: bool = True         # use_device_ptr / use_device_addr, implicit pointers
    devices: bool = True            # constructs on another device
    usm: float = 0.1                # share of programs with requires unified_shared_memory
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


def _draw_items(rng, prog_arrays, types, f: Features, state: _State | None = None
                ) -> tuple[MapItem, ...]:
    """A map clause's items; ``present`` only on an entry item whose section is
    present in ``state`` (so that the modifier never stops the program)."""
    n = len(prog_arrays)
    chosen = rng.sample(range(n), rng.randint(1, n))
    items = []
    struct_used = False
    entry = "to" in types
    for a in chosen:
        via = "array"
        if f.pointers and rng.random() < 0.25:
            via = "pointer"
        elif f.structs and not struct_used and rng.random() < 0.15:
            via, struct_used = "struct", True
        elif f.mappers and prog_arrays[a].len and rng.random() < 0.15:
            via = "mapper"
        t = rng.choice(types)
        always = t in ("to", "from", "tofrom") and rng.random() < 0.2
        close = present = False
        if f.modifiers and entry and state is not None and not state.usm:
            close = rng.random() < 0.1
            # not through a mapper (the struct itself would have to be present) nor on
            # a struct member: clang 16 and 19 put the member's PRESENT bit on the
            # struct's combined entry too, and the program stops where clang 22's
            # code runs on (docs/fuzzing.md, "What it found")
            present = (via == "array" or via == "pointer") and state.rc[a] > 0 \
                and prog_arrays[a].len > 0 and rng.random() < 0.3
        items.append(MapItem(a, t, always, via, via == "struct" and rng.random() < 0.3,
                             close, present))
    return tuple(items)


def _copy(state: _State) -> _State:
    return _State(list(state.rc), list(state.valid), state.global_valid, state.usm)


def _draw_chain(rng, prog: Program, f: Features, state: _State) -> Chain:
    """Two to four constructs for a :class:`Chain`, each valid after those before it
    (``state`` is advanced past them)."""
    body = []
    n = len(prog.arrays)
    for _ in range(rng.randint(2, 4)):
        for _attempt in range(6):
            k = rng.choice(("enter", "exit", "update", "kernel", "kernel"))
            if k == "enter":
                s = EnterData(_draw_items(rng, prog.arrays, ("to", "alloc"), f, state))
            elif k == "exit":
                s = ExitData(_draw_items(rng, prog.arrays, EXIT_TYPES, f))
            elif k == "update":
                s = Update(rng.randrange(n), rng.choice(("to", "from")))
            else:
                s = Kernel(_draw_items(rng, prog.arrays, ENTRY_TYPES, f, state),
                           rng.randint(1, 99))
            trial = _copy(state)
            try:
                _step(trial, prog, s)
            except ModelError:
                continue
            body.append(s)
            state.rc[:], state.valid[:] = trial.rc, trial.valid
            break
    return Chain(tuple(body))


def _draw_step(rng, prog: Program, f: Features, depth: int, budget: list[int],
               state: _State):
    """One step drawn at random (a data region's body is drawn by the caller, a
    chain's here, from a copy of ``state``)."""
    n = len(prog.arrays)
    kinds = ["host", "enter", "exit", "update", "kernel", "kernel"]
    if depth < f.max_depth:
        kinds.append("region")
    if f.device_memory:
        kinds.append("devmem")
    if prog.global_size:
        kinds.append("global")
    if f.depend:
        kinds.append("chain")
    if f.use_device:
        kinds += ["use_device", "implicit"]
    if f.devices:
        kinds.append("device")
    k = rng.choice(kinds)
    if k == "host":
        return HostWrite(rng.randrange(n), rng.randint(1, 99))
    if k == "enter":
        return EnterData(_draw_items(rng, prog.arrays, ("to", "alloc"), f, state))
    if k == "exit":
        return ExitData(_draw_items(rng, prog.arrays, EXIT_TYPES, f))
    if k == "chain":
        return _draw_chain(rng, prog, f, _copy(state))
    if k == "use_device":
        return UseDevice(rng.randrange(n), rng.choice(("ptr", "addr")), rng.randint(1, 99))
    if k == "implicit":
        return ImplicitPointer(rng.randrange(n), rng.randint(1, 99))
    if k == "device":
        return OtherDevice(rng.randrange(n), rng.randint(1, 3), rng.randint(1, 99))
    if k == "update":
        a = rng.randrange(n)
        stride = 1
        if f.strided and prog.arrays[a].len >= 2 and rng.random() < 0.35:
            stride = rng.choice((2, 3))
        return Update(a, rng.choice(("to", "from")), stride)
    if k == "kernel":
        return Kernel(_draw_items(rng, prog.arrays, ENTRY_TYPES, f, state),
                      rng.randint(1, 99), f.nowait and rng.random() < 0.2)
    if k == "devmem":
        a = rng.randrange(n)
        kind = rng.choice(("memcpy", "rect", "associate"))
        ln = prog.arrays[a].len
        rows = rng.choice([r for r in (1, 2, 3, 4) if ln and ln % r == 0] or [1])
        return DeviceMemory(a, rng.randint(1, 99), kind, rows if kind == "rect" else 1)
    if k == "global":
        return GlobalKernel(rng.choice(("to", "kernel", "kernel", "from")), rng.randint(1, 99))
    return DataRegion(_draw_items(rng, prog.arrays, ENTRY_TYPES, f, state))


def _draw_steps(rng, prog: Program, f: Features, depth: int, budget: list[int],
                state: _State) -> tuple:
    """Steps drawn one by one while ``budget[0]`` lasts (a region's body: also until a
    random stop), each one the model accepts after those before it (``state`` is
    advanced past them)."""
    steps = []
    while budget[0] > 0 and (depth == 0 or rng.random() < 0.7):
        for _attempt in range(8):
            s = _draw_step(rng, prog, f, depth, budget, state)
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
                    budget[0] -= 1 + len(getattr(s, "body", ()))
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
    usm = rng.random() < f.usm
    prog = Program(seed, arrays, (), gsize, usm)
    state = _new_state(prog)
    steps = _draw_steps(rng, prog, f, 0, [rng.randint(3, f.max_steps)], state)
    prog = prog.with_steps(steps or (HostWrite(0, 1),))
    simulate(prog)          # the drawing kept every step valid: a check of the model
    return prog
