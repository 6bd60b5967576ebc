"""The lifecycle state machine (issue 4) against the bundled plugin and the
real LLVM x86_64 plugins.  CI budget: 2,000 sequences on the bundled plugin
(both ABI views), 500 on each LLVM 16 x86_64 plugin (docs/testing.md says
how to run more)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from offload_shim.testing import LifecycleMachine, make_lifecycle_machine


def _run(machine, n, steps):
    run_state_machine_as_test(machine, settings=settings(
        max_examples=n, stateful_step_count=steps, deadline=None, derandomize=True,
        database=None, suppress_health_check=list(HealthCheck)))


@pytest.mark.parametrize("abi", ["llvm", "gomp"])
def test_bundled_1000_sequences_each_view(bundled_path, abi):
    """2,000 sequences in all on the bundled plugin, with fault injection and
    threads; the plugin's counters must agree with the model after every step."""
    m = make_lifecycle_machine(bundled_path, abi)
    assert m.faults and m.threads
    _run(m, 1000, 20)


def _run_in_child(path, n, steps):
    """Real plugins run in a child (offload-shim check): they keep every
    image they ever loaded (LLVM <= 18 has no unload_image), so hundreds of
    sequences in the pytest process would exhaust it."""
    from offload_shim.cli.check import run_check
    res = run_check(path, max_examples=n, steps=steps, timeout=600)
    assert res["ok"], res["findings"]
    assert res["examples"] >= n


@pytest.mark.llvm16
def test_nextgen16_500_sequences(nextgen16):
    _run_in_child(nextgen16, 500, 15)


@pytest.mark.llvm16
def test_classic16_500_sequences(classic16):
    _run_in_child(classic16, 500, 15)


@pytest.mark.llvm16
def test_nextgen16_process_exhaustion_is_clean(nextgen16):
    """The real plugins never unload an image, so a long run fills the
    process's memory mappings; the machine then stops with ProcessExhausted
    after a passing sequence, not with hypothesis's FlakyStrategyDefinition
    (what the 2,000-sequence run hit after 661 sequences when dlopen began
    to fail).  In a child: this loads nextgen into the process."""
    code = textwrap.dedent(f"""
        from hypothesis import HealthCheck, settings
        from hypothesis.stateful import run_state_machine_as_test
        from offload_shim.testing import ProcessExhausted, make_lifecycle_machine, mapping_usage
        M = make_lifecycle_machine({nextgen16!r})
        M.max_mappings = 0.0            # the first sequence that passes is the last
        try:
            run_state_machine_as_test(M, settings=settings(
                max_examples=50, stateful_step_count=10, deadline=None, derandomize=True,
                database=None, suppress_health_check=list(HealthCheck)))
        except ProcessExhausted as e:
            assert e.limit == mapping_usage()[1] and "never unloads" in str(e), e
            print("exhausted", e.used, e.limit)
    """)
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "exhausted" in cp.stdout, cp.stdout + cp.stderr


@pytest.mark.llvm16
def test_run_check_continues_in_fresh_children(nextgen16):
    """run_check starts a fresh child when one stops for lack of mappings and
    runs the remaining sequences there (each child here stops after one)."""
    from offload_shim.cli.check import run_check
    res = run_check(nextgen16, max_examples=4, steps=5, timeout=300, max_mappings=0.0)
    assert res["ok"], res["findings"]
    assert res["examples"] >= 4 and res["children"] >= 2, res


def test_bundled_plugin_is_never_stopped(bundled_path):
    """The bundled plugin frees what it loads: no ProcessExhausted for it."""
    m = make_lifecycle_machine(bundled_path, "llvm", threads=False, faults=False)
    m.max_mappings = 0.0
    _run(m, 20, 5)


@pytest.mark.llvm14
def test_llvm14_100_sequences(llvm14):
    _run_in_child(llvm14, 100, 15)


def test_factory_and_lazy_package(bundled_path):
    m = make_lifecycle_machine(bundled_path, "gomp", threads=False, faults=False)
    assert issubclass(m, LifecycleMachine) and not m.threads and not m.faults
    assert m.abi == "gomp" and m.plugin_path.endswith("libosh_hostplugin.so")
    # importing the package imports neither hypothesis nor a plugin (llvm-project #74507)
    code = ("import sys, offload_shim.testing, offload_shim.testing.pytest_plugin; "
            "assert 'hypothesis' not in sys.modules, 'hypothesis imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_model_catches_a_runtime_that_lies(bundled_path, monkeypatch):
    """The machine is not vacuous: a runtime whose unregister forgets the
    pending list is caught, and the report is a replayable program."""
    import offload_shim.core.runtime as rtmod

    real = rtmod.Runtime.unregister_image

    def forgetful(self, image):
        real(self, image)
        self._registry.add(image)           # the bug: image stays pending/registered

    monkeypatch.setattr(rtmod.Runtime, "unregister_image", forgetful)
    m = make_lifecycle_machine(bundled_path, "llvm", threads=False, faults=False)
    with pytest.raises(AssertionError) as ei:
        _run(m, 300, 10)
    notes = "\n".join(getattr(ei.value, "__notes__", []))
    assert "state.unregister(" in notes and "state = " in notes


def test_pytest_plugin_recipe(tmp_path, bundled_path):
    """The documented 5-line recipe, run by a child pytest through the
    pytest11 entry point and --offload-plugin."""
    (tmp_path / "test_mine.py").write_text(textwrap.dedent("""
        from hypothesis import settings
        from hypothesis.stateful import run_state_machine_as_test

        def test_my_plugin_lifecycle(offload_lifecycle_machine):
            run_state_machine_as_test(offload_lifecycle_machine,
                                      settings=settings(max_examples=20, deadline=None))

        def test_runtime(offload_runtime):
            assert len(offload_runtime.devices) >= 1
    """))
    cp = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                         f"--offload-plugin={bundled_path}", "--offload-abi=gomp",
                         str(tmp_path / "test_mine.py")],
                        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "2 passed" in cp.stdout
