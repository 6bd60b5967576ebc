"""Rooms stay readable: no module of the package over 800 lines and no class over 500
(issue 27), a hypothesis state machine excepted -- its rules are one subject and read
best side by side.  Read from the installed package's source (``ast``)."""

from __future__ import annotations

import ast
import os

import offload_shim

ROOT = os.path.dirname(os.path.abspath(offload_shim.__file__))
MAX_MODULE_LINES = 800
MAX_CLASS_LINES = 500


def _sources():
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
                yield os.path.relpath(path, ROOT), text, ast.parse(text, path)


def _state_machines(tree) -> set[str]:
    """Classes deriving from hypothesis's RuleBasedStateMachine."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
                if name == "RuleBasedStateMachine":
                    out.add(node.name)
    return out


def _sizes():
    modules, classes = {}, {}
    for rel, text, tree in _sources():
        machines = _state_machines(tree)
        lines = text.count("\n") + (not text.endswith("\n"))
        machine_lines = 0
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                n = node.end_lineno - node.lineno + 1
                if node.name in machines:
                    machine_lines += n
                else:
                    classes[f"{rel}:{node.name}"] = n
        modules[rel] = lines - machine_lines
    return modules, classes


def test_no_module_over_800_lines():
    modules, _ = _sizes()
    assert {m: n for m, n in modules.items() if n > MAX_MODULE_LINES} == {}


def test_no_class_over_500_lines():
    _, classes = _sizes()
    assert {c: n for c, n in classes.items() if n > MAX_CLASS_LINES} == {}


def test_the_measure_sees_classes_and_machines():
    tree = ast.parse("class M(RuleBasedStateMachine):\n    pass\nclass C:\n    x = 1\n")
    assert _state_machines(tree) == {"M"}
    modules, classes = _sizes()
    assert "core/device.py:Device" in classes and "cli/__init__.py" in modules
