"""The runtime version profiles (offload_shim/interposer/llvm/profile.py): one per libomptarget
release a program can link, chosen from what the registering code links, and the rules
computed from their fields.  The behaviour of each field against the real runtimes is
checked by the conformance programs (tests/test_conformance.py with clang-16,
tests/test_conformance_clang.py with clang-19 and clang-22, docs/conformance.md
"libomptarget releases"); here: the profiles themselves, their documentation, the
detection, and each rule on inputs whose answer follows from the upstream source."""

from __future__ import annotations

import ctypes
import inspect
import re
import subprocess
from pathlib import Path

import pytest

from clang_toolchains import CLANG16, CLANG19, CLANG22, COMPILERS, ROOT
from offload_shim.abi import clang as abi
from offload_shim.abi import interposer as abi_ip
from offload_shim.errors import OffloadError, UnknownLayoutError
from offload_shim.interposer.llvm import diag, rtl
from offload_shim.interposer.llvm import profile as prof
from offload_shim.interposer.llvm.profile import (LIBOMPTARGET_16, LIBOMPTARGET_19,
                                             LIBOMPTARGET_22, PROFILES, RuntimeProfile)

DOC = ROOT / "docs" / "conformance.md"
FIELDS = list(RuntimeProfile.__slots__)


def test_one_profile_per_release_every_field_documented():
    assert [p.major for p in PROFILES] == [16, 19, 22]
    assert [p.release for p in PROFILES] == ["16", "19.1", "22.1"]
    for name in FIELDS:
        doc = inspect.getdoc(getattr(RuntimeProfile, name))
        assert doc and len(doc) > 20, name
    # the behavioural fields name where upstream does it (a file, function or PR)
    for name in FIELDS[3:]:
        doc = RuntimeProfile.__slots__[name]
        assert re.search(r"\.(cpp|h)\b|PR #\d+|``[A-Za-z_]+::\w+``|nm -D", doc), name
    # the profiles differ where the documentation says the releases differ
    differ = {n for n in FIELDS if len({repr(getattr(p, n)) for p in PROFILES}) > 1}
    assert {"name", "devices_when_disabled", "policy_at_registration", "invalid_device",
            "args_before_device", "firstprivate_alignment", "use_device_fallback",
            "requires_from_entries", "any_entry_version", "debug_env"} <= differ


def test_profiles_are_immutable_and_complete():
    with pytest.raises(AttributeError):
        LIBOMPTARGET_16.name = "x"
    with pytest.raises(TypeError, match="missing"):
        RuntimeProfile(release="x")
    fields = {n: getattr(LIBOMPTARGET_22, n) for n in FIELDS}
    with pytest.raises(TypeError, match="unknown"):
        RuntimeProfile(**fields, bogus=1)
    assert RuntimeProfile(**fields) == LIBOMPTARGET_22
    assert LIBOMPTARGET_19 != LIBOMPTARGET_22


@pytest.mark.parametrize("major, release", [(16, "16"), (17, "16"), (18, "16"),
                                            (19, "19.1"), (21, "19.1"), (22, "22.1"),
                                            (23, "22.1")])
def test_profile_for(major, release):
    assert prof.profile_for(major).release == release


@pytest.mark.parametrize("bad", [15, 0, -1, "19", 19.0, True, None])
def test_profile_for_refuses_what_is_no_release(bad):
    with pytest.raises(ValueError):
        prof.profile_for(bad)


def test_table_in_docs_lists_every_field():
    """docs/conformance.md "libomptarget releases": one row per field of the profile
    (its values per release, the upstream source, the programs that check it)."""
    doc = DOC.read_text()
    section = doc[doc.index("# libomptarget releases"):]
    end = section.find("\n# ", 5)
    section = section if end < 0 else section[:end]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `(\w+)` \|", line)
        if m:
            rows[m.group(1)] = line
    assert set(rows) == set(FIELDS) - {"release", "major"}


# -- rules computed from the fields -----------------------------------------------------
def test_invalid_device_text():
    assert LIBOMPTARGET_19.invalid_device_text(17, 4) == \
        "Device number '17' out of range, only 4 devices available"
    assert LIBOMPTARGET_22.invalid_device_text(-5, 0) == \
        "\"invalid value\" device number '-5' out of range, only 0 devices available"
    with pytest.raises(ValueError):
        LIBOMPTARGET_16.invalid_device_text(17, 4)


def test_region_names():
    assert LIBOMPTARGET_16.region_name(0, True) == "Entering OpenMP data region"
    assert LIBOMPTARGET_16.region_name(2) == "Updating OpenMP data"
    assert LIBOMPTARGET_19.region_name(1) == "Exiting OpenMP data region with end_mapper"
    assert LIBOMPTARGET_22.region_name(0, True) == \
        "Entering OpenMP data region with being_nowait_mapper"
    with pytest.raises(KeyError):
        LIBOMPTARGET_22.region_name(3)


def test_firstprivate_packing_16():
    # Size + Size % 8 each: 3 -> 6, 13 -> 18, 12 -> 16
    assert LIBOMPTARGET_16.pack_firstprivate([(0x1000, 3), (0x2003, 13), (0x3004, 12)]) \
        == ([0, 6, 24], 40)


def test_firstprivate_packing_19_22():
    """addArg: the alignment left after an argument is the previous one, or the
    previous size modulo it; a host address aligned more than that (at most 16) gets
    Required - Start bytes of padding."""
    args = [(0x1000, 3), (0x2003, 13), (0x3004, 12), (0x400b, 5), (0x5010, 8)]
    # 3 at 0 (align 16); 13 at 3 (align 3 left, address aligned 1: none);
    # 12 after 1 left -> address aligned 4: 3 bytes, at 19 (align 4); 5 at 31 (align 4,
    # address aligned 1); 8 after 5 % 4 = 1 left, address aligned 16: 15 bytes, at 51
    for p in (LIBOMPTARGET_19, LIBOMPTARGET_22):
        assert p.pack_firstprivate(args) == ([0, 3, 19, 31, 51], 59)
    assert LIBOMPTARGET_19.pack_firstprivate([]) == ([], 0)


def test_requires_conflict():
    usm, none, ua, dyn = (prof.OMP_REQ_UNIFIED_SHARED_MEMORY, prof.OMP_REQ_NONE,
                          prof.OMP_REQ_UNIFIED_ADDRESS, prof.OMP_REQ_DYNAMIC_ALLOCATORS)
    assert LIBOMPTARGET_16.requires_conflict(usm, none) == \
        (1, "'#pragma omp requires unified_shared_memory' not used consistently!")
    assert LIBOMPTARGET_16.requires_conflict(usm, usm | dyn) is None   # 16 does not compare it
    assert LIBOMPTARGET_19.requires_conflict(usm, usm | dyn) == \
        (2, "'#pragma omp requires dynamic_allocators' not used consistently!")
    assert LIBOMPTARGET_22.requires_conflict(usm, usm | ua)[1].startswith(
        "'#pragma omp requires unified_address'")
    assert LIBOMPTARGET_22.requires_conflict(usm, usm) is None


def test_registrations_keep_the_first_requires_flags():
    regs = rtl.Registrations(runtime=None)
    regs.add_requirements(0x8, LIBOMPTARGET_19)
    regs.add_requirements(0x8, LIBOMPTARGET_19)
    with pytest.raises(rtl.RequiresConflict) as ei:
        regs.add_requirements(0x1, LIBOMPTARGET_19)
    assert isinstance(ei.value, OffloadError)
    assert (ei.value.number, regs.requires_flags) == (2, 0x8)
    assert "unified_shared_memory" in ei.value.text
    regs16 = rtl.Registrations(runtime=None)
    regs16.add_requirements(0x1)
    regs16.add_requirements(0x11)                  # dynamic_allocators: not compared in 16
    assert regs16.requires_flags == 0x1


def _v1(version: int) -> bytes:
    return __import__("struct").pack("<QHHIQQQQQ", 0, version, 1, 0, 0x1000, 0x2000, 0, 0, 0)


@pytest.mark.parametrize("version", [0, 2, 7])
def test_entry_versions_read_as_the_release_reads_them(version):
    with pytest.raises(UnknownLayoutError, match=f"Version {version}"):
        abi.detect_entry_layout(_v1(version))
    assert abi.detect_entry_layout(_v1(version), any_version=True) is abi.ENTRY_TY_V1
    assert LIBOMPTARGET_22.accepts_entry_version(version)
    assert not LIBOMPTARGET_16.accepts_entry_version(version)
    assert not LIBOMPTARGET_19.accepts_entry_version(version)
    assert all(p.accepts_entry_version(1) for p in PROFILES)


def test_select_plugins_reads_nextgen_variable_for_16_only(tmp_path):
    for name in ("libomptarget.rtl.x86_64.so", "libomptarget.rtl.x86_64.nextgen.so"):
        (tmp_path / name).write_bytes(b"")
    env = {"LIBOMPTARGET_NEXTGEN_PLUGINS": "0"}
    classic = [str(tmp_path / "libomptarget.rtl.x86_64.so")]
    nextgen = [str(tmp_path / "libomptarget.rtl.x86_64.nextgen.so")]
    assert rtl.select_plugins(tmp_path, env=env) == classic
    assert rtl.select_plugins(tmp_path, env=env, profile=LIBOMPTARGET_16) == classic
    assert rtl.select_plugins(tmp_path, env=env, profile=LIBOMPTARGET_19) == nextgen
    assert rtl.select_plugins(tmp_path, env=env, profile=LIBOMPTARGET_22) == nextgen


def test_diag_uses_the_profile(capsys):
    old = diag.profile()
    try:
        diag.set_profile(LIBOMPTARGET_22)
        diag.report("x")
        diag.set_profile(LIBOMPTARGET_16)
        diag.message("y")
        assert capsys.readouterr().err.splitlines() == ["omptarget error: x",
                                                        "Libomptarget message: y"]
        with pytest.raises(TypeError):
            diag.set_profile(22)
    finally:
        diag.set_profile(old)


def test_interposer_refuses_a_profile_that_is_not_one():
    from offload_shim.interposer.llvm.interface import Interposer
    with pytest.raises(TypeError, match="RuntimeProfile"):
        Interposer(runtime=None, profile="22")


@pytest.mark.parametrize("runtime", [None, "rt", object()])
def test_interpose_refuses_what_is_not_a_runtime(runtime):
    """interpose(x) for an x that is not a Runtime: a TypeError naming it, before
    anything is installed (it was an AttributeError from Runtime._attach_user) -- and
    a later interpose is not refused as 'another interposer is active'."""
    import offload_shim as osh
    with pytest.raises(TypeError, match="Runtime"):
        with osh.interpose(runtime):
            pass
    from offload_shim.interposer.llvm import interface
    assert interface._active is None


# -- detection: what the registering code links ----------------------------------------
def test_needed_of_an_address_no_object_holds():
    assert abi_ip.libomptarget_needed_by(0) is None
    buf = ctypes.create_string_buffer(64)             # heap memory: no object holds it
    assert abi_ip.libomptarget_needed_by(ctypes.addressof(buf)) is None


LIB_SRC = """
int osh_profile_probe(void) { int x = 1;
#pragma omp target map(tofrom: x)
  x += 1;
  return x; }
"""


@pytest.mark.parametrize("cc", COMPILERS, ids=[c.name for c in COMPILERS])
def test_detect_names_the_release_the_code_links(cc, tmp_path):
    """A library built by clang-N names libomptarget.so.N in DT_NEEDED: an address in
    it detects N's profile, whatever else is mapped (checked in a child: loading the
    library maps its libomptarget into the process for good)."""
    why = cc.missing()
    if why:
        pytest.skip(why)
    src = tmp_path / "probe.c"
    src.write_text(LIB_SRC)
    lib = cc.build(src, shared=True)
    code = ("import ctypes, sys\n"
            "from offload_shim.interposer.llvm import profile\n"
            "lib = ctypes.CDLL(sys.argv[1])\n"
            "addr = ctypes.cast(lib.osh_profile_probe, ctypes.c_void_p).value\n"
            "print(profile.detect(addr).release, profile.detect().release)\n")
    out = subprocess.run([__import__("sys").executable, "-c", code, str(lib)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    release = {16: "16", 19: "19.1", 22: "22.1"}[cc.version]
    assert out.stdout.split() == [release, release]


# -- entry points of each release --------------------------------------------------------
_LIBS = {16: Path("/usr/lib/llvm-16/lib/libomptarget.so.16"),
         19: CLANG19.runtime_lib / "libomptarget.so.19.1",
         22: CLANG22.runtime_lib / "libomptarget.so.22.1"}


def _exports(path: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True,
                         text=True, check=True).stdout
    names = {line.split()[-1].split("@")[0] for line in out.splitlines() if line.split()}
    return {n for n in names if not n.startswith("_Z") and n != "VERS1.0"}


@pytest.mark.parametrize("p", [LIBOMPTARGET_19, LIBOMPTARGET_22], ids=["19.1", "22.1"])
def test_entry_points_are_the_libraries(p):
    for major in (16, p.major):
        if not _LIBS[major].exists():
            pytest.skip(f"{_LIBS[major]} missing (scripts/setup.sh)")
    base, new = _exports(_LIBS[16]), _exports(_LIBS[p.major])
    assert p.new_entry_points == new - base
    assert p.dropped_entry_points == base - new


# -- the bugs of a release offload_shim does not reproduce --------------------------------
def test_fixed_upstream_bugs_are_described_and_tested():
    """Every id a profile lists is in FIXED_UPSTREAM with what is lost, the upstream fix
    (a PR, or the file and function) and a program of tests/programs/ that the
    conformance harness runs with a compiler of that release as a labelled, expected
    difference (conformance.FIXED_UPSTREAM); docs/conformance.md has a section for
    each."""
    import conformance as cf
    names = {p.name for p in cf.programs()}
    doc = DOC.read_text()
    section = doc[doc.index("# Fixed upstream: where offload_shim follows the fix"):]
    for bug, f in prof.FIXED_UPSTREAM.items():
        assert f.id == bug and len(f.what) > 40
        assert re.search(r"PR #\d+|\.cpp ", f.fix), f.fix
        assert f.program in names
        assert f"`{bug}`" in section and f.program in section
        assert f.label() == f"known: fixed upstream ({bug}: {f.fix})"
    for p in PROFILES:
        assert set(p.fixed_upstream) <= set(prof.FIXED_UPSTREAM)
        assert len(set(p.fixed_upstream)) == len(p.fixed_upstream)
        for bug in p.fixed_upstream:
            assert any(b == bug and v == p.major for (_n, v), b in cf.FIXED_UPSTREAM.items()), \
                (p.release, bug)
    for (name, version), bug in cf.FIXED_UPSTREAM.items():
        assert name in names and bug in prof.profile_for(version).fixed_upstream
        prog = next(q for q in cf.programs() if q.name == name)
        assert version in prog.compilers and prog.modes == ("exe",)
    assert LIBOMPTARGET_22.fixed_upstream == ()


def test_note_fixed_upstream_counts_only_the_releases_bugs():
    from offload_shim.interposer.llvm.mapping import DeviceMapper
    for p in PROFILES:
        dm = DeviceMapper(None, profile=lambda p=p: p)
        for bug in prof.FIXED_UPSTREAM:
            assert dm.note_fixed_upstream(bug) == (bug in p.fixed_upstream)
        dm.note_fixed_upstream("partial-struct-padding")
        assert dm.fixed_upstream == {b: 2 if b == "partial-struct-padding" else 1
                                     for b in p.fixed_upstream}


def test_padding_is_noticed_where_16_would_find_it_mapped():
    """MappingTable.in_padding: a range meeting the padding before a padded row (where
    libomptarget 16's row begins), and nothing else."""
    from offload_shim.interposer.llvm.maptable import MappingTable
    t = MappingTable()
    t.padded[0x1004] = 4                    # a row from 0x1004, padded by 4 bytes
    assert t.in_padding(0x1000, 4) and t.in_padding(0x1000, 0) and t.in_padding(0x1003, 1)
    assert t.in_padding(0xffe, 4)           # partly below: 16 refuses (extension)
    assert not t.in_padding(0x1004, 4) and not t.in_padding(0xffc, 4)
    assert not t.in_padding(0x1008, 0)
