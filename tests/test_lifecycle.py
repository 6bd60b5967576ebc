"""The lifecycle harness: the differential method along time and threads.

Real hosts live long and do much at once: they dlopen and dlclose offload libraries many
times (images registered after the devices were initialised, unregistered while they
stay up), link offload libraries (whose unregistration runs inside the exit of the
program: clang 16 from ``.fini_array``, clang 19+ from ``atexit`` handlers registered
before ``_dl_fini``), offload from several threads, and end in every way (``return``,
``exit()`` inside a target region or from another thread, exit handlers that offload,
``quick_exit``, ``abort``).  Each program of ``tests/lifecycle/`` runs as it is -- under
the libomptarget of the compiler that built it (16, 19.1, 22.1): the reference -- and
under ``offload-shim run`` on the LLVM 16 nextgen and classic x86_64 plugins and on the
bundled plugin; exit status, stdout and stderr must be the same, with
``OMP_TARGET_OFFLOAD=mandatory`` where the reference offloads.  Stdout is a pipe, so a
crash at exit would lose what the program printed.  Also: ``run --plugin`` of a plugin at
any path, and a plugin whose constructor calls ``exit()``.

Cycle counts are small here (CI); ``offload-shim bench`` has the long lifecycle
workload.  Builds are cached per compiler and source (clang_toolchains.Clang.build).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clang_toolchains import CLANG16, CLANG19, CLANG22
from conftest import CLASSIC16, NEXTGEN16

HERE = Path(__file__).resolve().parent / "lifecycle"
ROOT = Path(__file__).resolve().parent.parent
OSH = [sys.executable, "-P", "-m", "offload_shim.cli"]
MANDATORY = {"OMP_TARGET_OFFLOAD": "mandatory"}
#: cycles of the dlopen/dlclose hosts: the first list in every configuration, the long
#: one on each plugin once
CYCLES, LONG_CYCLES = 20, 200


def _bundled() -> str:
    from offload_shim.hostplugin import bundled_plugin_path
    return str(bundled_plugin_path())


#: plugin choices of `offload-shim run` (None: what libomptarget 16 would load)
PLUGINS = {
    "default": lambda: [],
    "nextgen": lambda: ["--plugin", str(NEXTGEN16)],
    "classic": lambda: ["--plugin", str(CLASSIC16)],
    "bundled": lambda: ["--bundled", "--plugin", _bundled()],
}
COMPILER = {16: CLANG16, 19: CLANG19, 22: CLANG22}


def _need(cc) -> None:
    why = cc.missing()
    if why:
        pytest.skip(why)
    if not NEXTGEN16.exists():
        pytest.skip("LLVM 16 plugins not installed (libomp5-16)")
    from offload_shim.cli.run import libpython_path
    try:
        libpython_path()
    except RuntimeError as exc:
        pytest.skip(str(exc))


def _exec(cmd, env_extra=None, timeout=120) -> tuple:
    env = dict(os.environ, **(env_extra or {}))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        return ("timeout", exc.stdout or "", exc.stderr or "")
    return (p.returncode, p.stdout, p.stderr)


def _same(cmd, plugin: str, env_extra=None, report: Path | None = None,
          run_opts=()) -> tuple:
    """Run ``cmd`` as it is and under ``offload-shim run`` with ``plugin``; assert that
    exit status, stdout and stderr agree; return the reference result."""
    ref = _exec(cmd, env_extra)
    opts = [*PLUGINS[plugin](), *run_opts]
    if report is not None:
        opts += ["--report", str(report)]
    got = _exec([*OSH, "run", *opts, *cmd], env_extra)
    assert got == ref, f"reference {ref!r}\noffload-shim run {got!r}"
    return ref


@pytest.fixture(scope="module")
def plain_host(tmp_path_factory) -> Path:
    """host_cycles.c built without OpenMP: a host with no offload image of its own."""
    out = tmp_path_factory.mktemp("lifecycle") / "host_cycles"
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang-16")
    if cc is None:
        pytest.skip("no C compiler")
    subprocess.run([cc, "-O1", str(HERE / "host_cycles.c"), "-ldl", "-o", str(out)],
                   check=True, capture_output=True, timeout=120)
    return out


def _lib(version: int, name: str) -> Path:
    cc = COMPILER[version]
    _need(cc)
    return cc.build(HERE / f"{name}.c", shared=True)


# -- library cycles ---------------------------------------------------------------------
@pytest.mark.parametrize("version,plugin", [
    (16, "default"), (16, "nextgen"), (16, "classic"), (16, "bundled"),
    (19, "default"), (22, "default")])
@pytest.mark.parametrize("keep", ["close", "keep"])
def test_dlopen_cycles_offload_every_time(plain_host, version, plugin, keep):
    lib = _lib(version, "lib_kernel")
    out = _same([str(plain_host), str(lib), str(CYCLES), keep], plugin, MANDATORY)[1]
    assert out == f"cycles {CYCLES} on device {CYCLES} wrong 0\n"


@pytest.mark.parametrize("plugin", ["nextgen", "classic", "bundled"])
def test_long_dlopen_cycles(plain_host, plugin, tmp_path):
    lib = _lib(16, "lib_kernel")
    report = tmp_path / "report.json"
    out = _same([str(plain_host), str(lib), str(LONG_CYCLES)], plugin, MANDATORY,
                report=report)[1]
    assert out == f"cycles {LONG_CYCLES} on device {LONG_CYCLES} wrong 0\n"
    rep = json.loads(report.read_text())
    assert rep["calls"]["register_lib"] == LONG_CYCLES == rep["calls"]["unregister_lib"]
    assert rep["calls"]["fallback"] == 0 and rep["errors"] == [] and rep["libraries"] == 0
    assert len(rep["initialised"]) == 1, rep["initialised"]   # one device, kept up


PY_CYCLES = """
import _ctypes, ctypes, sys
n, on = int(sys.argv[2]), 0
for i in range(n):
    lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_LOCAL)
    twice = ctypes.c_int()
    on += lib.lib_where(i, ctypes.byref(twice))
    assert twice.value == 2 * i
    _ctypes.dlclose(lib._handle)
print("python host: on device", on, "of", n)
"""


@pytest.mark.parametrize("plugin", ["default", "bundled"])
def test_python_host_cycles(plugin):
    lib = _lib(16, "lib_kernel")
    out = _same([sys.executable, "-c", PY_CYCLES, str(lib), str(CYCLES)], plugin,
                MANDATORY)[1]
    assert out == f"python host: on device {CYCLES} of {CYCLES}\n"


# -- linked libraries ------------------------------------------------------------------
def _linked(version: int, own_kernel: bool) -> Path:
    cc = COMPILER[version]
    libk, libd = _lib(version, "lib_kernel"), _lib(version, "lib_data")
    return cc.build(HERE / "host_linked.c", defines=("OWN_KERNEL",) if own_kernel else (),
                    link=(str(libk), str(libd), f"-Wl,-rpath,{libk.parent}"))


@pytest.mark.parametrize("version", [16, 19, 22])
@pytest.mark.parametrize("own_kernel", [True, False], ids=["own-kernel", "no-own-kernel"])
@pytest.mark.parametrize("dlopened", ["", "close", "keep"])
def test_linked_libraries_exit_cleanly(version, own_kernel, dlopened, tmp_path):
    exe = _linked(version, own_kernel)
    args = [str(_lib(version, "lib_kernel")), dlopened] if dlopened else []
    report = tmp_path / "report.json"
    out = _same([str(exe), *args], "default", MANDATORY, report=report)[1]
    assert out.endswith("done\n") and "lib_where dev=1 twice=42" in out
    rep = json.loads(report.read_text())
    assert rep["errors"] == [] and rep["calls"]["fallback"] == 0, rep


# -- threads ---------------------------------------------------------------------------
@pytest.mark.parametrize("plugin", ["nextgen", "classic", "bundled"])
def test_threads_offload_at_once(plugin):
    _need(CLANG16)
    exe = CLANG16.build(HERE / "host_threads.c", link=("-lpthread",))
    out = _same([str(exe), "4", "20"], plugin, MANDATORY)[1]
    assert "still mapped 0" in out and out.count("devices") == 4


# -- ways to end -----------------------------------------------------------------------
EXITS = ["return", "region", "region-loop", "thread", "atexit", "quick", "abort"]


@pytest.mark.parametrize("plugin", ["nextgen", "classic", "bundled"])
@pytest.mark.parametrize("mode", EXITS)
def test_exit_paths(plugin, mode):
    _need(CLANG16)
    exe = CLANG16.build(HERE / "exit_paths.c", link=("-lpthread",))
    _same([str(exe), mode], plugin, MANDATORY)


@pytest.mark.parametrize("mode", ["busy", "busy-loop"])
@pytest.mark.parametrize("plugin", ["nextgen", "classic", "bundled"])
def test_exit_from_a_thread_while_a_kernel_runs(plugin, mode):
    """exit() from one thread while the main thread is inside a kernel: the exit
    finalises libomp and the plugin under the running kernel, so under the real
    libomptarget 16 the process ends with the exit status or SIGSEGV, at random.  Under
    ``offload-shim run`` it must end too (the teardown waits for nothing: the runtime is
    abandoned, the plugins' exit handlers are skipped), promptly, with one of those.
    ``busy-loop``: the kernel is one the C side repeats (interposer_repeat.c)."""
    _need(CLANG16)
    exe = CLANG16.build(HERE / "exit_paths.c", link=("-lpthread",))
    for _ in range(3):
        got = _exec([*OSH, "run", *PLUGINS[plugin](), str(exe), mode], MANDATORY,
                    timeout=15)
        assert got[0] in (9, -11), got
        assert "not reached" not in got[1] and "offload_shim" not in got[2], got


@pytest.mark.parametrize("version", [19, 22])
@pytest.mark.parametrize("mode", ["return", "region", "region-loop", "atexit", "thread"])
def test_exit_paths_current_clang(version, mode):
    cc = COMPILER[version]
    _need(cc)
    exe = cc.build(HERE / "exit_paths.c", link=("-lpthread",))
    _same([str(exe), mode], "default", MANDATORY)


def test_exit_handler_registered_before_main_offloads():
    _need(CLANG16)
    exe = CLANG16.build(HERE / "exit_paths.c", link=("-lpthread",))
    out = _same([str(exe), "return"], "default", {**MANDATORY, "EXIT_PATH_CTOR": "1"})[1]
    assert "ctor handler: 8" in out


# -- plugins at any path ---------------------------------------------------------------
@pytest.fixture(scope="module")
def plugin_copies(tmp_path_factory) -> Path:
    """Copies of the LLVM 16 plugins at a path libomptarget 16 never loads itself."""
    if not NEXTGEN16.exists():
        pytest.skip("LLVM 16 plugins not installed (libomp5-16)")
    d = tmp_path_factory.mktemp("plugins")
    shutil.copy(NEXTGEN16, d / "libmy.nextgen.so")
    shutil.copy(CLASSIC16, d / "libmy.classic.so")
    (d / "ldpath").mkdir()
    shutil.copy(NEXTGEN16, d / "ldpath" / "libomptarget.rtl.x86_64.nextgen.so")
    return d


@pytest.mark.parametrize("name", ["libmy.nextgen.so", "libmy.classic.so"])
@pytest.mark.parametrize("mode", ["return", "atexit", "region"])
def test_run_plugin_at_any_path(plugin_copies, name, mode):
    _need(CLANG16)
    exe = CLANG16.build(HERE / "exit_paths.c", link=("-lpthread",))
    _same([str(exe), mode], "default", MANDATORY,
          run_opts=["--plugin", str(plugin_copies / name)])


def test_run_nextgen_plugin_under_classic_setting():
    _need(CLANG16)
    exe = CLANG16.build(HERE / "exit_paths.c", link=("-lpthread",))
    _same([str(exe), "atexit"], "nextgen",
          {**MANDATORY, "LIBOMPTARGET_NEXTGEN_PLUGINS": "0"})


def test_plugin_found_through_ld_library_path(plugin_copies):
    """libomptarget 16's constructor loads the nextgen plugin by name: through
    LD_LIBRARY_PATH, another copy of it than the runtime's own."""
    _need(CLANG16)
    exe = CLANG16.build(HERE / "exit_paths.c", link=("-lpthread",))
    _same([str(exe), "atexit"], "default",
          {**MANDATORY, "LD_LIBRARY_PATH": str(plugin_copies / "ldpath")})


def test_plugin_constructor_that_exits(tmp_path):
    """A plugin whose constructor calls exit() while the embedded runtime starts (the
    bundled plugin's sources plus such a constructor): the program ends with that
    status, as it would where its own runtime loaded the plugin; nothing hangs."""
    _need(CLANG16)
    src = tmp_path / "ctor_exit.c"
    src.write_text("#include <stdlib.h>\n__attribute__((constructor)) static void c(void)"
                   " { if (getenv(\"OFFLOAD_SHIM_EMBED\")) exit(11); }\n")
    plugin = tmp_path / "libctorexit.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", f"-I{ROOT / 'native'}",
                    str(ROOT / "native" / "host_plugin.c"),
                    str(ROOT / "native" / "host_plugin_ol.c"), str(src), "-ldl",
                    "-lpthread", "-o", str(plugin)], check=True, capture_output=True,
                   timeout=120)
    exe = CLANG16.build(HERE / "exit_paths.c", link=("-lpthread",))
    got = _exec([*OSH, "run", "--plugin", str(plugin), str(exe), "return"], timeout=60)
    assert got[0] == 11 and got[1] == "", got
