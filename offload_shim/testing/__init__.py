"""Property-based testing of offload plugins (public; hypothesis needed).

* :func:`make_lifecycle_machine` / :class:`LifecycleMachine`: a hypothesis
  ``RuleBasedStateMachine`` that drives the public runtime API against one
  plugin and checks it against a model after every step
  (:mod:`offload_shim.testing.machine`).
* :mod:`offload_shim.testing.strategies`: the value strategies it uses.
* :mod:`offload_shim.testing.probes`: known misuse sequences, each run
  directly against a plugin through ctypes in a child process.
* :mod:`offload_shim.testing.pytest_plugin`: fixtures for your own tests
  (``--offload-plugin PATH``); registered as a ``pytest11`` entry point.

Importing this package imports nothing heavy; the names below are loaded
on first access (hypothesis is only needed for the machine).
"""

from __future__ import annotations

__all__ = ["LifecycleMachine", "ModelError", "ProcessExhausted", "make_lifecycle_machine",
           "mapping_usage"]


def __getattr__(name):
    if name in __all__:
        from . import machine
        return getattr(machine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
