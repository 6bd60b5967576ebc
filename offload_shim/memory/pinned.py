"""Pinned (page-locked) host memory for offloaded data (gcc-patches -foffload-memory=pinned).

gcc-patches (Schwinge/Stubbs on ``-foffload-memory=pinned``): libgomp pins the
*whole process* with ``mlockall``, which (a) runs into ``ulimit -l`` and (b)
does not register the memory with the GPU driver.  The proposal there is to
pin only the memory that actually appears in offloading (``map`` clauses),
after the fact, tracking what was pinned.  This module implements both, per
:class:`~offload_shim.Runtime`, as three policies (see ``docs/pinned-memory.md``):

* ``"none"``   nothing is pinned implicitly (explicit :meth:`PinnedRegistry.pin`
  and :meth:`PinnedRegistry.alloc_host` still work);
* ``"mapped"`` a host range is pinned when it is first submitted to or
  retrieved from a device block and unpinned when that block is freed, the
  device is deinitialised, or the runtime closes (the gcc-patches proposal);
* ``"all"``    ``mlockall(MCL_CURRENT | MCL_FUTURE)`` like libgomp's
  ``-foffload-memory=pinned``; a too-low limit only warns;
  ``munlockall`` at close.

This module is the registry and its locking API (:class:`PinnedRegistry`: pin,
unpin, queries, the policies' hooks, teardown).  Its neighbours hold the other
subjects, and their public names are importable from here too:

* :mod:`.pinned_ranges`: the per-device table of pinned ranges (LLVM
  ``PinnedAllocationMapTy``, ``PluginInterface.cpp`` of the nextgen plugins, one per
  ``GenericDeviceTy``) and :class:`PinnedRange`, the snapshot handed out;
* :mod:`.pinned_host`: page-locked host allocations (:class:`PinnedHostPool`,
  :class:`PinnedHostBuffer`, :func:`size_class_pages`);
* :mod:`.pin_backends`: how a range is locked -- the plugin's own entry points, a
  GOMP plugin's page-locked allocator, ``cuMemHostRegister`` or ``mlock`` -- chosen
  per device by :func:`~offload_shim.memory.pin_backends.select_backend`, and the
  process facts the backends check.

Range rule (LLVM ``PinnedAllocationMapTy::lockHostBuffer``, which backs
liboffload ``olMemRegister``): per device, pinning the exact same range again
counts a reference; a range that lies *fully inside* a pinned range is a
nested pin that counts on the enclosing range (no second lock call); any
other intersection -- partial overlap, or a new range that *contains* a pinned
one -- raises :class:`~offload_shim.errors.PinnedRangeError`.  Unpinning a
range that is not pinned and pinning 0 bytes raise the same error.

Stale pins: a pin of a buffer object keeps its memory mapped (the buffer
export holds it), a pin of a raw ``int`` address does not.  When its memory
is unmapped without an unpin and new memory is mapped at that address, the
kernel holds no lock on the new pages, so a pin there must not count a
reference on the dead one.  Each raw pin records what the kernel shows for
its pages: for a backend that locks with ``mlock``, their ``VM_LOCKED`` state
(:func:`~offload_shim.memory.pin_backends.span_locked`), else the mapping's
identity (:func:`~offload_shim.memory.pin_backends.mapping_identity`:
extent, device, inode, file offset).  A pin, :meth:`PinnedRegistry.is_pinned`,
:meth:`PinnedRegistry.ranges` and :meth:`PinnedRegistry.bytes_pinned` check
it again; a pin whose memory changed is stale: never reported, new pins that
touch it raise :class:`~offload_shim.errors.StalePinError`, and unpinning it
removes it.  (An anonymous mapping replaced by one of the same extent is
invisible in ``/proc/self/maps``, so for a backend that does not ``mlock``
-- ``cuMemHostRegister``, which refuses a second registration itself (712),
``olMemRegister`` of GPU plugins -- only unmapped, resized or file-backed
replacements are caught.)

``RLIMIT_MEMLOCK``: before a backend that counts against it (``mlock``, the
bundled plugin, ``mlockall``) locks, the soft limit is compared with the bytes
already locked (``VmLck`` of ``/proc/self/status``) plus the page span asked
for; when it would be exceeded :class:`~offload_shim.errors.MemlockLimitError`
names the limit, the bytes and ``ulimit -l``.  A process with
``CAP_IPC_LOCK`` is not checked: the kernel ignores the limit for it
(mm/mlock.c ``can_do_mlock``).

Importing this module does no work; libc and cuda-python are loaded on first use.
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref

from ..errors import (LifecycleError, OffloadError, PinnedMemoryError, PinnedRangeError,
                      StalePinError)
from .pin_backends import (_PROCESS, _REGISTRIES, PAGE, CudaHostRegisterBackend,
                           GompPageLockedBackend, MlockBackend, OlMemRegisterBackend, PinBackend,
                           PluginLockBackend, _page_span, check_memlock, cuda_driver_available,
                           has_cap_ipc_lock, mapping_identity, memlock_limit, select_backend,
                           span_locked, vmlck_bytes)
from .pinned_host import (DEFAULT_POOL_CACHE, MAX_HOST_ALLOC, PinnedHostBuffer, PinnedHostPool,
                          size_class_pages)
from .pinned_ranges import LOCKED, PinDomain, PinEntry, PinnedRange, address_of

from ..lazylog import log  # logging.getLogger("offload_shim"), imported on first use

# the policy names and their variable live with the other options (a runtime reads them
# when it is created, without importing this module: start-up of every run)
from .config import PIN_POLICIES as POLICIES, PINNED_ENV, resolve_pin_policy as resolve_policy


class PinnedMemoryWarning(RuntimeWarning):
    """Pinning was skipped (policy ``"all"`` under a low ``ulimit -l``, a
    ``"mapped"`` pin that could not be made); the transfer itself still runs."""


class PinnedRegistry:
    """Reference-counted pinned host ranges of one runtime.

    ``runtime``: the owning :class:`~offload_shim.Runtime` (or None);
    ``policy``: ``"none"``/``"mapped"``/``"all"`` (see the module docstring).
    Ranges are kept per device (``device=None`` is the process domain, pinned
    with ``mlock``).  Thread safe.  :meth:`close` unpins everything (also from
    ``Runtime.close``).  Raises ValueError for an unknown policy."""

    def __init__(self, runtime=None, *, policy: str = "none",
                 pool_cache_bytes: int = DEFAULT_POOL_CACHE):
        self.policy = resolve_policy(policy)
        self._runtime = weakref.ref(runtime) if runtime is not None else None
        self._lock = threading.RLock()
        self._domains: dict[object, PinDomain] = {}
        self._closed = False
        self._all_locked = False
        self._warned: set[str] = set()
        self.skipped = 0                         # "mapped" pins that could not be made
        self._pools: dict[object, PinnedHostPool] = {}
        self._pool_cache_bytes = int(pool_cache_bytes)
        _REGISTRIES.add(self)

    def __repr__(self) -> str:
        return (f"<PinnedRegistry policy={self.policy!r} ranges={len(self.ranges())}"
                f"{' closed' if self._closed else ''}>")

    def __enter__(self) -> "PinnedRegistry":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise LifecycleError("pinned-memory registry is closed (the runtime was closed): "
                                 "nothing can be pinned, unpinned or allocated any more")

    # -- domains ---------------------------------------------------------------
    def _domain(self, device) -> PinDomain:
        """The domain of ``device``; the caller has initialised the device
        (never initialise under the registry lock: device teardown takes the
        device lock, then this one)."""
        dom = self._domains.get(device)
        if dom is None:
            dom = self._domains[device] = PinDomain(device, select_backend(device, purpose="allocate"))
        return dom

    def backend_for(self, device=None) -> str:
        """Name of the backend that pins existing ranges for ``device``
        (initialises the device)."""
        return self.pin_backend(device).name

    def pin_backend(self, device=None) -> PinBackend:
        """The backend that pins existing ranges for ``device`` (initialises
        the device); it lives until the device's pins end (deinit, close).
        LifecycleError after :meth:`close`."""
        if device is not None:
            device.init()
        with self._lock:
            self._check_open()
            return self._domain(device).reg_backend

    # -- pin / unpin ---------------------------------------------------------------
    def pin(self, buf, size: int | None = None, *, device=None) -> PinnedRange:
        """Pin ``[address, address+size)`` of a buffer object (``size``
        defaults to its length) or of an int address (``size`` required) for
        ``device`` (None = process).  Same range again: one more reference;
        fully inside a pinned range: nested reference; any other intersection:
        PinnedRangeError.  Raises PinnedRangeError (size 0, overlap),
        MemlockLimitError, PinnedMemoryError (backend failure), TypeError,
        LifecycleError (closed registry, checked first).  Returns the
        enclosing range."""
        self._check_open()
        addr, n, keep = address_of(buf, size)
        if n <= 0:
            raise PinnedRangeError(f"cannot pin {n} bytes at {addr:#x}: size must be > 0",
                                   address=addr, size=n)
        return self._pin(device, addr, n, keep)

    def _pin(self, device, addr: int, n: int, keep, *, host_block: bool = False,
             enter: bool = True) -> PinnedRange:
        if enter and device is not None:
            with device.in_use():                 # initialised + not torn down under us
                return self._pin(device, addr, n, keep, host_block=host_block, enter=False)
        with self._lock:
            self._check_open()
            dom = self._domain(device)
            hits = dom.find(addr, n)
            for e in hits:
                if not self._held(dom, e):
                    raise StalePinError(
                        f"pin of [{addr:#x}, +{n}){' on ' + dom.label if dom.label else ''}: "
                        f"it touches the pin of raw address range [{e.start:#x}, +{e.size}), "
                        f"whose memory was unmapped (or mapped anew) since without an unpin; "
                        f"the kernel no longer holds that lock.  unpin [{e.start:#x}, "
                        f"+{e.size}) first, then pin the new memory", address=addr, size=n,
                        pinned=(e.start, e.size), device=dom.label)
            if len(hits) == 1 and hits[0].start <= addr and addr + n <= hits[0].end:
                e = hits[0]
                key = (addr, n)
                if key == (e.start, e.size):
                    e.own += 1
                else:
                    e.nested[key] = e.nested.get(key, 0) + 1
                e.keep.setdefault(key, []).append(keep)
                return self._snap(dom, e)
            if hits:
                o = hits[0]
                raise PinnedRangeError(
                    f"[{addr:#x}, +{n}) partly overlaps pinned [{o.start:#x}, +{o.size})"
                    f"{' on ' + dom.label if dom.label else ''}: a pin must equal or lie "
                    "inside a pinned range, or not touch one (liboffload olMemRegister "
                    "rule)", address=addr, size=n, device=dom.label)
            be = dom.reg_backend
            if be.counts_memlock and not _PROCESS.all_locked:
                s, e_ = _page_span(addr, n)
                check_memlock(e_ - s, f"pin [{addr:#x}, +{n})")
            be.lock(addr, n)
            e = PinEntry(addr, n)
            e.own = 1
            e.host_block = host_block
            if keep is None and not host_block:     # a raw address: nothing keeps it mapped
                e.ident = LOCKED if be.counts_memlock else mapping_identity(addr, n)
            e.keep[(addr, n)] = [keep]
            dom.insert(e)
            return self._snap(dom, e)

    @staticmethod
    def _held(dom: PinDomain, e: PinEntry) -> bool:
        """(Registry lock held.)  False when ``e`` is a raw pin whose memory
        changed since it was pinned (module docstring, "Stale pins"); it is
        then marked stale for good.  True while the kernel's state cannot be
        read."""
        if e.stale:
            return False
        if e.ident is None:
            return True
        if e.ident is LOCKED:
            held = span_locked(e.start, e.size) is not False
        else:
            now = mapping_identity(e.start, e.size)
            held = now is None or now == e.ident
        if not held:
            e.stale = True
            log.warning("pin of [%#x, +%d)%s is stale: its memory was unmapped or mapped "
                        "anew without an unpin", e.start, e.size,
                        f" on {dom.label}" if dom.label else "")
        return held

    def unpin(self, buf, size: int | None = None, *, device=None) -> int:
        """Drop one reference of a pinned range (same arguments as :meth:`pin`;
        an int address with no size matches a range starting there).  The
        range is unlocked when its last own and nested reference is gone.
        Returns the references left on the enclosing range.  Raises
        PinnedRangeError when that range is not pinned on ``device``,
        LifecycleError after :meth:`close` (every range is unpinned then)."""
        self._check_open()
        if isinstance(buf, int) and not isinstance(buf, bool) and size is None:
            addr, n = buf, None
        else:
            addr, n, _ = address_of(buf, size)
        with self._lock:
            self._check_open()
            dom = self._domains.get(device)
            e = None if dom is None else self._match(dom, addr, n)
            if e is None:
                where = f" on {device.label}" if device is not None else ""
                raise PinnedRangeError(f"unpin of [{addr:#x}, +{n if n is not None else '?'})"
                                       f"{where}: not pinned", address=addr, size=n or 0,
                                       device=None if dom is None else dom.label)
            key = e[1]
            return self._drop(dom, e[0], key)

    def _match(self, dom: PinDomain, addr: int, n: int | None):
        hits = dom.find(addr, n or 1)
        for e in hits:
            if n is None:
                if e.start == addr and e.own:
                    return e, (e.start, e.size)
                keys = [k for k in e.nested if k[0] == addr]
                if len(keys) == 1:
                    return e, keys[0]
            elif (addr, n) == (e.start, e.size) and e.own:
                return e, (addr, n)
            elif (addr, n) in e.nested:
                return e, (addr, n)
        return None

    def _drop(self, dom: PinDomain, e: PinEntry, key) -> int:
        if key == (e.start, e.size) and e.own:
            e.own -= 1
        else:
            e.nested[key] -= 1
            if not e.nested[key]:
                del e.nested[key]
        lst = e.keep.get(key)
        if lst:
            lst.pop()
            if not lst:
                del e.keep[key]
        left = e.refs
        if left == 0:
            dom.remove(e)
            self._unlock(dom, e)
        return left

    def _unlock(self, dom: PinDomain, e: PinEntry) -> None:
        try:
            dom.reg_backend.unlock(e.start, e.size)
        except OffloadError as exc:
            log.warning("unpin [%#x, +%d): %s", e.start, e.size, exc)

    # -- queries -----------------------------------------------------------------
    @staticmethod
    def _snap(dom: PinDomain, e: PinEntry) -> PinnedRange:
        return PinnedRange(e.start, e.size, e.refs, dict(e.nested), dom.reg_backend.name,
                           dom.label)

    def ranges(self, device=...) -> list[PinnedRange]:
        """Pinned ranges, sorted; ``device`` filters (None = process domain;
        omitted = all).  Stale pins (module docstring) are left out."""
        with self._lock:
            out = []
            for key, dom in self._domains.items():
                if device is not ... and key is not device:
                    continue
                out.extend(self._snap(dom, dom.entries[s]) for s in dom.starts
                           if self._held(dom, dom.entries[s]))
            return out

    def is_pinned(self, addr, size: int | None = None, *, device=None) -> bool:
        """True when [addr, addr+size) lies inside one pinned range of ``device``
        (not a stale one: module docstring).  ``addr``: an int address (``size``
        defaults to 1 byte) or a C-contiguous buffer object, as :meth:`pin` takes
        (``size`` defaults to its length; a numpy array used to fail inside
        ``bisect`` with numpy's "truth value of an array" ValueError).  Raises
        TypeError / ValueError as :meth:`pin` does for a bad buffer."""
        if isinstance(addr, int) and not isinstance(addr, bool):
            size = 1 if size is None else size
        else:
            addr, size, _keep = address_of(addr, size)
        with self._lock:
            dom = self._domains.get(device)
            if dom is None:
                return False
            hits = dom.find(addr, size)
            return (len(hits) == 1 and hits[0].start <= addr and addr + size <= hits[0].end
                    and self._held(dom, hits[0]))

    def bytes_pinned(self) -> dict[str, int]:
        """{backend name: bytes of pinned ranges} (range sizes, not pages)."""
        with self._lock:
            out: dict[str, int] = {}
            for dom in self._domains.values():
                for e in dom.entries.values():
                    if not self._held(dom, e):
                        continue
                    name = dom.backend.name if e.host_block else dom.reg_backend.name
                    out[name] = out.get(name, 0) + e.size
            return out

    def stats(self) -> dict:
        """``{"policy", "ranges", "bytes_pinned": {backend: bytes},
        "mlock_bytes"`` (pages this package mlocked, process wide),
        ``"vmlck"`` (bytes, /proc/self/status), ``"memlock_limit"`` (bytes or
        None), ``"all_locked"``, ``"skipped"`` (mapped pins not made),
        ``"host_pool"`` ({device label: pool stats})}."""
        with self._lock:
            return {"policy": self.policy, "ranges": sum(len(d.starts) for d in self._domains.values()),
                    "bytes_pinned": self.bytes_pinned(), "mlock_bytes": _PROCESS.bytes_locked(),
                    "vmlck": vmlck_bytes(), "memlock_limit": memlock_limit(),
                    "all_locked": self._all_locked, "skipped": self.skipped,
                    "host_pool": {(k.label if k is not None else None): p.stats()
                                  for k, p in self._pools.items()}}

    def _plugin_mlocked_spans(self):
        for dom in list(self._domains.values()):
            if dom.reg_backend.counts_memlock and not isinstance(dom.reg_backend, MlockBackend):
                for e in list(dom.entries.values()):
                    yield _page_span(e.start, e.size)

    # -- policy "all" ----------------------------------------------------------------
    def lock_all(self) -> bool:
        """``mlockall(MCL_CURRENT|MCL_FUTURE)`` (libgomp ``-foffload-memory=pinned``).
        Warns (PinnedMemoryWarning) and returns False when ``RLIMIT_MEMLOCK``
        is below the process size or the call fails; idempotent."""
        with self._lock:
            self._check_open()
            if self._all_locked:
                return True
            ok, why = _PROCESS.lock_all()
            if not ok:
                warnings.warn(why, PinnedMemoryWarning, stacklevel=3)
                return False
            self._all_locked = True
            return True

    # -- hooks called by Device where the data moves ------------------------------------
    def on_map(self, device, tgt: int, host, addr: int, n: int) -> None:
        """Policy ``"mapped"``: ``device`` copies ``n`` bytes between host
        ``[addr, +n)`` (inside the buffer ``host``) and its block ``tgt``; the
        first such copy pins the range for the block (gcc-patches -foffload-memory=pinned).  Called
        while the copy holds the device in use.  A pin that cannot be made is
        counted in ``skipped`` and warned about once per error type
        (PinnedMemoryWarning); the copy itself goes ahead.  Read-only
        buffers are not pinned (Python copies them)."""
        if n <= 0:
            return
        try:
            mv = memoryview(host)
        except TypeError:
            return
        if mv.readonly:
            return                                # Python copies read-only buffers
        with self._lock:
            if self._closed:
                return
            dom = self._domains.get(device)
            if dom is not None and (addr, n) in dom.maps.get(tgt, ()):
                return
            try:
                self._pin(device, addr, n, mv, enter=False)   # the copy holds the device
            except PinnedMemoryError as exc:
                self.skipped += 1
                kind = type(exc).__name__
                if kind not in self._warned:
                    self._warned.add(kind)
                    warnings.warn(f"pinned='mapped': not pinning [{addr:#x}, +{n}): {exc}",
                                  PinnedMemoryWarning, stacklevel=4)
                return
            self._domains[device].maps.setdefault(tgt, set()).add((addr, n))

    def on_unmap(self, device, tgt: int) -> None:
        """Policy ``"mapped"``: ``device`` freed its block ``tgt``; drop the
        pins :meth:`on_map` made for it."""
        with self._lock:
            dom = self._domains.get(device)
            if dom is None:
                return
            for addr, n in dom.maps.pop(tgt, ()):
                m = self._match(dom, addr, n)
                if m is not None:
                    self._drop(dom, *m)

    def on_device_teardown(self, device) -> None:
        """Before ``deinit_device``: every range pinned for the device is
        unlocked (its pins do not survive the device, like LLVM's per-device
        PinnedAllocs), host-pool blocks of the device are released."""
        with self._lock:
            pool = self._pools.pop(device, None)
            if pool is not None:
                pool._detach()
            dom = self._domains.pop(device, None)
            if dom is None:
                return
            for s in list(dom.starts):
                e = dom.entries[s]
                if e.host_block and not dom.backend.registers:
                    continue
                self._unlock(dom, e)
            dom.starts.clear()
            dom.entries.clear()
            dom.maps.clear()
            for be in {id(dom.reg_backend): dom.reg_backend, id(dom.backend): dom.backend}.values():
                try:
                    be.close()
                except OffloadError as exc:
                    log.warning("%s: %s", dom.label, exc)

    # -- pinned host allocations ------------------------------------------------------------
    def host_pool(self, device=None) -> "PinnedHostPool":
        """The pinned host pool for ``device`` (None = process, mlock)."""
        with self._lock:
            self._check_open()
            pool = self._pools.get(device)
            if pool is None:
                pool = self._pools[device] = PinnedHostPool(self, device,
                                                            max_cached=self._pool_cache_bytes)
            return pool

    def alloc_host(self, nbytes: int, *, device=None) -> "PinnedHostBuffer":
        """A page-locked host buffer of ``nbytes`` bytes (see :class:`PinnedHostPool`).
        LifecycleError after :meth:`close` (checked first)."""
        self._check_open()
        return self.host_pool(device).allocate(nbytes)

    # -- the host pools' blocks (PinnedHostPool, pinned_host.py) ---------------------------
    def _host_domain(self, device) -> PinDomain:
        """The domain whose ``backend`` allocates or locks ``device``'s host blocks
        (initialises the device first).  LifecycleError after :meth:`close`."""
        if device is not None:
            device.init()
        with self._lock:
            self._check_open()
            return self._domain(device)

    def _add_host_block(self, dom: PinDomain, addr: int, size: int) -> None:
        """A block the backend allocated page-locked (GOMP ``page_locked_host_alloc``)
        enters ``dom`` as a host block (LLVM ``registerHostBuffer``)."""
        with self._lock:
            e = PinEntry(addr, size)
            e.own, e.host_block = 1, True
            dom.insert(e)

    def _pin_host_block(self, device, addr: int, size: int) -> None:
        """Lock the ``mmap``'ed block ``[addr, +size)`` for ``device`` as a host block
        (the checks and errors of :meth:`pin`)."""
        self._pin(device, addr, size, None, host_block=True)

    def _drop_host_block(self, device, addr: int, allocated: bool) -> None:
        """The host block at ``addr`` leaves ``device``'s domain: given back to the
        backend that ``allocated`` it, else unlocked (LLVM ``unregisterHostBuffer``).
        Nothing when the domain was torn down already; a backend failure is logged."""
        with self._lock:
            dom = self._domains.get(device)
            e = None if dom is None else dom.entries.get(addr)
            if e is not None and e.host_block:
                dom.remove(e)
                if allocated:
                    try:
                        dom.backend.host_free(addr)
                    except OffloadError as exc:
                        log.warning("%s", exc)
                else:
                    self._unlock(dom, e)

    # -- teardown ---------------------------------------------------------------------------
    def close(self) -> None:
        """Unpin every range (all references), release the host pools, and
        ``munlockall`` when this registry did ``mlockall``.  Idempotent."""
        with self._lock:
            if self._closed:
                return
            for device in list(self._pools):
                pool = self._pools.pop(device)
                pool._detach()
            for device in list(self._domains):
                self.on_device_teardown(device)
            if self._all_locked:
                self._all_locked = False
                _PROCESS.unlock_all()
            self._closed = True
            _REGISTRIES.discard(self)


__all__ = ["PAGE", "PINNED_ENV", "POLICIES", "PinnedRegistry", "PinnedRange", "PinnedHostPool",
           "PinnedHostBuffer", "PinnedMemoryWarning", "PinBackend", "MlockBackend",
           "PluginLockBackend", "OlMemRegisterBackend", "GompPageLockedBackend",
           "CudaHostRegisterBackend",
           "select_backend", "resolve_policy", "vmlck_bytes", "memlock_limit",
           "has_cap_ipc_lock", "check_memlock", "size_class_pages", "cuda_driver_available"]
