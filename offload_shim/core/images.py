"""Offload images, the image registry and the host->target address map.

* :class:`OffloadImage`: device code bytes (an x86-64 ELF shared object for
  the host plugins) plus its *host entries*, one per kernel or global, in the
  order the target table must follow (``__tgt_offload_entry``: name, size in
  bytes, 0 = function).  Each entry gets a real host address: a one-byte
  anchor for a kernel, a host copy of ``size`` bytes for a global (libomptarget
  uses the host function/variable address as the key of its map).
* :class:`AddressMap`: host range -> target address, per device (libgomp's
  splay tree of ``[host_start, host_end) -> tgt``; libgomp GOMP_offload_register_ver).
* :class:`ImageRegistry`: the registered images, in registration order; what
  is registered but not loaded into a device is that device's pending list
  (GOMP_offload_register_ver, llvm-project #77798).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import os
import threading
from collections import namedtuple
from collections.abc import Iterable, Mapping

from .. import elf
from ..abi import buffers
from ..errors import InvalidImageError

_ids = itertools.count(1)

#: the code deciding an image's ELF verdict (safety/verdicts.py: a change re-checks)
_ELF_CHECKERS = ("offload_shim.elf",)


def _checked_elf(data: bytes) -> tuple[str, str]:
    """(``e_machine``, ``e_type``) of ``data`` after :func:`offload_shim.elf.machine`'s
    structural checks, which guard against hostile bytes only: the verdict (a pass or
    the refusal's message) is stored by content hash across runs
    (:mod:`offload_shim.safety.verdicts`), so the next process that registers the same
    image skips them.  Raises InvalidImageError."""
    from ..safety import verdicts
    digest = verdicts.sha256(data)
    stored = verdicts.get("elf", _ELF_CHECKERS, digest)
    if stored:
        if isinstance(stored.get("error"), str):
            raise InvalidImageError(stored["error"])
        if isinstance(stored.get("machine"), str) and isinstance(stored.get("type"), str):
            return stored["machine"], stored["type"]
    try:
        machine = elf.machine(data)
    except InvalidImageError as exc:
        verdicts.put("elf", _ELF_CHECKERS, digest, {"error": str(exc)})
        raise
    etype = elf.file_type(data)
    verdicts.put("elf", _ELF_CHECKERS, digest, {"machine": machine, "type": etype})
    return machine, etype


@functools.lru_cache(maxsize=32)
def _symbol_sizes(data: bytes, names: tuple) -> dict:
    """:func:`offload_shim.elf.symbol_sizes`, remembered for the images this process
    builds again and again (``OffloadImage.sample()``: 3 ms a parse)."""
    return elf.symbol_sizes(data, names)


class HostEntry(namedtuple("HostEntry", "name size flags num_args", defaults=(0, 0, None))):
    """A host entry: ``name`` of the kernel or global, ``size`` in bytes
    (0 = kernel), ``flags`` (``__tgt_offload_entry.flags``), ``num_args``
    (kernel arity, needed by the GOMP ABI of the bundled plugin; None if
    unknown)."""
    __slots__ = ()

    @property
    def is_kernel(self) -> bool:
        return self.size == 0


#: arity of the kernels in native/samples/kernels.c
SAMPLE_KERNEL_ARGS = {"vec_add": 4, "axpy": 4, "increment": 2, "scale_by_global": 2}


class OffloadImage:
    """Device code plus host entries.

    ``data``: image bytes; ``entries``: list of HostEntry in target-table
    order; ``name``: a label.  Raises InvalidImageError for data that is
    not ELF or is corrupt, ValueError for bad entries (duplicate names,
    negative sizes).  Objects are immutable after creation (apart from the
    plugins' verdicts they remember, :meth:`accepted_by`) and hashable by
    identity (an image registered twice is the same registration).

    ``trusted``: the bytes come from a library this process already loaded
    (the interposer's images): :meth:`Runtime.register_image` then skips the
    test ``dlopen`` in a child process (:meth:`verify_loadable`).
    """

    def __init__(self, data: bytes, entries: Iterable[HostEntry], *, name: str = "image",
                 host_addresses: Iterable[int] | None = None, machine: str | None = None,
                 trusted: bool = False):
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("image data must be bytes")
        self.data = bytes(data)
        self.entries = [e if isinstance(e, HostEntry) else HostEntry(*e) for e in entries]
        names = [e.name for e in self.entries]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate entry names in image {name!r}")
        for e in self.entries:
            if e.size < 0:
                raise ValueError(f"entry {e.name!r}: negative size")
            if not e.name:
                raise ValueError("entry with an empty name")
        self.name = name
        self.id = next(_ids)
        self.trusted = bool(trusted)
        self._elf_type: str | None = None
        if machine is not None:
            # not an ELF image (a GCC mkoffload image, e.g. "nvptx" PTX text)
            self.machine = machine
        else:
            try:
                self.machine, self._elf_type = _checked_elf(self.data)
                if not self.trusted:
                    self._check_global_sizes()
            except InvalidImageError as exc:
                raise InvalidImageError(f"image {name!r}: {exc}") from None
        self._lock = threading.Lock()
        self._anchors = None
        self._accepted: dict[int, bool] = {}      # id(plugin) -> is_valid_binary
        self._host_addrs: list[int] | None = None
        if host_addresses is not None:
            # Real host addresses (a compiled library's own functions/region ids
            # and globals, from its __tgt_offload_entry table); the caller keeps that
            # memory alive (the library stays loaded while the image is registered).
            addrs = [int(a) for a in host_addresses]
            if len(addrs) != len(self.entries):
                raise ValueError(f"image {name!r}: {len(addrs)} host addresses for "
                                 f"{len(self.entries)} entries")
            if any(a <= 0 for a in addrs):
                raise ValueError(f"image {name!r}: host addresses must be non-NULL "
                                 "(LLVM 16 plugins reject NULL entries)")
            self._host_addrs = addrs

    def _check_global_sizes(self) -> None:
        """Refuse a plain global entry (``flags`` 0) whose ``size`` exceeds the
        image's symbol of that name (:func:`offload_shim.elf.symbol_sizes`): copies
        to and from the global move ``size`` bytes at the symbol's device address,
        so a larger size writes past it (a crash in the plugin, or silently another
        variable).  Entries of compiled libraries come from the compiler and are
        trusted; this checks entries a caller wrote.  Raises InvalidImageError."""
        plain = {e.name: e.size for e in self.entries if e.size > 0 and not e.flags}
        if not plain:
            return
        for name, have in _symbol_sizes(self.data, tuple(sorted(plain))).items():
            if have and plain[name] > have:
                raise InvalidImageError(
                    f"entry {name!r} declares {plain[name]} bytes but the image's symbol "
                    f"{name!r} holds {have}: copies of the global would write past it")

    # constructors ------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | os.PathLike, entries: Iterable[HostEntry] | None = None,
                  *, num_args: Mapping[str, int] | None = None) -> "OffloadImage":
        """Read an image file (``path``: a str, bytes or os.PathLike, as
        :func:`~offload_shim.load_plugin` takes).  Without ``entries`` they come
        from the image's ``omp_offloading_entries`` section (elf.offload_entries).
        Raises FileNotFoundError, IsADirectoryError, InvalidImageError (not ELF,
        corrupt, no entries), TypeError naming what was given for another type."""
        if isinstance(path, (bytes, bytearray)) or hasattr(path, "__fspath__"):
            path = os.fsdecode(bytes(path) if isinstance(path, bytearray) else path)
        elif not isinstance(path, str):
            raise TypeError(f"image path must be str, bytes or os.PathLike, not "
                            f"{type(path).__name__}")
        from pathlib import Path            # here, not at import: start-up of every run
        p = Path(path)
        data = elf.read_file(p)
        if entries is None:
            try:
                recs = elf.offload_entries(data)
            except InvalidImageError as exc:
                raise InvalidImageError(f"image {p.name!r}: {exc}") from None
            if not recs:
                raise InvalidImageError(f"image {p.name!r} has no {elf.ENTRIES_SECTION} "
                                        "section: pass entries=[HostEntry(...)]")
            arity = dict(num_args or {})
            entries = [HostEntry(r.name, r.size, r.flags, arity.get(r.name)) for r in recs]
        return cls(data, entries, name=p.name)

    @classmethod
    def sample(cls) -> "OffloadImage":
        """The sample image built from ``native/samples/kernels.c``: kernels
        ``vec_add(a, b, c, n)``, ``axpy(y, x, alpha_ptr, n)``,
        ``increment(p, n)``, ``scale_by_global(y, n)`` and the global
        ``osh_scale`` (double, 3.0)."""
        from ..abi.native import sample_image_path
        return cls.from_file(sample_image_path(), num_args=SAMPLE_KERNEL_ARGS)

    # safety --------------------------------------------------------------------
    @property
    def needs_loader_check(self) -> bool:
        """True for an untrusted x86-64 ``ET_DYN`` image: the host plugins
        ``dlopen`` those bytes, so :meth:`verify_loadable` tries that first
        in a child process."""
        return (not self.trusted and self.machine == "EM_X86_64"
                and self._elf_type == "ET_DYN")

    def verify_loadable(self) -> None:
        """``dlopen`` the bytes in a child process (cached per content for the
        process, :func:`offload_shim.safety.isolation.verify_image`); raises
        InvalidImageError when the dynamic loader crashes, aborts or refuses
        them.  No-op for trusted images and non-x86-64/non-ET_DYN ones.
        Code that the image's kernels run later cannot be checked this way."""
        if self.needs_loader_check:
            from ..safety.isolation import verify_image
            verify_image(self.data, name=self.name)

    # views ---------------------------------------------------------------------
    @property
    def kernels(self) -> list[str]:
        return [e.name for e in self.entries if e.is_kernel]

    @property
    def globals(self) -> list[str]:
        return [e.name for e in self.entries if not e.is_kernel]

    def entry(self, name: str) -> HostEntry:
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(name)

    def num_args(self, name: str) -> int:
        n = self.entry(name).num_args
        if n is None:
            raise InvalidImageError(f"image {self.name!r}: arity of kernel {name!r} unknown "
                                    "(needed by the GOMP ABI): pass num_args=")
        return n

    def accepted_by(self, plugin) -> bool:
        """``plugin.is_valid_binary(self)``, asked once per plugin and remembered
        with the image (so it goes when the image is dropped: nothing per image is
        left in a runtime that unregistered it).  Plugins are process-wide and
        never unloaded, so ``id(plugin)`` names one for the image's lifetime.
        Raises what ``is_valid_binary`` raises (LifecycleError before the plugin
        is initialised)."""
        key = id(plugin)
        ok = self._accepted.get(key)
        if ok is None:
            ok = self._accepted[key] = bool(plugin.is_valid_binary(self))
        return ok

    def data_address(self) -> int:
        """The address of the first of ``len(self.data)`` image bytes, for a plugin
        to read: :attr:`data` itself, not a copy (the one copy of the image's bytes
        this package holds).  Valid while :attr:`data` is referenced: a caller
        handing it to a plugin keeps ``self.data`` as long as the plugin may read
        there."""
        return buffers.bytes_address(self.data)

    def host_addresses(self) -> list[int]:
        """One host address per entry: an anchor byte for kernels, a zeroed
        host copy of ``size`` bytes for globals; or the ``host_addresses``
        given at construction (the real ones of a compiled library)."""
        with self._lock:
            if self._host_addrs is None:
                base, anchors = buffers.new_buffer(len(self.entries))
                keep = [anchors]
                addrs = []
                for i, e in enumerate(self.entries):
                    if e.is_kernel:
                        addrs.append(base + i)
                    else:
                        addr, buf = buffers.new_buffer(e.size)
                        keep.append(buf)
                        addrs.append(addr)
                self._anchors = keep
                self._host_addrs = addrs
            return list(self._host_addrs)

    def host_address(self, name: str) -> int:
        for e, a in zip(self.entries, self.host_addresses()):
            if e.name == name:
                return a
        raise KeyError(name)

    def __repr__(self) -> str:
        return f"OffloadImage(<{len(self.data)} bytes>, {self.entries!r}, name={self.name!r})"


class AddressMap:
    """Host range -> target address (one per device).

    ``insert(host_start, size, tgt, owner)``: map ``[host_start,
    host_start+max(size,1))``; overlapping ranges are refused (ValueError).
    ``lookup(host_addr)`` -> target address of that byte (KeyError when
    unmapped).  ``remove_owner(owner)`` drops every range of one image.
    Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._starts: list[int] = []
        self._ranges: list[tuple[int, int, int, object]] = []  # (start, end, tgt, owner)

    def insert(self, host_start: int, size: int, tgt: int, owner: object) -> None:
        end = host_start + max(int(size), 1)
        with self._lock:
            i = bisect.bisect_right(self._starts, host_start)
            if i > 0 and self._ranges[i - 1][1] > host_start:
                raise ValueError(f"host range {host_start:#x} already mapped")
            if i < len(self._ranges) and self._ranges[i][0] < end:
                raise ValueError(f"host range {host_start:#x}+{size} overlaps a mapping")
            self._starts.insert(i, host_start)
            self._ranges.insert(i, (host_start, end, tgt, owner))

    def lookup(self, host_addr: int) -> int:
        with self._lock:
            i = bisect.bisect_right(self._starts, host_addr) - 1
            if i >= 0:
                start, end, tgt, _ = self._ranges[i]
                if host_addr < end:
                    return tgt + (host_addr - start)
        raise KeyError(hex(host_addr))

    def remove_owner(self, owner: object) -> int:
        with self._lock:
            keep = [r for r in self._ranges if r[3] is not owner]
            removed = len(self._ranges) - len(keep)
            self._ranges = keep
            self._starts = [r[0] for r in keep]
            return removed

    def items(self) -> list[tuple[int, int, int]]:
        """``[(host_start, host_end, tgt), ...]`` sorted by host address."""
        with self._lock:
            return [(s, e, t) for s, e, t, _ in self._ranges]

    def __len__(self) -> int:
        return len(self._ranges)


class ImageRegistry:
    """Registered images in registration order (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._images: dict[int, OffloadImage] = {}

    def add(self, image: OffloadImage) -> bool:
        with self._lock:
            if image.id in self._images:
                return False
            self._images[image.id] = image
            return True

    def remove(self, image: OffloadImage) -> bool:
        with self._lock:
            return self._images.pop(image.id, None) is not None

    def __contains__(self, image: OffloadImage) -> bool:
        return image.id in self._images

    def snapshot(self) -> list[OffloadImage]:
        with self._lock:
            return list(self._images.values())

    def __len__(self) -> int:
        return len(self._images)
