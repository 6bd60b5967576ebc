"""Verdicts of the hostile-input checks kept across runs (offload_shim/safety/verdicts.py):
stored by content hash and checking code, in a directory only this user can write,
used for the ELF checks of images and the plugin probes, and never trusted from a
directory others can write."""

from __future__ import annotations

import os
import shutil
import stat

import pytest

import offload_shim as osh
from offload_shim import elf
from offload_shim.core import images
from offload_shim.safety import verdicts
from offload_shim.safety import isolation


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "verdicts"
    monkeypatch.setenv(verdicts.CACHE_DIR_VAR, str(d))
    monkeypatch.delenv(verdicts.NO_CACHE_VAR, raising=False)
    return d


def test_roundtrip_and_permissions(cache):
    mods = ("offload_shim.elf",)
    assert verdicts.get("t", mods, "ab" * 32) is None
    verdicts.put("t", mods, "ab" * 32, {"x": 1})
    assert verdicts.get("t", mods, "ab" * 32) == {"x": 1}
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    files = list(cache.iterdir())
    assert len(files) == 1 and stat.S_IMODE(files[0].stat().st_mode) == 0o600
    # another content, another kind or other checking code: another verdict
    assert verdicts.get("t", mods, "cd" * 32) is None
    assert verdicts.get("u", mods, "ab" * 32) is None
    assert verdicts.get("t", ("offload_shim.safety.isolation",), "ab" * 32) is None


def test_no_cache_and_foreign_directories(tmp_path, monkeypatch):
    monkeypatch.setenv(verdicts.CACHE_DIR_VAR, str(tmp_path / "a"))
    monkeypatch.setenv(verdicts.NO_CACHE_VAR, "1")
    verdicts.put("t", (), "00", {"x": 1})
    assert not (tmp_path / "a").exists()
    monkeypatch.delenv(verdicts.NO_CACHE_VAR)
    open_dir = tmp_path / "b"
    open_dir.mkdir(mode=0o777)
    os.chmod(open_dir, 0o777)                   # writable by anyone: never used
    monkeypatch.setenv(verdicts.CACHE_DIR_VAR, str(open_dir))
    verdicts.put("t", (), "00", {"x": 1})
    assert list(open_dir.iterdir()) == []
    assert verdicts.get("t", (), "00") is None


def test_a_corrupt_file_is_no_verdict(cache):
    verdicts.put("t", (), "11", {"x": 1})
    (f,) = cache.iterdir()
    f.write_text("{not json")
    assert verdicts.get("t", (), "11") is None


def test_elf_checks_run_once_per_content(cache, monkeypatch, sample_path):
    data = open(sample_path, "rb").read()
    first = images._checked_elf(data)
    assert first == ("EM_X86_64", "ET_DYN")

    def boom(_data):
        raise AssertionError("the checks ran again")
    monkeypatch.setattr(elf, "machine", boom)
    assert images._checked_elf(data) == first
    img = osh.OffloadImage(data, [osh.HostEntry("vec_add")])
    assert img.machine == "EM_X86_64"


def test_elf_refusals_are_kept_too(cache, monkeypatch, sample_path):
    bad = bytearray(open(sample_path, "rb").read())
    bad[4] = 1                                  # ELFCLASS32
    with pytest.raises(osh.InvalidImageError) as first:
        images._checked_elf(bytes(bad))
    monkeypatch.setattr(elf, "machine", lambda _d: ("EM_X86_64"))
    with pytest.raises(osh.InvalidImageError) as again:
        images._checked_elf(bytes(bad))
    assert str(again.value) == str(first.value)


def test_known_good_plugins(cache, tmp_path, bundled_path):
    copy = tmp_path / "libomptarget.rtl.copy.so"
    shutil.copyfile(bundled_path, copy)
    assert not isolation.plugin_known_good(str(copy))
    isolation.remember_good_plugin(str(copy))
    assert isolation.plugin_known_good(str(copy))
    with open(copy, "ab") as f:                 # other bytes: unknown again
        f.write(b"\0")
    assert not isolation.plugin_known_good(str(copy))
    assert not isolation.plugin_known_good(str(tmp_path / "missing.so"))
    assert not isolation.plugin_known_good(str(tmp_path))


def test_content_hashes_are_sha256_first_and_later(monkeypatch, sample_path):
    import hashlib
    data = open(sample_path, "rb").read()
    monkeypatch.setattr(verdicts, "_openssl_sha256", None)     # as in a fresh process
    monkeypatch.setattr(verdicts, "_hashed_once", False)
    first = verdicts.sha256(data)
    second = verdicts.sha256(data)
    assert first == second == verdicts.sha256(bytearray(data)) \
        == hashlib.sha256(data).hexdigest()
