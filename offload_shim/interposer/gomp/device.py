"""A libgomp device with separate memory for GCC-built code, on the host.

libgomp's model of a device (GCC 12 ``target.c``): images of the registered libraries are
loaded when the device initialises (``gomp_init_device``) and when they register later,
their ``declare target`` variables stay mapped with an infinite count until the image
unregisters, every construct maps its list items into device memory
(``gomp_map_vars``), and a region runs its device function on the block of device
addresses.  :class:`GompHostDevice` is such a device whose memory is host memory: it comes
from the bundled host plugin's GOMP view (``GOMP_OFFLOAD_alloc`` & co.) through the
device's memory pool (:class:`~offload_shim.core.device.Device`), the mapping is
:class:`~offload_shim.interposer.gomp.mapping.GompMapper` (libgomp 12's rules), and the
"device function" of a region is its host function, called on the device addresses
(native/interposer_gomp.c runs it inside libgomp's own host fallback, which provides the
fresh OpenMP context and the ``thread_limit``).

Because the region's code is the host code, two things stay the host's (docs/interpose.md,
"Limits"): ``declare target`` variables, which region code names directly, are the host
variables -- so the device's copy of each *is* the host variable (device address = host
address, mapped for good while the image is registered; ``target update`` and map clauses
on them move nothing, and mistakes in moving them are not shown) -- and
``omp_is_initial_device()`` inside a region answers 1.
"""

from __future__ import annotations

import threading

from ...abi import gomp_interposer as _abi
from ...errors import OffloadError
from .mapping import GompMapper
from .memmap import GOMP_MAP_VARS_TARGET

#: events kept for the report (the count of dropped ones is reported)
MAX_EVENTS = 100_000


class _DeviceMemory:
    """:class:`~offload_shim.interposer.gomp.refcount.DeviceMemory` over a
    :class:`~offload_shim.core.device.Device` (pool allocations, plugin copies), plus the
    host ranges the device shares (``declare target`` variables: device address = host
    address), where a copy is a host ``memmove``."""

    def __init__(self, device):
        self.device = device
        self.shared: dict[int, int] = {}          # start -> end of shared host ranges

    def _in_shared(self, addr: int, size: int) -> bool:
        return any(s <= addr and addr + size <= e for s, e in self.shared.items())

    def alloc(self, size: int) -> int:
        try:
            return int(self.device.alloc(int(size)) or 0)
        except (OffloadError, ValueError):
            return 0

    def free(self, ptr: int) -> bool:
        try:
            self.device.free(ptr)
            return True
        except OffloadError:
            return False

    def host2dev(self, dev: int, host: int, size: int) -> bool:
        if self._in_shared(dev, size):
            _abi.host_memmove(dev, host, size)
            return True
        try:
            self.device.submit_raw(dev, host, size)
            return True
        except OffloadError:
            return False

    def dev2host(self, host: int, dev: int, size: int) -> bool:
        if self._in_shared(dev, size):
            _abi.host_memmove(host, dev, size)
            return True
        try:
            self.device.retrieve_raw(host, dev, size)
            return True
        except OffloadError:
            return False

    def dev2dev(self, dst: int, src: int, size: int) -> bool:
        if size <= 0:
            return True
        if self._in_shared(dst, size) and self._in_shared(src, size):
            _abi.host_memmove(dst, src, size)
            return True
        buf = _abi.ScratchBuffer(size)
        return self.dev2host(buf.address, src, size) and self.host2dev(dst, buf.address, size)


class GompHostDevice:
    """One libgomp OpenMP device over host memory.

    ``runtime``: a :class:`~offload_shim.Runtime` whose first device belongs to a GOMP
    plugin with host-addressable memory; default: a new runtime over the bundled host
    plugin's GOMP view (closed by :meth:`close`).  ``events``: the mapping events
    (:class:`~offload_shim.interposer.gomp.mapping.GompMapper`), at most
    :data:`MAX_EVENTS`, then ``dropped_events`` counts.  Not thread-safe: the caller
    holds one lock (libgomp's ``devicep->lock``).  Raises the PluginLoadError family,
    LifecycleError."""

    def __init__(self, runtime=None):
        if runtime is None:
            import offload_shim as osh
            runtime = osh.Runtime([], bundled=True, abi="gomp")
            self._own_runtime = True
        else:
            self._own_runtime = False
        self.runtime = runtime
        devs = [d for d in runtime.devices if getattr(d.plugin, "abi", None) == "gomp"]
        if not devs:
            raise OffloadError("the GCC host device needs a GOMP plugin device (the bundled "
                               "plugin's GOMP view)")
        self.device = devs[0]
        self.label = f"gomp-host:{self.device.label}"
        self.events: list[dict] = []
        self.dropped_events = 0
        self.mapper = GompMapper(_DeviceMemory(self.device), trace=self.trace)
        self.initialized = False
        self._images: dict[tuple[int, int], dict] = {}
        self._regions: dict[int, object] = {}
        self._next_handle = 1
        self._lock = threading.RLock()
        self.closed = False

    def trace(self, ev: dict) -> None:
        """Record one mapping event (a dict, see
        :class:`~offload_shim.interposer.gomp.mapping.GompMapper`); ``seq`` is added."""
        if len(self.events) < MAX_EVENTS:
            ev["seq"] = len(self.events) + self.dropped_events
            self.events.append(ev)
        else:
            self.dropped_events += 1

    # -- lifecycle (gomp_init_device / gomp_load_image_to_device) ------------------------
    def ensure_init(self, registrations) -> None:
        """Initialise the device once and load every registered image
        (``gomp_init_device``); ``registrations``: records with ``funcs``, ``vars``,
        ``host_table``, ``target_data``, ``name``."""
        if self.initialized:
            return
        self.device.init()
        self.initialized = True
        for rec in registrations:
            self.load_image(rec)

    def load_image(self, rec: dict) -> None:
        """``gomp_load_image_to_device``: the image's functions (device address = the host
        function, which is what runs) and its ``declare target`` variables (``to`` and
        ``link`` alike: device address = host address, see the module docstring) are
        mapped with an infinite count until the image unregisters."""
        key = (rec["host_table"], rec["target_data"])
        if not self.initialized or key in self._images:
            return
        size_mask = (1 << 63) - 1
        vars_ = [(addr, size & size_mask) for addr, size in rec["vars"]]
        mem = self.mapper.mem
        for addr, size in vars_:
            if size:
                mem.shared[addr] = max(mem.shared.get(addr, 0), addr + size)
        self.mapper.construct = "load_image"
        tgt = self.mapper.load_image(list(rec["funcs"]), vars_, [a for a, _s in vars_],
                                     label=rec.get("name", ""))
        self._images[key] = {"tgt": tgt, "funcs": list(rec["funcs"]), "vars": vars_}

    def unload_image(self, rec: dict) -> None:
        """``gomp_unload_image_from_device``: the image's mappings leave the table."""
        img = self._images.pop((rec["host_table"], rec["target_data"]), None)
        if img is None:
            return
        self.mapper.construct = "unload_image"
        self.mapper.unload_image(img["funcs"], img["vars"])
        for addr, _size in img["vars"]:
            self.mapper.mem.shared.pop(addr, None)

    def loaded_images(self) -> int:
        return len(self._images)

    # -- regions -----------------------------------------------------------------------
    def map_region(self, hostaddrs, sizes, kinds) -> tuple[int, int]:
        """``gomp_map_vars(..., GOMP_MAP_VARS_TARGET)``: (handle for
        :meth:`unmap_region`, device address of the argument block)."""
        self.mapper.construct = "target"
        tgt = self.mapper.map_vars(hostaddrs, sizes, kinds, GOMP_MAP_VARS_TARGET, set())
        h = self._next_handle
        self._next_handle += 1
        self._regions[h] = tgt
        return h, tgt.tgt_start

    def unmap_region(self, handle: int) -> None:
        """``gomp_unmap_vars(tgt, true, <a fresh refcount set>)`` after the region."""
        tgt = self._regions.pop(handle, None)
        if tgt is not None:
            self.mapper.construct = "target"
            self.mapper.unmap_vars(tgt, True, set())

    def live_mappings(self) -> list[dict]:
        """The mapping table now: one dict per key (host, size, device, refcount)."""
        return [k.describe() for k in self.mapper.mem_map.keys()
                if k.host_end - k.host_start > 1 or k.tgt_offset != k.host_start]

    # -- teardown ----------------------------------------------------------------------
    def close(self) -> dict:
        """Free what is still mapped (regions in flight, data regions never ended, the
        images' variables), then close the runtime if this device made it.  Returns
        ``{"blocks_freed": n, "images_unloaded": m}``.  Idempotent."""
        if self.closed:
            return {"blocks_freed": 0, "images_unloaded": 0}
        self.closed = True
        images = len(self._images)
        self._images.clear()
        self.mapper.mem.shared.clear()
        self._regions.clear()
        blocks = self.mapper.release_all() if self.initialized else 0
        if self._own_runtime:
            try:
                self.runtime.close()
            except OffloadError:
                pass
        return {"blocks_freed": blocks, "images_unloaded": images}


__all__ = ["GompHostDevice", "MAX_EVENTS"]
