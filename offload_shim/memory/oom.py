"""OOM ladders: what the manager does when ``backend_alloc`` returns 0.

A ladder gets four callables from the manager and returns ``(ptr, reused,
released_bytes, retries)`` (``ptr`` 0: still no memory; the manager then
searches its cache once more under its lock and raises
:class:`~offload_shim.errors.OutOfDeviceMemoryError` if nothing fits;
``reused``: ``ptr`` is a cached block taken by ``reuse``, already booked as
a hit, not memory from the backend):

* ``release_all() -> bytes``: release every cached block;
* ``release_largest() -> bytes | None``: release the largest cached block
  (the least recently freed of that size); ``None`` when nothing is cached;
* ``retry() -> ptr``: ask the backend again (0: out of memory);
* ``reuse() -> ptr``: take a cached block that fits the request, as a cache
  hit would (0: none).  Another thread may free a fitting block while the
  ladder releases blocks or waits for the backend; it is then cached, and
  the backend, whose memory it holds, cannot serve the retry.

Every release step is followed by ``reuse`` before ``retry`` (PyTorch's
``CUDACachingAllocator`` searches its pool again after releasing cached
blocks, pytorch/pytorch#189504; LLVM 19's ``MemoryManagerTy::freeAndAllocate``
in ``plugins-nextgen/common/include/MemoryManager.h`` retries the device
only, and raises its OOM with a fitting block cached when a free lands in
that window).  Blocks are released through the backend before the retry, so
the plugin can reuse their memory.  Any exception from a callable propagates.
"""

from __future__ import annotations

__all__ = ["LADDERS", "free_all", "incremental"]


def free_all(release_all, release_largest, retry, reuse):
    """LLVM ``MemoryManagerTy::freeAndAllocate``: release every cached
    block, then reuse a fitting block cached meanwhile or retry once (also
    when nothing was cached: another thread may have freed meanwhile)."""
    released = release_all()
    ptr = reuse()
    if ptr:
        return ptr, True, released, 0
    return retry(), False, released, 1


def incremental(release_all, release_largest, retry, reuse):
    """D81054's summary ("walk through all free buffers from the bucket with
    largest base size, pick up one buffer, free it, and try to allocate
    immediately"): release the largest cached block, reuse a fitting block
    cached meanwhile or retry, repeat until one of them succeeds or the
    cache is empty; one attempt if it was empty from the start."""
    released = retries = 0
    while True:
        n = release_largest()
        if n is None:
            break
        released += n
        ptr = reuse()
        if ptr:
            return ptr, True, released, retries
        retries += 1
        ptr = retry()
        if ptr:
            return ptr, False, released, retries
    if retries == 0:
        ptr = reuse()
        if ptr:
            return ptr, True, released, 0
        return retry(), False, released, 1
    return 0, False, released, retries


#: ``oom=`` option -> ladder.
LADDERS = {"free-all": free_all, "incremental": incremental}
