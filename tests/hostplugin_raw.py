"""Raw ctypes access to the plugin ABIs for the bundled host plugin's tests
(tests/test_hostplugin_llvm.py, _gomp.py, _control.py): the structs and prototypes
written out independently of offload_shim.abi, so the plugin is checked against the ABI
as documented, not against the package's own tables.

Every scenario that drives plugin entry points runs in a fresh child process
(:func:`run_child` calls ``<module>.child_*``), so plugin state never leaks between tests
and a crash shows up as a signal instead of killing pytest.  Run through ``make test``
(the package installed into .venv), or with the native libraries built elsewhere and
``OFFLOAD_SHIM_NATIVE_DIR`` pointing at them.
"""

from __future__ import annotations

import ctypes
import glob
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent

from offload_shim import hostplugin  # noqa: E402

LLVM16_DIR = pathlib.Path("/usr/lib/llvm-16/lib")
LLVM16_PLUGINS = {
    "nextgen": LLVM16_DIR / "libomptarget.rtl.x86_64.nextgen.so.16",
    "classic": LLVM16_DIR / "libomptarget.rtl.x86_64.so.16",
}

SAMPLE_HOST_ENTRIES = [  # (name, size) in the order of the image's omp_offloading_entries
    ("vec_add", 0),
    ("axpy", 0),
    ("increment", 0),
    ("scale_by_global", 0),
    ("osh_scale", 8),
]

c_void_p, c_int32, c_int64, c_size_t = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_size_t


# ----------------------------------------------------------------------------------------
# raw ctypes ABI definitions (x86-64)
# ----------------------------------------------------------------------------------------

class OffloadEntry(ctypes.Structure):
    _fields_ = [("addr", c_void_p), ("name", ctypes.c_char_p), ("size", c_size_t),
                ("flags", c_int32), ("reserved", c_int32)]


class DeviceImage(ctypes.Structure):
    _fields_ = [("ImageStart", c_void_p), ("ImageEnd", c_void_p),
                ("EntriesBegin", c_void_p), ("EntriesEnd", c_void_p)]


class TargetTable(ctypes.Structure):
    _fields_ = [("EntriesBegin", c_void_p), ("EntriesEnd", c_void_p)]


class KernelArgs(ctypes.Structure):
    _fields_ = [("Version", ctypes.c_uint32), ("NumArgs", ctypes.c_uint32),
                ("ArgBasePtrs", c_void_p), ("ArgPtrs", c_void_p), ("ArgSizes", c_void_p),
                ("ArgTypes", c_void_p), ("ArgNames", c_void_p), ("ArgMappers", c_void_p),
                ("Tripcount", ctypes.c_uint64), ("Flags", ctypes.c_uint64),
                ("NumTeams", ctypes.c_uint32 * 3), ("ThreadLimit", ctypes.c_uint32 * 3),
                ("DynCGroupMem", ctypes.c_uint32)]


class AddrPair(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint64), ("end", ctypes.c_uint64)]


class GompTargetData(ctypes.Structure):
    _fields_ = [("magic", ctypes.c_uint32), ("format_version", ctypes.c_uint32),
                ("image", c_void_p), ("image_size", ctypes.c_uint64),
                ("func_names", c_void_p), ("func_num_args", c_void_p),
                ("num_funcs", ctypes.c_uint32), ("pad0", ctypes.c_uint32),
                ("var_names", c_void_p), ("num_vars", ctypes.c_uint32),
                ("pad1", ctypes.c_uint32)]


assert ctypes.sizeof(OffloadEntry) == 32
assert ctypes.sizeof(DeviceImage) == 32
assert ctypes.sizeof(KernelArgs) == 104
assert ctypes.sizeof(GompTargetData) == 64

OSH_GOMP_TARGET_DATA_MAGIC = 0x4748534F

LLVM_PROTOS = {
    "__tgt_rtl_init_plugin": (c_int32, []),
    "__tgt_rtl_deinit_plugin": (c_int32, []),
    "__tgt_rtl_number_of_devices": (c_int32, []),
    "__tgt_rtl_init_requires": (c_int64, [c_int64]),
    "__tgt_rtl_init_device": (c_int32, [c_int32]),
    "__tgt_rtl_deinit_device": (c_int32, [c_int32]),
    "__tgt_rtl_is_valid_binary": (c_int32, [c_void_p]),
    "__tgt_rtl_load_binary": (c_void_p, [c_int32, c_void_p]),
    "__tgt_rtl_data_alloc": (c_void_p, [c_int32, c_int64, c_void_p, c_int32]),
    "__tgt_rtl_data_delete": (c_int32, [c_int32, c_void_p, c_int32]),
    "__tgt_rtl_data_submit": (c_int32, [c_int32, c_void_p, c_void_p, c_int64]),
    "__tgt_rtl_data_retrieve": (c_int32, [c_int32, c_void_p, c_void_p, c_int64]),
    "__tgt_rtl_data_lock": (c_int32, [c_int32, c_void_p, c_int64, ctypes.POINTER(c_void_p)]),
    "__tgt_rtl_data_unlock": (c_int32, [c_int32, c_void_p]),
    "__tgt_rtl_launch_kernel": (c_int32, [c_int32, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p]),
    "__tgt_rtl_print_device_info": (None, [c_int32]),
}

GOMP_PROTOS = {
    "GOMP_OFFLOAD_version": (ctypes.c_uint, []),
    "GOMP_OFFLOAD_get_name": (ctypes.c_char_p, []),
    "GOMP_OFFLOAD_get_caps": (ctypes.c_uint, []),
    "GOMP_OFFLOAD_get_type": (ctypes.c_int, []),
    "GOMP_OFFLOAD_get_num_devices": (ctypes.c_int, []),
    "GOMP_OFFLOAD_init_device": (ctypes.c_bool, [ctypes.c_int]),
    "GOMP_OFFLOAD_fini_device": (ctypes.c_bool, [ctypes.c_int]),
    "GOMP_OFFLOAD_load_image": (ctypes.c_int, [ctypes.c_int, ctypes.c_uint, c_void_p, c_void_p]),
    "GOMP_OFFLOAD_unload_image": (ctypes.c_bool, [ctypes.c_int, ctypes.c_uint, c_void_p]),
    "GOMP_OFFLOAD_alloc": (c_void_p, [ctypes.c_int, c_size_t]),
    "GOMP_OFFLOAD_free": (ctypes.c_bool, [ctypes.c_int, c_void_p]),
    "GOMP_OFFLOAD_host2dev": (ctypes.c_bool, [ctypes.c_int, c_void_p, c_void_p, c_size_t]),
    "GOMP_OFFLOAD_dev2host": (ctypes.c_bool, [ctypes.c_int, c_void_p, c_void_p, c_size_t]),
    "GOMP_OFFLOAD_dev2dev": (ctypes.c_bool, [ctypes.c_int, c_void_p, c_void_p, c_size_t]),
    "GOMP_OFFLOAD_run": (None, [ctypes.c_int, c_void_p, c_void_p, c_void_p]),
}

GOMP_IMAGE_VERSION = 0x00010000  # GOMP_VERSION_PACK(1, 0)


class Api:
    """Raw entry points of one loaded plugin, by short name (``data_alloc``, ``gomp_alloc``)."""

    def __init__(self, path, mode=os.RTLD_NOW):
        self.lib = ctypes.CDLL(str(path), mode=mode)
        for name, (res, args) in {**LLVM_PROTOS, **GOMP_PROTOS}.items():
            try:
                fn = getattr(self.lib, name)
            except AttributeError:
                continue  # optional in the real LLVM plugins
            fn.restype, fn.argtypes = res, args
            short = (name.replace("__tgt_rtl_", "") if name.startswith("__tgt_rtl_")
                     else "gomp_" + name[len("GOMP_OFFLOAD_"):])
            setattr(self, short, fn)


class SampleImage:
    """The sample image bytes + host entries, kept alive together."""

    def __init__(self, path=None):
        path = path or hostplugin.sample_image_path()
        self.data = pathlib.Path(path).read_bytes()
        self.buf = ctypes.create_string_buffer(self.data, len(self.data))
        self.dummy = (ctypes.c_char * 64)()  # non-NULL host addresses
        self.names = [ctypes.create_string_buffer(n.encode()) for n, _ in SAMPLE_HOST_ENTRIES]
        self.entries = (OffloadEntry * len(SAMPLE_HOST_ENTRIES))()
        for i, (_, size) in enumerate(SAMPLE_HOST_ENTRIES):
            e = self.entries[i]
            e.addr = ctypes.addressof(self.dummy) + 8 * i
            e.name = ctypes.cast(self.names[i], ctypes.c_char_p)
            e.size = size
        begin = ctypes.addressof(self.entries)
        start = ctypes.addressof(self.buf)
        self.image = DeviceImage(start, start + len(self.data), begin,
                                 begin + ctypes.sizeof(self.entries))

    @property
    def ptr(self):
        return ctypes.byref(self.image)


def read_table(table_ptr):
    t = TargetTable.from_address(table_ptr)
    n = (t.EntriesEnd - t.EntriesBegin) // ctypes.sizeof(OffloadEntry)
    return list((OffloadEntry * n).from_address(t.EntriesBegin))


def kernel_args(n):
    ka = KernelArgs()
    ka.Version = 2
    ka.NumArgs = n
    ka.NumTeams[0] = 1
    ka.ThreadLimit[0] = 1
    return ka


def launch(api, dev, entry, args, offsets=None):
    """``args``: ints (device pointers or pointer-sized values)."""
    n = len(args)
    arr = (c_void_p * max(n, 1))(*args)
    offs = None if offsets is None else (ctypes.c_ssize_t * max(n, 1))(*offsets)
    ka = kernel_args(n)
    return api.launch_kernel(dev, entry, arr, offs, ctypes.byref(ka), None)


def doubles(values):
    return (ctypes.c_double * len(values))(*values)


def ctl():
    return hostplugin.HostPluginControl(hostplugin.bundled_plugin_path())


def tmp_images():
    """The plugin's temp copies of images (``$TMPDIR/tmposh_image_*``).  Each child runs
    with a private ``TMPDIR`` (:func:`run_child`), so only its own copies are counted,
    not those of other processes on the machine."""
    d = os.environ.get("TMPDIR") or tempfile.gettempdir()
    return set(glob.glob(os.path.join(d, "tmposh_image_*")))


# ----------------------------------------------------------------------------------------
# child-process runner
# ----------------------------------------------------------------------------------------

def run_child(module, name, *args, env=None, timeout=180):
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(HERE)!r})
        import importlib
        t = importlib.import_module({module!r})
        t.{name}(*{args!r})
        print("CHILD-OK", flush=True)
    """)
    full_env = dict(os.environ)
    full_env.update(env or {})
    with tempfile.TemporaryDirectory(prefix="osh_test_child_") as private_tmp:
        if "TMPDIR" not in (env or {}):
            full_env["TMPDIR"] = private_tmp
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=timeout, env=full_env)
        detail = f"rc={p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
        assert p.returncode == 0, f"child {name} failed ({detail})"
        assert "CHILD-OK" in p.stdout, detail
        left = glob.glob(os.path.join(full_env["TMPDIR"], "tmposh_image_*"))
        assert not left, f"child {name} left image copies behind: {left}"
    return p


@pytest.fixture(scope="module")
def native_built():
    try:
        hostplugin.bundled_plugin_path()
        hostplugin.sample_image_path()
    except FileNotFoundError as e:       # the project's own plugin and sample: built by setup
        pytest.fail(str(e))
