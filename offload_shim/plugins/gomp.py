"""The libgomp plugin family (``GOMP_OFFLOAD_*``): GCC 12 plugins (``GOMP_VERSION``
1), driven through the prototype tables of :mod:`offload_shim.abi.gomp` (GCC 12
``libgomp-plugin.h``).  Plugins of another ``GOMP_VERSION`` are recognised and refused
(ABIMismatchError).
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_char_p, c_void_p
from collections.abc import Sequence

from ..abi import gomp as _gomp
from ..abi import libc as _libc
from ..errors import (ABIMismatchError, DeviceInitError, InvalidImageError, NotAPluginError,
                      PluginCallError, TableMismatchError)
from .plugin import LoadedImage, Plugin, TargetEntry

__all__ = ["GompPlugin"]


class GompPlugin(Plugin):
    """A libgomp plugin (``GOMP_OFFLOAD_*``), GCC 12 shape (GOMP_VERSION 1).
    Plugins reporting another version are recognised (``version`` is read,
    the only call made while loading) and refused with ABIMismatchError."""

    abi = "gomp"
    prefix = _gomp.PREFIX

    def __init__(self, path, lib, symbols):
        super().__init__(path, lib, symbols)
        vfn = getattr(lib, self.prefix + "version")
        vfn.restype = ctypes.c_uint
        vfn.argtypes = []
        self.version = int(vfn())                # probe call, as libgomp does
        self.generation = _gomp.generation(self.version)
        if self.version not in _gomp.SUPPORTED_VERSIONS:
            raise ABIMismatchError(
                f"{path}: GOMP_OFFLOAD_version() = {self.version} "
                f"({_gomp.GCC_FOR_VERSION.get(self.version, 'unknown GCC')}); "
                f"supported: {_gomp.SUPPORTED_VERSIONS}")
        self._bind(_gomp.PROTOTYPES[self.version], _gomp.REQUIRED_BASE)
        self.caps = int(self._fn["get_caps"]())
        self.target_type = int(self._fn["get_type"]())
        self.target_name = (self._fn["get_name"]() or b"").decode()
        if self.caps & _gomp.GOMP_OFFLOAD_CAP_OPENMP_400:
            missing = [self.prefix + n for n in _gomp.REQUIRED_OPENMP if n not in symbols]
            if missing:
                raise NotAPluginError(f"{path}: OpenMP-capable GOMP plugin lacks "
                                      f"{', '.join(missing)}", path=path, missing=missing)
        self._images: dict[tuple[int, int], object] = {}
        self.cuda_devices = any(k in self.name for k in ("cuda", "nvptx"))
        # GCC's plugins are GPU ones (nvptx, gcn); the bundled plugin's GOMP view
        # hands out malloc memory
        self.device_memory_is_host = self.bundled

    def info(self) -> dict:
        d = super().info()
        d.update(gomp_version=self.version, caps=self.caps, target_type=self.target_type,
                 target_name=self.target_name)
        return d

    def _query_num_devices(self) -> int:
        return self._fn["get_num_devices"](0)

    def _init_device(self, dev, flags):
        self._check_bool(self._fn["init_device"](dev), "init_device", dev, error=DeviceInitError)

    def _deinit_device(self, dev):
        self._check_bool(self._fn["fini_device"](dev), "fini_device", dev, detail=False)

    # images ----------------------------------------------------------------
    def image_version(self) -> int:
        return _gomp.version_pack(self.version, 0 if self.target_type == 2 else 1)

    def _target_data(self, image):
        """The bundled plugin's ``osh_gomp_target_data`` for an OffloadImage, or the
        compiler's own ``target_data`` of a GCC library's image (an image with a
        ``gomp_target_data`` address, made by :mod:`offload_shim.interposer` at
        ``GOMP_offload_register_ver``: functions first, then variables)."""
        gomp_td = getattr(image, "gomp_target_data", None)
        if gomp_td:
            return ctypes.c_char.from_address(gomp_td), [image], list(image.entries)
        if not self.bundled:
            raise InvalidImageError(
                f"{self.name}: building target_data for {self.target_name} images is not "
                "supported (only the bundled host plugin's format)")
        data = image.data
        funcs = [e for e in image.entries if e.size == 0]
        vars_ = [e for e in image.entries if e.size > 0]
        fnames = (c_char_p * max(len(funcs), 1))(*[e.name.encode() for e in funcs])
        nargs = (ctypes.c_uint32 * max(len(funcs), 1))(*[image.num_args(e.name) for e in funcs])
        vnames = (c_char_p * max(len(vars_), 1))(*[e.name.encode() for e in vars_])
        td = _gomp.OshGompTargetData()
        td.magic = _gomp.OSH_GOMP_TARGET_DATA_MAGIC
        td.format_version = 1
        td.image = image.data_address()
        td.image_size = len(data)
        td.func_names = fnames
        td.func_num_args = nargs
        td.num_funcs = len(funcs)
        td.var_names = vnames
        td.num_vars = len(vars_)
        return td, [data, fnames, nargs, vnames, td], funcs + vars_

    def is_valid_binary(self, image) -> bool:
        """GOMP has no such entry point: an image is for this plugin when its
        target type matches (x86-64 ELF -> host type, bundled plugin only; a GCC
        library's image -> the ``target_type`` it was registered with)."""
        gomp_type = getattr(image, "gomp_target_type", None)
        if gomp_type is not None:
            return gomp_type == self.target_type
        return self.bundled and image.machine == "EM_X86_64"

    def _load_image_impl(self, dev: int, image) -> LoadedImage:
        """``load_image``; returns target entries in host order (functions
        first then variables, libgomp's table order, mapped back to the
        image's entry order).  GCC 12 allows one extra trailing entry (GCC PR 68463).
        The ``target_data`` given to the plugin (and the image bytes it points to)
        is kept by the returned LoadedImage: the plugin keys the image by that
        pointer until ``unload_image`` (libgomp 12 ``target.c``,
        ``gomp_unload_image_from_device``), after which the runtime drops it."""
        self._check_dev(dev)
        td, keep, order = self._target_data(image)
        table = POINTER(_gomp.AddrPair)()
        n = -1
        try:
            n = self._fn["load_image"](dev, self.image_version(), byref(td), byref(table),
                                       None)
        finally:
            if n < 0:                            # a partial load may point into them
                with self._lock:
                    self._keepalive.append(keep)
        if n < 0:      # int: the table's length, -1 on failure (libgomp-plugin.h)
            raise self._error(InvalidImageError, "load_image", dev, tail=f" for {image.name!r}")
        expected = len(order)
        try:
            if n not in (expected, expected + 1):
                # the image is loaded in the plugin: unload it again so nothing is
                # left behind (libgomp makes this fatal; we raise and roll back)
                self._fn["unload_image"](dev, self.image_version(), byref(td))
                raise TableMismatchError(
                    f"{self._label(dev)}: Cannot map target functions or variables "
                    f"(expected {expected}, have {n})", expected=expected, got=n,
                    function="GOMP_OFFLOAD_load_image", device=self._label(dev))
            got = {}
            for i, e in enumerate(order):
                pair = table[i]
                got[e.name] = TargetEntry(e.name, pair.start,
                                          pair.end - pair.start if e.size else 0)
        finally:
            _libc.free(_gomp.table_address(table))   # malloc'ed by the plugin (target.c)
        loaded = LoadedImage([got[e.name] for e in image.entries], keep)
        loaded.target_data = ctypes.addressof(td)  # type: ignore[attr-defined]
        return loaded

    def _unload_image_impl(self, dev: int, loaded: LoadedImage) -> None:
        self._check_dev(dev)
        ok = self._fn["unload_image"](dev, self.image_version(), loaded.target_data)
        if not ok:                               # still loaded: the plugin keeps its key
            with self._lock:
                self._keepalive.append(loaded.keepalive)
        self._check_bool(ok, "unload_image", dev)

    # data ------------------------------------------------------------------
    def _alloc_impl(self, dev: int, size: int, kind: int) -> int:
        return self._fn["alloc"](dev, size) or 0

    def _free_impl(self, dev: int, ptr: int, kind: int) -> None:
        self._check_bool(self._fn["free"](dev, ptr), "free", dev, args=f"({ptr:#x})")

    def _submit_impl(self, dev: int, tgt: int, host_addr: int, size: int) -> None:
        self._check_bool(self._fn["host2dev"](dev, tgt, host_addr, size), "host2dev", dev)

    def _retrieve_impl(self, dev: int, host_addr: int, tgt: int, size: int) -> None:
        self._check_bool(self._fn["dev2host"](dev, host_addr, tgt, size), "dev2host", dev)

    def _launch_impl(self, dev: int, entry: int, args: Sequence[int],
                     offsets: Sequence[int] | None) -> None:
        """``run(dev, fn, vars, args)``: ``vars`` is a device block holding the
        argument values (the GOMP convention: the target function receives the
        device address of its variable block); ``args`` is an empty GOMP
        target-argument vector."""
        vals = [int(a or 0) + int(o) for a, o in zip(args, offsets or [0] * len(args))]
        n = len(vals)
        block = 0
        if n:
            block = self._alloc_impl(dev, 8 * n, 0)
            if not block:
                raise PluginCallError(f"{self._label(dev)}: no device memory for the "
                                      "argument block", function="GOMP_OFFLOAD_alloc")
        try:
            if n:
                host = (ctypes.c_uint64 * n)(*[v & 0xFFFFFFFFFFFFFFFF for v in vals])
                self._submit_impl(dev, block, ctypes.addressof(host), 8 * n)
            targs = (c_void_p * 1)(None)
            self._fn["run"](dev, entry, block or None, targs)
        finally:
            if block:
                self._free_impl(dev, block, 0)
