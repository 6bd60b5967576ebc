"""A libgomp 12 device's table of mappings: the records and the splay tree's lookups.

GCC 12 ``libgomp/libgomp.h``: ``splay_tree_key_s`` (:class:`Key`: host ``[host_start,
host_end)``, ``tgt`` + ``tgt_offset`` = device address, ``refcount`` with its special
values ``REFCOUNT_INFINITY`` / ``REFCOUNT_LINK`` / ``REFCOUNT_STRUCTELEM`` and the chain
of a structure's elements, which share one count), ``target_var_desc``
(:class:`TargetVar`, with the ``OFFSET_*`` markers), ``target_mem_desc`` (:class:`Tgt`:
one device block per construct holding every new mapping of that construct, reference
counted by its keys and the construct) and ``enum gomp_map_vars_kind``.
``libgomp/splay-tree.c`` ``splay_tree_lookup`` / ``splay_tree_insert`` /
``splay_tree_remove`` over ``libgomp/target.c`` ``splay_compare``, plus ``gomp_map_lookup``
and ``gomp_map_0len_lookup`` of target.c: :class:`MemMap`, a sorted list where libgomp
has a splay tree (keys never overlap, so a lookup is a bisection).

Records only: the rules that change them live in :mod:`.refcount` (counts, attachments,
removal), :mod:`.mapvars` (``gomp_map_vars_internal``) and :mod:`.mapping` (the
constructs, images, associations).
"""

from __future__ import annotations

import bisect

from ...records import FieldsRepr
from .fatal import fmt_p

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


__all__ = ["GOMP_MAP_VARS_DATA", "GOMP_MAP_VARS_ENTER_DATA", "GOMP_MAP_VARS_OPENACC",
           "GOMP_MAP_VARS_TARGET", "Key", "MemMap", "OFFSET_INLINED", "OFFSET_POINTER",
           "OFFSET_STRUCT", "REFCOUNT_INFINITY", "REFCOUNT_LINK", "REFCOUNT_STRUCTELEM",
           "TargetVar", "Tgt"]
