"""The image checks (offload_shim.elf) accept every device image real compilers emit.

tests/data/images/ holds device images taken out of executables built by clang-16,
clang-19 and clang-22 for x86_64 host offloading (kernels or none, globals only, C++ with
constructors, ``declare target link``, -O0/-O3/-g) and a GCC 12 nvptx-offload executable;
``make_corpus.sh`` regenerates them.  Corrupt variants of them still get a typed error.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from offload_shim import elf
from offload_shim.core.images import OffloadImage
from offload_shim.errors import InvalidImageError

CORPUS = Path(__file__).resolve().parent / "data" / "images"
IMAGES = sorted(CORPUS.glob("clang*.so"))


def test_corpus_covers_three_compilers_and_every_shape():
    names = {p.stem for p in IMAGES}
    for cc in ("clang16", "clang19", "clang22"):
        for shape in ("kernel-O0", "kernel-O3", "kernel-g", "nokernel", "globals", "ctor",
                      "link"):
            assert f"{cc}-{shape}" in names, f"{cc}-{shape} missing from the corpus"


@pytest.mark.parametrize("path", IMAGES, ids=[p.stem for p in IMAGES])
def test_real_device_images_pass_the_checks(path):
    data = path.read_bytes()
    assert elf.machine(data) == "EM_X86_64"
    assert elf.file_type(data) == "ET_DYN"
    img = OffloadImage(data, [], name=path.stem)
    assert img.machine == "EM_X86_64"


@pytest.mark.parametrize("path", [p for p in IMAGES if p.stem.startswith("clang16")],
                         ids=lambda p: p.stem)
def test_clang16_images_load_in_a_child(path):
    """What the checks accept, ld.so loads (its DT_NEEDED libomptarget.so.16 exists)."""
    if not Path("/usr/lib/llvm-16/lib/libomptarget.so.16").exists():
        pytest.skip("libomp5-16 not installed")
    from offload_shim.safety.isolation import verify_image
    verify_image(path.read_bytes(), name=path.stem)


def test_gcc12_host_binary_is_described():
    from offload_shim.elf.imageinfo import describe
    d = describe(CORPUS / "gcc12-nvptx-globals.exe")
    assert [(v["name"], v["size"]) for v in d["gnu_offload_vars"]] == [("g", 16), ("h", 8)]
    assert d["gomp_target_data"]["var_names"] == ["g", "h"]


def _strip_section_headers(data: bytes) -> bytearray:
    b = bytearray(data)
    struct.pack_into("<QHHH", b, 0x28, 0, 64, 56, struct.unpack_from("<H", b, 0x38)[0])
    struct.pack_into("<HHH", b, 0x3A, 0, 0, 0)          # e_shentsize, e_shnum, e_shstrndx
    return b


def _dynamic(data):
    from elftools.elf.elffile import ELFFile
    import io
    e = ELFFile(io.BytesIO(bytes(data)))
    return {t.entry.d_tag: t.entry.d_val for t in e.get_section_by_name(".dynamic").iter_tags()}


@pytest.mark.parametrize("cc", ["clang16", "clang19", "clang22"])
def test_corrupt_images_get_a_typed_error(cc):
    """The image without kernels has a symbol table its GNU hash does not bound; the
    checks must still refuse what ld.so cannot load safely."""
    data = (CORPUS / f"{cc}-nokernel.so").read_bytes()
    dyn = _dynamic(data)
    # the same image without section headers is still accepted...
    stripped = _strip_section_headers(data)
    assert elf.machine(bytes(stripped)) == "EM_X86_64"
    # ...but a relocation naming a symbol far outside the table is refused
    rela, relasz = dyn["DT_RELA"], dyn["DT_RELASZ"]
    n = relasz // 24
    bad = bytearray(stripped)
    off = rela + (n - 1) * 24                 # DT_RELA is mapped at its file offset here
    info = struct.unpack_from("<Q", bad, off + 8)[0]
    struct.pack_into("<Q", bad, off + 8, (0xFFFFF << 32) | (info & 0xFFFFFFFF))
    with pytest.raises(InvalidImageError):
        elf.machine(bytes(bad))
    # truncated, and garbage after the header
    with pytest.raises(InvalidImageError):
        OffloadImage(data[:len(data) // 3], [])
    with pytest.raises(InvalidImageError):
        OffloadImage(data[:64] + b"\xff" * (len(data) - 64), [])
