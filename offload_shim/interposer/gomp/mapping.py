"""libgomp 12's data mapping for one device, in Python: :class:`GompMapper`, what the
constructs, the images and the API routines do with a device's table.

GCC 12 ``libgomp/target.c``: ``gomp_unmap_vars_internal`` (the end of a construct:
detach, count down, copy back, remove), ``gomp_update``, ``gomp_exit_data``, the enter
part of ``GOMP_target_enter_exit_data`` (one ``gomp_map_vars`` per list item, structure,
or base pointer with its attach), ``gomp_load_image_to_device`` /
``gomp_unload_image_from_device``, the lookup of ``gomp_get_target_fn_addr``, and
``omp_target_associate_ptr`` / ``omp_target_disassociate_ptr``.  The rest of target.c's
mapping lives by subject: ``gomp_map_vars_internal`` in :mod:`.mapvars`; copies,
reference counts, attachments and removal in :mod:`.refcount`; the records and the splay
tree's lookups in :mod:`.memmap`; the map kinds (GCC 12 ``include/gomp-constants.h``) in
:mod:`.kinds`.  ``gomp_fatal`` conditions raise :class:`~.fatal.GompFatal` with libgomp's
message text (``%p`` as glibc prints it).

Reconstructed from the GCC 11 and GCC 13 sources (gcc-mirror/gcc, read with the search
tools; the GCC 12 branch is not stored): reference-count sets, structure-element counts,
implicit maps and ``GOMP_MAP_*_ZERO_LENGTH_ARRAY_SECTION`` are GCC 12 features present in
the GCC 13 text; ``resolve_device`` and the API routines follow the GCC 11 text, which GCC
13 changed (``omp_initial_device``); the GCC 13 additions that skip attached pointers when
copying a structure back and forth are not in GCC 12 (the installed libgomp 12.2's
``gomp_exit_data`` has no such loop) and are not reproduced.

Device memory and copies go through a :class:`~.refcount.DeviceMemory`; host memory is
read and written directly (this runs inside the program).  Not thread-safe: the caller
holds one lock per device (libgomp's ``devicep->lock``).
"""

from __future__ import annotations

from .fatal import GompFatal, fmt_p
from .kinds import (GOMP_MAP_ALWAYS_FROM, GOMP_MAP_ALWAYS_POINTER, GOMP_MAP_ATTACH,
                    GOMP_MAP_DELETE, GOMP_MAP_DELETE_ZERO_LEN_ARRAY_SECTION, GOMP_MAP_DETACH,
                    GOMP_MAP_FROM, GOMP_MAP_LINK, GOMP_MAP_RELEASE, GOMP_MAP_STRUCT,
                    GOMP_MAP_TO, GOMP_MAP_TO_PSET, GOMP_MAP_ZERO_LEN_ARRAY_SECTION,
                    copy_from_p, copy_to_p, get_kind, pointer_p)
from .mapvars import MapVars
from .memmap import (GOMP_MAP_VARS_ENTER_DATA, REFCOUNT_INFINITY, REFCOUNT_LINK, Key, MemMap,
                     Tgt)


class GompMapper(MapVars):
    """libgomp's mapping for one device: ``mem`` is its memory, ``trace`` receives one
    dict per mapping event (``op``: ``map`` (new mapping), ``present`` (already mapped,
    count adjusted), ``copy_to`` / ``copy_from``, ``firstprivate``, ``attach`` /
    ``detach``, ``unmap`` (mapping removed), ``release`` (count decremented), ``update``;
    ``kind``, ``host``, ``size``, ``device``, ``refcount``).  Raises :class:`GompFatal`
    where libgomp calls ``gomp_fatal``.  Built in layers, one upstream subject each:
    :class:`~.refcount.MappingCore` (counts, attachments, removal) <
    :class:`~.mapvars.MapVars` (``gomp_map_vars_internal``) < this class (the constructs,
    the images, the associations)."""

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


__all__ = ["GompMapper"]
