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
  device is deinitialised, or the runtime closes (the seed's proposal);
* ``"all"``    ``mlockall(MCL_CURRENT | MCL_FUTURE)`` like libgomp's
  ``-foffload-memory=pinned``; a too-low limit only warns;
  ``munlockall`` at close.

How a range is locked -- the plugin's own entry points, a GOMP plugin's page-locked
allocator, ``cuMemHostRegister`` or ``mlock`` -- is chosen per device by
:func:`~offload_shim.memory.pin_backends.select_backend` (the backends and the
process facts they check live in :mod:`offload_shim.memory.pin_backends`; their
names are importable from here too).

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

import bisect
import mmap
import os
import threading
import warnings
import weakref
from collections import namedtuple

from ..abi import buffers as _buffers
from ..errors import (LifecycleError, MemlockLimitError, OffloadError, PinnedMemoryError,
                      PinnedRangeError, StalePinError)
from .pin_backends import (_PROCESS, _REGISTRIES, PAGE, CudaHostRegisterBackend,
                           GompPageLockedBackend, MlockBackend, OlMemRegisterBackend, PinBackend,
                           PluginLockBackend, _page_span, check_memlock, cuda_driver_available,
                           has_cap_ipc_lock, mapping_identity, memlock_limit, select_backend,
                           span_locked, vmlck_bytes)

from ..lazylog import log  # logging.getLogger("offload_shim"), imported on first use

PINNED_ENV = "OFFLOAD_SHIM_PINNED"
POLICIES = ("none", "mapped", "all")
#: default cap on bytes kept pinned in a pinned host pool's cache
DEFAULT_POOL_CACHE = 64 << 20
#: largest pinned host allocation (bytes): what ``mmap``'s ``ssize_t`` length holds
MAX_HOST_ALLOC = (1 << 63) - 1


class PinnedMemoryWarning(RuntimeWarning):
    """Pinning was skipped (policy ``"all"`` under a low ``ulimit -l``, a
    ``"mapped"`` pin that could not be made); the transfer itself still runs."""


# -- policy --------------------------------------------------------------------

def resolve_policy(policy: str | None) -> str:
    """``policy`` or ``$OFFLOAD_SHIM_PINNED`` or ``"none"``.  Raises ValueError
    for anything not in :data:`POLICIES`."""
    if policy is None:
        policy = os.environ.get(PINNED_ENV, "").strip().lower() or "none"
    if policy not in POLICIES:
        raise ValueError(f"pinned policy must be one of {POLICIES}, not {policy!r}"
                         f" (argument or ${PINNED_ENV})")
    return policy


# -- the registry --------------------------------------------------------------

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


#: ``_Entry.ident`` of a raw pin whose backend mlocks: its pages must stay VM_LOCKED
_LOCKED = "locked"


class _Entry:
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


class _Domain:
    """The pinned ranges of one device (or of the process), sorted by start."""

    def __init__(self, device, backend: PinBackend):
        self.device = device
        self.backend = backend
        self.reg_backend = backend if backend.registers else select_backend(device)
        self.starts: list[int] = []
        self.entries: dict[int, _Entry] = {}
        self.maps: dict[int, set[tuple[int, int]]] = {}   # device block -> pinned host ranges

    @property
    def label(self) -> str | None:
        return None if self.device is None else self.device.label

    def find(self, addr: int, size: int) -> list[_Entry]:
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

    def insert(self, e: _Entry) -> None:
        bisect.insort(self.starts, e.start)
        self.entries[e.start] = e

    def remove(self, e: _Entry) -> None:
        self.starts.pop(bisect.bisect_left(self.starts, e.start))
        del self.entries[e.start]


def _address_of(obj, size: int | None, *, writable_only: bool = False):
    """(address, size, keepalive) of an int address (``size`` required) or a
    C-contiguous buffer-protocol object."""
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
        self._domains: dict[object, _Domain] = {}
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
    def _domain(self, device) -> _Domain:
        """The domain of ``device``; the caller has initialised the device
        (never initialise under the registry lock: device teardown takes the
        device lock, then this one)."""
        dom = self._domains.get(device)
        if dom is None:
            dom = self._domains[device] = _Domain(device, select_backend(device, purpose="allocate"))
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
        addr, n, keep = _address_of(buf, size)
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
            e = _Entry(addr, n)
            e.own = 1
            e.host_block = host_block
            if keep is None and not host_block:     # a raw address: nothing keeps it mapped
                e.ident = _LOCKED if be.counts_memlock else mapping_identity(addr, n)
            e.keep[(addr, n)] = [keep]
            dom.insert(e)
            return self._snap(dom, e)

    @staticmethod
    def _held(dom: _Domain, e: _Entry) -> bool:
        """(Registry lock held.)  False when ``e`` is a raw pin whose memory
        changed since it was pinned (module docstring, "Stale pins"); it is
        then marked stale for good.  True while the kernel's state cannot be
        read."""
        if e.stale:
            return False
        if e.ident is None:
            return True
        if e.ident is _LOCKED:
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
            addr, n, _ = _address_of(buf, size)
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

    def _match(self, dom: _Domain, addr: int, n: int | None):
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

    def _drop(self, dom: _Domain, e: _Entry, key) -> int:
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

    def _unlock(self, dom: _Domain, e: _Entry) -> None:
        try:
            dom.reg_backend.unlock(e.start, e.size)
        except OffloadError as exc:
            log.warning("unpin [%#x, +%d): %s", e.start, e.size, exc)

    # -- queries -----------------------------------------------------------------
    @staticmethod
    def _snap(dom: _Domain, e: _Entry) -> PinnedRange:
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

    def is_pinned(self, addr: int, size: int = 1, *, device=None) -> bool:
        """True when [addr, addr+size) lies inside one pinned range of ``device``
        (not a stale one: module docstring)."""
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


# -- pinned host allocations ---------------------------------------------------

def size_class_pages(nbytes: int) -> int:
    """Pages of the size class for ``nbytes`` (> 0): exact pages up to 15
    pages, above that 8..16 classes per power of two, so the rounding waste
    is under one page plus 1/8 of the size (CuPy's power-of-two pinned pool
    can waste half)."""
    if nbytes <= 0:
        raise ValueError(f"size must be > 0 bytes, not {nbytes}")
    pages = -(-nbytes // PAGE)
    g = 1 << max(0, pages.bit_length() - 4)
    return -(-pages // g) * g


class _Block:
    __slots__ = ("addr", "size", "mm", "gomp")

    def __init__(self, addr: int, size: int, mm, gomp: bool):
        self.addr, self.size, self.mm, self.gomp = addr, size, mm, gomp


class _PinnedHostBufferMixin:
    """Methods of :class:`PinnedHostBuffer`."""

    def free(self) -> None:
        """Give the memory back to its pool (idempotent).  Using the buffer
        afterwards is undefined, as with C ``free``."""
        fin = self.__dict__.get("_fin")
        if fin is not None:
            fin()

    @property
    def freed(self) -> bool:
        fin = self.__dict__.get("_fin")
        return fin is None or not fin.alive

    @property
    def address(self) -> int:
        """Address of the first byte."""
        return _buffers.address_of(self)

    @property
    def nbytes(self) -> int:
        """Size in bytes (as asked for; :attr:`capacity` is the block's)."""
        return len(self)

    @property
    def capacity(self) -> int:
        """Bytes of the underlying page-granular block."""
        return self.__dict__["_capacity"]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    def __repr__(self) -> str:
        return (f"<PinnedHostBuffer {self.nbytes} bytes at {self.address:#x}"
                f"{' freed' if self.freed else ''}>")


#: ``isinstance(x, PinnedHostBuffer)`` is True for every pinned host buffer
PinnedHostBuffer = _PinnedHostBufferMixin


def _buffer_type(nbytes: int):
    return _buffers.byte_array_type(nbytes, _PinnedHostBufferMixin, "PinnedHostBuffer")


class PinnedHostPool:
    """Page-locked host allocations for one device (or the process).

    One anonymous ``mmap`` per block (libgomp ``linux_memspace_alloc``
    pinned path), locked through the registry, so it appears in
    :meth:`PinnedRegistry.ranges` and the limit is checked; a GOMP plugin
    with ``page_locked_host_alloc`` allocates the block itself.  Freed blocks
    stay locked in a cache keyed by size class (:func:`size_class_pages`), up
    to ``max_cached`` bytes, so repeated allocations do not pay the lock cost
    (CuPy ``PinnedMemoryPool``).  A MemlockLimitError trims the cache and
    retries once (docs/references.md, pools compared, OOM ladder)."""

    def __init__(self, registry: PinnedRegistry, device=None, *,
                 max_cached: int = DEFAULT_POOL_CACHE):
        self._reg = registry
        self._device = device
        self.max_cached = int(max_cached)
        self._lock = threading.Lock()
        self._free: dict[int, list[_Block]] = {}
        self._cached = 0
        self._in_use = 0
        self._detached = False
        self.hits = 0
        self.misses = 0

    def stats(self) -> dict:
        """``{"in_use", "cached"}`` bytes, ``"hits"``, ``"misses"``."""
        with self._lock:
            return {"in_use": self._in_use, "cached": self._cached,
                    "hits": self.hits, "misses": self.misses}

    def allocate(self, nbytes: int) -> PinnedHostBuffer:
        """A zero-filled-on-first-use pinned buffer exposing the buffer protocol
        (a ctypes ``c_ubyte`` array of ``nbytes``) with ``free()`` and a
        context manager.  Raises ValueError (nbytes <= 0, or a size whose
        page-rounded size class does not fit in ``ssize_t``), MemlockLimitError
        (the limit is why the lock failed), PinnedMemoryError (``mmap`` or
        the lock failed otherwise), LifecycleError (registry closed)."""
        if not isinstance(nbytes, int) or isinstance(nbytes, bool):
            raise TypeError("nbytes must be an int")
        if nbytes > MAX_HOST_ALLOC:
            raise ValueError(f"size {nbytes} bytes does not fit: a pinned host allocation "
                             f"is at most {MAX_HOST_ALLOC} bytes")
        cls_bytes = size_class_pages(nbytes) * PAGE
        if cls_bytes > MAX_HOST_ALLOC:
            raise ValueError(f"size {nbytes} bytes does not fit: its size class "
                             f"({cls_bytes} bytes) exceeds {MAX_HOST_ALLOC} bytes")
        with self._lock:
            if self._detached or self._reg._closed:
                raise LifecycleError("pinned host pool closed (its registry or device was "
                                     "torn down)")
            lst = self._free.get(cls_bytes)
            block = lst.pop() if lst else None
            if block is not None:
                self._cached -= block.size
                self.hits += 1
            else:
                self.misses += 1
            self._in_use += cls_bytes
        if block is None:
            try:
                try:
                    block = self._new_block(cls_bytes)
                except MemlockLimitError:
                    self.trim()
                    block = self._new_block(cls_bytes)
            except BaseException:
                with self._lock:
                    self._in_use -= cls_bytes
                raise
        if block.mm is not None:
            buf = _buffer_type(nbytes).from_buffer(block.mm)
        else:
            buf = _buffer_type(nbytes).from_address(block.addr)
        buf.__dict__["_capacity"] = block.size
        buf.__dict__["_fin"] = weakref.finalize(buf, self._release, block)
        return buf

    def _new_block(self, size: int) -> _Block:
        reg, dev = self._reg, self._device
        if dev is not None:
            dev.init()
        with reg._lock:
            reg._check_open()
            dom = reg._domain(dev)
            be = dom.backend
        if be.allocates:
            addr = be.host_alloc(size)
            block = _Block(addr, size, None, True)
            with reg._lock:
                e = _Entry(addr, size)
                e.own, e.host_block = 1, True
                dom.insert(e)
            return block
        try:
            mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except (OSError, OverflowError, ValueError) as exc:
            err = getattr(exc, "errno", None)
            raise PinnedMemoryError(f"pinned host allocation: mmap of {size} bytes failed: "
                                    f"{exc}", code=err, function="mmap") from exc
        addr, view = _buffers.buffer_address(mm)
        del view
        try:
            reg._pin(dev, addr, size, None, host_block=True)
        except BaseException:
            mm.close()
            raise
        return _Block(addr, size, mm, False)

    def _release(self, block: _Block) -> None:
        """Finalizer/free: back to the cache, or unlocked and unmapped."""
        with self._lock:
            self._in_use -= block.size
            if not self._detached and self._cached + block.size <= self.max_cached:
                self._free.setdefault(block.size, []).append(block)
                self._cached += block.size
                return
        self._destroy(block)

    def _destroy(self, block: _Block) -> None:
        reg = self._reg
        with reg._lock:
            dom = reg._domains.get(self._device)
            e = None if dom is None else dom.entries.get(block.addr)
            if e is not None and e.host_block:
                dom.remove(e)
                if block.gomp:
                    try:
                        dom.backend.host_free(block.addr)
                    except OffloadError as exc:
                        log.warning("%s", exc)
                else:
                    reg._unlock(dom, e)
        if block.mm is not None:
            try:
                block.mm.close()
            except BufferError:
                pass        # a buffer still points into it: unmapped when that one dies

    def trim(self) -> int:
        """Unlock and unmap every cached block; returns the bytes released."""
        with self._lock:
            blocks = [b for lst in self._free.values() for b in lst]
            self._free.clear()
            self._cached = 0
        for b in blocks:
            self._destroy(b)
        return sum(b.size for b in blocks)

    def _detach(self) -> None:
        """Registry/device teardown: release the cache; blocks still in use stay
        mapped (and are destroyed when freed) but are no longer locked."""
        with self._lock:
            self._detached = True
        self.trim()


__all__ = ["PAGE", "PINNED_ENV", "POLICIES", "PinnedRegistry", "PinnedRange", "PinnedHostPool",
           "PinnedHostBuffer", "PinnedMemoryWarning", "PinBackend", "MlockBackend",
           "PluginLockBackend", "OlMemRegisterBackend", "GompPageLockedBackend",
           "CudaHostRegisterBackend",
           "select_backend", "resolve_policy", "vmlck_bytes", "memlock_limit",
           "has_cap_ipc_lock", "check_memlock", "size_class_pages", "cuda_driver_available"]
