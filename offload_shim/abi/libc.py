"""libc and libdl through ctypes, bound once for the whole package.

Every call of the C library that the package makes goes through this module:
``malloc``/``free`` (tables a GOMP plugin ``malloc``\\ s, libgomp's
``target.c`` frees them; the host device of ``omp_target_alloc``),
``fflush``, ``mlock``/``munlock``/``mlockall``/``munlockall`` (pinned host
memory, POSIX), ``prctl(PR_SET_PDEATHSIG)`` (children never outlive their
parent), ``dlopen``/``dlclose``/``dlsym`` (compiled libraries, who
defines a symbol, whether a library is mapped) and ``inotify_*`` (Linux: which
files an LLVM plugin's image load created in ``/tmp``).  The process's own symbol scope
(``dlopen(NULL)``, glibc 2.34+ has libdl inside libc) is opened on first use,
not at import, with ``use_errno`` so that the errno of a failed call is read
right after it on the calling thread.

The wrappers take and return plain ints (addresses, byte counts, errno
values) so that callers never hold a ctypes object; each call that can fail
returns 0 or the ``errno`` it left, so callers type their errors by cause.
More libc entry points belong here, in the same table.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import c_char_p, c_int, c_size_t, c_void_p

__all__ = ["MCL_CURRENT", "MCL_FUTURE", "malloc", "free", "fflush_all", "mlock", "munlock",
           "mlockall", "munlockall", "set_parent_death_signal", "dlsym_default", "dlopen", "dlclose",
           "library_loaded", "needed_of", "symbol_address", "memmove", "inotify_init", "inotify_add_watch",
           "inotify_rm_watch", "IN_CREATE", "IN_DELETE_SELF", "IN_IGNORED", "IN_ONLYDIR",
           "IN_Q_OVERFLOW"]

#: ``<sys/mman.h>`` flags of ``mlockall`` (Linux, all architectures we run on)
MCL_CURRENT = 1
MCL_FUTURE = 2

# name -> (restype, argtypes), C prototypes from glibc's headers
_PROTOTYPES = {
    "malloc": (c_void_p, [c_size_t]),                 # void *malloc(size_t)
    "free": (None, [c_void_p]),                       # void free(void *)
    "fflush": (c_int, [c_void_p]),                    # int fflush(FILE *)   NULL = all
    "mlock": (c_int, [c_void_p, c_size_t]),           # int mlock(const void *, size_t)
    "munlock": (c_int, [c_void_p, c_size_t]),         # int munlock(const void *, size_t)
    "mlockall": (c_int, [c_int]),                     # int mlockall(int flags)
    "munlockall": (c_int, []),                        # int munlockall(void)
    "dlsym": (c_void_p, [c_void_p, c_char_p]),        # void *dlsym(void *, const char *)
    "dlopen": (c_void_p, [c_char_p, c_int]),          # void *dlopen(const char *, int)
    "dlclose": (c_int, [c_void_p]),                   # int dlclose(void *)
    "dlerror": (c_char_p, []),                        # char *dlerror(void)
    # int dladdr1(const void *addr, Dl_info *info, void **extra, int flags)
    "dladdr1": (c_int, [c_void_p, c_void_p, ctypes.POINTER(c_void_p), c_int]),
    # int prctl(int option, unsigned long, unsigned long, unsigned long, unsigned long)
    "prctl": (c_int, [c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]),
    "inotify_init1": (c_int, [c_int]),                # int inotify_init1(int flags)
    # int inotify_add_watch(int fd, const char *pathname, uint32_t mask)
    "inotify_add_watch": (c_int, [c_int, c_char_p, ctypes.c_uint32]),
    "inotify_rm_watch": (c_int, [c_int, c_int]),      # int inotify_rm_watch(int fd, int wd)
}

#: ``<sys/inotify.h>`` (Linux, all architectures we run on): flags of
#: ``inotify_init1``, the event bits the package asks for or must recognise
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = 0o2000000
IN_CREATE = 0x00000100
IN_DELETE_SELF = 0x00000400
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000

PR_SET_PDEATHSIG = 1          # <linux/prctl.h>

_lock = threading.Lock()
_fns: dict | None = None


def _bound() -> dict:
    """The bound functions (``dlopen(NULL)`` on first use, then cached)."""
    global _fns
    fns = _fns
    if fns is None:
        with _lock:
            if _fns is None:
                lib = ctypes.CDLL(None, use_errno=True)
                table = {}
                for name, (restype, argtypes) in _PROTOTYPES.items():
                    fn = getattr(lib, name)
                    fn.restype, fn.argtypes = restype, argtypes
                    table[name] = fn
                _fns = table
            fns = _fns
    return fns


def _errno_of(rc: int) -> int:
    """0 on success, else the errno the failed call left on this thread."""
    return 0 if rc == 0 else (ctypes.get_errno() or -1)


def malloc(size: int) -> int:
    """``malloc(size)``: the address, or 0 when out of memory."""
    return _bound()["malloc"](size) or 0


def free(addr: int | None) -> None:
    """``free(addr)``; nothing for 0/None."""
    if addr:
        _bound()["free"](addr)


def fflush_all() -> None:
    """``fflush(NULL)``: flush every C stdio stream (before redirecting fd 1)."""
    _bound()["fflush"](None)


def mlock(addr: int, size: int) -> int:
    """``mlock``; returns 0 or the errno (ENOMEM beyond ``RLIMIT_MEMLOCK``, EPERM)."""
    return _errno_of(_bound()["mlock"](addr, size))


def munlock(addr: int, size: int) -> int:
    """``munlock``; returns 0 or the errno (ENOMEM for a range not mapped)."""
    return _errno_of(_bound()["munlock"](addr, size))


def mlockall(flags: int = MCL_CURRENT | MCL_FUTURE) -> int:
    """``mlockall(flags)`` (:data:`MCL_CURRENT` | :data:`MCL_FUTURE`); 0 or the errno."""
    return _errno_of(_bound()["mlockall"](flags))


def munlockall() -> int:
    """``munlockall()``; 0 or the errno."""
    return _errno_of(_bound()["munlockall"]())


def set_parent_death_signal(sig: int) -> int:
    """``prctl(PR_SET_PDEATHSIG, sig)`` (Linux): this process gets ``sig``
    when the thread that started it ends, so a child never outlives a killed
    parent.  Returns 0 or the errno.  (If the parent is already gone the
    caller should exit: check ``os.getppid()`` against the expected one.)"""
    return _errno_of(_bound()["prctl"](PR_SET_PDEATHSIG, int(sig), 0, 0, 0))


def inotify_init() -> tuple[int, int]:
    """``inotify_init1(IN_NONBLOCK | IN_CLOEXEC)`` (inotify(7)): ``(fd, 0)``, or
    ``(-1, errno)`` (EMFILE: the user's ``max_user_instances`` reached; ENOSYS)."""
    fd = _bound()["inotify_init1"](IN_NONBLOCK | IN_CLOEXEC)
    return (fd, 0) if fd >= 0 else (-1, ctypes.get_errno() or -1)


def inotify_add_watch(fd: int, path: str | bytes, mask: int) -> tuple[int, int]:
    """``inotify_add_watch(fd, path, mask)``: ``(watch descriptor, 0)``, or
    ``(-1, errno)`` (ENOSPC: ``max_user_watches`` reached; ENOENT, EACCES).  On a
    path already watched through ``fd`` it replaces that watch's mask."""
    if isinstance(path, str):
        path = os.fsencode(path)
    wd = _bound()["inotify_add_watch"](fd, path, mask)
    return (wd, 0) if wd >= 0 else (-1, ctypes.get_errno() or -1)


def inotify_rm_watch(fd: int, wd: int) -> int:
    """``inotify_rm_watch(fd, wd)``; 0 or the errno (the kernel queues an
    ``IN_IGNORED`` event for ``wd``)."""
    return _errno_of(_bound()["inotify_rm_watch"](fd, wd))


def dlsym_default(name: str | bytes) -> int:
    """``dlsym(RTLD_DEFAULT, name)``: the address the process's global scope
    resolves ``name`` to, or 0 when no loaded library defines it."""
    if isinstance(name, str):
        name = name.encode()
    return _bound()["dlsym"](None, name) or 0


def dlopen(path: str | bytes | None, mode: int) -> tuple[int, str | None]:
    """``dlopen(path, mode)``: ``(handle, None)``, or ``(0, the dlerror text)``."""
    if isinstance(path, str):
        path = os.fsencode(path)
    fns = _bound()
    h = fns["dlopen"](path, mode) or 0
    if h:
        return h, None
    msg = fns["dlerror"]()
    return 0, (msg.decode(errors="replace") if msg else "dlopen failed")


def dlclose(handle: int) -> str | None:
    """``dlclose(handle)``: None on success, else the dlerror text ('' if none)."""
    fns = _bound()
    if fns["dlclose"](handle) != 0:
        msg = fns["dlerror"]()
        return msg.decode(errors="replace") if msg else ""
    return None


def symbol_address(fn) -> int:
    """The address of a bound ctypes function (what ``dlsym`` returned for it)."""
    return ctypes.cast(fn, c_void_p).value or 0


def library_loaded(soname: str, *, global_scope: bool = False) -> bool:
    """True when ``soname`` is already mapped in this process
    (``dlopen(soname, RTLD_NOLOAD)``: loads nothing, runs no constructor).
    ``global_scope``: also promote it to ``RTLD_GLOBAL`` (that reference is kept);
    otherwise the reference the check took is given back at once, so the check
    neither keeps an object loaded nor leaves anything behind per call."""
    # dlopen(3) wants one of RTLD_LAZY / RTLD_NOW in every mode (EINVAL otherwise)
    mode = os.RTLD_NOLOAD | os.RTLD_LAZY | (os.RTLD_GLOBAL if global_scope else os.RTLD_LOCAL)
    handle, _err = dlopen(soname, mode)
    if not handle:
        return False
    if not global_scope:
        dlclose(handle)
    return True


RTLD_DL_LINKMAP = 2          # <dlfcn.h> dladdr1: the object's struct link_map *
DT_NULL, DT_NEEDED, DT_STRTAB = 0, 1, 5


def needed_of(addr: int) -> list[str] | None:
    """The ``DT_NEEDED`` names of the loaded object that holds address ``addr``
    (``dladdr1(RTLD_DL_LINKMAP)``, then the object's dynamic section as the loader
    relocated it: ``l_ld``, ``DT_STRTAB``); None when no loaded object holds ``addr``
    or it has no dynamic section.  Reads the process's own memory only."""
    if not addr:
        return None
    info = (ctypes.c_char * 32)()                     # Dl_info: four pointers
    lm = c_void_p()
    if not _bound()["dladdr1"](addr, info, ctypes.byref(lm), RTLD_DL_LINKMAP) or not lm.value:
        return None
    # struct link_map { ElfW(Addr) l_addr; char *l_name; ElfW(Dyn) *l_ld; ... }
    l_ld = ctypes.c_void_p.from_address(lm.value + 16).value
    if not l_ld:
        return None
    needed, strtab = [], 0
    dyn = l_ld
    while True:
        tag = ctypes.c_int64.from_address(dyn).value
        val = ctypes.c_uint64.from_address(dyn + 8).value
        if tag == DT_NULL:
            break
        if tag == DT_NEEDED:
            needed.append(val)
        elif tag == DT_STRTAB:
            strtab = val
        dyn += 16
    if not strtab:
        return None
    return [ctypes.string_at(strtab + off).decode(errors="replace") for off in needed]


def memmove(dst: int, src: int, size: int) -> None:
    """Copy ``size`` bytes between two host addresses (may overlap)."""
    if size:
        ctypes.memmove(dst, src, size)
