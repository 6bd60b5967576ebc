"""One exception tree for offload_shim.

Every error raised by the package derives from :class:`OffloadError`, which
carries the plugin return code (``code``), the entry point or runtime
function that failed (``function``) and the device (``device``) where they
apply.  Subclasses name the conditions callers branch on (docs/style.md,
practice 4).  Caller input is validated with ``TypeError``/``ValueError``.
"""

from __future__ import annotations


class OffloadError(Exception):
    """Base class.  ``code``: plugin return code or None; ``function``: the
    entry point (e.g. ``"__tgt_rtl_data_alloc"``) or runtime method;
    ``device``: a device label such as ``"x86_64.nextgen:0"`` or None."""

    def __init__(self, message: str, *, code: int | None = None,
                 function: str | None = None, device: str | None = None):
        super().__init__(message)
        self.code = code
        self.function = function
        self.device = device


# -- loading plugins -------------------------------------------------------

class PluginLoadError(OffloadError):
    """A plugin could not be loaded at all."""


class PluginNotFoundError(PluginLoadError, FileNotFoundError):
    """The path does not exist (``.path``, ``.tried``: every candidate looked at)."""

    def __init__(self, message: str, *, path: str, tried: list[str] | None = None):
        super().__init__(message)
        self.path = path
        self.tried = list(tried or [path])


class PluginDlopenError(PluginLoadError):
    """The file exists but ``dlopen`` failed (``.dlerror`` has the loader's
    text, e.g. a missing ``libLLVM-16.so.1``)."""

    def __init__(self, message: str, *, path: str, dlerror: str):
        super().__init__(message)
        self.path = path
        self.dlerror = dlerror


class WrongArchitectureError(PluginDlopenError):
    """The file is an ELF shared object for another machine (``.machine``, as
    pyelftools names ``e_machine``: ``"EM_AARCH64"``...; ``.expected``: this
    process's).  Read from the ELF header before any ``dlopen``: glibc would
    only say "cannot open shared object file: No such file or directory"."""

    def __init__(self, message: str, *, path: str, machine: str, expected: str):
        super().__init__(message, path=path, dlerror=f"wrong architecture ({machine})")
        self.machine = machine
        self.expected = expected


class LibraryLoadError(OffloadError):
    """Loading a compiled library (``run-library --library``) crashed, hung or
    exited a child process that tried it first (``.path``; ``.reason``: the
    signal name, ``"hung"`` or ``"exit N"``).  Its constructors run at
    ``dlopen``; it was not loaded into this process."""

    def __init__(self, message: str, *, path: str, reason: str):
        super().__init__(message)
        self.path = path
        self.reason = reason


class NotAPluginError(PluginLoadError):
    """Loaded, but it is not a plugin of a known ABI (``.missing`` lists the
    required symbols that were not found for the closest ABI)."""

    def __init__(self, message: str, *, path: str, missing: list[str]):
        super().__init__(message)
        self.path = path
        self.missing = list(missing)


class ABIMismatchError(PluginLoadError):
    """A plugin of a known family but an unsupported generation/version."""


class MissingEntryPointError(OffloadError):
    """An optional entry point was needed but the plugin does not export it."""


# -- lifecycle ---------------------------------------------------------------

class DeviceNotFoundError(OffloadError, IndexError):
    """A device index that the runtime does not have (``.index``,
    ``.count``: the devices there are)."""

    def __init__(self, message: str, *, index: object = None, count: int = 0):
        super().__init__(message)
        self.index = index
        self.count = count


class LifecycleError(OffloadError):
    """A call in the wrong state: data before init, anything after close,
    a deinit of what was never initialised.  Raised in Python *before* the
    call can reach a plugin that would crash (LLVM D130712, D120089)."""


class DeviceInitError(OffloadError):
    """``init_device`` returned failure; the device stays unusable."""


# -- images ------------------------------------------------------------------

class InvalidImageError(OffloadError):
    """Image bytes the plugin rejects (``is_valid_binary`` == 0, a failed
    ``load_binary``/``load_image``) or that cannot be parsed."""


class TableMismatchError(InvalidImageError):
    """The target table has a different number of entries than the host
    table (GCC PR 68463).  ``.expected``, ``.got``."""

    def __init__(self, message: str, *, expected: int, got: int, **kw):
        super().__init__(message, **kw)
        self.expected = expected
        self.got = got


class UnknownLayoutError(InvalidImageError):
    """A record a compiled program hands the runtime (offload entry table,
    ``KernelArgsTy``) in a layout no supported clang release (16-22) emits
    (abi/clang.py)."""


class ImageNotRegisteredError(OffloadError, KeyError):
    """Unregister of an image that is not registered."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class NotMappedError(OffloadError, KeyError):
    """A host address with no host->target mapping, or a global name no loaded
    image has."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class KernelNotFoundError(OffloadError, KeyError):
    """No registered image on this device has a kernel of that name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


# -- memory --------------------------------------------------------------------

class OutOfDeviceMemoryError(OffloadError, MemoryError):
    """The plugin returned no memory, also after freeing cached blocks.
    ``.requested``, ``.cached``, ``.in_use`` are bytes."""

    def __init__(self, message: str, *, requested: int = 0, cached: int = 0,
                 in_use: int = 0, **kw):
        super().__init__(message, **kw)
        self.requested = requested
        self.cached = cached
        self.in_use = in_use


class UnknownPointerError(OffloadError, ValueError):
    """A free/copy of a device pointer this runtime did not hand out, or one
    that was already freed (double free)."""


class ExportedMemoryError(LifecycleError):
    """A teardown (``Device.deinit``, ``Runtime.close``) refused because device
    memory of a :class:`~offload_shim.core.array.DeviceArray` is still held by an
    exported view (a DLPack capsule or array made from it, a NumPy view, a
    ``__cuda_array_interface__`` consumer): freeing it would leave the view
    dangling.  ``.views`` is how many exports are live.  Nothing was torn down."""

    def __init__(self, message: str, *, views: int = 0, **kw):
        super().__init__(message, **kw)
        self.views = views


class RuntimeInUseError(LifecycleError):
    """``Runtime.close`` refused because something routes work to the runtime and must
    end first: an active :func:`~offload_shim.interpose` (compiled code's next target
    region would reach closed devices).  ``.user`` names it.  Nothing was torn
    down; leave the ``with interpose(rt)`` block (``Interposer.close()``) first."""

    def __init__(self, message: str, *, user: str = "", **kw):
        super().__init__(message, **kw)
        self.user = user


class PluginCallError(OffloadError):
    """An entry point returned a failure code."""


# -- pinned host memory (gcc-patches -foffload-memory=pinned) ------------------------------

class PinnedMemoryError(OffloadError):
    """Pinning (page-locking) host memory failed or was misused."""


class PinnedRangeError(PinnedMemoryError, ValueError):
    """A pin that partly overlaps a pinned range (liboffload ``olMemRegister``
    / LLVM ``PinnedAllocationMapTy`` refuse those), an unpin of a range that is
    not pinned, or a zero-sized range.  ``.address``, ``.size`` (bytes)."""

    def __init__(self, message: str, *, address: int = 0, size: int = 0, **kw):
        super().__init__(message, **kw)
        self.address = address
        self.size = size


class StalePinError(PinnedRangeError):
    """A pin of a range inside (or overlapping) a pin of a raw address whose
    memory was unmapped, or replaced by a new mapping, after it was pinned:
    the kernel no longer holds that lock, so the registry counts no reference
    on it (CUDA refuses the same case with
    ``CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED``, 712).  Unpin the stale pin,
    then pin the new memory.  ``.address``, ``.size`` (bytes): the request;
    ``.pinned``: ``(address, size)`` of the stale pin."""

    def __init__(self, message: str, *, pinned: tuple = (0, 0), **kw):
        super().__init__(message, **kw)
        self.pinned = pinned


class MemlockLimitError(PinnedMemoryError, MemoryError):
    """Locking would exceed (or did hit) ``RLIMIT_MEMLOCK`` (``ulimit -l``).
    ``.limit``, ``.requested``, ``.locked`` are bytes (``limit`` None =
    unlimited); ``.errno`` is set when the kernel refused."""

    def __init__(self, message: str, *, limit: int | None = None, requested: int = 0,
                 locked: int = 0, errno: int | None = None, **kw):
        super().__init__(message, **kw)
        self.limit = limit
        self.requested = requested
        self.locked = locked
        self.errno = errno


__all__ = [name for name in dir() if name.endswith("Error")]
