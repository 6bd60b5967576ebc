"""The bundled host plugin's control API under its path before the package
was grouped by layer: this module *is* :mod:`offload_shim.plugins.hostplugin`
(the same module object), kept so scripts written against the flat layout,
such as the pool cases in ``../shared/cases/pool/``, keep working."""

import sys

from .plugins import hostplugin as _hostplugin

sys.modules[__name__] = _hostplugin
