"""libgomp 12's mapping rules (:class:`offload_shim.interposer.gomp.mapping.GompMapper`
and the rooms below it), on host buffers with a device memory made of more host buffers.

Each test states the rule of GCC 12 ``target.c`` it holds to (``gomp_map_vars_internal``,
``gomp_unmap_vars_internal``, ``gomp_exit_data``, ``gomp_update``,
``gomp_increment_refcount`` / ``gomp_decrement_refcount``) and checks both the table and
the bytes that moved.  The GCC programs of tests/gcc_programs check the same rules
end to end against compiled code.
"""

from __future__ import annotations

import struct

import pytest

from offload_shim.abi.gomp_interposer import ScratchBuffer, read_u64
from offload_shim.interposer.gomp import kinds as gk
from offload_shim.interposer.gomp import memmap as gmm
from offload_shim.interposer.gomp.fatal import GompFatal
from offload_shim.interposer.gomp.mapping import GompMapper


class FakeMemory:
    """Device memory out of host buffers; counts the live blocks."""

    def __init__(self):
        self.blocks: dict[int, ScratchBuffer] = {}
        self.fail_next_alloc = False

    def alloc(self, size):
        if self.fail_next_alloc:
            self.fail_next_alloc = False
            return 0
        b = ScratchBuffer(size)
        self.blocks[b.address] = b
        return b.address

    def free(self, ptr):
        return self.blocks.pop(ptr, None) is not None

    def _inside(self, addr, n):
        return any(a <= addr and addr + n <= a + len(b._b) for a, b in self.blocks.items())

    def host2dev(self, dev, host, n):
        if not self._inside(dev, n):
            return False
        import ctypes
        ctypes.memmove(dev, host, n)
        return True

    def dev2host(self, host, dev, n):
        if not self._inside(dev, n):
            return False
        import ctypes
        ctypes.memmove(host, dev, n)
        return True

    def dev2dev(self, dst, src, n):
        import ctypes
        ctypes.memmove(dst, src, n)
        return True


def ints(*vals) -> ScratchBuffer:
    return ScratchBuffer.of(struct.pack(f"<{len(vals)}q", *vals))


def get(addr, n) -> list[int]:
    import ctypes
    return list(struct.unpack(f"<{n}q", ctypes.string_at(addr, 8 * n)))


def put(addr, *vals) -> None:
    import ctypes
    data = struct.pack(f"<{len(vals)}q", *vals)
    ctypes.memmove(addr, data, len(data))


K = lambda kind, align=3: kind | (align << 8)  # noqa: E731 - 8-byte aligned map kinds


@pytest.fixture
def m():
    return GompMapper(FakeMemory())


def test_target_maps_copy_in_and_out_and_free_the_block(m):
    a, b = ints(1, 2, 3), ints(0, 0, 0)
    h = [a.address, b.address]
    tgt = m.map_vars(h, [24, 24], [K(gk.GOMP_MAP_TO), K(gk.GOMP_MAP_FROM)],
                     gmm.GOMP_MAP_VARS_TARGET)
    # the argument block holds the device addresses (gomp_map_val), 32-byte aligned
    assert tgt.tgt_start % 32 == 0
    da, db = get(tgt.tgt_start, 2)
    assert get(da, 3) == [1, 2, 3] and m.mem_map.lookup(a.address, a.address + 24).count == 1
    put(db, 7, 8, 9)                       # the "region" writes the device copy of b
    put(a.address, -1, -1, -1)             # and the host changes a: not copied back
    m.unmap_vars(tgt, True)
    assert get(b.address, 3) == [7, 8, 9] and get(a.address, 3) == [-1, -1, -1]
    assert len(m.mem_map) == 0 and m.mem.blocks == {}


def test_structured_and_dynamic_references_share_one_count(m):
    """enter data twice, a region (present: no copy), exit from once: the count is 2, no
    copy back; the second exit copies and removes (gomp_exit_data)."""
    x = ints(1, 2)
    for _ in range(2):
        m.enter_data([x.address], [16], [K(gk.GOMP_MAP_TO)])
    key = m.mem_map.lookup(x.address, x.address + 16)
    assert key.count == 2
    tgt = m.map_vars([x.address], [16], [K(gk.GOMP_MAP_TOFROM)], gmm.GOMP_MAP_VARS_TARGET)
    assert key.count == 3
    put(key.device_address, 10, 20)
    m.unmap_vars(tgt, True)
    assert key.count == 2 and get(x.address, 2) == [1, 2]     # not the last reference
    m.exit_data([x.address], [16], [K(gk.GOMP_MAP_FROM)])
    assert key.count == 1 and get(x.address, 2) == [1, 2]
    m.exit_data([x.address], [16], [K(gk.GOMP_MAP_FROM)])
    assert get(x.address, 2) == [10, 20] and len(m.mem_map) == 0 and m.mem.blocks == {}


def test_delete_drops_every_reference_without_copy(m):
    x = ints(5)
    m.enter_data([x.address], [8], [K(gk.GOMP_MAP_TO)])
    m.enter_data([x.address], [8], [K(gk.GOMP_MAP_TO)])
    put(m.mem_map.lookup(x.address, x.address + 8).device_address, 99)
    m.exit_data([x.address], [8], [K(gk.GOMP_MAP_DELETE)])
    assert len(m.mem_map) == 0 and get(x.address, 1) == [5]


def test_one_count_per_construct_for_the_elements_of_a_structure(m):
    """GOMP_MAP_STRUCT: the elements mapped together share one count (REFCOUNT_STRUCTELEM),
    raised once per construct however many elements it lists (OpenMP 5.0)."""
    s = ints(1, 2, 3, 4)                   # struct { long a, b, c, d; }
    base = s.address
    h = [base, base, base + 16]            # struct header, s.a, s.c
    kinds = [K(gk.GOMP_MAP_STRUCT), K(gk.GOMP_MAP_TOFROM), K(gk.GOMP_MAP_TOFROM)]
    m.enter_data(list(h), [2, 8, 8], kinds)
    ka = m.mem_map.lookup(base, base + 8)
    kc = m.mem_map.lookup(base + 16, base + 24)
    assert ka.refcount == kc.refcount == gmm.REFCOUNT_STRUCTELEM
    assert ka.count == kc.count == 1
    # device block keeps the layout: c sits 16 bytes after a
    assert kc.device_address - ka.device_address == 16
    tgt = m.map_vars(list(h), [2, 8, 8], kinds, gmm.GOMP_MAP_VARS_TARGET)
    assert ka.count == 2                   # not 3
    m.unmap_vars(tgt, True)
    assert ka.count == 1
    put(ka.device_address, 100)
    put(kc.device_address, 300)
    m.exit_data([base, base + 16], [8, 8], [K(gk.GOMP_MAP_FROM), K(gk.GOMP_MAP_FROM)])
    assert get(base, 4) == [100, 2, 300, 4] and len(m.mem_map) == 0


def test_always_to_and_always_from_copy_when_present(m):
    x = ints(1)
    m.enter_data([x.address], [8], [K(gk.GOMP_MAP_TO)])
    put(x.address, 2)
    tgt = m.map_vars([x.address], [8], [K(gk.GOMP_MAP_ALWAYS_TOFROM)], gmm.GOMP_MAP_VARS_TARGET)
    key = m.mem_map.lookup(x.address, x.address + 8)
    assert get(key.device_address, 1) == [2]
    put(key.device_address, 3)
    m.unmap_vars(tgt, True)                # count back to 1, but always from
    assert get(x.address, 1) == [3] and len(m.mem_map) == 1


def test_update_copies_only_what_is_mapped(m):
    x = ints(1, 2, 3, 4)
    tgt = m.map_vars([x.address], [32], [K(gk.GOMP_MAP_TO)], gmm.GOMP_MAP_VARS_DATA)
    dev = m.mem_map.lookup(x.address, x.address + 32).device_address
    put(dev + 8, 20, 30)
    m.update([x.address + 8], [8], [K(gk.GOMP_MAP_FROM)])
    assert get(x.address, 4) == [1, 20, 3, 4]
    other = ints(0)
    m.update([other.address], [8], [K(gk.GOMP_MAP_TO)])      # not mapped: nothing
    with pytest.raises(GompFatal) as exc:
        m.update([x.address + 16], [32], [K(gk.GOMP_MAP_TO)])
    assert exc.value.message.startswith("Trying to update [0x")
    assert "object when only [" in exc.value.message
    m.unmap_vars(tgt, True)


def test_extending_a_mapping_is_fatal_with_libgomps_text(m):
    x = ints(1, 2, 3, 4)
    m.enter_data([x.address], [16], [K(gk.GOMP_MAP_TO)])
    with pytest.raises(GompFatal) as exc:
        m.map_vars([x.address], [32], [K(gk.GOMP_MAP_TO)], gmm.GOMP_MAP_VARS_TARGET)
    a = x.address
    assert exc.value.message == (f"Trying to map into device [{a:#x}..{a + 32:#x}) object "
                                 f"when [{a:#x}..{a + 16:#x}) is already mapped")


def test_implicit_map_of_a_larger_object_is_allowed(m):
    """GCC 12: an implicit map may contain the existing mapping (implicit_subset)."""
    x = ints(1, 2, 3, 4)
    m.enter_data([x.address + 8], [16], [K(gk.GOMP_MAP_TO)])
    kinds = [K(gk.GOMP_MAP_TOFROM) | gk.GOMP_MAP_IMPLICIT]
    tgt = m.map_vars([x.address], [32], kinds, gmm.GOMP_MAP_VARS_TARGET)
    key = m.mem_map.lookup(x.address + 8, x.address + 24)
    assert key.count == 2
    # the argument is the device address of x[0], 8 bytes before the mapping
    assert get(tgt.tgt_start, 1)[0] == key.device_address - 8
    m.unmap_vars(tgt, True)
    assert key.count == 1


def test_zero_length_sections_and_use_device_ptr(m):
    x = ints(1, 2, 3)
    data = m.map_vars([x.address], [24], [K(gk.GOMP_MAP_TOFROM)], gmm.GOMP_MAP_VARS_DATA)
    dev = m.mem_map.lookup(x.address, x.address + 24).device_address
    other = ints(0)
    h = [x.address + 8, other.address]
    tgt = m.map_vars(h, [0, 0], [K(gk.GOMP_MAP_ZERO_LEN_ARRAY_SECTION)] * 2,
                     gmm.GOMP_MAP_VARS_TARGET)
    # a zero-length section inside a mapping gets its device address, else NULL
    assert get(tgt.tgt_start, 2) == [dev + 8, 0]
    m.unmap_vars(tgt, True)
    h = [x.address + 16]
    m.unmap_vars(m.map_vars(h, [0], [K(gk.GOMP_MAP_USE_DEVICE_PTR, 0)],
                            gmm.GOMP_MAP_VARS_DATA), True)
    assert h == [dev + 16]                 # rewritten in place
    with pytest.raises(GompFatal, match="use_device_ptr pointer wasn't mapped"):
        m.map_vars([other.address], [0], [K(gk.GOMP_MAP_USE_DEVICE_PTR, 0)],
                   gmm.GOMP_MAP_VARS_DATA)
    m.unmap_vars(data, True)
    assert len(m.mem_map) == 0


def test_attach_pointer_in_a_mapped_structure(m):
    """map(tofrom: s) map(to: s.p[0:2]): GOMP_MAP_ATTACH writes the device address of the
    array into the device copy of s.p and puts the host pointer back at the end."""
    arr = ints(10, 20)
    s = ints(1, arr.address)               # struct { long n; long *p; }
    h = [s.address, arr.address, s.address + 8]
    tgt = m.map_vars(h, [16, 16, 0],
                     [K(gk.GOMP_MAP_TOFROM), K(gk.GOMP_MAP_TO), K(gk.GOMP_MAP_ATTACH)],
                     gmm.GOMP_MAP_VARS_TARGET)
    ks = m.mem_map.lookup(s.address, s.address + 16)
    ka = m.mem_map.lookup(arr.address, arr.address + 16)
    assert read_u64(ks.device_address + 8) == ka.device_address
    m.unmap_vars(tgt, True)
    assert get(s.address, 2) == [1, arr.address]   # detached before the copy back


def test_firstprivate_and_firstprivate_int(m):
    v = ints(42)
    tgt = m.map_vars([v.address, 7], [8, 0],
                     [K(gk.GOMP_MAP_FIRSTPRIVATE), K(gk.GOMP_MAP_FIRSTPRIVATE_INT)],
                     gmm.GOMP_MAP_VARS_TARGET)
    fp, val = get(tgt.tgt_start, 2)
    assert get(fp, 1) == [42] and val == 7 and len(m.mem_map) == 0
    put(fp, 0)                             # a private copy: never copied back
    m.unmap_vars(tgt, True)
    assert get(v.address, 1) == [42] and m.mem.blocks == {}


def test_pointer_target_must_be_mapped(m):
    arr = ints(1)
    p = ints(arr.address)
    with pytest.raises(GompFatal, match="Pointer target of array section wasn't mapped"):
        m.map_vars([p.address], [0], [K(gk.GOMP_MAP_POINTER)], gmm.GOMP_MAP_VARS_TARGET)


def test_allocation_failure_is_fatal(m):
    m.mem.fail_next_alloc = True
    with pytest.raises(GompFatal, match="^device memory allocation fail$"):
        m.map_vars([ints(1).address], [8], [K(gk.GOMP_MAP_TO)], gmm.GOMP_MAP_VARS_TARGET)


def test_declare_target_variables_stay_mapped(m):
    g = ints(3)
    dev = m.mem.alloc(8)
    m.load_image([0x1000], [(g.address, 8)], [dev])
    assert m.function_mapped(0x1000) and not m.function_mapped(0x1001)
    tgt = m.map_vars([g.address], [8], [K(gk.GOMP_MAP_TOFROM)], gmm.GOMP_MAP_VARS_TARGET)
    assert get(tgt.tgt_start, 1) == [dev]
    m.unmap_vars(tgt, True)
    m.exit_data([g.address], [8], [K(gk.GOMP_MAP_DELETE)])     # infinite: stays
    assert m.mem_map.lookup(g.address, g.address + 8).count == gmm.REFCOUNT_INFINITY
    m.unload_image([0x1000], [(g.address, 8)])
    assert len(m.mem_map) == 0


def test_associate_and_disassociate(m):
    x = ints(1, 2)
    dev = m.mem.alloc(16)
    assert m.associate(x.address, dev, 16) == 0
    assert m.associate(x.address, dev, 16) == 0          # the same association again
    assert m.associate(x.address, dev + 8, 16) == 22     # another one: EINVAL
    tgt = m.map_vars([x.address], [16], [K(gk.GOMP_MAP_TOFROM)], gmm.GOMP_MAP_VARS_TARGET)
    assert get(tgt.tgt_start, 1) == [dev]
    m.unmap_vars(tgt, True)
    assert m.disassociate(x.address) == 0
    assert m.disassociate(x.address) == 22
