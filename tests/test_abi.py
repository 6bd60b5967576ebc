"""ABI layouts (LLVM 16 omptarget.h, GCC 12 gomp-constants.h) and generation classification."""

import ctypes

import pytest

from offload_shim.abi import gomp, tgt_rtl
from offload_shim import load_plugin

from conftest import GCN12, NVPTX12, need


@pytest.mark.parametrize("struct, size", [
    (tgt_rtl.OffloadEntry, 32), (tgt_rtl.DeviceImage, 32), (tgt_rtl.TargetTable, 16),
    (tgt_rtl.KernelArgs, 104), (tgt_rtl.BinDesc, 32), (tgt_rtl.ImageInfo, 8),
    (tgt_rtl.DeviceInfo, 16), (gomp.AddrPair, 16), (gomp.OshGompTargetData, 64),
])
def test_struct_sizes(struct, size):
    assert ctypes.sizeof(struct) == size


@pytest.mark.parametrize("struct, field, offset", [
    (tgt_rtl.OffloadEntry, "addr", 0), (tgt_rtl.OffloadEntry, "name", 8),
    (tgt_rtl.OffloadEntry, "size", 16), (tgt_rtl.OffloadEntry, "flags", 24),
    (tgt_rtl.OffloadEntry, "reserved", 28),
    (tgt_rtl.DeviceImage, "ImageEnd", 8), (tgt_rtl.DeviceImage, "EntriesBegin", 16),
    (tgt_rtl.DeviceImage, "EntriesEnd", 24),
    (tgt_rtl.TargetTable, "EntriesEnd", 8),
    (tgt_rtl.BinDesc, "DeviceImages", 8), (tgt_rtl.BinDesc, "HostEntriesEnd", 24),
    (tgt_rtl.KernelArgs, "NumArgs", 4), (tgt_rtl.KernelArgs, "ArgBasePtrs", 8),
    (tgt_rtl.KernelArgs, "ArgTypes", 32), (tgt_rtl.KernelArgs, "Tripcount", 56),
    (tgt_rtl.KernelArgs, "Flags", 64), (tgt_rtl.KernelArgs, "NumTeams", 72),
    (tgt_rtl.KernelArgs, "ThreadLimit", 84), (tgt_rtl.KernelArgs, "DynCGroupMem", 96),
    (gomp.AddrPair, "end", 8),
    (gomp.OshGompTargetData, "image", 8), (gomp.OshGompTargetData, "func_names", 24),
    (gomp.OshGompTargetData, "num_funcs", 40), (gomp.OshGompTargetData, "var_names", 48),
    (gomp.OshGompTargetData, "num_vars", 56),
])
def test_field_offsets(struct, field, offset):
    assert getattr(struct, field).offset == offset


def test_every_prototype_sets_restype_and_argtypes():
    for gen, (protos, required) in tgt_rtl.GENERATIONS.items():
        assert set(required) <= set(protos), gen
        for name, (restype, argtypes) in protos.items():
            assert isinstance(argtypes, list), (gen, name)
    for name, (restype, argtypes) in gomp.PROTOTYPES[1].items():
        assert isinstance(argtypes, list), name


@pytest.mark.parametrize("symbols, gen", [
    ({"launch_kernel", "init_plugin", "deinit_plugin", "deinit_device", "data_lock"},
     "llvm16-nextgen"),
    ({"launch_kernel", "print_device_info"}, "llvm16-classic"),
    # 16 classic amdgpu: init/deinit_plugin but no deinit_device
    ({"launch_kernel", "init_plugin", "deinit_plugin", "data_lock"}, "llvm16-classic"),
    # 16 classic cuda: deinit_device but no init_plugin
    ({"launch_kernel", "deinit_device", "is_valid_binary_info"}, "llvm16-classic"),
    ({"run_target_region", "run_target_team_region"}, "llvm14"),
    ({"launch_kernel", "get_function", "get_global", "init_plugin"}, "llvm18"),
    ({"data_alloc"}, None),
])
def test_classify(symbols, gen):
    assert tgt_rtl.classify(symbols) == gen


def test_gomp_version_packing():
    assert gomp.version_pack(1, 1) == 0x00010001
    assert gomp.version_lib(0x00010002) == 1 and gomp.version_dev(0x00010002) == 2


def test_gcc12_plugins_classify_without_devices():
    for path, name, typ in ((NVPTX12, "nvptx", 5), (GCN12, "gcn", 8)):
        p = load_plugin(need(path, f"GCC 12 {name} plugin"))
        assert (p.abi, p.generation, p.version) == ("gomp", "gomp-v1", 1)
        assert p.target_name == name and p.target_type == typ
        assert p.caps == 0xC
