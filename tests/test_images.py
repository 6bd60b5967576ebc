"""OffloadImage, AddressMap and ImageRegistry (offload_shim.core.images) by
behaviour: what is refused at construction, which host addresses an image
hands the plugins, and the edges of the host -> target address map.  Written
against the surviving mutants of ``make mutation`` (docs/testing.md)."""

from __future__ import annotations

import ctypes
import gc

import pytest

import offload_shim as osh
from offload_shim.core.images import AddressMap, HostEntry, ImageRegistry, OffloadImage


@pytest.fixture(scope="module")
def sample():
    return OffloadImage.sample()


def test_an_image_from_bytes_is_untrusted_by_default(sample):
    img = OffloadImage(sample.data, sample.entries)
    assert img.trusted is False and img.name == "image"
    assert OffloadImage(sample.data, sample.entries, trusted=1).trusted is True


@pytest.mark.parametrize("entries, host_addresses, error", [
    ([HostEntry("k"), HostEntry("k")], None, ValueError),         # duplicate names
    ([HostEntry("g", size=-8)], None, ValueError),                # negative size
    ([HostEntry("")], None, ValueError),                          # empty name
    ([HostEntry("a"), HostEntry("b")], [0x1000], ValueError),     # one address for two
    ([HostEntry("a"), HostEntry("b")], [0x1000, 0x2000, 0x3000], ValueError),
    ([HostEntry("a")], [0], ValueError),                          # NULL (LLVM 16 rejects it)
])
def test_bad_entries_and_addresses_are_refused(sample, entries, host_addresses, error):
    with pytest.raises(error):
        OffloadImage(sample.data, entries, host_addresses=host_addresses)


def test_image_data_must_be_bytes(sample):
    with pytest.raises(TypeError):
        OffloadImage(list(sample.data[:16]), sample.entries)


def test_given_host_addresses_are_used_as_they_are(sample):
    entries = [HostEntry("a"), HostEntry("b", size=8)]
    img = OffloadImage(sample.data, entries, host_addresses=[1, 0x2000])
    assert img.host_addresses() == [1, 0x2000]
    assert img.host_address("b") == 0x2000


def test_entries_given_as_tuples_become_host_entries(sample):
    img = OffloadImage(sample.data, [("k", 0), ("g", 8, 0, None)])
    assert img.entries == [HostEntry("k"), HostEntry("g", 8)]


def test_entry_lookup_and_unknown_names(sample):
    assert sample.entry("increment").name == "increment"
    assert sample.entry("osh_scale").size == 8
    with pytest.raises(KeyError) as ei:
        sample.entry("nope")
    assert ei.value.args == ("nope",)
    with pytest.raises(KeyError) as ei:
        sample.host_address("nope")
    assert ei.value.args == ("nope",)


def test_kernel_anchors_are_distinct_bytes_of_one_buffer_in_entry_order(sample):
    addrs = sample.host_addresses()
    kernels = [a for e, a in zip(sample.entries, addrs) if e.is_kernel]
    idx = [i for i, e in enumerate(sample.entries) if e.is_kernel]
    assert [a - kernels[0] for a in kernels] == [i - idx[0] for i in idx]
    assert sample.host_addresses() == addrs                 # stable


def test_global_host_copies_stay_alive_and_zeroed(sample):
    img = OffloadImage(sample.data, sample.entries)
    addr = img.host_address("osh_scale")
    gc.collect()
    junk = [ctypes.create_string_buffer(b"\xff" * 8, 8) for _ in range(2000)]
    assert ctypes.string_at(addr, 8) == bytes(8)
    del junk


def test_from_file_names_the_image_after_the_file(tmp_path, sample):
    p = tmp_path / "lib.so"
    p.write_bytes(sample.data)
    img = OffloadImage.from_file(p)
    assert img.name == "lib.so"
    plain = tmp_path / "plain.so"                          # an ELF file without host entries
    plain.write_bytes(open("/usr/bin/true", "rb").read())
    with pytest.raises(osh.InvalidImageError, match="plain.so"):
        OffloadImage.from_file(plain)


def test_address_map_edges():
    m = AddressMap()
    a, b = object(), object()
    m.insert(0x1000, 0x100, 0x9000, a)
    assert m.lookup(0x1000) == 0x9000
    assert m.lookup(0x10FF) == 0x90FF                      # interior byte: same offset
    with pytest.raises(KeyError):
        m.lookup(0x1100)                                   # one past the end
    with pytest.raises(KeyError):
        m.lookup(0x0FFF)
    m.insert(0x1100, 0x10, 0xA000, b)                      # adjacent: allowed
    with pytest.raises(ValueError):
        m.insert(0x10F0, 0x8, 0xB000, b)                   # inside the first
    with pytest.raises(ValueError):
        m.insert(0x0F00, 0x101, 0xB000, b)                 # its last byte is the first's first
    m.insert(0x0F00, 0x100, 0xB000, b)                     # ends right where the first starts
    m.insert(0x2000, 0, 0xC000, b)                         # size 0 maps one byte
    assert m.lookup(0x2000) == 0xC000
    with pytest.raises(KeyError):
        m.lookup(0x2001)
    with pytest.raises(ValueError):
        m.insert(0x1105, 4, 0xB000, b)                     # inside the third of three
    assert len(m) == 4
    with pytest.raises(KeyError) as ei:
        m.lookup(0x3000)
    assert ei.value.args == ("0x3000",)
    assert m.remove_owner(b) == 3
    assert m.items() == [(0x1000, 0x1100, 0x9000)]
    assert m.lookup(0x1080) == 0x9080                      # still found after the removal
    with pytest.raises(KeyError):
        m.lookup(0x1100)
    m.insert(0x1100, 0x10, 0xD000, a)                      # the start table follows removals
    assert m.lookup(0x1105) == 0xD005
    assert m.remove_owner(object()) == 0


def test_image_registry_add_and_remove_say_whether_they_changed_it(sample):
    r = ImageRegistry()
    img = OffloadImage(sample.data, sample.entries)
    assert r.add(img) is True
    assert r.add(img) is False
    assert img in r and len(r) == 1 and r.snapshot() == [img]
    assert r.remove(img) is True
    assert r.remove(img) is False
    assert img not in r and len(r) == 0
