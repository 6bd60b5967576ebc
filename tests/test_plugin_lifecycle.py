"""Plugin-level lifecycle order (D130712, DeviceTy::initOnce): the last ``Plugin.release``
deinitialises every device still held *before* ``deinit_plugin``, and
``release_device`` / ``release`` refuse what was never acquired.  Checked
against the bundled plugin, which counts every call and records
``deinit_plugin_with_live_devices`` when the order is wrong."""

from __future__ import annotations

import pytest

import offload_shim as osh
from offload_shim.hostplugin import ABI_LLVM
from offload_shim.plugins.loader import load_plugin

ORDER = ["__tgt_rtl_init_plugin", "__tgt_rtl_init_device", "__tgt_rtl_deinit_device",
         "__tgt_rtl_deinit_plugin"]


@pytest.fixture
def plugin(bundled_path, ctl):
    p = load_plugin(bundled_path, abi="llvm")
    assert p.users == 0 and not ctl.is_plugin_initialized(), \
        "the bundled plugin is still held by an earlier test"
    yield p
    while p.users:
        p.release()


def _delta(ctl, before):
    now = ctl.call_counts(ORDER)
    return {k: now[k] - before[k] for k in ORDER}


def test_last_release_with_a_device_held_deinits_the_device_first(plugin, ctl):
    plugin.acquire()
    plugin.acquire_device(0)
    plugin.acquire_device(2)
    before = ctl.call_counts(ORDER)
    viol = ctl.violation_count("deinit_plugin_with_live_devices")
    plugin.release()                       # devices 0 and 2 still held by their callers
    assert ctl.violation_count("deinit_plugin_with_live_devices") == viol
    assert _delta(ctl, before) == {"__tgt_rtl_init_plugin": 0, "__tgt_rtl_init_device": 0,
                                   "__tgt_rtl_deinit_device": 2, "__tgt_rtl_deinit_plugin": 1}
    assert not ctl.is_device_initialized(ABI_LLVM, 0)
    assert not ctl.is_device_initialized(ABI_LLVM, 2)
    assert not ctl.is_plugin_initialized()
    assert not plugin.device_initialized(0) and not plugin.device_initialized(2)
    assert plugin.initialized is False and plugin.users == 0


def test_an_acquire_after_a_failed_last_deinit_device_does_not_init_the_plugin_again(
        plugin, ctl):
    """The last ``release`` with a device still held deinitialises it first; when that
    ``deinit_device`` fails, ``release`` raises before ``deinit_plugin``: the plugin is
    still initialised with no user.  The next ``acquire`` takes a user without a second
    ``init_plugin`` (the bundled plugin refuses one: double init), and the device,
    deinitialised by hand here, lets the last ``release`` end the plugin cleanly."""
    plugin.acquire()
    plugin.acquire_device(0)
    before = ctl.call_counts(ORDER)
    ctl.fail_nth("__tgt_rtl_deinit_device", 1)
    with pytest.raises(osh.PluginCallError):
        plugin.release()
    assert plugin.users == 0 and plugin.initialized and ctl.is_plugin_initialized()
    assert ctl.is_device_initialized(ABI_LLVM, 0)           # its deinit failed
    plugin.acquire()
    assert _delta(ctl, before)["__tgt_rtl_init_plugin"] == 0
    assert plugin.users == 1 and ctl.is_plugin_initialized()
    plugin._deinit_device(0)
    plugin.release()
    assert _delta(ctl, before) == {"__tgt_rtl_init_plugin": 0, "__tgt_rtl_init_device": 0,
                                   "__tgt_rtl_deinit_device": 2, "__tgt_rtl_deinit_plugin": 1}
    assert not ctl.is_plugin_initialized() and plugin.initialized is False


def test_release_that_is_not_the_last_keeps_plugin_and_devices(plugin, ctl):
    plugin.acquire()
    plugin.acquire()
    assert plugin.acquire_device(1) is True
    assert plugin.acquire_device(1) is False
    before = ctl.call_counts(ORDER)
    plugin.release()
    assert _delta(ctl, before)["__tgt_rtl_deinit_device"] == 0
    assert _delta(ctl, before)["__tgt_rtl_deinit_plugin"] == 0
    assert plugin.device_initialized(1) and ctl.is_device_initialized(ABI_LLVM, 1)
    assert plugin.release_device(1) is False          # one user left
    assert plugin.device_initialized(1)
    assert plugin.release_device(1) is True           # the last: deinit_device ran
    assert not plugin.device_initialized(1)
    plugin.release()
    assert _delta(ctl, before) == {"__tgt_rtl_init_plugin": 0, "__tgt_rtl_init_device": 0,
                                   "__tgt_rtl_deinit_device": 1, "__tgt_rtl_deinit_plugin": 1}


@pytest.mark.parametrize("dev", [4, -1, 99, "0", 1.0, None])
def test_device_numbers_outside_the_plugin_are_refused_before_it(plugin, ctl, dev):
    plugin.acquire()
    before = ctl.call_counts(ORDER)
    try:
        with pytest.raises(ValueError, match="out of range"):
            plugin.acquire_device(dev)
        assert _delta(ctl, before)["__tgt_rtl_init_device"] == 0
    finally:
        plugin.release()


def test_a_plugin_with_no_device_refuses_device_0(plugin, ctl):
    plugin.acquire()
    n = plugin.num_devices                            # restored afterwards
    plugin.release()
    ctl.set_num_devices(0)
    try:
        plugin.acquire()
        assert plugin.num_devices == 0
        with pytest.raises(ValueError, match="out of range"):
            plugin.acquire_device(0)
        plugin.release()
    finally:
        ctl.set_num_devices(n)


def test_reacquire_after_the_last_release_initialises_again(plugin, ctl):
    before = ctl.call_counts(ORDER)
    plugin.acquire()
    assert plugin.acquire_device(0) is True
    assert plugin.acquire_device(0) is False          # second user: no second init
    plugin.release()
    plugin.acquire()
    assert plugin.acquire_device(0) is True           # deinitialised by the release above
    plugin.release_device(0)
    plugin.release()
    assert _delta(ctl, before) == {"__tgt_rtl_init_plugin": 2, "__tgt_rtl_init_device": 2,
                                   "__tgt_rtl_deinit_device": 2, "__tgt_rtl_deinit_plugin": 2}


def test_release_without_acquire_is_refused(plugin, ctl):
    before = ctl.call_counts(ORDER)
    with pytest.raises(osh.LifecycleError, match="release without acquire"):
        plugin.release()
    plugin.acquire()
    with pytest.raises(osh.LifecycleError, match="not initialised"):
        plugin.release_device(3)
    plugin.release()
    assert _delta(ctl, before)["__tgt_rtl_deinit_device"] == 0
