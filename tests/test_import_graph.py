"""The package's import graph has no circle, at any level: every ``import`` and ``from
... import`` statement of every module counts -- at module level, inside functions and
under ``if TYPE_CHECKING:`` alike -- so a circle cannot hide behind a deferred import.
Read from the installed package's source (``ast``), nothing is imported."""

from __future__ import annotations

import ast
import os

import offload_shim

PACKAGE = "offload_shim"
ROOT = os.path.dirname(os.path.abspath(offload_shim.__file__))


def _modules() -> dict[str, str]:
    """``{dotted module name: path}`` of every ``.py`` file of the package."""
    out = {}
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(folder, os.path.dirname(ROOT)).split(os.sep)
        for f in files:
            if f.endswith(".py"):
                parts = rel + ([] if f == "__init__.py" else [f[:-3]])
                out[".".join(parts)] = os.path.join(folder, f)
    return out


def _edges(name: str, path: str, modules: dict[str, str]) -> set[str]:
    """The package modules ``name`` imports anywhere in its file: ``from P import N``
    counts as an edge to ``P.N`` when that is a module, else to ``P``."""
    is_pkg = path.endswith("__init__.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = alias.name
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in modules:
                    out.add(target)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if not base.startswith(PACKAGE):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in modules else base)
    out.discard(name)
    return {m for m in out if m in modules}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_the_reader_sees_every_module_and_import():
    modules = _modules()
    assert {"offload_shim", "offload_shim.plugins.loader", "offload_shim.core.device",
            "offload_shim.memory.manager", "offload_shim.safety.isolation"} <= set(modules)
    edges = _edges("offload_shim.plugins.loader", modules["offload_shim.plugins.loader"],
                   modules)
    # module level (the base), function level (each family when a plugin of it loads)
    assert {"offload_shim.plugins.plugin", "offload_shim.plugins.llvm",
            "offload_shim.plugins.liboffload", "offload_shim.safety.isolation"} <= edges


def test_a_circle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _circles(graph) == [["a", "b", "c"]]


def test_no_import_circle_in_the_package():
    modules = _modules()
    graph = {name: _edges(name, path, modules) for name, path in modules.items()}
    assert _circles(graph) == []
