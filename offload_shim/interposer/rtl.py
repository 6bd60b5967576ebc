"""Registration of compiled libraries and OpenMP device numbering.

Mirrors libomptarget 16 ``rtl.cpp`` (``RTLsTy::registerLib`` / ``unregisterLib``: each
device image goes to the plugins that accept it, a plugin's devices are appended to the
device list when it first accepts an image) and ``omptarget.cpp``
``getExecutableImage`` (clang 16 wraps each device image in an OffloadBinary).

``__tgt_bin_desc`` (``omptarget.h``, unchanged from LLVM 12 to 22)::

    struct __tgt_bin_desc {            // 32 bytes
      int32_t NumDeviceImages;         // + 4 bytes padding
      __tgt_device_image *DeviceImages;
      __tgt_offload_entry *HostEntriesBegin, *HostEntriesEnd;
    };
    struct __tgt_device_image {        // 32 bytes
      void *ImageStart, *ImageEnd;
      __tgt_offload_entry *EntriesBegin, *EntriesEnd;
    };

The offload entry record is not stable across compilers: :data:`ENTRY_LAYOUTS` lists
the layouts known here and :func:`entry_layout` picks one per entry table, so a new
layout is one more :class:`EntryLayout`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable

from ..abi import interposer as _abi
from ..core.images import HostEntry, OffloadImage
from ..elf.imageinfo import unwrap_image
from ..errors import InvalidImageError, OffloadError

_BIN_DESC = struct.Struct("<i4xQQQ")
_DEVICE_IMAGE = struct.Struct("<QQQQ")


@dataclass(frozen=True)
class EntryRecord:
    """One decoded offload entry: host ``addr``, ``name``, ``size`` (bytes; 0 =
    function/kernel), ``flags`` (``OMP_DECLARE_TARGET_*``)."""
    addr: int
    name: str
    size: int
    flags: int


@dataclass(frozen=True)
class EntryLayout:
    """An offload-entry record layout: ``size`` bytes per record, ``decode(raw
    bytes) -> (addr, name pointer, size, flags)``, ``matches(first record bytes) ->
    bool`` (whether a table that starts with this record uses the layout)."""
    name: str
    size: int
    decode: Callable[[bytes], tuple[int, int, int, int]]
    matches: Callable[[bytes], bool]


def _decode_v0(raw: bytes) -> tuple[int, int, int, int]:
    addr, name, size, flags, _reserved = struct.unpack("<QQQii", raw)
    return addr, name, size, flags


#: ``__tgt_offload_entry`` of LLVM <= 19 (``{void *addr; char *name; size_t size;
#: int32_t flags; int32_t reserved;}``, 32 bytes): clang 16 emits it.
TGT_OFFLOAD_ENTRY = EntryLayout("__tgt_offload_entry", 32, _decode_v0, lambda raw: True)

#: the layouts tried in order by :func:`entry_layout`
ENTRY_LAYOUTS: tuple[EntryLayout, ...] = (TGT_OFFLOAD_ENTRY,)


def entry_layout(begin: int, end: int) -> EntryLayout:
    """The layout of the entry table ``[begin, end)`` (the first of
    :data:`ENTRY_LAYOUTS` whose ``matches`` accepts the first record and whose size
    divides the table).  Raises InvalidImageError when none does."""
    span = end - begin
    for layout in ENTRY_LAYOUTS:
        if span % layout.size:
            continue
        if span == 0 or layout.matches(_abi.read_bytes(begin, layout.size)):
            return layout
    raise InvalidImageError(f"offload entry table [{begin:#x}, {end:#x}) matches no known "
                            f"entry layout ({[l.name for l in ENTRY_LAYOUTS]})")


def read_entries(begin: int, end: int) -> list[EntryRecord]:
    """The offload entries of ``[begin, end)`` in the process's memory."""
    if not begin or end <= begin:
        return []
    layout = entry_layout(begin, end)
    out = []
    for k in range((end - begin) // layout.size):
        addr, name, size, flags = layout.decode(_abi.read_bytes(begin + k * layout.size,
                                                                layout.size))
        out.append(EntryRecord(addr, _abi.read_cstring(name).decode(errors="replace")
                               if name else "", size, flags))
    return out


@dataclass(frozen=True)
class DecodedImage:
    """One ``__tgt_device_image``: its bytes (unwrapped from an OffloadBinary, as
    libomptarget 16 ``getExecutableImage`` does), ``strings`` of the OffloadBinary
    (``triple``, ``arch``; {} for a bare image) and its entries."""
    data: bytes
    strings: dict
    entries: list[EntryRecord]


def decode_bin_desc(desc: int) -> list[DecodedImage]:
    """The device images of the ``__tgt_bin_desc`` at ``desc``."""
    n, images, _hb, _he = _BIN_DESC.unpack(_abi.read_bytes(desc, _BIN_DESC.size))
    out = []
    for i in range(max(n, 0)):
        start, end, eb, ee = _DEVICE_IMAGE.unpack(
            _abi.read_bytes(images + i * _DEVICE_IMAGE.size, _DEVICE_IMAGE.size))
        data = _abi.read_bytes(start, end - start) if end > start else b""
        data, strings = unwrap_image(data)
        out.append(DecodedImage(data, strings, read_entries(eb, ee)))
    return out


class Registrations:
    """The libraries registered through ``__tgt_register_lib`` and the OpenMP device
    list over one :class:`~offload_shim.Runtime` (libomptarget 16 ``RTLsTy``).

    ``libraries``: ``__tgt_bin_desc`` address -> its registered OffloadImages;
    ``unsupported``: ``(desc, message)`` of images no plugin accepted (skipped, as
    libomptarget does); ``devices``: OpenMP device numbers 0..n-1; ``requires_flags``:
    the last ``__tgt_register_requires`` value.  Not thread-safe: the interposer's
    lock guards it."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.libraries: dict[int, list[OffloadImage]] = {}
        self.unsupported: list[tuple[int, str]] = []
        self.devices: list = []
        self.requires_flags = 0
        self._used_plugins: list = []

    def register_lib(self, desc: int) -> list[OffloadImage]:
        """``__tgt_register_lib``: one OffloadImage per device image, registered
        with the runtime (pending or loaded at once, seed 000); the devices of a
        plugin that accepts one for the first time are appended to :attr:`devices`.
        Returns the images registered (empty for a descriptor seen before)."""
        if desc in self.libraries:
            return []
        images = []
        for i, dec in enumerate(decode_bin_desc(desc)):
            label = f"desc@{desc:#x}#{i}"
            try:
                # trusted: the bytes are part of a library this process just loaded
                img = OffloadImage(dec.data, [HostEntry(e.name, e.size, e.flags)
                                              for e in dec.entries],
                                   name=label, host_addresses=[e.addr for e in dec.entries],
                                   trusted=True)
            except (InvalidImageError, ValueError) as exc:
                self.unsupported.append((desc, f"{label}: {exc}"))
                continue
            try:
                self.runtime.register_image(img)
            except InvalidImageError as exc:
                self.unsupported.append((desc, f"{label}: {exc}"))
                continue
            images.append(img)
            for p in self.runtime.plugins:
                if p not in self._used_plugins and p.is_valid_binary(img):
                    self._used_plugins.append(p)
                    self.devices.extend(d for d in self.runtime.devices if d.plugin is p)
        self.libraries[desc] = images
        return images

    def unregister_lib(self, desc: int, errors: list[str]) -> list[OffloadImage]:
        """``__tgt_unregister_lib``: unregister the images of ``desc`` from the
        runtime (unloaded from every initialised device, dropped from pending: seed
        000); failures are appended to ``errors``.  Returns the images (empty when
        ``desc`` is not registered)."""
        images = self.libraries.pop(desc, None)
        if images is None:
            return []
        for img in images:
            try:
                self.runtime.unregister_image(img)
            except OffloadError as exc:
                errors.append(f"unregister {img.name}: {exc}")
        return images

    def images(self) -> list[OffloadImage]:
        """Every registered image, in registration order."""
        return [img for imgs in self.libraries.values() for img in imgs]


__all__ = ["DecodedImage", "ENTRY_LAYOUTS", "EntryLayout", "EntryRecord", "Registrations",
           "TGT_OFFLOAD_ENTRY", "decode_bin_desc", "entry_layout", "read_entries"]
