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

#: deprecated attribute -> (the module it now is, the release that removes it): the
#: flat layout's module names before the package was grouped by layer.  ``from
#: offload_shim import runtime`` still works and warns (DeprecationWarning, once per
#: name); ``import offload_shim.runtime`` does not (docs/usage.md, "Deprecated names").
_DEPRECATED = {"runtime": (".core.runtime", "0.2.0"), "device": (".core.device", "0.2.0"),
               "images": (".core.images", "0.2.0"), "plugin": (".plugins.loader", "0.2.0"),
               "discovery": (".plugins.discovery", "0.2.0"),
               "isolation": (".safety.isolation", "0.2.0"),
               "imageinfo": (".elf.imageinfo", "0.2.0"),
               "embed": (".interposer.embed", "0.2.0"),
               "interpose_cli": (".cli.run", "0.2.0"), "check": (".cli.check", "0.2.0")}
_warned: set[str] = set()

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
    old = _DEPRECATED.get(name)
    if old is None:
        raise AttributeError(f"module 'offload_shim' has no attribute {name!r}")
    new, release = old
    if name not in _warned:
        _warned.add(name)
        import warnings
        warnings.warn(f"offload_shim.{name} is deprecated and goes away in {release}: "
                      f"use offload_shim{new}", DeprecationWarning, stacklevel=2)
    return importlib.import_module(new, __name__)


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
