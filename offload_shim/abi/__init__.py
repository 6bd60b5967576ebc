"""The one door to native code: every ctypes binding of the package.

* :mod:`.tgt_rtl`, :mod:`.gomp`, :mod:`.liboffload`, :mod:`.clang`: structs and prototype
  tables of the plugin ABIs (LLVM ``__tgt_rtl_*``, GCC ``GOMP_OFFLOAD_*``
  with the optional page-locked host memory entry points, LLVM ``ol*``);
* :mod:`.interposer`: the C interposer's callback table and control API;
* :mod:`.libc`: libc/libdl (``malloc``/``free``, ``mlock``..., ``dlsym``,
  ``prctl``), bound once, lazily;
* :mod:`.hostctl`: the bundled host plugin's ``osh_host_*`` control API;
* :mod:`.buffers`: addresses of Python-owned host memory;
* :mod:`.native`: where the bundled native libraries are (no binding: paths only).

Outside this package only the plugin modules (:mod:`offload_shim.plugins.plugin`,
:mod:`~offload_shim.plugins.loader`, :mod:`~offload_shim.plugins.llvm`,
:mod:`~offload_shim.plugins.gomp`, :mod:`~offload_shim.plugins.liboffload`, which call
the plugins through these tables) and code that runs in a child process by design use ctypes
(docs/design.md).  Importing binds nothing.
"""

__all__ = ["buffers", "clang", "gomp", "hostctl", "interposer", "libc", "liboffload",
           "native", "tgt_rtl"]


def __getattr__(name: str):
    """The submodules are imported on first use (PEP 562): the embedded runtime of
    ``offload-shim run`` needs only some of them (start-up time)."""
    if name in __all__:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
