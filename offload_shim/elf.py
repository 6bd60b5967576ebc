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
    """``e_machine`` as pyelftools names it (``"EM_X86_64"``...), after
    checking that the ELF header, program headers and section headers
    parse.  Raises InvalidImageError for non-ELF or corrupt data."""
    elf, ELFError = _elffile(data)
    try:
        if elf.header["e_ident"]["EI_CLASS"] != "ELFCLASS64":
            raise InvalidImageError("not a 64-bit ELF image")
        for _ in elf.iter_segments():
            pass
        for _ in elf.iter_sections():
            pass
        if elf.header["e_type"] == "ET_DYN":
            _check_dynamic(elf, len(data))
        return elf.header["e_machine"]
    except ELFError as exc:
        raise InvalidImageError(f"corrupt ELF image: {exc}") from None
    except InvalidImageError:
        raise
    except Exception as exc:  # pyelftools/construct raise many kinds on bad data
        raise InvalidImageError(f"corrupt ELF image: {type(exc).__name__}: {exc}") from None


_ADDR_TAGS = {"DT_STRTAB", "DT_SYMTAB", "DT_HASH", "DT_GNU_HASH", "DT_RELA", "DT_REL",
              "DT_JMPREL", "DT_INIT", "DT_FINI", "DT_INIT_ARRAY", "DT_FINI_ARRAY",
              "DT_VERSYM", "DT_VERNEED", "DT_VERDEF", "DT_PLTGOT"}
_SIZE_TAGS = {"DT_STRSZ", "DT_RELASZ", "DT_RELSZ", "DT_PLTRELSZ", "DT_INIT_ARRAYSZ",
              "DT_FINI_ARRAYSZ"}


def _check_dynamic(elf, file_size: int) -> None:
    """The dynamic loader trusts ``PT_DYNAMIC``: a garbage dynamic table makes
    ``dlopen`` (inside the plugin's load_binary) segfault.  Refuse it here:
    every tag known, address tags inside a loaded segment, sizes inside the
    file, and DT_STRTAB/DT_SYMTAB present."""
    dyn = None
    for seg in elf.iter_segments():
        if seg["p_type"] == "PT_DYNAMIC":
            dyn = seg
    if dyn is None:
        raise InvalidImageError("shared object without a PT_DYNAMIC segment")
    loads = [(s["p_vaddr"], s["p_vaddr"] + s["p_memsz"]) for s in elf.iter_segments()
             if s["p_type"] == "PT_LOAD"]
    seen = set()
    for tag in dyn.iter_tags():
        name = tag.entry.d_tag
        if name == "DT_NULL":
            break
        if not isinstance(name, str):
            raise InvalidImageError(f"corrupt dynamic table: unknown tag {name!r}")
        val = tag.entry.d_val
        if name in _ADDR_TAGS and not any(lo <= val < hi for lo, hi in loads):
            raise InvalidImageError(f"corrupt dynamic table: {name} = {val:#x} outside "
                                    "the loaded segments")
        if name in _SIZE_TAGS and val > file_size:
            raise InvalidImageError(f"corrupt dynamic table: {name} = {val} exceeds the "
                                    f"file size {file_size}")
        seen.add(name)
    if not {"DT_STRTAB", "DT_SYMTAB"} <= seen:
        raise InvalidImageError("corrupt dynamic table: no DT_STRTAB/DT_SYMTAB")


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
