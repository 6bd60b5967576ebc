"""Debug modes and plugins that keep a device-memory cache of their own.

The pool's debug modes (``off-pool``, ``poison``) exist to expose
use-after-free: a freed block must really go back to the device (or be
poisoned) instead of waiting in a cache.  Some plugins run LLVM's
``MemoryManagerTy`` themselves (``openmp/libomptarget/plugins/common/
MemoryManager/MemoryManager.h``, LLVM 14/16) and would keep the block anyway,
so nothing would be exposed.  Which plugins do, and when they set it up, the
plugin says (:attr:`offload_shim.plugins.plugin.Plugin.own_memory_manager`):

* :data:`AT_DEVICE_INIT` -- the LLVM 16 nextgen plugins (x86_64, cuda,
  amdgpu) create it in ``GenericDeviceTy::init`` from
  ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD``.  In a debug mode the device is
  initialised with the variable set to ``0`` (no manager for that device);
  the variable is restored right after ``init_device``.
* :data:`AT_LOAD` -- the LLVM 14/16 classic CUDA plugins create it in the
  ``DeviceRTLTy`` constructor, i.e. when the plugin is loaded.  That cannot be
  arranged afterwards: a debug mode is refused unless the variable is ``0``
  (it must have been when the plugin was loaded).
* None -- classic x86_64/amdgpu plugins, libgomp plugins, liboffload and the
  bundled plugin.
"""

from __future__ import annotations

import os
import threading
import weakref

from .config import THRESHOLD_ENV

__all__ = ["AT_DEVICE_INIT", "AT_LOAD", "own_cache", "acquire_device"]

#: ``Plugin.own_memory_manager``: the plugin makes its own memory manager when a
#: device initialises
AT_DEVICE_INIT = "device-init"
#: ... when the plugin is loaded
AT_LOAD = "load"

# serialises the environment change around init_device (and the inits that
# must not see it); the variable is process-wide
_ENV_LOCK = threading.Lock()
# (plugin, device) -> True if this process initialised it with the plugin's
# cache off; a device initialised by a Device records False
_cache_off: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def own_cache(plugin):
    """When ``plugin`` sets up a memory manager of its own from
    ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD``: :data:`AT_DEVICE_INIT`,
    :data:`AT_LOAD`, or None (it has none)."""
    return plugin.own_memory_manager          # the plugin layer knows (plugins/llvm.py)


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
