"""Known misuse sequences of the liboffload (``ol*``) family.

Like :mod:`offload_shim.testing.probes` (which runs them: each in its own
child process, straight against the library's entry points, around the
runtime's guard), for ``libLLVMOffload.so`` and the bundled plugin's ``ol*``
view.  The runtime refuses every one of them in Python; liboffload 22.1.8
answers some with an ``ol_result_t`` error and segfaults on others
(docs/references.md, plugin contracts, ``docs/conformance.md``).

Sequences that need a compute device (a device that is not the host device)
report ``n/a`` where liboffload enumerates none (the real library on a
machine without a GPU).  Each call's result is printed as ``{"ol": null}``
(``OL_SUCCESS``) or ``{"ol": [code, name, details]}``.
"""

from __future__ import annotations

import ctypes
import json
from ctypes import byref, c_bool, c_void_p

from ..abi import liboffload as L

__all__ = ["OL_PROBES", "ol_outcome", "ol_detail"]

#: (name, what, steps, needs): registered into probes.PROBES under abi "liboffload"
OL_PROBES: list[tuple] = []


def _probe(what, needs=()):
    def deco(fn):
        OL_PROBES.append((fn.__name__.removeprefix("ol_"), what, fn, tuple(needs)))
        return fn
    return deco


def ol_outcome(value: dict) -> str:
    """Outcome column of a call's printed ``ol_result_t`` (``returned ...``
    for a query that succeeded with an answer)."""
    err = value.get("ol")
    if err is not None:
        return f"error ({err[1]} {err[0]})"
    if value.get("returned") is not None:
        return f"returned {value['returned']}"
    return "accepted (OL_SUCCESS)"


def ol_detail(value) -> str:
    """Detail column: the library's ``Details`` text of an error result."""
    if isinstance(value, dict) and value.get("ol"):
        return str(value["ol"][2])[:200]
    return ""


class OlCtx:
    """Calls ``ol*`` entry points of ``plugin`` by name, printing each call
    before and its result after (the protocol of probes.py)."""

    def __init__(self, plugin):
        self.p = plugin
        self.keep: list = []
        self.devices: list[tuple[object, int]] = []        # (handle, type)

    def call(self, name, *args, returned=None):
        """Call ``name``; ``returned``: a callable giving the answer of a
        query when it succeeds (printed as ``returned``)."""
        fn = self.p.entry_point(name)
        shown = [a if isinstance(a, (int, str, type(None))) else type(a).__name__ for a in args]
        print(json.dumps({"call": f"{name}({', '.join(map(str, shown))})"}), flush=True)
        res = fn(*args)
        if res:
            e = res.contents
            out = {"ol": [int(e.Code), L.errc_name(int(e.Code), self.p.generation),
                          (e.Details or b"").decode(errors="replace")]}
        else:
            out = {"ol": None}
            if returned is not None:
                out["returned"] = returned()
        print(json.dumps({"result": out}), flush=True)
        return out["ol"]

    def na(self, why: str) -> None:
        print(json.dumps({"na": why}), flush=True)

    # set-up
    def init(self) -> None:
        """olInit, then the devices with their types (info queries)."""
        self.call("olInit")
        found = []

        def cb(h, _u):
            found.append(ctypes.cast(h, c_void_p).value)
            return True

        callback = L.ol_device_iterate_cb_t(cb)
        self.keep.append(callback)
        self.call("olIterateDevices", callback, None)
        for h in found:
            ptr = ctypes.cast(c_void_p(h), L.ol_device_handle_t)
            t = ctypes.c_uint32()
            self.call("olGetDeviceInfo", ptr, L.DeviceInfo.TYPE, 4, byref(t))
            self.devices.append((ptr, t.value))

    def host(self):
        return next(h for h, t in self.devices if t == L.DeviceType.HOST)

    def compute(self):
        return next((h for h, t in self.devices if t != L.DeviceType.HOST), None)

    def buffer(self, n: int = 4096) -> int:
        buf = ctypes.create_string_buffer(n)
        self.keep.append(buf)
        return ctypes.addressof(buf)

    def garbage(self, handle_t):
        """A handle the library never returned: the address of zeroed host memory."""
        return ctypes.cast(c_void_p(self.buffer(256)), handle_t)


def _ctx(c) -> OlCtx:
    return OlCtx(c.p)


@_probe("olIterateDevices before olInit")
def ol_iterate_devices_before_init(c):
    o = _ctx(c)
    cb = L.ol_device_iterate_cb_t(lambda h, u: True)
    o.keep.append(cb)
    o.call("olIterateDevices", cb, None)


@_probe("olShutDown without olInit")
def ol_shutdown_without_init(c):
    _ctx(c).call("olShutDown")


@_probe("olInit, olShutDown, olShutDown")
def ol_double_shutdown(c):
    o = _ctx(c)
    o.call("olInit")
    o.call("olShutDown")
    o.call("olShutDown")


@_probe("olMemAlloc on a device after the last olShutDown")
def ol_alloc_after_shutdown(c):
    o = _ctx(c)
    o.init()
    h = o.host()
    o.call("olShutDown")
    o.call("olMemAlloc", h, L.AllocType.DEVICE, 64, byref(c_void_p()))


@_probe("olMemAlloc(DEVICE) on the host device")
def ol_alloc_on_host_device(c):
    o = _ctx(c)
    o.init()
    o.call("olMemAlloc", o.host(), L.AllocType.DEVICE, 64, byref(c_void_p()))


@_probe("olMemAlloc(HOST) on the host device")
def ol_host_alloc_on_host_device(c):
    o = _ctx(c)
    o.init()
    o.call("olMemAlloc", o.host(), L.AllocType.HOST, 64, byref(c_void_p()))


@_probe("olMemAlloc of 0 bytes")
def ol_alloc_size_zero(c):
    o = _ctx(c)
    o.init()
    o.call("olMemAlloc", o.compute() or o.host(), L.AllocType.DEVICE, 0, byref(c_void_p()))


@_probe("olCreateQueue on the host device")
def ol_create_queue_on_host_device(c):
    o = _ctx(c)
    o.init()
    o.call("olCreateQueue", o.host(), byref(L.ol_queue_handle_t()))


@_probe("olCreateProgram (x86-64 ELF image) on the host device")
def ol_create_program_on_host_device(c):
    from ..abi.native import sample_image_path
    o = _ctx(c)
    o.init()
    data = ctypes.create_string_buffer(sample_image_path().read_bytes())
    o.keep.append(data)
    o.call("olCreateProgram", o.host(), ctypes.addressof(data), len(data) - 1,
           byref(L.ol_program_handle_t()))


@_probe("olMemRegister on the host device", needs=("olMemRegister",))
def ol_register_on_host_device(c):
    o = _ctx(c)
    o.init()
    o.call("olMemRegister", o.host(), o.buffer(), 4096, 0, byref(c_void_p()))


@_probe("olMemFree of a pointer the library never returned")
def ol_free_unknown_pointer(c):
    o = _ctx(c)
    o.init()
    o.call("olMemFree", o.buffer())


@_probe("olMemFree(NULL)")
def ol_free_null(c):
    o = _ctx(c)
    o.init()
    o.call("olMemFree", None)


@_probe("olMemFree of the same allocation twice (compute device)")
def ol_double_free(c):
    o = _ctx(c)
    o.init()
    dev = o.compute()
    if dev is None:
        return o.na("no compute device")
    p = c_void_p()
    o.call("olMemAlloc", dev, L.AllocType.DEVICE, 64, byref(p))
    o.call("olMemFree", p.value)
    o.call("olMemFree", p.value)


@_probe("olMemcpy with a device handle the library never returned")
def ol_memcpy_unknown_device(c):
    o = _ctx(c)
    o.init()
    o.call("olMemcpy", None, o.buffer(), o.garbage(L.ol_device_handle_t), o.buffer(),
           o.host(), 8)


@_probe("olGetDeviceInfo(TYPE) of a device handle the library never returned")
def ol_device_info_unknown_device(c):
    o = _ctx(c)
    o.init()
    o.call("olGetDeviceInfo", o.garbage(L.ol_device_handle_t), L.DeviceInfo.TYPE, 4, o.buffer())


@_probe("olGetDeviceInfo with an invalid property (99)")
def ol_device_info_bad_enum(c):
    o = _ctx(c)
    o.init()
    o.call("olGetDeviceInfo", o.host(), 99, 4, o.buffer())


@_probe("olGetDeviceInfo(NAME) into a 2-byte buffer")
def ol_device_info_short_buffer(c):
    o = _ctx(c)
    o.init()
    o.call("olGetDeviceInfo", o.host(), L.DeviceInfo.NAME, 2, o.buffer())


@_probe("olDestroyProgram of a program the library never returned")
def ol_destroy_program_unknown(c):
    o = _ctx(c)
    o.init()
    o.call("olDestroyProgram", o.garbage(L.ol_program_handle_t))


@_probe("olDestroyQueue of a queue the library never returned")
def ol_destroy_queue_unknown(c):
    o = _ctx(c)
    o.init()
    o.call("olDestroyQueue", o.garbage(L.ol_queue_handle_t))


@_probe("olGetSymbol in a program the library never returned", needs=("olGetSymbol",))
def ol_get_symbol_unknown_program(c):
    o = _ctx(c)
    o.init()
    o.call("olGetSymbol", o.garbage(L.ol_program_handle_t), b"increment",
           L.SymbolKind.KERNEL, byref(L.ol_symbol_handle_t()))


@_probe("olCreateProgram of garbage bytes (compute device)")
def ol_create_program_garbage(c):
    o = _ctx(c)
    o.init()
    dev = o.compute()
    if dev is None:
        return o.na("no compute device")
    o.call("olCreateProgram", dev, o.buffer(256), 256, byref(L.ol_program_handle_t()))


@_probe("olLaunchKernel of a symbol the library never returned (compute device)",
        needs=("olGetSymbol",))
def ol_launch_unknown_kernel(c):
    o = _ctx(c)
    o.init()
    dev = o.compute()
    if dev is None:
        return o.na("no compute device")
    ls = L.launch_size()
    o.keep.append(ls)
    o.call("olLaunchKernel", None, dev, o.garbage(L.ol_symbol_handle_t), None, 0, byref(ls))


@_probe("olIsValidBinary of garbage bytes", needs=("olIsValidBinary",))
def ol_is_valid_binary_garbage(c):
    o = _ctx(c)
    o.init()
    valid = c_bool(True)
    o.call("olIsValidBinary", o.compute() or o.host(), o.buffer(256), 256, byref(valid),
           returned=lambda: f"Valid={str(valid.value).lower()}")


@_probe("olShutDown while a queue is live (compute device)")
def ol_shutdown_with_live_queue(c):
    o = _ctx(c)
    o.init()
    dev = o.compute()
    if dev is None:
        return o.na("no compute device")
    o.call("olCreateQueue", dev, byref(L.ol_queue_handle_t()))
    o.call("olShutDown")
