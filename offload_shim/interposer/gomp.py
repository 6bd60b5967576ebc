"""The GCC side: libgomp's offload registration and constructs.

Mirrors GCC 12 libgomp ``target.c``: ``GOMP_offload_register_ver`` /
``GOMP_offload_unregister_ver`` (the host table ``{func_begin, func_end, var_begin,
var_end}`` and mkoffload's target data), ``resolve_device`` and
``gomp_target_fallback`` for ``GOMP_target_ext``, ``GOMP_target_data_ext``,
``GOMP_target_end_data``, ``GOMP_target_update_ext`` and ``GOMP_target_enter_exit_data``.
Running GCC images on a device (mapping + ``GOMP_OFFLOAD_run``) is not implemented:
every construct takes libgomp's own host fallback (the C side calls the real entry
point with device ``GOMP_DEVICE_HOST_FALLBACK``).
"""

from __future__ import annotations

import os
import sys

from ..abi import interposer as _abi
from ..abi.interposer import CB_OK, GOMP_FALLBACK, GOMP_FATAL
from ..core.images import HostEntry, OffloadImage
from ..errors import InvalidImageError, OffloadError

# libgomp (GCC 12 gomp-constants.h / target.c)
GOMP_DEVICE_ICV = -1
GOMP_DEVICE_HOST_FALLBACK = -2
GOMP_CONSTRUCTS = ("target", "target_data", "target_end_data", "target_update",
                   "target_enter_exit_data")


class GompImage(OffloadImage):
    """A GCC library's offload image as ``GOMP_offload_register_ver`` hands it over
    (the inputs of libgomp target.c ``gomp_load_image_to_device``).  ``gomp_version``
    (packed, abi-reference 2.1), ``gomp_target_type`` (``enum offload_target_type``:
    5 = nvptx, 8 = gcn), ``gomp_target_data`` (address
    of mkoffload's target data, what ``GOMP_OFFLOAD_load_image`` takes),
    ``host_table``; entries: the functions then the variables of the host table, in
    libgomp's table order, named from the nvptx target data when it decodes
    (``device_data``: :func:`~offload_shim.elf.imageinfo.parse_nvptx_target_data`'s
    dict), else ``func<i>`` / ``var<j>``; host addresses: the library's real ones.
    ``data``: the PTX texts, NUL-separated (nvptx), else empty; ``machine`` is the
    target name.  Valid while the library stays loaded."""

    def __init__(self, data, entries, *, name, host_addresses, version, target_type,
                 target_data, host_table, device_data=None):
        from ..elf.imageinfo import GOMP_TARGET_TYPES
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
        from ..elf.imageinfo import parse_nvptx_target_data
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


class GompSide:
    """libgomp's host side over a :class:`~offload_shim.Runtime`: registrations
    (``gomp_registrations``: ``version``, ``host_table``, ``target_type``,
    ``target_data``, ``funcs``, ``vars``, ``device_data``, ``image`` per library) and
    the decision for each construct (counted in ``gomp_constructs``,
    ``gomp_fallbacks``).  ``policy``: an ``OMP_TARGET_OFFLOAD`` override or None;
    messages of failures are appended to ``errors``, images no plugin takes to
    ``unsupported`` (both lists shared with the interposer).  Thread safety: ``lock``."""

    def __init__(self, runtime, lock, *, errors: list, unsupported: list,
                 policy: str | None = None):
        self.runtime = runtime
        self._lock = lock
        self._policy_override = policy
        self.errors = errors
        self.unsupported = unsupported
        self.gomp_registrations: list[dict] = []
        self.gomp_constructs: dict[str, int] = {k: 0 for k in GOMP_CONSTRUCTS}
        self.gomp_fallbacks = 0

    def on_register(self, unregister: int, version: int, host_table: int,
                    target_type: int, target_data: int) -> int:
        """``GOMP_offload_register_ver`` / ``_unregister_ver`` (libgomp target.c, seed
        000): read the real host table (``{func_begin, func_end, var_begin, var_end}``:
        host function addresses, ``(address, size)`` variable pairs, top size bit =
        ``declare target link``), decode mkoffload's ``target_data`` (nvptx: PTX
        objects, function and variable names, abi-reference 2.6), record both in
        :attr:`gomp_registrations` and register a :class:`GompImage` with the runtime:
        pending for the plugins of that target type (e.g. the GCC 12 nvptx plugin; with
        0 devices nothing is ever loaded), :attr:`unsupported` when no plugin takes it.
        Unregistration (the library's destructor, ``dlclose``) unregisters it again."""
        with self._lock:
            if unregister:
                keep = []
                for r in self.gomp_registrations:
                    if r["target_data"] != target_data or r["host_table"] != host_table:
                        keep.append(r)
                        continue
                    img = r.get("image")
                    if img is not None and img in self.runtime.images:
                        try:
                            self.runtime.unregister_image(img)
                        except OffloadError as exc:
                            self.errors.append(f"unregister {img.name}: {exc}")
                self.gomp_registrations = keep
                return CB_OK
            fb, fe, vb, ve = _abi.read_pointers(host_table, 4)
            funcs = _abi.read_pointers(fb, (fe - fb) // 8) if fe > fb else []
            raw = _abi.read_pointers(vb, (ve - vb) // 8) if ve > vb else []
            vars_ = list(zip(raw[0::2], raw[1::2]))
            rec = {"version": int(version), "host_table": host_table,
                   "target_type": int(target_type), "target_data": target_data,
                   "funcs": funcs, "vars": vars_, "device_data": None, "image": None}
            self.gomp_registrations.append(rec)
            try:
                img = GompImage.from_registration(int(version), host_table, int(target_type),
                                                  target_data, funcs, vars_)
            except (InvalidImageError, ValueError) as exc:
                self.unsupported.append((target_data, f"GOMP image: {exc}"))
                return CB_OK
            rec["device_data"] = img.device_data
            try:
                self.runtime.register_image(img)
            except InvalidImageError as exc:
                self.unsupported.append((target_data, f"{img.name}: {exc}"))
                return CB_OK
            rec["image"] = img
            return CB_OK

    def devices(self) -> list:
        """libgomp's device list (GCC 12 ``gomp_target_init``): the devices of the
        runtime's OpenMP-capable GOMP plugins, OpenMP device numbers 0..n-1
        (0 under ``OMP_TARGET_OFFLOAD=disabled``)."""
        if self.policy() == "disabled":
            return []
        return [d for d in self.runtime.devices
                if getattr(d.plugin, "abi", None) == "gomp"
                and getattr(d.plugin, "caps", 0) & 0x4]

    def policy(self) -> str:
        """``disabled`` / ``default`` / ``mandatory``: the override, else
        ``OMP_TARGET_OFFLOAD`` (libgomp ``parse_target_offload``)."""
        if self._policy_override is not None:
            return self._policy_override.lower()
        env = os.environ.get("OMP_TARGET_OFFLOAD", "default").strip().lower()
        return env if env in ("disabled", "mandatory") else "default"

    def on_target(self, kind, device, fn, mapnum, hostaddrs, sizes, kinds, flags) -> int:
        """A GCC construct (``GOMP_target_ext``, ``_data_ext``, ``_end_data``,
        ``_update_ext``, ``_enter_exit_data``): decide like libgomp 12
        (``resolve_device``, ``gomp_target_fallback``).  The device number (``-1`` =
        the ``default-device-var`` ICV) outside ``0..n-1`` -> host fallback, except
        under ``OMP_TARGET_OFFLOAD=mandatory`` for a number that is neither the
        fallback (-2) nor the initial device (n): fatal "OMP_TARGET_OFFLOAD is set to
        MANDATORY, but device not found".  A usable device -> still the host
        fallback (running GCC images on a device is not implemented), fatal under
        mandatory for ``target`` ("... but device cannot be used for offloading").
        Returns 1 (libgomp host fallback, run by the interposer through libgomp with
        device -2) or -3 (fatal: message printed, the process exits with status 1)."""
        with self._lock:
            name = GOMP_CONSTRUCTS[kind] if 0 <= kind < len(GOMP_CONSTRUCTS) else str(kind)
            self.gomp_constructs[name] = self.gomp_constructs.get(name, 0) + 1
            n = len(self.devices())
            mandatory = self.policy() == "mandatory"
            dev = int(device)
            if dev == GOMP_DEVICE_ICV:
                dev = self.default_device()
            if not 0 <= dev < n:
                if mandatory and dev not in (GOMP_DEVICE_HOST_FALLBACK, n) and kind != 2:
                    return self._fatal("OMP_TARGET_OFFLOAD is set to MANDATORY, but "
                                       "device not found")
            elif kind == 0 and mandatory:
                return self._fatal("OMP_TARGET_OFFLOAD is set to MANDATORY, but device "
                                   "cannot be used for offloading")
            self.gomp_fallbacks += 1
            return GOMP_FALLBACK

    def default_device(self) -> int:
        """libgomp's ``omp_get_default_device()`` (the ICV), else ``OMP_DEFAULT_DEVICE``."""
        try:
            return _abi.omp_default_device(_abi.libgomp())
        except (OSError, AttributeError):
            return int(os.environ.get("OMP_DEFAULT_DEVICE", "0") or 0)

    def _fatal(self, message: str) -> int:
        """libgomp ``gomp_fatal``: "libgomp: MESSAGE" on stderr, then exit(1) (C side)."""
        self.errors.append(message)
        sys.stdout.flush()
        sys.stderr.write(f"libgomp: {message}\n")
        sys.stderr.flush()
        return GOMP_FATAL


__all__ = ["GOMP_CONSTRUCTS", "GOMP_DEVICE_HOST_FALLBACK", "GOMP_DEVICE_ICV", "GompImage",
           "GompSide"]
