"""What every ``offload-shim`` command shares: one-line usage errors, checked
option values, interrupts, a progress bar on stderr.

Conventions (exit status): 0 done and nothing found; 1 something was found or
did not verify (a plugin's fault); 2 a usage or configuration error, named in
one line ``offload-shim: error: ...`` on stderr (the user's mistake, never a
finding); 130 interrupted (Ctrl-C, SIGINT); 143 terminated (SIGTERM).  Both
interrupts stop the command's child processes and remove what they left
(:func:`offload_shim.safety.children.run_child`) before the one line
``offload-shim: interrupted`` / ``terminated``.
"""

from __future__ import annotations

import sys

# argparse is imported on first use (``Parser``, the option types): `offload-shim run`,
# the start-up of every program it runs, parses its usual command lines without it; and
# signal too (its enums import enum: start-up)

__all__ = ["UsageError", "Terminated", "error", "positive_int", "positive_float",
           "nonnegative_int", "ProgressBar", "output_file_problem", "output_dir_problem", "install_sigterm", "EXIT_USAGE",
           "EXIT_INTERRUPTED", "EXIT_TERMINATED"]

EXIT_USAGE = 2
EXIT_INTERRUPTED = 128 + 2                  # 128 + SIGINT (2 on every POSIX system)
EXIT_TERMINATED = 128 + 15                  # 128 + SIGTERM (15 on every POSIX system)


class UsageError(Exception):
    """A bad option value or configuration variable: ``main`` prints the
    message in one line and exits 2."""


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that ``finally`` blocks (child
    processes stopped, leftovers removed) run before the exit."""


def _raise_terminated(signum, frame):
    raise Terminated()


def install_sigterm():
    """Turn SIGTERM into :class:`Terminated` (main thread only); returns the
    previous handler."""
    import signal
    return signal.signal(signal.SIGTERM, _raise_terminated)


def error(message: str) -> None:
    """Print the one-line error of a command given bad input (the caller exits 2)."""
    sys.stdout.flush()
    print(f"offload-shim: error: {message}", file=sys.stderr, flush=True)


def _type_error(message: str) -> Exception:
    import argparse
    return argparse.ArgumentTypeError(message)


def _number(text: str, kind, what: str):
    try:
        v = kind(text)
    except ValueError:
        raise _type_error(f"expected {what}, not {text!r}") from None
    import math                 # here: a shared library (lib-dynload), start-up of run
    if isinstance(v, float) and not math.isfinite(v):
        raise _type_error(f"expected {what}, not {text!r}")
    return v


def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    v = _number(text, int, "a positive integer")
    if v < 1:
        raise _type_error(f"expected a positive integer, not {text}")
    return v


def nonnegative_int(text: str) -> int:
    """argparse type: an int >= 0."""
    v = _number(text, int, "an integer >= 0")
    if v < 0:
        raise _type_error(f"expected an integer >= 0, not {text}")
    return v


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (seconds)."""
    v = _number(text, float, "a positive number of seconds")
    if not v > 0:
        raise _type_error(f"expected a positive number of seconds, not {text}")
    return v


def _make_parser_class():
    import argparse

    class Parser(argparse.ArgumentParser):
        """argparse with one-line errors: ``offload-shim: error: argument
        --steps: expected a positive integer, not 0 (offload-shim check --help)``,
        exit status 2."""

        def error(self, message: str):
            self.exit(EXIT_USAGE, f"offload-shim: error: {message} (see: {self.prog} --help)\n")

    Parser.__module__ = __name__
    return Parser


def __getattr__(name: str):
    # ``Parser`` (an argparse.ArgumentParser) is made on first use (PEP 562)
    if name == "Parser":
        cls = globals()["Parser"] = _make_parser_class()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def output_file_problem(path: str, option: str) -> str | None:
    """Why the file ``path`` that ``option`` names for writing cannot be written, or None;
    checked before the work whose result goes there (a run, a campaign) starts, so a
    mistyped path ends the command at once (exit 2) instead of after the work.  Refused:
    an empty name, a directory, a missing folder, a file or folder without write
    permission, a place where no file can be created (``/proc``).  An existing file is
    not touched; a missing one is created and removed again to prove it can be."""
    import os
    if not path:
        return f"{option} needs a file name"
    if os.path.isdir(path):
        return f"{option} {path}: is a directory"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"{option} {path}: no directory {parent}"
    if os.path.lexists(path):
        return None if os.access(path, os.W_OK) else f"{option} {path}: not writable"
    why = _cannot_create(path)
    return why and f"{option} {path}: {why}"


def _cannot_create(path: str) -> str | None:
    """Why no file can be created at ``path`` (which does not exist), or None; the file
    made to find out is removed again."""
    import os
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(path)
    return None


def output_dir_problem(path: str, option: str) -> str | None:
    """Why the folder ``path`` that ``option`` names for output cannot hold new files, or
    None; the folder (and missing parents) is created here, before the work starts."""
    import os
    if not path:
        return f"{option} needs a directory name"
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        return f"{option} {path}: {exc.strerror or exc}"
    why = _cannot_create(os.path.join(path, f".offload-shim-probe.{os.getpid()}"))
    return why and f"{option} {path}: {why}"


class ProgressBar:
    """A one-line progress bar on stderr: ``[#####-----] 120/200 what``,
    redrawn in place (``\\r``) on a terminal, a line every ``every`` steps
    otherwise.  ``total``: the expected count (the bar is full there; the
    count may pass it)."""

    def __init__(self, total: int, what: str, *, enabled: bool = True, width: int = 28,
                 every: int = 25, stream=None):
        self.total = max(int(total), 1)
        self.what = what
        self.enabled = enabled
        self.width = width
        self.every = max(every, 1)
        self.stream = stream or sys.stderr
        self.tty = enabled and self.stream.isatty()
        self.count = 0
        self._drawn = False

    def update(self, count: int, note: str = "") -> None:
        self.count = count
        if not self.enabled or (not self.tty and count % self.every and count != self.total):
            return
        fill = min(self.width, self.width * count // self.total)
        text = f"[{'#' * fill}{'-' * (self.width - fill)}] {count}/{self.total} {self.what}"
        if note:
            text += f" {note}"
        if self.tty:
            self.stream.write("\r" + text[:110].ljust(110))
            self._drawn = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
