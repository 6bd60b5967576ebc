#!/usr/bin/env bash
# Set up a fresh machine for offload_shim: the Debian packages the real plugins
# come from (best effort), the LLVM 14 plugins unpacked beside the project, a
# virtual environment and the package installed into it.
#   usage: scripts/setup.sh [extras]     (extras default: test,cuda,bench)
set -u
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
EXTRAS=${1:-test,cuda,bench}
DEB_PKGS="libomp5-16 libllvm16 libgomp-plugin-nvptx1 libgomp-plugin-amdgcn1 libllvm14 libelf1 libffi8 cmake clang-16 clang-tools-16 libomp-16-dev gcc-12-offload-nvptx g++-12"
LLVM14_DIR=${OFFLOAD_SHIM_LLVM14_ROOT:-.cache/llvm14}
APT_LOG=.cache/apt.log          # in the project, not /tmp: setup leaves /tmp as it found it
APT_CLANG_LOG=.cache/apt-clang.log
LIBOFFLOAD_DIR=${OFFLOAD_SHIM_LIBOFFLOAD_ROOT:-.cache/liboffload22}
# clang 19 / 22 (programs built by current compilers; their runtimes are unpacked below)
CLANG_PKGS="clang-19 clang-tools-19 clang-22 clang-tools-22 llvm-22"
LLVM19_DIR=${OFFLOAD_SHIM_LLVM19_ROOT:-.cache/llvm19}

say() { printf '[setup] %s\n' "$*"; }

# 1. system packages -------------------------------------------------------
missing=""
for p in $DEB_PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO="none"; fi
  if [ "$SUDO" = none ]; then
    say "not root and no password-less sudo: install the real plugins yourself with"
    say "    sudo apt-get install -y$missing"
    say "carrying on with the bundled host plugin only"
  else
    say "installing$missing"
    mkdir -p .cache
    if ! ( $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing ) >"$APT_LOG" 2>&1; then
      say "apt-get failed (see $APT_LOG); carrying on with what is installed"
    fi
  fi
else
  say "Debian packages present"
fi

# 1b. clang 19 and 22 (clang-tools-N: clang-linker-wrapper; llvm-22: llvm-offload-binary,
#     which clang-22 packages device code with); no recommends: keeps llvm-22-dev out --
missing=""
for p in $CLANG_PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ] && [ "${SUDO:-x}" != none ] && { [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }; then
  S=""; [ "$(id -u)" = 0 ] || S="sudo -n"
  say "installing$missing (clang 19/22 tests)"
  mkdir -p .cache
  ( $S apt-get update -qq && DEBIAN_FRONTEND=noninteractive $S apt-get install -y -qq \
      --no-install-recommends $missing ) >"$APT_CLANG_LOG" 2>&1 \
    || say "apt-get failed (see $APT_CLANG_LOG): clang 19/22 tests will be skipped"
fi

# 2. LLVM 14 plugins: libomp-14-dev conflicts with libomp5-16, so unpack it --
if [ ! -e "$LLVM14_DIR/usr/lib/llvm-14/lib/libomptarget.rtl.x86_64.so" ] && command -v apt-get >/dev/null; then
  mkdir -p .cache && tmp=$(mktemp -d .cache/download.XXXXXX)
  if ( cd "$tmp" && apt-get download libomp-14-dev >/dev/null 2>&1 ); then
    mkdir -p "$LLVM14_DIR" && dpkg -x "$tmp"/libomp-14-dev_*.deb "$LLVM14_DIR" \
      && say "LLVM 14 plugins unpacked into $LLVM14_DIR"
  else
    say "could not download libomp-14-dev: LLVM 14 tests will be skipped"
  fi
  rm -rf "$tmp"
fi

# 2b. LLVM 22 runtimes: liboffload 22 (the ol* plugin family) and libomptarget 22.1 (the
#     reference runtime of clang-22 programs).  liboffload-22 and libomp-22-dev depend on
#     libomp5-19, which conflicts with libomp5-16, so unpack them (one tree) with libllvm22
#     (and the -dev header); libomp5-19 gives the tree its libomp.so.5 -------------------
if { [ ! -e "$LIBOFFLOAD_DIR/usr/lib/llvm-22/lib/libLLVMOffload.so.22.1" ] \
     || [ ! -e "$LIBOFFLOAD_DIR/usr/lib/llvm-22/lib/libomptarget.so.22.1" ]; } && command -v apt-get >/dev/null; then
  mkdir -p .cache && tmp=$(mktemp -d .cache/download.XXXXXX)
  if ( cd "$tmp" && apt-get download liboffload-22 libllvm22 liboffload-22-dev libomp-22-dev libomp5-19 >/dev/null 2>&1 ); then
    mkdir -p "$LIBOFFLOAD_DIR" && for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$LIBOFFLOAD_DIR"; done \
      && say "liboffload 22 unpacked into $LIBOFFLOAD_DIR"
  else
    say "could not download liboffload-22/libllvm22: liboffload 22 tests will be skipped"
  fi
  rm -rf "$tmp"
fi
# libLLVMOffload.so.22.1 finds libLLVM.so.22.1 through RUNPATH $ORIGIN (llvm-22/lib);
# the unpacked libllvm22 has it in the multiarch directory
if [ -e "$LIBOFFLOAD_DIR/usr/lib/x86_64-linux-gnu/libLLVM.so.22.1" ] \
    && [ ! -e "$LIBOFFLOAD_DIR/usr/lib/llvm-22/lib/libLLVM.so.22.1" ]; then
  ln -s ../../x86_64-linux-gnu/libLLVM.so.22.1 "$LIBOFFLOAD_DIR/usr/lib/llvm-22/lib/libLLVM.so.22.1"
fi

# libomp-22-dev ships libomptarget.so.22.1 without the link-time name
if [ -e "$LIBOFFLOAD_DIR/usr/lib/llvm-22/lib/libomptarget.so.22.1" ] \
    && [ ! -e "$LIBOFFLOAD_DIR/usr/lib/llvm-22/lib/libomptarget.so" ]; then
  ln -s libomptarget.so.22.1 "$LIBOFFLOAD_DIR/usr/lib/llvm-22/lib/libomptarget.so"
fi

# 2c. LLVM 19 runtime (libomptarget.so.19.1 with its plugins linked in, omp.h, the device
#     runtime): the reference runtime of clang-19 programs; conflicts with libomp5-16 ---
if [ ! -e "$LLVM19_DIR/usr/lib/llvm-19/lib/libomptarget.so.19.1" ] && command -v apt-get >/dev/null; then
  mkdir -p .cache && tmp=$(mktemp -d .cache/download.XXXXXX)
  if ( cd "$tmp" && apt-get download libomp5-19 libomp-19-dev >/dev/null 2>&1 ); then
    mkdir -p "$LLVM19_DIR" && for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$LLVM19_DIR"; done \
      && say "LLVM 19 runtime unpacked into $LLVM19_DIR"
  else
    say "could not download libomp5-19/libomp-19-dev: clang-19 tests will be skipped"
  fi
  rm -rf "$tmp"
fi

# 3. virtual environment and the package --------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  $PY -m venv "$VENV" || exit 1
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
say "installing offload_shim[$EXTRAS] (builds native/ with CMake)"
"$VENV/bin/python" -m pip install -q ".[$EXTRAS]" || exit 1

# 4. where the runtimes were unpacked, for the installed commands: discovery reads this
#    file when the variables are not set (offload_shim/plugins/discovery.py, recorded_roots)
abs() { case "$1" in /*) printf '%s' "$1";; *) printf '%s/%s' "$PWD" "$1";; esac; }
{
  echo "# written by scripts/setup.sh: where it unpacked the runtimes (read by offload_shim)"
  echo "OFFLOAD_SHIM_LLVM14_ROOT=$(abs "$LLVM14_DIR")"
  echo "OFFLOAD_SHIM_LIBOFFLOAD_ROOT=$(abs "$LIBOFFLOAD_DIR")"
  echo "OFFLOAD_SHIM_LLVM19_ROOT=$(abs "$LLVM19_DIR")"
} > "$VENV/offload_shim-roots.env"
say "runtime folders recorded in $VENV/offload_shim-roots.env"
say "done"
