"""The life of a mapping in libgomp 12: device copies, reference counts, pointer
attachments and removal, for one device.

:class:`MappingCore` holds a device's table (:class:`~.memmap.MemMap`), its memory
(:class:`DeviceMemory`: the plugin's ``GOMP_OFFLOAD_alloc`` / ``_free`` / ``_host2dev`` /
``_dev2host`` / ``_dev2dev`` of GCC 12 ``libgomp/libgomp-plugin.h``) and the construct
blocks not yet freed, and does what mapping (:mod:`.mapvars`) and the constructs
(:mod:`.mapping`) both need, after GCC 12 ``libgomp/target.c``: ``gomp_copy_host2dev`` /
``gomp_copy_dev2host`` (with their fatal messages), ``gomp_increment_refcount`` /
``gomp_decrement_refcount`` (OpenMP 5.0: a construct changes each reference count at
most once -- the set ``refcount_set`` -- so the elements of one structure, which share
one count, are counted once), ``gomp_attach_pointer`` / ``gomp_detach_pointer``,
``gomp_remove_var``, ``gomp_unref_tgt`` and the free of a construct's block (``tgt``'s
``to_free``).  OpenMP's ``refcount`` is the only count libgomp 12 keeps for OpenMP:
``target enter data`` and structured constructs both change it (``dynamic_refcount`` is
OpenACC's).

Host memory is read and written directly (this runs inside the program).  Not
thread-safe: the caller holds one lock per device (libgomp's ``devicep->lock``).
"""

from __future__ import annotations

from collections.abc import Callable

from ...abi import gomp_interposer as _abi
from .fatal import GompFatal, fmt_p
from .kinds import GOMP_MAP_ATTACH, GOMP_MAP_DETACH, kind_name
from .memmap import REFCOUNT_INFINITY, REFCOUNT_LINK, REFCOUNT_STRUCTELEM, Key, MemMap, Tgt

_U64 = (1 << 64) - 1


class DeviceMemory:
    """What the mapping needs from a device (libgomp's plugin calls): each returns False
    (copies, free) or 0 (alloc) on failure."""

    def alloc(self, size: int) -> int: ...
    def free(self, ptr: int) -> bool: ...
    def host2dev(self, dev: int, host: int, size: int) -> bool: ...
    def dev2host(self, host: int, dev: int, size: int) -> bool: ...
    def dev2dev(self, dst: int, src: int, size: int) -> bool: ...


Trace = Callable[[dict], None]


class MappingCore:
    """The table, memory and trace of one device's mapping and the rules every
    construct shares (module docstring); the arguments (``mem``, ``trace``) and the
    events are described at :class:`~.mapping.GompMapper`.  ``live_tgts``: the
    construct blocks not yet freed (``id`` -> :class:`~.memmap.Tgt`); ``construct``: the
    name the events carry.
    Raises :class:`~.fatal.GompFatal` where libgomp calls ``gomp_fatal``."""

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


__all__ = ["DeviceMemory", "MappingCore", "Trace"]
