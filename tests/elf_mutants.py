"""Single-field mutants of an x86-64 ELF shared object (tests/test_image_safety.py).

``fields(data)`` lists every header, program header, section header, dynamic
entry, relocation, dynamic symbol and GNU hash field as ``(label, offset,
width)``; ``mutant(data, rng)`` sets one of them to an interesting value.
No pytest import: the fuzz loop imports this in a child process.
"""

from __future__ import annotations

import random
import struct

_EHDR = [("e_type", 16, 2), ("e_machine", 18, 2), ("e_version", 20, 4), ("e_entry", 24, 8),
         ("e_phoff", 32, 8), ("e_shoff", 40, 8), ("e_flags", 48, 4), ("e_ehsize", 52, 2),
         ("e_phentsize", 54, 2), ("e_phnum", 56, 2), ("e_shentsize", 58, 2),
         ("e_shnum", 60, 2), ("e_shstrndx", 62, 2)]
_PHDR = [("p_type", 0, 4), ("p_flags", 4, 4), ("p_offset", 8, 8), ("p_vaddr", 16, 8),
         ("p_paddr", 24, 8), ("p_filesz", 32, 8), ("p_memsz", 40, 8), ("p_align", 48, 8)]
_SHDR = [("sh_name", 0, 4), ("sh_type", 4, 4), ("sh_flags", 8, 8), ("sh_addr", 16, 8),
         ("sh_offset", 24, 8), ("sh_size", 32, 8), ("sh_link", 40, 4), ("sh_info", 44, 4),
         ("sh_addralign", 48, 8), ("sh_entsize", 56, 8)]
_SYM = [("st_name", 0, 4), ("st_info", 4, 1), ("st_other", 5, 1), ("st_shndx", 6, 2),
        ("st_value", 8, 8), ("st_size", 16, 8)]


def _sections(data: bytes) -> dict[str, tuple[int, int]]:
    shoff, = struct.unpack_from("<Q", data, 40)
    shnum, shstrndx = struct.unpack_from("<HH", data, 60)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + 64 * i) for i in range(shnum)]
    stroff = hdrs[shstrndx][4]
    out = {}
    for h in hdrs:
        end = data.index(b"\0", stroff + h[0])
        out[data[stroff + h[0]:end].decode()] = (h[4], h[5])
    return out


def fields(data: bytes) -> list[tuple[str, int, int]]:
    out = list(_EHDR)
    phoff, = struct.unpack_from("<Q", data, 32)
    phnum, = struct.unpack_from("<H", data, 56)
    for i in range(phnum):
        out += [(f"phdr[{i}].{n}", phoff + 56 * i + o, w) for n, o, w in _PHDR]
    shoff, = struct.unpack_from("<Q", data, 40)
    shnum, = struct.unpack_from("<H", data, 60)
    for i in range(shnum):
        out += [(f"shdr[{i}].{n}", shoff + 64 * i + o, w) for n, o, w in _SHDR]
    secs = _sections(data)
    off, size = secs[".dynamic"]
    for i in range(size // 16):
        out += [(f"dyn[{i}].d_tag", off + 16 * i, 8), (f"dyn[{i}].d_val", off + 16 * i + 8, 8)]
    off, size = secs[".rela.dyn"]
    for i in range(size // 24):
        out += [(f"rela[{i}].r_offset", off + 24 * i, 8), (f"rela[{i}].r_type", off + 24 * i + 8, 4),
                (f"rela[{i}].r_sym", off + 24 * i + 12, 4), (f"rela[{i}].r_addend", off + 24 * i + 16, 8)]
    off, size = secs[".dynsym"]
    for i in range(size // 24):
        out += [(f"dynsym[{i}].{n}", off + 24 * i + o, w) for n, o, w in _SYM]
    off, size = secs[".gnu.hash"]
    out += [(f"gnu_hash.word[{i}]", off + 4 * i, 4) for i in range(size // 4)]
    return out


def set_field(data: bytes, off: int, width: int, value: int) -> bytes:
    b = bytearray(data)
    b[off:off + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    return bytes(b)


def _values(orig: int, width: int, rng: random.Random) -> list[int]:
    top = (1 << (8 * width)) - 1
    vals = [0, 1, 2, 3, 0xFF, top, top >> 1, orig + 1, orig - 1, orig * 2, orig + 0x1000,
            orig ^ (1 << rng.randrange(8 * width)), rng.randrange(top + 1)]
    if width == 8:
        vals += [0x7FFF00000000, 0x10000]
    return vals


def mutant(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One random single-field mutant: ``(description, bytes)``."""
    flist = fields(data)
    label, off, width = rng.choice(flist)
    orig = int.from_bytes(data[off:off + width], "little")
    value = rng.choice(_values(orig, width, rng)) & ((1 << (8 * width)) - 1)
    return f"{label}: {orig:#x} -> {value:#x}", set_field(data, off, width, value)


def deterministic(data: bytes) -> dict[str, bytes]:
    """The four mutants of the fuzzing report that crash or abort ld.so."""
    secs = _sections(data)
    rela, _ = secs[".rela.dyn"]
    dynsym, dsize = secs[".dynsym"]
    gh, _ = secs[".gnu.hash"]
    zeroed = bytearray(data)
    zeroed[dynsym:dynsym + dsize] = bytes(dsize)
    return {
        "rela_offset_wild": set_field(data, rela, 8, 0x7FFF00000000),
        "rela_type_ff": set_field(data, rela + 8, 1, 0xFF),
        "dynsym_zeroed": bytes(zeroed),
        "gnu_hash_bloom_3": set_field(data, gh + 8, 4, 3),
    }
