"""The plugin layer: loading one plugin ``.so`` through one ABI (:mod:`.plugin`), where
plugins are looked for (:mod:`.discovery`), child-process safety checks before an
in-process ``dlopen`` (:mod:`.isolation`) and the bundled host plugin (:mod:`.hostplugin`)."""
