"""The CUDA driver stand-in (``cuda_standin.c``): build it and run code against it.

NOT A GPU: a ``libcuda.so.1`` over host memory that records every call and
answers with the driver's control flow and error codes (see the C file).  It
lets CI drive the LLVM 16 CUDA plugins, the GCC 12 nvptx plugin and
cuda-python through their CUDA paths.  Everything run against it is labelled
``stand-in``; its device is named :data:`DEVICE_NAME`, so no result made
with it can pass for a GPU result.

The driver is found the way the real one is: by ``dlopen`` of
``libcuda.so.1`` (cuda-python, the GCC plugin) or ``libcuda.so`` (the LLVM 16
CUDA plugins) on the library path, so code runs against it in a child process
started with :func:`env`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("cuda_standin.c")
DEVICE_NAME = "offload_shim CUDA driver stand-in (no GPU)"


def compiler() -> str | None:
    """The C compiler used to build the stand-in (``$CC``, cc, gcc), or None."""
    for cand in (os.environ.get("CC"), "cc", "gcc"):
        if cand and shutil.which(cand):
            return cand
    return None


def build(dest: str | os.PathLike) -> Path:
    """Build ``dest/libcuda.so.1`` (SONAME ``libcuda.so.1``) and the
    development link ``dest/libcuda.so``; returns ``dest``.  Rebuilds only
    when the source is newer.  Raises RuntimeError without a C compiler or
    when the build fails."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    lib = dest / "libcuda.so.1"
    if not lib.exists() or lib.stat().st_mtime < SOURCE.stat().st_mtime:
        cc = compiler()
        if cc is None:
            raise RuntimeError("no C compiler (cc/gcc) to build the CUDA driver stand-in")
        tmp = dest / "libcuda.so.1.tmp"
        cmd = [cc, "-std=gnu11", "-O1", "-g", "-shared", "-fPIC", "-fvisibility=hidden",
               "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wl,-soname,libcuda.so.1",
               "-o", str(tmp), str(SOURCE), "-lpthread"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"building the CUDA driver stand-in failed: {' '.join(cmd)}\n"
                               f"{proc.stderr}")
        os.replace(tmp, lib)
    link = dest / "libcuda.so"
    if not link.is_symlink():
        if link.exists():
            link.unlink()
        link.symlink_to("libcuda.so.1")
    return dest


def env(libdir: str | os.PathLike, *, log: str | os.PathLike | None = None,
        devices: int | None = None, memory: int | None = None, fail: str | None = None,
        base: dict | None = None) -> dict:
    """An environment for a child process that finds the stand-in first
    (``LD_LIBRARY_PATH``).  ``log``: file for the call log; ``devices``;
    ``memory`` (bytes per device); ``fail``: ``"name:n:code,..."`` (the n-th
    call of an entry point returns ``code``)."""
    e = dict(os.environ if base is None else base)
    old = e.get("LD_LIBRARY_PATH", "")
    e["LD_LIBRARY_PATH"] = str(libdir) + (os.pathsep + old if old else "")
    for key, val in (("OSH_CUDA_STANDIN_LOG", log), ("OSH_CUDA_STANDIN_DEVICES", devices),
                     ("OSH_CUDA_STANDIN_MEM", memory), ("OSH_CUDA_STANDIN_FAIL", fail)):
        if val is None:
            e.pop(key, None)
        else:
            e[key] = str(val)
    return e


def read_log(path: str | os.PathLike) -> list[tuple[str, str, int]]:
    """The call log as ``[(function, arguments, result code)]``."""
    out = []
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text().splitlines():
        head, _, rc = line.rpartition(" -> ")
        parts = head.split(" ", 2)
        if len(parts) >= 2 and rc.strip().lstrip("-").isdigit():
            out.append((parts[1], parts[2] if len(parts) > 2 else "", int(rc)))
    return out


__all__ = ["SOURCE", "DEVICE_NAME", "compiler", "build", "env", "read_log"]
