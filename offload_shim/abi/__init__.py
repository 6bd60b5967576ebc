"""ctypes structs and prototype tables of the plugin ABIs.

Only this package and :mod:`offload_shim.plugins.plugin` know about ctypes
(docs/architecture.md)."""

__all__ = ["clang", "gomp", "liboffload", "tgt_rtl"]


def __getattr__(name: str):
    """The submodules are imported on first use (PEP 562): the embedded runtime of
    ``offload-shim run`` needs only some of them (start-up time)."""
    if name in __all__:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
