"""Registration of compiled libraries and OpenMP device numbering.

Mirrors libomptarget 16 ``rtl.cpp``: ``RTLsTy::loadRTLs`` (which plugin files it loads:
per target in ``RTLNames`` order the ``.nextgen`` plugin unless
``LIBOMPTARGET_NEXTGEN_PLUGINS`` is false, the classic one otherwise or when the
nextgen one cannot be used; :func:`select_plugins`), ``RTLsTy::registerLib`` /
``unregisterLib`` (each device image goes to the *first* plugin that accepts it; that
plugin's devices are appended to the device list when it first accepts an image, so
both Debian x86_64 plugins installed still give 4 devices; the constructor and
destructor entries of declare-target globals are kept per image) and ``omptarget.cpp``
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

The offload entry record is not stable across compilers: the layouts of LLVM 16-19
(``__tgt_offload_entry``, 32 bytes) and 20-22 (``llvm::offloading::EntryTy`` v1, 56
bytes) are described in :mod:`offload_shim.abi.clang`; :func:`entry_layout` picks one
per entry table from the records themselves and refuses a table that fits none
(UnknownLayoutError, one line: the program then runs as with no device, or stops as
``OMP_TARGET_OFFLOAD=mandatory`` says).  Entries that are not for OpenMP (``Kind``) are
skipped and ``requires`` entries (LLVM 19+, flag ``OMP_REGISTER_REQUIRES``) of the
descriptor's host entry table become requirement flags, as libomptarget 19/22
``PluginManager::registerLib`` does.  What differs between the releases (where the
``requires`` flags come from and how they are checked, which entry versions are read)
comes from the :class:`~offload_shim.interposer.llvm.profile.RuntimeProfile` of the
program's release.
"""

from __future__ import annotations

import os
from collections import namedtuple

from ...abi import clang as _clang
from ...abi import interposer as _abi
from ...abi.clang import (ENTRY_LAYOUTS, ENTRY_TY_V1, TGT_OFFLOAD_ENTRY, EntryLayout)
from ...core.images import HostEntry, OffloadImage
from ...elf.imageinfo import unwrap_image
from ...errors import InvalidImageError, OffloadError, UnknownLayoutError
from ...records import FieldsRepr
from .profile import LIBOMPTARGET_16, RuntimeProfile

_BIN_DESC = _clang.BIN_DESC
_DEVICE_IMAGE = _clang.DEVICE_IMAGE


class EntryRecord(namedtuple("EntryRecord", "addr name size flags data", defaults=(0,))):
    """One decoded offload entry: host ``addr``, ``name``, ``size`` (bytes; 0 =
    function/kernel), ``flags`` (``OMP_DECLARE_TARGET_*``), ``data`` (extra data of
    the LLVM 19+ records)."""
    __slots__ = ()


class RequiresConflict(OffloadError):
    """``requires`` flags that disagree with those already registered on a clause
    the release compares (``RuntimeProfile.requires_fatal``): ``number`` and ``text``
    of libomptarget's fatal line (the caller prints it and the program aborts)."""

    def __init__(self, number: int, text: str):
        super().__init__(text)
        self.number = number
        self.text = text


def entry_layout(begin: int, end: int, raw: bytes | None = None, *,
                 any_version: bool = False) -> EntryLayout:
    """The layout of the entry table ``[begin, end)`` in this process's memory
    (:func:`offload_shim.abi.clang.detect_entry_layout`; ``raw``: its bytes, when
    already read; ``any_version``: ``EntryTy`` records of any version).  Raises
    UnknownLayoutError."""
    if raw is None:
        raw = _abi.read_bytes(begin, end - begin)
    return _clang.detect_entry_layout(raw, f"offload entry table [{begin:#x}, {end:#x})",
                                      any_version=any_version)


class EntryTable(FieldsRepr):
    """A decoded entry table: its ``layout``, the OpenMP ``entries``, the
    ``requires`` flags of its requires entries (0 when none; ``requires_list``: each
    entry's, in table order) and ``requires_entry`` (whether it had one: LLVM 19+)."""
    _fields = ("layout", "entries", "requires", "requires_entry", "requires_list")

    def __init__(self, layout: EntryLayout, entries: list[EntryRecord] | None = None,
                 requires: int = 0, requires_entry: bool = False,
                 requires_list: list[int] | None = None) -> None:
        self.layout = layout
        self.entries = [] if entries is None else entries
        self.requires = requires
        self.requires_entry = requires_entry
        self.requires_list = [] if requires_list is None else requires_list


def read_entry_table(begin: int, end: int, *, any_version: bool = False) -> EntryTable:
    """The offload entries of ``[begin, end)`` in the process's memory, decoded with
    the table's layout (``any_version``: see :func:`entry_layout`).  Raises
    UnknownLayoutError."""
    if not begin or end <= begin:
        return EntryTable(TGT_OFFLOAD_ENTRY)
    raw = _abi.read_bytes(begin, end - begin)
    layout = entry_layout(begin, end, raw, any_version=any_version)
    table = EntryTable(layout)
    for k in range(len(raw) // layout.size):
        f = layout.decode(raw[k * layout.size:(k + 1) * layout.size])
        if f.kind != _clang.OFK_OPENMP:
            continue
        if f.is_requires:
            table.requires |= f.data
            table.requires_entry = True
            table.requires_list.append(f.data)
            continue
        table.entries.append(EntryRecord(f.addr, _abi.read_cstring(f.name_ptr).decode(
            errors="replace") if f.name_ptr else "", f.size, f.flags, f.data))
    return table


def read_entries(begin: int, end: int) -> list[EntryRecord]:
    """The OpenMP offload entries of ``[begin, end)`` (requires entries left out)."""
    return read_entry_table(begin, end).entries


class DecodedImage(namedtuple("DecodedImage", "data strings entries table",
                              defaults=(None,))):
    """One ``__tgt_device_image``: its bytes (unwrapped from an OffloadBinary, as
    libomptarget 16 ``getExecutableImage`` does), ``strings`` of the OffloadBinary
    (``triple``, ``arch``; {} for a bare image), its OpenMP entries and the decoded
    ``table`` (layout, requires flags)."""
    __slots__ = ()


def decode_bin_desc(desc: int, *, any_version: bool = False,
                    host: list | None = None) -> list[DecodedImage]:
    """The device images of the ``__tgt_bin_desc`` at ``desc`` (``any_version``: see
    :func:`entry_layout`).  ``host``: a list that receives the descriptor's host entry
    table (an :class:`EntryTable`; clang points every image's table at it, so it is
    read once).  Raises UnknownLayoutError when an entry table fits no known
    layout."""
    n, images, hb, he = _BIN_DESC.unpack(_abi.read_bytes(desc, _BIN_DESC.size))
    out = []
    tables: dict[tuple[int, int], EntryTable] = {}
    for i in range(max(n, 0)):
        start, end, eb, ee = _DEVICE_IMAGE.unpack(
            _abi.read_bytes(images + i * _DEVICE_IMAGE.size, _DEVICE_IMAGE.size))
        data = _abi.read_bytes(start, end - start) if end > start else b""
        data, strings = unwrap_image(data)
        table = tables.get((eb, ee))
        if table is None:
            table = tables[(eb, ee)] = read_entry_table(eb, ee, any_version=any_version)
        out.append(DecodedImage(data, strings, table.entries, table))
    if host is not None:
        table = tables.get((hb, he))
        host.append(table if table is not None
                    else read_entry_table(hb, he, any_version=any_version))
    return out


def generation_text(images: list[DecodedImage], kernel_args: int | None = None) -> str:
    """Which clang generation built the images (``"clang 20-22
    (llvm::offloading::EntryTy v1)"``), from their entry layout, a requires entry and,
    once a kernel ran, the ``KernelArgsTy`` version (:data:`abi.clang.GENERATIONS`)."""
    tables = [d.table for d in images if d.table is not None]
    layout = tables[0].layout if tables else None
    req = any(t.requires_entry for t in tables) or None
    key = (layout, kernel_args, req)
    text = _generation_texts.get(key)
    if text is None:
        gens = _clang.generations_of(layout, kernel_args=kernel_args, requires_entry=req)
        text = _clang.describe_generations(gens)
        what = [layout.name] if layout is not None else []
        if kernel_args is not None:
            what.append(f"KernelArgs v{kernel_args}")
        text = _generation_texts[key] = f"{text} ({', '.join(what)})" if what else text
    return text


#: (layout, KernelArgs version, requires entry) -> generation_text's answer: a pure function
#: of the three, asked at every registration and first launch (a handful of keys)
_generation_texts: dict[tuple, str] = {}


#: libomptarget 16 ``RTLNames``: the plugin base names it tries, in this order
RTL_NAMES = ("libomptarget.rtl.ppc64", "libomptarget.rtl.x86_64", "libomptarget.rtl.cuda",
             "libomptarget.rtl.aarch64", "libomptarget.rtl.amdgpu")
#: the plugins of RTL_NAMES that execute on this (x86-64) CPU
HOST_RTL_NAMES = ("libomptarget.rtl.x86_64",)
LIBOMPTARGET16_DIR = "/usr/lib/llvm-16/lib"
OMP_DECLARE_TARGET_CTOR = 0x02
OMP_DECLARE_TARGET_DTOR = 0x04


def bool_env(value: str | None, default: bool) -> bool:
    """libomptarget 16's ``BoolEnvar`` (``StringParser::parse<bool>``, include
    EnvironmentVar.h): the value, lower-cased and nothing else (no trimming, no number
    parsing), is true for ``true``/``yes``/``on``/``1``, false for
    ``false``/``no``/``off``/``0``; anything else (``" 0"``, ``00``, ``2``, the empty
    string) keeps ``default``."""
    if value is None:
        return default
    v = value.lower()
    if v in ("true", "yes", "on", "1"):
        return True
    if v in ("false", "no", "off", "0"):
        return False
    return default


def select_plugins(directory: str | os.PathLike = LIBOMPTARGET16_DIR, *, env=None,
                   names=HOST_RTL_NAMES, usable=None,
                   profile: RuntimeProfile = LIBOMPTARGET_16) -> list[str]:
    """The plugin files libomptarget 16 loads from ``directory`` (``loadRTLs``): per
    base name in ``RTL_NAMES`` order, ``NAME.nextgen.so`` when
    ``LIBOMPTARGET_NEXTGEN_PLUGINS`` (default true) and ``usable(path)`` accepts it,
    else ``NAME.so``.  ``names``: the base names to consider (default the host
    plugins); ``usable``: a predicate (default: the file exists); ``profile``: the
    program's release -- 19.1 and 22.1 have only the nextgen host plugin and never
    read the variable (``RuntimeProfile.nextgen_plugins_env``)."""
    env = os.environ if env is None else env
    nextgen = (bool_env(env.get("LIBOMPTARGET_NEXTGEN_PLUGINS"), True)
               if profile.nextgen_plugins_env else True)
    usable = usable or os.path.exists     # os.path, not pathlib: start-up of every run
    out = []
    d = os.fspath(directory)
    for base in RTL_NAMES:
        if base not in names:
            continue
        nextgen_path, classic_path = (os.path.join(d, f"{base}.nextgen.so"),
                                      os.path.join(d, f"{base}.so"))
        if nextgen and usable(nextgen_path):
            out.append(nextgen_path)
        elif usable(classic_path):
            out.append(classic_path)
    return out


def supports_empty_images(plugin) -> bool:
    """The plugin's ``supports_empty_images()`` (> 0), False when it has none."""
    if not plugin.has("supports_empty_images"):
        return False
    return plugin.entry_point("supports_empty_images")() > 0


class ImageRecord(FieldsRepr):
    """A registered device image: the OffloadImage, the plugin that took it (libomptarget
    registers an image with the first plugin that accepts it), the host addresses of
    its constructor and destructor kernels (``OMP_DECLARE_TARGET_CTOR/DTOR`` entries)."""
    _fields = ("image", "plugin", "ctors", "dtors")

    def __init__(self, image: OffloadImage, plugin: object, ctors: list[int] | None = None,
                 dtors: list[int] | None = None) -> None:
        self.image = image
        self.plugin = plugin
        self.ctors = [] if ctors is None else ctors
        self.dtors = [] if dtors is None else dtors


class Registrations:
    """The libraries registered through ``__tgt_register_lib`` and the OpenMP device
    list over one :class:`~offload_shim.Runtime` (libomptarget 16 ``RTLsTy``).

    ``libraries``: ``__tgt_bin_desc`` address -> its registered OffloadImages;
    ``unsupported``: ``(desc, message)`` of images no plugin accepted (skipped, as
    libomptarget does); ``refused``: the messages of the last :meth:`register_lib`'s
    images that offload_shim's own checks refused (a corrupt ELF image, one that fails
    a test ``dlopen`` in a child) where libomptarget would have handed them to a plugin
    (which runs them, or fails to load them and aborts): the interposer prints one line
    for each; ``devices``: OpenMP device numbers 0..n-1; ``requires_flags``:
    the first ``requires`` flags registered (:meth:`add_requirements`: 16's
    ``__tgt_register_requires``, 19.1's and 22.1's requires entries), 0 before any;
    ``generations``: registered descriptor -> which clang
    generation built it (:func:`generation_text`, refined by :meth:`saw_kernel_args`);
    :meth:`compilers` also names those of libraries unregistered since.

    Nothing of a library is kept after its unregistration but its generation's text
    (one per distinct text): a host that opens and closes an offload library in a loop
    holds no more here after the thousandth cycle than after the first.  Not
    thread-safe: the interposer's registration lock (libomptarget 16 ``RTLsMtx``)
    guards every change; constructs read ``devices`` and ``requires_flags`` without it
    (a list that only grows, an int)."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.libraries: dict[int, list[OffloadImage]] = {}
        self.unsupported: list[tuple[int, str]] = []
        self.refused: list[str] = []
        self.devices: list = []
        self.requires_flags = 0
        self.requires_set = False
        self.generations: dict[int, str] = {}
        self._retired_generations: set[str] = set()
        self._decoded: dict[int, list[DecodedImage]] = {}     # without their bytes
        self._kernel_args: dict[int, int] = {}
        self.records: dict[int, list[ImageRecord]] = {}
        self._used_plugins: list = []

    def add_requirements(self, flags: int, profile: RuntimeProfile = LIBOMPTARGET_16
                         ) -> None:
        """Register ``requires`` flags (16 rtl.cpp ``RTLsTy::registerRequires``; 19.1,
        22.1 ``RequirementCollection::addRequirements``): the first value is kept;
        a later one must agree on the clauses the release compares
        (``RuntimeProfile.requires_fatal``).  Raises :class:`RequiresConflict`
        (nothing changed) when it does not."""
        if not self.requires_set:
            self.requires_flags = int(flags)
            self.requires_set = True
            return
        conflict = profile.requires_conflict(self.requires_flags, int(flags))
        if conflict is not None:
            raise RequiresConflict(*conflict)

    def register_lib(self, desc: int, profile: RuntimeProfile = LIBOMPTARGET_16
                     ) -> list[OffloadImage]:
        """``__tgt_register_lib``: one OffloadImage per device image, registered
        with the runtime (pending or loaded at once, libgomp GOMP_offload_register_ver) for the first plugin
        that accepts it; that plugin's devices are appended to :attr:`devices` the
        first time.  Under a release that reads ``requires`` entries
        (``profile.requires_from_entries``: 19.1, 22.1) those of the descriptor's host
        entry table are registered first, in order (:meth:`add_requirements`).
        Returns the images registered (empty for a descriptor seen before).  Raises
        UnknownLayoutError (an entry table the release cannot read) or
        :class:`RequiresConflict`, in both cases with nothing registered."""
        self.refused = []
        if desc in self.libraries:
            return []
        images = []
        host: list[EntryTable] = []
        decoded = decode_bin_desc(
            desc, any_version=profile.any_entry_version,
            host=host if profile.requires_from_entries else None)
        # (UnknownLayoutError above: nothing registered)
        if host:
            for flags in host[0].requires_list:
                self.add_requirements(flags, profile)
        self.records[desc] = []
        # entries and tables only (saw_kernel_args): the bytes live in the OffloadImage
        self._decoded[desc] = [d._replace(data=b"") for d in decoded]
        self.generations[desc] = generation_text(decoded)
        for i, dec in enumerate(decoded):
            label = f"desc@{desc:#x}#{i}"
            try:
                # trusted: the bytes are part of a library this process just loaded
                img = OffloadImage(dec.data, [HostEntry(e.name, e.size, e.flags)
                                              for e in dec.entries],
                                   name=label, host_addresses=[e.addr for e in dec.entries],
                                   trusted=True)
            except (InvalidImageError, ValueError) as exc:
                self._unsupported((desc, f"{label}: {exc}"))
                self._refused(label, exc)
                continue
            self.runtime.devices                      # the plugins are initialised
            # Runtime.accepts: each plugin's verdict is remembered with the image, so
            # register_image below does not ask the plugin again
            plugin = next((p for p in self.runtime.plugins if self.runtime.accepts(p, img)),
                          None)
            if plugin is None:
                self._unsupported((desc, f"{label}: no plugin accepts the image"))
                continue
            # initLibrary: an image without entries is not loaded by a plugin that does
            # not support empty images (its devices still count)
            if dec.entries or supports_empty_images(plugin):
                try:
                    self.runtime.register_image(img)
                except InvalidImageError as exc:
                    self._unsupported((desc, f"{label}: {exc}"))
                    self._refused(label, exc)
                    continue
            images.append(img)
            self.records[desc].append(ImageRecord(
                img, plugin,
                ctors=[e.addr for e in dec.entries if e.size == 0
                       and e.flags & OMP_DECLARE_TARGET_CTOR],
                dtors=[e.addr for e in dec.entries if e.size == 0
                       and e.flags & OMP_DECLARE_TARGET_DTOR]))
            if plugin not in self._used_plugins:
                self._used_plugins.append(plugin)
                self.devices.extend(d for d in self.runtime.devices if d.plugin is plugin)
        self.libraries[desc] = images
        return images

    def unregister_lib(self, desc: int, errors: list[str]) -> list[OffloadImage]:
        """``__tgt_unregister_lib``: unregister the images of ``desc`` from the
        runtime (unloaded from every initialised device, dropped from pending:
        libomptarget's UnregisterLib, rtl.cpp); failures are appended to ``errors``.  Returns the images (empty when
        ``desc`` is not registered)."""
        images = self.libraries.pop(desc, None)
        self.records.pop(desc, None)
        if images is None:
            return []
        self._decoded.pop(desc, None)
        self._kernel_args.pop(desc, None)      # a library dlopen'ed again may land here
        gen = self.generations.pop(desc, None)
        if gen is not None:
            self._retired_generations.add(gen)
        for img in images:
            if img not in self.runtime.images:
                continue
            try:
                self.runtime.unregister_image(img)
            except OffloadError as exc:
                errors.append(f"unregister {img.name}: {exc}")
        return images

    def _refused(self, label: str, exc: Exception) -> None:
        text = str(exc)
        self.refused.append(text if text.startswith(f"image {label!r}")
                            else f"image {label!r}: {text}")

    def _unsupported(self, item: tuple[int, str]) -> None:
        """Note an image no plugin took, once (a library loaded again at the same
        address, whose image is refused again, adds nothing)."""
        if item not in self.unsupported:
            self.unsupported.append(item)

    def decoded_count(self) -> int:
        """How many registered libraries' decoded image descriptions are kept."""
        return len(self._decoded)

    def compilers(self) -> list[str]:
        """The generation texts (:attr:`generations`) of every library registered so
        far, unregistered ones included, sorted, each once."""
        return sorted(set(self.generations.values()) | self._retired_generations)

    def device_numbers(self, plugin) -> list[int]:
        """The OpenMP device numbers of ``plugin``'s devices."""
        return [i for i, d in enumerate(self.devices) if d.plugin is plugin]

    def saw_kernel_args(self, host_ptr: int, version: int) -> None:
        """A launch of the kernel whose region id is ``host_ptr`` showed
        ``KernelArgsTy.Version`` = ``version``: refine the generation of the library
        that holds that kernel (first launch only)."""
        for desc, decoded in self._decoded.items():
            if desc in self._kernel_args:
                continue
            if any(e.addr == host_ptr for d in decoded for e in d.entries):
                self._kernel_args[desc] = version
                self.generations[desc] = generation_text(decoded, version)
                return

    def images(self) -> list[OffloadImage]:
        """Every registered image, in registration order."""
        return [img for imgs in self.libraries.values() for img in imgs]


__all__ = ["DecodedImage", "ENTRY_LAYOUTS", "ENTRY_TY_V1", "EntryLayout", "EntryRecord",
           "EntryTable", "ImageRecord", "RTL_NAMES", "Registrations", "RequiresConflict",
           "bool_env",
           "select_plugins", "supports_empty_images", "TGT_OFFLOAD_ENTRY", "UnknownLayoutError",
           "decode_bin_desc", "entry_layout", "generation_text", "read_entries",
           "read_entry_table"]
