"""Shared fixtures.

Every test that uses the bundled host plugin in this process is checked
afterwards: no contract violation was recorded by the plugin and no
allocation is still live (issues 2 and 3).  Misuse that may crash a plugin
runs in a child process (tests/helpers.py: run_child).
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# A private TMPDIR for the session and every process it starts (see _leave_nothing_behind).
# (conftest is imported twice: by pytest, and as ``conftest`` by the tests' imports)
_mark = os.environ.get("OSH_TESTS_SESSION_TMP", "")
if _mark.startswith(f"{os.getpid()}:"):
    _SESSION_TMP = _mark.split(":", 1)[1]
else:
    _SESSION_TMP = tempfile.mkdtemp(prefix="osh_tests_")
    os.environ["OSH_TESTS_SESSION_TMP"] = f"{os.getpid()}:{_SESSION_TMP}"
    os.environ["TMPDIR"] = _SESSION_TMP
    # the verdict cache of the session and its children: not the user's (issue 32)
    os.environ.setdefault("OFFLOAD_SHIM_CACHE_DIR", os.path.join(_SESSION_TMP, "verdicts"))
    tempfile.tempdir = None              # recomputed from TMPDIR on next use
    atexit.register(shutil.rmtree, _SESSION_TMP, True)

from offload_shim import hostplugin

import signal as _signal

# A suite started in the background by a non-interactive shell (`make test &`, nohup)
# inherits SIGINT and SIGQUIT ignored (POSIX: asynchronous lists), nohup also SIGHUP, and
# an ignored disposition survives exec: the tests that send these signals to the
# processes they start (Ctrl-C under run, interrupted commands leaving nothing) need the
# default ones there, as a terminal gives them.
for _sig in (_signal.SIGINT, _signal.SIGQUIT, _signal.SIGHUP):
    if _signal.getsignal(_sig) == _signal.SIG_IGN:
        _signal.signal(_sig, _signal.default_int_handler if _sig == _signal.SIGINT
                       else _signal.SIG_DFL)


LLVM16 = Path("/usr/lib/llvm-16/lib")
NEXTGEN16 = LLVM16 / "libomptarget.rtl.x86_64.nextgen.so.16"
CLASSIC16 = LLVM16 / "libomptarget.rtl.x86_64.so.16"
GOMP_DIR = Path("/usr/lib/x86_64-linux-gnu")
NVPTX12 = GOMP_DIR / "libgomp-plugin-nvptx.so.1"
GCN12 = GOMP_DIR / "libgomp-plugin-gcn.so.1"


def llvm14_x86_64() -> Path | None:
    root = os.environ.get("OFFLOAD_SHIM_LLVM14_ROOT")
    if not root:
        here = Path(__file__).resolve().parent.parent / ".cache" / "llvm14"
        root = str(here)
    p = Path(root) / "usr/lib/llvm-14/lib/libomptarget.rtl.x86_64.so"
    return p if p.exists() else None


def liboffload22_path() -> Path | None:
    """libLLVMOffload.so.22.1: installed, or unpacked by scripts/setup.sh under
    $OFFLOAD_SHIM_LIBOFFLOAD_ROOT (default .cache/liboffload22)."""
    root = os.environ.get("OFFLOAD_SHIM_LIBOFFLOAD_ROOT") or str(
        Path(__file__).resolve().parent.parent / ".cache" / "liboffload22")
    for base in (Path("/"), Path(root)):
        p = base / "usr/lib/llvm-22/lib/libLLVMOffload.so.22.1"
        if p.exists():
            return p
    return None


def need(path: Path | None, what: str):
    if path is None or not Path(path).exists():
        pytest.skip(f"{what} not installed ({path}); scripts/setup.sh installs it")
    return str(path)


@pytest.fixture(scope="session")
def bundled_path() -> str:
    return str(hostplugin.bundled_plugin_path())


@pytest.fixture(scope="session")
def sample_path() -> str:
    return str(hostplugin.sample_image_path())


@pytest.fixture(scope="session")
def ctl(bundled_path) -> hostplugin.HostPluginControl:
    return hostplugin.HostPluginControl(bundled_path)


@pytest.fixture(scope="session", autouse=True)
def _leave_nothing_behind():
    """The suite leaves /tmp and /dev/shm as it found them.  Everything that honours
    TMPDIR (Python's tempfile, pytest's tmp_path, the bundled plugin's image copies, of
    this process and every child) goes to a private folder removed at the end (set at
    import, below).  What does not: the LLVM x86_64 plugins' /tmp/tmpfile_* copies of
    children that died before unlinking them, and libomp's
    /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid> of children that died without their exit
    code (crashes provoked on purpose): those that appeared during the session and that
    no process has open or mapped any more (their creators are gone) are removed."""
    from offload_shim.safety import leftovers
    copies = set(glob.glob(leftovers.LLVM_COPY_GLOB))
    segments = set(leftovers.dead_kmp_segments())
    yield
    leftovers.sweep(set(glob.glob(leftovers.LLVM_COPY_GLOB)) - copies)
    for seg in set(leftovers.dead_kmp_segments()) - segments:
        try:
            os.unlink(seg)
        except OSError:
            pass
    # mutmut runs pytest several times in one process (and in forks of it), all
    # with this TMPDIR: there the at-exit removal above cleans up instead
    if "MUTANT_UNDER_TEST" not in os.environ:
        shutil.rmtree(_SESSION_TMP, ignore_errors=True)


_REPO = Path(__file__).resolve().parent.parent


def _stray_candidates() -> set[Path]:
    """The files directly in the checkout's root and in tests/ (where a command run by a
    test without its own working directory writes its default outputs), dot files
    (caches, coverage) excepted."""
    return {p for d in (_REPO, _REPO / "tests") for p in d.iterdir()
            if p.is_file() and not p.name.startswith(".")}


@pytest.fixture(scope="session", autouse=True)
def _repository_stays_as_it_was():
    """No test leaves a file in the checkout (a check's default trace was once written
    into tests/ by a test that ran the command without a working directory of its own,
    and committed)."""
    before = _stray_candidates()
    yield
    new = sorted(str(p.relative_to(_REPO)) for p in _stray_candidates() - before)
    assert not new, f"tests left files in the checkout: {new}"


@pytest.fixture(autouse=True)
def _bundled_plugin_stays_clean(request):
    """After every test: no new contract violation in the bundled plugin and
    no live allocation left (the plugin is shared by the whole process)."""
    ctl = request.getfixturevalue("ctl")
    before = ctl.violation_count()
    yield
    after = ctl.violation_count()
    if "allow_violations" not in request.keywords:
        assert after == before, f"contract violations recorded: {ctl.violations()[before - after:]}"
    assert ctl.live_allocs() == 0, f"{ctl.live_allocs()} live allocations left in the bundled plugin"


@pytest.fixture
def nextgen16():
    return need(NEXTGEN16, "LLVM 16 x86_64 nextgen plugin (libomp5-16)")


@pytest.fixture
def classic16():
    return need(CLASSIC16, "LLVM 16 x86_64 classic plugin (libomp5-16)")


@pytest.fixture
def liboffload22():
    return need(liboffload22_path(), "liboffload 22 (unpacked liboffload-22 + libllvm22)")


@pytest.fixture
def llvm14():
    return need(llvm14_x86_64(), "LLVM 14 x86_64 plugin (unpacked libomp-14-dev)")


def pytest_configure(config):
    config.addinivalue_line("markers", "allow_violations: the test provokes contract "
                            "violations in the bundled plugin on purpose")
