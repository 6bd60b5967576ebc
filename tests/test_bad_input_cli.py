"""Bad input gets a clear, typed error, and on the command line a one-line message and
a non-zero exit status, never a Python traceback (findings of a new-user test).

Every command runs in a child process (``python -P -m offload_shim.cli``) from a
scratch directory, so the installed package is what is tested.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from offload_shim.errors import InvalidImageError, MissingEntryPointError, OffloadError
from offload_shim.memory.manager import THRESHOLD_ENV, read_threshold_env


def _cli(*args, cwd, env_extra=None, timeout=120):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-P", "-m", "offload_shim.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def _one_line_error(proc, *needles, rc=2):
    """Exit status ``rc``, stderr exactly one ``offload-shim: error: ...`` line holding
    every needle, no traceback."""
    err = proc.stderr
    assert proc.returncode == rc, (proc.returncode, proc.stdout, err)
    assert "Traceback" not in err and "Traceback" not in proc.stdout, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("offload-shim: error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def sample_bytes() -> bytes:
    from offload_shim.hostplugin import sample_image_path
    try:
        return sample_image_path().read_bytes()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def _corrupt_images(src: bytes) -> dict[str, bytes]:
    """ELF files that are ELF (magic, header) but corrupt, from the sample image."""
    shoff, = struct.unpack_from("<Q", src, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", src, 0x3A)
    out = {"truncated_half": src[:len(src) // 2], "truncated_header": src[:20],
           "magic_only": src[:4], "truncated_section_table": src[:shoff + 10]}
    b = bytearray(src)
    struct.pack_into("<Q", b, 0x28, 1 << 62)                      # e_shoff huge
    out["shoff_huge"] = bytes(b)
    b = bytearray(src)
    struct.pack_into("<Q", b, 0x28, (1 << 64) - 1)
    out["shoff_max"] = bytes(b)
    b = bytearray(src)
    struct.pack_into("<H", b, 0x3A, 7)                            # e_shentsize
    out["shentsize_bad"] = bytes(b)
    b = bytearray(src)
    struct.pack_into("<H", b, 0x3C, 0xFFFF)                       # e_shnum
    out["shnum_huge"] = bytes(b)
    b = bytearray(src)
    for i in range(shoff, len(b)):                                # every header byte flipped
        b[i] ^= 0xA5
    out["section_headers_flipped"] = bytes(b)
    b = bytearray(src)
    for k in range(shnum):                                        # sh_offset huge
        struct.pack_into("<Q", b, shoff + k * shentsize + 0x18, (1 << 63) + k)
    out["sh_offset_huge"] = bytes(b)
    b = bytearray(src)
    for k in range(1, shnum):                                     # SHF_COMPRESSED, no header
        o = shoff + k * shentsize + 8
        fl, = struct.unpack_from("<Q", b, o)
        struct.pack_into("<Q", b, o, fl | 0x800)
    out["compressed"] = bytes(b)
    return out


# -- 1. info --image ----------------------------------------------------------------------

def test_info_image_missing_file(tmp_path):
    line = _one_line_error(_cli("info", "--image", tmp_path / "nope.so", cwd=tmp_path),
                           "nope.so")
    assert "No such file" in line


def test_info_image_directory(tmp_path):
    line = _one_line_error(_cli("info", "--image", tmp_path, cwd=tmp_path), str(tmp_path))
    assert "directory" in line.lower()


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_info_image_not_a_regular_file(tmp_path, kind):
    """/dev/zero would be read for ever (memory without bound), a pipe would block:
    both refused in one line before anything is read."""
    if kind == "device":
        path = "/dev/zero"
    else:
        path = tmp_path / "pipe"
        os.mkfifo(path)
    line = _one_line_error(_cli("info", "--image", path, cwd=tmp_path, timeout=60),
                           "not a regular file")
    assert str(path) in line
    import offload_shim as osh
    with pytest.raises(InvalidImageError, match="not a regular file"):
        osh.OffloadImage.from_file(path)


@pytest.mark.parametrize("content", [b"", b"hello world\n", b"\x7fEL", b"MZ" + b"\0" * 200])
def test_info_image_not_elf(tmp_path, content):
    f = tmp_path / "notelf"
    f.write_bytes(content)
    line = _one_line_error(_cli("info", "--image", f, cwd=tmp_path), "not an ELF file")
    assert "corrupt" not in line
    with pytest.raises(InvalidImageError, match="not an ELF file"):
        from offload_shim.elf.imageinfo import describe
        describe(f)


def test_info_image_corrupt_elf(tmp_path, sample_bytes):
    """Each corrupt image: InvalidImageError "corrupt ELF file" from describe (never a
    pyelftools / struct / OverflowError, never "not an ELF file"), and a one-line CLI
    error, exit 2."""
    from offload_shim.elf.imageinfo import describe
    cases = _corrupt_images(sample_bytes)
    for name, data in cases.items():
        f = tmp_path / f"{name}.so"
        f.write_bytes(data)
        try:
            describe(f)
        except InvalidImageError as exc:
            assert "corrupt ELF file" in str(exc) and "not an ELF" not in str(exc), (name, exc)
            assert str(f) in str(exc)
        else:
            pytest.fail(f"{name}: describe() accepted a corrupt file")
    for name in ("truncated_half", "shoff_huge", "sh_offset_huge", "compressed",
                 "section_headers_flipped", "magic_only"):
        _one_line_error(_cli("info", "--image", tmp_path / f"{name}.so", cwd=tmp_path),
                        "corrupt ELF file", f"{name}.so")


def test_describe_fuzzed_elf_only_raises_invalid_image(tmp_path, sample_bytes):
    """Random byte changes anywhere: describe() succeeds or raises InvalidImageError."""
    import random
    from offload_shim.elf.imageinfo import describe
    shoff, = struct.unpack_from("<Q", sample_bytes, 0x28)
    f = tmp_path / "fuzz.so"
    for seed in range(120):
        r = random.Random(seed)
        b = bytearray(sample_bytes)
        lo = shoff if seed % 2 else 4          # odd seeds: the section header table only
        for _ in range(30):
            b[r.randrange(lo, len(b))] = r.randrange(256)
        f.write_bytes(bytes(b))
        try:
            describe(f)
        except InvalidImageError as exc:
            assert "corrupt ELF file" in str(exc), (seed, exc)


def test_info_image_good_file_still_works(tmp_path, sample_bytes):
    f = tmp_path / "good.so"
    f.write_bytes(sample_bytes)
    proc = _cli("info", "--image", f, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "vec_add" in proc.stdout


# -- 2. run-library -------------------------------------------------------------------------

LIBM = Path("/lib/x86_64-linux-gnu/libm.so.6")


def test_run_library_missing(tmp_path, bundled_path):
    _one_line_error(_cli("run-library", "--bundled", "--library", tmp_path / "nope.so",
                         cwd=tmp_path), "nope.so", "no such")


def test_run_library_not_elf(tmp_path, bundled_path):
    f = tmp_path / "text.so"
    f.write_text("not a library\n")
    _one_line_error(_cli("run-library", "--bundled", "--library", f, cwd=tmp_path),
                    "text.so", "cannot load")


def test_run_library_directory(tmp_path, bundled_path):
    _one_line_error(_cli("run-library", "--bundled", "--library", tmp_path, cwd=tmp_path),
                    "directory")


def test_run_library_empty_path(tmp_path, bundled_path):
    """``--library ""``: no such file (it resolved to the working directory: ": is a
    directory", after a probe child had dlopened that directory)."""
    line = _one_line_error(_cli("run-library", "--bundled", "--library", "", "--call", "f",
                                cwd=tmp_path), "empty library path")
    assert "directory" not in line


def test_run_library_unknown_function(tmp_path, bundled_path):
    if not LIBM.exists():
        pytest.skip(f"{LIBM} missing")
    for extra in ((), ("--json",)):
        proc = _cli("run-library", "--bundled", "--library", LIBM, "--call", "no_such_fn",
                    *extra, cwd=tmp_path)
        _one_line_error(proc, "no_such_fn", "libm.so.6")
        assert proc.stdout == ""


def test_run_library_bad_plugin(tmp_path):
    _one_line_error(_cli("run-library", "--plugin", tmp_path / "typo.so", "--library", LIBM,
                         cwd=tmp_path), "--plugin", "typo.so")


def test_loaded_library_typed_errors(bundled_path):
    import offload_shim as osh
    if not LIBM.exists():
        pytest.skip(f"{LIBM} missing")
    with osh.Runtime([], bundled=True) as rt, osh.interpose(rt) as ip:
        with pytest.raises(FileNotFoundError, match="nope.so"):
            ip.load_library("/nonexistent/nope.so")
        lib = ip.load_library(LIBM)
        try:
            with pytest.raises(MissingEntryPointError) as ei:
                lib.function("no_such_fn")
            assert isinstance(ei.value, OffloadError)
            assert "no_such_fn" in str(ei.value) and "libm.so.6" in str(ei.value)
            assert ei.value.function == "no_such_fn"
            with pytest.raises(TypeError):
                lib.function(3)
        finally:
            ip.unload_library(lib)


# -- 3. run: --plugin checked before the program; embed failure under mandatory ---------------

def test_run_bad_plugin_does_not_run_the_program(tmp_path):
    marker = tmp_path / "ran"
    for env in ({}, {"OMP_TARGET_OFFLOAD": "mandatory"}):
        for bad in (tmp_path / "typo.so", tmp_path, LIBM):     # missing / directory / not a plugin
            proc = _cli("run", "--plugin", bad, "/usr/bin/touch", marker, cwd=tmp_path,
                        env_extra=env)
            _one_line_error(proc, "--plugin", str(bad))
            assert not marker.exists(), bad


def _omp_prog(tmp_path_factory):
    from test_interpose import _clang
    from offload_shim.cli.run import libpython_path
    clang = _clang()
    try:
        libpython_path()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    src = Path(__file__).resolve().parent.parent / "native" / "samples" / "omp_prog.c"
    exe = tmp_path_factory.mktemp("omp_prog_bad") / "omp_prog"
    cmd = [clang, "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-O1", str(src),
           "-Xoffload-linker", "-Bsymbolic", "-Wl,-rpath,/usr/lib/llvm-16/lib", "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        # the toolchain is there (checked above): the project's own sample must build
        pytest.fail(f"cannot build the sample: {proc.stderr[-2000:]}")
    return str(exe)


@pytest.fixture(scope="module")
def omp_prog(tmp_path_factory):
    return _omp_prog(tmp_path_factory)


def _embed_env(tmp_path, policy_env):
    """What ``offload-shim run --plugin typo.so`` would give the program, had the
    command not checked the plugin first (the embedded start then fails)."""
    from offload_shim.cli.run import run_environment
    env = run_environment(plugins=[str(tmp_path / "typo.so")])
    env.update(policy_env)
    return env


def test_embed_start_failure_is_fatal_under_mandatory(tmp_path, omp_prog):
    proc = subprocess.run([omp_prog], capture_output=True, text=True, timeout=120,
                          env=_embed_env(tmp_path, {"OMP_TARGET_OFFLOAD": "mandatory"}))
    assert proc.returncode != 0 and proc.returncode != 3, (proc.returncode, proc.stderr)
    assert "failure of target construct while offloading is mandatory" in proc.stderr
    assert "embedded runtime failed to start" in proc.stderr and "typo.so" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "on_device" not in proc.stdout          # never fell back to the host


@pytest.mark.parametrize("broken, tracebacks", [("plugin", 0), ("import", 1)])
def test_embed_start_failure_falls_back_otherwise(tmp_path, omp_prog, broken, tracebacks):
    """Default policy: one line, then libomptarget's no-device answers (host fallback).
    ``import``: the runtime's package cannot be imported (the boot's own traceback, once:
    the exit does not try the broken runtime again)."""
    make = _embed_env if broken == "plugin" else _unimportable_env
    proc = subprocess.run([omp_prog], capture_output=True, text=True, timeout=120,
                          env=make(tmp_path, {"OMP_TARGET_OFFLOAD": "default"}))
    assert proc.returncode == 3, proc.stderr
    assert "on_device 0" in proc.stdout
    assert proc.stderr.count("Traceback") == tracebacks, proc.stderr
    assert "embedded runtime failed to start" in proc.stderr
    assert "mandatory" not in proc.stderr


def _unimportable_env(tmp_path, policy_env):
    """What ``offload-shim run`` gives the program, with an ``offload_shim`` package
    ahead of the real one on the embedded interpreter's path that fails to import: the
    runtime's own code is broken or half-installed (a ``pip install`` of the package
    while programs start under ``run``)."""
    from offload_shim.cli.run import run_environment
    fake = tmp_path / "broken" / "offload_shim"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text("raise ImportError('offload_shim half-installed')\n")
    env = run_environment()
    env["OFFLOAD_SHIM_PYTHONPATH"] = str(fake.parent) + os.pathsep + env[
        "OFFLOAD_SHIM_PYTHONPATH"]
    env.update(policy_env)
    return env


@pytest.mark.parametrize("how", ["import", "libpython"])
def test_boot_failure_is_fatal_under_mandatory(tmp_path, omp_prog, how):
    """The embedded interpreter cannot import the runtime (or libpython cannot be
    loaded): under a mandatory policy the program ends as its libomptarget ends when
    offloading cannot happen.  It used to print one line and run every target region on
    the host with exit status 0 (a generated program under a campaign that reinstalled
    the package meanwhile: docs/fuzzing.md finding 6)."""
    env = _unimportable_env(tmp_path, {"OMP_TARGET_OFFLOAD": "MANDATORY"})
    if how == "libpython":
        env["OFFLOAD_SHIM_LIBPYTHON"] = str(tmp_path / "libpython-none.so")
    proc = subprocess.run([omp_prog], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == -signal.SIGABRT, (proc.returncode, proc.stderr)
    assert proc.stderr.rstrip().endswith(
        "Libomptarget fatal error 1: failure of target construct while offloading is "
        "mandatory"), proc.stderr
    assert "on_device" not in proc.stdout          # never fell back to the host
    # the line before the fatal message does not promise a run without a device
    assert "running without" not in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def gcc_prog(tmp_path_factory):
    """native/samples/omp_prog.c built by GCC 12 for the host alone (libgomp, no
    libomptarget mapped)."""
    import shutil
    gcc = shutil.which("gcc-12")
    if gcc is None:
        pytest.skip("gcc-12 missing")
    src = Path(__file__).resolve().parent.parent / "native" / "samples" / "omp_prog.c"
    exe = tmp_path_factory.mktemp("gcc_prog_bad") / "gcc_prog"
    proc = subprocess.run([gcc, "-fopenmp", "-foffload=disable", "-O1", str(src), "-o",
                           str(exe)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"cannot build the sample with gcc-12: {proc.stderr[-2000:]}")
    return str(exe)


@pytest.mark.parametrize("how", ["import", "libpython", "plugin"])
def test_boot_failure_of_a_gcc_program_leaves_the_policy_to_libgomp(tmp_path, gcc_prog,
                                                                      how):
    """A GCC-built program maps no libomptarget: when the embedded runtime cannot start,
    its GOMP_* entry points pass through to libgomp, which applies OMP_TARGET_OFFLOAD=
    mandatory itself (GCC 12 resolve_device: no device, device 0 is the initial device,
    the region runs on the host).  The run ends as the program does without offload-shim,
    with one line on stderr; it used to abort with libomptarget's fatal message."""
    policy = {"OMP_TARGET_OFFLOAD": "mandatory"}
    own = subprocess.run([gcc_prog], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **policy})
    env = (_embed_env if how == "plugin" else _unimportable_env)(tmp_path, policy)
    if how == "libpython":
        env["OFFLOAD_SHIM_LIBPYTHON"] = str(tmp_path / "libpython-none.so")
    proc = subprocess.run([gcc_prog], capture_output=True, text=True, timeout=120, env=env)
    assert (proc.returncode, proc.stdout) == (own.returncode, own.stdout), proc.stderr
    assert "fatal error" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("offload_shim:")]
    assert len(lines) == 1 and "running without" in lines[0], proc.stderr


def test_boot_failure_before_a_clang_library_is_loaded_is_fatal_at_its_registration(
        tmp_path, gcc_prog):
    """A Python host loads a GCC offload library (the boot starts and fails, no
    libomptarget mapped yet: libgomp's policy, the program goes on), then a clang one:
    under a mandatory policy its registration ends the program with libomptarget's fatal
    message instead of running its regions on the host with exit status 0."""
    from test_interpose import _clang
    src = Path(__file__).resolve().parent.parent / "native" / "samples" / "omp_regions.c"
    clang_lib, gcc_lib = tmp_path / "libclang_regions.so", tmp_path / "libgcc_regions.so"
    for cmd in ([_clang(), "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu",
                 "-Xoffload-linker", "-Bsymbolic", "-shared", "-fPIC", "-O1",
                 "-Wl,-Bsymbolic", str(src), "-o", str(clang_lib)],
                ["gcc-12", "-fopenmp", "-foffload=disable", "-shared", "-fPIC", "-O1",
                 str(src), "-o", str(gcc_lib)]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    host = textwrap.dedent("""
        import ctypes, sys
        for path in sys.argv[1:]:
            f = ctypes.CDLL(path).osh_region_on_device
            f.restype = ctypes.c_int64
            print(path, f(), flush=True)
    """)
    for policy, fatal in (("mandatory", True), ("default", False)):
        env = _unimportable_env(tmp_path, {"OMP_TARGET_OFFLOAD": policy})
        proc = subprocess.run([sys.executable, "-c", host, str(gcc_lib), str(clang_lib)],
                              capture_output=True, text=True, timeout=120, env=env)
        if fatal:
            assert proc.returncode == -signal.SIGABRT, (proc.returncode, proc.stderr)
            assert proc.stderr.rstrip().endswith("Libomptarget fatal error 1: failure of "
                                                 "target construct while offloading is "
                                                 "mandatory"), proc.stderr
            assert str(clang_lib) not in proc.stdout       # never ran on the host
        else:
            assert proc.returncode == 0, proc.stderr
            assert f"{clang_lib} 0" in proc.stdout
        assert f"{gcc_lib} 0" in proc.stdout               # the GCC library ran first


# -- 4. LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD: what std::stoul takes whole, else an error --------
# LLVM parses it with std::stoul, which skips leading blanks and takes a '+' sign; those are
# accepted (read "the way LLVM reads it").  A partial parse ("12abc"), a sign LLVM would wrap
# ("-1"), digit separators and the empty string are refused with a clear error.

@pytest.mark.parametrize("bad", ["-0", "-1", "1_000", "", "12abc", "0x10", "8 8"])
def test_threshold_env_strict(bad):
    with pytest.raises(ValueError) as ei:
        read_threshold_env({THRESHOLD_ENV: bad})
    assert THRESHOLD_ENV in str(ei.value) and repr(bad) in str(ei.value)


@pytest.mark.parametrize("bad,why", [("-1", "would wrap the sign"), ("", "would abort"),
                                     ("abc", "would abort"), ("12abc", "only its leading '12'"),
                                     ("0x10", "only its leading '0'"),
                                     (str(1 << 64), "more than 2**64 - 1"),
                                     (str(1 << 70), "out of range")])
def test_threshold_env_error_says_what_llvm_would_do(bad, why):
    """The message is true of LLVM 16's std::stoul (MemoryManager.h
    getSizeThresholdFromEnv): it aborts only on no digits or past 2**64 - 1."""
    with pytest.raises(ValueError, match=why.replace("*", r"\*")):
        read_threshold_env({THRESHOLD_ENV: bad})


@pytest.mark.parametrize("good,want", [("8", 8), ("0", 0), ("0008", 8), ("1048576", 1 << 20),
                                       (" 8", 8), ("+16", 16), ("\t8\n", 8),
                                       (str((1 << 63) - 1), (1 << 63) - 1),
                                       # std::stoul takes up to 2**64 - 1 (size_t); from
                                       # 2**63 - 1 up every size a plugin takes is pooled
                                       (str(1 << 63), (1 << 63) - 1),
                                       (str((1 << 64) - 1), (1 << 63) - 1)])
def test_threshold_env_digits(good, want):
    assert read_threshold_env({THRESHOLD_ENV: good}) == want


@pytest.mark.parametrize("value", [str(1 << 63), str((1 << 64) - 1)])
def test_threshold_beyond_int64_runs_as_under_libomptarget(tmp_path, omp_prog, value):
    """The real libomptarget 16 runs the sample with such a threshold (std::stoul
    takes it); ``offload-shim run`` runs it the same, on its devices."""
    env = dict(os.environ, **{THRESHOLD_ENV: value})
    real = subprocess.run([omp_prog], capture_output=True, text=True, timeout=120, env=env)
    report = tmp_path / "r.json"
    ours = subprocess.run([sys.executable, "-P", "-m", "offload_shim.cli", "run", "--report",
                           str(report), omp_prog], capture_output=True, text=True,
                          timeout=120, env=env)
    assert (ours.returncode, ours.stdout) == (real.returncode, real.stdout) == (3, real.stdout)
    assert ours.stderr == real.stderr == "", ours.stderr
    rep = json.loads(report.read_text())
    assert rep["initialised"] and rep["errors"] == [], rep


# -- 5. pytest plugin: --offload-plugin=bundled ------------------------------------------------

def test_pytest_plugin_accepts_bundled(tmp_path, bundled_path):
    (tmp_path / "test_mine.py").write_text(textwrap.dedent(f"""
        def test_path(offload_plugin_path):
            assert offload_plugin_path == {bundled_path!r}

        def test_runtime(offload_runtime):
            assert len(offload_runtime.devices) >= 1
    """))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--offload-plugin=bundled", str(tmp_path / "test_mine.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout


# -- 6. bundled plugin print_device_info: capacity text ----------------------------------------

def test_bundled_print_device_info_capacity(tmp_path, bundled_path):
    code = textwrap.dedent(f"""
        import json
        from offload_shim.cli import collect_info
        from offload_shim.hostplugin import HostPluginControl
        def infos():
            recs = collect_info([{bundled_path!r}], system=False, bundled=False)
            return [d.get("info", "") for r in recs if r.get("abi") == "llvm"
                    for d in r["devices"]]
        out = {{"unlimited": infos()}}
        HostPluginControl({bundled_path!r}).set_capacity(-1, 4096)
        out["limited"] = infos()
        print(json.dumps(out))
    """)
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["unlimited"] and out["limited"]
    for line in out["unlimited"]:
        assert "capacity unlimited," in line and "unlimited 0" not in line, line
    for line in out["limited"]:
        assert "capacity 4096 bytes," in line, line


# -- output paths: checked before the work, one line, exit 2 ----------------------------
@pytest.mark.parametrize("opt,value", [("--report", ""), ("--record", ""),
                                       ("--report", "{tmp}/no/such/dir/r.json"),
                                       ("--report", "{tmp}"),
                                       ("--report", "/proc/osh-report.json"),
                                       ("--record", "/proc/osh.trace")])
def test_run_output_path_refused_before_the_program(tmp_path, opt, value):
    marker = tmp_path / "ran"
    value = value.replace("{tmp}", str(tmp_path))
    proc = _cli("run", opt, value, "/usr/bin/touch", marker, cwd=tmp_path)
    _one_line_error(proc, opt)
    assert not marker.exists(), "the program ran although its report could not be written"


def test_run_output_path_check_leaves_nothing(tmp_path):
    report = tmp_path / "r.json"
    proc = _cli("run", "--report", report, "/bin/true", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "error" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["r.json"])


def test_fuzz_out_not_a_directory_is_refused_before_building(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("keep me\n")
    for bad in (f, "/proc/osh-fuzz-out", ""):
        proc = _cli("fuzz", "--programs", "1", "--out", bad, cwd=tmp_path, timeout=60)
        if "clang-16" in proc.stderr and "--out" not in proc.stderr:
            pytest.skip(proc.stderr.strip())
        _one_line_error(proc, "--out")
    assert f.read_text() == "keep me\n"


def test_check_trace_out_refused_before_the_run(tmp_path, bundled_path):
    proc = _cli("check", bundled_path, "--max-examples", "1", "--trace-out",
                tmp_path / "no" / "dir" / "t.trace", cwd=tmp_path)
    _one_line_error(proc, "--trace-out")


@pytest.mark.parametrize("action", ["info", "clear"])
def test_cache_dir_that_is_a_file(tmp_path, action):
    f = tmp_path / "not-a-dir"
    f.write_text("user data\n")
    proc = _cli("cache", action, cwd=tmp_path, env_extra={"OFFLOAD_SHIM_CACHE_DIR": str(f)})
    _one_line_error(proc, "not a directory")
    assert f.read_text() == "user data\n"


def test_compare_names_the_signal():
    from offload_shim.cli.compare import Outcome
    assert Outcome(-11, [], []).status_text == "-11 (killed by SIGSEGV)"
    assert Outcome(3, [], []).status_text == "3"
    assert Outcome("timeout", [], []).status_text == "timeout"
