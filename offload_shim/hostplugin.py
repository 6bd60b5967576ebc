"""Deprecated: the bundled host plugin's control API under its path before the package
was grouped by layer.  Every public name of :mod:`offload_shim.plugins.hostplugin`
is still found here, with a DeprecationWarning (once per name); this module goes away in
0.2.0 (docs/usage.md, "Deprecated names")."""

_warned: set[str] = set()


def __getattr__(name: str):
    from .plugins import hostplugin
    if name.startswith("_") or name not in getattr(hostplugin, "__all__", ()):
        raise AttributeError(f"module 'offload_shim.hostplugin' has no attribute {name!r}")
    if name not in _warned:
        _warned.add(name)
        import warnings
        warnings.warn(f"offload_shim.hostplugin.{name} is deprecated and goes away in 0.2.0: "
                      f"use offload_shim.plugins.hostplugin.{name}", DeprecationWarning,
                      stacklevel=2)
    return getattr(hostplugin, name)
