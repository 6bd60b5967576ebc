"""The libomptarget plugin family (``__tgt_rtl_*``): LLVM 14, 16 classic and 16
nextgen plugins, driven through the prototype tables of :mod:`offload_shim.abi.tgt_rtl`
(``omptargetplugin.h`` of each release).  LLVM 17/18 plugins are recognised and
refused (ABIMismatchError): their ``load_binary`` returns ``int32_t`` with
``__tgt_device_binary`` out-parameter (LLVM 18 ``Shared/PluginAPI.h``).
"""

from __future__ import annotations

import ctypes
import os
from array import array
from ctypes import byref, c_void_p, cast
from collections.abc import Sequence

from ..abi import tgt_rtl as _tgt
from ..errors import (ABIMismatchError, DeviceInitError, InvalidImageError, LifecycleError,
                      PluginCallError, TableMismatchError)
from ..safety import leftovers
from .plugin import MAX_KERNEL_ARGS, LoadedImage, Plugin, TargetEntry, _triples

__all__ = ["LLVMPlugin"]

#: the variable LLVM's MemoryManagerTy reads, as it appears in a plugin binary
_THRESHOLD_NAME = b"LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD"
_reads: dict = {}                       # (path, size, mtime) -> bool


def _reads_threshold(path: str) -> bool:
    """True when the file at ``path`` contains the name of
    ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD`` among its bytes (what ``strings``
    shows for the plugins that run LLVM's memory manager); cached per ``(path,
    size, mtime)``."""
    import mmap                         # on the first LLVM device init only
    try:
        st = os.stat(path)
    except OSError:
        return False
    key = (path, st.st_size, st.st_mtime_ns)
    hit = _reads.get(key)
    if hit is None:
        try:
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                hit = m.find(_THRESHOLD_NAME) >= 0
        except (OSError, ValueError):
            hit = False
        _reads[key] = hit
    return hit


class LLVMPlugin(Plugin):
    """A libomptarget plugin (``__tgt_rtl_*``), LLVM 14 / 16 classic / 16
    nextgen (17/18 are recognised and refused with ABIMismatchError)."""

    abi = "llvm"
    prefix = _tgt.PREFIX
    default_alloc_kind = _tgt.TARGET_ALLOC_DEFAULT

    def __init__(self, path, lib, symbols):
        super().__init__(path, lib, symbols)
        self.generation = _tgt.classify(set(symbols)) or "unknown"
        if self.generation not in _tgt.SUPPORTED:
            raise ABIMismatchError(
                f"{path}: {self.generation} plugins are recognised but not supported "
                f"(supported: {', '.join(_tgt.SUPPORTED)})")
        protos, required = _tgt.GENERATIONS[self.generation]
        self._bind(protos, required)
        self._addr: dict[str, int] = {}         # entry point -> address (batched calls)
        # capabilities (Plugin): the x86_64 plugins write every image they load to
        # /tmp/tmpfile_XXXXXX (hard-coded; the nextgen ones never remove it: LLVM 16
        # plugins-nextgen/host/src/rtl.cpp, plugins/generic-elf-64bit/src/rtl.cpp)
        self.leaves_image_copies = not self.bundled
        self.cuda_devices = any(k in self.name for k in ("cuda", "nvptx"))
        self.device_memory_is_host = self.bundled or "x86_64" in self.name
        if self.has("data_lock") and self.has("data_unlock"):
            self.host_lock_entry_point = _tgt.PREFIX + "data_lock"
        self._own_cache: str | None | bool = False      # not looked at yet

    @property
    def own_memory_manager(self) -> str | None:
        """:attr:`Plugin.own_memory_manager`: LLVM's ``MemoryManagerTy``
        (``openmp/libomptarget/plugins/common/MemoryManager/MemoryManager.h``, LLVM
        14/16) reads ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD``; a plugin whose binary
        holds that name runs one -- the nextgen plugins (x86_64, cuda, amdgpu) per
        device, made in ``GenericDeviceTy::init`` (``"device-init"``), the classic
        cuda plugins in the ``DeviceRTLTy`` constructor when the plugin is loaded
        (``"load"``).  The classic x86_64/amdgpu plugins and the bundled plugin have
        none.  Decided from the file's bytes once (per path, size and mtime)."""
        if self._own_cache is False:
            reads = not self.bundled and _reads_threshold(self.path)
            self._own_cache = None if not reads else (
                "device-init" if self.generation.endswith("nextgen") else "load")
        return self._own_cache

    # lifecycle -------------------------------------------------------------
    def _init_plugin(self):
        fn = self._fn.get("init_plugin")
        if fn is not None:
            self._check_int32(fn(), "init_plugin")

    def _deinit_plugin(self):
        fn = self._fn.get("deinit_plugin")
        if fn is not None:
            self._check_int32(fn(), "deinit_plugin", detail=False)

    def _query_num_devices(self) -> int:
        return self._fn["number_of_devices"]()

    def _init_device(self, dev, flags):
        req = self._fn.get("init_requires")
        if req is not None:
            req(flags)                          # libomptarget: init_requires before init_device
        self._check_int32(self._fn["init_device"](dev), "init_device", dev,
                          error=DeviceInitError)

    def _deinit_device(self, dev):
        fn = self._fn.get("deinit_device")
        if fn is None:
            return                               # GCC PR 93481: optional, degrade silently
        self._check_int32(fn(dev), "deinit_device", dev, detail=False)

    # images ----------------------------------------------------------------
    def _device_image(self, image) -> tuple[_tgt.DeviceImage, list]:
        """``__tgt_device_image`` of ``image`` and what it points into (the image's
        own bytes, no copy; the entry table and its names), to keep referenced while
        the plugin may read them."""
        data = image.data
        start = image.data_address()
        n = len(image.entries)
        arr = (_tgt.OffloadEntry * max(n, 1))()
        names = []
        for i, (entry, host_addr) in enumerate(zip(image.entries, image.host_addresses())):
            nm = entry.name.encode()
            names.append(nm)
            arr[i].addr = host_addr
            arr[i].name = nm
            arr[i].size = entry.size
            arr[i].flags = entry.flags
        base = ctypes.addressof(arr)
        dimg = _tgt.DeviceImage()
        dimg.ImageStart = start
        dimg.ImageEnd = start + len(data)
        dimg.EntriesBegin = cast(base, _tgt.OffloadEntryP)
        dimg.EntriesEnd = cast(base + n * ctypes.sizeof(_tgt.OffloadEntry), _tgt.OffloadEntryP)
        return dimg, [data, arr, names, dimg]

    def is_valid_binary(self, image) -> bool:
        """``is_valid_binary`` on the image bytes (needs an initialised plugin).  The
        ``__tgt_device_image`` has the image's bytes and an empty entry table: the
        entry point judges the image (``omptargetplugin.h``: "the provided device image
        can be supported"; the LLVM 14-18 x86_64, CUDA and AMDGPU plugins and the
        bundled one read ``ImageStart``/``ImageEnd`` only)."""
        if not self._initialized:
            raise LifecycleError(f"{self.name}: is_valid_binary before init_plugin")
        if getattr(image, "gomp_target_type", None) is not None:
            return False                 # a GCC (libgomp) image: not for __tgt_rtl_*
        data = image.data                # referenced across the call
        start = image.data_address()
        dimg = _tgt.DeviceImage()
        dimg.ImageStart = start
        dimg.ImageEnd = start + len(data)
        return bool(self._fn["is_valid_binary"](byref(dimg)))

    def _load_image_impl(self, dev: int, image) -> LoadedImage:
        """``load_binary`` into device ``dev``; returns the target table in host
        entry order.  Raises InvalidImageError (NULL table) or
        TableMismatchError (GCC PR 68463).

        What the plugin was given (the image's bytes, the ``__tgt_device_image``, the
        entry table and its names) is kept by the returned LoadedImage, so it is
        released when the runtime drops that (the image's unregistration): these
        plugins have no unload entry point and keep the image loaded, but libomptarget
        16 gives them no more than that either -- after ``__tgt_unregister_lib`` the
        library is ``dlclose``-d, unmapping the image bytes and the entry table its
        ``__tgt_device_image`` points into (openmp/libomptarget/src/rtl.cpp,
        ``RTLsTy::unregisterLib``, LLVM 16), so the plugins read neither after the
        load.  After a failed load they stay referenced for the plugin's lifetime."""
        self._check_dev(dev)
        dimg, keep = self._device_image(image)
        # the LLVM x86_64 plugins leave a /tmp/tmpfile_* copy of each image: the copies
        # that appear during the load are looked at afterwards
        before = leftovers.before_load() if self.leaves_image_copies else None
        table = None
        try:
            table = self._fn["load_binary"](dev, byref(dimg))
        finally:
            if not table:                        # a partial load may point into them
                with self._lock:
                    self._keepalive.append(keep)
            if before is not None:
                leftovers.unlink_new_copies(before)
        if not table:
            raise self._error(InvalidImageError, "load_binary", dev,
                              head=f"__tgt_rtl_load_binary rejected image {image.name!r}")
        t = table.contents
        begin = cast(t.EntriesBegin, c_void_p).value or 0
        end = cast(t.EntriesEnd, c_void_p).value or 0
        esz = ctypes.sizeof(_tgt.OffloadEntry)
        count = (end - begin) // esz if end >= begin else -1
        if count != len(image.entries):
            with self._lock:
                self._keepalive.append(keep)     # loaded, never unloaded
            raise TableMismatchError(
                f"{self._label(dev)}: host and target tables mismatch for image "
                f"{image.name!r}: expected {len(image.entries)} entries, have {count}",
                expected=len(image.entries), got=count,
                function="__tgt_rtl_load_binary", device=self._label(dev))
        raw = []
        for i in range(count):
            e = _tgt.OffloadEntry.from_address(begin + i * esz)
            raw.append(TargetEntry(e.name.decode(errors="replace") if e.name else "",
                                   e.addr or 0, e.size))
        entries = _match_by_name(image.entries, raw)
        return LoadedImage(entries, keep)

    def _unload_image_impl(self, dev: int, loaded: LoadedImage) -> None:
        """LLVM <= 18 plugins have no unload entry point: the image stays in
        the plugin until ``deinit_device``; the runtime drops its mappings."""
        self._check_dev(dev)

    # data ------------------------------------------------------------------
    def _alloc_impl(self, dev: int, size: int, kind: int) -> int:
        """``data_alloc``; returns the device address or 0 (out of memory)."""
        return self._fn["data_alloc"](dev, size, None, kind) or 0

    def _free_impl(self, dev: int, ptr: int, kind: int) -> None:
        if self.generation == "llvm14":
            rc = self._fn["data_delete"](dev, ptr)
        else:
            rc = self._fn["data_delete"](dev, ptr, kind)
        self._check_int32(rc, "data_delete", dev, args=f"({ptr:#x})")

    def _submit_impl(self, dev: int, tgt: int, host_addr: int, size: int) -> None:
        self._check_int32(self._fn["data_submit"](dev, tgt, host_addr, size), "data_submit", dev)

    def _retrieve_impl(self, dev: int, host_addr: int, tgt: int, size: int) -> None:
        self._check_int32(self._fn["data_retrieve"](dev, host_addr, tgt, size),
                          "data_retrieve", dev)

    def _submit_many_impl(self, dev: int, ops) -> None:
        """:meth:`Plugin.submit_many`: the ``data_submit`` calls in one foreign call
        (:mod:`offload_shim.abi.batch`), or one by one without it."""
        self._many(dev, ops, "data_submit")

    def _retrieve_many_impl(self, dev: int, ops) -> None:
        """:meth:`Plugin.retrieve_many`: the ``data_retrieve`` calls in one foreign
        call (:mod:`offload_shim.abi.batch`), or one by one without it."""
        self._many(dev, ops, "data_retrieve")

    def _many(self, dev: int, ops, name: str) -> None:
        fn = self._fn[name]
        count = len(ops) // 3 if isinstance(ops, array) else len(ops)
        if count > 1:
            from ..abi import batch
            addr = self._addr.get(name)
            if addr is None:
                addr = self._addr[name] = batch.function_address(fn)
            res = batch.call4(addr, dev, ops)
            if res is not None:
                done, rc = res
                if done != count:
                    raise self._error(PluginCallError, name, dev, code=rc)
                return
        ok = _tgt.OFFLOAD_SUCCESS
        for a, b, size in _triples(ops):
            rc = fn(dev, a, b, size)
            if rc != ok:
                self._check_int32(rc, name, dev)

    def _lock_impl(self, dev: int, host_addr: int, size: int) -> int:
        """``data_lock`` (LLVM 16+: ``int32_t (ID, HstPtr, Size, void **LockedPtr)``,
        verified against the Debian 16.0.6 plugins): returns the locked address.
        Raises MissingEntryPointError if absent, PluginCallError when the plugin
        fails (e.g. the bundled plugin's mlock hit RLIMIT_MEMLOCK)."""
        fn = self._need("data_lock")
        locked = c_void_p()
        rc = fn(dev, host_addr, size, byref(locked))
        if rc == _tgt.OFFLOAD_SUCCESS and not locked.value:
            raise self._error(PluginCallError, "data_lock", dev, code=rc)   # success, NULL
        self._check_int32(rc, "data_lock", dev)
        return locked.value

    def _unlock_impl(self, dev: int, host_addr: int) -> None:
        """``data_unlock`` (``int32_t (ID, HstPtr)``); PluginCallError on failure."""
        self._check_int32(self._need("data_unlock")(dev, host_addr), "data_unlock", dev)

    # launch ------------------------------------------------------------------
    def _launch_impl(self, dev: int, entry: int, args: Sequence[int],
                     offsets: Sequence[int] | None) -> None:
        """Launch the kernel whose table address is ``entry`` with pointer-sized
        ``args`` (argument i = args[i] + offsets[i]); synchronous.  LLVM 14:
        ``run_target_team_region`` (1 team, 1 thread); 16: ``launch_kernel``
        with a version-2 ``KernelArgsTy`` (LLVM 16 omptarget.h KernelArgsTy)."""
        n = len(args)
        if n > MAX_KERNEL_ARGS:
            raise ValueError(f"at most {MAX_KERNEL_ARGS} kernel arguments")
        argv = (c_void_p * max(n, 1))(*[a or None for a in args])
        offs = (_tgt.c_ptrdiff_t * max(n, 1))(*(offsets or [0] * n))
        if self.generation == "llvm14":
            rc = self._fn["run_target_team_region"](dev, entry, argv, offs, n, 1, 1, 0)
            fname = "run_target_team_region"
        else:
            ka = _tgt.KernelArgs()
            ka.Version = _tgt.KERNEL_ARGS_VERSION
            ka.NumArgs = n
            ka.ArgBasePtrs = argv
            ka.ArgPtrs = argv
            ka.NumTeams[0] = 1
            ka.ThreadLimit[0] = 1
            sync = self._fn.get("synchronize") if self.generation == "llvm16-classic" else None
            if sync is None:
                rc = self._fn["launch_kernel"](dev, entry, argv, offs, byref(ka), None)
                fname = "launch_kernel"
            else:
                # LLVM 16 classic CUDA/AMDGPU take the stream from the async info and
                # crash on NULL; libomptarget passes one and synchronizes on it
                ai = (ctypes.c_char * _tgt.ASYNC_INFO_BYTES)()
                rc = self._fn["launch_kernel"](dev, entry, argv, offs, byref(ka), ai)
                fname = "launch_kernel"
                if rc == _tgt.OFFLOAD_SUCCESS:
                    rc = sync(dev, ai)
                    fname = "synchronize"
        self._check_int32(rc, fname, dev)

    def _launcher_impl(self, dev: int, entry: int, nargs: int):
        """:meth:`Plugin.launcher`: for the LLVM 16 plugins that take a NULL async
        info (nextgen; classic host plugins) the argument and offset arrays and the
        ``KernelArgsTy`` are made once, and each launch fills them and calls
        ``__tgt_rtl_launch_kernel``, as :meth:`launch` does (one team, one thread).
        The blocks are a free list: a launch takes one (``list.pop``, atomic), makes
        another when all are in use by launches of other threads, and gives it back
        after the call, so concurrent launches of one kernel neither share a block
        nor wait for each other (no lock is held across the plugin's launch).  Other
        generations use :meth:`launch`."""
        if nargs > MAX_KERNEL_ARGS:
            raise ValueError(f"at most {MAX_KERNEL_ARGS} kernel arguments")
        if self.generation == "llvm14" or (self.generation == "llvm16-classic"
                                           and self._fn.get("synchronize") is not None):
            return super()._launcher_impl(dev, entry, nargs)
        n = max(nargs, 1)

        def blocks():
            argv = (c_void_p * n)()
            offs = (_tgt.c_ptrdiff_t * n)()
            ka = _tgt.KernelArgs()
            ka.Version = _tgt.KERNEL_ARGS_VERSION
            ka.NumArgs = nargs
            ka.ArgBasePtrs = argv
            ka.ArgPtrs = argv
            ka.NumTeams[0] = 1
            ka.ThreadLimit[0] = 1
            return (argv, offs, ctypes.addressof(argv), ctypes.addressof(offs),
                    ctypes.addressof(ka), ka)
        # the same entry point through a prototype of plain addresses: the blocks are
        # fixed, so each call converts ints only
        call = _tgt.LAUNCH_BY_ADDRESS(cast(self._fn["launch_kernel"], c_void_p).value)
        free = [blocks()]
        made = [free[0]]                        # every block made, alive with the function
        ok = _tgt.OFFLOAD_SUCCESS
        check = self._check_int32

        def launch(args, offsets):
            try:
                blk = free.pop()
            except IndexError:                  # every block is in another launch
                blk = blocks()
                made.append(blk)
            try:
                if nargs:
                    blk[0][:nargs] = args
                    blk[1][:nargs] = offsets
                rc = call(dev, entry, blk[2], blk[3], blk[4], None)
            finally:
                free.append(blk)
            if rc != ok:
                check(rc, "launch_kernel", dev)
        launch.keep = (made, call)              # the blocks live as long as the function
        # what the C side's repeat path of kernel constructs calls itself
        # (native/interposer_repeat.c): the same entry point, device and kernel, and
        # this KernelArgsTy (its two argument pointers filled per launch)
        launch.raw = (cast(self._fn["launch_kernel"], c_void_p).value, dev, entry,
                      bytes(free[0][5]))
        return launch

    def _print_device_info_impl(self, dev: int) -> None:
        fn = self._fn.get("print_device_info")
        if fn is not None:
            fn(dev)

    def init_device_info(self, dev: int) -> bool:
        """``__tgt_rtl_init_device_info(dev, &info, &err)`` on an initialised device (what
        libomptarget 19.1's ``__tgt_interop_init`` asks the plugin): True when the plugin
        filled the device info, False when it failed (the LLVM 16 nextgen x86_64 plugin
        prints ``"PluginInterface" error: Failure to initialize device info ...`` and
        fails) or has no such entry point.  Raises LifecycleError when the device is not
        initialised (the nextgen plugin would dereference it), ValueError for an index
        out of range (the ready guard, :meth:`Plugin._ready`)."""
        self._ready(dev)
        fn = self._fn.get("init_device_info")
        if fn is None:
            return False
        info, err = _tgt.DeviceInfo(), ctypes.c_char_p()
        return int(fn(dev, byref(info), byref(err))) == _tgt.OFFLOAD_SUCCESS


def _match_by_name(host_entries, raw: list[TargetEntry]) -> list[TargetEntry]:
    """Target entries in host-entry order.  Tables are matched by index
    (libomptarget); LLVM 14 returns the image's own records, whose order may
    differ (LLVM 16 plugins-nextgen/host), so when the names are a permutation of the
    host names, match by name instead."""
    host_names = [e.name for e in host_entries]
    tgt_names = [e.name for e in raw]
    if tgt_names != host_names and sorted(tgt_names) == sorted(host_names) \
            and len(set(host_names)) == len(host_names):
        by = {e.name: e for e in raw}
        return [by[n] for n in host_names]
    return [TargetEntry(h.name, r.addr, r.size if r.size else h.size)
            for h, r in zip(host_entries, raw)]
