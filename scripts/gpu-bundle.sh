#!/usr/bin/env bash
# Build, here, the one folder a lent GPU machine needs for scripts/gpu-check.sh
# (docs/testing.md, "GPU check").  That machine has Python 3.12 with cuda-bindings,
# CuPy, pytest and hypothesis, and reaches no package registry; everything else
# travels in this folder (ignored by git, carried by the device call):
#
#   wheels/     the project (py3 wheel: the bundled plugin and the interposer prebuilt)
#               and pyelftools (pip download for CPython 3.12)
#   root.tar.xz the LLVM 16 CUDA plugins (libomp5-16) with libLLVM-16.so.1 (libllvm16),
#               the GCC 12 nvptx plugin (libgomp-plugin-nvptx1) with libgomp.so.1
#               (libgomp1), unpacked from their Debian packages; fallback/: the
#               libraries they need beyond glibc (libz3, libxml2 + ICU 72, libedit,
#               libffi, libstdc++ ...), used there only for sonames the machine lacks
#   MANIFEST.txt what is inside, package versions, sha256 of every file
#
# usage: scripts/gpu-bundle.sh [DIR]       (default .gpu-bundle; needs apt-get, dpkg-deb,
#                                           xz, a venv from `make setup`; ~3 min)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="${1:-$ROOT/.gpu-bundle}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
# the device call carries at most 64 MiB with the working tree: keep the bundle under 56
LIMIT=$((56 * 1024 * 1024))

PLUGIN_DEBS="libllvm16 libomp5-16 libgomp-plugin-nvptx1 libgomp1"
FALLBACK_DEBS="libz3-4 libxml2 libicu72 libedit2 libbsd0 libmd0 libffi8 libtinfo6 libzstd1
liblzma5 zlib1g libstdc++6 libgcc-s1"

for tool in apt-get dpkg-deb xz sha256sum readelf; do
  command -v "$tool" >/dev/null || { echo "gpu-bundle: $tool not found" >&2; exit 1; }
done
[ -x "$PY" ] || { echo "gpu-bundle: $PY not found (run make setup, or set PYTHON)" >&2; exit 1; }

STAGE="$(mktemp -d /tmp/osh-gpu-bundle.XXXXXX)"
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/debs" "$STAGE/unpacked" "$STAGE/sel" "$STAGE/wheels"

echo "[gpu-bundle] Debian packages"
(cd "$STAGE/debs" && apt-get download $PLUGIN_DEBS $FALLBACK_DEBS >/dev/null 2>&1) || {
  echo "gpu-bundle: apt-get download failed (is the Debian archive reachable?)" >&2; exit 1; }
for deb in "$STAGE"/debs/*.deb; do dpkg-deb -x "$deb" "$STAGE/unpacked"; done

echo "[gpu-bundle] selecting files"
U="$STAGE/unpacked"
S="$STAGE/sel"
mkdir -p "$S/usr/lib/llvm-16/lib" "$S/usr/lib/x86_64-linux-gnu" "$S/fallback"
for f in libomptarget.rtl.cuda.nextgen.so.16 libomptarget.rtl.cuda.so.16; do
  cp -a "$U/usr/lib/llvm-16/lib/$f" "$S/usr/lib/llvm-16/lib/"
done
# the plugins' RUNPATH is $ORIGIN: libLLVM-16.so.1 is found through this link (as in
# Debian's llvm-16 package)
ln -s ../../x86_64-linux-gnu/libLLVM-16.so.1 "$S/usr/lib/llvm-16/lib/libLLVM-16.so.1"
cp -a "$U"/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 "$S/usr/lib/x86_64-linux-gnu/"
cp -a "$U"/usr/lib/x86_64-linux-gnu/libgomp-plugin-nvptx.so.1* "$S/usr/lib/x86_64-linux-gnu/"
cp -a "$U"/usr/lib/x86_64-linux-gnu/libgomp.so.1* "$S/usr/lib/x86_64-linux-gnu/"
# fallbacks: every non-glibc library the plugins need, by soname (links resolved)
sonames() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
glibc='^(libc|libm|libdl|libpthread|librt|ld-linux-x86-64)\.so'
todo="$(for f in "$S"/usr/lib/llvm-16/lib/libomptarget.rtl.cuda*.so.16 \
                 "$S"/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 \
                 "$S"/usr/lib/x86_64-linux-gnu/libgomp-plugin-nvptx.so.1; do sonames "$f"; done)"
seen=" libLLVM-16.so.1 libgomp.so.1 "
while [ -n "$todo" ]; do
  next=""
  for so in $todo; do
    case "$seen" in *" $so "*) continue ;; esac
    seen="$seen$so "
    echo "$so" | grep -Eq "$glibc" && continue
    src="$(find "$U/usr/lib/x86_64-linux-gnu" "$U/lib/x86_64-linux-gnu" -name "$so" 2>/dev/null | head -1)"
    [ -n "$src" ] || { echo "gpu-bundle: $so not found in the unpacked packages" >&2; exit 1; }
    cp -L "$src" "$S/fallback/$so"
    next="$next $(sonames "$S/fallback/$so")"
  done
  todo="$next"
done

echo "[gpu-bundle] compressing (xz -9e; about 2 minutes)"
mkdir -p "$DEST.tmp"
rm -rf "$DEST.tmp"/*
tar -C "$S" -cf - . | xz -9e -T0 > "$DEST.tmp/root.tar.xz"

echo "[gpu-bundle] wheels"
mkdir -p "$DEST.tmp/wheels"
"$PY" -m pip wheel -q --no-deps -w "$DEST.tmp/wheels" "$ROOT"
ELF_VER="$("$PY" -c 'import importlib.metadata as m; print(m.version("pyelftools"))')"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d "$DEST.tmp/wheels" "pyelftools==$ELF_VER"

{
  echo "# offload_shim GPU bundle (scripts/gpu-bundle.sh), $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# built on: $(. /etc/os-release; echo "$PRETTY_NAME"), $(uname -m)"
  echo "# Debian packages:"
  for deb in "$STAGE"/debs/*.deb; do
    echo "#   $(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)"
  done
  echo "# root.tar.xz holds:"
  (cd "$S" && find . -type f -o -type l | sort | sed 's/^/#   /')
  echo "# sha256 of the files of this folder:"
  (cd "$DEST.tmp" && sha256sum root.tar.xz wheels/*.whl)
} > "$DEST.tmp/MANIFEST.txt"

size=$(du -sb "$DEST.tmp" | cut -f1)
if [ "$size" -gt "$LIMIT" ]; then
  echo "gpu-bundle: $size bytes, more than the $LIMIT allowed" >&2
  exit 1
fi
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "[gpu-bundle] $DEST: $size bytes ($(ls "$DEST" "$DEST"/wheels | tr '\n' ' '))"
