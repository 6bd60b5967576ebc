"""How host memory is page-locked: the backends and the process facts they check.

A :class:`~offload_shim.memory.pinned.PinnedRegistry` pins through one backend per
device (:func:`select_backend`, best first):

1. the plugin's own locking entry points (:class:`PluginLockBackend`:
   ``__tgt_rtl_data_lock``/``data_unlock`` of LLVM 16, liboffload's
   ``olMemRegister``/``olMemUnregister``), when the plugin has them;
2. a GOMP plugin's ``GOMP_OFFLOAD_page_locked_host_alloc``/``_free`` (GCC trunk
   ``libgomp-plugin.h``; :class:`GompPageLockedBackend`) -- these *allocate*
   page-locked memory, so they serve host allocations only;
3. cuda-python ``cuMemHostRegister``/``cuMemHostUnregister`` for CUDA plugins when a
   driver is present (:class:`CudaHostRegisterBackend`);
4. ``mlock``/``munlock`` through libc (:class:`MlockBackend`), with process-wide page
   accounting (:class:`_ProcessLocks`: two ranges sharing a page never unlock each
   other's page).

The process facts: ``VmLck`` (:func:`vmlck_bytes`), the soft ``RLIMIT_MEMLOCK``
(:func:`memlock_limit`), ``CAP_IPC_LOCK`` (:func:`has_cap_ipc_lock`; the kernel
ignores the limit for it, ``mm/mlock.c`` ``can_do_mlock``), and the errors a failed
lock becomes (:class:`~offload_shim.errors.MemlockLimitError` when the limit is the
reason).  Importing this module does no work; libc and cuda-python are bound on
first use.
"""

from __future__ import annotations

import contextlib
import errno as _errno
import functools
import mmap
import os
import threading
import weakref

from ..abi import libc as _libc
from ..errors import LifecycleError, MemlockLimitError, PinnedMemoryError, PluginCallError

from ..lazylog import log  # logging.getLogger("offload_shim"), imported on first use

PAGE = mmap.PAGESIZE
MCL_CURRENT, MCL_FUTURE = _libc.MCL_CURRENT, _libc.MCL_FUTURE
CAP_IPC_LOCK = 14

__all__ = ["PAGE", "PinBackend", "MlockBackend", "PluginLockBackend", "OlMemRegisterBackend",
           "GompPageLockedBackend", "CudaHostRegisterBackend", "select_backend",
           "vmlck_bytes", "memlock_limit", "has_cap_ipc_lock", "check_memlock",
           "cuda_driver_available", "is_cuda_plugin", "mapping_identity", "span_locked"]


# -- process facts -------------------------------------------------------------

def _status_field(name: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def vmlck_bytes() -> int:
    """Bytes the kernel counts as locked for this process (``VmLck`` of
    ``/proc/self/status``; 0 where unavailable)."""
    return _status_field("VmLck") or 0


def memlock_limit() -> int | None:
    """Soft ``RLIMIT_MEMLOCK`` in bytes, None when unlimited."""
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def has_cap_ipc_lock() -> bool:
    """True when ``CAP_IPC_LOCK`` is in the effective set (``CapEff``): the
    kernel then ignores ``RLIMIT_MEMLOCK``."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("CapEff:"):
                    return bool((int(line.split()[1], 16) >> CAP_IPC_LOCK) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _page_span(addr: int, size: int) -> tuple[int, int]:
    start = addr - addr % PAGE
    end = -(-(addr + size) // PAGE) * PAGE
    return start, end


# -- what lies under a pin -------------------------------------------------------

def _vma_header(line: str):
    """(start, end, offset, dev, inode) of a ``/proc/self/maps`` (or smaps
    header) line; None for an smaps field line ("Rss:", "VmFlags:"...)."""
    if line[0] not in "0123456789abcdef":
        return None
    fields = line.split(None, 5)
    start, _, end = fields[0].partition("-")
    return int(start, 16), int(end, 16), int(fields[2], 16), fields[3], int(fields[4])


def mapping_identity(addr: int, size: int) -> tuple | None:
    """What is mapped under the pages of ``[addr, +size)``, from
    ``/proc/self/maps``: ``((start, end, dev, inode, file offset at start),
    ...)``, each mapping clipped to the page span, pieces that continue one
    another (a mapping split by ``mlock``/``mprotect``) merged, a hole shown
    as a gap; None when the file cannot be read.  Unmapping the range, or
    mapping a file or another extent there, changes it; an anonymous mapping
    replaced by one of the same extent does not (the kernel shows both as
    offset 0, inode 0: ``fs/proc/task_mmu.c`` ``show_map_vma``)."""
    start, end = _page_span(addr, size)
    pieces: list[list] = []
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                s, e, off, dev, inode = _vma_header(line)
                if e <= start:
                    continue
                if s >= end:
                    break
                cs = max(s, start)
                off = off + (cs - s) if inode else 0
                last = pieces[-1] if pieces else None
                if (last is not None and last[1] == cs and last[2:4] == [dev, inode]
                        and (not inode or last[4] + (cs - last[0]) == off)):
                    last[1] = min(e, end)
                else:
                    pieces.append([cs, min(e, end), dev, inode, off])
    except (OSError, ValueError, IndexError):
        return None
    return tuple(tuple(p) for p in pieces)


def span_locked(addr: int, size: int) -> bool | None:
    """True when every page of ``[addr, +size)`` lies in a mapping the kernel
    holds locked (``VM_LOCKED``: ``lo`` in its ``VmFlags`` in
    ``/proc/self/smaps``, ``fs/proc/task_mmu.c`` ``show_smap_vma_flags``, set
    by ``mlock``/``mlockall``); False when a page is unmapped or its mapping
    is not locked; None when ``/proc/self/smaps`` cannot be read.  Reads the
    whole file (a few ms in a large process)."""
    start, end = _page_span(addr, size)
    covered = start
    vma = None
    try:
        with open("/proc/self/smaps") as fh:
            for line in fh:
                if line.startswith("VmFlags:"):
                    if vma is None:
                        continue
                    if vma[0] > covered or "lo" not in line.split()[1:]:
                        return False
                    covered = vma[1]
                    if covered >= end:
                        return True
                    vma = None
                    continue
                head = _vma_header(line)
                if head is None:
                    continue
                if head[0] >= end:
                    break
                vma = head[:2] if head[1] > start else None
    except (OSError, ValueError, IndexError):
        return None
    return False


def _limit_error(what: str, requested: int, *, errno: int | None = None) -> MemlockLimitError:
    limit = memlock_limit()
    locked = vmlck_bytes()
    lim = "unlimited" if limit is None else f"{limit} bytes"
    why = f" ({os.strerror(errno)})" if errno else ""
    return MemlockLimitError(
        f"{what}: locking {requested} bytes would exceed RLIMIT_MEMLOCK{why}: limit {lim}, "
        f"{locked} bytes already locked (VmLck); raise the limit with `ulimit -l` "
        "(KiB, or 'unlimited'; /etc/security/limits.conf memlock) or pin less",
        limit=limit, requested=requested, locked=locked, errno=errno)


def _limit_is_reason(span: int) -> bool:
    """True when a failed lock of ``span`` more bytes is explained by
    ``RLIMIT_MEMLOCK``: a finite soft limit, no ``CAP_IPC_LOCK``, and
    ``VmLck + span`` past it.  Otherwise the kernel refused for another
    reason (mlock's ENOMEM also means "range not mapped")."""
    limit = memlock_limit()
    if limit is None or has_cap_ipc_lock():
        return False
    return vmlck_bytes() + span > limit


def _lock_error(what: str, addr: int, span: int, err: int | None, detail: str = "",
                **kw) -> PinnedMemoryError:
    """The error for a failed lock of ``span`` bytes at ``addr``: a
    MemlockLimitError when the limit is the reason (ENOMEM/EAGAIN/EPERM with
    a finite limit that the span would pass), else a PinnedMemoryError
    (e.g. ENOMEM on a range that is not mapped)."""
    if (err is None or err in (_errno.ENOMEM, _errno.EPERM, _errno.EAGAIN)) \
            and _limit_is_reason(span):
        return _limit_error(what, span, errno=err)
    why = detail or (os.strerror(err) if err else "failed")
    hint = ""
    if err in (_errno.ENOMEM, None):
        hint = ("; the range is not (fully) mapped in this process, or cannot be locked "
                "(RLIMIT_MEMLOCK is not the reason)")
    return PinnedMemoryError(f"{what}: cannot lock {span} bytes at {addr:#x}: {why}{hint}",
                             code=err, **kw)


def check_memlock(requested: int, what: str = "pin") -> None:
    """Raise MemlockLimitError when locking ``requested`` more bytes would pass
    the soft ``RLIMIT_MEMLOCK`` (not checked with ``CAP_IPC_LOCK``)."""
    limit = memlock_limit()
    if limit is None or has_cap_ipc_lock():
        return
    if vmlck_bytes() + requested > limit:
        raise _limit_error(what, requested)


# -- process-wide mlock accounting -------------------------------------------------

class _ProcessLocks:
    """The process-wide truth about what this package ``mlock``\\ ed.

    mlock is not reference counted by the kernel: munlock of one range
    unlocks every page in it, also pages another range still needs.  So the
    page runs locked through the ``mlock`` backend are kept as a multiset and
    an unlock only munlocks the pages no other run covers.  While
    ``mlockall`` is in force nothing is munlocked; after ``munlockall`` every
    run still held is locked again (and so are ranges a plugin locked with
    mlock, the bundled plugin's ``data_lock``)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._runs: dict[tuple[int, int], int] = {}
        self._all_users = 0

    def lock(self, addr: int, size: int) -> None:
        start, end = _page_span(addr, size)
        with self._lock:
            err = 0 if self._all_users else _libc.mlock(start, end - start)
            if err:
                raise _lock_error(f"mlock({start:#x}, {end - start})", start, end - start,
                                  err, function="mlock")
            self._runs[(start, end)] = self._runs.get((start, end), 0) + 1

    def unlock(self, addr: int, size: int) -> None:
        start, end = _page_span(addr, size)
        with self._lock:
            n = self._runs.get((start, end), 0)
            if n <= 0:
                return
            if n == 1:
                del self._runs[(start, end)]
            else:
                self._runs[(start, end)] = n - 1
                return
            if self._all_users:
                return
            for s, e in _uncovered(start, end, self._runs):
                _libc.munlock(s, e - s)        # ENOMEM if unmapped already: nothing to do

    def bytes_locked(self) -> int:
        with self._lock:
            return sum(e - s for s, e in _union(self._runs))

    def lock_all(self) -> tuple[bool, str]:
        """mlockall(MCL_CURRENT|MCL_FUTURE) for one more user.  Returns (ok, why)."""
        with self._lock:
            if self._all_users:
                self._all_users += 1
                return True, ""
            limit = memlock_limit()
            if limit is not None and not has_cap_ipc_lock():
                need = _status_field("VmSize") or 0
                if need > limit:
                    return False, (f"mlockall skipped: the process maps {need} bytes, "
                                   f"RLIMIT_MEMLOCK is {limit} bytes; raise it with "
                                   "`ulimit -l unlimited` to pin the whole process")
            err = _libc.mlockall(MCL_CURRENT | MCL_FUTURE)
            if err:
                _libc.munlockall()
                self._relock_locked()
                return False, (f"mlockall failed: {os.strerror(err)} (RLIMIT_MEMLOCK "
                               f"{limit if limit is not None else 'unlimited'} bytes; "
                               "raise it with `ulimit -l`)")
            self._all_users = 1
            return True, ""

    def unlock_all(self) -> None:
        with self._lock:
            if self._all_users <= 0:
                return
            self._all_users -= 1
            if self._all_users:
                return
            _libc.munlockall()
            self._relock_locked()

    @property
    def all_locked(self) -> bool:
        return self._all_users > 0

    def relock(self, addr: int, size: int) -> None:
        """A plugin munlocked [addr, +size): lock again the pages this table
        (or mlockall) still needs there."""
        start, end = _page_span(addr, size)
        with self._lock:
            if self._all_users:
                _libc.mlock(start, end - start)
                return
            for s, e in _union(r for r in self._runs if r[0] < end and r[1] > start):
                s, e = max(s, start), min(e, end)
                _libc.mlock(s, e - s)

    def _relock_locked(self) -> None:
        for s, e in _union(self._runs):
            _libc.mlock(s, e - s)
        for reg in list(_REGISTRIES):
            for s, e in reg._plugin_mlocked_spans():
                _libc.mlock(s, e - s)


def _union(runs) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(runs):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _uncovered(start: int, end: int, runs) -> list[tuple[int, int]]:
    """Sub-ranges of [start, end) covered by none of ``runs``."""
    gaps, pos = [], start
    for s, e in _union(r for r in runs if r[0] < end and r[1] > start):
        if s > pos:
            gaps.append((pos, min(s, end)))
        pos = max(pos, e)
    if pos < end:
        gaps.append((pos, end))
    return gaps


_PROCESS = _ProcessLocks()
#: every open PinnedRegistry (they add themselves): an ``munlockall`` locks their
#: plugin-locked spans again
_REGISTRIES: "weakref.WeakSet" = weakref.WeakSet()


# -- backends ------------------------------------------------------------------

class PinBackend:
    """How one device (or the process) page-locks host memory.  ``name``;
    ``counts_memlock``: locks count against ``RLIMIT_MEMLOCK``/``VmLck``;
    ``registers``: can pin an existing range; ``allocates``: has its own
    page-locked host allocator."""

    name = "?"
    counts_memlock = False
    registers = True
    allocates = False

    def lock(self, addr: int, size: int) -> None:
        raise NotImplementedError

    def unlock(self, addr: int, size: int) -> None:
        raise NotImplementedError

    def host_alloc(self, size: int) -> int:
        raise NotImplementedError

    def host_free(self, addr: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the backend holds (the registry calls it when the
        device's pins end); idempotent."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class MlockBackend(PinBackend):
    """``mlock``/``munlock`` (libc through ctypes), the fallback; page granular,
    process-wide page accounting (:class:`_ProcessLocks`)."""

    name = "mlock"
    counts_memlock = True

    def lock(self, addr: int, size: int) -> None:
        _PROCESS.lock(addr, size)

    def unlock(self, addr: int, size: int) -> None:
        _PROCESS.unlock(addr, size)


class PluginLockBackend(PinBackend):
    """The plugin's ``__tgt_rtl_data_lock``/``data_unlock`` on one device
    (LLVM 16; the bundled plugin mlocks, so it counts against the limit; the
    LLVM 16 x86_64 nextgen plugin returns the pointer and locks nothing)."""

    name = "plugin"
    entry = "__tgt_rtl_data_lock"

    def __init__(self, device):
        self.device = device
        self.counts_memlock = bool(device.plugin.bundled)

    def lock(self, addr: int, size: int) -> None:
        """Raises MemlockLimitError when the plugin counts against
        ``RLIMIT_MEMLOCK`` and the limit explains the failure (the same test
        as the mlock backend's), else PinnedMemoryError."""
        try:
            self.device.plugin.lock(self.device.index, addr, size)
        except PluginCallError as exc:
            s, e = _page_span(addr, size)
            if self.counts_memlock and _limit_is_reason(e - s):
                raise _limit_error(f"{self.device.label}: {self.entry}", e - s) from exc
            raise PinnedMemoryError(f"{self.device.label}: pinning {size} bytes at "
                                    f"{addr:#x} failed: {exc}", code=exc.code,
                                    function=exc.function, device=self.device.label) from exc

    def unlock(self, addr: int, size: int) -> None:
        self.device.plugin.unlock(self.device.index, addr)
        if self.counts_memlock:
            _PROCESS.relock(addr, size)      # the plugin's munlock is not reference counted


class OlMemRegisterBackend(PluginLockBackend):
    """liboffload ``olMemRegister``/``olMemUnregister`` on one device
    (:meth:`offload_shim.plugins.liboffload.LiboffloadPlugin.lock`; the
    bundled plugin's ``ol*`` view mlocks, so it counts against the limit)."""

    name = "olMemRegister"
    entry = "olMemRegister"


def _page_locked_allocator(plugin) -> bool:
    """True when the plugin allocates page-locked host memory itself
    (:attr:`~offload_shim.plugins.plugin.Plugin.has_page_locked_host_memory`: GCC
    trunk libgomp ``GOMP_OFFLOAD_page_locked_host_alloc``/``_free``; not GCC 12)."""
    return bool(getattr(plugin, "has_page_locked_host_memory", False))


class GompPageLockedBackend(PinBackend):
    """A GOMP plugin's own page-locked host allocator (GCC trunk); it cannot
    pin an existing range (``registers`` False)."""

    name = "gomp_page_locked"
    registers = False
    allocates = True

    def __init__(self, device):
        self.device = device

    def host_alloc(self, size: int) -> int:
        """Raises PinnedMemoryError when the plugin fails."""
        try:
            return self.device.plugin.page_locked_host_alloc(size)
        except PluginCallError as exc:
            raise PinnedMemoryError(f"{self.device.label}: {exc}", function=exc.function,
                                    device=self.device.label) from exc

    def host_free(self, addr: int) -> None:
        """Raises PinnedMemoryError when the plugin fails."""
        try:
            self.device.plugin.page_locked_host_free(addr)
        except PluginCallError as exc:
            raise PinnedMemoryError(f"{self.device.label}: {exc}", function=exc.function,
                                    device=self.device.label) from exc


def _cuda_driver():
    """The cuda-python driver module, or None (not installed)."""
    try:
        from cuda.bindings import driver          # cuda-python >= 12.6
        return driver
    except ImportError:
        pass
    try:
        from cuda import cuda as driver           # older cuda-python
        return driver
    except ImportError:
        return None


@functools.lru_cache(maxsize=None)
def cuda_driver_available() -> bool:
    """True when cuda-python imports and ``cuInit(0)`` succeeds with a device."""
    drv = _cuda_driver()
    if drv is None:
        return False
    try:
        err, = drv.cuInit(0)
        if err != drv.CUresult.CUDA_SUCCESS:
            return False
        err, n = drv.cuDeviceGetCount()
        return err == drv.CUresult.CUDA_SUCCESS and n > 0
    except Exception:                              # driver library missing, etc.
        return False


class CudaHostRegisterBackend(PinBackend):
    """cuda-python ``cuMemHostRegister(ptr, size, CU_MEMHOSTREGISTER_PORTABLE)``
    / ``cuMemHostUnregister`` for CUDA device ``ordinal`` (registered memory
    is not counted in ``RLIMIT_MEMLOCK``).

    Page granular, like the mlock backend: the driver registers whole pages
    and refuses a range that touches a page already registered (712,
    ``CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED``), so two buffers that share a
    page could not both be pinned.  The driver registrations are page runs
    with a user count: a lock registers only the pages no run covers yet and
    counts a use on every run it touches; an unlock unregisters the runs
    whose last use it was.

    Each driver call runs with the device's primary context pushed on the
    calling thread's context stack and popped again afterwards, so the
    thread's own current context (a GCC nvptx plugin's context, say) is the
    same before and after.  The primary context is retained from
    construction until :meth:`close`.  Raises PinnedMemoryError without a
    driver or device, and for a driver error (``code`` = the CUresult)."""

    name = "cuda"

    def __init__(self, ordinal: int = 0):
        drv = _cuda_driver()
        if drv is None or not cuda_driver_available():
            raise PinnedMemoryError("cuMemHostRegister: no CUDA driver/device "
                                    "(cuda-python not installed or cuInit failed)",
                                    function="cuInit")
        self._drv = drv
        self._mu = threading.Lock()
        self._runs: dict[int, list[int]] = {}          # page run start -> [end, users]
        self._uses: dict[tuple[int, int], list[list[int]]] = {}   # (addr, size) -> run starts
        err, dev = drv.cuDeviceGet(ordinal)
        self._check(err, "cuDeviceGet")
        err, ctx = drv.cuDevicePrimaryCtxRetain(dev)
        self._check(err, "cuDevicePrimaryCtxRetain")
        self._dev, self._ctx = dev, ctx

    def _check(self, err, fn: str) -> None:
        if err != self._drv.CUresult.CUDA_SUCCESS:
            name = getattr(err, "name", str(err))
            raise PinnedMemoryError(f"{fn} failed: {name} ({int(err)})", code=int(err),
                                    function=fn)

    @contextlib.contextmanager
    def _primary(self):
        """The primary context current for the block, the previous one after."""
        if self._ctx is None:
            raise LifecycleError("cuMemHostRegister backend used after close")
        err, = self._drv.cuCtxPushCurrent(self._ctx)
        self._check(err, "cuCtxPushCurrent")
        try:
            yield
        finally:
            err, _ = self._drv.cuCtxPopCurrent()
            if err != self._drv.CUresult.CUDA_SUCCESS:
                log.warning("cuCtxPopCurrent failed: %s", err)

    def lock(self, addr: int, size: int) -> None:
        start, end = _page_span(addr, size)
        flags = self._drv.CU_MEMHOSTREGISTER_PORTABLE
        with self._mu:
            touched = [(s, r[0]) for s, r in self._runs.items() if s < end and r[0] > start]
            gaps = _uncovered(start, end, touched)
            made: list[tuple[int, int]] = []
            with self._primary():
                try:
                    for s, e in gaps:
                        err, = self._drv.cuMemHostRegister(s, e - s, flags)
                        self._check(err, "cuMemHostRegister")
                        made.append((s, e))
                except PinnedMemoryError:
                    for s, _ in made:
                        self._drv.cuMemHostUnregister(s)
                    raise
            for s, e in made:
                self._runs[s] = [e, 0]
            used = [s for s, _ in touched] + [s for s, _ in made]
            for s in used:
                self._runs[s][1] += 1
            self._uses.setdefault((addr, size), []).append(used)

    def unlock(self, addr: int, size: int) -> None:
        with self._mu:
            stack = self._uses.get((addr, size))
            if not stack:
                return
            used = stack.pop()
            if not stack:
                del self._uses[(addr, size)]
            last = []
            for s in used:
                run = self._runs[s]
                run[1] -= 1
                if run[1] == 0:
                    del self._runs[s]
                    last.append(s)
            if last:
                with self._primary():
                    for s in last:
                        err, = self._drv.cuMemHostUnregister(s)
                        self._check(err, "cuMemHostUnregister")

    def registrations(self) -> list[tuple[int, int, int]]:
        """The driver registrations: ``[(start, end, users)]``, page aligned."""
        with self._mu:
            return sorted((s, r[0], r[1]) for s, r in self._runs.items())

    def close(self) -> None:
        """Unregister what is still registered and release the primary
        context (idempotent)."""
        with self._mu:
            if self._ctx is None:
                return
            if self._runs:
                with self._primary():
                    for s in list(self._runs):
                        self._drv.cuMemHostUnregister(s)
                self._runs.clear()
                self._uses.clear()
            self._drv.cuDevicePrimaryCtxRelease(self._dev)
            self._ctx = None


def is_cuda_plugin(plugin) -> bool:
    """True when the plugin's device numbers are CUDA ordinals
    (:attr:`~offload_shim.plugins.plugin.Plugin.cuda_devices`: the LLVM CUDA plugins,
    GCC's nvptx plugin)."""
    return bool(getattr(plugin, "cuda_devices", False))


def select_backend(device=None, *, purpose: str = "register") -> PinBackend:
    """The best backend for ``device`` (None = the process: ``mlock``).
    ``purpose``: ``"register"`` (pin an existing range) or ``"allocate"``
    (page-locked host allocations; a GOMP plugin's own allocator wins).
    Order: GOMP page-locked hooks (allocate only); CUDA
    ``cuMemHostRegister`` for CUDA plugins with a driver (before their
    ``data_lock``: LLVM's CUDA plugins return the pointer from it and pin
    nothing, ``CUDADeviceTy::dataLockImpl``); the plugin's ``data_lock``
    (:attr:`~offload_shim.plugins.plugin.Plugin.host_lock_entry_point`:
    ``__tgt_rtl_data_lock``, liboffload ``olMemRegister``); ``mlock``."""
    if device is not None:
        plugin = device.plugin
        if purpose == "allocate" and _page_locked_allocator(plugin):
            return GompPageLockedBackend(device)
        if is_cuda_plugin(plugin) and cuda_driver_available():
            return CudaHostRegisterBackend(device.index)
        entry = getattr(plugin, "host_lock_entry_point", None)
        for backend in (PluginLockBackend, OlMemRegisterBackend):
            if entry == backend.entry:
                return backend(device)
    return MlockBackend()
