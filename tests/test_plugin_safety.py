"""Loading a library that is not a plugin must not kill the interpreter.

Known host runtimes are refused by name before any dlopen; any other file is
first loaded in a child process (its constructors run at dlopen).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import subprocess
import sys
from pathlib import Path

import pytest

import offload_shim as osh
from offload_shim.safety import isolation
from offload_shim.plugins.loader import load_plugin

from conftest import LLVM16
from helpers import build_wrapped_host_plugin
from helpers import run_child

LIBOMPTARGET16 = LLVM16 / "libomptarget.so.16"


@pytest.fixture(scope="module")
def crashing_lib(tmp_path_factory) -> str:
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler")
    d = tmp_path_factory.mktemp("crashlib")
    src = d / "crash.c"
    src.write_text("__attribute__((constructor)) static void boom(void) {\n"
                   "  *(volatile int *)0 = 1;\n}\n"
                   "int __tgt_rtl_number_of_devices(void) { return 1; }\n")
    lib = d / "libomptarget.rtl.crash.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return str(lib)


@pytest.mark.parametrize("name, what", [
    ("libomptarget.so.16", "libomptarget, the host runtime"),
    ("libgomp.so.1", "libgomp"),
    ("libomp.so.5", "libomp"),
])
def test_host_runtimes_refused_by_name(tmp_path, name, what):
    f = tmp_path / name
    f.write_bytes(b"never opened")
    with pytest.raises(osh.NotAPluginError) as ei:
        load_plugin(f)
    assert what in str(ei.value) and "not a plugin" in str(ei.value)


def test_real_libomptarget_refused_without_loading_it():
    if not LIBOMPTARGET16.exists():
        pytest.skip("libomptarget.so.16 not installed")
    with pytest.raises(osh.NotAPluginError) as ei:
        load_plugin(LIBOMPTARGET16)
    assert "libomptarget, the host runtime, not a plugin (plugins are " \
           "libomptarget.rtl.*.so)" in str(ei.value)
    assert not isolation.mapped_in_process(os.path.realpath(LIBOMPTARGET16))


def test_libomptarget_info_lists_the_others():
    if not LIBOMPTARGET16.exists():
        pytest.skip("libomptarget.so.16 not installed")
    env = dict(os.environ, OFFLOAD_SHIM_PLUGINS=str(LIBOMPTARGET16))
    proc = subprocess.run([sys.executable, "-P", "-m", "offload_shim.cli", "info",
                           str(LIBOMPTARGET16), "--no-system", "--no-devices"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1, proc.stderr       # the file named is not usable
    assert "not usable: NotAPluginError" in proc.stdout
    assert "libosh_hostplugin.so" in proc.stdout


def test_crashing_constructor_is_a_typed_error(crashing_lib):
    with pytest.raises(osh.PluginDlopenError) as ei:
        load_plugin(crashing_lib)
    assert ei.value.dlerror == "SIGSEGV"
    assert "crashed while loading: SIGSEGV; its constructors run at dlopen" in str(ei.value)
    # the interpreter survived and did not map the library
    assert not isolation.mapped_in_process(os.path.realpath(crashing_lib))
    with pytest.raises(osh.PluginDlopenError):      # cached verdict
        load_plugin(crashing_lib)


def test_discover_skips_the_crashing_library(crashing_lib):
    with osh.Runtime.discover([crashing_lib], system=False) as rt:
        assert [p.name for p in rt.plugins] == ["osh_hostplugin"]
        assert rt.load_errors[0][0] == crashing_lib


def test_info_with_a_crashing_candidate_lists_the_bundled_plugin(crashing_lib):
    proc = subprocess.run([sys.executable, "-P", "-m", "offload_shim.cli", "info", "--json",
                           crashing_lib, "--no-system"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr       # the file named is not usable
    recs = json.loads(proc.stdout)
    bad = [r for r in recs if r["path"] == crashing_lib]
    assert bad and "SIGSEGV" in bad[0]["error"]
    assert any(r.get("bundled") for r in recs)


def test_probe_false_would_crash(crashing_lib):
    """Without the probe the constructor runs in-process (in a child here)."""
    proc = run_child(f"""
        from offload_shim.plugins.loader import load_plugin
        load_plugin({crashing_lib!r}, probe=False)
    """)
    assert proc.returncode < 0


def test_bundled_plugin_is_not_probed(bundled_path, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("probed")
    monkeypatch.setattr(isolation, "probe_plugin", boom)
    from offload_shim.plugins.loader import _needs_probe
    assert not _needs_probe(os.path.realpath(bundled_path), None)
    load_plugin(bundled_path)
    load_plugin(bundled_path, abi="gomp")


def test_empty_path():
    with pytest.raises(ValueError, match="empty plugin path"):
        load_plugin("")


def test_good_plugin_still_loads_after_probe(nextgen16):
    p = load_plugin(nextgen16)
    assert p.generation == "llvm16-nextgen"


# -- a constructor that depends on the environment (issue 28 item 6) ----------------------

@pytest.fixture(scope="module")
def moody_plugin(tmp_path_factory) -> str:
    """The bundled plugin's sources plus a constructor that aborts only when
    ``OSH_TEST_MOODY=1``."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler")
    native = Path(__file__).resolve().parent.parent / "native"
    d = tmp_path_factory.mktemp("moody")
    ctor = d / "moody.c"
    ctor.write_text("#include <stdlib.h>\n#include <string.h>\n"
                    "__attribute__((constructor)) static void moody(void) {\n"
                    "  const char *v = getenv(\"OSH_TEST_MOODY\");\n"
                    "  if (v && !strcmp(v, \"1\")) abort();\n}\n")
    lib = d / "libomptarget.rtl.moody.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-fvisibility=hidden", f"-I{native}",
                    str(native / "host_plugin.c"), str(native / "host_plugin_ol.c"), str(ctor),
                    "-o", str(lib), "-ldl", "-lpthread"], check=True, capture_output=True,
                   timeout=300)
    return str(lib)


_LOAD = ("import sys\n"
         "from offload_shim.plugins.loader import load_plugin\n"
         "from offload_shim.safety.isolation import plugin_known_good, remember_good_plugin\n"
         "print('known good' if plugin_known_good(sys.argv[1]) else 'unknown')\n"
         "try:\n"
         "    load_plugin(sys.argv[1])\n"
         "    remember_good_plugin(sys.argv[1])      # as offload-shim run does\n"
         "    print('loaded')\n"
         "except Exception as exc:\n"
         "    print(type(exc).__name__, exc)\n")


def test_a_verdict_is_not_reused_under_another_environment(moody_plugin, tmp_path):
    """The plugin verdicts kept across processes were keyed on the file alone: a
    plugin probed once was dlopen'ed unguarded afterwards, so a constructor that aborts
    only under some environment took the process down (exit 134) with no line.  Now the
    environment is part of the key: a second environment probes again (a typed error),
    the first still uses its verdict."""
    env = dict(os.environ, OFFLOAD_SHIM_CACHE_DIR=str(tmp_path / "verdicts"))
    env.pop("OFFLOAD_SHIM_NO_CACHE", None)
    env.pop("OSH_TEST_MOODY", None)

    def load(**extra):
        return subprocess.run([sys.executable, "-c", _LOAD, moody_plugin],
                              capture_output=True, text=True, timeout=120,
                              env=dict(env, **extra))

    first = load()
    assert first.returncode == 0 and first.stdout.split("\n")[:2] == ["unknown", "loaded"]
    again = load()
    assert again.stdout.split("\n")[:2] == ["known good", "loaded"], again.stdout
    moody = load(OSH_TEST_MOODY="1")
    assert moody.returncode == 0, (moody.returncode, moody.stderr[-2000:])
    assert moody.stdout.startswith("unknown\nPluginDlopenError"), moody.stdout
    assert "SIGABRT" in moody.stdout
    # the same shell a command later (volatile variables differ): still known good
    later = load(_="/usr/bin/env", OLDPWD="/", SHLVL="7", PYTEST_CURRENT_TEST="x")
    assert later.stdout.split("\n")[:2] == ["known good", "loaded"], later.stdout


def test_run_probes_a_plugin_again_under_another_environment(moody_plugin, tmp_path):
    """``offload-shim run --plugin`` skips its test load of a plugin known good; under an
    environment where its constructor aborts, that is one line and exit status 2, not the
    program dying of SIGABRT."""
    env = dict(os.environ, OFFLOAD_SHIM_CACHE_DIR=str(tmp_path / "verdicts"))
    env.pop("OFFLOAD_SHIM_NO_CACHE", None)
    env.pop("OSH_TEST_MOODY", None)
    cmd = [sys.executable, "-P", "-m", "offload_shim.cli", "run", "--plugin", moody_plugin,
           "/bin/true"]
    ok = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                         env=dict(env, OSH_TEST_MOODY="1"))
    assert bad.returncode == 2, (bad.returncode, bad.stderr)
    assert "SIGABRT" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


@pytest.fixture(scope="module")
def hanging_plugin(tmp_path_factory) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler")
    d = tmp_path_factory.mktemp("hang")
    src = d / "hang.c"
    src.write_text("#include <unistd.h>\n"
                   "__attribute__((constructor)) static void hang(void) { for (;;) pause(); }\n"
                   "int __tgt_rtl_number_of_devices(void) { return 1; }\n")
    lib = d / "libomptarget.rtl.hang.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return str(lib)


def _children_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig,rc,word", [(signal.SIGTERM, 143, "terminated"),
                                         (signal.SIGINT, 130, "interrupted"),
                                         (signal.SIGHUP, 143, "terminated")])
def test_run_stopped_while_probing_a_plugin_leaves_nothing(hanging_plugin, tmp_path, sig, rc,
                                                            word):
    """A signal to ``offload-shim run --plugin hang.so`` while the plugin's probe child
    hangs in its constructor (before the program starts): the probe child is stopped,
    its private folder removed (a private TMPDIR here, so only this run's leftovers are
    looked at), one line, 143 / 130."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), OFFLOAD_SHIM_CACHE_DIR=str(tmp_path / "v"))
    p = subprocess.Popen([sys.executable, "-P", "-m", "offload_shim.cli", "run", "--plugin",
                          hanging_plugin, "/bin/true"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        kids = []
        while not kids and time.monotonic() < deadline:
            kids = _children_of(p.pid)
            time.sleep(0.05)
        assert kids, "no probe child"
        assert any(x.name.startswith("osh_child_") for x in tmp.iterdir())
        time.sleep(0.5)
        os.kill(p.pid, sig)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == rc, err
    assert err == f"offload-shim: {word}\n"
    assert not [k for k in kids if _alive(k)], "the probe child was left running"
    assert list(tmp.iterdir()) == []


def test_interrupt_landing_inside_popen_leaves_no_child(monkeypatch):
    """Ctrl-C arriving after the fork but before ``Popen`` returns (a window of the
    start of every child): the child is known, stopped and reaped, and the interrupt
    is raised afterwards."""
    import subprocess as sp
    from offload_shim.safety import children
    real = sp.Popen
    started = []

    class Interrupted(real):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            started.append(self.pid)
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):          # Python code: a handler runs here
                pass

    monkeypatch.setattr(sp, "Popen", Interrupted)
    with pytest.raises(KeyboardInterrupt):
        children.run_child(["sleep", "30"])
    assert started and not _alive(started[0]), "the child was left running"


# -- info: each plugin's calls in a child process (issue 28 item 6) --------------------

def _bundled_with(tmp_path, entry: str, proto: str, body: str) -> str:
    """The bundled plugin's sources with ``__tgt_rtl_<entry>`` replaced by ``body``."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler")
    native = Path(__file__).resolve().parent.parent / "native"
    wrap = tmp_path / "wrap.c"
    wrap.write_text("#include <signal.h>\n#include <stdint.h>\n#include <stdlib.h>\n"
                    "#include <unistd.h>\n"
                    f"__attribute__((visibility(\"default\"))) {proto} {{ {body} }}\n")
    objs = []
    for src, extra in (("host_plugin.c", [f"-D__tgt_rtl_{entry}=osh_replaced_{entry}"]),
                       ("host_plugin_ol.c", [])):
        obj = tmp_path / (src + ".o")
        subprocess.run([cc, "-c", "-fPIC", "-O1", "-fvisibility=hidden", f"-I{native}", *extra,
                        str(native / src), "-o", str(obj)], check=True, capture_output=True,
                       timeout=300)
        objs.append(str(obj))
    lib = tmp_path / f"libomptarget.rtl.{entry}.so"
    subprocess.run([cc, "-shared", "-fPIC", *objs, str(wrap), "-o", str(lib), "-ldl",
                    "-lpthread"], check=True, capture_output=True, timeout=300)
    return str(lib)


def _info(*args, env_extra=None, **kw):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.Popen([sys.executable, "-P", "-m", "offload_shim.cli", "info", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, **kw)


def test_info_lists_the_others_when_a_plugin_crashes_in_number_of_devices(tmp_path):
    """``info`` called ``init_plugin``/``number_of_devices`` in its own process: a plugin
    crashing there killed the whole listing.  Now its row says so and the bundled
    plugin is still listed; the plugin named on the command line is not usable: 1."""
    bad = _bundled_with(tmp_path, "number_of_devices", "int32_t __tgt_rtl_number_of_devices(void)",
                        "raise(SIGSEGV); return 0;")
    p = _info(bad, "--no-system")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 1, (out, err)
    assert f"{bad}  [explicit]\n    not usable: the plugin ended the process (SIGSEGV)" in out, out
    assert "libosh_hostplugin.so  [bundled]\n    abi=llvm" in out, out  # still listed
    assert err.startswith(f"offload-shim: error: {bad}: not usable: ") and "SIGSEGV" in err


def test_info_ends_at_once_on_sigterm_during_a_plugin_call(tmp_path):
    """SIGTERM (and Ctrl-C) were ignored while ``info`` was inside a plugin call; the
    call is in a child now, the command waits in Python: 143 at once, the child gone."""
    hang = _bundled_with(tmp_path, "number_of_devices",
                         "int32_t __tgt_rtl_number_of_devices(void)", "for (;;) pause();")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = _info(hang, "--no-system", "--timeout", "120", env_extra={"TMPDIR": str(tmp)})
    try:
        deadline = time.monotonic() + 60
        grand = []
        while not grand and time.monotonic() < deadline:   # info -> row child (-> probe)
            grand = _children_of(p.pid)
            time.sleep(0.1)
        assert grand
        time.sleep(3)                       # the row child is inside number_of_devices
        t0 = time.monotonic()
        os.kill(p.pid, signal.SIGTERM)
        out, err = p.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 143 and "terminated" in err, (p.returncode, err)
    assert took < 15, took
    assert not [k for k in grand if _alive(k)]
    assert list(tmp.iterdir()) == []


def test_demo_and_check_parents_never_load_the_plugin(tmp_path):
    """A plugin whose destructor crashes: ``demo``'s and ``check``'s own exit status is
    theirs (1: the plugin's rows say what happened), never the plugin's SIGSEGV -- the
    parents read the plugin's views in a child and never load it themselves."""
    lib = build_wrapped_host_plugin(
        tmp_path, "libomptarget.rtl.dtor.so",
        "#include <signal.h>\n"
        "__attribute__((destructor)) static void bye(void) { raise(SIGSEGV); }\n")
    base = [sys.executable, "-P", "-m", "offload_shim.cli"]
    demo = subprocess.run([*base, "demo", "--no-system", str(lib)], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)
    assert demo.returncode == 1, (demo.returncode, demo.stdout[-2000:], demo.stderr[-2000:])
    assert "crashed (SIGSEGV)" in demo.stdout
    check = subprocess.run([*base, "check", str(lib), "--abi", "llvm", "--max-examples", "2",
                            "--steps", "3", "--json"], capture_output=True, text=True,
                           timeout=600, cwd=tmp_path)    # its trace goes there, not tests/
    assert check.returncode == 1, (check.returncode, check.stderr[-2000:])
    kinds = {(f["kind"], f.get("signal")) for f in json.loads(check.stdout)["findings"]}
    assert kinds == {("crash", "SIGSEGV")}, kinds
