"""Which memory manager holds which device block, per backend.

Several managers may sit on one device memory (two runtimes sharing a
plugin device, two managers over one fake backend).  A block is *held* by
the manager that obtained it from the backend until that manager returns it
to the backend: while it is live, cached or in transit.  The managers of one
backend share an :class:`AddressSpace` (``{ptr: weakref to the holder}``),
so a non-strict ``free`` of a pointer another manager holds goes to that
manager instead of to the backend: the backend never frees a block that a
pool still caches and would hand out again (and free a second time at
drain).  cuda.core's buffers remember their memory resource for the same
reason (the cuda.core row of the house style).

Entries change only next to backend calls (a block obtained or returned),
never on cache hits; a claim checks and records under the space's lock, the
other operations are single dict operations (atomic under the GIL).
"""

from __future__ import annotations

import threading
import weakref

__all__ = ["AddressSpace", "address_space"]


class AddressSpace(dict):
    """``{ptr: weakref.ref(manager)}`` of the blocks held from one backend."""

    __slots__ = ("_claims", "__weakref__")

    def __init__(self):
        super().__init__()
        self._claims = threading.Lock()

    def holder(self, ptr):
        """The manager holding ``ptr``, or None (also when it was dropped)."""
        ref = self.get(ptr)
        return None if ref is None else ref()

    def claim(self, ptr, ref) -> bool:
        """Record ``ptr`` as held through ``ref``; False if a live manager
        already holds it (the backend handed out a block that is held)."""
        with self._claims:
            old = self.get(ptr)
            if old is not None and old() is not None:
                return False            # held (a manager dropped without drain holds nothing)
            self[ptr] = ref
            return True

    def release(self, ptr) -> None:
        """``ptr`` went back to the backend."""
        self.pop(ptr, None)


_SPACES: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()
_LOCK = threading.Lock()


def address_space(key) -> AddressSpace:
    """The address space of the backend identified by ``key`` (hashable),
    shared by every manager created with an equal key while one of them is
    alive.  ``TypeError`` for an unhashable key."""
    hash(key)
    with _LOCK:
        space = _SPACES.get(key)
        if space is None:
            space = _SPACES[key] = AddressSpace()
        return space
