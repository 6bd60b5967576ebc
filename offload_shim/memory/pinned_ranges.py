"""The table of pinned host ranges of one device: its entries, sorted by start.

The shape of LLVM's ``PinnedAllocationMapTy`` (``PluginInterface.cpp`` of the nextgen
plugins: ``offload/plugins-nextgen/common/src/`` from LLVM 19 on, under
``openmp/libomptarget/plugins-nextgen/`` before), one per
``GenericDeviceTy`` (its ``PinnedAllocs``): an ordered map of host ranges, each with a
reference count (``registerEntryUse``/``unregisterEntryUse``), found by intersection
(``findIntersecting``), inserted and erased (``insertEntry``/``eraseEntry``).  Here
:class:`PinDomain` is that map for one device (or for the process), :class:`PinEntry` one
range -- own references, nested pins counted on it, what keeps its buffer alive and,
for a raw address, what the kernel showed for its pages -- and :class:`PinnedRange`
the immutable snapshot the registry hands out.  The rules that use the table (equal
range: a reference; inside: a nested reference; any other intersection: an error) are
:class:`~offload_shim.memory.pinned.PinnedRegistry`'s; the pinned host pool's blocks
(:mod:`.pinned_host`) are entries too (``host_block``: LLVM ``registerHostBuffer``).
"""

from __future__ import annotations

import bisect
from collections import namedtuple

from ..abi import buffers as _buffers
from .pin_backends import PinBackend, select_backend

__all__ = ["PinnedRange", "PinEntry", "PinDomain", "LOCKED", "address_of"]


class PinnedRange(namedtuple("PinnedRange", "address size refs nested backend device",
                             defaults=(None, "", None))):
    """A snapshot of one pinned range: ``address``, ``size`` (bytes), ``refs``
    (own pins + nested pins), ``nested`` ({(address, size): count}; a new ``{}`` by
    default), ``backend`` name, ``device`` label (None = process domain).  Immutable
    (a ``namedtuple``: see :mod:`offload_shim.records`)."""

    __slots__ = ()

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls, *args, **kwargs)
        return self._replace(nested={}) if self.nested is None else self

    @property
    def end(self) -> int:
        return self.address + self.size


#: ``PinEntry.ident`` of a raw pin whose backend mlocks: its pages must stay VM_LOCKED
LOCKED = "locked"


class PinEntry:
    """One pinned range of a :class:`PinDomain` (LLVM ``PinnedAllocationMapTy::EntryTy``):
    ``start``, ``size`` (bytes), ``own`` references, ``nested`` ({(address, size): count}
    of pins lying inside it), ``keep`` ({(address, size): [what keeps each pin's buffer
    exported]}), ``host_block`` (a block of a pinned host pool), ``ident`` (a raw pin:
    :data:`LOCKED` or the mapping identity its pages had; None otherwise), ``stale``."""

    __slots__ = ("start", "size", "own", "nested", "keep", "host_block", "ident", "stale")

    def __init__(self, start: int, size: int):
        self.start, self.size = start, size
        self.own = 0
        self.nested: dict[tuple[int, int], int] = {}
        self.keep: dict[tuple[int, int], list] = {}
        self.host_block = False
        self.ident = None       # raw pins: what must still be true of its pages (_held)
        self.stale = False

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def refs(self) -> int:
        return self.own + sum(self.nested.values())


class PinDomain:
    """The pinned ranges of one device (or of the process), sorted by start."""

    def __init__(self, device, backend: PinBackend):
        self.device = device
        self.backend = backend
        self.reg_backend = backend if backend.registers else select_backend(device)
        self.starts: list[int] = []
        self.entries: dict[int, PinEntry] = {}
        self.maps: dict[int, set[tuple[int, int]]] = {}   # device block -> pinned host ranges

    @property
    def label(self) -> str | None:
        return None if self.device is None else self.device.label

    def find(self, addr: int, size: int) -> list[PinEntry]:
        """Entries intersecting [addr, addr+size)."""
        j = bisect.bisect_right(self.starts, addr)      # first start > addr
        out = []
        if j > 0:
            e = self.entries[self.starts[j - 1]]
            if e.end > addr:
                out.append(e)
        while j < len(self.starts) and self.starts[j] < addr + size:
            out.append(self.entries[self.starts[j]])
            j += 1
        return out

    def insert(self, e: PinEntry) -> None:
        bisect.insort(self.starts, e.start)
        self.entries[e.start] = e

    def remove(self, e: PinEntry) -> None:
        self.starts.pop(bisect.bisect_left(self.starts, e.start))
        del self.entries[e.start]


def address_of(obj, size: int | None, *, writable_only: bool = False):
    """(address, size, keepalive) of an int address (``size`` required) or a
    C-contiguous buffer-protocol object.  Raises TypeError (a bool, an address
    without ``size``, a read-only buffer), ValueError (an address <= 0, a
    non-contiguous buffer, ``size`` beyond the buffer)."""
    if isinstance(obj, bool):
        raise TypeError("expected an address (int) or a buffer object")
    if isinstance(obj, int):
        if size is None:
            raise TypeError("an address needs size= (bytes)")
        if obj <= 0:
            raise ValueError(f"invalid address {obj!r}")
        return obj, int(size), None
    mv = memoryview(obj)
    if not mv.c_contiguous:
        raise ValueError("host buffer must be C-contiguous")
    if mv.readonly:
        raise TypeError("cannot pin a read-only buffer (Python copies it on the way)")
    n = mv.nbytes if size is None else int(size)
    if n > mv.nbytes:
        raise ValueError(f"size {n} exceeds the {mv.nbytes}-byte buffer")
    if mv.nbytes == 0:
        return 0, n, mv
    addr, keep = _buffers.buffer_address(mv)
    return addr, n, keep
