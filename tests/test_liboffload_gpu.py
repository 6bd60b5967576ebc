"""liboffload 22 on a CUDA device: allocation, copies, a kernel from a clang-22 image, the
pool.  Marked ``gpu``; skipped with the reason unless the real liboffload 22 is unpacked
(scripts/setup.sh) and enumerates a CUDA device (a driver and a GPU).

The image is ``tests/data/ol_kernels.nvptx.bc`` (LLVM bitcode for nvptx64 built by clang 22
from ``tests/data/ol_kernels.c``; the command is in that file): liboffload's CUDA plugin
compiles bitcode with its own NVPTX backend at ``olCreateProgram``.  The PTX text of the same
source (``ol_kernels.ptx``) is tried too where ``olIsValidBinary`` accepts it.
"""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest

import offload_shim as osh
from offload_shim.plugins.loader import load_plugin

from conftest import liboffload22_path

pytestmark = pytest.mark.gpu

DATA = Path(__file__).resolve().parent / "data"
ENTRIES = [osh.HostEntry("increment", 0, num_args=2), osh.HostEntry("vec_add", 0, num_args=4),
           osh.HostEntry("osh_scale", 8)]


@pytest.fixture(scope="module")
def cuda_plugin():
    path = liboffload22_path()
    if path is None:
        pytest.skip("liboffload 22 not unpacked (scripts/setup.sh)")
    p = load_plugin(path)
    with osh.Runtime([p]) as rt:
        rt.devices
        cuda = [d for d in p.compute_devices if d.backend == "CUDA"]
    if not cuda:
        pytest.skip("liboffload 22 enumerates no CUDA device (no NVIDIA driver or GPU)")
    return p


def _cuda_device(rt, plugin):
    rt.devices
    i = next(d.index for d in plugin.compute_devices if d.backend == "CUDA")
    return rt.devices[i]


def test_alloc_and_copies(cuda_plugin):
    n = 1 << 16
    with osh.Runtime([cuda_plugin]) as rt:
        dev = _cuda_device(rt, cuda_plugin)
        p = dev.alloc(8 * n)
        src = array("q", range(n))
        dev.submit(p, src)
        out = array("q", bytes(8 * n))
        dev.retrieve(out, p)
        assert out == src
        dev.retrieve(out, p, offset=8, nbytes=8 * (n - 1))
        assert list(out[:3]) == [1, 2, 3]
        dev.free(p)


@pytest.mark.parametrize("image", ["ol_kernels.nvptx.bc", "ol_kernels.ptx"])
def test_kernel_from_a_clang22_image(cuda_plugin, image):
    data = (DATA / image).read_bytes()
    if image.endswith(".ptx"):
        data += b"\0"                                  # cuModuleLoadData takes a C string
    img = osh.OffloadImage(data, ENTRIES, name=image, machine="nvptx64")
    n = 1000
    with osh.Runtime([cuda_plugin]) as rt:
        dev = _cuda_device(rt, cuda_plugin)
        if not cuda_plugin.is_valid_binary(img):
            pytest.skip(f"olIsValidBinary refuses {image} on this device")
        rt.register_image(img)
        p = dev.alloc(8 * n)
        dev.submit(p, array("q", range(n)))
        dev.launch("increment", [p, n])
        out = array("q", bytes(8 * n))
        dev.retrieve(out, p)
        assert list(out) == list(range(1, n + 1))
        a, b, c = (dev.alloc(8 * n) for _ in range(3))
        dev.submit(a, array("d", range(n)))
        dev.submit(b, array("d", (0.5 * i for i in range(n))))
        dev.launch("vec_add", [a, b, c, n])
        res = array("d", bytes(8 * n))
        dev.retrieve(res, c)
        assert list(res) == [1.5 * i for i in range(n)]
        g = array("d", [0.0])
        dev.retrieve(g, dev.global_address("osh_scale"))
        assert g[0] == 3.0
        for q in (p, a, b, c):
            dev.free(q)
        rt.unregister_image(img)


def test_pool_reuses_blocks(cuda_plugin):
    with osh.Runtime([cuda_plugin]) as rt:
        dev = _cuda_device(rt, cuda_plugin)
        first = dev.alloc(4096)
        dev.free(first)
        again = dev.alloc(4096)
        assert again == first                          # served from the pool's cache
        st = dev.pool.stats
        assert st.hits >= 1
        dev.free(again)
    # the teardown freed the cached block with olMemFree before olShutDown
