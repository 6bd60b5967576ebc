"""Device buffers as arrays (issue 28 item 9): ``Device.empty`` / ``Device.asarray`` return
a :class:`~offload_shim.core.array.DeviceArray`; DLPack, ``numpy.asarray`` and ``get``;
exported views never dangle (deferred frees, refused teardowns); the pool's books.

The CUDA side (kDLCUDA, ``__cuda_array_interface__``) runs in children against the CUDA
driver stand-in (tests/test_cuda_standin.py) and a lent GPU (tests/test_gpu.py).
"""

from __future__ import annotations

import array
import gc
import random
import sys
import threading

import pytest

np = pytest.importorskip("numpy")

from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import offload_shim as osh
from conftest import need, NEXTGEN16, CLASSIC16, llvm14_x86_64, GCN12, NVPTX12
from helpers import run_threads
from offload_shim.core.array import DeviceArray
from offload_shim.errors import ExportedMemoryError, LifecycleError


@pytest.fixture
def rt():
    r = osh.Runtime(bundled=True)
    yield r
    gc.collect()
    r.close()


@pytest.fixture
def dev(rt):
    return rt.devices[0]


def addr(a) -> int:
    return a.__array_interface__["data"][0]


def books(dev) -> dict:
    s = dev.pool.stats
    return {"bytes_in_use": s.bytes_in_use, "live_blocks": s.live_blocks,
            "conserved": s.backend_allocs - s.backend_frees == s.live_blocks + s.cached_blocks}


BALANCED = {"bytes_in_use": 0, "live_blocks": 0, "conserved": True}


# -- the done-when line -----------------------------------------------------------------------

def test_numpy_from_dlpack_views_the_device_memory_of_the_bundled_plugin(dev):
    a = dev.asarray(np.arange(1000.0))
    v = np.from_dlpack(a)
    assert addr(v) == a.ptr and a.ptr != 0
    assert a.__dlpack_device__() == (1, 0)
    assert v.dtype == np.float64 and v.shape == (1000,) and (v == np.arange(1000.0)).all()
    assert v.flags.writeable                     # DLPack 1.0 capsule: a writable view
    v[3] = -1.0                                  # written through the view, read by the plugin
    assert a.get()[3] == -1.0
    del v, a
    assert books(dev) == BALANCED


def test_the_capability_is_asked_of_the_plugin(bundled_path):
    for abi in ("llvm", "gomp", "liboffload"):
        p = osh.load_plugin(bundled_path, abi=abi)
        assert p.device_memory_is_host is True, abi


@pytest.mark.parametrize("which", ["nextgen16", "classic16", "llvm14"])
def test_llvm_x86_64_plugins_have_host_memory(which):
    path = {"nextgen16": lambda: need(NEXTGEN16, "LLVM 16 x86_64 nextgen plugin"),
            "classic16": lambda: need(CLASSIC16, "LLVM 16 x86_64 classic plugin"),
            "llvm14": lambda: need(llvm14_x86_64(), "LLVM 14 x86_64 plugin")}[which]()
    p = osh.load_plugin(path)
    assert p.device_memory_is_host and not p.cuda_devices
    with osh.Runtime([path]) as r:
        if not r.devices:
            pytest.skip(f"{path}: no device")
        a = r.devices[0].asarray(np.arange(64, dtype=np.int32))
        v = np.from_dlpack(a)
        assert addr(v) == a.ptr and (v == np.arange(64)).all()
        del v, a


@pytest.mark.parametrize("path", [NVPTX12, GCN12, NEXTGEN16.parent / "libomptarget.rtl.cuda.nextgen.so.16",
                                  NEXTGEN16.parent / "libomptarget.rtl.amdgpu.nextgen.so.16"],
                         ids=lambda p: p.name)
def test_gpu_plugins_are_not_host_memory(path):
    p = osh.load_plugin(need(path, f"{path.name}"))
    assert p.device_memory_is_host is False


# -- round trips ---------------------------------------------------------------------------------

DTYPES = ["?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16"]
SHAPES = [(), (1,), (7,), (3, 4), (2, 3, 5), (0,), (4, 0, 2)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_round_trip_of_dtypes_and_shapes(dev, dtype, shape):
    rng = np.random.default_rng(len(shape) * 100 + DTYPES.index(dtype))
    src = (rng.integers(0, 100, size=shape) if dtype != "?" else
           rng.integers(0, 2, size=shape)).astype(dtype)
    a = dev.asarray(src)
    assert (a.shape, a.dtype, a.nbytes, a.size, a.ndim, a.itemsize) == (
        src.shape, src.dtype, src.nbytes, src.size, src.ndim, src.itemsize)
    assert a.strides == np.empty(shape, dtype).strides      # C order, as numpy.empty
    back = a.get()
    assert type(back) is np.ndarray and back.dtype == src.dtype
    assert np.array_equal(back, src)
    view = np.from_dlpack(a)
    assert np.array_equal(view, src) and view.dtype == src.dtype
    if src.size:
        assert addr(view) == a.ptr
    del view, a
    assert books(dev) == BALANCED


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(hnp.scalar_dtypes().filter(lambda d: d.kind in "biufc" and d.isnative),
                  hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6)),
       st.sampled_from([(), (slice(None, None, 2),), (slice(None, None, -1),), "T"]))
def test_round_trip_of_any_array_and_its_strided_views(x, cut):
    """Any bool/int/uint/float/complex array, and strided (non-contiguous) views of it,
    round trip through the device: ``get`` and the DLPack view equal the input."""
    src = x.T if cut == "T" else (x[cut] if x.ndim else x)
    with osh.Runtime(bundled=True) as r:
        d = r.devices[0]
        a = d.asarray(src)
        assert a.shape == src.shape and a.dtype == src.dtype
        assert a.strides == np.empty(src.shape, src.dtype).strides
        assert np.array_equal(a.get(), src, equal_nan=src.dtype.kind in "fc")
        v = np.from_dlpack(a)
        assert np.array_equal(v, src, equal_nan=src.dtype.kind in "fc")
        del v, a
        assert books(d) == BALANCED


def test_zero_size_arrays_hold_no_memory(dev):
    a = dev.empty((0, 3), np.int32)
    b = dev.asarray(np.zeros((5, 0)))
    assert a.ptr == 0 and a.nbytes == 0 and a.shape == (0, 3) and b.ptr == 0
    assert a.get().shape == (0, 3) and a.get().dtype == np.int32
    assert np.from_dlpack(a).shape == (0, 3) and np.asarray(b).shape == (5, 0)
    assert dev.pool.stats.backend_allocs == 0
    a.set(np.zeros((0, 3), np.int32))
    a.free()
    with pytest.raises(LifecycleError):
        a.get()


def test_non_contiguous_inputs_are_copied_to_c_order(dev):
    base = np.arange(60, dtype=np.int64).reshape(3, 4, 5)
    for src in (base[:, ::2, :], base.T, base[::-1], base[..., 1], np.asfortranarray(base)):
        assert not src.flags.c_contiguous
        a = dev.asarray(src)
        want = src.copy(order="C")
        assert a.strides == want.strides and np.array_equal(a.get(), want)
        assert np.array_equal(np.from_dlpack(a), want)


def test_buffer_protocol_objects_and_dtype_casts(dev):
    assert np.array_equal(dev.asarray(bytearray(b"abc")).get(), np.frombuffer(b"abc", "u1"))
    ad = dev.asarray(array.array("d", [1.5, 2.5]))
    assert ad.dtype == np.float64 and ad.get().tolist() == [1.5, 2.5]
    mv = dev.asarray(memoryview(np.arange(6, dtype=np.int16).reshape(2, 3)))
    assert mv.shape == (2, 3) and mv.dtype == np.int16
    cast = dev.asarray([1, 2, 3], dtype=np.float32)
    assert cast.dtype == np.float32 and cast.get().tolist() == [1.0, 2.0, 3.0]
    again = dev.asarray(cast)                   # a device array is an array too
    assert again.ptr != cast.ptr and np.array_equal(again.get(), cast.get())


def test_empty_and_set(dev):
    a = dev.empty((2, 3), "u2")
    assert a.shape == (2, 3) and a.dtype == np.uint16 and a.nbytes == 12
    a.set(np.arange(6, dtype=np.uint16).reshape(2, 3))
    assert a.get().tolist() == [[0, 1, 2], [3, 4, 5]]
    a.set(np.arange(6, dtype=np.uint16).reshape(3, 2).T.T.reshape(2, 3)[:, ::-1])
    assert a.get().tolist() == [[2, 1, 0], [5, 4, 3]]
    assert dev.empty(4).dtype == np.float64
    with pytest.raises(ValueError, match="shape"):
        a.set(np.zeros(6))
    with pytest.raises(TypeError, match="cast"):
        a.set(np.full((2, 3), 1.5))


def test_bad_input_is_refused_with_typed_errors(dev):
    with pytest.raises(ValueError, match="negative"):
        dev.empty((2, -1))
    with pytest.raises(TypeError, match="shape"):
        dev.empty("abc")
    with pytest.raises(TypeError, match="shape"):
        dev.empty((2.5,))
    with pytest.raises(TypeError, match="dtype"):
        dev.empty(3, "not-a-dtype")
    with pytest.raises(TypeError, match="Python objects"):
        dev.empty(3, object)
    with pytest.raises(TypeError, match="Python objects"):
        dev.asarray([object(), 1])
    with pytest.raises(ValueError, match="2\\*\\*63"):
        dev.empty((1 << 40, 1 << 40), np.float64)
    assert dev.pool is None                     # refused before the device was initialised


# -- numpy.asarray / __array__ and __dlpack__ options ------------------------------------------

def test_numpy_asarray_views_on_host_memory_and_copies_when_asked(dev):
    a = dev.asarray(np.arange(10, dtype=np.int32))
    view = np.asarray(a)
    assert addr(view) == a.ptr and dev.exported_views == 1
    assert addr(np.asarray(a, copy=False)) == a.ptr
    copied = np.array(a)                        # copy=True
    assert addr(copied) != a.ptr and np.array_equal(copied, view)
    cast = np.asarray(a, dtype=np.float64)
    assert cast.dtype == np.float64 and addr(cast) != a.ptr
    with pytest.raises(ValueError, match="copy=False"):
        np.asarray(a, dtype=np.float64, copy=False)
    del view
    gc.collect()
    assert dev.exported_views == 0


@pytest.mark.parametrize("src", [
    np.array(["2020-01-01", "2021-02-03", "NaT"], dtype="M8[D]"),
    np.array([[5, -7]], dtype="m8[ns]"),
    np.array(3, dtype="m8[s]"),
    np.zeros(2, dtype=[("x", "i4"), ("y", "f8")]),
    np.arange(3, dtype=">i4"),
], ids=["datetime64", "timedelta64-2d", "timedelta64-0d", "structured", "big-endian"])
def test_dtypes_without_dlpack_round_trip_and_numpy_asarray_copies(dev, src):
    """Fixed-size dtypes DLPack cannot name still go to the device and back (docs/
    usage.md "Device memory as arrays"): ``datetime64``/``timedelta64`` export no
    buffer (``memoryview`` raises "cannot include dtype 'M'"), which once failed
    ``asarray``, ``get`` and ``set`` and ``Device.submit``/``retrieve`` of such a NumPy
    array; ``numpy.asarray`` of such an array raised BufferError and now copies
    (``copy=False`` says why it cannot view)."""
    a = dev.asarray(src)
    assert a.dtype == src.dtype and a.shape == src.shape
    assert np.array_equal(a.get(), src, equal_nan=src.dtype.kind in "mM")
    a.set(src[::-1].copy() if src.ndim == 1 else src)
    back = np.asarray(a)
    assert back.dtype == src.dtype and addr(back) != a.ptr and dev.exported_views == 0
    with pytest.raises(ValueError, match="has no DLPack data type.*copy=False"):
        np.asarray(a, copy=False)
    p = dev.alloc(src.nbytes)
    dev.submit(p, src)
    out = np.empty_like(src)
    dev.retrieve(out, p)
    assert out.tobytes() == src.tobytes()
    dev.free(p)
    del a, back
    assert books(dev) == BALANCED


def test_dlpack_options(dev):
    a = dev.asarray(np.arange(8.0))
    c = np.from_dlpack(a, copy=True)            # a copy on the device, held by c alone
    assert addr(c) != a.ptr and np.array_equal(c, np.arange(8.0))
    assert dev.pool.size_of(addr(c), None) == 64 and dev.exported_views == 1
    del c
    assert dev.exported_views == 0 and dev.pool.stats.live_blocks == 1
    assert addr(np.from_dlpack(a, device="cpu")) == a.ptr
    with pytest.raises(BufferError, match="stream"):
        a.__dlpack__(stream=1)
    for bad in ("1.0", (1,), [1, 0], (1.0, 0)):   # once "'>=' not supported between ..."
        with pytest.raises(TypeError, match="max_version must be None or a"):
            a.__dlpack__(max_version=bad)
    with pytest.raises(BufferError, match="DLPack device"):
        a.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="DLPack data type"):
        dev.asarray(np.arange(3, dtype=">i4")).__dlpack__()
    with pytest.raises(BufferError, match="DLPack data type"):
        dev.empty(2, [("x", "i4"), ("y", "f4")]).__dlpack__()
    assert not hasattr(a, "__cuda_array_interface__")       # CUDA devices only
    assert dev.exported_views == 0


def test_unversioned_capsule_for_consumers_that_do_not_ask_for_dlpack_1(dev):
    """``__dlpack__()`` with no ``max_version`` (NumPy 1.x, older consumers): the
    unversioned ``"dltensor"`` capsule, which NumPy 2.x views read-only; the export
    ends when the view dies."""
    a = dev.asarray(np.arange(5, dtype=np.int64))

    class Legacy:
        def __dlpack__(self, **kw):
            return a.__dlpack__()

        def __dlpack_device__(self):
            return a.__dlpack_device__()

    cap = a.__dlpack__()
    assert 'capsule object "dltensor"' in repr(cap) and dev.exported_views == 1
    del cap                                     # never consumed: the destructor ends it
    assert dev.exported_views == 0
    v = np.from_dlpack(Legacy())
    assert addr(v) == a.ptr and not v.flags.writeable and dev.exported_views == 1
    del v
    assert dev.exported_views == 0


def test_a_refused_capsule_keeps_the_consumers_error_and_ends_the_export(dev):
    """NumPy refuses a capsule whose tensor is not on the CPU: it sets its error, then
    drops the capsule.  The C destructor (native/dlpack.c) ends the export and keeps
    NumPy's error (a Python one would lose it: SystemError, and the export never ends)."""
    import ctypes
    from offload_shim.abi import dlpack as dl
    get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))
    a = dev.asarray(np.arange(4, dtype=np.int32))

    class SaysCuda:
        def __dlpack__(self, **kw):
            cap = a.__dlpack__(max_version=(1, 0))
            mt = dl.DLManagedTensorVersioned.from_address(
                get_pointer(cap, dl.CAPSULE_NAME_VERSIONED))
            mt.dl_tensor.device.device_type = dl.kDLCUDA
            return cap

        def __dlpack_device__(self):
            return (dl.kDLCPU, 0)

    with pytest.raises(RuntimeError, match="Unsupported device"):
        np.from_dlpack(SaysCuda())
    assert dev.exported_views == 0
    del a
    assert books(dev) == BALANCED


# -- exported views and frees -------------------------------------------------------------------

def test_a_view_keeps_the_memory_after_the_array_dies(dev):
    a = dev.asarray(np.arange(100.0))
    ptr = a.ptr
    v = np.from_dlpack(a)
    del a
    gc.collect()
    assert dev.pool.size_of(ptr, None) == 800           # still live in the pool
    assert (v == np.arange(100.0)).all()
    del v
    assert dev.pool.size_of(ptr, None) is None and books(dev) == BALANCED


def test_free_while_viewed_is_deferred_to_the_last_view(dev):
    a = dev.asarray(np.arange(50, dtype=np.int16))
    ptr = a.ptr
    v1, v2 = np.from_dlpack(a), np.asarray(a)
    a.free()
    assert a.freed and dev.exported_views == 2
    assert dev.pool.size_of(ptr, None) == 100
    with pytest.raises(LifecycleError, match="after free"):
        a.get()
    with pytest.raises(LifecycleError, match="after free"):
        a.__dlpack__()
    a.free()                                            # a second free is a no-op
    del v1
    assert dev.pool.size_of(ptr, None) == 100 and (v2 == np.arange(50)).all()
    del v2
    assert dev.pool.size_of(ptr, None) is None and books(dev) == BALANCED


def test_teardowns_are_refused_while_a_view_lives(rt, dev):
    a = dev.asarray(np.arange(10.0))
    v = np.from_dlpack(a)
    with pytest.raises(ExportedMemoryError) as ei:
        dev.deinit()
    assert ei.value.views == 1 and isinstance(ei.value, LifecycleError)
    assert dev.initialized and (a.get() == np.arange(10.0)).all()
    with pytest.raises(ExportedMemoryError):
        rt.close()
    assert not rt.closed and dev.initialized and (v == np.arange(10.0)).all()
    cycle = [v]
    cycle.append(cycle)
    del v, cycle                                # only a reference cycle holds the view now
    assert dev.exported_views == 1
    leaks = rt.close()                          # collects it, then tears down
    assert rt.closed and dev.exported_views == 0 and leaks == {dev.label: (1, 80)}


def test_a_with_block_that_raises_keeps_its_own_exception_over_live_views():
    """``with Runtime():`` ending by an exception while a view lives: the block's
    exception propagates (not the close's refusal); the runtime stays open until the
    view is gone."""
    with pytest.raises(KeyError, match="mine"):
        with osh.Runtime(bundled=True) as r:
            v = np.from_dlpack(r.devices[0].asarray(np.arange(3.0)))
            raise KeyError("mine")
    assert not r.closed and (v == np.arange(3.0)).all()
    with pytest.raises(ExportedMemoryError):
        with osh.Runtime(bundled=True) as r2:
            v2 = np.from_dlpack(r2.devices[0].asarray(np.arange(3.0)))
    assert not r2.closed
    del v, v2
    r.close()
    r2.close()
    assert r.closed and r2.closed


def test_device_closed_while_an_array_lives(rt, dev):
    a = dev.asarray(np.arange(10.0))
    rt.close()
    for use in (a.get, a.__dlpack__, lambda: np.asarray(a), lambda: a.set(np.zeros(10)),
                a.free, lambda: np.from_dlpack(a)):
        with pytest.raises(LifecycleError):
            use()
    hook_calls = []
    old, sys.unraisablehook = sys.unraisablehook, hook_calls.append
    try:
        del a
        gc.collect()
    finally:
        sys.unraisablehook = old
    assert hook_calls == []


def test_an_array_of_a_deinitialised_device_never_frees_the_new_pool_s_blocks(dev):
    old = dev.asarray(np.arange(16, dtype=np.int64))
    old_ptr = old.ptr
    dev.deinit()
    with pytest.raises(LifecycleError, match="torn down"):
        old.get()
    assert not dev.initialized                  # the refusal did not initialise it again
    new = [dev.empty(16, np.int64) for _ in range(4)]   # malloc may hand out old_ptr again
    del old
    gc.collect()
    for n in new:
        assert dev.pool.size_of(n.ptr, None) == 128 and (n.ptr != old_ptr or n.freed is False)
    assert dev.pool.stats.live_blocks == 4


def test_a_device_array_or_a_list_given_as_host_buffer_is_named(dev):
    """``Device.submit(p, devarray)`` / ``retrieve(devarray, p)`` and a list said only
    "memoryview: a bytes-like object is required, not 'DeviceArray'"; the message now
    names what a host buffer is and, for a device array, how to copy it."""
    a = dev.asarray(np.arange(4.0))
    p = dev.alloc(32)
    with pytest.raises(TypeError, match=r"^expected a buffer object .*not DeviceArray "
                       r"\(a device array: .*get\(\)/set\(\), or give its \.ptr"):
        dev.submit(p, a)
    with pytest.raises(TypeError, match="not DeviceArray"):
        dev.retrieve(a, p)
    with pytest.raises(TypeError, match=r"^expected a buffer object .*not list$"):
        dev.submit(p, [1.0, 2.0])
    dev.free(p)
    del a
    assert books(dev) == BALANCED


def test_device_free_of_an_array_s_block_is_refused(dev):
    """``Device.free(a.ptr)`` would leave the array (and its views) dangling."""
    a = dev.asarray(np.arange(8.0))
    v = np.from_dlpack(a)
    with pytest.raises(osh.UnknownPointerError, match="DeviceArray.free"):
        dev.free(a.ptr)
    assert (v == np.arange(8.0)).all()
    del v, a
    assert books(dev) == BALANCED


def test_after_a_deinit_the_addresses_of_dead_arrays_are_plain_pointers_again(dev):
    old = [dev.empty(32, np.int8) for _ in range(8)]
    dev.deinit()
    ptrs = [dev.alloc(32) for _ in range(8)]       # malloc may reuse the old addresses
    for p in ptrs:
        dev.free(p)                                 # never refused as an array's block
    del old
    gc.collect()
    assert books(dev) == BALANCED


def test_cycle_collected_arrays_are_freed_at_the_next_array_call(dev):
    a = dev.asarray(np.arange(10.0))
    ptr = a.ptr
    cycle = [a]
    cycle.append(cycle)
    del a, cycle
    gc.collect()                                # the finalizer ran inside the collection
    assert dev.pool.size_of(ptr, None) == 80    # put aside, not freed under the collector
    dev.empty(0)
    assert dev.pool.size_of(ptr, None) is None and books(dev) == BALANCED


# -- threads ---------------------------------------------------------------------------------------

def test_frees_from_many_threads_balance_the_books(dev):
    """Threads make arrays, export views, free explicitly and by dropping them, and
    race on frees of shared arrays (explicit frees of one array from several threads,
    views ending in other threads); every block is freed exactly once."""
    shared = [dev.asarray(np.full(64, i, dtype=np.int32)) for i in range(32)]
    views = [np.from_dlpack(a) for a in shared[::2]]
    barrier = threading.Barrier(8)

    def work(i):
        rng = random.Random(i)
        barrier.wait()
        for k in range(150):
            a = dev.asarray(np.arange(rng.randrange(1, 300), dtype=np.float32))
            v = np.from_dlpack(a) if k % 3 == 0 else None
            if k % 2:
                a.free()
            del a
            if v is not None:
                assert v[0] == 0.0
                del v
            s = shared[rng.randrange(len(shared))]
            if rng.random() < 0.2:
                s.free()
        for s in shared[i::8]:
            s.free()

    run_threads(8, work)
    assert all(s.freed for s in shared)
    assert books(dev)["live_blocks"] == len(views)      # the views hold theirs
    del views
    gc.collect()
    assert books(dev) == BALANCED and dev.exported_views == 0
    del shared


def test_a_close_racing_users_of_an_array_never_leaves_a_dangling_view(rt, dev):
    """One thread makes views, copies back and frees while the main thread closes the
    runtime: each use either works or raises LifecycleError; a close that finds a
    view refuses (ExportedMemoryError) and tears nothing down; every view made reads
    the data it was made from."""
    stop = threading.Event()
    seen = {"ok": 0, "refused": 0}
    errors = []

    def user():
        while not stop.is_set():
            try:
                a = dev.asarray(np.arange(256.0))
                v = np.from_dlpack(a)
                if not (v == np.arange(256.0)).all() or not (a.get() == v).all():
                    errors.append("a view read other data")
                del v
                a.free()
                seen["ok"] += 1
            except LifecycleError:
                seen["refused"] += 1
                if rt.closed:
                    return

    t = threading.Thread(target=user)
    t.start()
    while seen["ok"] < 20 and t.is_alive():
        threading.Event().wait(0.001)
    refusals = 0
    while not rt.closed:
        try:
            rt.close()
        except ExportedMemoryError:
            refusals += 1
    stop.set()
    t.join(60)
    assert not t.is_alive() and errors == []
    assert dev.exported_views == 0 and seen["ok"] >= 20


def test_the_pool_books_balance_after_arrays_die(dev):
    dev.init()
    before = dev.pool.stats
    arrays = [dev.empty((i + 1, 8), np.float64) for i in range(20)]
    mid = dev.pool.stats
    assert mid.bytes_in_use - before.bytes_in_use == sum(64 * (i + 1) for i in range(20))
    assert mid.live_blocks == 20
    views = [np.from_dlpack(a) for a in arrays[:5]]
    del arrays
    assert dev.pool.stats.live_blocks == 5
    del views
    s = dev.pool.stats
    assert s.bytes_in_use == 0 and s.live_blocks == 0
    assert s.backend_allocs - s.backend_frees == s.cached_blocks


def test_repr_and_len(dev):
    a = dev.empty((3, 2), np.int8)
    assert len(a) == 3 and "shape=(3, 2)" in repr(a) and "int8" in repr(a)
    with pytest.raises(TypeError):
        len(dev.empty((), np.int8))
    assert isinstance(a, DeviceArray) and a.device is dev and a.host_memory
