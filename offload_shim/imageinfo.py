"""Read offload images without running them (issue 7, priority 2).

* :func:`parse_offload_binaries` -- LLVM's ``OffloadBinary`` container (magic
  ``0x10FF10AD``, ``llvm/Object/OffloadBinary.h`` of LLVM 15/16, version 1): a 32-byte
  header ``{magic[4], u32 version, u64 size, u64 entry_offset, u64 entry_size}``, a
  40-byte entry ``{u16 image_kind, u16 offload_kind, u32 flags, u64 string_offset,
  u64 num_strings, u64 image_offset, u64 image_size}`` and a string map of
  ``{u64 key_offset, u64 value_offset}`` pairs (``triple``, ``arch``...).  clang-16's
  new driver puts one per device compilation into the ``.llvm.offloading`` section of
  objects, and the linker wrapper points ``__tgt_device_image.ImageStart`` at one that
  wraps the linked device image (libomptarget 16 unwraps it in ``registerLib``).
* :func:`describe` -- what an object / library / executable carries: ``.llvm.offloading``
  binaries, clang's host entry table (section ``omp_offloading_entries``, 32-byte
  ``__tgt_offload_entry`` records with their names), GCC's ``.gnu.offload_funcs`` /
  ``.gnu.offload_vars`` tables (host addresses; names through the symbol table) and the
  GCC device-image sections ``.gnu.offload_lto_*`` / ``.offload_*``.

Everything is read from the file; nothing is loaded or relocated (addresses in
``omp_offloading_entries`` of a shared object are link-time values, names come from the
relocation-free string pointers when they can be resolved).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InvalidImageError

OFFLOAD_BINARY_MAGIC = b"\x10\xff\x10\xad"
IMAGE_KINDS = {0: "none", 1: "object", 2: "bitcode", 3: "cubin", 4: "fatbinary", 5: "ptx"}
OFFLOAD_KINDS = {0: "none", 1: "openmp", 2: "cuda", 4: "hip"}
_HDR = struct.Struct("<4sIQQQ")
_ENT = struct.Struct("<HHIQQQQ")


@dataclass
class OffloadBinaryEntry:
    """One device image inside an OffloadBinary: ``image_kind`` / ``offload_kind``
    (names), ``flags``, ``strings`` (``triple``, ``arch``...), ``image`` (bytes),
    ``offset`` of the container in the parsed buffer."""
    image_kind: str
    offload_kind: str
    flags: int
    strings: dict
    image: bytes = field(repr=False)
    offset: int = 0

    @property
    def triple(self) -> str:
        return self.strings.get("triple", "")

    @property
    def arch(self) -> str:
        return self.strings.get("arch", "")


def is_offload_binary(data: bytes) -> bool:
    return data[:4] == OFFLOAD_BINARY_MAGIC


def _cstr(buf: bytes, off: int) -> str:
    end = buf.find(b"\0", off)
    return buf[off:end if end >= 0 else len(buf)].decode(errors="replace")


def parse_offload_binaries(data: bytes) -> list[OffloadBinaryEntry]:
    """Every OffloadBinary in ``data`` (a section may hold several back to back,
    each 8-byte aligned).  Raises InvalidImageError for a bad magic at offset 0 or a
    truncated / inconsistent container."""
    out = []
    off = 0
    while off + _HDR.size <= len(data):
        magic, version, size, eoff, esize = _HDR.unpack_from(data, off)
        if magic != OFFLOAD_BINARY_MAGIC:
            if off == 0:
                raise InvalidImageError("not an OffloadBinary (bad magic)")
            break
        if size < _HDR.size or off + size > len(data) or eoff + _ENT.size > size:
            raise InvalidImageError(f"truncated OffloadBinary at offset {off} "
                                    f"(size {size}, buffer {len(data)})")
        buf = data[off:off + size]
        kind, okind, flags, soff, nstr, ioff, isize = _ENT.unpack_from(buf, eoff)
        if ioff + isize > size or soff + 16 * nstr > size:
            raise InvalidImageError(f"OffloadBinary at offset {off}: image or string table "
                                    "outside the container")
        strings = {}
        for i in range(nstr):
            k, v = struct.unpack_from("<QQ", buf, soff + 16 * i)
            strings[_cstr(buf, k)] = _cstr(buf, v)
        out.append(OffloadBinaryEntry(IMAGE_KINDS.get(kind, str(kind)),
                                      OFFLOAD_KINDS.get(okind, str(okind)), flags, strings,
                                      bytes(buf[ioff:ioff + isize]), off))
        off += (size + 7) & ~7
        del version, esize
    return out


def unwrap_image(data: bytes) -> tuple[bytes, dict]:
    """The device image inside an OffloadBinary (its first entry) and its strings;
    other data is returned unchanged with ``{}`` (libomptarget 16
    ``getExecutableImage``)."""
    if not is_offload_binary(data):
        return data, {}
    entries = parse_offload_binaries(data)
    if not entries:
        return data, {}
    return entries[0].image, entries[0].strings


def describe(path: str | Path) -> dict:
    """What ``path`` (ELF object, shared library or executable) carries for
    offloading: ``{"path", "machine", "llvm_offloading": [OffloadBinaryEntry...],
    "omp_offloading_entries": [{"name", "size", "flags", "addr"}...],
    "gnu_offload_funcs": [{"addr", "name"}], "gnu_offload_vars": [{"addr", "size", "name"}],
    "gnu_offload_sections": [names]}``.  Raises InvalidImageError for non-ELF data."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    data = Path(path).read_bytes()
    try:
        elf = ELFFile(io.BytesIO(data))
        sections = {s.name: s for s in elf.iter_sections()}
    except ELFError as exc:
        raise InvalidImageError(f"{path}: not an ELF file ({exc})") from None
    out: dict = {"path": str(path), "machine": elf["e_machine"], "llvm_offloading": [],
                 "omp_offloading_entries": [], "gnu_offload_funcs": [],
                 "gnu_offload_vars": [], "gnu_offload_sections": []}

    def read_vaddr(addr: int, n: int) -> bytes | None:
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= addr < seg["p_vaddr"] + seg["p_filesz"]:
                o = seg["p_offset"] + addr - seg["p_vaddr"]
                return data[o:o + n]
        for s in elf.iter_sections():      # relocatable objects: section-relative
            if s["sh_addr"] and s["sh_addr"] <= addr < s["sh_addr"] + s["sh_size"]:
                o = s["sh_offset"] + addr - s["sh_addr"]
                return data[o:o + n]
        return None

    def cstring_at(addr: int) -> str | None:
        raw = read_vaddr(addr, 4096) if addr else None
        return raw.split(b"\0", 1)[0].decode(errors="replace") if raw else None

    symbols: dict[int, str] = {}
    for tab in (sections.get(".symtab"), sections.get(".dynsym")):
        if tab is not None:
            for sym in tab.iter_symbols():
                if sym.name and sym["st_value"]:
                    symbols.setdefault(sym["st_value"], sym.name)

    sec = sections.get(".llvm.offloading")
    if sec is not None:
        out["llvm_offloading"] = parse_offload_binaries(sec.data())
    sec = sections.get("omp_offloading_entries")
    if sec is not None:
        raw = sec.data()
        # relocatable objects: the name pointers are relocations (symbol + addend)
        rel_names: dict[int, str] = {}
        rsec = sections.get(".relaomp_offloading_entries")
        if rsec is not None and elf["e_type"] == "ET_REL":
            symtab = elf.get_section(rsec["sh_link"])
            for r in rsec.iter_relocations():
                sym = symtab.get_symbol(r["r_info_sym"])
                if r["r_offset"] % 32 == 8 and sym["st_shndx"] not in ("SHN_UNDEF", "SHN_ABS"):
                    target = elf.get_section(sym["st_shndx"])
                    o = target["sh_offset"] + sym["st_value"] + r["r_addend"]
                    rel_names[r["r_offset"] - 8] = _cstr(data, o)
        for i in range(len(raw) // 32):
            addr, name_p, size, flags, _r = struct.unpack_from("<QQQii", raw, 32 * i)
            name = cstring_at(name_p) if elf["e_type"] != "ET_REL" else rel_names.get(32 * i)
            out["omp_offloading_entries"].append(
                {"name": name or symbols.get(addr), "size": size, "flags": flags,
                 "addr": addr})
    sec = sections.get(".gnu.offload_funcs")
    if sec is not None:
        raw = sec.data()
        for i in range(len(raw) // 8):
            (addr,) = struct.unpack_from("<Q", raw, 8 * i)
            out["gnu_offload_funcs"].append({"addr": addr, "name": symbols.get(addr)})
    sec = sections.get(".gnu.offload_vars")
    if sec is not None:
        raw = sec.data()
        for i in range(len(raw) // 16):
            addr, size = struct.unpack_from("<QQ", raw, 16 * i)
            out["gnu_offload_vars"].append({"addr": addr, "size": size & ~(1 << 63),
                                            "link": bool(size >> 63),
                                            "name": symbols.get(addr)})
    out["gnu_offload_sections"] = sorted(n for n in sections
                                         if n.startswith((".gnu.offload_lto_", ".offload_")))
    return out


def format_description(info: dict) -> str:
    """Human-readable text of :func:`describe`'s result."""
    lines = [f"{info['path']}  ({info['machine']})"]
    for i, b in enumerate(info["llvm_offloading"]):
        lines.append(f"  .llvm.offloading[{i}]: {b.offload_kind} {b.image_kind} "
                     f"triple={b.triple} arch={b.arch or '-'} {len(b.image)} bytes")
    if info["omp_offloading_entries"]:
        lines.append(f"  omp_offloading_entries: {len(info['omp_offloading_entries'])}")
        for e in info["omp_offloading_entries"]:
            kind = "kernel" if e["size"] == 0 else f"global {e['size']} bytes"
            lines.append(f"    {e['name']}  ({kind}, flags={e['flags']:#x})")
    if info["gnu_offload_funcs"] or info["gnu_offload_vars"]:
        lines.append(f"  .gnu.offload_funcs: {len(info['gnu_offload_funcs'])}, "
                     f".gnu.offload_vars: {len(info['gnu_offload_vars'])}")
        for f in info["gnu_offload_funcs"]:
            lines.append(f"    func {f['name'] or hex(f['addr'])}")
        for v in info["gnu_offload_vars"]:
            lines.append(f"    var  {v['name'] or hex(v['addr'])} ({v['size']} bytes"
                         + (", link" if v["link"] else "") + ")")
    for s in info["gnu_offload_sections"]:
        lines.append(f"  GCC offload section {s}")
    if len(lines) == 1:
        lines.append("  no offload images or entries")
    return "\n".join(lines)


__all__ = ["OffloadBinaryEntry", "describe", "format_description", "is_offload_binary",
           "parse_offload_binaries", "unwrap_image"]
