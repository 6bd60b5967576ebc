"""The GCC side: libgomp's offload registration, constructs and device API.

Mirrors GCC 12 libgomp ``target.c``: ``GOMP_offload_register_ver`` /
``GOMP_offload_unregister_ver`` (the host table ``{func_begin, func_end, var_begin,
var_end}`` and mkoffload's target data), ``resolve_device``, ``gomp_target_fallback`` /
``gomp_target_data_fallback`` and the ``target data`` stack of the task's ICVs
(``icv->target_data``) for ``GOMP_target_ext``, ``GOMP_target_data_ext``,
``GOMP_target_end_data``, ``GOMP_target_update_ext``, ``GOMP_target_enter_exit_data``.
The ``omp_target_*`` / ``omp_get_*_device*`` routines of the host device are
:mod:`.api`'s (mixed into :class:`GompSide`), what a construct does to the device's table
:mod:`.mapping`'s.  The C side is native/interposer_gomp.c (ctypes in
:mod:`offload_shim.abi.gomp_interposer`).

Two modes (:class:`GompSide`):

* **libgomp** (default): the program's libgomp does everything as it would alone (the C
  side calls the real entry points with the program's own arguments, so its messages,
  ``OMP_TARGET_OFFLOAD`` rules and devices are libgomp's); Python records each
  registration, unregistration and construct, and why each construct ran on the host
  (``resolve_device`` of GCC 12 over libgomp's own device count).
* **host device** (``offload-shim run --gomp-host-device``): one device,
  :class:`~offload_shim.interposer.gomp.device.GompHostDevice`, with separate memory and
  libgomp 12's mapping; GCC's API routines are answered here, so the program, libgomp's
  entry points and Python see one device list: device 0 is the host device, the initial
  device is 1 (0 devices under ``OMP_TARGET_OFFLOAD=disabled``).
"""

from __future__ import annotations

import os
import sys
import threading

from ...abi import gomp_interposer as _gabi
from ...abi import interposer as _abi
from ...core.images import HostEntry, OffloadImage
from ...errors import InvalidImageError, OffloadError
from .api import GompApi
from .fatal import GompFatal, fmt_p
from .kinds import GOMP_DEVICE_HOST_FALLBACK, GOMP_DEVICE_ICV, GOMP_TARGET_FLAG_EXIT_DATA
from .memmap import GOMP_MAP_VARS_DATA

# libgomp (GCC 12 target.c)
GOMP_CONSTRUCTS = ("target", "target_data", "target_end_data", "target_update",
                   "target_enter_exit_data")
#: outcomes of a construct in :attr:`GompSide.regions`
OUTCOMES = ("host-device", "host-fallback", "libgomp-device", "fatal")
MAX_RECORDS = 10_000


class GompImage(OffloadImage):
    """A GCC library's offload image as ``GOMP_offload_register_ver`` hands it over
    (the inputs of libgomp target.c ``gomp_load_image_to_device``).  ``gomp_version``
    (packed, GCC 12 libgomp-plugin.h GOMP_VERSION), ``gomp_target_type`` (``enum
    offload_target_type``: 5 = nvptx, 8 = gcn), ``gomp_target_data`` (address of
    mkoffload's target data, what ``GOMP_OFFLOAD_load_image`` takes), ``host_table``;
    entries: the functions then the variables of the host table, in
    libgomp's table order, named from the nvptx target data when it decodes
    (``device_data``: :func:`~offload_shim.elf.imageinfo.parse_nvptx_target_data`'s
    dict), else ``func<i>`` / ``var<j>``; host addresses: the library's real ones.
    ``data``: the PTX texts, NUL-separated (nvptx), else empty; ``machine`` is the
    target name.  Valid while the library stays loaded."""

    def __init__(self, data, entries, *, name, host_addresses, version, target_type,
                 target_data, host_table, device_data=None):
        from ...elf.imageinfo import GOMP_TARGET_TYPES
        super().__init__(data, entries, name=name, host_addresses=host_addresses,
                         machine=GOMP_TARGET_TYPES.get(target_type, f"gomp-{target_type}"))
        self.gomp_version = version
        self.gomp_target_type = target_type
        self.gomp_target_data = target_data
        self.host_table = host_table
        self.device_data = device_data

    @classmethod
    def from_registration(cls, version, host_table, target_type, target_data, funcs,
                          vars_) -> "GompImage":
        """Build from the arguments of ``GOMP_offload_register_ver`` and the decoded
        host table.  Raises ValueError (NULL host addresses, duplicate names)."""
        from ...elf.imageinfo import parse_nvptx_target_data
        dd = None
        data = b""
        fnames = [f"func{i}" for i in range(len(funcs))]
        vnames = [f"var{j}" for j in range(len(vars_))]
        if target_type == 5 and target_data:
            try:
                dd = parse_nvptx_target_data(_abi.read_bytes, target_data,
                                             cstring=lambda a: _abi.read_cstring(a).decode(
                                                 errors="replace"))
            except InvalidImageError:
                dd = None
            if dd is not None:
                data = b"\0".join(_abi.read_bytes(o["addr"], o["size"]).rstrip(b"\0")
                                  for o in dd["ptx_objs"])
                if len(dd["fn_names"]) == len(funcs):
                    fnames = list(dd["fn_names"])
                if len(dd["var_names"]) == len(vars_):
                    vnames = list(dd["var_names"])
        entries = [HostEntry(n, 0) for n in fnames]
        entries += [HostEntry(n, size & ~(1 << 63), 1 if size >> 63 else 0)
                    for n, (_a, size) in zip(vnames, vars_)]
        addrs = list(funcs) + [a for a, _s in vars_]
        return cls(data, entries, name=f"gomp@{target_data:#x}", host_addresses=addrs,
                   version=version, target_type=target_type, target_data=target_data,
                   host_table=host_table, device_data=dd)


def parse_target_offload(raw: str | None) -> str:
    """libgomp's ``OMP_TARGET_OFFLOAD`` (GCC 12 env.c ``parse_target_offload``): blanks
    around, case-insensitive ``default`` / ``mandatory`` / ``disabled``; anything else
    keeps the default."""
    if raw is None:
        return "default"
    v = raw.strip().lower()
    return v if v in ("default", "mandatory", "disabled") else "default"


class GompSide(GompApi):
    """libgomp's host side over a :class:`~offload_shim.Runtime`.

    ``host_device``: serve GCC code with a
    :class:`~offload_shim.interposer.gomp.device.GompHostDevice` (else libgomp mode, see
    the module docstring).  ``policy``: an ``OMP_TARGET_OFFLOAD`` override for the host
    device (libgomp mode follows libgomp, which reads the environment).  Messages of
    failures go to ``errors``, images no plugin takes to ``unsupported`` (both lists
    shared with the interposer).  Records: ``gomp_registrations`` (``version``,
    ``host_table``, ``target_type``, ``target_data``, ``funcs``, ``vars``,
    ``device_data``, ``image`` per image registered and not unregistered),
    ``registrations`` / ``unregistrations`` (counts of calls), ``gomp_constructs``
    (per construct name), ``outcomes`` (per :data:`OUTCOMES`), ``regions`` (one dict per
    construct: ``construct``, ``device``, ``outcome``, ``reason``, ``fn``; at most
    :data:`MAX_RECORDS`), ``api_calls`` (per routine, host-device mode).  Thread safety:
    ``lock``."""

    def __init__(self, runtime, lock, *, errors: list, unsupported: list,
                 policy: str | None = None, host_device: bool = False):
        self.runtime = runtime
        self._lock = lock
        self._policy_override = policy
        self.errors = errors
        self.unsupported = unsupported
        self.host_device_enabled = bool(host_device)
        self.host_device = None
        self.gomp_registrations: list[dict] = []
        self.registrations = 0
        self.unregistrations = 0
        self.late_unregistrations = 0
        self.gomp_constructs: dict[str, int] = {k: 0 for k in GOMP_CONSTRUCTS}
        self.outcomes: dict[str, int] = {k: 0 for k in OUTCOMES}
        self.regions: list[dict] = []
        self.dropped_regions = 0
        self.api_calls: dict[str, int] = {}
        self._data_stacks: dict[int, list] = {}
        self._libgomp_devices: int | None = None
        self._table = None
        self._lib = None
        #: the installed table's Python callbacks, by field name (:meth:`install`)
        self.handlers: dict = {}
        if self.host_device_enabled:
            from .device import GompHostDevice
            self.host_device = GompHostDevice()

    @property
    def gomp_fallbacks(self) -> int:
        """Constructs that ran on the host (libgomp's fallback)."""
        return self.outcomes["host-fallback"]

    # -- the C table ---------------------------------------------------------------------
    def callbacks(self) -> dict:
        """The table's Python callbacks, by field name
        (:data:`offload_shim.abi.gomp_interposer.CALLBACK_FIELDS`), each
        :func:`~offload_shim.interposer.bridge.guard`-ed."""
        from ..bridge import guard
        return {
            "reg": guard(self.on_register, self._plain_error),
            "decide": guard(self.on_decide, self._plain_error, fail=_gabi.PASSTHROUGH),
            "map": guard(self.on_map, self._fatal_error, fail=_gabi.FATAL),
            "unmap": guard(self.on_unmap, self._fatal_error, fail=_gabi.FATAL),
            "api": guard(self.on_api, self._fatal_error, fail=_gabi.FATAL),
        }

    def install(self, lib, *, replay: bool = True) -> None:
        """Install the callback table in the interposer ``lib`` and, unless ``replay`` is
        false, replay the registrations it recorded before (each once: one the table
        already delivered is not registered again).  Raises OffloadError on a size
        mismatch."""
        handlers = self.callbacks()
        table = _gabi.make_callbacks(handlers, host_device=self.host_device_enabled)
        if _gabi.set_callbacks(lib, table) != 0:
            raise OffloadError("osh_gomp_set_callbacks rejected the table (struct size "
                               "mismatch: rebuild the native library)")
        self._table, self._lib, self.handlers = table, lib, handlers
        if replay:
            self.replay(lib)

    def replay(self, lib) -> None:
        """Register those of the registrations the interposer ``lib`` recorded (its
        ``osh_gomp_registered``) that this side does not know yet: the ones that came
        before a table was installed; one a table delivered is not registered again."""
        for version, host_table, ttype, tdata in _gabi.registered(lib):
            with self._lock:
                known = any(r["host_table"] == host_table and r["target_data"] == tdata
                            for r in self.gomp_registrations)
            if not known:
                self.on_register(0, version, host_table, ttype, tdata)

    def uninstall(self, close_device: bool = True) -> None:
        """Remove the table (the C side then calls libgomp directly) and, unless
        ``close_device`` is false, close the host device (its mappings and the images'
        variables are freed).  Idempotent."""
        if self._lib is not None:
            _gabi.set_callbacks(self._lib, None)
            self._lib = None
        if close_device and self.host_device is not None and not self.host_device.closed:
            with self._lock:
                self.host_device.close()

    def _plain_error(self, msg: str) -> None:
        self.errors.append(msg)

    def _fatal_error(self, msg: str) -> int:
        self.errors.append(msg)
        return self._fatal(f"offload_shim: {msg}")

    @staticmethod
    def _fatal(message: str) -> int:
        """libgomp ``gomp_fatal`` (GCC 12 error.c ``gomp_verror``): ``"\\nlibgomp: "``,
        the message, ``"\\n"`` on stderr; the C side exits with status 1."""
        sys.stdout.flush()
        sys.stderr.write(f"\nlibgomp: {message}\n")
        sys.stderr.flush()
        return _gabi.FATAL

    # -- registration ------------------------------------------------------------------
    def on_register(self, unregister: int, version: int, host_table: int,
                    target_type: int, target_data: int) -> int:
        """``GOMP_offload_register_ver`` / ``_unregister_ver`` (GCC 12 libgomp
        target.c): read the real host table (``{func_begin, func_end, var_begin,
        var_end}``: host function addresses, ``(address, size)`` variable pairs, top size bit =
        ``declare target link``), decode mkoffload's ``target_data`` (nvptx: PTX objects,
        function and variable names, GCC 12 mkoffload), record both in
        :attr:`gomp_registrations` and register a :class:`GompImage` with the runtime
        (pending for the plugins of that target type; :attr:`unsupported` when none
        takes it); an initialised host device loads it at once
        (``gomp_load_image_to_device``).  Unregistration (the destructor: ``dlclose``,
        exit) unloads and unregisters it again."""
        with self._lock:
            if unregister:
                self.unregistrations += 1
                keep = []
                for r in self.gomp_registrations:
                    if r["target_data"] != target_data or r["host_table"] != host_table:
                        keep.append(r)
                        continue
                    if self.host_device is not None and not self.host_device.closed:
                        try:
                            self.host_device.unload_image(r)
                        except GompFatal as exc:
                            self.errors.append(f"unload {fmt_p(host_table)}: {exc.message}")
                    img = r.get("image")
                    if img is not None and img in self.runtime.images:
                        try:
                            self.runtime.unregister_image(img)
                        except OffloadError as exc:
                            self.errors.append(f"unregister {img.name}: {exc}")
                self.gomp_registrations = keep
                return _gabi.OK
            self.registrations += 1
            fb, fe, vb, ve = _abi.read_pointers(host_table, 4)
            funcs = _abi.read_pointers(fb, (fe - fb) // 8) if fe > fb else []
            raw = _abi.read_pointers(vb, (ve - vb) // 8) if ve > vb else []
            vars_ = list(zip(raw[0::2], raw[1::2]))
            rec = {"version": int(version), "host_table": host_table,
                   "target_type": int(target_type), "target_data": target_data,
                   "funcs": funcs, "vars": vars_,
                   "device_data": None, "image": None, "name": f"gomp@{target_data:#x}"}
            self.gomp_registrations.append(rec)
            if self.host_device is not None and self.host_device.initialized:
                try:
                    self.host_device.load_image(rec)
                except GompFatal as exc:
                    return self._fatal(exc.message)
            try:
                img = GompImage.from_registration(int(version), host_table, int(target_type),
                                                  target_data, funcs, vars_)
            except (InvalidImageError, ValueError) as exc:
                self.unsupported.append((target_data, f"GOMP image: {exc}"))
                return _gabi.OK
            rec["device_data"] = img.device_data
            try:
                self.runtime.register_image(img)
            except InvalidImageError as exc:
                self.unsupported.append((target_data, f"{img.name}: {exc}"))
                return _gabi.OK
            rec["image"] = img
            return _gabi.OK

    def on_late_unregister(self, host_table: int, target_data: int) -> None:
        """An unregistration after the interposer was closed (the executable's
        destructor runs after the exit handlers): counted and its record dropped; the
        devices are closed already, so nothing is left to unload."""
        with self._lock:
            self.unregistrations += 1
            self.late_unregistrations += 1
            self.gomp_registrations = [r for r in self.gomp_registrations
                                       if (r["host_table"], r["target_data"])
                                       != (host_table, target_data)]

    # -- devices and policy --------------------------------------------------------------
    def policy(self) -> str:
        """``disabled`` / ``default`` / ``mandatory`` as libgomp reads
        ``OMP_TARGET_OFFLOAD``; in host-device mode the override, when given, wins."""
        if self.host_device_enabled and self._policy_override is not None:
            return self._policy_override.lower()
        return parse_target_offload(os.environ.get("OMP_TARGET_OFFLOAD"))

    def libgomp_num_devices(self) -> int:
        """libgomp's own ``omp_get_num_devices()`` (asked once; 0 without libgomp)."""
        if self._libgomp_devices is None:
            try:
                self._libgomp_devices = _gabi.real_libgomp().num_devices()
            except (OSError, AttributeError):
                self._libgomp_devices = 0
        return self._libgomp_devices

    def num_devices(self) -> int:
        """The program's ``omp_get_num_devices()``: the host device (1; 0 under
        ``OMP_TARGET_OFFLOAD=disabled``, where libgomp 12 loads no plugin) or libgomp's
        own count."""
        if self.host_device is not None:
            return 0 if self.policy() == "disabled" else 1
        return self.libgomp_num_devices()

    def devices(self) -> list:
        """The OpenMP devices 0..n-1 GCC code sees: ``[host device]`` in host-device
        mode, else one label per libgomp device (``"libgomp:<i>"``)."""
        n = self.num_devices()
        if self.host_device is not None:
            return [self.host_device][:n]
        return [f"libgomp:{i}" for i in range(n)]

    def default_device(self) -> int:
        """The calling task's ``default-device-var`` (libgomp's
        ``omp_get_default_device()``), else ``OMP_DEFAULT_DEVICE``."""
        try:
            return _gabi.real_libgomp().default_device()
        except (OSError, AttributeError):
            return int(os.environ.get("OMP_DEFAULT_DEVICE", "0") or 0)

    # -- constructs ------------------------------------------------------------------------
    def _record(self, kind: int, device: int, fn: int, outcome: str, reason: str) -> None:
        self.outcomes[outcome] += 1
        if len(self.regions) < MAX_RECORDS:
            self.regions.append({"construct": GOMP_CONSTRUCTS[kind], "device": int(device),
                                 "fn": fmt_p(fn) if fn else None, "outcome": outcome,
                                 "reason": reason})
        else:
            self.dropped_regions += 1

    def _stack(self) -> list:
        """The calling thread's ``target data`` stack (libgomp keeps it in the task's
        ICVs; tied tasks never change threads)."""
        return self._data_stacks.setdefault(threading.get_ident(), [])

    def _fallback_reason(self, kind: int, device: int, dev: int, n: int, policy: str) -> str:
        asked = "default-device-var " if device == GOMP_DEVICE_ICV else ""
        if dev == GOMP_DEVICE_HOST_FALLBACK:
            return "host fallback requested (if(false) or device(-2))"
        if policy == "disabled":
            return "OMP_TARGET_OFFLOAD=disabled: no device (libgomp loads no plugin)"
        if n == 0:
            return (f"{asked}device {dev}: no offload device (omp_get_num_devices() is 0: "
                    "no plugin found a device)")
        if dev == n:
            return f"{asked}device {dev} is the initial device (the host)"
        return f"{asked}device {dev} is not one of the {n} devices"

    def on_decide(self, kind, device, fn, mapnum, hostaddrs, sizes, kinds, flags, depend,
                  args) -> int:
        """A GCC construct (kind: ``GOMP_target_ext``, ``_data_ext``, ``_end_data``,
        ``_update_ext``, ``_enter_exit_data``), decided like GCC 12 ``resolve_device``:
        device ``-1`` is the ``default-device-var`` ICV; a number outside ``0..n-1``
        falls back to the host, except under ``OMP_TARGET_OFFLOAD=mandatory`` for a
        number that is neither ``GOMP_DEVICE_HOST_FALLBACK`` nor ``n`` (the initial
        device): "OMP_TARGET_OFFLOAD is set to MANDATORY, but device not found".  In
        host-device mode a region whose function is in no registered image falls back
        (``gomp_get_target_fn_addr``; under mandatory "... but device cannot be used for
        offloading", ``gomp_target_fallback``).  Returns an interposer_gomp.c code."""
        kind, device, fn = int(kind), int(device), int(fn or 0)
        with self._lock:
            self.gomp_constructs[GOMP_CONSTRUCTS[kind]] += 1
            if self.host_device is None:
                return self._decide_libgomp(kind, device, fn)
            return self._decide_host_device(kind, device, fn)

    def _decide_libgomp(self, kind: int, device: int, fn: int) -> int:
        if kind == _gabi.K_END_DATA:
            self._record(kind, device, fn, "host-fallback",
                         "end of a target data region (libgomp pops its own)")
            return _gabi.PASSTHROUGH
        policy = self.policy()
        n = self.libgomp_num_devices()
        dev = self.default_device() if device == GOMP_DEVICE_ICV else device
        if 0 <= dev < n:
            self._record(kind, device, fn, "libgomp-device", f"libgomp device {dev}")
            return _gabi.PASSTHROUGH_DEVICE
        if policy == "mandatory" and dev not in (GOMP_DEVICE_HOST_FALLBACK, n):
            msg = "OMP_TARGET_OFFLOAD is set to MANDATORY, but device not found"
            self.errors.append(msg)
            self._record(kind, device, fn, "fatal", f"device {dev}: {msg} (libgomp exits)")
            return _gabi.PASSTHROUGH
        self._record(kind, device, fn, "host-fallback",
                     self._fallback_reason(kind, device, dev, n, policy))
        return _gabi.PASSTHROUGH

    def _decide_host_device(self, kind: int, device: int, fn: int) -> int:
        stack = self._stack()
        if kind == _gabi.K_END_DATA:
            if stack and stack[-1][0] == "device":
                self._record(kind, device, fn, "host-device", "end of a device data region")
                return _gabi.DEVICE
            if stack:
                stack.pop()
            self._record(kind, device, fn, "host-fallback",
                         "end of a host data region (libgomp pops its own)")
            return _gabi.FALLBACK
        policy = self.policy()
        n = self.num_devices()
        dev = self.default_device() if device == GOMP_DEVICE_ICV else device
        if not 0 <= dev < n:
            if policy == "mandatory" and dev not in (GOMP_DEVICE_HOST_FALLBACK, n):
                msg = "OMP_TARGET_OFFLOAD is set to MANDATORY, but device not found"
                self.errors.append(msg)
                self._record(kind, device, fn, "fatal", f"device {dev}: {msg}")
                return self._fatal(msg)
            if kind == _gabi.K_DATA:
                stack.append(("fallback", None))
            self._record(kind, device, fn, "host-fallback",
                         self._fallback_reason(kind, device, dev, n, policy))
            return _gabi.FALLBACK
        try:
            self._ensure_init()
        except GompFatal as exc:
            return self._fatal(exc.message)
        if kind == _gabi.K_TARGET and not self.host_device.mapper.function_mapped(fn):
            reason = (f"region function {fmt_p(fn)} is in no registered image "
                      "(gomp_get_target_fn_addr)")
            if policy == "mandatory":
                msg = ("OMP_TARGET_OFFLOAD is set to MANDATORY, but device cannot be used "
                       "for offloading")
                self.errors.append(msg)
                self._record(kind, device, fn, "fatal", f"{reason}: {msg}")
                return self._fatal(msg)
            self._record(kind, device, fn, "host-fallback", reason)
            return _gabi.FALLBACK
        self._record(kind, device, fn, "host-device", f"device {dev}: {self.host_device.label}")
        return _gabi.DEVICE

    def _ensure_init(self) -> None:
        self.host_device.ensure_init(self.gomp_registrations)

    # -- the host device's side of a construct ------------------------------------------
    def on_map(self, kind, mapnum, hostaddrs_p, sizes_p, kinds_p, flags, out) -> int:
        """Do a construct on the host device (GCC 12 ``GOMP_target_ext``'s
        ``gomp_map_vars(..., GOMP_MAP_VARS_TARGET)``, ``GOMP_target_data_ext``,
        ``GOMP_target_end_data``, ``gomp_update``, ``GOMP_target_enter_exit_data``).  For a
        region ``out[0]`` receives the handle for :meth:`on_unmap` and ``out[1]`` the
        device address of the argument block.  Host addresses libgomp rewrites
        (``use_device_ptr``) are written back.  Returns OK or FATAL (message printed)."""
        kind, mapnum, flags = int(kind), int(mapnum), int(flags)
        hostaddrs = _gabi.read_u64s(hostaddrs_p, mapnum)
        sizes = _gabi.read_u64s(sizes_p, mapnum)
        kinds = _gabi.read_u16s(kinds_p, mapnum)
        orig = list(hostaddrs)
        with self._lock:
            hd = self.host_device
            if hd is None or hd.closed:
                return self._fatal("offload_shim: the GCC host device is closed")
            mapper = hd.mapper
            mapper.construct = GOMP_CONSTRUCTS[kind]
            try:
                if kind == _gabi.K_TARGET:
                    handle, block = hd.map_region(hostaddrs, sizes, kinds)
                    out[0], out[1] = handle, block
                elif kind == _gabi.K_DATA:
                    tgt = mapper.map_vars(hostaddrs, sizes, kinds, GOMP_MAP_VARS_DATA)
                    self._stack().append(("device", tgt))
                elif kind == _gabi.K_END_DATA:
                    stack = self._stack()
                    if stack and stack[-1][0] == "device":
                        _tag, tgt = stack.pop()
                        mapper.unmap_vars(tgt, True)
                elif kind == _gabi.K_UPDATE:
                    mapper.update(hostaddrs, sizes, kinds)
                elif flags & GOMP_TARGET_FLAG_EXIT_DATA:
                    mapper.exit_data(hostaddrs, sizes, kinds)
                else:
                    mapper.enter_data(hostaddrs, sizes, kinds)
            except GompFatal as exc:
                self.errors.append(exc.message)
                return self._fatal(exc.message)
        for i, (a, b) in enumerate(zip(orig, hostaddrs)):
            if a != b and hostaddrs_p:
                _gabi.write_u64(hostaddrs_p + 8 * i, b)
        return _gabi.OK

    def on_unmap(self, handle) -> int:
        """After a region: ``gomp_unmap_vars`` with copy-back."""
        with self._lock:
            try:
                self.host_device.unmap_region(int(handle))
            except GompFatal as exc:
                self.errors.append(exc.message)
                return self._fatal(exc.message)
        return _gabi.OK

    # -- report ---------------------------------------------------------------------------
    def report(self) -> dict:
        """What the ``--report`` file says of GCC code (JSON-ready)."""
        with self._lock:
            hd = self.host_device
            out = {
                "mode": "host-device" if self.host_device_enabled else "libgomp",
                "policy": self.policy(),
                "devices": self.num_devices(),
                "initial_device": self.num_devices(),
                "registrations": self.registrations,
                "unregistrations": self.unregistrations,
                "late_unregistrations": self.late_unregistrations,
                "registered": len(self.gomp_registrations),
                "constructs": dict(self.gomp_constructs),
                "outcomes": dict(self.outcomes),
                "regions": list(self.regions),
                "dropped_regions": self.dropped_regions,
            }
            if hd is not None:
                out.update(device=hd.label, api_calls=dict(self.api_calls),
                           mappings=list(hd.events), dropped_mappings=hd.dropped_events,
                           live_mappings=hd.live_mappings() if not hd.closed else [])
            return out


__all__ = ["GOMP_CONSTRUCTS", "GompImage", "GompSide", "MAX_RECORDS", "OUTCOMES",
           "parse_target_offload"]
