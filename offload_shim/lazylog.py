"""The package's logger (``logging.getLogger("offload_shim")``) without importing
:mod:`logging` until a record could go somewhere.

Importing :mod:`logging` costs some 4 ms (it pulls in ``traceback``, ``string``,
``weakref``...), paid by every ``offload-shim run`` program at start-up.  Until
something in the process has imported :mod:`logging`, nothing can have configured it
(handlers, levels): a ``debug``/``info`` record would reach no handler -- the
default root level is ``WARNING`` and ``logging.lastResort`` only takes ``WARNING``
and above -- so it is dropped without the import; ``warning`` and above, and any
record once :mod:`logging` is imported, go to the real logger exactly as
``logging.getLogger("offload_shim").<level>(...)`` would.
"""

from __future__ import annotations

import sys

__all__ = ["LazyLogger", "log"]


class LazyLogger:
    """A stand-in for ``logging.getLogger(name)``: ``debug``, ``info``, ``warning``,
    ``error``, ``exception``, ``isEnabledFor``; any other attribute is the real
    logger's (importing :mod:`logging`)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def logger(self):
        """The real :class:`logging.Logger` (imports :mod:`logging`)."""
        import logging
        return logging.getLogger(self.name)

    def debug(self, msg, *args, **kwargs) -> None:
        if "logging" in sys.modules:
            self.logger().debug(msg, *args, **kwargs)

    def info(self, msg, *args, **kwargs) -> None:
        if "logging" in sys.modules:
            self.logger().info(msg, *args, **kwargs)

    def warning(self, msg, *args, **kwargs) -> None:
        self.logger().warning(msg, *args, **kwargs)

    def error(self, msg, *args, **kwargs) -> None:
        self.logger().error(msg, *args, **kwargs)

    def exception(self, msg, *args, **kwargs) -> None:
        self.logger().exception(msg, *args, **kwargs)

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 - logging's name
        if "logging" not in sys.modules and level < 30:      # logging.WARNING
            return False
        return self.logger().isEnabledFor(level)

    def __getattr__(self, attr):
        return getattr(self.logger(), attr)

    def __repr__(self) -> str:
        return f"<LazyLogger {self.name}>"


#: ``logging.getLogger("offload_shim")``, imported on first use
log = LazyLogger("offload_shim")
