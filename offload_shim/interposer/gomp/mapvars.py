"""libgomp 12's ``gomp_map_vars_internal`` for OpenMP (``short_mapkind``): how one
construct maps its list items on one device.

After GCC 12 ``libgomp/target.c``, in its phases: the first loop finds what is mapped
already (``gomp_map_vars_existing``; ``gomp_map_fields_existing`` for the elements of a
``GOMP_MAP_STRUCT``), inlines what needs no device copy and sizes the construct's new
block (``tgt_size``, ``tgt_align``); the block is allocated (``devicep->alloc_func``);
the second loop writes firstprivate copies, lays out and enters the new keys (a
structure's elements keep their host layout and share one count), copies what their
kinds say, translates pointers (``gomp_map_pointer``), sets always-pointers and attaches
(``gomp_attach_pointer``, in :mod:`.refcount`); a target region gets its argument
addresses (``gomp_map_val``) at the block's start.  Implicit maps (``GOMP_MAP_IMPLICIT``)
and ``GOMP_MAP_*_ZERO_LENGTH_ARRAY_SECTION`` are GCC 12 features; Fortran array
descriptors (``GOMP_MAP_TO_PSET``) are refused with libgomp's "unhandled kind" message.
The end of a construct (``gomp_unmap_vars_internal``) and the other constructs are
:mod:`.mapping`'s.
"""

from __future__ import annotations

from ...abi import gomp_interposer as _abi
from .fatal import GompFatal, fmt_p
from .kinds import (GOMP_MAP_ALLOC, GOMP_MAP_ALWAYS_FROM, GOMP_MAP_ALWAYS_POINTER,
                    GOMP_MAP_ALWAYS_TO, GOMP_MAP_ALWAYS_TOFROM, GOMP_MAP_ATTACH,
                    GOMP_MAP_ATTACH_ZERO_LENGTH_ARRAY_SECTION, GOMP_MAP_FIRSTPRIVATE,
                    GOMP_MAP_FIRSTPRIVATE_INT, GOMP_MAP_FLAG_FORCE, GOMP_MAP_FORCE_ALLOC,
                    GOMP_MAP_FORCE_DEVICEPTR, GOMP_MAP_FORCE_FROM, GOMP_MAP_FORCE_PRESENT,
                    GOMP_MAP_FORCE_TO, GOMP_MAP_FORCE_TOFROM, GOMP_MAP_FROM,
                    GOMP_MAP_IF_PRESENT, GOMP_MAP_POINTER,
                    GOMP_MAP_POINTER_TO_ZERO_LENGTH_ARRAY_SECTION, GOMP_MAP_STRUCT,
                    GOMP_MAP_TO, GOMP_MAP_TO_PSET, GOMP_MAP_TOFROM, GOMP_MAP_USE_DEVICE_PTR,
                    GOMP_MAP_USE_DEVICE_PTR_IF_PRESENT, GOMP_MAP_ZERO_LEN_ARRAY_SECTION,
                    always_from_p, always_to_p, copy_from_p, get_kind, implicit_p, pointer_p)
from .memmap import (GOMP_MAP_VARS_ENTER_DATA, GOMP_MAP_VARS_TARGET, OFFSET_INLINED,
                     OFFSET_POINTER, OFFSET_STRUCT, REFCOUNT_LINK, REFCOUNT_STRUCTELEM, Key,
                     TargetVar, Tgt)
from .refcount import MappingCore

_U64 = (1 << 64) - 1


def _align_up(x: int, a: int) -> int:
    return (x + a - 1) & ~(a - 1)


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


class MapVars(MappingCore):
    """:class:`~.refcount.MappingCore` plus ``gomp_map_vars_internal`` (module
    docstring): :meth:`map_vars` and its phases, and :meth:`map_val`."""

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


__all__ = ["MapVars"]
