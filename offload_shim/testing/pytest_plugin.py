"""pytest plugin: test your own offload plugin with the lifecycle machine.

Registered as the ``pytest11`` entry point ``offload_shim``, so it is active
in every pytest run of an environment where offload_shim is installed.
It adds the options ``--offload-plugin PATH`` and ``--offload-abi
{llvm,gomp}`` and the fixtures below; importing it imports nothing but
pytest (hypothesis is imported when a machine is built).

The 5-line recipe (``pytest --offload-plugin=/path/to/libomptarget.rtl.foo.so``, or
``--offload-plugin=bundled`` for the bundled host plugin)::

    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test

    def test_my_plugin_lifecycle(offload_lifecycle_machine):
        run_state_machine_as_test(offload_lifecycle_machine,
                                  settings=settings(max_examples=200, deadline=None))

Without ``--offload-plugin`` the fixtures use the bundled host plugin.
Misuse that may crash a plugin is not run in-process: use ``offload-shim
check --probe-misuse PLUGIN`` for that.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("offload_shim", "offload plugin testing (offload_shim)")
    group.addoption("--offload-plugin", action="store", default=None, metavar="PATH",
                    help="offload plugin .so for the offload_* fixtures, or 'bundled' "
                         "(default: the bundled host plugin)")
    group.addoption("--offload-abi", action="store", default=None,
                    choices=("llvm", "gomp", "liboffload"),
                    help="ABI view of a plugin that exports both (the bundled one)")


@pytest.fixture(scope="session")
def offload_plugin_path(request) -> str:
    """Path of the plugin under test: ``--offload-plugin`` or the bundled
    host plugin (also ``--offload-plugin=bundled``, as ``offload-shim check
    bundled``; skips when it is not built)."""
    path = request.config.getoption("--offload-plugin")
    if path is None or path == "bundled":
        from offload_shim.abi.native import bundled_plugin_path
        try:
            return str(bundled_plugin_path())
        except FileNotFoundError as exc:
            pytest.skip(str(exc))
    return str(path)


@pytest.fixture(scope="session")
def offload_plugin_abi(request) -> str | None:
    """``--offload-abi`` (None: the loader's choice)."""
    return request.config.getoption("--offload-abi")


@pytest.fixture
def offload_runtime(offload_plugin_path, offload_plugin_abi):
    """A :class:`offload_shim.Runtime` over the plugin under test, closed
    after the test (teardown order D120089, D130712)."""
    from offload_shim import Runtime, load_plugin
    rt = Runtime([load_plugin(offload_plugin_path, abi=offload_plugin_abi)])
    try:
        yield rt
    finally:
        rt.close()


@pytest.fixture
def offload_lifecycle_machine(offload_plugin_path, offload_plugin_abi):
    """The :class:`offload_shim.testing.LifecycleMachine` class for the
    plugin under test (fault rules on for the bundled plugin)."""
    from offload_shim.testing import make_lifecycle_machine
    return make_lifecycle_machine(offload_plugin_path, offload_plugin_abi)
