"""The images loaded on one device: loading and unloading them (an unload waits for
the launches of its kernels), their kernels and globals, and the host->target
address map.  A part of :class:`~offload_shim.core.device.Device` (a mixin: the
device's lifecycle and locks are its own).

Registration follows libgomp's ``GOMP_offload_register_ver`` (``libgomp/target.c``):
a device initialised when an image is registered loads it at once, the others when
they initialise (LLVM does the same since #77798).
"""

from __future__ import annotations

import operator

from ..errors import (InvalidImageError, KernelNotFoundError, LifecycleError, NotMappedError,
                      OffloadError)
from .device_state import DeviceState, own_launches as _own_launches
from .images import OffloadImage

__all__ = ["DeviceImages"]


class _LoadedOnDevice:
    __slots__ = ("image", "loaded", "kernels", "globals", "launches")

    def __init__(self, image, loaded, kernels, globals_):
        self.image = image
        self.loaded = loaded
        self.kernels = kernels      # name -> (entry addr, num_args)
        self.globals = globals_     # name -> (tgt addr, size)
        self.launches: list = []    # one token per KernelLauncher launch in flight


class DeviceImages:
    """The images part of :class:`~offload_shim.core.device.Device`."""

    __slots__ = ()

    def _kernel_image_locked(self, entry: int):
        """(``_launch_cv`` held.)  The loaded image whose kernel has target-table
        address ``entry``; raises KernelNotFoundError when none has, TypeError for an
        ``entry`` that is not an int."""
        img = next((k[2] for lst in self._kernels.values() for k in lst if k[0] == entry),
                   None)
        if img is None:
            if not isinstance(entry, int) or isinstance(entry, bool):
                # a kernel's name, say: the format below would fail with a ValueError
                raise TypeError(f"{self.label}: a kernel entry is its target-table "
                                f"address (an int), not {type(entry).__name__}; "
                                "Device.launch takes a kernel's name")
            raise KernelNotFoundError(f"{self.label}: {entry:#x} is not a kernel entry "
                                      "of a loaded image", device=self.label)
        return img

    def _load(self, image: OffloadImage) -> None:
        if image.id in self._images:
            return
        loaded = self.plugin.load_image(self.index, image)
        kernels, globals_ = {}, {}
        hosts = image.host_addresses()
        try:
            for host_entry, tgt, haddr in zip(image.entries, loaded.entries, hosts):
                if host_entry.is_kernel:
                    kernels[host_entry.name] = (tgt.addr, host_entry.num_args)
                else:
                    if not tgt.addr:
                        raise InvalidImageError(f"{self.label}: global {host_entry.name!r} "
                                                "has no device address", device=self.label)
                    globals_[host_entry.name] = (tgt.addr, host_entry.size)
                self.address_map.insert(haddr, host_entry.size, tgt.addr, image)
        except BaseException:
            self.address_map.remove_owner(image)
            try:
                self.plugin.unload_image(self.index, loaded)
            except OffloadError:
                pass
            raise
        rec = _LoadedOnDevice(image, loaded, kernels, globals_)
        with self._launch_cv:
            self._images[image.id] = rec
            for name, (addr, nargs) in kernels.items():
                self._kernels.setdefault(name, []).append((addr, nargs, image))
        for addr, size in globals_.values():
            self._globals[addr] = size

    def _unload(self, image: OffloadImage, quiet: bool = False) -> None:
        with self._launch_cv:
            rec = self._images.pop(image.id, None)
            if rec is None:
                return
            for name in rec.kernels:
                lst = [k for k in self._kernels.get(name, []) if k[2] is not image]
                if lst:
                    self._kernels[name] = lst
                else:
                    self._kernels.pop(name, None)
            # no new launch can find the image now; wait for those already running
            # (KernelLauncher: token pushed before it checks the record, so a launch
            # either sees the record gone or is waited for here; the timeout is only
            # a safety net)
            # launches of this very thread are not waited for: an unload reached from
            # inside one of the image's kernels (exit() called by the kernel, whose
            # exit path unregisters the program's images) would wait for itself
            own = _own_launches(image.id)
            while self._launching.get(image.id, 0) + len(rec.launches) > own:
                self._unload_waiting += 1
                try:
                    self._launch_cv.wait(0.05)
                finally:
                    self._unload_waiting -= 1
        self.address_map.remove_owner(image)
        for addr, _ in rec.globals.values():
            self._globals.pop(addr, None)
        try:
            self.plugin.unload_image(self.index, rec.loaded)
        except OffloadError:
            if not quiet:
                raise

    def load_registered(self, image: OffloadImage) -> None:
        """The owner registered ``image`` (accepted by this device's plugin):
        load it now if the device is initialised; otherwise it is loaded at
        init, from the ``images`` collaborator.  Raises what ``load_binary``
        raises (InvalidImageError, TableMismatchError, PluginCallError)."""
        with self._life:
            if self._state is DeviceState.READY:
                self._load(image)

    def unload_registered(self, image: OffloadImage) -> None:
        """The owner unregistered ``image``: unload it if it is loaded here
        (after launches of its kernels in flight finish)."""
        with self._life:
            if self._state is DeviceState.READY:
                self._unload(image)

    @property
    def loaded_images(self) -> list[OffloadImage]:
        """Images loaded into this device (empty when not initialised)."""
        return [r.image for r in self._images.values()]

    @property
    def kernels(self) -> list[str]:
        return sorted(self._kernels)

    def global_address(self, name: str, image: OffloadImage | None = None) -> int:
        """Device address of a global of a loaded image (initialises the device).
        Raises NotMappedError (a KeyError)."""
        self._enter()
        try:
            for rec in self._images.values():
                if (image is None or rec.image is image) and name in rec.globals:
                    return rec.globals[name][0]
            raise NotMappedError(f"{self.label}: no loaded image has a global {name!r}",
                                 device=self.label)
        finally:
            self._exit()

    def translate(self, host_addr: int) -> int:
        """Target address mapped for a host address (host->target map of the
        loaded images).  Raises NotMappedError (a KeyError) when unmapped,
        LifecycleError after close, TypeError for a host address that is not an
        int (``operator.index``: a float would give a float address)."""
        if self._state is DeviceState.CLOSED:
            raise LifecycleError(f"{self.label}: device used after close", device=self.label)
        if type(host_addr) is not int:
            if isinstance(host_addr, bool):
                raise TypeError("host address must be an int, not bool")
            try:
                host_addr = operator.index(host_addr)
            except TypeError:
                raise TypeError(f"host address must be an int, not "
                                f"{type(host_addr).__name__}") from None
        try:
            return self.address_map.lookup(host_addr)
        except KeyError:
            raise NotMappedError(f"{self.label}: host address {host_addr:#x} is not mapped",
                                 device=self.label) from None
