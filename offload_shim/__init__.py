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
from .core.images import AddressMap, HostEntry, OffloadImage
from .plugins.plugin import Plugin, load_plugin
from .core.device import Device, DeviceState
from .core.runtime import Runtime
from .interposer import interpose  # issue 7: compiled code through the runtime

__version__ = "0.1.0"

__all__ = ["AddressMap", "Device", "DeviceState", "HostEntry", "OffloadImage", "Plugin",
           "Runtime", "interpose", "load_plugin", *_errors_all]
