"""Read offload images and their entry tables from ELF files (pyelftools).

Only what the runtime needs from an x86-64 offload image: its machine, and
the records of an ``omp_offloading_entries`` section (``__tgt_offload_entry``,
32 bytes each: addr, name, size, flags, reserved; abi-reference 1.3/1.8).  In
a shared object the ``addr`` and ``name`` fields are zero in the file and
filled by ``R_X86_64_RELATIVE`` relocations, so both are resolved through the
dynamic relocation table.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

from .errors import InvalidImageError

ENTRY_SIZE = 32
ENTRIES_SECTION = "omp_offloading_entries"
R_X86_64_RELATIVE = 8


@dataclass(frozen=True)
class ElfEntry:
    name: str
    size: int       # bytes; 0 = function
    flags: int
    addr: int       # virtual address in the image (0 if unresolved)


def _elffile(data: bytes):
    try:
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile
    except ImportError as exc:  # pragma: no cover - dependency declared
        raise RuntimeError("pyelftools is required to read offload images") from exc
    if data[:4] != b"\x7fELF":
        raise InvalidImageError("not an ELF file (bad magic)")
    try:
        return ELFFile(io.BytesIO(data)), ELFError
    except ELFError as exc:
        raise InvalidImageError(f"corrupt ELF image: {exc}") from None


def machine(data: bytes) -> str:
    """``e_machine`` as pyelftools names it (``"EM_X86_64"``...).
    Raises InvalidImageError for non-ELF or corrupt data."""
    elf, _ = _elffile(data)
    return elf.header["e_machine"]


def _vaddr_to_offset(elf, vaddr: int) -> int | None:
    for seg in elf.iter_segments():
        if seg["p_type"] != "PT_LOAD":
            continue
        start = seg["p_vaddr"]
        if start <= vaddr < start + seg["p_filesz"]:
            return seg["p_offset"] + (vaddr - start)
    return None


def _cstring(data: bytes, off: int) -> str:
    end = data.index(b"\0", off)
    return data[off:end].decode(errors="replace")


def offload_entries(data: bytes) -> list[ElfEntry]:
    """Records of the image's ``omp_offloading_entries`` section, in section
    order; ``[]`` if the section is absent.  Raises InvalidImageError for a
    corrupt image or records that cannot be resolved."""
    elf, ELFError = _elffile(data)
    try:
        sec = elf.get_section_by_name(ENTRIES_SECTION)
        if sec is None:
            return []
        raw = sec.data()
        base = sec["sh_addr"]
        relocs: dict[int, int] = {}
        for rsec in elf.iter_sections():
            if rsec["sh_type"] not in ("SHT_RELA",):
                continue
            for rel in rsec.iter_relocations():
                if rel["r_info_type"] == R_X86_64_RELATIVE:
                    relocs[rel["r_offset"]] = rel["r_addend"]
        out = []
        for i in range(len(raw) // ENTRY_SIZE):
            addr, name_ptr, size, flags, _res = struct.unpack_from("<QQQii", raw, i * ENTRY_SIZE)
            va = base + i * ENTRY_SIZE
            addr = addr or relocs.get(va, 0)
            name_ptr = name_ptr or relocs.get(va + 8, 0)
            off = _vaddr_to_offset(elf, name_ptr) if name_ptr else None
            if off is None:
                raise InvalidImageError(f"offload entry {i}: name pointer {name_ptr:#x} "
                                        "does not resolve")
            out.append(ElfEntry(_cstring(data, off), size, flags, addr))
        return out
    except ELFError as exc:
        raise InvalidImageError(f"corrupt ELF image: {exc}") from None
    except (ValueError, struct.error) as exc:
        raise InvalidImageError(f"corrupt offload entry table: {exc}") from None
