"""The GCC side of an :class:`~offload_shim.interposer.Interposer`, built on first use.

A program built by clang never calls a ``GOMP_*`` entry point, yet every interposer
serves GCC code too.  :class:`LazyGompSide` installs, in place of
:class:`~.target.GompSide`'s table, one whose callbacks build the side (importing
:mod:`.target` and the rooms below it) at the first ``GOMP_*`` call that reaches Python,
install its table and hand that call on: a clang program's start-up does not pay for
libgomp's host side (``offload-shim run``, docs/benchmarks.md "start-up").  The side is
built at once where it is needed from the start: in host-device mode (the API routines
answer from Python from the first call) and when the interposer recorded GCC
registrations before the table existed (they are replayed, as
:meth:`~.target.GompSide.install` does).

native/interposer_gomp.c records every registration before it calls the table, and
passes a call through to libgomp when no table is installed, so a call that finds the
table of this module sees the same answers as one that finds the side's own.
"""

from __future__ import annotations

import threading

from ...abi import gomp_interposer as _gabi

#: what a callback answers when building the side failed: the C side then passes the
#: construct to libgomp (``decide``), ignores a registration's answer (``reg``), or
#: exits with "libgomp: offload_shim: the Python runtime failed" (the others), as for
#: any failed callback (native/interposer_gomp.c ``gomp_exit_fatal``)
_BUILD_FAILED = {"reg": _gabi.FATAL - 1, "decide": _gabi.PASSTHROUGH,
                 "map": _gabi.FATAL - 1, "unmap": _gabi.FATAL - 1, "api": _gabi.FATAL - 1}


class LazyGompSide:
    """Holds the arguments of a :class:`~.target.GompSide` (``runtime``, ``lock``,
    ``errors``, ``unsupported``, ``policy``, ``host_device``: see there) and builds it
    when first asked (:meth:`side`) or called from C.  Thread safe."""

    def __init__(self, runtime, lock, *, errors: list, unsupported: list,
                 policy: str | None = None, host_device: bool = False):
        self._args = (runtime, lock)
        self._kw = {"errors": errors, "unsupported": unsupported, "policy": policy,
                    "host_device": bool(host_device)}
        self._errors = errors
        self._build_lock = threading.Lock()
        self._side = None
        self._lib = None                        # where the table of this module is
        self._table = None                      # kept alive while installed

    @property
    def built(self):
        """The :class:`~.target.GompSide`, or None while nothing needed it."""
        return self._side

    def side(self):
        """The :class:`~.target.GompSide`, built now when it is not yet."""
        side = self._side
        if side is None:
            with self._build_lock:
                side = self._side
                if side is None:
                    from .target import GompSide
                    side = self._side = GompSide(*self._args, **self._kw)
        return side

    def install(self, lib) -> None:
        """Install a table in the interposer ``lib``: the side's own (replaying the
        registrations recorded before) in host-device mode or when there are such
        registrations, else this module's.  Raises OffloadError on a size mismatch."""
        if self._kw["host_device"] or _gabi.registered(lib):
            self.side().install(lib)
            return
        table = _gabi.make_callbacks({name: self._trampoline(name)
                                      for name, _ in _gabi.CALLBACK_FIELDS},
                                     host_device=False)
        if _gabi.set_callbacks(lib, table) != 0:
            from ...errors import OffloadError
            raise OffloadError("osh_gomp_set_callbacks rejected the table (struct size "
                               "mismatch: rebuild the native library)")
        self._table, self._lib = table, lib
        if _gabi.registered(lib):       # one came in before the table: replay it now
            side = self.side()
            self._own_table(side)
            side.replay(lib)

    def _trampoline(self, name: str):
        failed = _BUILD_FAILED[name]

        def call(*args):
            try:
                side = self._side_for_call()
            except BaseException as exc:  # noqa: BLE001 - must not propagate into C
                from ..bridge import guarded_failure
                return guarded_failure(f"gomp {name}", exc, self._errors.append, failed)
            return side.handlers[name](*args)
        call.__name__ = f"gomp_{name}"
        return call

    def _side_for_call(self):
        """The side, with its own table installed where this module's still is (no
        replay: every registration since this module's table was installed came
        through it, and this call hands its own on)."""
        side = self.side()
        self._own_table(side)
        if not side.handlers:           # uninstalled meanwhile: the callbacks the
            side.handlers = side.callbacks()    # table would have had
        return side

    def _own_table(self, side) -> None:
        """Install the side's own table where this module's is, once: another thread's
        GOMP_* call may have installed it already, and that one stays (a call may be
        running through it; a table replaced is freed)."""
        with self._build_lock:
            if self._lib is not None and side._lib is None:
                side.install(self._lib, replay=False)

    def uninstall(self, close_device: bool = True) -> None:
        """Remove whichever table is installed (:meth:`~.target.GompSide.uninstall`,
        ``close_device`` as there).  Idempotent."""
        with self._build_lock:
            lib, self._lib = self._lib, None
        if lib is not None:
            _gabi.set_callbacks(lib, None)
        if self._side is not None:
            self._side.uninstall(close_device=close_device)


__all__ = ["LazyGompSide"]
