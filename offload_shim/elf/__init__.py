"""Read offload images and their entry tables from ELF files (pyelftools).

Only what the runtime needs from an x86-64 offload image: its machine, and
the records of an ``omp_offloading_entries`` section (``__tgt_offload_entry``,
32 bytes each: addr, name, size, flags, reserved; LLVM 16 omptarget.h).  In
a shared object the ``addr`` and ``name`` fields are zero in the file and
filled by ``R_X86_64_RELATIVE`` relocations, so both are resolved through the
dynamic relocation table.
"""

from __future__ import annotations

import io
import os
import struct
from collections import namedtuple

from ..errors import InvalidImageError

ENTRY_SIZE = 32
ENTRIES_SECTION = "omp_offloading_entries"
R_X86_64_RELATIVE = 8


class ElfEntry(namedtuple("ElfEntry", "name size flags addr")):
    """One offload entry read from the ELF file: ``name``, ``size`` (bytes; 0 =
    kernel), ``flags`` and ``addr`` (the record's address field)."""
    __slots__ = ()


def read_file(path) -> bytes:
    """The bytes of the image file ``path``.  Raises OSError as reading does
    (FileNotFoundError, IsADirectoryError, PermissionError...) and InvalidImageError for
    a path that is not a regular file (``/dev/zero``, a pipe, a terminal: reading it
    would never end or never return)."""
    import stat
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "Is a directory", os.fsdecode(path))
        if not stat.S_ISREG(st.st_mode):
            raise InvalidImageError(f"{os.fsdecode(path)}: not a regular file (a device, a "
                                    "pipe or a socket is not an image)")
        chunks, left = [], st.st_size
        while True:
            b = os.read(fd, max(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


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
            _check_dynamic(elf, len(data),
                           data if elf.header["e_machine"] == "EM_X86_64" else None)
        return elf.header["e_machine"]
    except ELFError as exc:
        raise InvalidImageError(f"corrupt ELF image: {exc}") from None
    except InvalidImageError:
        raise
    except Exception as exc:  # pyelftools/construct raise many kinds on bad data
        raise InvalidImageError(f"corrupt ELF image: {type(exc).__name__}: {exc}") from None


_ADDR_TAGS = {"DT_STRTAB", "DT_SYMTAB", "DT_HASH", "DT_GNU_HASH", "DT_RELA", "DT_REL",
              "DT_JMPREL", "DT_INIT", "DT_FINI", "DT_INIT_ARRAY", "DT_FINI_ARRAY",
              "DT_VERSYM", "DT_VERNEED", "DT_VERDEF", "DT_PLTGOT", "DT_RELR"}
_SIZE_TAGS = {"DT_STRSZ", "DT_RELASZ", "DT_RELSZ", "DT_PLTRELSZ", "DT_INIT_ARRAYSZ",
              "DT_FINI_ARRAYSZ", "DT_RELRSZ"}
_STRING_TAGS = {"DT_NEEDED", "DT_SONAME", "DT_RPATH", "DT_RUNPATH", "DT_AUXILIARY",
                "DT_FILTER"}

PF_X, PF_W = 1, 2
DT_RELA_VALUE = 7
DF_TEXTREL = 0x4
SYM_SIZE = 24
RELA_SIZE = 24

# Relocation types glibc's x86-64 loader applies (sysdeps/x86_64/dl-machine.h
# elf_machine_rela), with the width they write.  R_X86_64_COPY is for
# executables only (in a shared object it memcpy's st_size bytes from a
# symbol the file chooses) and is refused; other types make ld.so abort.
_RELOC_WIDTH = {0: 0, 1: 8, 2: 4, 6: 8, 7: 8, 8: 8, 10: 4, 16: 8, 17: 8, 18: 8,
                32: 4, 33: 8, 36: 16, 37: 8}
_RELOC_NAMES = {0: "NONE", 1: "64", 2: "PC32", 5: "COPY", 6: "GLOB_DAT", 7: "JUMP_SLOT",
                8: "RELATIVE", 10: "32", 16: "DTPMOD64", 17: "DTPOFF64", 18: "TPOFF64",
                32: "SIZE32", 33: "SIZE64", 36: "TLSDESC", 37: "IRELATIVE"}
R_X86_64_IRELATIVE = 37
_SYM_BINDS = {0, 1, 2, 10}                  # LOCAL GLOBAL WEAK GNU_UNIQUE
_SYM_TYPES = {0, 1, 2, 3, 4, 5, 6, 10}      # NOTYPE OBJECT FUNC SECTION FILE COMMON TLS IFUNC
STT_TLS, STT_GNU_IFUNC = 6, 10
SHN_UNDEF, SHN_ABS, SHN_COMMON = 0, 0xFFF1, 0xFFF2


def file_type(data: bytes) -> str:
    """``e_type`` as pyelftools names it (``"ET_DYN"``...); call after
    :func:`machine` accepted the data."""
    elf, _ = _elffile(data)
    return elf.header["e_type"]


def _bad(msg: str) -> InvalidImageError:
    return InvalidImageError(f"corrupt ELF image: {msg}")


class _Layout:
    """The loadable segments of a shared object, and address checks on them."""

    def __init__(self, elf, data: bytes):
        self.data = data
        self.loads = []
        size = len(data)
        hdr = elf.header
        if hdr["e_phentsize"] != 56:
            raise _bad(f"e_phentsize = {hdr['e_phentsize']} (expected 56)")
        if hdr["e_phnum"] == 0 or hdr["e_phoff"] + 56 * hdr["e_phnum"] > size:
            raise _bad("program headers outside the file")
        prev_end = None
        for seg in elf.iter_segments():
            if seg["p_type"] not in ("PT_LOAD", "PT_TLS", "PT_DYNAMIC"):
                continue
            off, filesz, memsz = seg["p_offset"], seg["p_filesz"], seg["p_memsz"]
            vaddr, align, kind = seg["p_vaddr"], seg["p_align"], seg["p_type"]
            if off + filesz > size:
                raise _bad(f"{kind} at offset {off:#x} + {filesz:#x} bytes extends past the "
                           f"end of the file ({size:#x})")
            if filesz > memsz:
                raise _bad(f"{kind} at {vaddr:#x}: p_filesz {filesz:#x} > p_memsz {memsz:#x}")
            if align > 1 and align & (align - 1):
                raise _bad(f"{kind} at {vaddr:#x}: p_align {align:#x} is not a power of two")
            if vaddr + memsz >= 1 << 47:
                raise _bad(f"{kind} at {vaddr:#x} + {memsz:#x} bytes is outside the user "
                           "address space")
            if kind != "PT_LOAD":
                continue
            if prev_end is not None and vaddr < prev_end:
                raise _bad(f"PT_LOAD at {vaddr:#x} overlaps or precedes the previous one "
                           "(they must be sorted by address)")
            prev_end = vaddr + memsz
            self.loads.append((vaddr, memsz, off, filesz, seg["p_flags"]))
        if not self.loads:
            raise _bad("shared object without a PT_LOAD segment")

    def segment(self, vaddr: int, size: int):
        for seg in self.loads:
            lo, memsz = seg[0], seg[1]
            if lo <= vaddr and vaddr + size <= lo + memsz:
                return seg
        return None

    def offset(self, vaddr: int, size: int, what: str) -> int:
        """File offset of ``[vaddr, vaddr+size)``, which must lie in the file
        part of one PT_LOAD."""
        for lo, _memsz, off, filesz, _fl in self.loads:
            if lo <= vaddr and vaddr + size <= lo + filesz:
                return off + (vaddr - lo)
        raise _bad(f"{what} at {vaddr:#x} (+{size:#x} bytes) is not inside the file part "
                   "of a loaded segment")

    def executable(self, vaddr: int) -> bool:
        seg = self.segment(vaddr, 1)
        return seg is not None and bool(seg[4] & PF_X)

    def writable(self, vaddr: int, size: int) -> bool:
        seg = self.segment(vaddr, max(size, 1))
        return seg is not None and bool(seg[4] & PF_W)


def _check_dynamic(elf, file_size: int, data: bytes | None = None) -> None:
    """The dynamic loader trusts ``PT_DYNAMIC`` and the tables it points to:
    garbage there makes ``dlopen`` (inside the plugin's load_binary) segfault
    or abort.  Refuse it here: segments inside the file and sorted; every
    tag known; address tags inside a loaded segment; sizes inside the file;
    DT_STRTAB/DT_SYMTAB present; then the tables themselves
    (:func:`_check_loader_tables`)."""
    dyn = None
    for seg in elf.iter_segments():
        if seg["p_type"] == "PT_DYNAMIC":
            dyn = seg
    if dyn is None:
        raise InvalidImageError("shared object without a PT_DYNAMIC segment")
    loads = [(s["p_vaddr"], s["p_vaddr"] + s["p_memsz"]) for s in elf.iter_segments()
             if s["p_type"] == "PT_LOAD"]
    seen: dict[str, int] = {}
    strings: list[tuple[str, int]] = []
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
        if name in _STRING_TAGS:
            strings.append((name, val))
        elif name in seen and name not in ("DT_NULL",):
            raise InvalidImageError(f"corrupt dynamic table: {name} appears twice")
        seen[name] = val
    if not {"DT_STRTAB", "DT_SYMTAB"} <= set(seen):
        raise InvalidImageError("corrupt dynamic table: no DT_STRTAB/DT_SYMTAB")
    if data is not None:
        _check_loader_tables(elf, data, dyn, seen, strings)


def _u32(data, off):
    return struct.unpack_from("<I", data, off)[0]


def _check_loader_tables(elf, data: bytes, dyn, tags: dict, strings) -> None:
    """What ld.so reads through the dynamic table, checked entry by entry:
    the string table, the hash tables (DT_GNU_HASH header: bloom size a
    power of two, buckets and chains inside the symbol table; DT_HASH), the
    symbol table (names, kinds, values inside the segments), the version
    tables, the relocations (known x86-64 types, ``r_offset`` inside a
    writable PT_LOAD, symbol index inside the table, RELACOUNT), RELR and the
    init/fini functions."""
    L = _Layout(elf, data)
    for seg in elf.iter_segments():
        if seg["p_type"] == "PT_GNU_RELRO" and seg["p_memsz"]:
            lo, n = seg["p_vaddr"], seg["p_memsz"]
            if not L.writable(lo, n):
                raise _bad(f"PT_GNU_RELRO {lo:#x} (+{n:#x} bytes) is not inside a writable "
                           "loaded segment")
    L.offset(dyn["p_vaddr"], dyn["p_filesz"], "PT_DYNAMIC")
    if dyn["p_filesz"] % 16:
        raise _bad(f"PT_DYNAMIC size {dyn['p_filesz']} is not a multiple of 16")
    for name, want in (("DT_SYMENT", SYM_SIZE), ("DT_RELAENT", RELA_SIZE), ("DT_RELRENT", 8)):
        if name in tags and tags[name] != want:
            raise _bad(f"{name} = {tags[name]} (expected {want})")
    if "DT_REL" in tags or "DT_RELSZ" in tags:
        raise _bad("DT_REL relocations in an x86-64 image (x86-64 uses DT_RELA)")
    if "DT_PLTREL" in tags and tags["DT_PLTREL"] != DT_RELA_VALUE:
        raise _bad(f"DT_PLTREL = {tags['DT_PLTREL']} (x86-64 uses DT_RELA = 7)")
    for a, b in (("DT_RELA", "DT_RELASZ"), ("DT_JMPREL", "DT_PLTRELSZ"),
                 ("DT_INIT_ARRAY", "DT_INIT_ARRAYSZ"), ("DT_FINI_ARRAY", "DT_FINI_ARRAYSZ"),
                 ("DT_RELR", "DT_RELRSZ"), ("DT_VERNEED", "DT_VERNEEDNUM"),
                 ("DT_VERDEF", "DT_VERDEFNUM")):
        if (a in tags) != (b in tags):
            raise _bad(f"{a} without {b}" if a in tags else f"{b} without {a}")

    # string table
    strtab, strsz = tags["DT_STRTAB"], tags.get("DT_STRSZ", 0)
    if strsz == 0:
        raise _bad("DT_STRSZ missing or 0")
    str_off = L.offset(strtab, strsz, "DT_STRTAB")
    if data[str_off + strsz - 1] != 0:
        raise _bad("the dynamic string table does not end with a NUL byte")
    for name, val in strings:
        if val >= strsz:
            raise _bad(f"{name} string offset {val} outside DT_STRSZ {strsz}")

    # symbol count, from the hash tables
    nsyms = None
    if "DT_GNU_HASH" in tags:
        nsyms = _check_gnu_hash(L, data, tags["DT_GNU_HASH"])
    if "DT_HASH" in tags:
        h_off = L.offset(tags["DT_HASH"], 8, "DT_HASH")
        nbucket, nchain = struct.unpack_from("<II", data, h_off)
        if nbucket == 0:
            raise _bad("DT_HASH with 0 buckets")
        h_off = L.offset(tags["DT_HASH"], 8 + 4 * (nbucket + nchain), "DT_HASH table")
        vals = struct.unpack_from(f"<{nbucket + nchain}I", data, h_off + 8)
        if any(v >= nchain for v in vals):
            raise _bad(f"DT_HASH bucket/chain index >= nchain {nchain}")
        if nsyms is not None and nsyms > nchain:
            raise _bad(f"DT_GNU_HASH covers {nsyms} symbols but DT_HASH only {nchain}")
        nsyms = nchain
    symtab = tags["DT_SYMTAB"]
    sec_count = None
    for sec in elf.iter_sections():
        if sec["sh_type"] == "SHT_DYNSYM" and sec["sh_addr"] == symtab:
            if sec["sh_entsize"] not in (0, SYM_SIZE) or sec["sh_size"] % SYM_SIZE:
                raise _bad(f".dynsym size {sec['sh_size']} / entsize {sec['sh_entsize']} "
                           "inconsistent")
            sec_count = sec["sh_size"] // SYM_SIZE

    # relocations (parsed first: their symbol indices bound the table too)
    relocs = []
    for tab, sz in (("DT_RELA", "DT_RELASZ"), ("DT_JMPREL", "DT_PLTRELSZ")):
        if tab not in tags:
            continue
        size = tags[sz]
        if size % RELA_SIZE:
            raise _bad(f"{sz} = {size} is not a multiple of {RELA_SIZE}")
        off = L.offset(tags[tab], size, tab)
        for i in range(size // RELA_SIZE):
            r_offset, r_info, r_addend = struct.unpack_from("<QQq", data, off + i * RELA_SIZE)
            relocs.append((tab, i, r_offset, r_info & 0xFFFFFFFF, r_info >> 32, r_addend))
    max_sym = max((r[4] for r in relocs), default=0)
    if "DT_HASH" not in tags:
        # DT_GNU_HASH only bounds the table from below: the symbols before symoffset
        # (undefined ones, which lld and ld put there) are not hashed, and a table with
        # no hashed symbol at all (an image without kernels: imports only) has empty
        # buckets and a symoffset of 1.  The section header, when there is one, gives
        # the size; without it the relocations do.
        lower = nsyms or 0
        if sec_count is not None:
            if lower > sec_count:
                raise _bad(f"the hash table covers {lower} symbols but .dynsym has "
                           f"{sec_count}")
            nsyms = sec_count
        else:
            nsyms = max(lower, max_sym + 1)
    if max_sym >= nsyms:
        raise _bad(f"a relocation refers to symbol {max_sym} but the symbol table has "
                   f"{nsyms} entries")
    if sec_count is not None and nsyms > sec_count:
        raise _bad(f"the hash table covers {nsyms} symbols but .dynsym has {sec_count}")
    sym_off = L.offset(symtab, nsyms * SYM_SIZE, "DT_SYMTAB")
    syms = []
    for i in range(nsyms):
        st_name, st_info, st_other, st_shndx, st_value, _size = struct.unpack_from(
            "<IBBHQQ", data, sym_off + i * SYM_SIZE)
        syms.append((st_info, st_shndx, st_value))
        if i == 0:
            continue
        bind, typ = st_info >> 4, st_info & 0xF
        what = f"dynamic symbol {i}"
        if st_name >= strsz:
            raise _bad(f"{what}: name offset {st_name} outside DT_STRSZ {strsz}")
        if bind not in _SYM_BINDS or typ not in _SYM_TYPES:
            raise _bad(f"{what}: unknown binding/type {st_info:#x}")
        if st_shndx == SHN_UNDEF:
            if bind == 0:
                raise _bad(f"{what}: an undefined local symbol")
            if st_other & 3:
                raise _bad(f"{what}: undefined but not of default visibility (the loader "
                           "would bind it to the image base)")
        elif st_shndx not in (SHN_ABS, SHN_COMMON) and typ != STT_TLS:
            if typ == STT_GNU_IFUNC and not L.executable(st_value):
                raise _bad(f"{what}: IFUNC resolver {st_value:#x} outside the code segments")
            if L.segment(st_value, 0) is None:
                raise _bad(f"{what}: value {st_value:#x} outside the loaded segments")

    if "DT_VERSYM" in tags:
        _check_versions(L, data, tags, strsz, nsyms)

    # relocation entries
    textrel = "DT_TEXTREL" in tags or bool(tags.get("DT_FLAGS", 0) & DF_TEXTREL)
    relacount = tags.get("DT_RELACOUNT")
    n_rela = tags.get("DT_RELASZ", 0) // RELA_SIZE
    if relacount is not None and relacount > n_rela:
        raise _bad(f"DT_RELACOUNT {relacount} > {n_rela} DT_RELA entries")
    targets: dict[int, tuple[int, int, int]] = {}
    for tab, i, r_offset, rtype, rsym, addend in relocs:
        what = f"{tab} entry {i}"
        if rtype not in _RELOC_WIDTH:
            name = _RELOC_NAMES.get(rtype)
            raise _bad(f"{what}: relocation type {rtype}"
                       + (f" (R_X86_64_{name}) is not allowed in a shared object" if name
                          else " is not an x86-64 type the dynamic loader applies"))
        if tab == "DT_RELA" and relacount is not None and i < relacount and rtype != 8:
            raise _bad(f"{what}: among the first DT_RELACOUNT={relacount} entries but not "
                       "R_X86_64_RELATIVE")
        if tab == "DT_JMPREL" and rtype not in (7, 37, 36):
            raise _bad(f"{what}: type {rtype} in the PLT relocations")
        width = _RELOC_WIDTH[rtype]
        if width:
            ok = L.writable(r_offset, width) or (textrel and L.segment(r_offset, width))
            if not ok:
                raise _bad(f"{what}: r_offset {r_offset:#x} is not inside a writable loaded "
                           "segment")
        if rtype in (6, 7) and rsym == 0:
            raise _bad(f"{what}: R_X86_64_{_RELOC_NAMES[rtype]} without a symbol (the loader "
                       "would store the image base in a function pointer)")
        if rtype == R_X86_64_IRELATIVE and not L.executable(addend):
            raise _bad(f"{what}: IRELATIVE resolver {addend:#x} outside the code segments")
        targets[r_offset] = (rtype, rsym, addend)

    if "DT_RELR" in tags:
        _check_relr(L, data, tags["DT_RELR"], tags["DT_RELRSZ"], targets)

    # functions the loader calls
    for name in ("DT_INIT", "DT_FINI"):
        if name in tags and not L.executable(tags[name]):
            raise _bad(f"{name} = {tags[name]:#x} outside the code segments")
    for arr, sz in (("DT_INIT_ARRAY", "DT_INIT_ARRAYSZ"), ("DT_FINI_ARRAY", "DT_FINI_ARRAYSZ")):
        if arr not in tags:
            continue
        base, size = tags[arr], tags[sz]
        if size % 8:
            raise _bad(f"{sz} = {size} is not a multiple of 8")
        if size and L.segment(base, size) is None:
            raise _bad(f"{arr} at {base:#x} (+{size} bytes) outside the loaded segments")
        for k in range(size // 8):
            slot = base + 8 * k
            rel = targets.get(slot)
            if rel is None:
                raise _bad(f"{arr}[{k}] at {slot:#x} is not relocated (the loader would "
                           "call an unrelocated address)")
            rtype, rsym, addend = rel
            if addend is None:          # RELR: the addend is the value in the file
                (addend,) = struct.unpack_from("<Q", data, L.offset(slot, 8, arr))
            if rtype == 8 and not L.executable(addend):
                raise _bad(f"{arr}[{k}] = {addend:#x} outside the code segments")


def _check_gnu_hash(L: _Layout, data: bytes, addr: int) -> int:
    """Check a DT_GNU_HASH table; returns the number of symbols it covers."""
    off = L.offset(addr, 16, "DT_GNU_HASH header")
    nbuckets, symoffset, bloom_size, bloom_shift = struct.unpack_from("<IIII", data, off)
    if nbuckets == 0:
        raise _bad("DT_GNU_HASH with 0 buckets")
    if bloom_size == 0 or bloom_size & (bloom_size - 1):
        raise _bad(f"DT_GNU_HASH bloom filter size {bloom_size} is not a power of two")
    if bloom_shift >= 64:
        raise _bad(f"DT_GNU_HASH bloom shift {bloom_shift} >= 64")
    head = 16 + 8 * bloom_size + 4 * nbuckets
    off = L.offset(addr, head, "DT_GNU_HASH buckets")
    buckets = struct.unpack_from(f"<{nbuckets}I", data, off + 16 + 8 * bloom_size)
    nonzero = [b for b in buckets if b]
    if any(b < symoffset for b in nonzero):
        raise _bad(f"DT_GNU_HASH bucket below symoffset {symoffset}")
    if not nonzero:
        return symoffset
    # walk to the end of the last chain; every chain ends with its low bit set
    last = max(nonzero)
    limit = 1 << 20
    idx = last
    while True:
        c_off = L.offset(addr + head + 4 * (idx - symoffset), 4, "DT_GNU_HASH chain")
        if _u32(data, c_off) & 1:
            break
        idx += 1
        if idx - last > limit:
            raise _bad("DT_GNU_HASH chain does not end")
    return idx + 1


def _check_versions(L: _Layout, data: bytes, tags: dict, strsz: int, nsyms: int) -> None:
    """DT_VERSYM indices must name a version that DT_VERNEED/DT_VERDEF define,
    and those chains must stay inside the file (ld.so follows vn_next etc.)."""
    highest = 1
    for tab, num, entsz in (("DT_VERNEED", "DT_VERNEEDNUM", 16), ("DT_VERDEF", "DT_VERDEFNUM", 20)):
        if tab not in tags:
            continue
        addr = tags[tab]
        for k in range(tags[num]):
            off = L.offset(addr, entsz, f"{tab} entry {k}")
            if tab == "DT_VERNEED":
                ver, cnt, vn_file, vn_aux, vn_next = struct.unpack_from("<HHIII", data, off)
                if ver != 1 or vn_file >= strsz:
                    raise _bad(f"{tab} entry {k}: bad version {ver} or file name {vn_file}")
                aux = addr + vn_aux
                for _j in range(cnt):
                    a_off = L.offset(aux, 16, f"{tab} entry {k} aux")
                    _h, _f, other, name, nxt = struct.unpack_from("<IHHII", data, a_off)
                    if name >= strsz:
                        raise _bad(f"{tab} entry {k}: version name offset {name} outside "
                                   "DT_STRSZ")
                    highest = max(highest, other & 0x7FFF)
                    aux += nxt
            else:
                ver, _fl, ndx, cnt, _h, vd_aux, vn_next = struct.unpack_from("<HHHHIII",
                                                                            data, off)
                if ver != 1:
                    raise _bad(f"{tab} entry {k}: bad version {ver}")
                highest = max(highest, ndx & 0x7FFF)
                aux = addr + vd_aux
                for _j in range(cnt):
                    a_off = L.offset(aux, 8, f"{tab} entry {k} aux")
                    name, nxt = struct.unpack_from("<II", data, a_off)
                    if name >= strsz:
                        raise _bad(f"{tab} entry {k}: version name offset {name} outside "
                                   "DT_STRSZ")
                    aux += nxt
            if vn_next == 0 and k + 1 < tags[num]:
                raise _bad(f"{tab} chain ends after {k + 1} of {tags[num]} entries")
            addr += vn_next
    off = L.offset(tags["DT_VERSYM"], 2 * nsyms, "DT_VERSYM")
    for i, v in enumerate(struct.unpack_from(f"<{nsyms}H", data, off)):
        if (v & 0x7FFF) > highest:
            raise _bad(f"DT_VERSYM[{i}] = {v & 0x7FFF} names no version (highest {highest})")


def _check_relr(L: _Layout, data: bytes, addr: int, size: int, targets: dict) -> None:
    if size % 8:
        raise _bad(f"DT_RELRSZ = {size} is not a multiple of 8")
    off = L.offset(addr, size, "DT_RELR")
    where = None
    for k in range(size // 8):
        (entry,) = struct.unpack_from("<Q", data, off + 8 * k)
        if entry & 1 == 0:
            if not L.writable(entry, 8):
                raise _bad(f"DT_RELR[{k}] address {entry:#x} not inside a writable segment")
            targets[entry] = (8, 0, None)
            where = entry + 8
        else:
            if where is None:
                raise _bad(f"DT_RELR[{k}]: a bitmap before any address")
            bits = entry >> 1
            for b in range(63):
                if bits >> b & 1:
                    a = where + 8 * b
                    if not L.writable(a, 8):
                        raise _bad(f"DT_RELR[{k}] covers {a:#x} outside a writable segment")
                    targets[a] = (8, 0, None)
            where += 8 * 63


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


def symbol_sizes(data: bytes, names) -> dict[str, int]:
    """``{name: st_size}`` of the defined data symbols (``STT_OBJECT``) among ``names``
    in the image's ``.dynsym`` and ``.symtab`` (pyelftools); a name with no such
    symbol is left out.  What the device side of a global holds: a plugin copies a
    global entry's host-table ``size`` bytes to or from the symbol's address (LLVM 16
    ``DeviceTy::submitData`` of a global, GCC ``gomp_map_vars`` of a ``declare target``
    variable), so a larger declared size writes past the symbol.  Raises
    InvalidImageError for a corrupt ELF."""
    want = set(names)
    out: dict[str, int] = {}
    if not want:
        return out
    elf, ELFError = _elffile(data)
    try:
        for sec in elf.iter_sections():
            if sec["sh_type"] not in ("SHT_DYNSYM", "SHT_SYMTAB"):
                continue
            for sym in sec.iter_symbols():
                if (sym.name in want and sym["st_info"]["type"] == "STT_OBJECT"
                        and sym["st_shndx"] != "SHN_UNDEF"):
                    out[sym.name] = max(out.get(sym.name, 0), int(sym["st_size"]))
    except ELFError as exc:
        raise InvalidImageError(f"corrupt ELF image: {exc}") from None
    return out
