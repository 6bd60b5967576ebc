"""offload_shim: the OpenMP offload host runtime in Python, over the real plugins.

Drives LLVM libomptarget plugins (``libomptarget.rtl.*.so``, ``__tgt_rtl_*``)
and GCC libgomp plugins (``libgomp-plugin-*.so.1``, ``GOMP_OFFLOAD_*``)
through ctypes.  Importing the package loads nothing and calls nothing
(prior-art I6).

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
#: they use
_LAZY = {"AddressMap": ".core.images", "HostEntry": ".core.images",
         "OffloadImage": ".core.images", "Plugin": ".plugins.plugin",
         "load_plugin": ".plugins.loader", "Device": ".core.device",
         "DeviceState": ".core.device", "Runtime": ".core.runtime",
         "interpose": ".interposer"}          # compiled OpenMP code through the runtime

__version__ = "0.1.0"

__all__ = ["AddressMap", "Device", "DeviceState", "HostEntry", "OffloadImage", "Plugin",
           "Runtime", "interpose", "load_plugin", *_errors_all]


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'offload_shim' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(mod, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


#: module paths of earlier layouts (the flat one before the package was grouped by
#: layer, and modules moved between layers since) -> the module that now holds the code.  ``import offload_shim.runtime`` (and ``from
#: offload_shim.plugin import load_plugin``) still work: the old name is the same
#: module object.  ``offload_shim.interpose`` is the public function, not a module.
_MOVED = {"runtime": "core.runtime", "device": "core.device", "images": "core.images",
          "plugin": "plugins.loader", "discovery": "plugins.discovery",
          "isolation": "safety.isolation", "imageinfo": "elf.imageinfo",
          "embed": "interposer.embed", "interpose_cli": "cli.run", "check": "cli.check",
          # the process-safety modules, grouped in safety/
          "plugins.isolation": "safety.isolation", "plugins.leftovers": "safety.leftovers",
          "core.verdicts": "safety.verdicts"}


class _MovedModules:
    """A meta-path finder and loader for :data:`_MOVED` (consulted after the
    regular finders, so it never shadows a real module)."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        head, _, tail = fullname.partition(".")
        if head != __name__ or tail not in _MOVED:
            return None
        from importlib.machinery import ModuleSpec
        return ModuleSpec(fullname, cls)

    @staticmethod
    def create_module(spec):
        import importlib
        return importlib.import_module(f"{__name__}.{_MOVED[spec.name.partition('.')[2]]}")

    @staticmethod
    def exec_module(module):
        pass


import sys as _sys  # noqa: E402

if not any(f is _MovedModules or getattr(f, "__qualname__", "") == "_MovedModules"
           for f in _sys.meta_path):
    _sys.meta_path.append(_MovedModules)
del _sys
