#!/usr/bin/env bash
# Regenerate the corpus of real device images (tests/test_image_corpus.py): each program
# below built by clang-16, clang-19 and clang-22 (x86_64 host offloading) with the flags
# given, its device image taken out of the executable (.llvm.offloading -> OffloadBinary ->
# the linked device ELF), and GCC 12 nvptx-offload host binaries kept whole.
#   LLVM19_ROOT / LLVM22_ROOT: folders with the unpacked libomp-19-dev / libomp-22-dev +
#   liboffload-22 packages (scripts/setup.sh unpacks them into .cache/); missing -> skipped.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-$here/../../../.venv/bin/python}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/kernel.c" <<'C'
#include <stdio.h>
int main(void) {
  int a[8];
  for (int i = 0; i < 8; i++) a[i] = i;
#pragma omp target map(tofrom : a)
  for (int i = 0; i < 8; i++) a[i] *= 3;
  printf("%d\n", a[7]);
  return 0;
}
C
cat > "$tmp/nokernel.c" <<'C'
int main(void) {
  int v = 1;
#pragma omp target enter data map(to : v)
#pragma omp target exit data map(delete : v)
  return 0;
}
C
cat > "$tmp/globals.c" <<'C'
#pragma omp declare target
int g[4] = {1, 2, 3, 4};
double h;
#pragma omp end declare target
int main(void) {
#pragma omp target update from(g)
  return g[0] - 1;
}
C
cat > "$tmp/ctor.cpp" <<'C'
#include <cstdio>
struct S { int v; S() : v(42) {} ~S() { std::printf("bye\n"); } };
#pragma omp declare target
S s;
#pragma omp end declare target
int main() {
  int r = 0;
#pragma omp target map(from : r)
  r = s.v;
  return r == 42 ? 0 : 1;
}
C
cat > "$tmp/link.c" <<'C'
int big[64];
#pragma omp declare target link(big)
int main(void) {
#pragma omp target map(tofrom : big)
  big[3] = 7;
  return big[3] - 7;
}
C
extract() {   # executable -> device image
  "$py" - "$1" "$2" <<'P'
import io, sys
from elftools.elf.elffile import ELFFile
from offload_shim.elf.imageinfo import unwrap_image
data = open(sys.argv[1], "rb").read()
sec = ELFFile(io.BytesIO(data)).get_section_by_name(".llvm.offloading")
img, _ = unwrap_image(sec.data())
open(sys.argv[2], "wb").write(img)
P
}
build() {     # version cc flags... -> clang<v>-<name>
  local v=$1 name=$2 src=$3; shift 3
  local cc=clang-$v extra=()
  case $src in *.cpp) cc=clang++-$v ;; esac
  if [ "$v" != 16 ]; then
    local root; root=$([ "$v" = 19 ] && echo "${LLVM19_ROOT:-}" || echo "${LLVM22_ROOT:-}")
    [ -n "$root" ] || { echo "skip clang-$v (LLVM${v}_ROOT unset)"; return; }
    extra=(-I"$root/usr/lib/llvm-$v/lib/clang/$v/include" -L"$root/usr/lib/llvm-$v/lib")
  fi
  "$cc" -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu "${extra[@]}" "$@" "$tmp/$src" \
    -o "$tmp/$name.exe"
  extract "$tmp/$name.exe" "$here/clang$v-$name.so"
}
for v in 16 19 22; do
  build "$v" kernel-O0 kernel.c -O0
  build "$v" kernel-O3 kernel.c -O3
  build "$v" kernel-g kernel.c -g
  build "$v" nokernel nokernel.c
  build "$v" globals globals.c
  build "$v" ctor ctor.cpp
  build "$v" link link.c
done
# GCC 12: the host executable carries the offload tables and the nvptx target data (PTX
# text, not an ELF image); a kernel pulls in 500 KB of device libgomp, so only the
# globals-only program is kept (tests/test_interpose_gcc.py builds kernels at test time)
if command -v gcc-12 >/dev/null && [ -d /usr/lib/gcc/x86_64-linux-gnu/12/accel/nvptx-none ]; then
  gcc-12 -fopenmp -foffload=nvptx-none -foffload-options=nvptx-none=-misa=sm_80 -O1 \
    "$tmp/globals.c" -o "$here/gcc12-nvptx-globals.exe"
fi
ls -la "$here"
