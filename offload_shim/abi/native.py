"""Where the bundled native libraries are.

``pip install .`` builds ``native/`` with CMake and installs the results into
``offload_shim/_native/``: the host plugin ``libosh_hostplugin.so`` (all three plugin
ABIs over host memory, ``native/host_plugin.c``), the sample offload image
``libosh_sample_kernels.so``, the interposer ``libosh_interposer.so``, the batch
caller ``libosh_batch.so`` and the DLPack deleters ``libosh_dlpack.so``.  ``$OFFLOAD_SHIM_NATIVE_DIR`` points the package at
libraries built elsewhere.  Nothing is loaded here; pathlib is imported only where a
``Path`` is returned (the embedded runtime of every ``offload-shim run`` finds its
native files through this module: start-up time).
"""

from __future__ import annotations

import os

__all__ = ["NATIVE_DIR_ENV", "PLUGIN_FILENAME", "SAMPLE_IMAGE_FILENAME", "native_dir",
           "bundled_native_dir", "bundled_plugin_path", "sample_image_path"]

#: the variable naming a folder of native libraries built elsewhere
NATIVE_DIR_ENV = "OFFLOAD_SHIM_NATIVE_DIR"

PLUGIN_FILENAME = "libosh_hostplugin.so"
SAMPLE_IMAGE_FILENAME = "libosh_sample_kernels.so"

_NOT_BUILT = ("bundled host plugin not built: install the package with `pip install .` "
              "or set OFFLOAD_SHIM_NATIVE_DIR")


def native_dir() -> str:
    """Directory holding the bundled native libraries, as a ``str``: ``$OFFLOAD_SHIM_NATIVE_DIR``
    if set, else ``offload_shim/_native`` next to this module (where ``pip install .`` puts
    them), else, when this module is imported from a source checkout that shadows an
    installed copy, the installed distribution's ``offload_shim/_native``."""
    env = os.environ.get(NATIVE_DIR_ENV)
    if env:
        return env
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "_native")
    if os.path.isdir(here):
        return here
    try:
        from importlib.metadata import PackageNotFoundError, distribution
        installed = os.fspath(distribution("offload-shim").locate_file("offload_shim/_native"))
        if os.path.isdir(installed):
            return installed
    except (ImportError, PackageNotFoundError, OSError):
        pass
    return here


def bundled_native_dir() -> pathlib.Path:
    """:func:`native_dir` as a :class:`pathlib.Path`."""
    import pathlib
    return pathlib.Path(native_dir())


def _bundled_file(name: str) -> pathlib.Path:
    path = bundled_native_dir() / name
    if not path.is_file():
        raise FileNotFoundError(f"{_NOT_BUILT} (missing {path})")
    return path


def bundled_plugin_path() -> pathlib.Path:
    """Path of ``libosh_hostplugin.so``; ``FileNotFoundError`` when it is not built."""
    return _bundled_file(PLUGIN_FILENAME)


def sample_image_path() -> pathlib.Path:
    """Path of the sample offload image ``libosh_sample_kernels.so`` (kernels ``vec_add``,
    ``axpy``, ``increment``, ``scale_by_global``; global ``double osh_scale = 3.0``);
    ``FileNotFoundError`` when it is not built."""
    return _bundled_file(SAMPLE_IMAGE_FILENAME)
