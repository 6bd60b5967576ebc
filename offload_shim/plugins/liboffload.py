"""The third plugin family: LLVM liboffload (``ol*``, ``libLLVMOffload.so``).

Since LLVM 19 the vendor plugins are linked into the runtime libraries, and
since LLVM 20 they are reachable from outside through liboffload's C API
(:mod:`offload_shim.abi.liboffload`).  :class:`LiboffloadPlugin` drives that
API behind the same :class:`~offload_shim.plugins.plugin.Plugin` interface as
the LLVM (``__tgt_rtl_*``) and GOMP (``GOMP_OFFLOAD_*``) families, so the
runtime's policy applies unchanged.  The mapping:

==========================  ===============================================
Plugin (runtime policy)     liboffload
==========================  ===============================================
``acquire`` (first user)    ``olInit`` once, then ``olIterateDevices``; the
                            compute devices become device 0..N-1, the host
                            device (``OL_DEVICE_TYPE_HOST``) is kept aside
                            as the memcpy endpoint
``release`` (last user)     ``olShutDown`` once (after every device's teardown)
device init / deinit        ``olCreateQueue`` / ``olDestroyQueue`` (liboffload
                            has no per-device init; the queue is the device's
                            resource, like libomptarget's async info)
``load_image``              ``olCreateProgram`` + ``olGetSymbol`` per host
                            entry (kernels: the symbol handle is the entry;
                            globals: ``olGetSymbolInfo`` address and size)
``unload_image``            ``olDestroyProgram``
``alloc`` / ``free``        ``olMemAlloc(DEVICE)`` / ``olMemFree``
``submit`` / ``retrieve``   ``olMemcpy`` on the device's queue with the host
                            device as the other end, then ``olSyncQueue``
``launch``                  ``olLaunchKernel`` with the packed argument buffer
                            (pointer-sized arguments), one group of one item,
                            then ``olSyncQueue``
``lock`` / ``unlock``       ``olMemRegister`` / ``olMemUnregister``
==========================  ===============================================

So the runtime's teardown order (pool drained -> images unloaded -> device
deinit -> plugin release) is, here: pool -> ``olDestroyProgram`` ->
``olDestroyQueue`` -> ``olShutDown``.  ``olInit``/``olShutDown`` are
reference counted inside liboffload too; this plugin calls each exactly once
per acquire/release cycle of the process-wide plugin object, so the library's
count is 1 while any runtime uses it and 0 after (verified: 22.1.8 can be
initialised again after the count reached 0).

Refusals before the library sees a call (22.1.8 segfaults on each, verified
in child processes, ``docs/conformance.md``): nothing but ``olMemcpy``,
``olIsValidBinary`` and the info queries is ever called with the host
device; only handles the library returned are passed back (the runtime's
state machine and pointer checks guarantee it); a call after ``olShutDown``
never reaches the library (:class:`~offload_shim.errors.LifecycleError`).

Errors: a non-NULL ``ol_result_t`` becomes
:class:`~offload_shim.errors.PluginCallError` (or the subclass the runtime
branches on: ``DeviceInitError``, ``InvalidImageError``) with ``.code`` =
the ``ol_errc_t`` value and the library's ``Details`` text in the message.
``olMemAlloc`` failing with ``OUT_OF_RESOURCES`` returns 0, the memory
manager's out-of-memory signal.
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import byref, c_bool, c_size_t, c_void_p

from ..abi import liboffload as _ol
from ..errors import (ABIMismatchError, DeviceInitError, InvalidImageError, LifecycleError,
                      PluginCallError)
from .plugin import LoadedImage, Plugin, TargetEntry

__all__ = ["LiboffloadPlugin", "OlDevice", "MAX_KERNEL_ARGS"]

#: pointer-sized kernel arguments accepted by :meth:`LiboffloadPlugin.launch`
MAX_KERNEL_ARGS = 64


class OlDevice:
    """One device as liboffload enumerates it: ``handle`` (address), ``type``
    (:class:`~offload_shim.abi.liboffload.DeviceType`), ``name``,
    ``platform`` (address), ``backend`` (platform backend name), ``index``
    (the plugin-local compute device number, None for the host device)."""

    __slots__ = ("handle", "type", "name", "platform", "backend", "index", "_ptr")

    def __init__(self, handle: int, dtype: int, name: str, platform: int, backend: str):
        self.handle = handle
        self.type = dtype
        self.name = name
        self.platform = platform
        self.backend = backend
        self.index: int | None = None
        self._ptr = ctypes.cast(c_void_p(handle), _ol.ol_device_handle_t)

    @property
    def is_host(self) -> bool:
        return self.type == _ol.DeviceType.HOST

    def __repr__(self) -> str:
        kind = _ol.DeviceType(self.type).name if self.type in iter(_ol.DeviceType) else self.type
        return f"<OlDevice {self.name!r} {kind} {self.backend} {self.handle:#x}>"


class LiboffloadPlugin(Plugin):
    """``libLLVMOffload.so`` (or the bundled host plugin's ``ol*`` view)
    seen as a plugin.  ``abi`` is ``"liboffload"``; ``generation`` is
    ``"liboffload22"`` or ``"liboffload21"`` (:func:`offload_shim.abi.liboffload.classify`).
    Raises ABIMismatchError for a liboffload without ``olInit``/``olIterateDevices``
    (LLVM 20), NotAPluginError when required entry points are missing."""

    abi = "liboffload"
    prefix = ""
    default_alloc_kind = _ol.AllocType.DEVICE

    def __init__(self, path, lib, symbols):
        super().__init__(path, lib, symbols)
        self.generation = _ol.classify(symbols) or "unknown"
        if self.generation not in _ol.SUPPORTED:
            raise ABIMismatchError(
                f"{path}: a {self.generation} library (liboffload without olInit/"
                f"olIterateDevices, LLVM 20) is recognised but not supported "
                f"(supported: {', '.join(_ol.SUPPORTED)})")
        self._bind(_ol.prototypes(self.generation),
                   _ol.REQUIRED + _ol.GENERATIONS[self.generation])
        self._all: list[OlDevice] = []          # as enumerated (host device included)
        self._compute: list[OlDevice] = []
        self._host: OlDevice | None = None
        self._queues: dict[int, object] = {}
        self._queue_lock = threading.Lock()
        if self.has("olMemRegister") and self.has("olMemUnregister"):
            self.host_lock_entry_point = "olMemRegister"
        # the bundled plugin's ol* view allocates with malloc (native/host_plugin_ol.c);
        # a real liboffload's devices are taken as GPU memory (its x86_64 platform is
        # not told apart here: False only costs a copy)
        self.device_memory_is_host = self.bundled

    # -- the one error checker of this return convention ------------------------------
    def _check(self, res, function: str, dev: int | None = None, exc=PluginCallError,
               what: str = "") -> None:
        """Raise ``exc`` for a non-NULL ``ol_result_t`` (``.code`` = ``ol_errc_t``,
        ``.function`` = the entry point; ``what`` is added to the message)."""
        if not res:
            return
        err = res.contents
        code = int(err.Code)
        details = err.Details.decode(errors="replace") if err.Details else ""
        raise exc(f"{self._label(dev)}: {function}{what} failed: "
                  f"{_ol.errc_name(code, self.generation)} ({code}): {details}",
                  code=code, function=function,
                  device=None if dev is None else self._label(dev))

    # -- enumeration -------------------------------------------------------------------
    def _info_bytes(self, fn: str, handle, prop: int, dev=None) -> bytes:
        size = c_size_t()
        self._check(self._fn[fn + "Size"](handle, prop, byref(size)), fn + "Size", dev)
        buf = ctypes.create_string_buffer(max(size.value, 1))
        self._check(self._fn[fn](handle, prop, size.value, buf), fn, dev)
        return buf.raw[:size.value]

    def _device_str(self, ptr, prop) -> str:
        return self._info_bytes("olGetDeviceInfo", ptr, prop).split(b"\0", 1)[0].decode(
            errors="replace")

    def _enumerate(self) -> None:
        found: list[int] = []

        def cb(handle, _user):
            found.append(ctypes.cast(handle, c_void_p).value or 0)
            return True

        callback = _ol.ol_device_iterate_cb_t(cb)
        self._check(self._fn["olIterateDevices"](callback, None), "olIterateDevices")
        devices = []
        for h in found:
            ptr = ctypes.cast(c_void_p(h), _ol.ol_device_handle_t)
            dtype = int.from_bytes(self._info_bytes("olGetDeviceInfo", ptr, _ol.DeviceInfo.TYPE)[:4],
                                   "little")
            name = self._device_str(ptr, _ol.DeviceInfo.NAME)
            plat = int.from_bytes(self._info_bytes("olGetDeviceInfo", ptr,
                                                   _ol.DeviceInfo.PLATFORM)[:8], "little")
            backend = "?"
            try:
                pptr = ctypes.cast(c_void_p(plat), _ol.ol_platform_handle_t)
                b = int.from_bytes(self._info_bytes("olGetPlatformInfo", pptr,
                                                    _ol.PlatformInfo.BACKEND)[:4], "little")
                backend = _ol.PlatformBackend(b).name if b in iter(_ol.PlatformBackend) else str(b)
            except PluginCallError:
                pass
            devices.append(OlDevice(h, dtype, name, plat, backend))
        hosts = [d for d in devices if d.is_host]
        compute = [d for d in devices if not d.is_host]
        for i, d in enumerate(compute):
            d.index = i
        self._all, self._compute = devices, compute
        self._host = hosts[0] if hosts else None

    # -- plugin lifecycle ---------------------------------------------------------------
    def _init_plugin(self) -> None:
        self._check(self._fn["olInit"](), "olInit")
        try:
            self._enumerate()
        except BaseException:
            self._fn["olShutDown"]()               # keep liboffload's count right
            self._all, self._compute, self._host = [], [], None
            raise

    def _deinit_plugin(self) -> None:
        self._all, self._compute, self._host = [], [], None
        self._queues.clear()
        self._check(self._fn["olShutDown"](), "olShutDown")

    def _query_num_devices(self) -> int:
        return len(self._compute)

    def _dev(self, dev: int) -> OlDevice:
        """The compute device ``dev`` (never the host device)."""
        if not self._initialized:
            raise LifecycleError(f"{self.name}: liboffload is not initialised (olInit has not "
                                 "run, or olShutDown has)", device=self._label(dev))
        if not isinstance(dev, int) or not 0 <= dev < len(self._compute):
            raise ValueError(f"{self.name}: device {dev!r} out of range "
                             f"0..{len(self._compute) - 1}")
        d = self._compute[dev]
        if d.is_host:                                # enumeration keeps it out; be sure
            raise LifecycleError(f"{self._label(dev)}: the host device is a memcpy endpoint "
                                 "only (liboffload 22 segfaults on other calls)",
                                 device=self._label(dev))
        return d

    def _host_ptr(self):
        if self._host is None:
            raise PluginCallError(f"{self.name}: liboffload enumerated no host device "
                                  "(OL_DEVICE_TYPE_HOST), the host end of every copy",
                                  function="olIterateDevices")
        return self._host._ptr

    def _queue(self, dev: int):
        q = self._queues.get(dev)
        if q is None:
            raise LifecycleError(f"{self._label(dev)}: device not initialised (no queue)",
                                 device=self._label(dev))
        return q

    def _init_device(self, dev: int, flags: int) -> None:
        d = self._dev(dev)
        q = _ol.ol_queue_handle_t()
        self._check(self._fn["olCreateQueue"](d._ptr, byref(q)), "olCreateQueue", dev,
                    exc=DeviceInitError)
        self._queues[dev] = q

    def _deinit_device(self, dev: int) -> None:
        q = self._queues.pop(dev, None)
        if q is not None:
            self._check(self._fn["olDestroyQueue"](q), "olDestroyQueue", dev)

    def _check_dev(self, dev: int) -> None:
        self._dev(dev)

    # -- description ---------------------------------------------------------------------
    def devices_info(self) -> list[dict]:
        """Every device liboffload enumerates (the host device included), in its
        order: ``{"index" (compute device number, None for the host device),
        "type", "name", "backend", "platform" (name), "vendor", "driver"}``.
        Needs an acquired plugin (LifecycleError otherwise); properties a
        release does not provide are left out."""
        if not self._initialized:
            raise LifecycleError(f"{self.name}: devices_info needs olInit (acquire the plugin)")
        out = []
        for d in self._all:
            rec = {"index": d.index,
                   "type": _ol.DeviceType(d.type).name if d.type in iter(_ol.DeviceType)
                   else str(d.type), "name": d.name, "backend": d.backend}
            try:
                pptr = ctypes.cast(c_void_p(d.platform), _ol.ol_platform_handle_t)
                rec["platform"] = self._info_bytes("olGetPlatformInfo", pptr,
                                                   _ol.PlatformInfo.NAME).split(b"\0", 1)[0].decode(
                    errors="replace")
            except PluginCallError:
                pass
            if self.generation == "liboffload22":
                for key, prop in (("vendor", _ol.DeviceInfo.VENDOR),
                                  ("driver", _ol.DeviceInfo.DRIVER_VERSION)):
                    try:
                        rec[key] = self._device_str(d._ptr, prop)
                    except PluginCallError:
                        pass
                if not d.is_host:
                    try:
                        raw = self._info_bytes("olGetDeviceInfo", d._ptr,
                                               _ol.DeviceInfo.GLOBAL_MEM_SIZE)
                        rec["global_mem_size"] = int.from_bytes(raw[:8], "little")
                    except PluginCallError:
                        pass
            out.append(rec)
        return out

    def platforms_info(self) -> list[dict]:
        """The platforms of the enumerated devices, in first-seen order:
        ``{"name", "vendor", "version", "backend", "devices"}`` (``devices``:
        how many of the enumerated devices, the host device included, are on
        it).  Needs an acquired plugin (LifecycleError otherwise)."""
        if not self._initialized:
            raise LifecycleError(f"{self.name}: platforms_info needs olInit (acquire the plugin)")
        out: dict[int, dict] = {}
        for d in self._all:
            rec = out.get(d.platform)
            if rec is None:
                rec = out[d.platform] = {"backend": d.backend, "devices": 0}
                pptr = ctypes.cast(c_void_p(d.platform), _ol.ol_platform_handle_t)
                for key, prop in (("name", _ol.PlatformInfo.NAME),
                                  ("vendor", _ol.PlatformInfo.VENDOR_NAME),
                                  ("version", _ol.PlatformInfo.VERSION)):
                    try:
                        rec[key] = self._info_bytes("olGetPlatformInfo", pptr, prop).split(
                            b"\0", 1)[0].decode(errors="replace")
                    except PluginCallError:
                        pass
            rec["devices"] += 1
        return list(out.values())

    def info(self) -> dict:
        d = super().info()
        d.update(ol_version=".".join(map(str, _ol.OL_VERSION)), header=_ol.HEADER)
        return d

    # -- images --------------------------------------------------------------------------
    def is_valid_binary(self, image) -> bool:
        """``olIsValidBinary`` against each compute device (the plugin accepts
        the image when one of them does); False without compute devices or
        for a GCC (libgomp) image.  Needs an acquired plugin."""
        if not self._initialized:
            raise LifecycleError(f"{self.name}: is_valid_binary before olInit")
        if getattr(image, "gomp_target_type", None) is not None:
            return False
        if not self._compute:
            return False
        fn = self._fn.get("olIsValidBinary")
        if fn is None:
            return True                             # optional: the load decides
        data = image.data
        for d in self._compute:
            valid = c_bool(False)
            self._check(fn(d._ptr, image.data_address(), len(data), byref(valid)),
                        "olIsValidBinary", d.index)
            if valid.value:
                return True
        return False

    def _load_image_impl(self, dev: int, image) -> LoadedImage:
        """``olCreateProgram`` on compute device ``dev`` and ``olGetSymbol`` for
        every host entry: kernels map to their symbol handle, globals to the
        device address from ``olGetSymbolInfo`` (its size must cover the host
        entry's).  Raises InvalidImageError (``.code`` = ``ol_errc_t``;
        ``NOT_FOUND`` for a missing symbol), the program destroyed again."""
        d = self._dev(dev)
        data = image.data                           # referenced across the call
        prog = _ol.ol_program_handle_t()
        self._check(self._fn["olCreateProgram"](d._ptr, image.data_address(), len(data),
                                                byref(prog)),
                    "olCreateProgram", dev, exc=InvalidImageError)
        try:
            entries = [self._entry(dev, prog, e) for e in image.entries]
        except BaseException:
            self._fn["olDestroyProgram"](prog)
            raise
        loaded = LoadedImage(entries, [prog])
        loaded.program = prog                        # type: ignore[attr-defined]
        return loaded

    def _entry(self, dev: int, prog, e) -> TargetEntry:
        name = e.name.encode()
        if self.generation == "liboffload21":
            if e.size:
                raise InvalidImageError(
                    f"{self._label(dev)}: global {e.name!r}: this liboffload ({self.generation}: "
                    "olGetKernel, no olGetSymbol) cannot look up global variables",
                    function="olGetKernel", device=self._label(dev))
            k = _ol.ol_kernel_handle_t()
            self._check(self._fn["olGetKernel"](prog, name, byref(k)), "olGetKernel", dev,
                        exc=InvalidImageError, what=f"({e.name!r})")
            return TargetEntry(e.name, ctypes.cast(k, c_void_p).value or 0, 0)
        sym = _ol.ol_symbol_handle_t()
        kind = _ol.SymbolKind.GLOBAL_VARIABLE if e.size else _ol.SymbolKind.KERNEL
        self._check(self._fn["olGetSymbol"](prog, name, kind, byref(sym)),
                    "olGetSymbol", dev, exc=InvalidImageError, what=f"({e.name!r})")
        if not e.size:
            return TargetEntry(e.name, ctypes.cast(sym, c_void_p).value or 0, 0)
        addr = c_void_p()
        self._check(self._fn["olGetSymbolInfo"](sym, _ol.SymbolInfo.GLOBAL_VARIABLE_ADDRESS,
                                                ctypes.sizeof(addr), byref(addr)),
                    "olGetSymbolInfo", dev, exc=InvalidImageError)
        size = c_size_t()
        self._check(self._fn["olGetSymbolInfo"](sym, _ol.SymbolInfo.GLOBAL_VARIABLE_SIZE,
                                                ctypes.sizeof(size), byref(size)),
                    "olGetSymbolInfo", dev, exc=InvalidImageError)
        if size.value < e.size:
            raise InvalidImageError(
                f"{self._label(dev)}: global {e.name!r} has {size.value} bytes on the device, "
                f"the host entry {e.size}", function="olGetSymbolInfo", device=self._label(dev))
        return TargetEntry(e.name, addr.value or 0, e.size)

    def _unload_image_impl(self, dev: int, loaded: LoadedImage) -> None:
        """``olDestroyProgram``; its symbols become invalid."""
        self._dev(dev)
        prog = getattr(loaded, "program", None)
        if prog is None:
            return
        loaded.program = None                        # type: ignore[attr-defined]
        self._check(self._fn["olDestroyProgram"](prog), "olDestroyProgram", dev)

    # -- data ------------------------------------------------------------------------------
    def _alloc_impl(self, dev: int, size: int, kind: int) -> int:
        """``olMemAlloc(DEVICE)``; the address, or 0 when liboffload reports
        ``OUT_OF_RESOURCES`` (other errors raise PluginCallError).  ``kind``
        is an ``ol_alloc_type_t``."""
        d = self._dev(dev)
        out = c_void_p()
        res = self._fn["olMemAlloc"](d._ptr, int(kind), size, byref(out))
        if res and res.contents.Code == _ol.Errc.OUT_OF_RESOURCES \
                and self.generation == "liboffload22":
            return 0
        self._check(res, "olMemAlloc", dev)
        return out.value or 0

    def _free_impl(self, dev: int, ptr: int, kind: int) -> None:
        """``olMemFree(ptr)`` (22: the address only)."""
        self._dev(dev)
        self._check(self._fn["olMemFree"](ptr), "olMemFree", dev)

    def _copy(self, dev: int, dst: int, dst_dev, src: int, src_dev, size: int) -> None:
        q = self._queue(dev)
        self._check(self._fn["olMemcpy"](q, dst, dst_dev, src, src_dev, size), "olMemcpy", dev)
        self._check(self._fn["olSyncQueue"](q), "olSyncQueue", dev)

    def _submit_impl(self, dev: int, tgt: int, host_addr: int, size: int) -> None:
        """Host -> device: ``olMemcpy(queue, tgt, dev, host, host device, size)``
        then ``olSyncQueue``."""
        d = self._dev(dev)
        self._copy(dev, tgt, d._ptr, host_addr, self._host_ptr(), size)

    def _retrieve_impl(self, dev: int, host_addr: int, tgt: int, size: int) -> None:
        """Device -> host: ``olMemcpy(queue, host, host device, tgt, dev, size)``
        then ``olSyncQueue``."""
        d = self._dev(dev)
        self._copy(dev, host_addr, self._host_ptr(), tgt, d._ptr, size)

    def _lock_impl(self, dev: int, host_addr: int, size: int) -> int:
        """``olMemRegister(dev, ptr, size, 0, &pinned)``: the pinned pointer to
        use for transfers.  MissingEntryPointError when not exported,
        PluginCallError on failure."""
        d = self._dev(dev)
        fn = self._need("olMemRegister")
        out = c_void_p()
        self._check(fn(d._ptr, host_addr, size, 0, byref(out)), "olMemRegister", dev)
        if not out.value:
            raise PluginCallError(f"{self._label(dev)}: olMemRegister returned no pinned pointer",
                                  function="olMemRegister", device=self._label(dev))
        return out.value

    def _unlock_impl(self, dev: int, host_addr: int) -> None:
        """``olMemUnregister(dev, ptr)``."""
        d = self._dev(dev)
        self._check(self._need("olMemUnregister")(d._ptr, host_addr), "olMemUnregister", dev)

    # -- launch ------------------------------------------------------------------------------
    def _launch_impl(self, dev: int, entry: int, args, offsets) -> None:
        """``olLaunchKernel`` of the kernel whose symbol handle is ``entry``
        (from :meth:`load_image`) with pointer-sized ``args`` (argument i =
        args[i] + offsets[i]) packed into the argument buffer (8 bytes each),
        one group of one work item, on the device's queue, then
        ``olSyncQueue``.  Raises ValueError (more than 64 arguments),
        PluginCallError."""
        d = self._dev(dev)
        n = len(args)
        if n > MAX_KERNEL_ARGS:
            raise ValueError(f"at most {MAX_KERNEL_ARGS} kernel arguments")
        vals = [int(a or 0) + int(o) for a, o in zip(args, offsets or [0] * n)]
        buf = _ol.pack_arguments(vals)
        ls = _ol.launch_size()
        q = self._queue(dev)
        handle_t = _ol.ol_kernel_handle_t if self.generation == "liboffload21" \
            else _ol.ol_symbol_handle_t
        kernel = ctypes.cast(c_void_p(entry), handle_t)
        self._check(self._fn["olLaunchKernel"](q, d._ptr, kernel, buf if n else None,
                                               8 * n, byref(ls)), "olLaunchKernel", dev)
        self._check(self._fn["olSyncQueue"](q), "olSyncQueue", dev)

    @property
    def host_device(self) -> OlDevice | None:
        """The host device (memcpy endpoint), while the plugin is acquired."""
        return self._host

    @property
    def compute_devices(self) -> list[OlDevice]:
        """The devices the runtime sees (0..N-1), while the plugin is acquired."""
        return list(self._compute)
