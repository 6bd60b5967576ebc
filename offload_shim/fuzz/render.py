"""The C source of generated programs (:mod:`offload_shim.fuzz.generator`'s
:class:`~offload_shim.fuzz.generator.Program`): one function per program printing its
digest lines, and a batch file whose ``main`` runs the program its first argument picks.
The model's state is followed while rendering, so that every step's output names what
the runtime must have decided."""

from __future__ import annotations

from .generator import (Chain, DataRegion, DeviceMemory, EnterData, ExitData, GlobalKernel,
                        HostWrite, ImplicitPointer, Kernel, MapItem, OtherDevice, Program,
                        Update, UseDevice, _State, _enter, _exit, _kernel_reads, _new_state,
                        _step, simulate)


# -- C source ---------------------------------------------------------------------------
def _mods(it: MapItem) -> str:
    return ("always, " if it.always else "") + ("close, " if it.close else "") + \
        ("present, " if it.present else "")


def _map_clause(prog: Program, items, p: str, exit: bool = False) -> str:
    out = []
    for it in items:
        arr = prog.arrays[it.array]
        mod = _mods(it)
        if it.via == "struct":
            # the struct itself and its member's section: as an exit, the struct is
            # released; the order of the two clauses is drawn (llvm-project PR #70821:
            # map(to: s.p[:n]) map(to: s) in one enter data)
            whole = f"map({'release' if exit else 'to'}: s{arr.name[1:]})"
            member = f"map({mod}{it.type}: {arr.section('struct')})"
            out.append(f"{member} {whole}" if it.member_first else f"{whole} {member}")
        elif it.via == "mapper":
            # the struct through its type's declare mapper: map(tofrom: v, v.p[lo:len])
            # with the clause's map type (OpenMP 5.1 2.21.7.4: to/from decay)
            out.append(f"map({mod}{it.type}: m{arr.name[1:]})")
        else:
            out.append(f"map({mod}{it.type}: {arr.section(it.via, p)})")
    return " ".join(out)


def _depend(prog: Program, s, p: str) -> str:
    """`` nowait depend(inout: ...)`` naming the arrays construct ``s`` maps."""
    arrays = [s.array] if isinstance(s, Update) else sorted({it.array for it in s.items})
    return " nowait depend(inout: " + ", ".join(f"{p}{prog.arrays[a].name}"
                                                for a in arrays) + ")"


def _render_one(prog: Program, s, p: str, lines: list[str], indent: str, state: _State,
                tail: str = "") -> None:
    """The source of one step other than a region or a chain (``tail``: clauses added
    to its construct, as a chain's ``nowait depend(...)``), advancing ``state``."""
    arrays = prog.arrays
    if isinstance(s, HostWrite):
        a = arrays[s.array]
        lines.append(f"{indent}for (int i = {a.lo}; i < {a.lo + a.len}; i++) "
                     f"{p}{a.name}[i] = {p}{a.name}[i] * 5u + {s.c}u;")
    elif isinstance(s, EnterData):
        lines.append(f"{indent}#pragma omp target enter data "
                     f"{_map_clause(prog, s.items, p)}{tail}")
        _step(state, prog, s)
    elif isinstance(s, ExitData):
        lines.append(f"{indent}#pragma omp target exit data "
                     f"{_map_clause(prog, s.items, p, exit=True)}{tail}")
        _step(state, prog, s)
    elif isinstance(s, Update):
        a = arrays[s.array]
        if s.stride > 1:
            count = (a.len + s.stride - 1) // s.stride
            sec = f"{p}{a.name}[{a.lo}:{count}:{s.stride}]"
        else:
            sec = a.section("array", p)
        lines.append(f"{indent}#pragma omp target update {s.direction}({sec}){tail}")
        _step(state, prog, s)
    elif isinstance(s, Kernel):
        for it in s.items:
            _enter(state, arrays, it)
        reads = _kernel_reads(state, arrays, s.items)
        nowait = s.nowait and not tail
        clause = _map_clause(prog, s.items, p) + (" nowait" if nowait else "") + tail
        lines.append(f"{indent}#pragma omp target {clause}")
        lines.append(f"{indent}{{")
        for it, rd in zip(s.items, reads):
            a = arrays[it.array]
            e = a.element(it.via, p)
            rhs = f"{e}[i] * 3u + {s.c}u" if rd else f"(unsigned)i * 7u + {s.c}u"
            lines.append(f"{indent}  for (int i = {a.lo}; i < {a.lo + a.len}; i++) "
                         f"{e}[i] = {rhs};")
        lines.append(f"{indent}}}")
        if nowait:
            lines.append(f"{indent}#pragma omp taskwait")
        for it in s.items:
            if arrays[it.array].len:
                state.valid[it.array] = True
        for it in reversed(s.items):
            _exit(state, arrays, it)
    elif isinstance(s, (UseDevice, ImplicitPointer)):
        a = arrays[s.array]
        n = a.name[1:]
        rd = state.valid[s.array]
        _step(state, prog, s)
        if isinstance(s, ImplicitPointer):
            lines += [f"{indent}#pragma omp target",
                      f"{indent}for (int i = 0; i < {a.len}; i++) r{n}[i] = "
                      + (f"r{n}[i] * 31u + {s.c}u;" if rd else f"(unsigned)i * 37u + {s.c}u;")]
        else:
            # in the region the list item names the device copy: the host address
            # for omp_get_mapped_ptr is taken through the name that is not privatised
            if s.kind == "ptr":
                head, ptr = f"use_device_ptr(r{n})", f"r{n}"
                host = f"&{p}{a.name}[{a.lo}]"
            else:
                head, ptr = f"use_device_addr({a.section('array', p)})", "d"
                host = f"r{n}"
            lines += [f"{indent}#pragma omp target data {head}", f"{indent}{{"]
            if s.kind == "addr":
                lines.append(f"{indent}  unsigned *d = &{p}{a.name}[{a.lo}];")
            # omp_get_mapped_ptr (OpenMP 5.1) must give the same device address
            lines += [f"{indent}  #pragma omp target is_device_ptr({ptr})",
                      f"{indent}  for (int i = 0; i < {a.len}; i++) {ptr}[i] = "
                      + (f"{ptr}[i] * 23u + {s.c}u;" if rd else f"(unsigned)i * 29u + {s.c}u;"),
                      f'{indent}  printf("use_device_{s.kind} %d\\n", '
                      f'omp_get_mapped_ptr({host}, dev) == (void *){ptr});',
                      f"{indent}}}"]
    elif isinstance(s, DeviceMemory):
        _step(state, prog, s)
        a = arrays[s.array]
        nb = f"{a.len} * sizeof(unsigned)"
        host = f"&{p}{a.name}[{a.lo}]"
        init = "omp_get_initial_device()"
        lines += [f"{indent}{{",
                  f"{indent}  unsigned *d = (unsigned *)omp_target_alloc({nb} + 4, dev);"]
        if s.kind == "rect":
            cols = a.len // s.rows if a.len else 0
            lines += [f"{indent}  size_t vol[2] = {{{s.rows}, {cols}}}, off[2] = {{0, 0}};",
                      f"{indent}  int rc = omp_target_memcpy_rect(d, {host}, sizeof(unsigned), "
                      f"2, vol, off, off, vol, vol, dev, {init});"]
        else:
            lines.append(f"{indent}  int rc = omp_target_memcpy(d, {host}, {nb}, 0, 0, dev, "
                         f"{init});")
        if s.kind == "associate":
            # associated: present with an infinite count, so the map below copies
            # nothing either way (omptarget.cpp associatePtr: a mapping that is
            # never released); the host's change after it stays on the host
            lines += [f"{indent}  rc |= omp_target_associate_ptr({host}, d, {nb}, 0, dev);",
                      f"{indent}  int pr = omp_target_is_present({host}, dev);",
                      f"{indent}  for (int i = {a.lo}; i < {a.lo + a.len}; i++) "
                      f"{p}{a.name}[i] += 1000u;",
                      f"{indent}  #pragma omp target map(tofrom: {a.section('array', p)})",
                      f"{indent}  for (int i = {a.lo}; i < {a.lo + a.len}; i++) "
                      f"{p}{a.name}[i] = {p}{a.name}[i] * 17u + {s.c}u;",
                      f"{indent}  rc |= omp_target_memcpy({host}, d, {nb}, 0, 0, {init}, dev);",
                      f"{indent}  rc |= omp_target_disassociate_ptr({host}, dev);",
                      f"{indent}  omp_target_free(d, dev);",
                      f'{indent}  printf("associate %d %d %d\\n", rc, pr, '
                      f'omp_target_is_present({host}, dev));',
                      f"{indent}}}"]
            return
        lines += [f"{indent}  #pragma omp target is_device_ptr(d)",
                  f"{indent}  for (int i = 0; i < {a.len}; i++) d[i] = d[i] * 11u + {s.c}u;"]
        if s.kind == "rect":
            lines.append(f"{indent}  rc |= omp_target_memcpy_rect({host}, d, sizeof(unsigned), "
                         f"2, vol, off, off, vol, vol, {init}, dev);")
        else:
            lines.append(f"{indent}  rc |= omp_target_memcpy({host}, d, {nb}, 0, 0, "
                         f"{init}, dev);")
        lines += [f"{indent}  omp_target_free(d, dev);",
                  f'{indent}  printf("{s.kind} %d\\n", rc);',
                  f"{indent}}}"]
    elif isinstance(s, OtherDevice):
        a = arrays[s.array]
        sec = a.section("array", p)
        k = s.device
        present = (f"omp_target_is_present(&{p}{a.name}[{a.lo}], {k})" if a.len else "-1")
        lines += [f"{indent}{{",
                  f"{indent}  #pragma omp target enter data device({k}) map(to: {sec})",
                  f"{indent}  #pragma omp target device({k}) map(tofrom: {sec})",
                  f"{indent}  for (int i = {a.lo}; i < {a.lo + a.len}; i++) "
                  f"{p}{a.name}[i] = {p}{a.name}[i] * 19u + {s.c}u;",
                  f"{indent}  int pr = {present};",
                  f"{indent}  #pragma omp target update device({k}) from({sec})",
                  f"{indent}  #pragma omp target exit data device({k}) map(delete: {sec})",
                  f'{indent}  printf("device {k} %d %d\\n", pr, {present});',
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


def _render_steps(prog: Program, steps, p: str, lines: list[str], counter: list[int],
                  indent: str, state: _State) -> None:
    arrays = prog.arrays
    for s in steps:
        if isinstance(s, DataRegion):
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
        elif isinstance(s, Chain):
            for inner in s.body:
                _render_one(prog, inner, p, lines, indent, state, _depend(prog, inner, p))
            lines.append(f"{indent}#pragma omp taskwait")
        else:
            _render_one(prog, s, p, lines, indent, state)
        counter[0] += 1
        lines.append(f"{indent}{p}report({counter[0]}, dev);")


def render(prog: Program, fn: str = "program") -> str:
    """The C source of ``prog`` as one function ``static int fn(void)`` with its own
    arrays, struct types, mappers and digest printer (named with the prefix ``fn_``),
    without the :data:`HEADER` (nor the ``requires`` directive of a :attr:`Program.usm`
    program: :func:`render_batch` writes it); :func:`render_batch` puts several into
    one translation unit.  Raises :class:`ModelError` for a program the model
    refuses."""
    simulate(prog)
    p = fn + "_"
    lines = [f"/* seed {prog.seed}{' (unified shared memory)' if prog.usm else ''} */"]
    for a in prog.arrays:
        lines.append(f"static unsigned {p}{a.name}[{a.size}];")
        n = a.name[1:]
        lines.append(f"struct {p}t{n} {{ unsigned *p; int n; }};")
        if a.len:
            lines.append(f"#pragma omp declare mapper(struct {p}t{n} v) "
                         f"map(tofrom: v, v.p[{a.lo}:{a.len}])")
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
              "  fflush(stdout);          /* what ran before a runtime's abort shows */",
              "}",
              f"static int {fn}(void) {{",
              "  int dev = omp_get_default_device();"]
    for a in prog.arrays:
        n = a.name[1:]
        lines += [f"  for (int i = 0; i < {a.size}; i++) {p}{a.name}[i] = "
                  f"(unsigned)i * 2654435761u + {a.size}u;",
                  f"  unsigned *q{n} = {p}{a.name};",
                  f"  unsigned *r{n} = &{p}{a.name}[{a.lo}];",
                  f"  struct {{ unsigned *p; int n; }} s{n} = {{{p}{a.name}, {a.size}}};",
                  f"  struct {p}t{n} m{n} = {{{p}{a.name}, {a.size}}};",
                  f"  (void)q{n}; (void)r{n}; (void)s{n}; (void)m{n};"]
    lines.append(f"  {p}report(0, dev);")
    state = _new_state(prog)
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
    fresh runtime), so one build serves many programs.  ``requires
    unified_shared_memory`` binds the whole unit: ``progs`` are all
    :attr:`Program.usm` (the directive is written) or none is; ValueError otherwise."""
    progs = list(progs)
    usm = {prog.usm for prog in progs}
    if len(usm) > 1:
        raise ValueError("programs with and without requires unified_shared_memory "
                         "cannot share a translation unit")
    parts = [HEADER]
    if usm == {True}:
        parts.append("#pragma omp requires unified_shared_memory\n")
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


__all__ = ["render", "render_batch"]
