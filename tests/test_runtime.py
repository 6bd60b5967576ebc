"""The runtime end to end on real plugins and the bundled plugin (issue 2)."""

from __future__ import annotations

import ctypes
import threading
from array import array

import pytest

import offload_shim as osh
from offload_shim.plugins.loader import load_plugin

from helpers import run_child

N = 257


def _views(request):
    return request.param


PLUGIN_VIEWS = ["bundled-llvm", "bundled-gomp", "bundled-liboffload", "nextgen16", "classic16",
                "llvm14"]


@pytest.fixture(params=PLUGIN_VIEWS)
def plugin(request, bundled_path):
    kind = request.param
    if kind == "bundled-llvm":
        return load_plugin(bundled_path)
    if kind == "bundled-gomp":
        return load_plugin(bundled_path, abi="gomp")
    if kind == "bundled-liboffload":
        return load_plugin(bundled_path, abi="liboffload")
    return load_plugin(request.getfixturevalue(kind))


def _roundtrip(dev, img=None):
    a_h = array("d", (float(i) for i in range(N)))
    b_h = array("d", (0.5 * i for i in range(N)))
    a, b, c = (dev.alloc(8 * N) for _ in range(3))
    dev.submit(a, a_h)
    dev.submit(b, b_h)
    dev.launch("vec_add", [a, b, c, N])
    out = array("d", bytes(8 * N))
    dev.retrieve(out, c)
    assert list(out) == [1.5 * i for i in range(N)]
    dev.launch("increment", [c, N])          # a double's bits + 1: check by retrieving longs
    longs = array("q", bytes(8 * N))
    dev.retrieve(longs, c)
    ref = array("q", array("d", [1.5 * i for i in range(N)]).tobytes())
    assert list(longs) == [x + 1 for x in ref]
    g = dev.global_address("osh_scale")
    val = array("d", [0.0])
    dev.retrieve(val, g)
    assert val[0] == 3.0
    if img is not None:
        assert dev.translate(img.host_address("osh_scale")) == g
    for p in (a, b, c):
        dev.free(p)


def test_end_to_end(plugin):
    with osh.Runtime([plugin]) as rt:
        img = osh.OffloadImage.sample()
        rt.register_image(img)
        dev = rt.devices[0]
        assert rt.pending(dev) == [img] and not dev.initialized
        _roundtrip(dev, img)
        assert rt.pending(dev) == []
        rt.unregister_image(img)
        assert len(dev.address_map) == 0 and dev.loaded_images == []
        with pytest.raises(osh.KernelNotFoundError):
            dev.launch("vec_add", [0, 0, 0, 0])


def test_register_after_init_loads_at_once(plugin):
    with osh.Runtime([plugin]) as rt:
        dev = rt.devices[1]
        dev.init()
        assert dev.loaded_images == []
        img = osh.OffloadImage.sample()
        rt.register_image(img)
        assert dev.loaded_images == [img] and rt.pending(dev) == []
        # the other devices are not initialised: the image is pending there
        assert img in rt.pending(rt.devices[0])
        _roundtrip(dev, img)


def test_a_load_that_fails_half_way_leaves_nothing_behind(bundled_path, ctl):
    """An image whose load fails after the plugin took it (here: its last host
    entry lies on a host range another image maps) raises, is unloaded from the
    plugin again, and leaves none of its host ranges in the device's map; the
    image loaded before is untouched."""
    gomp = load_plugin(bundled_path, abi="gomp")
    with osh.Runtime([gomp]) as rt:
        i1 = osh.OffloadImage.sample()
        rt.register_image(i1)
        dev = rt.devices[0]
        dev.init()
        hosts = i1.host_addresses()
        keep = ctypes.create_string_buffer(64 * len(hosts))
        h2 = [ctypes.addressof(keep) + 64 * k for k in range(len(hosts) - 1)] + [hosts[-1]]
        i2 = osh.OffloadImage(i1.data, i1.entries, host_addresses=h2, trusted=True)
        n_load = ctl.call_count("GOMP_OFFLOAD_load_image")
        n_unload = ctl.call_count("GOMP_OFFLOAD_unload_image")
        with pytest.raises(ValueError, match="already mapped"):
            rt.register_image(i2)
        assert ctl.call_count("GOMP_OFFLOAD_load_image") == n_load + 1
        assert ctl.call_count("GOMP_OFFLOAD_unload_image") == n_unload + 1
        assert dev.loaded_images == [i1]
        for h in h2[:-1]:
            with pytest.raises(osh.NotMappedError):
                dev.translate(h)
        assert dev.translate(hosts[-1]) == dev.global_address("osh_scale")


@pytest.mark.parametrize("unload_fails", [False, True])
def test_an_init_whose_image_load_fails_leaves_the_device_clean(bundled_path, ctl,
                                                                unload_fails):
    """An image that fails to load during a lazy init (the second of two pending
    images) fails the init with the load's error, also when unloading the first
    image again fails; the device is left uninitialised with no image loaded and
    no pool, and was released."""
    gomp = load_plugin(bundled_path, abi="gomp")
    with osh.Runtime([gomp]) as rt:
        dev = rt.devices[0]
        i1 = osh.OffloadImage.sample()
        hosts = i1.host_addresses()
        keep = ctypes.create_string_buffer(64 * len(hosts))
        h2 = [ctypes.addressof(keep) + 64 * k for k in range(len(hosts) - 1)] + [hosts[-1]]
        i2 = osh.OffloadImage(i1.data, i1.entries, host_addresses=h2, trusted=True)
        rt.register_image(i1)
        rt.register_image(i2)                   # pending: nothing is loaded yet
        n_unload = ctl.call_count("GOMP_OFFLOAD_unload_image")
        n_fini = ctl.call_count("GOMP_OFFLOAD_fini_device")
        if unload_fails:                        # the 1st unload is i2's own, the 2nd i1's
            ctl.fail_nth("GOMP_OFFLOAD_unload_image", 2)
        try:
            with pytest.raises(ValueError, match="already mapped"):
                dev.init()
        finally:
            ctl.fail_nth("GOMP_OFFLOAD_unload_image", 0)
        assert ctl.call_count("GOMP_OFFLOAD_unload_image") == n_unload + 2
        assert ctl.call_count("GOMP_OFFLOAD_fini_device") == n_fini + 1
        assert dev.state is osh.DeviceState.UNINIT and not dev.initialized
        assert dev.loaded_images == [] and dev.pool is None and dev.allocations == (0, 0)
        rt.unregister_image(i2)


def test_close_of_a_device_never_initialised(bundled_path):
    """``shutdown`` of a device that was never initialised returns (0, 0) and
    closes it: it never initialises afterwards."""
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        assert dev.shutdown() == (0, 0)
        assert dev.state is osh.DeviceState.CLOSED
        with pytest.raises(osh.LifecycleError):
            dev.alloc(8)
        assert dev.state is osh.DeviceState.CLOSED


def test_failing_unloads_are_raised_and_unloaded_globals_are_gone(bundled_path, ctl):
    """A failing ``unload_image`` is raised by ``deinit`` (after the device was
    released) and by ``unregister_image``; once an image is unloaded, its globals'
    device addresses are no longer valid copy targets."""
    gomp = load_plugin(bundled_path, abi="gomp")
    with osh.Runtime([gomp]) as rt:
        img = osh.OffloadImage.sample()
        rt.register_image(img)
        dev = rt.devices[0]
        g = dev.global_address("osh_scale")
        n_fini = ctl.call_count("GOMP_OFFLOAD_fini_device")
        ctl.fail_nth("GOMP_OFFLOAD_unload_image", 1)
        try:
            with pytest.raises(osh.PluginCallError):
                dev.deinit()
        finally:
            ctl.fail_nth("GOMP_OFFLOAD_unload_image", 0)
        assert dev.state is osh.DeviceState.UNINIT
        assert ctl.call_count("GOMP_OFFLOAD_fini_device") == n_fini + 1
        g = dev.global_address("osh_scale")     # re-initialised, loaded again
        dev.submit(g, array("d", [2.0]))
        ctl.fail_nth("GOMP_OFFLOAD_unload_image", 1)
        try:
            with pytest.raises(osh.PluginCallError):
                rt.unregister_image(img)
        finally:
            ctl.fail_nth("GOMP_OFFLOAD_unload_image", 0)
        assert dev.loaded_images == []
        with pytest.raises(osh.UnknownPointerError):
            dev.submit(g, array("d", [2.0]))
        with pytest.raises(osh.UnknownPointerError):
            dev.submit_raw(g, 0, 8)


def test_register_twice_is_noop_and_unregister_unknown_raises(bundled_path):
    with osh.Runtime([bundled_path]) as rt:
        img = osh.OffloadImage.sample()
        rt.register_image(img)
        rt.register_image(img)
        assert rt.images == [img]
        rt.unregister_image(img)
        with pytest.raises(osh.ImageNotRegisteredError):
            rt.unregister_image(img)


def test_unregister_unloads_from_plugin_and_pending(bundled_path, ctl):
    gomp = load_plugin(bundled_path, abi="gomp")
    with osh.Runtime([gomp]) as rt:
        img = osh.OffloadImage.sample()
        rt.register_image(img)
        d0, d1 = rt.devices[0], rt.devices[1]
        d0.init()
        n_unload = ctl.call_count("GOMP_OFFLOAD_unload_image")
        rt.unregister_image(img)
        assert ctl.call_count("GOMP_OFFLOAD_unload_image") == n_unload + 1   # d0 only
        assert rt.pending(d1) == [] and len(d0.address_map) == 0
        with pytest.raises(KeyError):
            d0.translate(img.host_address("osh_scale"))
        d1.init()
        assert d1.loaded_images == []              # dropped from the pending list


def test_two_images_accumulate(bundled_path):
    with osh.Runtime([bundled_path]) as rt:
        i1, i2 = osh.OffloadImage.sample(), osh.OffloadImage.sample()
        rt.register_image(i1)
        dev = rt.devices[0]
        dev.init()
        rt.register_image(i2)
        assert dev.loaded_images == [i1, i2]
        with pytest.raises(ValueError, match="several images"):
            dev.launch("increment", [0, 0])
        p = dev.alloc(8)
        dev.submit(p, array("q", [41]))
        dev.launch("increment", [p, 1], image=i2)
        out = array("q", [0])
        dev.retrieve(out, p)
        assert out[0] == 42
        # globals are per image copy
        assert dev.global_address("osh_scale", i1) != dev.global_address("osh_scale", i2)
        for img in (i1, i2):
            assert dev.global_address("osh_scale", img) == dev.translate(
                img.host_address("osh_scale"))
        # image= picks the image whose kernel runs: each reads its own global
        dev.submit(dev.global_address("osh_scale", i1), array("d", [2.0]))
        dev.submit(dev.global_address("osh_scale", i2), array("d", [3.0]))
        y = dev.alloc(8)
        dev.submit(y, array("d", [1.0]))
        got = array("d", [0.0])
        dev.launch("scale_by_global", [y, 1], image=i2)
        dev.retrieve(got, y)
        assert got[0] == 3.0
        dev.launch("scale_by_global", [y, 1], image=i1)
        dev.retrieve(got, y)
        assert got[0] == 6.0
        with pytest.raises(osh.KernelNotFoundError, match="image 'libosh_sample_kernels.so' "
                           "has no kernel 'no_such_kernel' \\(its kernels: vec_add, axpy"):
            dev.launch("no_such_kernel", [], image=i1)
        # an image this device has not loaded is named as such (the message once said
        # "no loaded image has a kernel 'increment' (kernels: ..., increment, ...)")
        with pytest.raises(osh.KernelNotFoundError, match="is not loaded on this device"):
            dev.launch("increment", [p, 1], image=osh.OffloadImage.sample())
        # offsets are added to the arguments (TgtOffsets): n = 0 + 1
        dev.launch("increment", [p, 0], image=i1, offsets=[0, 1])
        # unloading one image keeps the other's kernels of the same name
        rt.unregister_image(i1)
        dev.launch("increment", [p, 1])
        dev.retrieve(out, p)
        assert out[0] == 44
        dev.free(p)
        dev.free(y)


def test_init_exactly_once_under_8_threads(bundled_path, ctl):
    """llvm-project #49284: 8 threads first-touch the same device and alloc/free at once."""
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[2]
        before = ctl.call_count("__tgt_rtl_init_device")
        barrier = threading.Barrier(8)
        errors, ptrs = [], []

        def worker(k):
            try:
                barrier.wait()
                mine = [dev.alloc(16 + 8 * (i % 5)) for i in range(200)]
                ptrs.extend(mine)
                for p in mine:
                    dev.free(p)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors
        assert ctl.call_count("__tgt_rtl_init_device") == before + 1
        assert dev.init_count == 1
        assert dev.allocations == (0, 0)


def test_plugin_calls_only_at_the_right_time(bundled_path, ctl):
    """llvm-project #74507: creating a runtime calls nothing; listing devices only
    init_plugin + number_of_devices; first use initialises the device."""
    names = ["__tgt_rtl_init_plugin", "__tgt_rtl_number_of_devices", "__tgt_rtl_init_device",
             "__tgt_rtl_deinit_device", "__tgt_rtl_deinit_plugin", "__tgt_rtl_init_requires"]
    c0 = ctl.call_counts(names)
    rt = osh.Runtime([bundled_path])
    assert ctl.call_counts(names) == c0
    devs = rt.devices
    c1 = ctl.call_counts(names)
    delta = {k: c1[k] - c0[k] for k in names}
    assert delta == {"__tgt_rtl_init_plugin": 1, "__tgt_rtl_number_of_devices": 1,
                     "__tgt_rtl_init_device": 0, "__tgt_rtl_deinit_device": 0,
                     "__tgt_rtl_deinit_plugin": 0, "__tgt_rtl_init_requires": 0}
    devs[0].alloc(0)                                  # first use initialises
    c2 = ctl.call_counts(names)
    assert c2["__tgt_rtl_init_requires"] - c1["__tgt_rtl_init_requires"] == 1
    assert c2["__tgt_rtl_init_device"] - c1["__tgt_rtl_init_device"] == 1
    rt.close()
    c3 = ctl.call_counts(names)
    assert c3["__tgt_rtl_deinit_device"] - c2["__tgt_rtl_deinit_device"] == 1
    assert c3["__tgt_rtl_deinit_plugin"] - c2["__tgt_rtl_deinit_plugin"] == 1


def test_nothing_reaches_the_plugin_after_close(bundled_path, ctl):
    rt = osh.Runtime([bundled_path])
    img = osh.OffloadImage.sample()
    rt.register_image(img)
    dev = rt.devices[0]
    p = dev.alloc(64)
    dev.free(p)
    rt.close()
    counts = ctl.call_counts()
    for call in (lambda: dev.alloc(8), lambda: dev.free(p), lambda: dev.launch("increment", [0, 0]),
                 lambda: dev.submit(p, bytearray(8)), lambda: dev.retrieve(bytearray(8), p),
                 lambda: dev.init(), lambda: rt.register_image(img), lambda: rt.devices):
        with pytest.raises((osh.LifecycleError, osh.UnknownPointerError)):
            call()
    assert ctl.call_counts() == counts
    assert rt.close() == {}                           # idempotent


def _held(call, entered, go):
    """``call`` that first sets ``entered`` and then waits for ``go`` (a racing test's pause)."""
    def held(*args, **kw):
        entered.set()
        assert go.wait(60)
        return call(*args, **kw)
    return held


def test_free_racing_close_is_a_free_after_close(bundled_path, ctl):
    """A free in one thread while ``Runtime.close()`` in another is draining the device:
    LifecycleError "free after close" (as after the close), never UnknownPointerError;
    the drain frees each block once, the racing free reaches no plugin.  Deterministic:
    the drain's first ``data_delete`` waits until the racing frees are done."""
    plugin = load_plugin(bundled_path)
    rt = osh.Runtime([plugin])
    dev = rt.devices[0]
    held = [dev.alloc(64), dev.alloc(20000)]          # pooled and above the threshold
    in_drain, go = threading.Event(), threading.Event()
    plugin.free = _held(plugin.free, in_drain, go)
    closer = threading.Thread(target=rt.close)
    closer.start()
    try:
        assert in_drain.wait(60)
        deletes = ctl.call_count("__tgt_rtl_data_delete")
        for p in held:
            with pytest.raises(osh.LifecycleError, match="free after close"):
                dev.free(p)
    finally:
        go.set()
        closer.join(60)
        del plugin.free
    assert not closer.is_alive()
    assert ctl.call_count("__tgt_rtl_data_delete") - deletes == len(held)   # the drain's
    for p in held:
        with pytest.raises(osh.LifecycleError, match="free after close"):
            dev.free(p)
    assert ctl.call_count("__tgt_rtl_data_delete") - deletes == len(held)


def test_free_that_reaches_the_pool_after_a_racing_close_drained_it(bundled_path):
    """The other order of the race above: the free passed the device's state check before
    ``Runtime.close()`` began, and reaches the pool after the close's drain closed it, while
    the teardown is still running (held here in ``release_device``).  Still a LifecycleError
    "free after close", not an unknown pointer."""
    plugin = load_plugin(bundled_path)
    rt = osh.Runtime([plugin])
    dev = rt.devices[0]
    p = dev.alloc(64)
    drained, go = threading.Event(), threading.Event()
    closer = threading.Thread(target=rt.close)
    pool = dev._pool
    tokens = pool._lockq

    class LateLock:
        """The pool's lock token deque, whose first ``pop`` (the free taking the pool's
        lock: the pool's Python free path, as the C one refuses a stand-in) first lets the close
        run up to ``release_device``."""
        def pop(self):
            pool._lockq = tokens
            closer.start()
            assert drained.wait(60) and pool.closed
            return tokens.pop()

        def append(self, token):
            tokens.append(token)

    plugin.release_device = _held(plugin.release_device, drained, go)
    pool._lockq = LateLock()
    try:
        with pytest.raises(osh.LifecycleError, match="free after close"):
            dev.free(p)
    finally:
        go.set()
        closer.join(60)
        del plugin.release_device
    assert not closer.is_alive()


def test_allocation_held_at_close_is_reported_and_freed_before_deinit(bundled_path, ctl):
    rt = osh.Runtime([bundled_path])
    dev = rt.devices[0]
    leaked_before = ctl.leaked_allocs()     # process-wide count, never reset by the plugin
    frees_before = ctl.call_count("__tgt_rtl_data_delete")
    dev.alloc(100)
    dev.alloc(20000)
    leaks = rt.close()
    assert leaks == {dev.label: (2, 20100)}
    # freed by the runtime through data_delete, none left for deinit_device to reclaim
    assert ctl.leaked_allocs() == leaked_before
    assert ctl.call_count("__tgt_rtl_data_delete") - frees_before == 2
    assert ctl.live_allocs() == 0


def test_unknown_pointer_and_double_free_refused_before_plugin(bundled_path, ctl):
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        p = dev.alloc(32)
        n = ctl.call_count("__tgt_rtl_data_delete")
        with pytest.raises(osh.UnknownPointerError):
            dev.free(p + 8)
        dev.free(p)
        with pytest.raises(osh.UnknownPointerError):
            dev.free(p)
        with pytest.raises(osh.UnknownPointerError):
            dev.submit(0xDEAD000, bytearray(8))
        q = dev.alloc(16)
        with pytest.raises(ValueError, match="exceeds"):
            dev.submit(q, bytearray(32))
        dev.free(q)
        assert ctl.call_count("__tgt_rtl_data_delete") - n <= 2


def test_bad_inputs(bundled_path):
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        with pytest.raises(ValueError):
            dev.alloc(-1)
        with pytest.raises(TypeError):
            dev.alloc(1.5)
        assert dev.alloc(0) == 0
        with pytest.raises(TypeError):
            dev.submit(dev.alloc(8) or 0, 12345)
        with pytest.raises(osh.KernelNotFoundError):
            dev.launch("no_such_kernel", [])
        with pytest.raises(TypeError):
            rt.register_image(b"\x7fELF")
        rt.register_image(img := osh.OffloadImage.sample())
        with pytest.raises(ValueError, match="takes 4 arguments"):
            dev.launch("vec_add", [1, 2])
        rt.unregister_image(img)


def test_corrupt_images():
    with pytest.raises(osh.InvalidImageError):
        osh.OffloadImage(b"not an elf at all", [osh.HostEntry("k")])
    with pytest.raises(osh.InvalidImageError):
        osh.OffloadImage(b"\x7fELF\x02\x01\x01" + b"\0" * 9 + b"\xff" * 100, [osh.HostEntry("k")])


def test_a_global_entry_larger_than_its_symbol_is_refused(bundled_path):
    """An entry list written by hand that declares a global larger than the image's
    symbol (``osh_scale`` holds 8 bytes) was accepted: ``submit`` to the global then
    wrote the declared size past it and killed the interpreter (SIGSEGV with 16 MiB).
    Refused when the image is built (InvalidImageError naming both sizes); a smaller
    size, a flagged entry and a trusted image (compiler tables) are left alone."""
    sample = osh.OffloadImage.sample()
    assert [(e.name, e.size) for e in sample.entries if e.size] == [("osh_scale", 8)]

    def with_size(n, flags=0):
        return [osh.HostEntry(e.name, n if e.size else 0, flags if e.size else 0,
                              e.num_args) for e in sample.entries]
    with pytest.raises(osh.InvalidImageError, match="'osh_scale' declares 16777216 bytes "
                       "but the image's symbol 'osh_scale' holds 8"):
        osh.OffloadImage(sample.data, with_size(1 << 24))
    with pytest.raises(osh.InvalidImageError, match="declares 9 bytes"):
        osh.OffloadImage(sample.data, with_size(9))
    osh.OffloadImage(sample.data, with_size(1 << 24), trusted=True)
    osh.OffloadImage(sample.data, with_size(16, flags=1))
    small = osh.OffloadImage(sample.data, with_size(4))
    with osh.Runtime([bundled_path]) as rt:
        rt.register_image(small)
        dev = rt.devices[0]
        g = dev.global_address("osh_scale")
        with pytest.raises(ValueError, match="exceeds the 4-byte block"):
            dev.submit(g, bytearray(8))
        dev.submit(g, bytearray(4))


def test_truncated_image_refused_in_python(sample_path):
    data = open(sample_path, "rb").read()
    with pytest.raises(osh.InvalidImageError, match="truncated"):
        osh.OffloadImage(data[:2000], osh.OffloadImage.sample().entries, name="truncated")


def _with_broken_dynamic_section(data: bytes) -> bytes:
    import io
    from elftools.elf.elffile import ELFFile
    sec = ELFFile(io.BytesIO(data)).get_section_by_name(".dynamic")
    off, size = sec["sh_offset"], sec["sh_size"]
    return data[:off] + b"\xa5" * size + data[off + size:]


def test_corrupt_dynamic_table_refused_in_python(sample_path):
    """glibc's dlopen trusts PT_DYNAMIC: this image segfaults the plugin's
    load_binary (checked in a child process in test_misuse), so Python refuses it."""
    data = _with_broken_dynamic_section(open(sample_path, "rb").read())
    with pytest.raises(osh.InvalidImageError, match="dynamic table"):
        osh.OffloadImage(data, osh.OffloadImage.sample().entries, name="broken")


def test_unloadable_image_rejected_by_plugin(bundled_path, sample_path):
    data = bytearray(open(sample_path, "rb").read())
    data[16:18] = (1).to_bytes(2, "little")           # e_type = ET_REL: dlopen refuses it
    img = osh.OffloadImage(bytes(data), osh.OffloadImage.sample().entries, name="broken")
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        dev.init()
        with pytest.raises(osh.InvalidImageError, match="broken"):
            rt.register_image(img)
        assert rt.images == [] and dev.loaded_images == []


def test_image_for_another_machine_is_refused(bundled_path, sample_path):
    data = bytearray(open(sample_path, "rb").read())
    data[18:20] = (183).to_bytes(2, "little")         # EM_AARCH64
    img = osh.OffloadImage(bytes(data), osh.OffloadImage.sample().entries, name="aarch64")
    with osh.Runtime([bundled_path]) as rt:
        with pytest.raises(osh.InvalidImageError, match="no plugin"):
            rt.register_image(img)
        assert rt.images == []


def test_image_entry_missing_from_image(bundled_path, sample_path):
    entries = osh.OffloadImage.sample().entries + [osh.HostEntry("not_there")]
    img = osh.OffloadImage(open(sample_path, "rb").read(), entries, name="extra")
    with osh.Runtime([bundled_path]) as rt:
        rt.register_image(img)                # pending: nothing initialised yet
        dev = rt.devices[0]
        with pytest.raises(osh.InvalidImageError, match="not_there"):
            dev.init()
        assert not dev.initialized            # nothing half set up
        rt.unregister_image(img)
        dev.init()                            # and the device still works


def test_table_mismatch_B6(bundled_path, ctl):
    """GCC PR 68463: a plugin returns one entry fewer than the host table."""
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        dev.init()
        ctl.set_table_shortfall(1)
        try:
            with pytest.raises(osh.TableMismatchError) as ei:
                rt.register_image(osh.OffloadImage.sample())
        finally:
            ctl.set_table_shortfall(0)
        assert (ei.value.expected, ei.value.got) == (5, 4)
        assert "expected 5" in str(ei.value) and "have 4" in str(ei.value)
        assert rt.images == []


def test_failed_init_then_close_B3(bundled_path, ctl):
    """llvm-project #148615: init_device fails; close must not deinit what never initialised."""
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[3]
        ctl.fail_nth("__tgt_rtl_init_device", 1)
        with pytest.raises(osh.DeviceInitError):
            dev.alloc(8)
        with pytest.raises(osh.DeviceInitError):        # sticky, like LLVM's call_once
            dev.alloc(8)
        n = ctl.call_count("__tgt_rtl_deinit_device")
    assert ctl.call_count("__tgt_rtl_deinit_device") == n


def test_close_without_any_init_B3(bundled_path, ctl):
    names = ["__tgt_rtl_deinit_device", "__tgt_rtl_deinit_plugin", "__tgt_rtl_init_plugin"]
    c0 = ctl.call_counts(names)
    osh.Runtime([bundled_path]).close()
    assert ctl.call_counts(names) == c0                 # nothing was initialised at all


def test_shared_plugin_survives_other_runtime_close_B10(bundled_path, nextgen16):
    for path in (bundled_path, nextgen16):
        rt1, rt2 = osh.Runtime([path]), osh.Runtime([path])
        img1, img2 = osh.OffloadImage.sample(), osh.OffloadImage.sample()
        rt1.register_image(img1)
        rt2.register_image(img2)
        _roundtrip(rt1.devices[0])
        _roundtrip(rt2.devices[0])
        rt1.close()
        _roundtrip(rt2.devices[0])                    # still works: plugin not deinitialised
        rt2.close()


def test_reopen_after_close(bundled_path):
    for _ in range(3):
        with osh.Runtime([bundled_path]) as rt:
            rt.register_image(osh.OffloadImage.sample())
            _roundtrip(rt.devices[0])


def test_explicit_deinit_then_reuse(bundled_path, ctl):
    with osh.Runtime([bundled_path]) as rt:
        img = osh.OffloadImage.sample()
        rt.register_image(img)
        dev = rt.devices[0]
        p = dev.alloc(40)
        assert dev.deinit() == (1, 40)
        assert not dev.initialized and rt.pending(dev) == [img]
        with pytest.raises(osh.LifecycleError):
            dev.deinit()
        _roundtrip(dev)                               # re-initialises, reloads the image
        assert dev.init_count == 2


def test_atexit_teardown_in_order_B8(bundled_path):
    """RMM #85, libgomp gomp_target_fini: buffers kept in module globals, interpreter exits: the atexit hook
    drains, unloads, deinits; nothing reaches the plugin after deinit_plugin."""
    r = run_child(f"""
        import atexit
        from offload_shim.hostplugin import HostPluginControl
        ctl = HostPluginControl({bundled_path!r})
        def report():   # registered first, so it runs after offload_shim's hook
            print("deinit_plugin", ctl.call_count("__tgt_rtl_deinit_plugin"),
                  "live", ctl.live_allocs(), "violations", ctl.violation_count(),
                  "plugin_init", ctl.is_plugin_initialized())
        atexit.register(report)
        import offload_shim as osh
        rt = osh.Runtime([{bundled_path!r}])
        rt.register_image(osh.OffloadImage.sample())
        KEEP = [rt.devices[0].alloc(64) for _ in range(5)] + [rt.devices[1].alloc(100000)]
    """)
    assert r.returncode == 0, r.stderr
    assert "deinit_plugin 1 live 0 violations 0 plugin_init False" in r.stdout, r.stdout + r.stderr


def test_copy_never_runs_past_the_host_buffer(bundled_path, ctl):
    """A new user's finding: nbytes larger than the host buffer let the plugin read
    or write past it (heap overflow).  Refused before the plugin is called."""
    with osh.Runtime(bundled_path) as rt:             # one path, not a list
        dev = rt.devices[0]
        a = dev.alloc(1 << 20)
        buf = bytearray(16)
        n_sub, n_ret = ctl.call_count("__tgt_rtl_data_submit"), ctl.call_count("__tgt_rtl_data_retrieve")
        with pytest.raises(ValueError, match="exceeds the host buffer"):
            dev.submit(a, buf, nbytes=1 << 20)
        with pytest.raises(ValueError, match="exceeds the host buffer"):
            dev.retrieve(buf, a, nbytes=17)
        with pytest.raises(TypeError):
            dev.submit(a, buf, nbytes=8.0)
        with pytest.raises(ValueError):
            dev.retrieve(buf, a, offset=-1)
        assert (ctl.call_count("__tgt_rtl_data_submit"), ctl.call_count("__tgt_rtl_data_retrieve")) == (n_sub, n_ret)
        dev.submit(a, buf, nbytes=8)                  # a prefix is fine
        dev.free(a)


class _Int(int):
    """An int subclass (numpy and IntEnum values are ints too): taken as its value."""


def test_copy_offsets_and_sizes_land_where_asked(bundled_path, ctl):
    """``offset`` moves the device side of a copy, both ways; ``nbytes`` equal to the
    host buffer and ``nbytes=0`` are allowed (0 copies nothing); ``offset + nbytes``
    past the block is refused before the plugin; int subclasses count as ints;
    a read-only buffer can be submitted but never retrieved into; the argument an
    error is about is named."""
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        p = dev.alloc(32)
        dev.submit(p, bytes(range(32)))
        dev.submit(p, b"\xaa" * 8, offset=16)
        dev.submit(p, b"\xbb" * 8, offset=_Int(4), nbytes=_Int(4))
        back = bytearray(32)
        dev.retrieve(back, p, nbytes=32)                  # nbytes == the host buffer
        assert back == (bytes(range(4)) + b"\xbb" * 4 + bytes(range(8, 16)) + b"\xaa" * 8
                        + bytes(range(24, 32)))
        part = bytearray(4)
        dev.retrieve(part, p, offset=24)
        assert part == bytes(range(24, 28))
        dev.retrieve(part, _Int(p), offset=_Int(28))
        assert part == bytes(range(28, 32))
        n_sub = ctl.call_count("__tgt_rtl_data_submit")
        n_ret = ctl.call_count("__tgt_rtl_data_retrieve")
        dev.submit(p, bytearray(8), nbytes=0)
        dev.retrieve(part, p, nbytes=0)
        assert part == bytes(range(28, 32))
        with pytest.raises(ValueError, match="exceeds the 32-byte block"):
            dev.retrieve(bytearray(16), p, offset=24)
        with pytest.raises(ValueError, match="exceeds the 32-byte block"):
            dev.submit(p, bytearray(16), offset=24)
        with pytest.raises(TypeError, match="read-only"):
            dev.retrieve(b"\0" * 8, p)
        with pytest.raises(TypeError, match="^offset must be an int"):
            dev.submit(p, bytearray(8), offset=1.0)
        with pytest.raises(TypeError, match="^nbytes must be an int"):
            dev.retrieve(part, p, nbytes=True)
        assert (ctl.call_count("__tgt_rtl_data_submit"),
                ctl.call_count("__tgt_rtl_data_retrieve")) == (n_sub, n_ret)
        dev.free(p)


def test_pointers_are_index_ints_and_free_refuses_other_types(bundled_path, ctl):
    """Device pointers, offsets and sizes take any ``operator.index`` type (a NumPy
    integer works, docs/usage.md "Plugins"), not only ``int`` subclasses; ``free`` of a
    float, str or bool is a TypeError (it once raised "Unknown format code 'x'" for
    1.5 and silently did nothing for 0.0 or ""), with no plugin call; ``free(0)`` and
    ``free(None)`` (NULL) stay no-ops."""
    np = pytest.importorskip("numpy")
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        p = dev.alloc(16)
        dev.submit(np.uint64(p), bytes(range(16)), offset=np.int64(0), nbytes=np.int32(16))
        back = bytearray(8)
        dev.retrieve(back, np.int64(p), offset=np.int64(8))
        assert back == bytes(range(8, 16))
        n_free = ctl.call_count("__tgt_rtl_data_delete")
        for bad in (1.5, 0.0, "", float(p), True):
            with pytest.raises(TypeError, match="^device pointer must be an int"):
                dev.free(bad)
        dev.free(0)
        dev.free(None)
        assert ctl.call_count("__tgt_rtl_data_delete") == n_free
        assert dev.allocations == (1, 16)
        dev.free(np.uint64(p))
        assert dev.allocations == (0, 0)


def test_kernel_arguments_and_host_addresses_are_64_bit_ints(bundled_path):
    """Kernel arguments and offsets may be any value of 64 bits, signed or not
    (-2**63 .. 2**64-1; checked before the kernel is looked up, so an unknown kernel
    shows a value was accepted); a host address to translate is an int (an int
    subclass is its value; a float or bool is a TypeError, not a failed look-up)."""
    with osh.Runtime([bundled_path]) as rt:
        img = osh.OffloadImage.sample()
        rt.register_image(img)
        dev = rt.devices[0]
        lo, hi = -(1 << 63), (1 << 64) - 1
        for args, offsets in (([lo, hi, -1], None), ([0, 0], [lo, hi])):
            with pytest.raises(osh.KernelNotFoundError):
                dev.launch("no_such_kernel", args, offsets=offsets)
        for args, offsets in (([lo - 1], None), ([hi + 1], None), ([0], [lo - 1])):
            with pytest.raises(ValueError, match="does not fit in 64 bits"):
                dev.launch("no_such_kernel", args, offsets=offsets)
        h = img.host_address("osh_scale")
        assert dev.translate(_Int(h)) == dev.translate(h)
        for bad in (float(h), True):
            with pytest.raises(TypeError):
                dev.translate(bad)
        rt.unregister_image(img)


def test_bad_alloc_size_never_initialises_the_device(bundled_path):
    """``alloc`` checks the size before its lazy init: a bad size raises and leaves
    the device uninitialised; 2**63-1 is a valid size (the plugin is asked and
    says out of memory); an int subclass is a size."""
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        for bad, err in ((-1, ValueError), (1 << 63, ValueError), (1.5, TypeError),
                         (True, TypeError), ("8", TypeError)):
            with pytest.raises(err):
                dev.alloc(bad)
            assert not dev.initialized, bad
        with pytest.raises(osh.OutOfDeviceMemoryError):
            dev.alloc((1 << 63) - 1)
        assert dev.initialized
        dev2 = rt.devices[1]
        p = dev2.alloc(_Int(8))
        assert p and dev2.allocations == (1, 8)
        dev2.free(p)


def test_typed_errors_for_lookups_and_arguments(bundled_path):
    with osh.Runtime([bundled_path]) as rt:
        img = osh.OffloadImage.sample()
        rt.register_image(img)
        dev = rt.devices[0]
        with pytest.raises(osh.NotMappedError) as ei:
            dev.global_address("no_such_global")
        assert isinstance(ei.value, KeyError) and isinstance(ei.value, osh.OffloadError)
        with pytest.raises(osh.NotMappedError):
            dev.translate(12345)
        p = dev.alloc(8)
        with pytest.raises(TypeError, match="argument 1"):
            dev.launch("increment", [p, 1.0])
        with pytest.raises(ValueError, match="64 bits"):
            dev.launch("increment", [p, 1 << 64])
        dev.free(p)
    with pytest.raises(osh.LifecycleError):
        dev.free(p)                                    # after close: lifecycle, not "unknown"
    with pytest.raises(osh.LifecycleError):
        dev.translate(img.host_address("osh_scale"))


def test_bad_pool_options_fail_at_construction(bundled_path):
    with pytest.raises(ValueError):
        osh.Runtime([bundled_path], pool={"policy": "bogus"})
    with pytest.raises(TypeError, match=r"^unknown pool option\(s\) \['no_such_option'\] "
                       r"\(options: .*\bpolicy\b.*\bthreshold\b"):
        osh.Runtime([bundled_path], pool={"no_such_option": 1})
    # a policy name where the dict goes once died in dict() ("dictionary update
    # sequence element #0 has length 1; 2 is required"), a ValueError about nothing
    # the caller wrote; MemoryManager.__init__'s own TypeError named no option list
    with pytest.raises(TypeError, match="^pool must be a dict of MemoryManager options"):
        osh.Runtime([bundled_path], pool="binned")
    with pytest.raises(TypeError, match="^pool option names must be str"):
        osh.Runtime([bundled_path], pool={1: 2})
    osh.Runtime([bundled_path], pool={"policy": "binned", "cache_limit": 1 << 20}).close()


def test_plugins_of_one_name_give_their_devices_distinct_labels(classic16, llvm14,
                                                                 bundled_path):
    """The LLVM 16 classic and LLVM 14 x86_64 plugins are both named ``x86_64``: their
    devices were both ``x86_64:0``..., so ``close()``'s leak report (keyed by label)
    kept one of two leaking devices and every message was ambiguous.  Alike names
    get the plugin's generation; a plugin of a unique name keeps its plain label."""
    with osh.Runtime([str(classic16), str(llvm14), bundled_path]) as rt:
        labels = [d.label for d in rt.devices]
        assert len(set(labels)) == len(labels), labels
        assert "x86_64[llvm16-classic]:0" in labels and "x86_64[llvm14]:0" in labels
        assert "osh_hostplugin:0" in labels
        a = rt.device(0, plugin="x86_64")
        b = next(d for d in rt.devices if d.label == "x86_64[llvm14]:0")
        a.alloc(100)
        b.alloc(200)
        report = rt.close()
    assert report == {"x86_64[llvm16-classic]:0": (1, 100), "x86_64[llvm14]:0": (1, 200)}


def test_runtime_dropped_without_close_is_torn_down_at_exit(bundled_path):
    r = run_child(f"""
        import atexit, gc
        from offload_shim.hostplugin import HostPluginControl
        ctl = HostPluginControl({bundled_path!r})
        atexit.register(lambda: print("live", ctl.live_allocs(), "plugin_init",
                                      ctl.is_plugin_initialized()))
        import offload_shim as osh
        def work():
            rt = osh.Runtime([{bundled_path!r}])
            d = rt.devices[0]
            d.alloc(1000); d.alloc(50000)
        work()
        gc.collect()
    """)
    assert r.returncode == 0, r.stderr
    assert "live 0 plugin_init False" in r.stdout, r.stdout + r.stderr


def test_sizes_and_offsets_beyond_64_bits_are_refused(bundled_path, ctl):
    """Second break test: alloc(2**64 + 16) reached the plugin as 16 bytes."""
    with osh.Runtime([bundled_path]) as rt:
        rt.register_image(osh.OffloadImage.sample())
        dev = rt.devices[0]
        n = ctl.call_count("__tgt_rtl_data_alloc")
        for size in (2**64 + 16, 2**63):
            with pytest.raises(ValueError):
                dev.alloc(size)
        assert ctl.call_count("__tgt_rtl_data_alloc") == n
        p = dev.alloc(16)
        with pytest.raises(ValueError, match="offset 1"):
            dev.launch("increment", [p, 1], offsets=[0, 2**70])
        with pytest.raises(TypeError):
            dev.submit(float(p), bytearray(8))
        dev.free(p)


def test_gomp_table_mismatch_leaves_nothing_loaded(bundled_path, ctl):
    with osh.Runtime([bundled_path], abi="gomp") as rt:
        img = osh.OffloadImage.sample()
        dev = rt.devices[0]
        dev.init()
        ctl.set_table_shortfall(1)
        try:
            for _ in range(3):
                with pytest.raises(osh.TableMismatchError):
                    rt.register_image(img)
        finally:
            ctl.set_table_shortfall(0)
        rt.register_image(img)                       # and it loads cleanly afterwards
        assert dev.loaded_images == [img]


@pytest.mark.parametrize("abi", ["llvm", "gomp"])
def test_launch_racing_with_unregister_never_runs_an_unloaded_kernel(bundled_path, ctl, abi):
    """Second break test: on the GOMP view a launch could reach GOMP_OFFLOAD_run after
    the image was unloaded (silently not run).  An unload now waits for launches."""
    with osh.Runtime([bundled_path], abi=abi) as rt:
        img = osh.OffloadImage.sample()
        rt.register_image(img)
        dev = rt.devices[0]
        stop = threading.Event()
        bad, ran = [], [0]

        def launcher():
            p = dev.alloc(8)
            try:
                while not stop.is_set():
                    dev.submit(p, array("q", [0]))
                    try:
                        dev.launch("increment", [p, 1])
                    except osh.KernelNotFoundError:
                        continue
                    out = array("q", [0])
                    dev.retrieve(out, p)
                    if out[0] != 1:
                        bad.append(out[0])
                    ran[0] += 1
            finally:
                dev.free(p)

        ts = [threading.Thread(target=launcher) for _ in range(3)]
        for t in ts:
            t.start()
        for _ in range(150):
            rt.unregister_image(img)
            rt.register_image(img)
        stop.set()
        for t in ts:
            t.join(30)
        assert not bad and ran[0] > 0


def test_mapped_pinning_does_not_deadlock_close_or_deinit(bundled_path):
    """Second break test: submit (pinning under the runtime lock) vs close/deinit/register
    holding locks in the other order hung.  Run in a child with a timeout."""
    r = run_child(f"""
        import threading, time
        import offload_shim as osh
        rt = osh.Runtime([{bundled_path!r}], pinned="mapped")
        img = osh.OffloadImage.sample(); rt.register_image(img)
        dev = rt.devices[0]; stop = time.time() + 1.5; buf = bytearray(4096)
        def sub():
            while time.time() < stop:
                try:
                    a = dev.alloc(4096); dev.submit(a, buf); dev.free(a)
                except osh.OffloadError:
                    pass
        def reg():
            while time.time() < stop:
                rt.unregister_image(img); rt.register_image(img)
        def dein():
            while time.time() < stop:
                try: dev.deinit()
                except osh.LifecycleError: pass
        ts = [threading.Thread(target=f) for f in (sub, sub, reg, dein)]
        [t.start() for t in ts]; [t.join() for t in ts]
        closer = [threading.Thread(target=sub) for _ in range(2)]
        stop = time.time() + 0.5
        [t.start() for t in closer]; time.sleep(0.1); rt.close(); [t.join() for t in closer]
        print("done")
    """, timeout=60)
    assert r.returncode == 0 and "done" in r.stdout, r.stdout + r.stderr


def test_pool_options_checked_at_construction_without_reading_the_environment(
        bundled_path, tmp_path, monkeypatch):
    with pytest.raises(TypeError, match="set by the device"):
        osh.Runtime([bundled_path], pool={"device_label": "x"})
    with pytest.raises(TypeError, match="event_log"):
        osh.Runtime([bundled_path], pool={"event_log": 5})
    with pytest.raises(FileNotFoundError):
        osh.Runtime([bundled_path], pool={"event_log": str(tmp_path / "no" / "log")})
    monkeypatch.setenv("OFFLOAD_SHIM_POOL_DEBUG", "bogus")
    with osh.Runtime([bundled_path], pool={"policy": "binned"}) as rt:   # env read later
        with pytest.raises(ValueError, match="OFFLOAD_SHIM_POOL_DEBUG"):
            rt.devices[0].alloc(8)


# -- found by `make mutation` (docs/testing.md) ------------------------------------------------

def test_pool_options_the_device_sets_itself_are_refused(bundled_path):
    for key in ("poison", "device_label"):
        with pytest.raises(TypeError, match=key):
            osh.Runtime([bundled_path], pool={key: None})


def test_pool_event_log_may_be_a_path_object(bundled_path, tmp_path):
    log = tmp_path / "events.jsonl"
    with osh.Runtime([bundled_path], pool={"event_log": log}) as rt:
        p = rt.devices[0].alloc(64)
        rt.devices[0].free(p)
    assert log.exists()
    with pytest.raises(TypeError, match="event_log"):
        osh.Runtime([bundled_path], pool={"event_log": 42})


def test_a_plugin_judges_an_image_once(bundled_path, ctl):
    img = osh.OffloadImage.sample()
    with osh.Runtime([bundled_path]) as rt:
        n = ctl.call_count("__tgt_rtl_is_valid_binary")
        rt.register_image(img)
        rt.devices[0].init()
        rt.devices[1].init()
        rt.register_image(img)                    # again: a no-op
        assert ctl.call_count("__tgt_rtl_is_valid_binary") - n == 1
        rt.unregister_image(img)


def test_abi_applies_to_the_bundled_plugin_path_only(bundled_path, nextgen16):
    with osh.Runtime([bundled_path], abi="gomp") as rt:
        assert [p.abi for p in rt.plugins] == ["gomp"]
    with osh.Runtime([nextgen16], abi="gomp") as rt:
        assert [p.abi for p in rt.plugins] == ["llvm"]


def test_deinit_whose_pool_drain_fails_still_releases_the_device(bundled_path, ctl, caplog):
    """A backend free that fails while ``deinit`` drains the pool does not stop the
    teardown: the device is still released, then that plugin error is raised
    (not a follow-on error), and no leak warning is made up for it."""
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        dev.alloc(64)                           # still held: drained at deinit
        n_deinit = ctl.call_count("__tgt_rtl_deinit_device")
        ctl.fail_nth("__tgt_rtl_data_delete", 1)
        try:
            with caplog.at_level("INFO", logger="offload_shim"):
                with pytest.raises(osh.PluginCallError):
                    dev.deinit()
        finally:
            ctl.fail_nth("__tgt_rtl_data_delete", 0)
        assert "still held at deinit" not in caplog.text
        assert dev.state is osh.DeviceState.UNINIT
        assert ctl.call_count("__tgt_rtl_deinit_device") == n_deinit + 1
        assert ctl.live_allocs() == 0           # deinit_device freed what the plugin held


def test_allocations_still_held_at_deinit_are_returned_and_logged_at_info(bundled_path,
                                                                          caplog):
    """Memory a caller never freed is freed at teardown and counted in the return value;
    the log record is INFO (Python shows WARNING and above by default; no runtime
    prints a line for it, and under ``offload-shim run`` it must not reach the
    program's stderr)."""
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        dev.alloc(64)
        dev.alloc(100)
        with caplog.at_level("INFO", logger="offload_shim"):
            assert dev.deinit() == (2, 164)
        held = [r for r in caplog.records if "still held at deinit" in r.getMessage()]
        assert [(r.levelname, r.getMessage()) for r in held] == [
            ("INFO", f"{dev.label}: 2 allocation(s), 164 bytes still held at deinit; "
                     "freed before deinit_device")]
        dev.alloc(8)
        caplog.clear()
        with caplog.at_level("INFO", logger="offload_shim"):
            assert rt.close() == {dev.label: (1, 8)}
        assert [r.levelname for r in caplog.records
                if "still held" in r.getMessage()] == ["INFO"]


@pytest.mark.allow_violations
def test_close_finishes_the_teardown_and_raises_the_first_plugin_error(bundled_path, ctl):
    """A failing deinit_device does not stop the teardown (D120089, D130712): the other device and
    the plugin are still torn down, then the first error is raised."""
    rt = osh.Runtime([bundled_path])
    rt.devices[0].init()
    rt.devices[1].init()
    plugin = rt.plugins[0]
    ctl.fail_nth("__tgt_rtl_deinit_device", 1)
    try:
        with pytest.raises(osh.PluginCallError) as ei:
            rt.close()
        assert "deinit_device" in (ei.value.function or "")
    finally:
        ctl.fail_nth("__tgt_rtl_deinit_device", 0)
    assert rt.closed and plugin.users == 0
    assert rt.close() == {}                           # idempotent after the error


def test_discover_refuses_a_native_dir_without_the_bundled_plugin(monkeypatch, tmp_path):
    """An explicit OFFLOAD_SHIM_NATIVE_DIR that holds no bundled plugin is a ValueError
    naming it (docs/usage.md), not a runtime that silently lacks the bundled plugin."""
    monkeypatch.setenv("OFFLOAD_SHIM_NATIVE_DIR", str(tmp_path))
    with pytest.raises(ValueError, match=r"OFFLOAD_SHIM_NATIVE_DIR=.*no libosh_hostplugin\.so"):
        osh.Runtime.discover(host_only=True)
    with osh.Runtime.discover(host_only=True, bundled=False, system=False) as rt:
        assert rt.plugins == [] or all(not p.bundled for p in rt.plugins)


def test_close_refuses_a_user_attached_while_it_collects():
    """Runtime.close() checks its users (RuntimeInUseError) under the lock it tears
    down in: a user attached after a first look (another thread's interpose(rt)
    while close() collected cycles) is not torn down under."""
    rt = osh.Runtime([])
    real = rt._lock

    class Lock:
        """The runtime's lock; the second time close() takes it, another thread has
        attached a user just before."""
        entered = 0

        def __enter__(self):
            Lock.entered += 1
            if Lock.entered == 2:
                t = threading.Thread(target=rt._attach_user,
                                      args=("an active interposer", user))
                t.start()
                t.join()
            return real.__enter__()

        def __exit__(self, *exc):
            return real.__exit__(*exc)

    class User:
        closed = False

        def close(self):
            User.closed = True
            rt._detach_user(self)

    user = User()
    rt._lock = Lock()
    with pytest.raises(osh.RuntimeInUseError):
        rt.close()
    assert not rt.closed
    rt._lock = real
    user.close()
    assert rt.close() == {} and rt.closed
