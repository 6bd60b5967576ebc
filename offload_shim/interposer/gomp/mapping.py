"""libgomp 12's data mapping (``target.c``) for one device, in Python.

Mirrors GCC 12 libgomp ``target.c``: the splay tree of mapped host ranges
(``splay_tree_key_s``: ``[host_start, host_end)``, ``tgt`` + ``tgt_offset`` = device
address, ``refcount``), ``target_mem_desc`` (one device block per construct holding every
new mapping of that construct, reference counted by its keys and the construct),
``gomp_map_vars_internal`` (OpenMP, ``short_mapkind``), ``gomp_map_vars_existing``,
``gomp_map_pointer``, ``gomp_map_fields_existing``, ``gomp_attach_pointer`` /
``gomp_detach_pointer``, ``gomp_map_val``, ``gomp_unmap_vars_internal``,
``gomp_remove_var``, ``gomp_update``, ``gomp_exit_data``, ``gomp_increment_refcount`` /
``gomp_decrement_refcount`` (OpenMP 5.0: a construct changes each reference count at most
once, so the elements of one structure, which share one count, are counted once), and
``gomp_load_image_to_device`` / ``gomp_unload_image_from_device``.  Map kinds and flags:
GCC 12 ``include/gomp-constants.h``.  ``gomp_fatal`` conditions raise :class:`GompFatal`
with libgomp's message text (``%p`` as glibc prints it).

Reconstructed from the GCC 11 and GCC 13 sources (gcc-mirror/gcc, read with the search
tools; the GCC 12 branch is not stored): reference-count sets, structure-element counts,
implicit maps and ``GOMP_MAP_*_ZERO_LENGTH_ARRAY_SECTION`` are GCC 12 features present in
the GCC 13 text; ``resolve_device`` and the API routines follow the GCC 11 text, which GCC
13 changed (``omp_initial_device``); the GCC 13 additions that skip attached pointers when
copying a structure back and forth are not in GCC 12 (the installed libgomp 12.2's
``gomp_exit_data`` has no such loop) and are not reproduced.  OpenMP's ``refcount`` is
the only count libgomp 12 keeps for OpenMP: ``target enter data`` and structured
constructs both change it (``dynamic_refcount`` is OpenACC's).

Device memory and copies go through a :class:`DeviceMemory`; host memory is read and
written directly (this runs inside the program).  Not thread-safe: the caller holds one
lock per device (libgomp's ``devicep->lock``).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from ...abi import gomp_interposer as _abi
from ...records import FieldsRepr

# -- gomp-constants.h (GCC 12) ----------------------------------------------------------
GOMP_MAP_FLAG_TO = 1 << 0
GOMP_MAP_FLAG_FROM = 1 << 1
GOMP_MAP_FLAG_SPECIAL_0 = 1 << 2
GOMP_MAP_FLAG_SPECIAL_1 = 1 << 3
GOMP_MAP_FLAG_SPECIAL_2 = 1 << 4
GOMP_MAP_FLAG_SPECIAL_3 = 1 << 5
GOMP_MAP_FLAG_SPECIAL_4 = 1 << 6
GOMP_MAP_FLAG_SPECIAL = GOMP_MAP_FLAG_SPECIAL_1 | GOMP_MAP_FLAG_SPECIAL_0
GOMP_MAP_DEEP_COPY = GOMP_MAP_FLAG_SPECIAL_4 | GOMP_MAP_FLAG_SPECIAL_2
GOMP_MAP_IMPLICIT = GOMP_MAP_FLAG_SPECIAL_3 | GOMP_MAP_FLAG_SPECIAL_4
GOMP_MAP_FLAG_SPECIAL_BITS = (GOMP_MAP_FLAG_SPECIAL_0 | GOMP_MAP_FLAG_SPECIAL_1
                              | GOMP_MAP_FLAG_SPECIAL_2 | GOMP_MAP_FLAG_SPECIAL_3
                              | GOMP_MAP_FLAG_SPECIAL_4)
GOMP_MAP_FLAG_FORCE = 1 << 7

GOMP_MAP_ALLOC = 0
GOMP_MAP_TO = 1
GOMP_MAP_FROM = 2
GOMP_MAP_TOFROM = 3
GOMP_MAP_POINTER = GOMP_MAP_FLAG_SPECIAL_0 | 0
GOMP_MAP_TO_PSET = GOMP_MAP_FLAG_SPECIAL_0 | 1
GOMP_MAP_FORCE_PRESENT = GOMP_MAP_FLAG_SPECIAL_0 | 2
GOMP_MAP_DELETE = GOMP_MAP_FLAG_SPECIAL_0 | 3
GOMP_MAP_FORCE_DEVICEPTR = GOMP_MAP_FLAG_SPECIAL_1 | 0
GOMP_MAP_DEVICE_RESIDENT = GOMP_MAP_FLAG_SPECIAL_1 | 1
GOMP_MAP_LINK = GOMP_MAP_FLAG_SPECIAL_1 | 2
GOMP_MAP_IF_PRESENT = GOMP_MAP_FLAG_SPECIAL_1 | 3
GOMP_MAP_FIRSTPRIVATE = GOMP_MAP_FLAG_SPECIAL | 0
GOMP_MAP_FIRSTPRIVATE_INT = GOMP_MAP_FLAG_SPECIAL | 1
GOMP_MAP_USE_DEVICE_PTR = GOMP_MAP_FLAG_SPECIAL | 2
GOMP_MAP_ZERO_LEN_ARRAY_SECTION = GOMP_MAP_FLAG_SPECIAL | 3
GOMP_MAP_FORCE_ALLOC = GOMP_MAP_FLAG_FORCE | GOMP_MAP_ALLOC
GOMP_MAP_FORCE_TO = GOMP_MAP_FLAG_FORCE | GOMP_MAP_TO
GOMP_MAP_FORCE_FROM = GOMP_MAP_FLAG_FORCE | GOMP_MAP_FROM
GOMP_MAP_FORCE_TOFROM = GOMP_MAP_FLAG_FORCE | GOMP_MAP_TOFROM
GOMP_MAP_USE_DEVICE_PTR_IF_PRESENT = GOMP_MAP_FLAG_SPECIAL_2 | 0
GOMP_MAP_ALWAYS_TO = GOMP_MAP_FLAG_SPECIAL_2 | GOMP_MAP_TO
GOMP_MAP_ALWAYS_FROM = GOMP_MAP_FLAG_SPECIAL_2 | GOMP_MAP_FROM
GOMP_MAP_ALWAYS_TOFROM = GOMP_MAP_FLAG_SPECIAL_2 | GOMP_MAP_TOFROM
GOMP_MAP_STRUCT = GOMP_MAP_FLAG_SPECIAL_2 | GOMP_MAP_FLAG_SPECIAL | 0
GOMP_MAP_ALWAYS_POINTER = GOMP_MAP_FLAG_SPECIAL_2 | GOMP_MAP_FLAG_SPECIAL | 1
GOMP_MAP_POINTER_TO_ZERO_LENGTH_ARRAY_SECTION = (GOMP_MAP_FLAG_SPECIAL_2
                                                 | GOMP_MAP_FLAG_SPECIAL | 2)
GOMP_MAP_DELETE_ZERO_LEN_ARRAY_SECTION = GOMP_MAP_FLAG_SPECIAL_2 | GOMP_MAP_FLAG_SPECIAL | 3
GOMP_MAP_RELEASE = GOMP_MAP_FLAG_SPECIAL_2 | GOMP_MAP_DELETE
GOMP_MAP_ATTACH = GOMP_MAP_DEEP_COPY | 0
GOMP_MAP_DETACH = GOMP_MAP_DEEP_COPY | 1
GOMP_MAP_FORCE_DETACH = GOMP_MAP_DEEP_COPY | GOMP_MAP_FLAG_FORCE | 1
GOMP_MAP_ATTACH_ZERO_LENGTH_ARRAY_SECTION = GOMP_MAP_DEEP_COPY | 2

#: map kind -> the name its clause spells (report)
MAP_KIND_NAMES = {
    GOMP_MAP_ALLOC: "alloc", GOMP_MAP_TO: "to", GOMP_MAP_FROM: "from",
    GOMP_MAP_TOFROM: "tofrom", GOMP_MAP_POINTER: "pointer", GOMP_MAP_TO_PSET: "to_pset",
    GOMP_MAP_FORCE_PRESENT: "force_present", GOMP_MAP_DELETE: "delete",
    GOMP_MAP_FORCE_DEVICEPTR: "force_deviceptr", GOMP_MAP_DEVICE_RESIDENT: "device_resident",
    GOMP_MAP_LINK: "link", GOMP_MAP_IF_PRESENT: "if_present",
    GOMP_MAP_FIRSTPRIVATE: "firstprivate", GOMP_MAP_FIRSTPRIVATE_INT: "firstprivate_int",
    GOMP_MAP_USE_DEVICE_PTR: "use_device_ptr",
    GOMP_MAP_ZERO_LEN_ARRAY_SECTION: "zero_len_array_section",
    GOMP_MAP_FORCE_ALLOC: "force_alloc", GOMP_MAP_FORCE_TO: "force_to",
    GOMP_MAP_FORCE_FROM: "force_from", GOMP_MAP_FORCE_TOFROM: "force_tofrom",
    GOMP_MAP_USE_DEVICE_PTR_IF_PRESENT: "use_device_ptr_if_present",
    GOMP_MAP_ALWAYS_TO: "always_to", GOMP_MAP_ALWAYS_FROM: "always_from",
    GOMP_MAP_ALWAYS_TOFROM: "always_tofrom", GOMP_MAP_STRUCT: "struct",
    GOMP_MAP_ALWAYS_POINTER: "always_pointer",
    GOMP_MAP_POINTER_TO_ZERO_LENGTH_ARRAY_SECTION: "pointer_to_zero_length_array_section",
    GOMP_MAP_DELETE_ZERO_LEN_ARRAY_SECTION: "delete_zero_len_array_section",
    GOMP_MAP_RELEASE: "release", GOMP_MAP_ATTACH: "attach", GOMP_MAP_DETACH: "detach",
    GOMP_MAP_FORCE_DETACH: "force_detach",
    GOMP_MAP_ATTACH_ZERO_LENGTH_ARRAY_SECTION: "attach_zero_length_array_section",
}

GOMP_TARGET_FLAG_NOWAIT = 1 << 0
GOMP_TARGET_FLAG_EXIT_DATA = 1 << 1

# -- libgomp.h -------------------------------------------------------------------------
#: ``enum gomp_map_vars_kind``
GOMP_MAP_VARS_OPENACC, GOMP_MAP_VARS_TARGET, GOMP_MAP_VARS_DATA, GOMP_MAP_VARS_ENTER_DATA = (
    1, 2, 4, 8)
_U64 = (1 << 64) - 1
REFCOUNT_INFINITY = _U64                    # mapped for good ("declare target", associate)
REFCOUNT_LINK = _U64 - 6                    # REFCOUNT_SPECIAL | 1: "declare target link"
REFCOUNT_STRUCTELEM = _U64 - 3              # REFCOUNT_SPECIAL | 4: the count is shared
#: ``target_var_desc.offset`` markers
OFFSET_INLINED = _U64
OFFSET_POINTER = _U64 - 1
OFFSET_STRUCT = _U64 - 2


def copy_to_p(k: int) -> bool:
    """``GOMP_MAP_COPY_TO_P``."""
    return not (k & GOMP_MAP_FLAG_SPECIAL) and bool(k & GOMP_MAP_FLAG_TO)


def copy_from_p(k: int) -> bool:
    """``GOMP_MAP_COPY_FROM_P``."""
    return not (k & GOMP_MAP_FLAG_SPECIAL) and bool(k & GOMP_MAP_FLAG_FROM)


def pointer_p(k: int) -> bool:
    """``GOMP_MAP_POINTER_P``."""
    return k in (GOMP_MAP_POINTER, GOMP_MAP_POINTER_TO_ZERO_LENGTH_ARRAY_SECTION)


def always_to_p(k: int) -> bool:
    return k in (GOMP_MAP_ALWAYS_TO, GOMP_MAP_ALWAYS_TOFROM)


def always_from_p(k: int) -> bool:
    return k in (GOMP_MAP_ALWAYS_FROM, GOMP_MAP_ALWAYS_TOFROM)


def implicit_p(k: int) -> bool:
    """``GOMP_MAP_IMPLICIT_P`` of a 16-bit kind."""
    return (k & GOMP_MAP_FLAG_SPECIAL_BITS) == GOMP_MAP_IMPLICIT


def get_kind(kinds, i: int) -> int:
    """``get_kind`` (short map kinds): the 16-bit kind without the implicit flag."""
    val = kinds[i]
    if implicit_p(val):
        val &= ~GOMP_MAP_IMPLICIT
    return val


def kind_name(kind: int) -> str:
    """The clause name of a map kind (low byte), ``0x..`` when unknown."""
    return MAP_KIND_NAMES.get(kind & 0xFF, f"{kind & 0xFF:#04x}")


def fmt_p(v: int) -> str:
    """``%p`` as glibc's printf writes it."""
    v &= _U64
    return "(nil)" if v == 0 else f"{v:#x}"


def _align_up(x: int, a: int) -> int:
    return (x + a - 1) & ~(a - 1)


class GompFatal(Exception):
    """A ``gomp_fatal`` condition of libgomp; ``message`` is its text (the C side prints
    ``"\\nlibgomp: " + message + "\\n"`` and exits with status 1)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class DeviceMemory:
    """What the mapping needs from a device (libgomp's plugin calls): each returns False
    (copies, free) or 0 (alloc) on failure."""

    def alloc(self, size: int) -> int: ...
    def free(self, ptr: int) -> bool: ...
    def host2dev(self, dev: int, host: int, size: int) -> bool: ...
    def dev2host(self, host: int, dev: int, size: int) -> bool: ...
    def dev2dev(self, dst: int, src: int, size: int) -> bool: ...


# -- splay_tree_key_s / target_mem_desc -----------------------------------------------
class Key:
    """``splay_tree_key_s``: host ``[host_start, host_end)`` mapped at device address
    ``tgt.tgt_start + tgt_offset``.  ``refcount``: an int, :data:`REFCOUNT_INFINITY`,
    :data:`REFCOUNT_LINK` or :data:`REFCOUNT_STRUCTELEM` (then the count is
    ``se_first.se_count``, shared by the structure's elements mapped together);
    ``link_key``: the ``declare target link`` key this mapping replaced;
    ``attach_count``: per pointer-sized slot, how often a pointer there is attached."""
    __slots__ = ("host_start", "host_end", "tgt", "tgt_offset", "refcount", "se_first",
                 "se_last", "se_count", "se_siblings", "link_key", "attach_count", "label")

    def __init__(self, host_start: int, host_end: int):
        self.host_start = host_start
        self.host_end = host_end
        self.tgt: Tgt | None = None
        self.tgt_offset = 0
        self.refcount = 0
        self.se_first: Key | None = None
        self.se_last = False
        self.se_count = 0
        self.se_siblings: list[Key] | None = None
        self.link_key: Key | None = None
        self.attach_count: list[int] | None = None
        self.label = ""

    @property
    def device_address(self) -> int:
        return (self.tgt.tgt_start + self.tgt_offset) & _U64

    @property
    def count(self) -> int:
        """The reference count in effect (the shared one for structure elements)."""
        if self.refcount == REFCOUNT_STRUCTELEM:
            return self.se_first.se_count
        return self.refcount

    def describe(self) -> dict:
        rc = self.count
        return {"host": fmt_p(self.host_start), "size": self.host_end - self.host_start,
                "device": fmt_p(self.device_address),
                "refcount": ("infinity" if rc == REFCOUNT_INFINITY else
                             "link" if rc == REFCOUNT_LINK else rc)}

    def __repr__(self) -> str:
        return (f"<Key [{self.host_start:#x},{self.host_end:#x}) -> "
                f"{self.device_address:#x} rc={self.count}>")


class TargetVar(FieldsRepr):
    """``target_var_desc``: one list item of a construct."""
    _fields = ("key", "offset", "length", "copy_from", "always_copy_from", "is_attach",
               "has_null_ptr_assoc")
    __slots__ = _fields

    def __init__(self, key: Key | None = None, offset: int = 0, length: int = 0,
                 copy_from: bool = False, always_copy_from: bool = False,
                 is_attach: bool = False, has_null_ptr_assoc: bool = False) -> None:
        self.key = key
        self.offset = offset
        self.length = length
        self.copy_from = copy_from
        self.always_copy_from = always_copy_from
        self.is_attach = is_attach
        self.has_null_ptr_assoc = has_null_ptr_assoc


class Tgt(FieldsRepr):
    """``target_mem_desc``: the device block of one construct (``to_free``, aligned
    ``tgt_start``, ``tgt_end``), its list items and its reference count (the construct
    itself while it runs, plus one per key it created)."""
    _fields = ("list", "refcount", "tgt_start", "tgt_end", "to_free", "keys")
    __slots__ = _fields

    def __init__(self, list: list[TargetVar], refcount: int = 1, tgt_start: int = 0,
                 tgt_end: int = 0, to_free: int = 0,
                 keys: list[Key] | None = None) -> None:
        self.list = list
        self.refcount = refcount
        self.tgt_start = tgt_start
        self.tgt_end = tgt_end
        self.to_free = to_free
        self.keys = [] if keys is None else keys

    @property
    def list_count(self) -> int:
        return len(self.list)


def _cmp(x: Key, s: int, e: int) -> int:
    """libgomp ``splay_compare`` of the tree key ``x`` with ``[s, e)``."""
    if x.host_start == x.host_end and s == e:
        # two empty ranges compare equal in libgomp whatever their addresses; only the
        # one on the search path is found, in practice the one at the same address
        return 0 if x.host_start == s else (-1 if x.host_start < s else 1)
    if x.host_end <= s:
        return -1
    if x.host_start >= e:
        return 1
    return 0


class MemMap:
    """The device's ``mem_map``: keys ordered by host address.  Keys never overlap (zero-
    length keys aside), so a lookup is a bisection; where several keys compare equal to a
    range (a query spanning two mappings) libgomp's splay tree returns the one its search
    path meets first, this returns the lowest one."""

    def __init__(self):
        self._starts: list[tuple[int, int, int]] = []
        self._keys: dict[int, Key] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def keys(self) -> list[Key]:
        return [self._keys[t[2]] for t in self._starts]

    def insert(self, k: Key) -> None:
        bisect.insort(self._starts, (k.host_start, k.host_end, id(k)))
        self._keys[id(k)] = k

    def remove(self, k: Key) -> None:
        t = (k.host_start, k.host_end, id(k))
        i = bisect.bisect_left(self._starts, t)
        if i < len(self._starts) and self._starts[i] == t:
            del self._starts[i]
            self._keys.pop(id(k), None)

    def lookup(self, s: int, e: int) -> Key | None:
        """``splay_tree_lookup``: a key comparing equal to ``[s, e)``."""
        starts = self._starts
        # candidates start before e (or at s for a zero-length key at s)
        hi = bisect.bisect_right(starts, (max(e, s), _U64 + 1, 0))
        best = None
        i = hi - 1
        while i >= 0:
            hs, he, kid = starts[i]
            k = self._keys[kid]
            if _cmp(k, s, e) == 0:
                best = k
            elif he <= s and hs != he:
                break
            i -= 1
        return best

    def map_lookup(self, s: int, e: int) -> Key | None:
        """``gomp_map_lookup``: a zero-length range also finds the mapping that starts or
        ends at it."""
        if s != e:
            return self.lookup(s, e)
        n = self.lookup(s, s + 1)
        if n is not None:
            return n
        n = self.lookup(s - 1, s)
        if n is not None:
            return n
        return self.lookup(s, s)

    def map_0len_lookup(self, s: int, e: int) -> Key | None:
        """``gomp_map_0len_lookup``."""
        if s != e:
            return self.lookup(s, e)
        return self.lookup(s, s + 1)


Trace = Callable[[dict], None]


class _BlockLayout:
    """Where ``gomp_map_vars_internal``'s second loop puts the new keys of one
    construct in its device block: ``size`` (its ``tgt_size``, bytes used so far) and
    the open structure, if any (``field_tgt_base``, ``field_tgt_offset``,
    ``field_tgt_clear``: the elements of one ``GOMP_MAP_STRUCT`` keep their host
    layout and share one reference count, chained from the first)."""

    __slots__ = ("size", "field_base", "field_offset", "field_clear", "se_first")

    def __init__(self, size: int):
        self.size = size
        self.field_base = 0
        self.field_offset = 0
        self.field_clear: int | None = None     # index of the structure's last element
        self.se_first: Key | None = None

    def open_struct(self, struct_start: int, first_start: int, end: int, last: int,
                    align: int) -> None:
        """A structure ``[struct_start, end)`` whose elements (first at host address
        ``first_start``, last at list index ``last``) are all new: room for them,
        aligned as the structure."""
        self.size -= first_start - struct_start
        self.size = _align_up(self.size, align)
        self.size += first_start - struct_start
        self.field_base = first_start
        self.field_offset = self.size
        self.field_clear = last
        self.se_first = None
        self.size += end - first_start

    def place(self, k: Key, i: int, s: int, e: int, align: int) -> None:
        """The block offset of new key ``k`` (list index ``i``, host ``[s, e)``): in
        the open structure at its host offset, with the structure's shared count;
        otherwise next in the block, aligned to ``align``."""
        if self.field_clear is not None:
            k.tgt_offset = s - self.field_base + self.field_offset
            k.refcount = REFCOUNT_STRUCTELEM
            if self.se_first is None:
                self.se_first = k
                k.se_siblings = []
            k.se_first = self.se_first
            self.se_first.se_siblings.append(k)
            if i == self.field_clear:
                k.se_last = True
                self.se_first = None
                self.field_clear = None
        else:
            self.size = _align_up(self.size, align)
            k.tgt_offset = self.size
            self.size += e - s


class GompMapper:
    """libgomp's mapping for one device: ``mem`` is its memory, ``trace`` receives one
    dict per mapping event (``op``: ``map`` (new mapping), ``present`` (already mapped,
    count adjusted), ``copy_to`` / ``copy_from``, ``firstprivate``, ``attach`` /
    ``detach``, ``unmap`` (mapping removed), ``release`` (count decremented), ``update``;
    ``kind``, ``host``, ``size``, ``device``, ``refcount``).  Raises :class:`GompFatal`
    where libgomp calls ``gomp_fatal``."""

    def __init__(self, mem: DeviceMemory, trace: Trace | None = None):
        self.mem = mem
        self.mem_map = MemMap()
        self.trace = trace or (lambda ev: None)
        self.live_tgts: dict[int, Tgt] = {}       # id -> blocks not yet freed
        self.construct = ""

    # -- device copies -----------------------------------------------------------------
    def _h2d(self, dev: int, host: int, size: int) -> None:
        if size and not self.mem.host2dev(dev, host, size):
            raise GompFatal(f"Copying of host object [{fmt_p(host)}..{fmt_p(host + size)}) "
                            f"to dev object [{fmt_p(dev)}..{fmt_p(dev + size)}) failed")

    def _d2h(self, host: int, dev: int, size: int) -> None:
        if size and not self.mem.dev2host(host, dev, size):
            raise GompFatal(f"Copying of dev object [{fmt_p(dev)}..{fmt_p(dev + size)}) "
                            f"to host object [{fmt_p(host)}..{fmt_p(host + size)}) failed")

    def _h2d_value(self, dev: int, value: int) -> None:
        cell = _abi.ScratchBuffer(8)
        cell.set_u64s([value])
        self._h2d(dev, cell.address, 8)

    def _event(self, op: str, kind: int | None, host: int, size: int, dev: int,
               key: Key | None = None, **extra) -> None:
        ev = {"construct": self.construct, "op": op,
              "kind": kind_name(kind) if kind is not None else None,
              "host": fmt_p(host), "size": size, "device": fmt_p(dev)}
        if key is not None:
            rc = key.count
            ev["refcount"] = ("infinity" if rc == REFCOUNT_INFINITY else
                              "link" if rc == REFCOUNT_LINK else rc)
        ev.update(extra)
        self.trace(ev)

    # -- reference counts (gomp_increment_refcount / gomp_decrement_refcount) ------------
    @staticmethod
    def _holder(k: Key) -> tuple[Key, str]:
        if k.refcount == REFCOUNT_STRUCTELEM:
            return k.se_first, "se_count"
        return k, "refcount"

    def increment(self, k: Key | None, rset: set | None) -> None:
        if k is None or k.refcount == REFCOUNT_INFINITY:
            return
        holder, attr = self._holder(k)
        if rset is not None:
            if id(holder) in rset:
                return
            rset.add(id(holder))
        setattr(holder, attr, getattr(holder, attr) + 1)

    def decrement(self, k: Key | None, rset: set | None, delete_p: bool) -> tuple[bool, bool]:
        """(do_copy, do_remove)."""
        if k is None or k.refcount == REFCOUNT_INFINITY:
            return False, False
        holder, attr = self._holder(k)
        orig = getattr(holder, attr)
        new_encountered = True
        if rset is not None:
            if id(holder) in rset:
                new_encountered = False
            else:
                rset.add(id(holder))
        if new_encountered:
            if delete_p:
                setattr(holder, attr, 0)
            elif orig > 0:
                setattr(holder, attr, orig - 1)
        set_to_zero = is_zero = False
        if getattr(holder, attr) == 0:
            if orig > 0:
                set_to_zero = True
            is_zero = True
        do_copy = set_to_zero or (not new_encountered and is_zero)
        do_remove = new_encountered and set_to_zero
        return do_copy, do_remove

    # -- gomp_map_vars_existing ---------------------------------------------------------
    def _map_existing(self, oldn: Key, s: int, e: int, tv: TargetVar, kind: int,
                      always_to_flag: bool, implicit: bool, rset: set | None) -> None:
        tv.key = oldn
        tv.copy_from = copy_from_p(kind)
        tv.always_copy_from = always_from_p(kind)
        tv.is_attach = False
        tv.offset = s - oldn.host_start
        implicit_subset = implicit and s <= oldn.host_start and oldn.host_end <= e
        tv.length = (oldn.host_end - oldn.host_start) if implicit_subset else e - s
        if (kind & GOMP_MAP_FLAG_FORCE) or not (
                implicit_subset or (oldn.host_start <= s and e <= oldn.host_end)):
            raise GompFatal(f"Trying to map into device [{fmt_p(s)}..{fmt_p(e)}) object when "
                            f"[{fmt_p(oldn.host_start)}..{fmt_p(oldn.host_end)}) is already "
                            "mapped")
        if always_to_p(kind) or always_to_flag:
            dev = oldn.device_address + s - oldn.host_start
            self._h2d(dev, s, e - s)
            self._event("copy_to", kind, s, e - s, dev, oldn)
        self.increment(oldn, rset)
        self._event("present", kind, s, e - s, oldn.device_address + s - oldn.host_start, oldn)

    # -- gomp_map_pointer ---------------------------------------------------------------
    def _map_pointer(self, tgt: Tgt, host_ptr: int, target_offset: int, bias: int,
                     allow_zlas: bool) -> None:
        dst = (tgt.tgt_start + target_offset) & _U64
        if host_ptr == 0:
            self._h2d_value(dst, 0)
            return
        s = (host_ptr + bias) & _U64
        n = self.mem_map.map_lookup(s, s)
        if n is None:
            if allow_zlas:
                val = 0
            else:
                raise GompFatal("Pointer target of array section wasn't mapped")
        else:
            val = (n.device_address + (s - n.host_start) - bias) & _U64
        self._h2d_value(dst, val)

    # -- gomp_map_fields_existing ---------------------------------------------------------
    def _map_fields_existing(self, tgt: Tgt, n: Key, first: int, i: int, hostaddrs, sizes,
                             kinds, rset) -> None:
        s = hostaddrs[i]
        e = s + sizes[i]
        n2 = self.mem_map.lookup(s, e)
        kind = get_kind(kinds, i)
        implicit = implicit_p(kinds[i])

        def same_block(n2):
            return (n2 is not None and n2.tgt is n.tgt
                    and n2.host_start - n.host_start == n2.tgt_offset - n.tgt_offset)
        if same_block(n2):
            self._map_existing(n2, s, e, tgt.list[i], kind & 0xFF, False, implicit, rset)
            return
        if sizes[i] == 0:
            if s > hostaddrs[first - 1]:
                n2 = self.mem_map.lookup(s - 1, e)
                if same_block(n2):
                    self._map_existing(n2, s, e, tgt.list[i], kind & 0xFF, False, implicit,
                                       rset)
                    return
            n2 = self.mem_map.lookup(s, e + 1)
            if same_block(n2):
                self._map_existing(n2, s, e, tgt.list[i], kind & 0xFF, False, implicit, rset)
                return
        raise GompFatal(f"Trying to map into device [{fmt_p(s)}..{fmt_p(e)}) structure "
                        "element when other mapped elements from the same structure weren't "
                        "mapped together with it")

    # -- gomp_attach_pointer / gomp_detach_pointer ------------------------------------------
    def attach_pointer(self, n: Key | None, attach_to: int, bias: int,
                       allow_zlas: bool) -> None:
        if n is None:
            raise GompFatal("enclosing struct not mapped for attach")
        size = (n.host_end - n.host_start + 7) // 8
        idx = (attach_to - n.host_start) // 8
        if n.attach_count is None:
            n.attach_count = [0] * max(size, idx + 1)
        n.attach_count[idx] += 1
        if n.attach_count[idx] == 1:
            devptr = n.device_address + attach_to - n.host_start
            target = _abi.read_u64(attach_to)
            if target == 0:
                raise GompFatal("attempt to attach null pointer")
            s = (target + bias) & _U64
            tn = self.mem_map.lookup(s, s + 1)
            if tn is None:
                if allow_zlas:
                    data = 0
                else:
                    raise GompFatal("pointer target not mapped for attach")
            else:
                data = (tn.device_address + target - tn.host_start) & _U64
            self._h2d_value(devptr, data)
            self._event("attach", GOMP_MAP_ATTACH, attach_to, 8, devptr, n, target=fmt_p(data))

    def detach_pointer(self, n: Key | None, detach_from: int, finalize: bool) -> None:
        if n is None:
            raise GompFatal("enclosing struct not mapped for detach")
        idx = (detach_from - n.host_start) // 8
        if n.attach_count is None:
            raise GompFatal("no attachment counters for struct")
        if finalize:
            n.attach_count[idx] = 1
        if n.attach_count[idx] == 0:
            raise GompFatal("attach count underflow")
        n.attach_count[idx] -= 1
        if n.attach_count[idx] == 0:
            devptr = n.device_address + detach_from - n.host_start
            target = _abi.read_u64(detach_from)
            self._h2d_value(devptr, target)
            self._event("detach", GOMP_MAP_DETACH, detach_from, 8, devptr, n,
                        target=fmt_p(target))

    # -- gomp_map_val ------------------------------------------------------------------
    @staticmethod
    def map_val(tgt: Tgt, hostaddrs, i: int) -> int:
        tv = tgt.list[i]
        if tv.key is not None:
            return (tv.key.tgt.tgt_start + tv.key.tgt_offset + tv.offset) & _U64
        if tv.offset == OFFSET_INLINED:
            return hostaddrs[i] & _U64
        if tv.offset == OFFSET_POINTER:
            return 0
        if tv.offset == OFFSET_STRUCT:
            nx = tgt.list[i + 1]
            return (nx.key.tgt.tgt_start + nx.key.tgt_offset + nx.offset + hostaddrs[i]
                    - hostaddrs[i + 1]) & _U64
        return (tgt.tgt_start + tv.offset) & _U64

    # -- gomp_map_vars_internal (OpenMP) -----------------------------------------------------
    def map_vars(self, hostaddrs: list[int], sizes: list[int], kinds: list[int],
                 pragma_kind: int, rset: set | None = None) -> Tgt | None:
        """Map the list items of one construct (``hostaddrs`` is updated in place where
        libgomp writes it: ``use_device_ptr``, ``firstprivate``).  Returns the
        construct's :class:`Tgt` (None for ``enter data`` when nothing new was
        mapped).

        GCC 12 libgomp target.c ``gomp_map_vars_internal``, in its phases: the scan
        that finds what is mapped already and sizes the new block
        (:meth:`_map_vars_scan`), the block's allocation (:meth:`_alloc_block`), the
        pass that enters the new keys and writes the block (:meth:`_map_vars_fill`),
        and for a target region the copy of the argument addresses (``gomp_map_val``)
        to the block's start."""
        if rset is None:
            rset = set()
        mapnum = len(hostaddrs)
        tgt = Tgt([TargetVar() for _ in range(mapnum)],
                  refcount=0 if pragma_kind & GOMP_MAP_VARS_ENTER_DATA else 1)
        if mapnum == 0:
            return tgt
        tgt_align, tgt_size, not_found_cnt, has_firstprivate = self._map_vars_scan(
            tgt, hostaddrs, sizes, kinds, pragma_kind, rset)
        if not_found_cnt or pragma_kind & GOMP_MAP_VARS_TARGET:
            self._alloc_block(tgt, tgt_size, tgt_align)
        if not_found_cnt or has_firstprivate:
            self._map_vars_fill(tgt, hostaddrs, sizes, kinds, pragma_kind, rset)

        if pragma_kind & GOMP_MAP_VARS_TARGET:
            block = _abi.ScratchBuffer(8 * mapnum)
            block.set_u64s([self.map_val(tgt, hostaddrs, j) for j in range(mapnum)])
            self._h2d(tgt.tgt_start, block.address, 8 * mapnum)

        if pragma_kind & GOMP_MAP_VARS_ENTER_DATA and tgt.refcount == 0:
            # nothing new: libgomp frees the descriptor (its block, if any, is not used)
            self._free_block(tgt)
            return None
        return tgt

    def _map_vars_scan(self, tgt: Tgt, hostaddrs, sizes, kinds, pragma_kind: int,
                       rset: set) -> tuple[int, int, int, bool]:
        """The first loop of ``gomp_map_vars_internal``: every list item either
        found mapped (:meth:`_map_existing`, :meth:`_map_fields_existing`), inlined,
        or counted for the new block.  Returns ``(tgt_align, tgt_size,
        not_found_cnt, has_firstprivate)``: the block's alignment and size in bytes
        (the argument addresses of a target region first), how many items need a
        new key, and whether a later pass has firstprivate, always-pointer or attach
        items to write."""
        mapnum = len(hostaddrs)
        mm = self.mem_map
        tgt_align, tgt_size = 8, 0
        not_found_cnt = 0
        has_firstprivate = False
        if pragma_kind & GOMP_MAP_VARS_TARGET:
            tgt_align = 32
            tgt_size = mapnum * 8
        L = tgt.list
        i = 0
        while i < mapnum:
            kind = get_kind(kinds, i)
            implicit = implicit_p(kinds[i])
            t = kind & 0xFF
            if hostaddrs[i] == 0 or t == GOMP_MAP_FIRSTPRIVATE_INT:
                L[i].key = None
                L[i].offset = OFFSET_INLINED
                i += 1
                continue
            if t in (GOMP_MAP_USE_DEVICE_PTR, GOMP_MAP_USE_DEVICE_PTR_IF_PRESENT):
                L[i].key = None
                if not not_found_cnt:
                    self._use_device_ptr(L[i], hostaddrs, i, t)
                else:
                    L[i].offset = 0
                i += 1
                continue
            if t == GOMP_MAP_STRUCT:
                first, last = i + 1, i + sizes[i]
                s = hostaddrs[i]
                e = hostaddrs[last] + sizes[last]
                L[i].key = None
                L[i].offset = OFFSET_STRUCT
                n = mm.lookup(s, e)
                if n is None:
                    align = 1 << (kind >> 8)
                    tgt_align = max(tgt_align, align)
                    tgt_size -= hostaddrs[first] - s
                    tgt_size = _align_up(tgt_size, align)
                    tgt_size += e - s
                    not_found_cnt += last - i
                    for j in range(first, last + 1):
                        L[j].key = None
                    i = last + 1
                    continue
                for j in range(first, last + 1):
                    self._map_fields_existing(tgt, n, first, j, hostaddrs, sizes, kinds, rset)
                i = last + 1
                continue
            if t == GOMP_MAP_ALWAYS_POINTER:
                L[i].key = None
                L[i].offset = OFFSET_POINTER
                has_firstprivate = True
                i += 1
                continue
            if t in (GOMP_MAP_ATTACH, GOMP_MAP_ATTACH_ZERO_LENGTH_ARRAY_SECTION):
                L[i].key = None
                has_firstprivate = True
                i += 1
                continue
            s = hostaddrs[i]
            e = s + (8 if pointer_p(t) else sizes[i])
            if t == GOMP_MAP_FIRSTPRIVATE:
                L[i].key = None
                align = 1 << (kind >> 8)
                tgt_align = max(tgt_align, align)
                tgt_size = _align_up(tgt_size, align) + (e - s)
                has_firstprivate = True
                i += 1
                continue
            if t == GOMP_MAP_ZERO_LEN_ARRAY_SECTION:
                n = mm.map_0len_lookup(s, e)
                if n is None:
                    L[i].key = None
                    L[i].offset = OFFSET_POINTER
                    i += 1
                    continue
            else:
                n = mm.lookup(s, e)
            if n is not None and n.refcount != REFCOUNT_LINK:
                if t == GOMP_MAP_TO_PSET:
                    raise GompFatal(f"gomp_map_vars_internal: unhandled kind {kind:#04x} "
                                    "(Fortran array descriptors: not supported by "
                                    "offload_shim)")
                self._map_existing(n, s, e, L[i], t, False, implicit, rset)
            else:
                L[i].key = None
                if t == GOMP_MAP_IF_PRESENT:
                    L[i].offset = OFFSET_INLINED
                    if i + 1 < mapnum and (get_kind(kinds, i + 1) & 0xFF) == GOMP_MAP_POINTER:
                        i += 1
                        L[i].key = None
                        L[i].offset = 0
                    i += 1
                    continue
                align = 1 << (kind >> 8)
                not_found_cnt += 1
                tgt_align = max(tgt_align, align)
                tgt_size = _align_up(tgt_size, align) + (e - s)
                if t == GOMP_MAP_TO_PSET:
                    raise GompFatal(f"gomp_map_vars_internal: unhandled kind {kind:#04x} "
                                    "(Fortran array descriptors: not supported by "
                                    "offload_shim)")
            i += 1
        return tgt_align, tgt_size, not_found_cnt, has_firstprivate

    def _alloc_block(self, tgt: Tgt, tgt_size: int, tgt_align: int) -> None:
        """The construct's device block (``devicep->alloc_func`` in
        ``gomp_map_vars_internal``): ``tgt_size`` bytes aligned to ``tgt_align``.
        Raises :class:`GompFatal` when the device has no memory for it."""
        to_free = self.mem.alloc(tgt_size + tgt_align - 1)
        if not to_free:
            raise GompFatal("device memory allocation fail")
        tgt.to_free = to_free
        tgt.tgt_start = _align_up(to_free, tgt_align)
        tgt.tgt_end = tgt.tgt_start + tgt_size
        self.live_tgts[id(tgt)] = tgt

    def _use_device_ptr(self, tv: TargetVar, hostaddrs, i: int, t: int) -> None:
        """``use_device_ptr`` / ``use_device_ptr_if_present``: the host address
        ``hostaddrs[i]`` replaced by its device address when it is mapped; an
        unmapped ``use_device_ptr`` is fatal (libgomp's message)."""
        h = hostaddrs[i]
        n = self.mem_map.map_lookup(h, h)
        if n is not None:
            hostaddrs[i] = (n.device_address + h - n.host_start) & _U64
        elif t == GOMP_MAP_USE_DEVICE_PTR:
            raise GompFatal("use_device_ptr pointer wasn't mapped")
        tv.offset = OFFSET_INLINED

    def _map_vars_fill(self, tgt: Tgt, hostaddrs, sizes, kinds, pragma_kind: int,
                       rset: set) -> None:
        """The second loop of ``gomp_map_vars_internal``, over the items the scan
        left without a key: firstprivate copies into the block, the deferred
        ``use_device_ptr`` items, structures (their elements laid out together),
        always-pointers, attachments, and the new keys (:meth:`_map_new_key`)."""
        mapnum = len(hostaddrs)
        mm = self.mem_map
        L = tgt.list
        lay = _BlockLayout(mapnum * 8 if pragma_kind & GOMP_MAP_VARS_TARGET else 0)
        i = 0
        while i < mapnum:
            if L[i].key is not None:
                i += 1
                continue
            kind = get_kind(kinds, i)
            t = kind & 0xFF
            if hostaddrs[i] == 0:
                i += 1
                continue
            if t == GOMP_MAP_FIRSTPRIVATE:
                align = 1 << (kind >> 8)
                lay.size = _align_up(lay.size, align)
                L[i].offset = lay.size
                dev = tgt.tgt_start + lay.size
                self._h2d(dev, hostaddrs[i], sizes[i])
                self._event("firstprivate", t, hostaddrs[i], sizes[i], dev)
                lay.size += sizes[i]
                i += 1
                continue
            if t in (GOMP_MAP_FIRSTPRIVATE_INT, GOMP_MAP_ZERO_LEN_ARRAY_SECTION):
                i += 1
                continue
            if t in (GOMP_MAP_USE_DEVICE_PTR_IF_PRESENT, GOMP_MAP_USE_DEVICE_PTR):
                if L[i].offset == 0:
                    self._use_device_ptr(L[i], hostaddrs, i, t)
                i += 1
                continue
            if t == GOMP_MAP_STRUCT:
                first, last = i + 1, i + sizes[i]
                s = hostaddrs[i]
                e = hostaddrs[last] + sizes[last]
                if L[first].key is not None:
                    i += 1
                    continue
                n = mm.lookup(s, e)
                if n is None:
                    lay.open_struct(hostaddrs[i], hostaddrs[first], e, last, 1 << (kind >> 8))
                    i += 1
                    continue
                for j in range(first, last + 1):
                    self._map_fields_existing(tgt, n, first, j, hostaddrs, sizes, kinds,
                                              rset)
                i = last + 1
                continue
            if t == GOMP_MAP_ALWAYS_POINTER:
                self._map_always_pointer(tgt, hostaddrs, sizes, kinds, i)
                i += 1
                continue
            if t == GOMP_MAP_IF_PRESENT:
                if i + 1 < mapnum and (get_kind(kinds, i + 1) & 0xFF) == GOMP_MAP_POINTER:
                    i += 1
                i += 1
                continue
            if t in (GOMP_MAP_ATTACH, GOMP_MAP_ATTACH_ZERO_LENGTH_ARRAY_SECTION):
                self._map_attach(L[i], hostaddrs[i], sizes[i], t)
                i += 1
                continue
            self._map_new_key(tgt, i, hostaddrs[i], sizes[i], kind, implicit_p(kinds[i]),
                              lay, rset)
            i += 1

    def _map_always_pointer(self, tgt: Tgt, hostaddrs, sizes, kinds, i: int) -> None:
        """``GOMP_MAP_ALWAYS_POINTER``: the device copy of the pointer at
        ``hostaddrs[i]`` (which must be mapped) set to the device address of the
        previous item less ``sizes[i]`` (the bias), or 0."""
        s = hostaddrs[i]
        n = self.mem_map.lookup(s, s + 8)
        if n is None or n.host_start > s or n.host_end < s + 8:
            raise GompFatal("always pointer not mapped")
        val = 0
        if i > 0 and (get_kind(kinds, i - 1) & 0xFF) != GOMP_MAP_ALWAYS_POINTER:
            val = self.map_val(tgt, hostaddrs, i - 1)
        if val:
            val -= sizes[i]
        self._h2d_value(n.device_address + s - n.host_start, val & _U64)

    def _map_attach(self, tv: TargetVar, s: int, bias: int, t: int) -> None:
        """``GOMP_MAP_ATTACH`` (``_ZERO_LENGTH_ARRAY_SECTION``): when the pointer at
        host address ``s`` is mapped, the item refers to its key and the pointer is
        attached (:meth:`attach_pointer`, ``bias`` bytes)."""
        n = self.mem_map.lookup(s, s + 8)
        if n is not None:
            tv.key = n
            tv.offset = s - n.host_start
            tv.length = n.host_end - n.host_start
            tv.copy_from = tv.always_copy_from = False
            tv.is_attach = True
            self.attach_pointer(n, s, bias, t == GOMP_MAP_ATTACH_ZERO_LENGTH_ARRAY_SECTION)

    def _map_new_key(self, tgt: Tgt, i: int, s: int, size: int, kind: int, implicit: bool,
                     lay: _BlockLayout, rset: set) -> None:
        """List item ``i`` (host address ``s``, ``size`` bytes, map ``kind``) in the
        second loop: mapped meanwhile (an earlier item of the same construct) it is
        :meth:`_map_existing`; otherwise a new key at its place in the block
        (``lay``), entered in the table with its first reference, and its data
        copied as its kind says (:meth:`_copy_new_key`).  A ``declare target link``
        key it replaces is remembered and its device pointer redirected."""
        mm = self.mem_map
        tv = tgt.list[i]
        t = kind & 0xFF
        e = s + (8 if pointer_p(t) else size)
        n = mm.lookup(s, e)
        if n is not None and n.refcount != REFCOUNT_LINK:
            self._map_existing(n, s, e, tv, t, False, implicit, rset)
            return
        k = Key(s, e)
        if n is not None and n.refcount == REFCOUNT_LINK:
            mm.remove(n)
            k.link_key = n
        tv.key = k
        k.tgt = tgt
        k.refcount = 0
        lay.place(k, i, s, e, 1 << (kind >> 8))
        self.increment(k, rset)
        tv.copy_from = copy_from_p(t)
        tv.always_copy_from = always_from_p(t)
        tv.is_attach = False
        tv.offset = 0
        tv.length = e - s
        tgt.refcount += 1
        tgt.keys.append(k)
        mm.insert(k)
        dev = k.device_address
        self._event("map", t, s, e - s, dev, k)
        self._copy_new_key(tgt, k, kind, size)
        if k.link_key is not None:
            # the device's link pointer now points at the mapped object
            self._h2d_value(k.link_key.tgt_offset, dev)

    def _copy_new_key(self, tgt: Tgt, k: Key, kind: int, size: int) -> None:
        """What a new key's map kind copies to the device (the ``switch (kind &
        typemask)`` after a new key in ``gomp_map_vars_internal``): nothing for
        alloc / from, the host data for to / tofrom, the translated pointer for a
        pointer (:meth:`_map_pointer`, ``size`` being its bias), the pointer value
        for ``force_deviceptr``; ``force_present`` and unknown kinds are fatal."""
        t = kind & 0xFF
        s, e = k.host_start, k.host_end
        dev = k.device_address
        if t in (GOMP_MAP_ALLOC, GOMP_MAP_FROM, GOMP_MAP_FORCE_ALLOC,
                 GOMP_MAP_FORCE_FROM, GOMP_MAP_ALWAYS_FROM):
            pass
        elif t in (GOMP_MAP_TO, GOMP_MAP_TOFROM, GOMP_MAP_FORCE_TO,
                   GOMP_MAP_FORCE_TOFROM, GOMP_MAP_ALWAYS_TO, GOMP_MAP_ALWAYS_TOFROM):
            self._h2d(dev, s, e - s)
            self._event("copy_to", t, s, e - s, dev, k)
        elif t in (GOMP_MAP_POINTER, GOMP_MAP_POINTER_TO_ZERO_LENGTH_ARRAY_SECTION):
            self._map_pointer(tgt, _abi.read_u64(s), k.tgt_offset, size,
                              t == GOMP_MAP_POINTER_TO_ZERO_LENGTH_ARRAY_SECTION)
        elif t == GOMP_MAP_FORCE_PRESENT:
            size = e - s
            raise GompFatal(f"present clause: !acc_is_present ({fmt_p(s)}, {size} "
                            f"({size:#x}))")
        elif t == GOMP_MAP_FORCE_DEVICEPTR:
            self._h2d(dev, s, 8)
        else:
            raise GompFatal(f"gomp_map_vars_internal: unhandled kind {kind:#04x}")

    # -- gomp_unmap_vars_internal ----------------------------------------------------------
    def unmap_vars(self, tgt: Tgt, do_copyfrom: bool, rset: set | None = None) -> None:
        if rset is None:
            rset = set()
        if tgt.list_count == 0:
            self._free_block(tgt)
            return
        for tv in tgt.list:
            if tv.key is not None and tv.is_attach:
                self.detach_pointer(tv.key, tv.key.host_start + tv.offset, False)
        for tv in tgt.list:
            k = tv.key
            if k is None or tv.is_attach:
                continue
            do_copy, do_remove = self.decrement(k, rset, False)
            if (do_copy and do_copyfrom and tv.copy_from) or tv.always_copy_from:
                host = k.host_start + tv.offset
                dev = k.device_address + tv.offset
                self._d2h(host, dev, tv.length)
                self._event("copy_from", None, host, tv.length, dev, k)
            if do_remove:
                self.remove_var(k)
            elif k.refcount != REFCOUNT_INFINITY and k.count > 0:
                self._event("release", None, k.host_start + tv.offset, tv.length,
                            k.device_address + tv.offset, k)
        self.unref_tgt(tgt)

    # -- gomp_remove_var / gomp_unref_tgt -----------------------------------------------
    def _remove_key(self, k: Key) -> None:
        self.mem_map.remove(k)
        if k.link_key is not None:
            self.mem_map.insert(k.link_key)
            k.link_key = None
        k.attach_count = None
        self._event("unmap", None, k.host_start, k.host_end - k.host_start, k.device_address)

    def remove_var(self, k: Key) -> bool:
        if k.refcount == REFCOUNT_STRUCTELEM:
            for sib in k.se_first.se_siblings:
                self._remove_key(sib)
            k = k.se_first
        else:
            self._remove_key(k)
        return self.unref_tgt(k.tgt)

    def unref_tgt(self, tgt: Tgt) -> bool:
        if tgt.refcount > 1:
            tgt.refcount -= 1
            return False
        self._free_block(tgt)
        return True

    def _free_block(self, tgt: Tgt) -> None:
        if self.live_tgts.pop(id(tgt), None) is not None and tgt.to_free:
            if not self.mem.free(tgt.to_free):
                raise GompFatal(f"error in freeing device memory block at "
                                f"{fmt_p(tgt.to_free)}")
            tgt.to_free = 0

    # -- gomp_update ----------------------------------------------------------------------
    def update(self, hostaddrs, sizes, kinds) -> None:
        for i in range(len(hostaddrs)):
            if not sizes[i]:
                continue
            s = hostaddrs[i]
            e = s + sizes[i]
            n = self.mem_map.lookup(s, e)
            if n is None:
                continue
            kind = get_kind(kinds, i) & 0xFF
            if n.host_start > s or n.host_end < e:
                raise GompFatal(f"Trying to update [{fmt_p(s)}..{fmt_p(e)}) object when only "
                                f"[{fmt_p(n.host_start)}..{fmt_p(n.host_end)}) is mapped")
            dev = n.device_address + s - n.host_start
            if copy_to_p(kind):
                self._h2d(dev, s, e - s)
                self._event("update", GOMP_MAP_TO, s, e - s, dev, n)
            if copy_from_p(kind):
                self._d2h(s, dev, e - s)
                self._event("update", GOMP_MAP_FROM, s, e - s, dev, n)

    # -- gomp_exit_data ---------------------------------------------------------------------
    def exit_data(self, hostaddrs, sizes, kinds, rset: set | None = None) -> None:
        if rset is None:
            rset = set()
        mapnum = len(hostaddrs)
        for i in range(mapnum):
            if kinds[i] & 0xFF == GOMP_MAP_DETACH:
                s = hostaddrs[i]
                n = self.mem_map.lookup(s, s + 8)
                if n is not None:
                    self.detach_pointer(n, s, False)
        remove = []
        for i in range(mapnum):
            kind = kinds[i] & 0xFF
            if kind in (GOMP_MAP_FROM, GOMP_MAP_ALWAYS_FROM, GOMP_MAP_DELETE, GOMP_MAP_RELEASE,
                        GOMP_MAP_ZERO_LEN_ARRAY_SECTION,
                        GOMP_MAP_DELETE_ZERO_LEN_ARRAY_SECTION):
                s = hostaddrs[i]
                e = s + sizes[i]
                if kind in (GOMP_MAP_DELETE_ZERO_LEN_ARRAY_SECTION,
                            GOMP_MAP_ZERO_LEN_ARRAY_SECTION):
                    k = self.mem_map.map_0len_lookup(s, e)
                else:
                    k = self.mem_map.lookup(s, e)
                if k is None:
                    continue
                delete_p = kind in (GOMP_MAP_DELETE, GOMP_MAP_DELETE_ZERO_LEN_ARRAY_SECTION)
                do_copy, do_remove = self.decrement(k, rset, delete_p)
                if (kind == GOMP_MAP_FROM and do_copy) or kind == GOMP_MAP_ALWAYS_FROM:
                    dev = k.device_address + s - k.host_start
                    self._d2h(s, dev, e - s)
                    self._event("copy_from", kind, s, e - s, dev, k)
                if do_remove:
                    remove.append(k)
                else:
                    self._event("release", kind, s, e - s,
                                k.device_address + s - k.host_start, k)
            elif kind == GOMP_MAP_DETACH:
                pass
            else:
                raise GompFatal(f"GOMP_target_enter_exit_data unhandled kind {kind:#04x}")
        for k in remove:
            self.remove_var(k)

    # -- GOMP_target_enter_exit_data (enter part) ----------------------------------------
    def enter_data(self, hostaddrs, sizes, kinds) -> None:
        """The variables are mapped one list item (or one structure, or a base pointer
        with its attach) at a time, so they can be released independently."""
        rset: set = set()
        mapnum = len(hostaddrs)
        i = 0
        while i < mapnum:
            t = kinds[i] & 0xFF
            if t == GOMP_MAP_STRUCT:
                n = sizes[i] + 1
            elif t == GOMP_MAP_TO_PSET:
                j = i + 1
                while j < mapnum and (pointer_p(get_kind(kinds, j) & 0xFF)
                                      or get_kind(kinds, j) & 0xFF == GOMP_MAP_ALWAYS_POINTER):
                    j += 1
                n = j - i
            elif i + 1 < mapnum and kinds[i + 1] & 0xFF == GOMP_MAP_ATTACH:
                n = 2
            else:
                n = 1
            sub_h = hostaddrs[i:i + n]
            self.map_vars(sub_h, sizes[i:i + n], kinds[i:i + n], GOMP_MAP_VARS_ENTER_DATA,
                          rset)
            hostaddrs[i:i + n] = sub_h
            i += n

    # -- images: gomp_load_image_to_device / gomp_unload_image_from_device ----------------
    def load_image(self, funcs: list[int], vars_: list[tuple[int, int]], dev_addrs: list[int],
                   label: str = "") -> Tgt:
        """Insert the functions (device address = the host function itself: this device
        runs host code) and the variables (``(host address, size | link bit)``, device
        copies at ``dev_addrs``) of one image with an infinite count (``declare target
        link``: :data:`REFCOUNT_LINK`, the device address is that of its pointer)."""
        tgt = Tgt([], refcount=REFCOUNT_INFINITY)
        link_bit = 1 << 63
        for f in funcs:
            k = Key(f, f + 1)
            k.tgt = tgt
            k.tgt_offset = f
            k.refcount = REFCOUNT_INFINITY
            k.label = label
            tgt.keys.append(k)
            self.mem_map.insert(k)
        for (addr, size), dev in zip(vars_, dev_addrs):
            k = Key(addr, addr + (size & ~link_bit))
            k.tgt = tgt
            k.tgt_offset = dev
            k.refcount = REFCOUNT_LINK if size & link_bit else REFCOUNT_INFINITY
            k.label = label
            tgt.keys.append(k)
            self.mem_map.insert(k)
            self._event("map", GOMP_MAP_LINK if size & link_bit else GOMP_MAP_TO, addr,
                        size & ~link_bit, dev, k, image=label)
        return tgt

    def unload_image(self, funcs: list[int], vars_: list[tuple[int, int]]) -> None:
        link_bit = 1 << 63
        for f in funcs:
            k = self.mem_map.lookup(f, f + 1)
            if k is not None:
                self.mem_map.remove(k)
        for addr, size in vars_:
            s, e = addr, addr + (size & ~link_bit)
            k = self.mem_map.lookup(s, e)
            if k is None:
                continue
            if not size & link_bit:
                self.mem_map.remove(k)
                self._event("unmap", None, s, e - s, k.device_address)
            elif k.refcount == REFCOUNT_LINK:
                self.mem_map.remove(k)
            else:
                self.remove_var(k)              # puts the link key back: drop it too
                k2 = self.mem_map.lookup(s, e)
                if k2 is not None and k2.refcount == REFCOUNT_LINK:
                    self.mem_map.remove(k2)

    def function_mapped(self, fn: int) -> bool:
        """``gomp_get_target_fn_addr`` found ``fn`` (a function of a loaded image)."""
        k = self.mem_map.lookup(fn, fn + 1)
        return k is not None and k.host_end == k.host_start + 1 and k.tgt_offset == fn

    # -- omp_target_associate_ptr / disassociate_ptr ------------------------------------
    def associate(self, host: int, dev: int, size: int) -> int:
        """``omp_target_associate_ptr`` on this device: 0 or EINVAL (22)."""
        s, e = host, host + size
        n = self.mem_map.map_lookup(s, e)
        if n is not None:
            ok = (n.device_address == dev and n.host_start <= s and n.host_end >= e)
            return 0 if ok else 22
        tgt = Tgt([], refcount=1)
        k = Key(s, e)
        k.tgt = tgt
        k.tgt_offset = dev
        k.refcount = REFCOUNT_INFINITY
        tgt.keys.append(k)
        self.mem_map.insert(k)
        self._event("associate", None, s, size, dev, k)
        return 0

    def disassociate(self, ptr: int) -> int:
        """``omp_target_disassociate_ptr`` on this device: 0 or EINVAL (22)."""
        n = self.mem_map.map_lookup(ptr, ptr)
        if (n is not None and n.host_start == ptr and n.refcount == REFCOUNT_INFINITY
                and n.tgt.tgt_start == 0 and n.tgt.to_free == 0 and n.tgt.refcount == 1
                and n.tgt.list_count == 0):
            self.mem_map.remove(n)
            self._event("disassociate", None, n.host_start, n.host_end - n.host_start,
                        n.device_address)
            return 0
        return 22

    def release_all(self) -> int:
        """Free every device block still held (at teardown); returns how many."""
        n = 0
        for tgt in list(self.live_tgts.values()):
            try:
                self._free_block(tgt)
                n += 1
            except GompFatal:
                pass
        self.mem_map = MemMap()
        return n


__all__ = ["DeviceMemory", "GOMP_MAP_VARS_DATA", "GOMP_MAP_VARS_ENTER_DATA",
           "GOMP_MAP_VARS_TARGET", "GompFatal", "GompMapper", "Key", "MAP_KIND_NAMES",
           "MemMap", "OFFSET_INLINED", "OFFSET_POINTER", "OFFSET_STRUCT",
           "REFCOUNT_INFINITY", "REFCOUNT_LINK", "REFCOUNT_STRUCTELEM", "TargetVar", "Tgt",
           "fmt_p", "get_kind", "kind_name"]
