"""Device calls for the interposer's constructs: several allocations, frees and copies
at once (Device.alloc_many / free_many / submit_many / retrieve_many, Plugin.submit_many
through libosh_batch.so), leased device memory (Device.lease) and prepared launches
(Device.kernel_launcher): each does what the one-by-one calls do, checks what they
check, and refuses to work on memory or kernels that are gone."""

from __future__ import annotations

import ctypes
from array import array

import pytest

import offload_shim as osh
from offload_shim.abi import batch

from conftest import NEXTGEN16


@pytest.fixture(params=["bundled", "nextgen16"])
def dev(request, bundled_path):
    if request.param == "nextgen16":
        if not NEXTGEN16.exists():
            pytest.skip("the LLVM 16 x86_64 nextgen plugin is not installed")
        path = str(NEXTGEN16)
    else:
        path = bundled_path
    with osh.Runtime([path]) as rt:
        img = osh.OffloadImage.sample()
        rt.register_image(img)
        d = rt.devices[0]
        d.init()
        yield d, img
        rt.unregister_image(img)


def _buf(values):
    b = (ctypes.c_int64 * len(values))(*values)
    return b, ctypes.addressof(b)


def test_many_copies_equal_single_copies(dev):
    d, _img = dev
    ptrs = d.alloc_many([8 * k for k in range(1, 6)])
    assert len(set(ptrs)) == 5 and all(ptrs)
    src = [_buf(range(100 * k, 100 * k + k)) for k in range(1, 6)]
    d.submit_many([(p, p, a, ctypes.sizeof(b)) for p, (b, a) in zip(ptrs, src)])
    back = [_buf([0] * k) for k in range(1, 6)]
    d.retrieve_many([(p, p, a, ctypes.sizeof(b)) for p, (b, a) in zip(ptrs, back)])
    assert [list(b) for b, _a in back] == [list(b) for b, _a in src]
    # sub-ranges inside a block, as the mapping table's rows use them
    one, one_a = _buf([7])
    d.submit_many([(ptrs[4], ptrs[4] + 16, one_a, 8)])
    out, out_a = _buf([0] * 5)
    d.retrieve_in(ptrs[4], out_a, ptrs[4], 40)
    assert list(out) == [500, 501, 7, 503, 504]
    d.free_many(ptrs)
    assert d.allocations == (0, 0)


def test_many_copies_check_every_range_before_the_first(dev):
    d, _img = dev
    p, q = d.alloc_many([16, 16])
    zero, zero_a = _buf([0, 0])
    d.submit_in(p, p, zero_a, 16)
    b, a = _buf([1, 2, 3])
    with pytest.raises(osh.UnknownPointerError, match="not inside an allocation"):
        d.submit_many([(p, p, a, 16), (q, q + 8, a, 16)])      # the second runs over q
    out, out_a = _buf([5, 5])
    d.retrieve_in(p, out_a, p, 16)
    assert list(out) == [0, 0]                 # the first copy was not made either
    with pytest.raises(osh.UnknownPointerError):
        d.submit_in(p + 1, p + 1, a, 8)         # not the start of a live block
    d.free_many([p, q])
    with pytest.raises(osh.UnknownPointerError):
        d.free_many([p])


def test_alloc_many_gives_back_what_it_took_on_error(dev):
    d, _img = dev
    with pytest.raises(ValueError):
        d.alloc_many([8, 16, -1])
    assert d.allocations == (0, 0)


def test_plugin_batch_takes_lists_and_flat_arrays(dev):
    d, _img = dev
    if batch.call4(0, 0, []) is None:
        pytest.fail("libosh_batch.so (the project's batch library, native/) is not built "
                    "or does not load: scripts/setup.sh builds it")
    p = d.alloc(24)
    b, a = _buf([4, 5, 6])
    d.plugin.submit_many(d.index, array("Q", [p, a, 8, p + 8, a + 8, 16]))
    out, out_a = _buf([0, 0, 0])
    d.plugin.retrieve_many(d.index, [(out_a, p, 24)])
    assert list(out) == [4, 5, 6]
    d.free(p)


def test_lease_copies_by_offset_and_ends(dev):
    d, _img = dev
    lease = d.lease([32, 16])
    assert lease.valid and len(lease.ptrs) == 2
    b, a = _buf([9, 8, 7, 6])
    lease.submit_many([(0, 0, a, 32), (1, 8, a, 8)])
    out, out_a = _buf([0, 0, 0, 0, 0])
    lease.retrieve_many([(0, 0, out_a, 32), (1, 8, out_a + 32, 8)])
    assert list(out) == [9, 8, 7, 6, 9]
    with pytest.raises(ValueError, match="exceeds the leased block"):
        lease.submit_many([(1, 8, a, 16)])
    lease.release()
    assert not lease.valid
    with pytest.raises(osh.LifecycleError):
        lease.submit_many([(0, 0, a, 8)])
    assert d.allocations == (0, 0)
    taken = d.lease([8])
    taken.detach()                              # the caller owns the block now
    assert d.allocations == (1, 8)
    d.free(taken.ptrs[0])


def test_lease_is_invalid_after_a_deinit(dev):
    d, _img = dev
    lease = d.lease([8])
    d.deinit()
    assert not lease.valid
    lease.release()                             # the deinit freed it: nothing to do
    d.init()


def test_kernel_launcher_runs_and_goes_stale(dev):
    d, img = dev
    entry = d.translate(img.host_address("increment"))
    launch = d.kernel_launcher(entry, 2)
    p = d.alloc(32)
    b, a = _buf([1, 2, 3, 4])
    d.submit_raw(p, a, 32)
    launch([p, 4], [0, 0])
    launch([p, 4], [0, 0])
    out, out_a = _buf([0, 0, 0, 0])
    d.retrieve_raw(out_a, p, 32)
    assert list(out) == [3, 4, 5, 6]
    with pytest.raises(ValueError):
        launch([p], [0])                        # arity
    with pytest.raises(ValueError):
        launch([p, 1 << 64], [0, 0])            # beyond 64 bits
    with pytest.raises(osh.KernelNotFoundError):
        d.kernel_launcher(entry + 1, 2)
    d.free(p)
    d.deinit()
    assert not launch.valid
    d.init()
    with pytest.raises(osh.OffloadError):
        launch([0, 0], [0, 0])                  # made before the deinit


def test_raw_and_block_copies_take_one_byte_and_skip_zero(dev):
    """The raw (``*_raw``), block (``*_in``) and batched forms copy a 1-byte range,
    skip a copy of 0 bytes or less without checking its address (libomptarget
    passes empty ranges), and refuse a range that starts before its block or
    runs past it, or names a block that is not live."""
    d, _img = dev
    p = d.alloc(16)
    src, src_a = _buf([0x1122334455667788, 0])
    d.submit_raw(p, src_a, 16)
    one, one_a = _buf([0])
    d.retrieve_raw(one_a, p, 1)
    assert list(one) == [0x88]
    d.submit_raw(p + 8, src_a + 1, 1)           # one byte: 0x77
    d.retrieve_in(p, one_a, p + 8, 1)
    assert list(one) == [0x77]
    d.submit_in(p, p + 9, src_a + 2, 1)         # 0x66
    out, out_a = _buf([0, 0])
    d.retrieve_many([(p, p, out_a, 16)])
    assert list(out) == [0x1122334455667788, 0x6677]
    d.submit_many([(p, p + 10, src_a + 3, 1)])  # 0x55
    d.retrieve_many([(p, p + 10, one_a, 1)])
    assert list(one) == [0x55]
    for nbytes in (0, -1):                      # nothing to copy, whatever the address
        d.submit_raw(0xDEAD000, src_a, nbytes)
        d.retrieve_raw(src_a, 0xDEAD000, nbytes)
        d.submit_in(0xDEAD000, 0xDEAD000, src_a, nbytes)
        d.retrieve_in(0xDEAD000, src_a, 0xDEAD000, nbytes)
        d.submit_many([(0xDEAD000, 0xDEAD000, src_a, nbytes)])
        d.retrieve_many([(p, p + 64, src_a, nbytes)])
    assert list(src) == [0x1122334455667788, 0]
    for bad in ((p, p - 8, 16), (p, p + 8, 16)):  # starts before / runs past the block
        with pytest.raises(osh.UnknownPointerError):
            d.submit_raw(bad[1], src_a, bad[2])
        with pytest.raises(osh.UnknownPointerError):
            d.submit_many([(bad[0], bad[1], src_a, bad[2])])
        with pytest.raises(osh.UnknownPointerError):
            d.submit_in(bad[0], bad[1], src_a, bad[2])
    with pytest.raises(osh.UnknownPointerError):
        d.retrieve_many([(p + 1, p + 1, out_a, 8)])   # not a live block
    d.free(p)


def test_lease_edges(dev):
    """A lease copies 1 byte at an offset both ways, skips a copy of 0 bytes
    wherever it points, and a detached lease's release frees nothing."""
    d, _img = dev
    lease = d.lease([16])
    src, src_a = _buf([0x1122334455667788, 0])
    lease.submit_many([(0, 0, src_a, 16)])
    lease.submit_many([(0, 9, src_a, 1)])       # 0x88 into byte 9
    one, one_a = _buf([0])
    lease.retrieve_many([(0, 9, one_a, 1)])
    assert list(one) == [0x88]
    lease.submit_many([(0, 64, src_a, 0)])      # nothing, not an error
    lease.retrieve_many([(0, 64, one_a, 0)])
    out, out_a = _buf([0, 0])
    d.retrieve_in(lease.ptrs[0], out_a, lease.ptrs[0], 16)
    assert list(out) == [0x1122334455667788, 0x8800]
    lease.detach()
    lease.release()                             # detached: the caller owns the block
    assert d.allocations == (1, 16)
    d.free(lease.ptrs[0])


def test_alloc_many_raises_the_first_error_when_cleanup_fails(dev, monkeypatch):
    """When giving back the blocks of a failed ``alloc_many`` fails too, the
    error of the allocation is the one raised."""
    d, _img = dev
    taken = []
    # the pool gives them back (Device.alloc_many is MemoryManager.allocate_many)
    monkeypatch.setattr(type(d.pool), "free",
                        lambda self, ptr, strict=None: (
                            taken.append(ptr),
                            (_ for _ in ()).throw(osh.OffloadError("x"))))
    with pytest.raises(ValueError):
        d.alloc_many([8, -1])
    monkeypatch.undo()
    assert len(taken) == 1 and d.allocations == (1, 8)
    d.free(taken[0])


def test_kernel_launcher_values_and_staleness(dev):
    """A launcher takes values of 64 bits, signed or not, in args and offsets
    (n = -2**63 runs no iteration), refuses one beyond either end and a wrong
    count of offsets, and refuses to run once its image is unloaded."""
    d, img = dev
    entry = d.translate(img.host_address("increment"))
    launch = d.kernel_launcher(entry, 2)
    p = d.alloc(8)
    b, a = _buf([5])
    d.submit_raw(p, a, 8)
    lo, hi = -(1 << 63), 1 << 64
    launch([p, lo], [0, 0])
    launch([p, 0], [0, lo])
    launch([p, 0], [0, 1])                      # n = 0 + 1
    d.retrieve_raw(a, p, 8)
    assert list(b) == [6]
    for args, offsets in (([p, lo - 1], [0, 0]), ([p, 0], [0, lo - 1]),
                          ([p, 0], [0, hi]), ([p, hi], [0, 0]), ([p, 1], [0])):
        with pytest.raises(ValueError):
            launch(args, offsets)
    d.free(p)
    d.unload_registered(img)                    # same initialisation, image gone
    assert not launch.valid
    with pytest.raises(osh.KernelNotFoundError):
        launch([0, 0], [0, 0])
    d.load_registered(img)


def test_launch_entry_by_target_address(dev):
    """``launch_entry`` runs the kernel at a target-table address (what the
    interposer's ``__tgt_target_kernel`` has): argument i = args[i] + offsets[i];
    an address that is no kernel entry, offsets of another count and values
    beyond 64 bits are refused before the plugin."""
    d, img = dev
    entry = d.translate(img.host_address("increment"))
    p = d.alloc(16)
    b, a = _buf([1, 2])
    d.submit_raw(p, a, 16)
    d.launch_entry(entry, [p, 2])
    d.launch_entry(entry, [p, 0], [8, 1])       # p + 8, n = 1
    d.retrieve_raw(a, p, 16)
    assert list(b) == [2, 4]
    with pytest.raises(osh.KernelNotFoundError):
        d.launch_entry(entry + 1, [p, 1])
    with pytest.raises(ValueError, match="one entry per argument"):
        d.launch_entry(entry, [p, 1], [0])
    with pytest.raises(ValueError, match="^kernel offset 1 = .* does not fit in 64 bits"):
        d.launch_entry(entry, [p, 0], [0, 1 << 64])
    with pytest.raises(TypeError):
        d.launch_entry(entry, [p, 1.0])
    for bad in ("increment", 1.5, None, True):   # was "Unknown format code"
        with pytest.raises(TypeError, match="target-table address"):
            d.launch_entry(bad, [p, 1])
        with pytest.raises(TypeError, match="target-table address"):
            d.kernel_launcher(bad, 2)
    d.launch_entry(entry, [p, 1])               # the image's hold was given back
    d.retrieve_raw(a, p, 16)
    assert list(b) == [3, 4]
    d.free(p)


def test_a_gomp_kernel_launcher_refuses_offsets_of_another_count(bundled_path, ctl):
    """A launcher of a GOMP device (whose launch adds offsets to arguments pairwise and
    would run with a spare offset) refuses 3 offsets for 2 arguments, and 2 for 3, before
    the plugin: the kernel does not run and the data is unchanged."""
    from offload_shim.plugins.loader import load_plugin
    with osh.Runtime([load_plugin(bundled_path, abi="gomp")]) as rt:
        img = osh.OffloadImage.sample()
        rt.register_image(img)
        d = rt.devices[0]
        d.init()
        entry = d.translate(img.host_address("increment"))
        launch = d.kernel_launcher(entry, 2)
        p = d.alloc(16)
        b, a = _buf([1, 2])
        d.submit_raw(p, a, 16)
        runs = ctl.call_count("GOMP_OFFLOAD_run")
        for args, offsets in (([p, 2], [0, 0, 0]), ([p, 2, 0], [0, 0]), ([p], [0, 0])):
            with pytest.raises(ValueError, match="2 arguments and offsets expected"):
                launch(args, offsets)
        assert ctl.call_count("GOMP_OFFLOAD_run") == runs
        d.retrieve_raw(a, p, 16)
        assert list(b) == [1, 2]
        launch([p, 2], [0, 0])                          # the right counts run
        assert ctl.call_count("GOMP_OFFLOAD_run") == runs + 1
        d.retrieve_raw(a, p, 16)
        assert list(b) == [2, 3]
        d.free(p)
        rt.unregister_image(img)


def test_a_mapping_row_copies_through_its_block(dev, monkeypatch):
    """A mapping row's copies (DeviceMapper.submit/retrieve with the row) go through
    the row's block (Device.submit_in/retrieve_in, no search of every block); a copy
    outside the row, or for a row without a block of its own, searches
    (submit_raw/retrieve_raw).  The bytes are the same either way."""
    from offload_shim.interposer.llvm.mapping import DeviceMapper
    d, _img = dev
    dm = DeviceMapper(d)
    host, ha = _buf([5, 6, 7])
    r = dm.get_target_pointer(ha + 8, ha, 16, to=True)         # the row: host [8, 24)
    assert r.tgt and r.entry.alloc and r.entry.tgt == r.tgt
    calls = []
    for name in ("submit_in", "retrieve_in", "submit_raw", "retrieve_raw"):
        real = getattr(d, name)
        monkeypatch.setattr(d, name, lambda *a, _n=name, _r=real: (calls.append(_n), _r(*a)))
    out, oa = _buf([0, 0])
    dm.retrieve(oa, r.tgt, 16, r.entry)
    assert list(out) == [6, 7] and calls == ["retrieve_in"]
    dm.submit(r.tgt + 8, ha, 8, r.entry)                    # host 5 into the row's 2nd word
    dm.retrieve(oa, r.tgt, 16, r.entry)
    assert list(out) == [6, 5] and calls[1:] == ["submit_in", "retrieve_in"]
    calls.clear()
    with pytest.raises(osh.UnknownPointerError, match="not inside an allocation"):
        dm.retrieve(oa, r.tgt + 8, 16, r.entry)             # past the row's end: searched
    assert calls == ["retrieve_raw"]
    calls.clear()
    other = d.alloc(8)
    dm.submit(other, ha, 8, r.entry)                        # not the row's block: searched
    dm.retrieve(oa, other, 8)                               # no row: searched
    assert out[0] == 5 and calls == ["submit_raw", "retrieve_raw"]
    d.free(other)
    dm.erase(r.entry, 16)


def test_a_kernel_launcher_names_a_value_that_is_not_an_int(bundled_path):
    """A float, None or str among a launcher's arguments or offsets is a TypeError naming
    its type, before the plugin (a float used to pass the 64-bit check and fail in
    ctypes' conversion; None failed in min() with "'<' not supported")."""
    with osh.Runtime([bundled_path]) as rt:
        img = osh.OffloadImage.sample()
        rt.register_image(img)
        d = rt.devices[0]
        d.init()
        launch = d.kernel_launcher(d.translate(img.host_address("increment")), 2)
        p = d.alloc(16)
        for args, offsets, name in (([p, 2.0], [0, 0], "float"), ([p, None], [0, 0], "NoneType"),
                                    ([p, 2], [0, "0"], "str")):
            with pytest.raises(TypeError, match=f"must be ints .*not {name}$"):
                launch(args, offsets)
            assert not launch.fits(args, offsets)
        assert launch.fits([p, 2], [0, 0])
        d.free(p)
