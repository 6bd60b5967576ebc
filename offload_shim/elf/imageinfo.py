"""Read offload images without running them.

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
  binaries, clang's host entry table in every generation's layout (section
  ``omp_offloading_entries`` or ``llvm_offload_entries``; 32-byte
  ``__tgt_offload_entry`` of clang 16-19 or 56-byte ``EntryTy`` of clang 20-22, with
  their names, ``requires`` flags and the clang generation, abi/clang.py), GCC's ``.gnu.offload_funcs`` /
  ``.gnu.offload_vars`` tables (host addresses; names through the symbol table) and the
  GCC device-image sections ``.gnu.offload_lto_*`` / ``.offload_*``, and in a linked
  GCC library mkoffload's nvptx ``target_data`` (:func:`parse_nvptx_target_data`: PTX
  objects, function and variable names).

Everything is read from the file; nothing is loaded or relocated (addresses in
``omp_offloading_entries`` of a shared object are link-time values, names come from the
relocation-free string pointers when they can be resolved).
"""

from __future__ import annotations

import io
import struct

from ..errors import InvalidImageError
from ..records import FieldsRepr

OFFLOAD_BINARY_MAGIC = b"\x10\xff\x10\xad"
#: ``ImageKind`` / ``OffloadKind`` of llvm/Object/OffloadBinary.h (22.1.8 adds spirv, sycl)
IMAGE_KINDS = {0: "none", 1: "object", 2: "bitcode", 3: "cubin", 4: "fatbinary", 5: "ptx",
               6: "spirv"}
OFFLOAD_KINDS = {0: "none", 1: "openmp", 2: "cuda", 4: "hip", 8: "sycl"}
_HDR = struct.Struct("<4sIQQQ")
_ENT = struct.Struct("<HHIQQQQ")


class OffloadBinaryEntry(FieldsRepr):
    """One device image inside an OffloadBinary: ``image_kind`` / ``offload_kind``
    (names), ``flags``, ``strings`` (``triple``, ``arch``...), ``image`` (bytes),
    ``offset`` of the container in the parsed buffer."""
    _fields = ("image_kind", "offload_kind", "flags", "strings", "offset")

    def __init__(self, image_kind: str, offload_kind: str, flags: int, strings: dict,
                 image: bytes, offset: int = 0) -> None:
        self.image_kind = image_kind
        self.offload_kind = offload_kind
        self.flags = flags
        self.strings = strings
        self.image = image
        self.offset = offset

    @property
    def triple(self) -> str:
        return self.strings.get("triple", "")

    @property
    def arch(self) -> str:
        return self.strings.get("arch", "")


def is_offload_binary(data: bytes) -> bool:
    return data[:4] == OFFLOAD_BINARY_MAGIC


def _cstr(buf: bytes, off: int, limit: int | None = None) -> str:
    """The NUL-terminated string at ``off``, not reaching ``limit`` (default: the end
    of ``buf``)."""
    limit = len(buf) if limit is None else min(limit, len(buf))
    if off >= limit:
        return ""
    end = buf.find(b"\0", off, limit)
    return buf[off:end if end >= 0 else limit].decode(errors="replace")


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
        end = off + size                 # the container: [off, end) of data, not copied
        kind, okind, flags, soff, nstr, ioff, isize = _ENT.unpack_from(data, off + eoff)
        if ioff + isize > size or soff + 16 * nstr > size:
            raise InvalidImageError(f"OffloadBinary at offset {off}: image or string table "
                                    "outside the container")
        strings = {}
        for i in range(nstr):
            k, v = struct.unpack_from("<QQ", data, off + soff + 16 * i)
            strings[_cstr(data, off + k, end)] = _cstr(data, off + v, end)
        out.append(OffloadBinaryEntry(IMAGE_KINDS.get(kind, str(kind)),
                                      OFFLOAD_KINDS.get(okind, str(okind)), flags, strings,
                                      bytes(data[off + ioff:off + ioff + isize]), off))
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


#: GCC ``enum offload_target_type`` (gomp-constants.h)
GOMP_TARGET_TYPES = {2: "host", 5: "nvptx", 6: "intel_mic", 7: "hsa", 8: "gcn"}
_NVPTX_TDATA = struct.Struct("<QI4xQI4xQI4x")   # nvptx_tdata_t, GCC 7-13 (48 bytes)


def parse_nvptx_target_data(read, addr: int, cstring=None) -> dict:
    """Decode mkoffload's nvptx ``target_data`` (``nvptx_tdata_t``, GCC 7-13,
    GCC 12 mkoffload) at ``addr``: ``{"ptx_objs": [{"addr", "size"}],
    "var_names": [str], "fn_names": [str], "fn_dims": [(gang, worker, vector)]}``
    (sizes in bytes, PTX text NUL included).  ``read(addr, n) -> bytes`` reads memory
    (``ctypes.string_at`` for a loaded library; :func:`describe` applies the
    dynamic relocations of a file); ``cstring(addr) -> str`` reads a NUL-terminated
    name (default: through ``read``).  Raises InvalidImageError when a pointer cannot
    be read."""
    def rd(a: int, n: int) -> bytes:
        b = read(a, n) if a else None
        if b is None or len(b) < n:
            raise InvalidImageError(f"nvptx target_data: cannot read {n} bytes at {a:#x}")
        return b

    def cstr(a: int) -> str:
        if cstring is not None:
            return cstring(a)
        for n in (256, 4096):
            b = read(a, n) if a else None
            if b and b"\0" in b:
                return b.split(b"\0", 1)[0].decode(errors="replace")
        raise InvalidImageError(f"nvptx target_data: no string at {a:#x}")

    objs, nobj, vnames, nvar, fdescs, nfn = _NVPTX_TDATA.unpack(rd(addr, _NVPTX_TDATA.size))
    if nobj > 1 << 16 or nvar > 1 << 20 or nfn > 1 << 20:
        raise InvalidImageError("nvptx target_data: implausible counts "
                                f"({nobj} PTX objects, {nvar} vars, {nfn} functions)")
    out: dict = {"ptx_objs": [], "var_names": [], "fn_names": [], "fn_dims": []}
    raw = rd(objs, 16 * nobj) if nobj else b""
    for i in range(nobj):
        code, size = struct.unpack_from("<QQ", raw, 16 * i)
        out["ptx_objs"].append({"addr": code, "size": size})
    raw = rd(vnames, 8 * nvar) if nvar else b""
    for i in range(nvar):
        out["var_names"].append(cstr(struct.unpack_from("<Q", raw, 8 * i)[0]))
    raw = rd(fdescs, 16 * nfn) if nfn else b""
    for i in range(nfn):
        fn, d0, d1, d2 = struct.unpack_from("<QHHH", raw, 16 * i)
        out["fn_names"].append(cstr(fn))
        out["fn_dims"].append((d0, d1, d2))
    return out


ELF_MAGIC = b"\x7fELF"

#: what a parser of untrusted ELF bytes may raise (pyelftools' ELFError family, struct /
#: construct errors, offsets that do not fit an ssize_t, inconsistent tables)
_PARSE_ERRORS = (struct.error, OverflowError, ValueError, IndexError, KeyError, TypeError,
                 AttributeError, EOFError, UnicodeDecodeError)


def describe(path: str | Path) -> dict:
    """What ``path`` (ELF object, shared library or executable) carries for
    offloading: ``{"path", "machine", "llvm_offloading": [OffloadBinaryEntry...],
    "omp_offloading_entries": [{"name", "size", "flags", "addr"}...] (clang's host
    entries of any generation), "entry_section", "entry_layout", "entry_error" (a table
    no known layout fits), "requires", "device_entry_prefix", "compiler" (e.g. "clang
    21-22"),
    "gnu_offload_funcs": [{"addr", "name"}], "gnu_offload_vars": [{"addr", "size", "link",
    "name"}], "gnu_offload_sections": [names], "gomp_target_data": dict or None}``
    (addresses are link-time values, dynamic relocations applied).

    Raises OSError (FileNotFoundError, IsADirectoryError, PermissionError...) when the
    file cannot be read, and InvalidImageError when it is not an ELF file
    (``"PATH: not an ELF file (...)"``) or is an ELF file that cannot be parsed
    (``"PATH: corrupt ELF file: ..."``: truncated, tables outside the file,
    inconsistent section headers, a bad ``.llvm.offloading`` container)."""
    from elftools.common.exceptions import ELFError
    from . import read_file
    data = read_file(path)                # OSError as it is; not a regular file: refused
    if data[:4] != ELF_MAGIC:
        raise InvalidImageError(f"{path}: not an ELF file (no \\x7fELF magic number"
                                + (", the file is empty)" if not data else ")"))
    try:
        return _describe(path, data)
    except InvalidImageError as exc:
        raise InvalidImageError(f"{path}: corrupt ELF file: {exc}") from None
    except (ELFError, *_PARSE_ERRORS) as exc:
        raise InvalidImageError(f"{path}: corrupt ELF file: {_parse_error_text(exc)}") \
            from None


def _parse_error_text(exc: BaseException) -> str:
    """A reader's words for what a parser raised on corrupt ELF bytes."""
    from elftools.common.exceptions import ELFError, ELFParseError
    text = str(exc) or type(exc).__name__
    if isinstance(exc, (ELFParseError, struct.error, EOFError)) and "expected" in text:
        return f"a header or table runs past the end of the file ({text})"
    if isinstance(exc, OverflowError):
        return f"an offset or size is out of range ({text})"
    if isinstance(exc, ELFError):
        return text
    return f"inconsistent headers ({type(exc).__name__}: {text})"


def _describe(path, data: bytes) -> dict:
    """:func:`describe` of ``data`` (starts with the ELF magic); pyelftools / struct
    errors propagate."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection
    need = 64 if data[4:5] == b"\x02" else 52       # Elf64_Ehdr / Elf32_Ehdr
    if len(data) < need:
        raise ELFError(f"truncated ELF header ({len(data)} of {need} bytes)")
    elf = ELFFile(io.BytesIO(data))
    sections = {s.name: s for s in elf.iter_sections()}
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
        if isinstance(tab, SymbolTableSection):
            for sym in tab.iter_symbols():
                if sym.name and sym["st_value"]:
                    symbols.setdefault(sym["st_value"], sym.name)

    sec = sections.get(".llvm.offloading")
    if sec is not None:
        out["llvm_offloading"] = parse_offload_binaries(sec.data())
    relocs = _dyn_relocations(elf, sections)
    out.update(_host_entries(elf, data, sections, symbols, cstring_at, relocs))
    out["device_entry_prefix"] = _device_entry_prefix(out["llvm_offloading"])
    out["compiler"] = _compiler_text(out)
    sec = sections.get(".gnu.offload_funcs")
    if sec is not None:
        raw = _relocated(sec.data(), sec["sh_addr"], relocs)
        for i in range(len(raw) // 8):
            (addr,) = struct.unpack_from("<Q", raw, 8 * i)
            out["gnu_offload_funcs"].append({"addr": addr, "name": symbols.get(addr)})
    sec = sections.get(".gnu.offload_vars")
    if sec is not None:
        raw = _relocated(sec.data(), sec["sh_addr"], relocs)
        for i in range(len(raw) // 16):
            addr, size = struct.unpack_from("<QQ", raw, 16 * i)
            out["gnu_offload_vars"].append({"addr": addr, "size": size & ~(1 << 63),
                                            "link": bool(size >> 63),
                                            "name": symbols.get(addr)})
    out["gnu_offload_sections"] = sorted(n for n in sections
                                         if n.startswith((".gnu.offload_lto_", ".offload_")))
    out["gomp_target_data"] = _gomp_target_data(elf, sections, read_vaddr, relocs)
    return out


#: sections clang puts the host entry table in (abi/clang.py GENERATIONS)
ENTRY_SECTIONS = ("omp_offloading_entries", "llvm_offload_entries")


def _host_entries(elf, data, sections, symbols, cstring_at, relocs) -> dict:
    """The host entry table of a clang-built file, in any generation's layout
    (abi/clang.py: 32-byte ``__tgt_offload_entry`` of LLVM 16-19, 56-byte ``EntryTy``
    of 20-22, in ``omp_offloading_entries`` or, from 21, ``llvm_offload_entries``):
    ``omp_offloading_entries`` (OpenMP entries: name, size, flags, addr), ``requires``
    (flags of requires entries or None), ``entry_section``, ``entry_layout`` (name) and
    ``entry_error`` (a table no known layout fits: one line)."""
    from elftools.elf.relocation import RelocationSection
    from ..abi import clang as abi_clang
    from ..errors import UnknownLayoutError
    res: dict = {"omp_offloading_entries": [], "requires": None, "entry_section": None,
                 "entry_layout": None, "entry_error": None}
    for name in ENTRY_SECTIONS:
        sec = sections.get(name)
        if sec is None or not sec["sh_size"]:
            continue
        res["entry_section"] = name
        raw = sec.data()
        if elf["e_type"] != "ET_REL":
            raw = _relocated(raw, sec["sh_addr"], relocs)
        try:
            layout = abi_clang.detect_entry_layout(raw, f"section {name}") if elf[
                "e_type"] != "ET_REL" else _rel_layout(raw)
        except UnknownLayoutError as exc:
            res["entry_error"] = str(exc)
            return res
        res["entry_layout"] = layout.name
        # relocatable objects: the name pointers are relocations (symbol + addend)
        rel_names: dict[int, str] = {}
        rsec = sections.get(".rela" + name)
        name_off = 8 if layout.size == 32 else 24
        if isinstance(rsec, RelocationSection) and elf["e_type"] == "ET_REL":
            symtab = elf.get_section(rsec["sh_link"])
            for r in rsec.iter_relocations():
                sym = symtab.get_symbol(r["r_info_sym"])
                if (r["r_offset"] % layout.size == name_off
                        and sym["st_shndx"] not in ("SHN_UNDEF", "SHN_ABS")):
                    target = elf.get_section(sym["st_shndx"])
                    o = target["sh_offset"] + sym["st_value"] + r["r_addend"]
                    rel_names[r["r_offset"] - name_off] = _cstr(data, o)
        for i in range(len(raw) // layout.size):
            f = layout.decode(raw[i * layout.size:(i + 1) * layout.size])
            if f.kind != abi_clang.OFK_OPENMP:
                continue
            if f.is_requires:
                res["requires"] = (res["requires"] or 0) | f.data
                continue
            ename = (cstring_at(f.name_ptr) if elf["e_type"] != "ET_REL"
                     else rel_names.get(i * layout.size))
            res["omp_offloading_entries"].append(
                {"name": ename or symbols.get(f.addr), "size": f.size, "flags": f.flags,
                 "addr": f.addr})
        return res
    return res


def _rel_layout(raw: bytes):
    """The layout of an object file's (unrelocated) entry table: by record size and
    the v1 header (``Reserved`` 0, ``Version`` 1), since pointers are not filled in."""
    from ..abi import clang as abi_clang
    from ..errors import UnknownLayoutError
    v1 = abi_clang.ENTRY_TY_V1
    if len(raw) % v1.size == 0 and all(
            raw[k:k + 8] == bytes(8) and raw[k + 8:k + 10] == b"\x01\x00"
            for k in range(0, len(raw), v1.size)):
        return v1
    if len(raw) % 32 == 0:
        return abi_clang.TGT_OFFLOAD_ENTRY
    raise UnknownLayoutError(f"entry table of {len(raw)} bytes is no known layout")


def _device_entry_prefix(binaries) -> str | None:
    """``.omp_offloading.entry.`` (clang 16-17) or ``.offloading.entry.`` (18+): the
    prefix of the entry symbols in the first ELF device image, None when unknown."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection
    for b in binaries:
        if b.image[:4] != ELF_MAGIC:
            continue
        try:
            img = ELFFile(io.BytesIO(b.image))
            for sec in img.iter_sections():
                if isinstance(sec, SymbolTableSection):
                    for sym in sec.iter_symbols():
                        for prefix in (".omp_offloading.entry.", ".offloading.entry."):
                            if sym.name.startswith(prefix):
                                return prefix
        except Exception:  # noqa: BLE001 - a device image we cannot read says nothing
            continue
    return None


def _compiler_text(info: dict) -> str | None:
    """Which clang generation the entry table and device image point to
    (abi/clang.py ``GENERATIONS``), None for files without a clang entry table."""
    from ..abi import clang as abi_clang
    if not info.get("entry_section") or not info.get("entry_layout"):
        return None
    layout = next(l for l in abi_clang.ENTRY_LAYOUTS if l.name == info["entry_layout"])
    gens = abi_clang.generations_of(
        layout, section=info["entry_section"],
        device_entry_prefix=info.get("device_entry_prefix"),
        requires_entry=True if info.get("requires") is not None else None)
    return abi_clang.describe_generations(gens) if gens else None


def _dyn_relocations(elf, sections) -> dict[int, int]:
    """Link-time values of the 8-byte words ``.rela.dyn`` fills in a shared object:
    ``R_X86_64_RELATIVE`` (addend) and ``R_X86_64_64`` against a defined symbol
    (symbol value + addend).  ``{address: value}``; empty for relocatable objects."""
    out: dict[int, int] = {}
    from elftools.elf.relocation import RelocationSection
    rela = sections.get(".rela.dyn")
    if not isinstance(rela, RelocationSection) or elf["e_type"] == "ET_REL":
        return out
    symtab = elf.get_section(rela["sh_link"]) if rela["sh_link"] else None
    for r in rela.iter_relocations():
        if r["r_info_type"] == 8:                       # R_X86_64_RELATIVE
            out[r["r_offset"]] = r["r_addend"]
        elif r["r_info_type"] == 1 and symtab is not None:   # R_X86_64_64
            sym = symtab.get_symbol(r["r_info_sym"])
            if sym["st_shndx"] != "SHN_UNDEF":
                out[r["r_offset"]] = sym["st_value"] + r["r_addend"]
    return out


def _relocated(raw: bytes, addr: int, relocs: dict[int, int]) -> bytes:
    """``raw`` (read at link-time address ``addr``) with the words of ``relocs`` put in."""
    if not relocs:
        return raw
    buf = bytearray(raw)
    for off in range(addr - addr % 8, addr + len(buf), 8):
        if off in relocs:
            val = struct.pack("<Q", relocs[off] & 0xFFFFFFFFFFFFFFFF)
            for k in range(8):
                if 0 <= off - addr + k < len(buf):
                    buf[off - addr + k] = val[k]
    return bytes(buf)


def _gomp_target_data(elf, sections, read_vaddr, relocs) -> dict | None:
    """mkoffload's nvptx ``target_data`` of a linked GCC library (the local symbol
    ``target_data`` that its constructor passes to ``GOMP_offload_register_ver``),
    with the file's dynamic relocations applied; None when absent
    (no offloading, stripped, or another target).  Adds ``"addr"`` and
    ``"ptx_bytes"`` (sum of the PTX object sizes)."""
    from elftools.elf.sections import SymbolTableSection
    symtab = sections.get(".symtab")
    if not isinstance(symtab, SymbolTableSection) or elf["e_type"] == "ET_REL":
        return None
    tdata = [s for s in symtab.iter_symbols() if s.name == "target_data"
             and s["st_info"]["type"] == "STT_OBJECT" and s["st_size"] == _NVPTX_TDATA.size]
    if len(tdata) != 1:
        return None
    def read(addr: int, n: int) -> bytes | None:
        raw = read_vaddr(addr, n)
        return None if raw is None else _relocated(raw, addr, relocs)

    try:
        info = parse_nvptx_target_data(read, tdata[0]["st_value"])
    except InvalidImageError:
        return None
    info["addr"] = tdata[0]["st_value"]
    info["target"] = "nvptx"
    info["ptx_bytes"] = sum(o["size"] for o in info["ptx_objs"])
    return info


def format_description(info: dict) -> str:
    """Human-readable text of :func:`describe`'s result."""
    lines = [f"{info['path']}  ({info['machine']})"]
    for i, b in enumerate(info["llvm_offloading"]):
        lines.append(f"  .llvm.offloading[{i}]: {b.offload_kind} {b.image_kind} "
                     f"triple={b.triple} arch={b.arch or '-'} {len(b.image)} bytes")
    if info.get("entry_error"):
        lines.append(f"  {info['entry_section']}: {info['entry_error']}")
    if info["omp_offloading_entries"] or info.get("entry_layout"):
        extra = f" (built by {info['compiler']})" if info.get("compiler") else ""
        lines.append(f"  {info.get('entry_section') or 'omp_offloading_entries'}: "
                     f"{len(info['omp_offloading_entries'])} x {info.get('entry_layout')}"
                     f"{extra}")
        if info.get("requires") is not None:
            lines.append(f"    requires flags {info['requires']:#x}")
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
    td = info.get("gomp_target_data")
    if td:
        lines.append(f"  GCC {td['target']} target_data at {td['addr']:#x}: "
                     f"{len(td['ptx_objs'])} PTX objects ({td['ptx_bytes']} bytes), "
                     f"{len(td['fn_names'])} functions, {len(td['var_names'])} variables")
        for n in td["fn_names"]:
            lines.append(f"    ptx func {n}")
        for n in td["var_names"]:
            lines.append(f"    ptx var  {n}")
    if len(lines) == 1:
        lines.append("  no offload images or entries")
    return "\n".join(lines)


__all__ = ["ENTRY_SECTIONS", "GOMP_TARGET_TYPES", "OffloadBinaryEntry", "describe", "format_description",
           "is_offload_binary", "parse_nvptx_target_data", "parse_offload_binaries",
           "unwrap_image"]
