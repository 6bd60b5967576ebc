"""A pure-Python stand-in for a plugin's ``data_alloc``/``data_delete``, to
drive a :class:`~offload_shim.memory.MemoryManager` without any plugin: used
by :func:`~offload_shim.memory.replay` and by the tests.

Addresses are unique and increasing (never reused), so every double free or
free of an unknown pointer is caught.  Thread-safe.
"""

from __future__ import annotations

import threading
import time

__all__ = ["FakeBackend", "FakeBackendError"]


class FakeBackendError(AssertionError):
    """A misuse of the fake device: unknown or double free."""


class FakeBackend:
    """Fake device memory.

    * ``capacity``: ``None`` (unlimited) or the most bytes held at once;
      ``alloc`` returns 0 (out of memory) beyond it, like a plugin.
    * ``fail``: ``alloc`` always returns 0.
    * ``yield_``: ``time.sleep(0)`` inside each call, so threads interleave
      the way they do around a real ctypes call that releases the GIL.
    * ``check(ptr, size)``: optional hook called on every alloc.

    Counters: ``held_bytes``, ``live`` (``{ptr: size}``), ``alloc_calls``
    (including failed ones), ``failed_allocs``, ``frees`` (successful),
    ``freed`` (``{ptr: size}`` of every freed block), ``free_order``.
    ``alloc``/``free`` are the two callbacks the manager takes.
    """

    def __init__(self, capacity: int | None = None, *, fail: bool = False,
                 yield_: bool = False, base: int = 0x10000, align: int = 16):
        self.capacity = capacity
        self.fail = fail
        self.yield_ = yield_
        self.align = align
        self._next = base
        self._lock = threading.Lock()
        self.live: dict[int, int] = {}
        self.freed: dict[int, int] = {}
        self.free_order: list[int] = []
        self.held_bytes = 0
        self.alloc_calls = 0
        self.failed_allocs = 0
        self.frees = 0
        self.errors: list[str] = []
        self.on_call = None     # optional hook(op, arg) run at every call

    def alloc(self, size: int) -> int:
        if self.on_call is not None:
            self.on_call("alloc", size)
        if self.yield_:
            time.sleep(0)
        with self._lock:
            self.alloc_calls += 1
            if self.fail or (self.capacity is not None
                             and self.held_bytes + size > self.capacity):
                self.failed_allocs += 1
                return 0
            ptr = self._next
            step = max(size, 1)
            self._next += (step + self.align - 1) // self.align * self.align
            self.live[ptr] = size
            self.held_bytes += size
            return ptr

    def free(self, ptr: int) -> None:
        if self.on_call is not None:
            self.on_call("free", ptr)
        if self.yield_:
            time.sleep(0)
        with self._lock:
            size = self.live.pop(ptr, None)
            if size is None:
                what = "double free" if ptr in self.freed else "free of unknown pointer"
                msg = f"fake device: {what} {ptr:#x}"
                self.errors.append(msg)
                raise FakeBackendError(msg)
            self.held_bytes -= size
            self.freed[ptr] = size
            self.free_order.append(ptr)
            self.frees += 1

    def __repr__(self) -> str:
        return (f"FakeBackend(capacity={self.capacity!r}, held_bytes={self.held_bytes}, "
                f"live={len(self.live)})")
