"""Regression tests of the pinned-memory error types (tester finding 5):
ENOMEM on unmapped memory is a PinnedMemoryError, not a MemlockLimitError;
host allocations that do not fit raise ValueError, failed mmaps
PinnedMemoryError; everything after close raises LifecycleError."""

from __future__ import annotations

import errno
import json
import mmap

import pytest

import offload_shim as osh
from offload_shim.memory import pinned as pm

from helpers import DROP_CAP as _DROP_CAP, run_child

PAGE = pm.PAGE

# the test process usually runs with CAP_IPC_LOCK; children below drop it

UNMAPPED = 0x10            # page 0 is never mapped


def _unlimited_or_cap() -> bool:
    return pm.memlock_limit() is None or pm.has_cap_ipc_lock()


def test_unmapped_range_is_not_a_limit_error():
    with pm.PinnedRegistry() as reg:
        with pytest.raises(osh.PinnedMemoryError) as ei:
            reg.pin(UNMAPPED, PAGE)
        assert not isinstance(ei.value, osh.MemlockLimitError)
        assert "not (fully) mapped" in str(ei.value) and ei.value.code == errno.ENOMEM
        big = (0x7fff00000000, 1 << 30)
        if _unlimited_or_cap():
            with pytest.raises(osh.PinnedMemoryError) as ei:
                reg.pin(*big)
            assert not isinstance(ei.value, osh.MemlockLimitError)
        else:                                       # the pre-check: the limit is the reason
            with pytest.raises(osh.MemlockLimitError):
                reg.pin(*big)
        assert reg.ranges() == []


def test_unmapped_range_through_the_runtime_and_plugin(bundled_path):
    with osh.Runtime([bundled_path]) as rt:
        dev = rt.devices[0]
        for device in (None, dev):
            with pytest.raises(osh.PinnedMemoryError) as ei:
                rt.pinned_memory.pin(UNMAPPED, 4096, device=device)
            assert not isinstance(ei.value, osh.MemlockLimitError), device
        assert rt.pinned_memory.ranges() == []


@pytest.mark.parametrize("err, limit, cap, vmlck, want", [
    (errno.ENOMEM, None, False, 0, "pinned"),        # unlimited: never the limit
    (errno.ENOMEM, 1 << 20, True, 0, "pinned"),       # CAP_IPC_LOCK: limit ignored
    (errno.ENOMEM, 1 << 20, False, 0, "pinned"),      # well under the limit: unmapped
    (errno.ENOMEM, 1 << 20, False, 1 << 20, "limit"),  # past the limit
    (errno.EAGAIN, 1 << 20, False, 1 << 20, "limit"),
    (errno.EPERM, 0, False, 0, "limit"),              # limit 0 without privilege
    (errno.EAGAIN, None, False, 0, "pinned"),
    (errno.EINVAL, 1 << 20, False, 1 << 20, "pinned"),
])
def test_lock_error_classification(monkeypatch, err, limit, cap, vmlck, want):
    monkeypatch.setattr(pm, "memlock_limit", lambda: limit)
    monkeypatch.setattr(pm, "has_cap_ipc_lock", lambda: cap)
    monkeypatch.setattr(pm, "vmlck_bytes", lambda: vmlck)
    e = pm._lock_error("mlock(0x1000, 4096)", 0x1000, PAGE, err, function="mlock")
    assert isinstance(e, osh.PinnedMemoryError)
    assert isinstance(e, osh.MemlockLimitError) == (want == "limit")
    if want == "limit":
        assert e.errno == err and "RLIMIT_MEMLOCK" in str(e)
    else:
        assert e.code == err and "would exceed" not in str(e)


def test_unmapped_pin_without_cap_in_child(bundled_path):
    cp = run_child(_DROP_CAP + f"""
import json, mmap
import offload_shim as osh
from offload_shim.memory import pinned as pm
drop_ipc_lock(); set_soft_limit(64 * 1024)
out = {{}}
with osh.Runtime([{bundled_path!r}]) as rt:
    reg = rt.pinned_memory
    for name, dom in (("mlock", None), ("plugin", rt.devices[0])):
        try:
            reg.pin(0x10, 4096, device=dom)
        except osh.PinnedMemoryError as e:
            out[name] = type(e).__name__
        try:
            reg.pin(mmap.mmap(-1, 1 << 20), device=dom)
        except osh.PinnedMemoryError as e:
            out[name + "_big"] = type(e).__name__
print(json.dumps(out))
""")
    assert cp.returncode == 0, cp.stderr
    res = json.loads(cp.stdout.strip().splitlines()[-1])
    assert res == {"mlock": "PinnedMemoryError", "plugin": "PinnedMemoryError",
                   "mlock_big": "MemlockLimitError", "plugin_big": "MemlockLimitError"}


@pytest.mark.parametrize("n", [2**64 + 16, 2**64, 2**63, (1 << 63) - 1])
def test_alloc_host_sizes_that_do_not_fit(n):
    with pm.PinnedRegistry() as reg:
        with pytest.raises(ValueError, match="does not fit"):
            reg.alloc_host(n)
        assert reg.host_pool().stats()["in_use"] == 0


def test_alloc_host_failed_mmap_is_a_pinned_memory_error():
    with pm.PinnedRegistry() as reg:
        with pytest.raises(osh.PinnedMemoryError) as ei:
            reg.alloc_host(2**62)                    # more than any address space
        assert not isinstance(ei.value, osh.MemlockLimitError)
        assert ei.value.code == errno.ENOMEM and "mmap" in str(ei.value)
        assert reg.host_pool().stats()["in_use"] == 0
        with reg.alloc_host(100) as buf:             # the pool still works
            assert buf.nbytes == 100
    with pytest.raises(ValueError):
        pm.PinnedRegistry().alloc_host(0)


def test_everything_after_close_is_a_lifecycle_error(bundled_path):
    buf = mmap.mmap(-1, 2 * PAGE)
    rt = osh.Runtime([bundled_path])
    reg = rt.pinned_memory
    reg.pin(buf)
    pool = reg.host_pool()
    rt.close()
    calls = [lambda: reg.unpin(buf), lambda: reg.unpin(0x1000, 4096),
             lambda: reg.unpin(0x1000), lambda: reg.pin(buf), lambda: reg.pin(0x1000, 4096),
             lambda: reg.pin(0, 0), lambda: reg.alloc_host(10), lambda: reg.alloc_host(0),
             lambda: reg.host_pool(), lambda: pool.allocate(10)]
    for i, call in enumerate(calls):
        with pytest.raises(osh.LifecycleError, match="closed"):
            call()
    assert reg.ranges() == []
