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


# -- the bound, pruning and clearing (issue 32) ---------------------------------------

def _fill(d, n, *, start=0, mtime=None):
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    for i in range(start, start + n):
        p = d / f"elf-{i:064x}.json"
        p.write_text('{"ok": true}')
        if mtime is not None:
            os.utime(p, (mtime + i, mtime + i))


def _names(d):
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".json"))


def test_prune_removes_expired_then_the_oldest(cache):
    import time
    now = time.time()
    _fill(cache, 5, mtime=now - verdicts.MAX_AGE_S - 100)          # expired
    _fill(cache, 10, start=5, mtime=now - 1000)                   # 5..14, oldest first
    left = f".elf-{99:064x}.json.123.1"
    (cache / left).write_text("")                                 # a dead writer's leftover
    os.utime(cache / left, (now - 7200, now - 7200))
    assert verdicts.prune(str(cache), max_entries=4, now=now) == 11
    assert _names(cache) == [f"elf-{i:064x}.json" for i in range(11, 15)]
    assert not (cache / left).exists()


def test_prune_and_clear_touch_only_verdict_files(cache):
    """OFFLOAD_SHIM_CACHE_DIR may name a folder holding the user's own files: old or
    new, JSON or not, dotted or not, they are neither counted, pruned nor cleared."""
    import time
    now = time.time()
    _fill(cache, 2)
    own = ["notes.txt", "data.json", "abc", ".hidden", "elf-x.json", ".elf-x.json.1.2",
           f"elf-{1:063x}.json", f"elf-{1:064x}.json.bak"]
    for name in own:
        (cache / name).write_text("mine")
        os.utime(cache / name, (now - 2 * verdicts.MAX_AGE_S, now - 2 * verdicts.MAX_AGE_S))
    assert verdicts.prune(str(cache), max_entries=0, now=now) == 2
    assert verdicts.usage()["entries"] == 0
    _fill(cache, 2)
    assert verdicts.usage()["entries"] == 2
    assert verdicts.clear() == 2
    assert sorted(p.name for p in cache.iterdir()) == sorted(own)


def test_writes_keep_the_cache_under_its_bound(cache, monkeypatch):
    monkeypatch.setattr(verdicts, "MAX_ENTRIES", 20)
    monkeypatch.setattr(verdicts, "_pruned", set())
    _fill(cache, 20)
    verdicts.put("t", (), "00" * 32, {"x": 1})        # the first write: a full pass,
    assert len(_names(cache)) == 16                  # past 20: down to 80 %
    for i in range(40):
        verdicts.put("t", (), f"{i:064x}", {"x": i})
        assert 16 <= len(_names(cache)) <= 20
    assert verdicts.get("t", (), f"{39:064x}") == {"x": 39}       # the newest stays


def test_usage_and_clear(cache, monkeypatch):
    _fill(cache, 3)
    u = verdicts.usage()
    assert (u["directory"], u["entries"], u["bytes"], u["enabled"]) == \
        (str(cache), 3, 3 * len('{"ok": true}'), True)
    assert u["max_entries"] == verdicts.MAX_ENTRIES and u["max_age_s"] == verdicts.MAX_AGE_S
    assert verdicts.clear() == 3 and _names(cache) == [] and cache.is_dir()
    monkeypatch.setenv(verdicts.NO_CACHE_VAR, "1")
    assert verdicts.usage()["enabled"] is False
    cache.chmod(0o777)
    with pytest.raises(PermissionError, match="not emptied"):
        verdicts.clear()


def test_cache_command(cache):
    import json
    import subprocess
    import sys
    _fill(cache, 2)
    cli = [sys.executable, "-m", "offload_shim.cli", "cache"]
    p = subprocess.run([*cli, "info", "--json"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and json.loads(p.stdout)["entries"] == 2, p.stderr
    p = subprocess.run([*cli, "info"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "2 verdicts" in p.stdout and "1,000 verdicts" in p.stdout
    p = subprocess.run([*cli, "clear"], capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout) == (0, f"removed 2 verdicts from {cache}\n"), p.stderr
    cache.chmod(0o777)
    p = subprocess.run([*cli, "clear"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.startswith("offload-shim: error: cache clear:")


def _forget_digests(monkeypatch):
    """A new process's view: no digest or verdict remembered in memory."""
    monkeypatch.setattr(verdicts, "_digests", {})
    monkeypatch.setattr(verdicts, "_seen", {})


def test_file_sha256_is_stored_under_the_stat_identity(cache, tmp_path, monkeypatch):
    """file_sha256 keeps a file's digest under its path, inode, size, mtime and ctime: a
    later process reads it instead of hashing (a plugin is hashed once, not in every run),
    and any write -- even one that keeps the size and puts the mtime back -- is hashed
    again (the ctime moved)."""
    import hashlib
    f = tmp_path / "plugin.so"
    f.write_bytes(b"a" * 5000)
    old = os.stat(f).st_mtime_ns - 3_000_000_000
    os.utime(f, ns=(old, old))
    monkeypatch.setattr(verdicts, "RACY_S", 0.0)    # the ctime is the write's: not racy here
    want = hashlib.sha256(b"a" * 5000).hexdigest()
    assert verdicts.file_sha256(str(f)) == want
    stored = [p.name for p in cache.iterdir() if p.name.startswith("file-sha256-")]
    assert len(stored) == 1
    _forget_digests(monkeypatch)
    reads = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: (reads.append(str(p)),
                                                             real_open(p, *a, **k))[1])
    assert verdicts.file_sha256(str(f)) == want
    assert str(f) not in reads                    # read from the stored digest
    monkeypatch.undo()
    monkeypatch.setenv(verdicts.CACHE_DIR_VAR, str(cache))
    monkeypatch.delenv(verdicts.NO_CACHE_VAR, raising=False)
    _forget_digests(monkeypatch)
    f.write_bytes(b"b" * 5000)                    # same size, mtime put back: ctime moves
    os.utime(f, ns=(old, old))
    assert verdicts.file_sha256(str(f)) == hashlib.sha256(b"b" * 5000).hexdigest()


def test_file_sha256_does_not_store_a_file_changed_just_now(cache, tmp_path, monkeypatch):
    """A file changed within RACY_S of the read is hashed every time (a second change in
    the same timestamp tick would keep its stat identity), with the right digest."""
    import hashlib
    f = tmp_path / "lib.so"
    f.write_bytes(b"x" * 100)
    monkeypatch.setattr(verdicts, "RACY_S", 3600.0)
    assert verdicts.file_sha256(str(f)) == hashlib.sha256(b"x" * 100).hexdigest()
    assert not [p for p in cache.iterdir() if p.name.startswith("file-sha256-")] \
        if cache.exists() else True
    with pytest.raises(OSError):
        verdicts.file_sha256(str(tmp_path / "missing.so"))
