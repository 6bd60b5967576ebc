"""The compilers ``offload-shim fuzz`` builds with, each linked to its own runtime.

clang-16 links the system's libomptarget 16 (Debian ``libomp5-16``).  clang-19 and
clang-22 link libomptarget 19.1 / 22.1, which conflict with ``libomp5-16`` as Debian
packages and are unpacked by ``scripts/setup.sh``: LLVM 19 under
``$OFFLOAD_SHIM_LLVM19_ROOT`` (default ``.cache/llvm19`` of the checkout), LLVM 22
under ``$OFFLOAD_SHIM_LIBOFFLOAD_ROOT`` (``.cache/liboffload22``).  A program is built
with an rpath into its release's library folder, so running it as it is gives the
reference: its own runtime.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

OMP_FLAGS = ("-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-fopenmp-version=51",
             "-Xoffload-linker", "-Bsymbolic")

_ROOTS = {19: ("OFFLOAD_SHIM_LLVM19_ROOT", ".cache/llvm19"),
          22: ("OFFLOAD_SHIM_LIBOFFLOAD_ROOT", ".cache/liboffload22")}
_LIBOMPTARGET = {16: "libomptarget.so.16", 19: "libomptarget.so.19.1", 22: "libomptarget.so"}


class ToolchainError(Exception):
    """A compiler that cannot be used here (not installed, its runtime not unpacked)."""


def _checkout_roots() -> list[Path]:
    """Where a checkout's ``.cache`` may be: the working directory and its parents
    (``make test`` runs in tests/), then the folders above the package (a checkout
    run from its source, or the checkout whose ``.venv`` holds the installed
    package)."""
    here = Path.cwd().resolve()
    out = [here, *here.parents]
    for p in Path(__file__).resolve().parents:
        if p not in out:
            out.append(p)
    return out


@dataclass(frozen=True)
class Toolchain:
    """clang-``version`` with ``lib``, the folder holding its ``libomptarget`` (the
    system's for 16)."""
    version: int
    lib: Path

    @property
    def cc(self) -> str:
        return f"clang-{self.version}"

    @property
    def name(self) -> str:
        return self.cc

    def flags(self) -> list[str]:
        out = list(OMP_FLAGS)
        if self.version != 16:
            out += [f"-I{self.lib}/clang/{self.version}/include", f"-L{self.lib}"]
        return out + [f"-Wl,-rpath,{self.lib}"]

    def build(self, source: str, out_dir: Path, stem: str = "fuzz") -> Path:
        """Compile ``source`` (C) into ``out_dir`` (cached by the source's hash);
        returns the executable.  Raises subprocess.CalledProcessError with the
        compiler's output, subprocess.TimeoutExpired past 600 s."""
        key = hashlib.sha256(("\0".join(self.flags()) + source).encode()).hexdigest()[:16]
        exe = out_dir / f"{stem}-{self.cc}-{key}"
        if exe.exists():
            return exe
        src = out_dir / f"{stem}-{key}.c"
        src.write_text(source)
        tmp = exe.with_name(exe.name + ".tmp")
        # the compiler's own temporary files (offload bundles, objects) go to out_dir too:
        # an interrupted campaign removes them with its work folder, none stays in /tmp
        subprocess.run([self.cc, "-O1", *self.flags(), str(src), "-o", str(tmp)], check=True,
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, TMPDIR=str(out_dir)))
        tmp.replace(exe)
        return exe


def toolchain(version: int) -> Toolchain:
    """clang-``version`` (16, 19 or 22) with its runtime; raises ToolchainError naming
    what is missing, ValueError for another version."""
    if version not in _LIBOMPTARGET:
        raise ValueError(f"clang-{version}: supported compilers are 16, 19 and 22")
    if shutil.which(f"clang-{version}") is None:
        raise ToolchainError(f"clang-{version} is not installed")
    if version == 16:
        lib = Path("/usr/lib/llvm-16/lib")
    else:
        var, rel = _ROOTS[version]
        candidates = [Path(os.environ[var])] if os.environ.get(var) else []
        candidates += [r / rel for r in _checkout_roots()]
        lib = None
        for root in candidates:
            cand = root / f"usr/lib/llvm-{version}/lib"
            if (cand / _LIBOMPTARGET[version]).exists():
                lib = cand
                break
        if lib is None:
            raise ToolchainError(f"clang-{version}: libomptarget {version} not found (set "
                                 f"${var} or run scripts/setup.sh)")
    if not (lib / _LIBOMPTARGET[version]).exists():
        raise ToolchainError(f"clang-{version}: {lib / _LIBOMPTARGET[version]} missing")
    return Toolchain(version, lib)


__all__ = ["Toolchain", "ToolchainError", "toolchain"]
