"""Debug modes and plugins that keep a device-memory cache of their own.

The pool's debug modes (``off-pool``, ``poison``) exist to expose
use-after-free: a freed block must really go back to the device (or be
poisoned) instead of waiting in a cache.  Some plugins run LLVM's
``MemoryManagerTy`` themselves (abi-reference 1.9/1.10) and would keep the
block anyway, so nothing would be exposed:

* LLVM 16 nextgen plugins (x86_64, cuda, amdgpu) create it in
  ``GenericDeviceTy::init`` from ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD``,
  i.e. when a device initialises.  In a debug mode the device is
  initialised with the variable set to ``0`` (no manager for that device);
  the variable is restored right after ``init_device``.
* LLVM 14/16 classic CUDA plugins create it in the ``DeviceRTLTy``
  constructor, i.e. when the plugin is loaded.  That cannot be arranged
  afterwards: a debug mode is refused unless the variable is ``0`` (it
  must have been when the plugin was loaded).
* Classic x86_64/amdgpu plugins, libgomp plugins and the bundled plugin have
  no cache of their own (the binaries do not contain the variable's name).

Which plugins read the variable is decided from the binary (its name among
the file's bytes, as abi-reference 1.10 verified with ``strings``) and the
generation (nextgen: at device init; otherwise: at load).
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref

from .config import THRESHOLD_ENV

__all__ = ["AT_DEVICE_INIT", "AT_LOAD", "own_cache", "acquire_device"]

#: the plugin configures its own memory manager when a device initialises
AT_DEVICE_INIT = "device-init"
#: ... when the plugin is loaded
AT_LOAD = "load"

_NAME = THRESHOLD_ENV.encode()
_reads: dict = {}                       # (path, size, mtime) -> bool
# serialises the environment change around init_device (and the inits that
# must not see it); the variable is process-wide
_ENV_LOCK = threading.Lock()
# (plugin, device) -> True if this process initialised it with the plugin's
# cache off; a device initialised by a Device records False
_cache_off: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _binary_reads_threshold(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    key = (path, st.st_size, st.st_mtime_ns)
    hit = _reads.get(key)
    if hit is None:
        try:
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                hit = m.find(_NAME) >= 0
        except (OSError, ValueError):
            hit = False
        _reads[key] = hit
    return hit


def own_cache(plugin):
    """When ``plugin`` sets up a memory manager of its own from
    ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD``: :data:`AT_DEVICE_INIT`,
    :data:`AT_LOAD`, or None (it has none)."""
    if plugin.abi != "llvm" or plugin.bundled or not _binary_reads_threshold(plugin.path):
        return None
    return AT_DEVICE_INIT if plugin.generation.endswith("nextgen") else AT_LOAD


def acquire_device(plugin, index: int, debug) -> bool:
    """``plugin.acquire_device(index)`` such that, with a debug mode
    (``debug`` not None), the plugin keeps no cache of its own for the
    device.  Returns what ``acquire_device`` returns (True if this call
    initialised the device).

    Raises ``ValueError`` (nothing acquired) when that cannot be arranged:
    the plugin sets its cache up at load and was loaded with it on, or the
    device is already initialised (by another runtime) with its cache on.
    Whatever ``acquire_device`` raises propagates."""
    where = own_cache(plugin)
    if where is None:
        return plugin.acquire_device(index)
    if not debug:
        if where == AT_LOAD:
            return plugin.acquire_device(index)
        with _ENV_LOCK:                     # never while the variable is overridden
            first = plugin.acquire_device(index)
        if first:
            _record(plugin, index, False)
        return first
    if where == AT_LOAD:
        if os.environ.get(THRESHOLD_ENV, "").strip() not in ("0", "+0"):
            raise ValueError(
                f"debug mode {debug!r} cannot see through the memory manager of "
                f"{plugin.name}: the plugin sets it up when it is loaded; load it with "
                f"{THRESHOLD_ENV}=0 (and give the pool's threshold in pool=)")
        return plugin.acquire_device(index)
    with _ENV_LOCK:
        saved = os.environ.get(THRESHOLD_ENV)
        os.environ[THRESHOLD_ENV] = "0"
        try:
            first = plugin.acquire_device(index)
        finally:
            if saved is None:
                del os.environ[THRESHOLD_ENV]
            else:
                os.environ[THRESHOLD_ENV] = saved
    if first:
        _record(plugin, index, True)
    elif not _cache_off.get(plugin, {}).get(index, False):
        plugin.release_device(index)
        raise ValueError(
            f"debug mode {debug!r} cannot see through the memory manager of "
            f"{plugin.name}:{index}: the device is already initialised (by another runtime) "
            f"with the plugin's own cache on; deinitialise it there first")
    return first


def _record(plugin, index, off):
    try:
        _cache_off.setdefault(plugin, {})[index] = off
    except TypeError:                       # not weakly referenceable: nothing to remember
        pass
