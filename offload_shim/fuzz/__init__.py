"""``offload-shim fuzz``: generated OpenMP offload programs (:mod:`.generator`), built by
clang 16 / 19 / 22 (:mod:`.toolchains`), run under their own runtime and under
``offload-shim run`` (:mod:`.runner`), divergences shrunk (:mod:`.reduce`).  The command
is :mod:`offload_shim.cli.fuzz`; docs/fuzzing.md describes it."""
