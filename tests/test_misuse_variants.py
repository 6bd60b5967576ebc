"""Variants of the misuse classes that the command line and the Python API must
answer the same way everywhere: every command (``run`` and ``compare`` too) turns a
bad option or configuration variable into one line and exit status 2, bounds its
``--timeout``, and leaves nothing behind, also interrupted; every entry point that
takes a device pointer, a host address, a path or a timeout takes the same types
(``operator.index`` integers; str/bytes/os.PathLike; real seconds > 0) and refuses
the others with a TypeError naming what was given -- before a plugin sees it.

Plugins are the bundled one in process (it cannot crash the interpreter on these
calls); commands run in child processes from a scratch directory.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from array import array

import pytest

import offload_shim as osh
from offload_shim.cli import CONFIG_VARIABLES

from leftover_watch import Watch
from test_leftovers import CLI, INTERRUPTS, _after, _assert_clean, _both, _started_children
from test_interpose_run import prog  # noqa: F401  (fixture: the clang-16 sample program)
from test_usage_errors import _cli, _usage_error

BAD_CONFIG = {"LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD": "12abc",
              "OFFLOAD_SHIM_POOL_DEBUG": "sometimes",
              "OFFLOAD_SHIM_PINNED": "everything",
              "OFFLOAD_SHIM_NATIVE_DIR": "/nonexistent/native",
              "OFFLOAD_SHIM_PLUGINS": "/nonexistent/plugins"}


# -- `run` and `compare` follow the conventions of the other commands ---------------------

@pytest.mark.parametrize("args, needle", [((), "program"),
                                          (("--bogus", "/bin/true"), "--bogus"),
                                          (("--policy", "sometimes", "/bin/true"), "--policy")])
def test_run_usage_errors_are_one_line(tmp_path, args, needle):
    _usage_error(_cli("run", *args, cwd=tmp_path), needle)


def test_config_variables_are_the_ones_checked():
    """What ``offload-shim run`` checks before it starts the program is what every other
    command checks (core.runtime.check_environment): each variable, set bad, is refused."""
    from offload_shim.core.runtime import check_environment
    assert set(BAD_CONFIG) == set(CONFIG_VARIABLES)
    for var, value in BAD_CONFIG.items():
        old = os.environ.get(var)
        os.environ[var] = value
        try:
            with pytest.raises(ValueError, match=var):
                check_environment()
        finally:
            if old is None:
                del os.environ[var]
            else:
                os.environ[var] = old


@pytest.mark.parametrize("var", sorted(BAD_CONFIG))
def test_run_refuses_a_bad_configuration_variable_before_the_program(tmp_path, var):
    """Not a silent host fallback (exit 0) inside the program: exit 2 and one line naming
    the variable; the program never starts."""
    marker = tmp_path / "ran"
    p = _cli("run", "/bin/sh", "-c", f"touch {marker}", cwd=tmp_path,
             env_extra={var: BAD_CONFIG[var]})
    _usage_error(p, var, BAD_CONFIG[var])
    assert not marker.exists()


def test_run_with_good_configuration_variables_runs(tmp_path):
    marker = tmp_path / "ran"
    p = _cli("run", "/bin/sh", "-c", f"touch {marker}", cwd=tmp_path,
             env_extra={"LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD": " 0 ",
                        "OFFLOAD_SHIM_POOL_DEBUG": "off", "OFFLOAD_SHIM_PINNED": "none"})
    assert p.returncode == 0, p.stderr
    assert marker.exists()


@pytest.mark.parametrize("command", ["demo", "info"])
def test_a_native_dir_without_the_bundled_plugin_is_a_configuration_error(tmp_path, command):
    """Not "no plugin with a device found" (exit 1, a finding): exit 2 naming the variable."""
    p = _cli(command, "--no-system", cwd=tmp_path,
             env_extra={"OFFLOAD_SHIM_NATIVE_DIR": str(tmp_path)})
    _usage_error(p, "OFFLOAD_SHIM_NATIVE_DIR", str(tmp_path))


@pytest.mark.parametrize("command", ["demo", "info"])
def test_a_missing_path_in_offload_shim_plugins_is_a_configuration_error(tmp_path, command):
    """Was listed "not usable" with exit 0: exit 2 naming the variable and the entry, as
    for the other variables; existing entries (a file, a folder) are still taken."""
    missing = str(tmp_path / "nope.so")
    value = os.pathsep.join([str(tmp_path), missing])
    p = _cli(command, "--no-system", cwd=tmp_path, env_extra={"OFFLOAD_SHIM_PLUGINS": value})
    _usage_error(p, "OFFLOAD_SHIM_PLUGINS", repr(missing))
    if command == "info":
        from offload_shim.hostplugin import bundled_plugin_path
        p = _cli(command, "--no-system", "--no-devices", cwd=tmp_path, env_extra={
            "OFFLOAD_SHIM_PLUGINS": os.pathsep.join([str(tmp_path), str(bundled_plugin_path())])})
        assert p.returncode == 0, (p.stdout, p.stderr)


def test_discover_refuses_a_missing_path_in_offload_shim_plugins(tmp_path, monkeypatch):
    monkeypatch.setenv("OFFLOAD_SHIM_PLUGINS", str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="OFFLOAD_SHIM_PLUGINS"):
        osh.Runtime.discover(system=False, bundled=False)


def test_run_when_no_plugin_takes_the_image_falls_back_like_libomptarget(tmp_path, prog):
    """libomptarget 16 keeps an image no plugin takes (``RTLsTy::registerLib``: "No RTL
    found for image") and the regions run on the host.  ``offload-shim run`` with only
    GCC's nvptx plugin (rejects the x86_64 image, no device) against the real
    libomptarget 16 finding no plugin (a copy without its plugins beside it: its RUNPATH
    is $ORIGIN): same stdout and exit status; the image reported unsupported.  (The
    Python API refuses such an image: Runtime.register_image.)"""
    import glob
    import shutil
    nvptx = sorted(glob.glob("/usr/lib/*/libgomp-plugin-nvptx.so.1"))
    if not nvptx:
        pytest.skip("GCC's nvptx plugin (libgomp-plugin-nvptx1) not installed")
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy("/usr/lib/llvm-16/lib/libomptarget.so.16", bare)
    real = subprocess.run([prog], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, LD_LIBRARY_PATH=str(bare)))
    report = tmp_path / "r.json"
    ours = _cli("run", "--report", report, "--plugin", nvptx[0], prog, cwd=tmp_path)
    assert (ours.returncode, ours.stdout) == (real.returncode, real.stdout) == (3, real.stdout)
    assert "num_devices 0" in ours.stdout and ours.stderr == real.stderr == ""
    rep = json.loads(report.read_text())
    assert rep["initialised"] == [] and len(rep["unsupported"]) == 1, rep
    assert "no plugin accepts the image" in rep["unsupported"][0]


def test_help_shows_no_markup(tmp_path):
    p = _cli("--help", cwd=tmp_path)
    assert p.returncode == 0 and "offload-shim" in p.stdout
    assert "``" not in p.stdout, p.stdout[:300]


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_compare_timeout_is_bounded(tmp_path, value):
    _usage_error(_cli("compare", "--timeout", value, "/bin/true", cwd=tmp_path),
                 "--timeout", value)


def test_compare_runs_killed_at_the_timeout_are_not_agreement(tmp_path):
    """Two runs that both ran past --timeout agree on nothing: exit 1, said so, and in
    --json ``same`` is false and ``timed_out`` true."""
    p = _cli("compare", "--timeout", "0.5", "/bin/sh", "-c", "sleep 30", cwd=tmp_path)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "NOT COMPARED" in p.stdout and "same:" not in p.stdout
    p = _cli("compare", "--json", "--timeout", "0.5", "/bin/sh", "-c", "sleep 30",
             cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    data = json.loads(p.stdout)
    assert data["same"] is False and data["timed_out"] is True
    assert data["reference"]["status"] == data["offload_shim"]["status"] == "timeout"


@pytest.mark.parametrize("sig", INTERRUPTS)
def test_compare_leaves_nothing(sig, prog):
    """The reference run is the program under the real libomptarget 16, whose x86_64
    plugins leave ``/tmp/tmpfile_*`` image copies (and, killed, its libomp segment):
    removed, whatever ends the command."""
    when = _both(_started_children(2), _after(0.3))
    w = Watch([*CLI, "compare", prog], interrupt=(sig, when) if sig else None)
    res = w.run()
    _assert_clean(w, res, finished_rc=(0, 1))


# -- the Python API: one set of argument types ---------------------------------------------

@pytest.fixture
def dev():
    from offload_shim.hostplugin import bundled_plugin_path
    rt = osh.Runtime([osh.load_plugin(bundled_plugin_path())])
    rt.register_image(osh.OffloadImage.sample())
    yield rt.devices[0]
    rt.close()


@pytest.mark.parametrize("bad", [float, str, lambda p: [p], lambda p: True])
def test_free_of_a_pointer_that_is_not_an_int_is_refused(dev, bad):
    """A float (or a numpy float) equal to a live pointer found the block in the pool's
    table and was cached as the key: the block came back out of alloc as a float and
    ctypes refused it at close.  Now a TypeError, and the block stays live."""
    a = dev.alloc(64)
    with pytest.raises(TypeError, match="device pointer must be an int"):   # Device.free
        dev.free(bad(a))
    with pytest.raises(TypeError, match="ptr must be an int"):      # the memory manager's
        dev.free_many([bad(a)])
    assert dev.allocations[0] == 1
    dev.free(a)
    b = dev.alloc(64)                 # the cached block comes back as an int
    assert type(b) is int
    dev.free(b)


def test_free_takes_any_integer_type(dev):
    np = pytest.importorskip("numpy")
    a = dev.alloc(64)
    dev.free(np.uint64(a))
    b = dev.alloc(64)
    assert b == a and type(b) is int
    dev.free(b)
    with pytest.raises(osh.UnknownPointerError):
        dev.free(np.int64(b))


def test_memory_manager_free_normalises_the_pointer():
    from offload_shim.memory import MemoryManager
    freed = []
    mm = MemoryManager(lambda n: 4096 * (len(freed) + 1), freed.append)
    p = mm.allocate(64)
    with pytest.raises(TypeError):
        mm.free(float(p))
    mm.free(p)
    mm.drain()
    assert all(type(x) is int for x in freed)


def test_translate_takes_int_host_addresses(dev):
    dev.alloc(8)                       # initialises: the image is loaded and mapped
    img = dev.loaded_images[0]
    host = img.host_address("osh_scale")
    tgt = dev.translate(host)
    assert type(tgt) is int
    with pytest.raises(TypeError, match="host address must be an int, not float"):
        dev.translate(float(host))
    with pytest.raises(TypeError, match="not str"):
        dev.translate(str(host))


@pytest.mark.parametrize("value, exc", [("5", TypeError), (True, TypeError),
                                        (0, ValueError), (float("nan"), ValueError),
                                        (float("inf"), ValueError), (-1, ValueError)])
def test_load_plugin_timeout_types(value, exc):
    from offload_shim.safety.children import check_timeout
    with pytest.raises(exc, match="timeout"):
        check_timeout(value)
    # the public entry point refuses it before any child starts (a library not yet loaded)
    with pytest.raises(exc, match="timeout"):
        osh.load_plugin("/lib/x86_64-linux-gnu/libz.so.1", timeout=value)


@pytest.mark.parametrize("kind", [str, os.fsencode, pathlib.Path,
                                  lambda p: bytearray(os.fsencode(p))])
def test_image_from_file_takes_the_path_types_of_load_plugin(kind):
    from offload_shim.hostplugin import sample_image_path
    path = sample_image_path()
    img = osh.OffloadImage.from_file(kind(str(path)))
    assert img.data == osh.OffloadImage.sample().data
    assert img.name == os.path.basename(str(path))


def test_image_from_file_refuses_other_types():
    with pytest.raises(TypeError, match="image path must be str, bytes or os.PathLike, not int"):
        osh.OffloadImage.from_file(3)


# -- the plugin layer: no data, image or launch call on a device it has not initialised ---

_RAW_CALLS = r"""
import json, sys
import offload_shim as osh
path, abi = sys.argv[1], (sys.argv[2] or None)
p = osh.load_plugin(path, abi=abi)
calls = {
    "alloc": lambda d: p.alloc(d, 64),
    "free": lambda d: p.free(d, 4096),
    "submit": lambda d: p.submit(d, 4096, 4096, 8),
    "retrieve": lambda d: p.retrieve(d, 4096, 4096, 8),
    "launch": lambda d: p.launch(d, 4096, [1]),
    "load_image": lambda d: p.load_image(d, osh.OffloadImage.sample()),
    "lock": lambda d: p.lock(d, 4096, 8),
    "print_device_info": lambda d: p.print_device_info(d),
}
def run(stage, dev):
    for name, call in calls.items():
        try:
            call(dev)
            out = "reached the plugin"
        except Exception as exc:
            out = type(exc).__name__
        print(json.dumps([stage, dev, name, out]), flush=True)
run("before init_plugin", 0)
rt = osh.Runtime([p])
n = len(rt.devices)                       # init_plugin + number_of_devices
run("index out of range", n + 5)
if n:
    run("device never initialised", 0)
    rt.devices[0].init()
    rt.devices[0].deinit()
    run("device deinitialised", 0)
rt.close()
run("after close", 0)
print("DONE", flush=True)
"""


@pytest.mark.parametrize("path, abi", [
    pytest.param("NEXTGEN16", None, id="llvm16-nextgen"),
    pytest.param("CLASSIC16", None, id="llvm16-classic"),
    pytest.param("NVPTX12", None, id="gcc12-nvptx-no-device"),
    pytest.param("bundled", "llvm", id="bundled-llvm"),
    pytest.param("bundled", "gomp", id="bundled-gomp"),
    pytest.param("bundled", "liboffload", id="bundled-liboffload"),
])
def test_plugin_calls_on_a_device_not_initialised_are_refused(path, abi):
    """The LLVM 16 nextgen plugins dereference a device that was never initialised
    (data_alloc, data_delete, data_submit, load_binary, print_device_info: SIGSEGV), and
    GCC's nvptx plugin one it does not have; libomptarget never makes these calls.  The
    plugin layer refuses each (LifecycleError, ValueError for an index out of range)
    before the plugin sees it -- in a child process, as the calls would kill it.  One
    guard for the three families (Plugin._ready), liboffload's ol* view included."""
    import conftest
    from offload_shim.hostplugin import bundled_plugin_path
    real = str(bundled_plugin_path() if path == "bundled" else getattr(conftest, path))
    if not os.path.exists(real):
        pytest.skip(f"{real} not installed")
    proc = subprocess.run([sys.executable, "-P", "-c", _RAW_CALLS, real, abi or ""],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "DONE" in proc.stdout, (proc.returncode,
                                                            proc.stdout[-3000:],
                                                            proc.stderr[-3000:])
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("[")]
    assert rows
    for stage, dev, name, out in rows:
        want = "ValueError" if stage == "index out of range" else "LifecycleError"
        assert out == want, (stage, dev, name, out)


@pytest.mark.parametrize("kind", [str, os.fsencode, pathlib.Path])
def test_discover_takes_one_path_as_one_path(kind, tmp_path, monkeypatch):
    """``Runtime.discover("/path/plugin.so")`` iterated the characters: each one was tried
    as a file in the current directory (a file named ``o`` there was loaded)."""
    from offload_shim.hostplugin import bundled_plugin_path
    (tmp_path / "o").write_bytes(b"\x7fELF")        # a 1-letter file that must not be tried
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OFFLOAD_SHIM_PLUGINS", raising=False)
    path = str(bundled_plugin_path())
    with osh.Runtime.discover(kind(path), system=False, bundled=False) as rt:
        assert rt.load_errors == []
        assert [p.path for p in rt.plugins] == [os.path.realpath(path)]
    with osh.Runtime.discover(kind("/nonexistent/o"), system=False, bundled=False) as rt:
        assert [p for p, _ in rt.load_errors] in (["/nonexistent/o"], [b"/nonexistent/o"])
        assert rt.plugins == []


def test_runtime_takes_one_plugin_object():
    from offload_shim.hostplugin import bundled_plugin_path
    p = osh.load_plugin(bundled_plugin_path())
    with osh.Runtime(p) as rt:
        assert rt.plugins == [p]


def test_compare_timeout_holds_when_a_grandchild_keeps_the_output_open(tmp_path):
    """A program that leaves a process of another session behind holding its stdout:
    the wait for the output ended only when that process did (here 300 s).  Now the
    run is killed at --timeout, the stray is killed too, and the command ends."""
    import time
    token = f"{300 + os.getpid() % 1000 / 1000:.3f}"          # this test's own sleep
    t0 = time.monotonic()
    p = _cli("compare", "--json", "--timeout", "1", "/bin/sh", "-c",
             f"setsid sleep {token} & echo hi", cwd=tmp_path)
    took = time.monotonic() - t0
    assert p.returncode == 1, (p.stdout, p.stderr)
    data = json.loads(p.stdout)
    assert data["timed_out"] is True and data["same"] is False
    assert took < 90, took
    left = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if f.read().split(b"\0")[:2] == [b"sleep", token.encode()]:
                        left.append(int(d))
            except OSError:
                pass
    assert left == [], "the grandchild holding the output was left running"
