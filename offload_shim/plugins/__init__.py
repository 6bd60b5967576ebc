"""The plugin layer: loading one plugin ``.so`` through one ABI (:mod:`.plugin`), where
plugins are looked for (:mod:`.discovery`); the bundled host plugin's control API is
:mod:`offload_shim.hostplugin`.
The child-process checks that run before an in-process ``dlopen`` are in
:mod:`offload_shim.safety`."""
