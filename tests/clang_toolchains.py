"""The clang releases the tests build with, and where their own runtimes are.

clang-16 comes with the Debian libomptarget 16 and its host plugins.  clang-19 and
clang-22 are installed with apt-get, but their runtimes (libomp-19-dev, libomp-22-dev,
liboffload-22) conflict with libomp5-16, so scripts/setup.sh unpacks them: LLVM 19 into
``$OFFLOAD_SHIM_LLVM19_ROOT`` (.cache/llvm19), LLVM 22 into
``$OFFLOAD_SHIM_LIBOFFLOAD_ROOT`` (.cache/liboffload22, shared with the liboffload
family).  A program built by clang-N links ``libomptarget.so.N`` of its own release
(rpath into the unpacked tree), so running it as it is gives the reference result.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OMP_FLAGS = ("-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu")


def _root(env: str, default: str) -> Path:
    return Path(os.environ.get(env) or ROOT / default)


@dataclass(frozen=True)
class Clang:
    """clang-``version``: ``cc``, ``runtime_lib`` (the folder holding its
    ``libomptarget.so``; None = the system's), the files it needs (``required``)."""
    version: int
    cc: str
    runtime_lib: Path | None
    required: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.cc

    @property
    def cxx(self) -> str:
        return self.cc.replace("clang-", "clang++-")

    def missing(self) -> str | None:
        """Why this compiler cannot build and run here (skip reason), or None."""
        if shutil.which(self.cc) is None:
            return f"{self.cc} not installed (scripts/setup.sh installs it with apt-get)"
        for f in self.required:
            if not Path(f).exists():
                return f"{f} missing (scripts/setup.sh)"
        return None

    def flags(self, shared: bool = False) -> list[str]:
        """Compile and link flags: OpenMP offloading to x86_64, the release's omp.h,
        ``-L``/rpath to its runtime, ``-Bsymbolic`` for the device image (and the
        library, docs/interpose.md)."""
        out = list(OMP_FLAGS) + ["-Xoffload-linker", "-Bsymbolic"]
        lib = self.runtime_lib or Path(f"/usr/lib/llvm-{self.version}/lib")
        if self.runtime_lib is not None:
            out += [f"-I{lib}/clang/{self.version}/include", f"-L{lib}"]
        out += [f"-Wl,-rpath,{lib}"]
        if shared:
            out += ["-fPIC", "-shared", "-Wl,-Bsymbolic"]
        return out

    def build(self, source: Path, *, shared: bool = False, defines: tuple = (),
              link: tuple = ()) -> Path:
        """Compile ``source`` (an executable, or a shared library) into a cache under
        ``$TMPDIR/osh-clang`` keyed by the compiler, flags, ``link`` (extra link
        arguments after the source: libraries to link, with their rpath) and source;
        returns the path.  Raises subprocess.CalledProcessError with the compiler's
        output."""
        flags = self.flags(shared) + [f"-D{d}" for d in defines]
        key = hashlib.sha256("\0".join([self.cc, *flags, *link,
                                         source.read_text()]).encode())
        out_dir = Path(tempfile.gettempdir()) / "osh-clang"
        out_dir.mkdir(exist_ok=True)
        out = out_dir / f"{source.stem}-{self.cc}-{key.hexdigest()[:12]}" \
                        f"{'.so' if shared else ''}"
        if not out.exists():
            tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
            subprocess.run([self.cc, *flags, str(source), *link, "-o", str(tmp)], check=True,
                           capture_output=True, text=True, timeout=300)
            tmp.replace(out)
        return out


LLVM19_LIB = _root("OFFLOAD_SHIM_LLVM19_ROOT", ".cache/llvm19") / "usr/lib/llvm-19/lib"
LLVM22_LIB = _root("OFFLOAD_SHIM_LIBOFFLOAD_ROOT", ".cache/liboffload22") / "usr/lib/llvm-22/lib"

CLANG16 = Clang(16, "clang-16", None, ("/usr/lib/llvm-16/bin/clang-linker-wrapper",
                                       "/usr/lib/llvm-16/lib/libomptarget.so.16"))
CLANG19 = Clang(19, "clang-19", LLVM19_LIB, ("/usr/lib/llvm-19/bin/clang-linker-wrapper",
                                             str(LLVM19_LIB / "libomptarget.so.19.1"),
                                             str(LLVM19_LIB / "libomptarget.devicertl.a")))
CLANG22 = Clang(22, "clang-22", LLVM22_LIB, ("/usr/lib/llvm-22/bin/clang-linker-wrapper",
                                             "/usr/lib/llvm-22/bin/llvm-offload-binary",
                                             str(LLVM22_LIB / "libomptarget.so"),
                                             str(LLVM22_LIB / "libomp.so")))
COMPILERS = (CLANG16, CLANG19, CLANG22)


def toolchain_fields(cc: Clang) -> dict:
    """The fields of a differential-harness toolchain (name, cc, cxx, compile ``flags``
    after the OpenMP ones, link ``ldflags``, ``required`` files) for ``cc``: what a
    compiler-parametrised harness needs to build with clang-19/22 against their
    unpacked runtimes; the reference run is the program as built (rpath)."""
    lib = cc.runtime_lib
    inc = (f"-I{lib}/clang/{cc.version}/include",) if lib is not None else ()
    link = (f"-L{lib}", f"-Wl,-rpath,{lib}") if lib is not None else ()
    return {"name": cc.name, "cc": cc.cc, "cxx": cc.cxx, "flags": inc, "ldflags": link,
            "required": cc.required}
