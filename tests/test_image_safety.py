"""Corrupt images never reach a plugin's dlopen (findings of a fuzzing run).

Two layers: structural checks in Python (offload_shim.elf) and a test dlopen
in a child process at registration (offload_shim.safety.isolation.verify_image).
The fuzz loop runs in a child process, so a crash fails the test instead of
killing pytest.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import offload_shim as osh
from offload_shim import elf
from offload_shim import hostplugin
from offload_shim.safety import isolation

import elf_mutants
from helpers import run_child

TESTS = str(Path(__file__).resolve().parent)


@pytest.fixture(scope="module")
def sample_bytes(sample_path) -> bytes:
    return Path(sample_path).read_bytes()


def _entries():
    return osh.OffloadImage.sample().entries


@pytest.mark.parametrize("which, words", [
    ("rela_offset_wild", "r_offset 0x7fff00000000 is not inside a writable"),
    ("rela_type_ff", "relocation type 255"),
    ("dynsym_zeroed", "undefined local symbol"),
    ("gnu_hash_bloom_3", "bloom filter size 3 is not a power of two"),
])
def test_reported_mutants_are_refused_in_python(sample_bytes, which, words):
    data = elf_mutants.deterministic(sample_bytes)[which]
    with pytest.raises(osh.InvalidImageError) as ei:
        osh.OffloadImage(data, _entries(), name=which)
    assert words in str(ei.value) and which in str(ei.value)


def test_reported_mutants_would_crash_the_loader(sample_bytes):
    """What the static checks save us from: each one kills a plain dlopen."""
    for which, data in elf_mutants.deterministic(sample_bytes).items():
        verdict = isolation._run_image_child(data)
        assert verdict is not None and ("crashes" in verdict or "abort" in verdict), \
            (which, verdict)


def test_loader_crash_becomes_invalid_image_error(sample_bytes, bundled_path):
    """A mutant the static checks let through but ld.so crashes on: the
    child-process dlopen at registration refuses it, naming the signal."""
    # GLOB_DAT of __gmon_start__ turned into PC32: a non-NULL garbage pointer _init calls
    secs = elf_mutants._sections(sample_bytes)
    rela, size = secs[".rela.dyn"]
    data = None
    for i in range(size // 24):
        if sample_bytes[rela + 24 * i + 8] == 6:
            data = elf_mutants.set_field(sample_bytes, rela + 24 * i + 8, 4,
                                         2 | (int.from_bytes(sample_bytes[rela + 24 * i + 12:
                                                                          rela + 24 * i + 16],
                                                             "little") << 32))
    assert data is not None
    elf.machine(data)                              # passes the static layer
    img = osh.OffloadImage(data, _entries(), name="pc32")
    assert img.needs_loader_check
    with osh.Runtime([bundled_path]) as rt:
        with pytest.raises(osh.InvalidImageError) as ei:
            rt.register_image(img)
        assert "crashes the dynamic loader (SIG" in str(ei.value)
        assert rt.images == []
        # the runtime still works
        good = osh.OffloadImage.sample()
        rt.register_image(good)
        rt.devices[0].init()
        rt.unregister_image(good)


def test_dlopen_error_is_passed_through(sample_bytes, bundled_path):
    data = elf_mutants.set_field(sample_bytes, 20, 4, 2)     # e_version
    img = osh.OffloadImage(data, _entries(), name="ver2")
    with osh.Runtime([bundled_path]) as rt:
        with pytest.raises(osh.InvalidImageError) as ei:
            rt.register_image(img)
    assert "ELF file version does not match" in str(ei.value)


def test_verdict_is_cached_by_content(sample_bytes):
    osh.OffloadImage.sample().verify_loadable()
    assert isolation.image_verdict_cached(sample_bytes)


def test_trusted_images_skip_the_child_check(sample_bytes):
    img = osh.OffloadImage(sample_bytes, _entries(), trusted=True)
    assert not img.needs_loader_check
    assert osh.OffloadImage(sample_bytes, _entries()).needs_loader_check


def test_system_libraries_pass_the_structural_checks():
    """No false positives on real shared objects (glibc, libLLVM, the plugins)."""
    import glob
    paths = sorted(glob.glob("/usr/lib/x86_64-linux-gnu/lib*.so*"))[:400] + \
        sorted(glob.glob("/usr/lib/llvm-16/lib/*.so*"))
    checked = 0
    for p in paths:
        try:
            if os.path.getsize(p) > 8 << 20:     # libLLVM & co: slow to parse, no news
                continue
            data = Path(p).read_bytes()
        except OSError:
            continue
        if data[:4] != b"\x7fELF":
            continue
        elf.machine(data)
        checked += 1
    assert checked > 10


_FUZZ = r"""
import json, random, sys
sys.path.insert(0, {tests!r})
import elf_mutants
import offload_shim as osh

data = open({sample!r}, "rb").read()
entries = osh.OffloadImage.sample().entries
rng = random.Random({seed})
views = {views!r}
outcomes = {{}}
for k in range({count}):
    desc, mutant = elf_mutants.mutant(data, rng)
    for path, abi in views:
        print("TRY", k, path, abi, desc, flush=True)
        try:
            img = osh.OffloadImage(mutant, entries, name=f"mutant{{k}}")
            with osh.Runtime([osh.load_plugin(path, abi=abi)]) as rt:
                rt.register_image(img)
                for dev in rt.devices:
                    dev.init()
            res = "ok"
        except osh.OffloadError as exc:
            res = type(exc).__name__
        except Exception as exc:
            res = "UNTYPED " + type(exc).__name__ + ": " + str(exc)
        outcomes[res] = outcomes.get(res, 0) + 1
        if res.startswith("UNTYPED"):
            print("UNTYPED", k, desc, res, flush=True)
print("RESULT", json.dumps(outcomes), flush=True)
"""


def _fuzz(views, seed, count=300):
    code = _FUZZ.format(tests=TESTS, sample=str(hostplugin.sample_image_path()),
                        seed=seed, views=views, count=count)
    proc = run_child(code, timeout=600)
    lines = proc.stdout.splitlines()
    last = [ln for ln in lines if ln.startswith("TRY")][-1:] or ["(none)"]
    assert proc.returncode == 0, (f"fuzz child died (rc {proc.returncode}) at {last[0]}\n"
                                  f"{proc.stderr[-2000:]}")
    untyped = [ln for ln in lines if ln.startswith("UNTYPED")]
    assert not untyped, untyped
    result = json.loads([ln for ln in lines if ln.startswith("RESULT")][0][7:])
    assert sum(result.values()) == count * len(views)
    assert result.get("InvalidImageError", 0) > 0 and result.get("ok", 0) > 0
    print(result)
    return result


def test_fuzz_bundled_plugin(bundled_path):
    _fuzz([(bundled_path, "llvm"), (bundled_path, "gomp")], seed=20240601)


def test_fuzz_llvm16_nextgen(nextgen16):
    _fuzz([(nextgen16, None)], seed=20240602)


def _cut(data: bytes, size: int) -> bytes:
    """``data`` (an ELF64 file) cut to ``size`` bytes, its section header table (at the
    end of the file, past the segments) dropped: e_shoff, e_shnum, e_shstrndx = 0."""
    import struct
    out = bytearray(data[:size])
    struct.pack_into("<Q", out, 0x28, 0)
    struct.pack_into("<HH", out, 0x3C, 0, 0)
    return bytes(out)


def test_a_segment_that_runs_past_the_end_of_the_file_is_refused(sample_bytes):
    """A real image cut inside its last loadable segment: the segment's offset is still
    in the file, its end is not; the image is refused before anything maps it (a loader
    would map bytes that are not there).  Cut exactly at the segment's end it passes the
    check."""
    import io
    from elftools.elf.elffile import ELFFile
    segs = [s for s in ELFFile(io.BytesIO(sample_bytes)).iter_segments()
            if s["p_type"] in ("PT_LOAD", "PT_TLS", "PT_DYNAMIC")]
    end = max(s["p_offset"] + s["p_filesz"] for s in segs)
    last = [s for s in segs if s["p_offset"] + s["p_filesz"] == end]
    assert last and all(s["p_offset"] < end - 1 for s in last)
    assert elf.machine(_cut(sample_bytes, end)) == "EM_X86_64"       # all of it there
    cut = _cut(sample_bytes, end - 1)                                 # one byte short
    with pytest.raises(osh.InvalidImageError, match="extends past the end of the file"):
        elf.machine(cut)
    with pytest.raises(osh.InvalidImageError, match="extends past the end of the file"):
        osh.OffloadImage(cut, _entries(), name="cut")
