"""OOM ladders: what the manager does when ``backend_alloc`` returns 0.

A ladder gets three callables from the manager and returns ``(ptr,
released_bytes, retries)`` (``ptr`` 0: still no memory; the manager then
raises :class:`~offload_shim.errors.OutOfDeviceMemoryError`):

* ``release_all() -> bytes``: release every cached block;
* ``release_largest() -> bytes | None``: release the largest cached block
  (the least recently freed of that size); ``None`` when nothing is cached;
* ``retry() -> ptr``: ask the backend again (0: out of memory).

Blocks are released through the backend before the retry, so the plugin
can reuse their memory.  Any exception from a callable propagates.
"""

from __future__ import annotations

__all__ = ["LADDERS", "free_all", "incremental"]


def free_all(release_all, release_largest, retry):
    """LLVM ``MemoryManagerTy::freeAndAllocate``: release every cached
    block, retry once (also when nothing was cached: another thread may have
    freed meanwhile)."""
    released = release_all()
    return retry(), released, 1


def incremental(release_all, release_largest, retry):
    """D81054's summary ("walk through all free buffers from the bucket with
    largest base size, pick up one buffer, free it, and try to allocate
    immediately"): release the largest cached block, retry, repeat until a
    retry succeeds or the cache is empty; one retry if it was empty from the
    start."""
    released = retries = 0
    while True:
        n = release_largest()
        if n is None:
            break
        released += n
        retries += 1
        ptr = retry()
        if ptr:
            return ptr, released, retries
    if retries == 0:
        return retry(), released, 1
    return 0, released, retries


#: ``oom=`` option -> ladder.
LADDERS = {"free-all": free_all, "incremental": incremental}
