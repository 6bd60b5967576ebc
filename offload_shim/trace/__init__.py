"""Runtime traces: ``offload-shim run --record TRACE`` writes one, ``offload-shim replay
TRACE`` re-issues it on a plugin under each pool policy.

* :mod:`.format`: the trace file (versioned JSON Lines): :class:`~.format.TraceWriter`,
  :func:`~.format.read_trace`, :func:`~.format.summary`.
* :mod:`.record`: the recorder the embedded runtime installs in the program's process
  (hooks on the runtime, its devices, plugins and the interposer; nothing is hooked
  when not recording).
* :mod:`.replay`: re-issues a trace's allocations, frees and copies (launches are
  counted) on a plugin, per pool policy, with the recorded threads and order.

The format is described in ``docs/trace-format.md``.  Nothing is imported at import
time of this package.
"""

__all__ = ["format", "record", "replay"]
