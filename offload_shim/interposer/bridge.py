"""The C bridge: ``libosh_interposer.so`` and its callback table.

``native/interposer.c`` exports libomptarget 16's host entry points (``interface.cpp``
and ``api.cpp`` names under version node ``VERS1.0``) and libgomp's offload entry points
(``GOMP_4.0`` / ``GOMP_4.5``), and forwards each to one table of Python callbacks
(:mod:`offload_shim.abi.interposer`).  This module loads the library once per process
(``RTLD_GLOBAL``, so a compiled library's ``__tgt_*@VERS1.0`` references bind to it
before ``libomptarget.so.16``), installs and removes the table, and wraps each
callback so that no Python exception crosses into C.
"""

from __future__ import annotations

import os
import threading

from ..abi import interposer as _abi
from ..errors import LifecycleError

from ..lazylog import log  # logging.getLogger("offload_shim"), imported on first use

INTERPOSER_FILENAME = "libosh_interposer.so"
#: osh_interposer_calls() counter names, in the C enum's order
CALL_COUNTERS = _abi.CALL_COUNTERS

_native = None
_native_lock = threading.Lock()


def interposer_path() -> Path:
    """Path of the bundled ``libosh_interposer.so``; FileNotFoundError when not built."""
    from pathlib import Path
    return Path(_interposer_file())


def _interposer_file() -> str:
    """:func:`interposer_path` as a ``str`` (no pathlib: start-up of every run)."""
    from ..abi.native import native_dir
    p = os.path.join(native_dir(), INTERPOSER_FILENAME)
    if not os.path.isfile(p):
        raise FileNotFoundError(f"{p} is not built: install the package (pip install .) "
                                "or set OFFLOAD_SHIM_NATIVE_DIR")
    return p


def load_interposer():
    """Load ``libosh_interposer.so`` RTLD_GLOBAL (once per process) and check that
    the process resolves ``__tgt_register_lib`` to it (not to a libomptarget.so loaded
    into the global scope earlier).  Raises FileNotFoundError, OSError (dlopen),
    LifecycleError (another definition wins)."""
    global _native
    with _native_lock:
        if _native is not None:
            return _native
        lib = _abi.bind_interposer(_interposer_file())
        if _abi.dlsym_default("__tgt_register_lib") != _abi.symbol_address(
                lib, "__tgt_register_lib"):
            raise LifecycleError(
                "__tgt_register_lib resolves to another library (a libomptarget.so was "
                "loaded RTLD_GLOBAL before the interposer): compiled libraries would "
                "bypass offload_shim")
        _native = lib
        return lib


def call_counts() -> dict[str, int]:
    """How often each interposed entry point was called in this process
    (``fallback``: kernels answered "run on the host")."""
    lib = load_interposer()
    return {name: int(lib.osh_interposer_calls(i)) for i, name in enumerate(CALL_COUNTERS)}


class Bridge:
    """An installed callback table: ``install(handlers)`` builds it from a dict of
    field name -> callable (:data:`offload_shim.abi.interposer.CALLBACK_FIELDS`) and
    hands it to the C side (LifecycleError on a struct size mismatch);
    ``uninstall()`` removes it (idempotent).  The table is kept alive in between."""

    def __init__(self):
        self.lib = None
        self._table = None
        #: the C side's repeat path while the table is installed
        #: (:class:`~offload_shim.interposer.llvm.repeat.Repeats`), else None
        self.repeats = None

    def install(self, handlers: dict) -> None:
        lib = load_interposer()
        table = _abi.make_callbacks(handlers)
        if _abi.set_callbacks(lib, table) != 0:
            raise LifecycleError("osh_interposer_set_callbacks rejected the table "
                                 "(struct size mismatch: rebuild the native library)")
        self.lib, self._table = lib, table
        from ..core.device import TEARDOWN_HOOKS
        from .llvm.repeat import Repeats
        self.repeats = Repeats(lib)
        self.repeats.reset(False)           # another table's repeats are not this one's
        TEARDOWN_HOOKS.append(self.repeats.on_device_teardown)
        # a library's destructor may call __tgt_unregister_lib after the interpreter
        # is finalised: the table must be gone by then (ctypes callbacks would crash)
        import atexit
        atexit.register(self.uninstall)

    def registered(self) -> list[int]:
        """``__tgt_bin_desc`` addresses registered and not unregistered (also those
        registered before the table existed), in order."""
        return _abi.registered_descriptors(self.lib) if self.lib is not None else []

    def pending_requires(self) -> int | None:
        """The flags of a ``__tgt_register_requires`` the C side recorded without a
        callback table under a deferred boot (``native/interposer.c`` boot_deferred) and
        has not delivered yet, once; None when there is none (or nothing loaded)."""
        if self.lib is None:
            return None
        import ctypes
        flags = ctypes.c_int64(0)
        return flags.value if self.lib.osh_interposer_pending_requires(
            ctypes.byref(flags)) else None

    def note_plugins(self, plugins) -> None:
        """Tell the C side which loaded objects are the runtime's plugins: under
        ``offload-shim run`` an exit handler of one of them stops the runtime before
        it runs (``native/interposer.c``, "Teardown").  No-op when not loaded."""
        if self.lib is None:
            return
        for p in plugins:
            try:
                self.lib.osh_interposer_note_plugin(p.object_address)
            except (AttributeError, ValueError):
                continue

    def exiting(self) -> bool:
        """Under ``offload-shim run``: the process has begun to finalise its objects
        (``_dl_fini``)."""
        return bool(self.lib is not None and self.lib.osh_interposer_exiting())

    def keep_plugins(self) -> None:
        """Under ``offload-shim run``: the plugins' own exit handlers will not run (a
        kernel is still running while the process exits; they would unload it)."""
        if self.lib is not None:
            self.lib.osh_interposer_keep_plugins()

    def set_runtime_name(self, name: str) -> None:
        """The runtime's name in the lines the C side prints itself
        (``RuntimeProfile.name``).  No-op when not loaded."""
        if self.lib is not None:
            self.lib.osh_interposer_set_runtime_name(name.encode())

    def uninstall(self, wait: bool = True) -> None:
        """Remove the table from the C side.  Its ctypes thunks stay alive for the
        rest of the process: another thread may have read a function pointer from
        the table just before and call it afterwards (freed thunks: SIGSEGV).
        ``wait=False``: the C side's repeats in flight are not waited for (a runtime
        abandoned at exit, whose kernels may never return)."""
        if self.repeats is not None:
            from ..core.device import TEARDOWN_HOOKS
            self.repeats.reset(False, wait=wait)
            try:
                TEARDOWN_HOOKS.remove(self.repeats.on_device_teardown)
            except ValueError:
                pass
            self.repeats = None
        if self.lib is not None and self._table is not None:
            _abi.set_callbacks(self.lib, None)
            _RETIRED_TABLES.append(self._table)
            self._table = None


#: callback tables removed from the C side, kept alive (see :meth:`Bridge.uninstall`)
_RETIRED_TABLES: list = []


def guard(fn, on_error, fail: int = _abi.CB_FAIL):
    """``fn`` wrapped for the C side: its result as an int (None -> CB_OK); any
    exception is logged and handed to ``on_error(message)``, whose int result (or
    ``fail`` when it returns None or raises) goes back to C.  Python exceptions must
    never cross into C (ctypes would turn them into "success")."""
    def wrapper(*args):
        try:
            rc = fn(*args)
            return _abi.CB_OK if rc is None else int(rc)
        except BaseException as exc:  # noqa: BLE001 - must not propagate into C
            return guarded_failure(fn.__name__, exc, on_error, fail)
    wrapper.__name__ = fn.__name__
    return wrapper


def guarded_failure(name: str, exc: BaseException, on_error, fail: int) -> int:
    """What a :func:`guard`-ed callback ``name`` returns to C when it raised ``exc``:
    the exception logged and handed to ``on_error(message)``, whose int result (or
    ``fail``) is the return code.  For callbacks that inline :func:`guard`'s wrapper
    (the construct callback, ``Interposer._construct_callback``)."""
    msg = f"offload_shim interposer: {name}: {type(exc).__name__}: {exc}"
    log.error("%s", msg)
    try:
        rc = on_error(msg)
    except BaseException:  # noqa: BLE001
        rc = None
    return fail if rc is None else int(rc)


__all__ = ["Bridge", "CALL_COUNTERS", "INTERPOSER_FILENAME", "call_counts", "guard",
           "guarded_failure",
           "interposer_path", "load_interposer"]
