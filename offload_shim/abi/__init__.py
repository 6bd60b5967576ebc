"""ctypes structs and prototype tables of the plugin ABIs.

Only this package and :mod:`offload_shim.plugins.plugin` know about ctypes
(docs/architecture.md)."""

from . import clang, gomp, liboffload, tgt_rtl

__all__ = ["clang", "gomp", "liboffload", "tgt_rtl"]
