"""Test helpers: run code in a child process (misuse may crash a plugin)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_child(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run Python ``code`` in a fresh interpreter; returns the completed
    process (returncode < 0 = killed by that signal)."""
    return subprocess.run([sys.executable, "-P", "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=timeout)
