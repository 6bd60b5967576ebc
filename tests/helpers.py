"""Test helpers: run code in a child process (misuse may crash a plugin)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading


def run_child(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run Python ``code`` in a fresh interpreter; returns the completed
    process (returncode < 0 = killed by that signal)."""
    return subprocess.run([sys.executable, "-P", "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=timeout)


def run_threads(n, target, timeout=180, raise_first=True):
    """Run ``target(i)`` for i in range(n) on n threads; fail if a thread hangs
    (a lock left held).  Re-raise the first error any thread raised, or with
    ``raise_first=False`` return the list of errors."""
    errors = []

    def wrap(i):
        try:
            target(i)
        except BaseException as e:          # report every thread's failure
            errors.append(e)
    ts = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=timeout)
        assert not t.is_alive(), "thread hung (lock left held?)"
    if errors and raise_first:
        raise errors[0]
    return errors


def make_pool(backend=None, **kw):
    """(FakeBackend, MemoryManager over it) with no debug mode from the environment."""
    from offload_shim.memory import MemoryManager
    from offload_shim.memory.fake import FakeBackend
    b = backend if backend is not None else FakeBackend()
    kw.setdefault("debug", "")
    kw.setdefault("device_label", "fake:0")
    return b, MemoryManager(b.alloc, b.free, **kw)


def assert_unlocked(mm):
    """No lock of the manager is left held."""
    for lock in mm._locks():
        assert lock.acquire(blocking=False), "a manager lock is still held"
        lock.release()


class FailOnce:
    """A ``backend_free`` over a FakeBackend that raises (like a failing
    ``data_delete``) on the first call, or once for each of the pointers in
    ``fail``; ``failed`` lists the pointers it refused."""

    def __init__(self, backend, fail=None):
        self.b = backend
        self.fail = fail
        self.failed = []

    def __call__(self, ptr):
        from offload_shim.errors import OffloadError
        if (self.fail is None and not self.failed) or (self.fail is not None
                                                       and ptr in self.fail
                                                       and ptr not in self.failed):
            self.failed.append(ptr)
            raise OffloadError("data_delete failed", code=1, function="__tgt_rtl_data_delete")
        self.b.free(ptr)


def assert_conserved(mm, b):
    """in_use + cached == what the fake backend holds; block counts agree."""
    s = mm.stats
    assert s.bytes_total == s.bytes_in_use + s.bytes_cached == b.held_bytes
    assert s.live_blocks + s.cached_blocks == len(b.live)
    assert s.backend_allocs - s.backend_frees == s.live_blocks + s.cached_blocks


#: Python source for child processes: drop CAP_IPC_LOCK (so RLIMIT_MEMLOCK applies to
#: root) and lower the limit: set_limit(n) sets soft and hard, set_soft_limit(n) the soft one.
DROP_CAP = """
import ctypes, resource
class Hdr(ctypes.Structure): _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]
def drop_ipc_lock():
    libc = ctypes.CDLL(None, use_errno=True)
    h, d = Hdr(0x20080522, 0), (Data * 2)()
    assert libc.capget(ctypes.byref(h), d) == 0
    d[0].effective &= ~(1 << 14); d[0].permitted &= ~(1 << 14)
    assert libc.capset(ctypes.byref(h), d) == 0, ctypes.get_errno()
def set_limit(n):
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (n, n))
def set_soft_limit(n):
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (n, resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]))
"""


# -- plugins and libraries built for a test --------------------------------------------
NATIVE = __import__("pathlib").Path(__file__).resolve().parent.parent / "native"


def c_compiler() -> str:
    """The C compiler tests build with (cc, gcc or clang); skips the test without one."""
    import shutil
    import pytest
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    return cc


def build_shared(dest, name: str, source: str, *flags: str) -> str:
    """``source`` (C) built into ``dest/name`` as a shared object; returns its path."""
    cc = c_compiler()
    src = dest / (name + ".c")
    src.write_text(source)
    out = dest / name
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(src), *flags], check=True,
                   capture_output=True, timeout=300)
    return str(out)


def build_wrapped_host_plugin(dest, name: str, wrapper: str, renamed=()) -> str:
    """The bundled host plugin (``native/host_plugin.c`` + ``host_plugin_ol.c``) with the
    ``__tgt_rtl_<entry>`` of each entry in ``renamed`` renamed ``osh_orig_<entry>``, linked
    with ``wrapper`` (C defining the replacements, which may call ``osh_orig_*``) into
    ``dest/name``: a plugin with a fault where the test wants it."""
    cc = c_compiler()
    (dest / "wrap.c").write_text(wrapper)
    renames = [f"-D__tgt_rtl_{e}=osh_orig_{e}" for e in renamed]
    objs = []
    for src, extra in (("host_plugin.c", renames), ("host_plugin_ol.c", [])):
        obj = dest / (src + ".o")
        subprocess.run([cc, "-c", "-fPIC", "-O1", "-fvisibility=hidden", f"-I{NATIVE}",
                        *extra, str(NATIVE / src), "-o", str(obj)], check=True,
                       capture_output=True, timeout=300)
        objs.append(str(obj))
    out = dest / name
    subprocess.run([cc, "-shared", "-fPIC", *objs, str(dest / "wrap.c"), "-o", str(out),
                    "-ldl", "-lpthread"], check=True, capture_output=True, timeout=300)
    return str(out)


def stub_llvm_plugin(init_plugin_body: str) -> str:
    """C source of a minimal plugin of the LLVM ABI (one device, no memory: every copy and
    launch fails) whose ``__tgt_rtl_init_plugin`` body is ``init_plugin_body``."""
    return ("#include <stdint.h>\n#include <stdlib.h>\n"
            f"int32_t __tgt_rtl_init_plugin(void) {{ {init_plugin_body} }}\n" + """
int32_t __tgt_rtl_deinit_plugin(void) { return 0; }
int32_t __tgt_rtl_deinit_device(int32_t d) { return 0; }
int32_t __tgt_rtl_is_valid_binary(void *img) { return 1; }
int32_t __tgt_rtl_number_of_devices(void) { return 1; }
int32_t __tgt_rtl_init_device(int32_t d) { return 0; }
void *__tgt_rtl_load_binary(int32_t d, void *img) { return 0; }
void *__tgt_rtl_data_alloc(int32_t d, int64_t n, void *h, int32_t k) { return 0; }
int32_t __tgt_rtl_data_submit(int32_t d, void *t, void *h, int64_t n) { return 1; }
int32_t __tgt_rtl_data_retrieve(int32_t d, void *h, void *t, int64_t n) { return 1; }
int32_t __tgt_rtl_data_delete(int32_t d, void *t, int32_t k) { return 1; }
int32_t __tgt_rtl_launch_kernel(int32_t d, void *e, void **a, int64_t *o, void *k,
                                void *i) { return 1; }
""")


#: a plugin of the LLVM ABI whose init_plugin dereferences NULL (a crash on first use)
SEGV_IN_INIT_PLUGIN = stub_llvm_plugin("volatile int *p = 0; return *p;")
