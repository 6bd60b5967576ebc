"""offload_shim: the OpenMP offload host runtime in Python, over the real plugins.

Drives LLVM libomptarget plugins (``libomptarget.rtl.*.so``, ``__tgt_rtl_*``)
and GCC libgomp plugins (``libgomp-plugin-*.so.1``, ``GOMP_OFFLOAD_*``)
through ctypes.  Importing the package loads nothing and calls nothing
(devices initialise on first use: the failure of llvm/llvm-project #74507, a plugin
calling ``cuInit`` from a static initialiser, cannot happen at import).

    import offload_shim as osh
    with osh.Runtime.discover() as rt:
        img = osh.OffloadImage.sample()
        rt.register_image(img)
        dev = rt.devices[0]
        ...
"""

from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all

#: public name -> the module defining it, imported on first access (PEP 562): the
#: embedded runtime of ``offload-shim run`` and the command line import only what
#: they use.  The public API for hosts: docs/usage.md, "Python API for hosts".
_LAZY = {"AddressMap": ".core.images", "HostEntry": ".core.images",
         "OffloadImage": ".core.images", "Plugin": ".plugins.plugin",
         "load_plugin": ".plugins.loader", "Device": ".core.device",
         "DeviceState": ".core.device", "Runtime": ".core.runtime",
         "interpose": ".interposer",          # compiled OpenMP code through the runtime
         "Interposer": ".interposer", "LoadedLibrary": ".interposer"}

__version__ = "0.1.0"

__all__ = ["AddressMap", "Device", "DeviceState", "HostEntry", "Interposer",
           "LoadedLibrary", "OffloadImage", "Plugin", "Runtime", "interpose", "load_plugin",
           *_errors_all]


def __getattr__(name: str):
    import importlib
    mod = _LAZY.get(name)
    if mod is not None:
        value = getattr(importlib.import_module(mod, __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'offload_shim' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
