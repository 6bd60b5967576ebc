#!/usr/bin/env bash
# The prepared GPU check: one command for a lent GPU machine, with nothing to install
# and no network (docs/testing.md, "GPU check").  It installs the bundle that
# scripts/gpu-bundle.sh made here (.gpu-bundle: the project and pyelftools as wheels,
# the LLVM 16 CUDA and GCC 12 nvptx plugins with their libraries) into /tmp, runs the
# tests marked `gpu` and the GPU rows of the benchmark, and writes at most 8 files to
# $OUT (the device tool brings back only those):
#
#   summary.txt     what ran where, each step's status, the tests passed / skipped (each
#                   skip's reason, expected or NOT RUN) / failed, each GPU benchmark row
#                   measured or skipped, RESULT: PASS or FAIL
#   setup.txt       machine, driver, bundle install, library path, plugin loads
#   pytest-gpu.txt  pytest -m gpu -rs -v over every test file with a test marked gpu
#                   (test_gpu.py, test_pinned.py, test_liboffload_gpu.py)
#   pytest-gpu.xml  the same as JUnit XML
#   bench-gpu.txt   offload-shim bench, every GPU row (bench/gpu.py GPU_ROWS; quick profile)
#
# Exit status 0 only when every step passed, GPU tests ran, none failed and every skip has
# a reason the lent machine is known to give (scripts/gpu_check_tally.py), and every GPU
# benchmark row was measured or skipped with its reason.  The steps share a budget
# (OSH_GPU_CHECK_BUDGET, default 500 s: the documented device call's 540 s less room for
# the summary); a step that would run past it is cut short and fails, the summary is
# still written.
#
# usage: scripts/gpu-check.sh [--bundle DIR|none] [--stand-in]
#   --bundle none  use this checkout's environment (PYTHON, installed plugins): CI dry run
#   --stand-in     run against the CUDA driver stand-in (tests/cuda_standin, built with cc,
#                  or OSH_CUDA_STANDIN_DIR): every file is labelled STAND-IN, not a GPU
# env: OUT (default .gpu-check-out), PYTHON (default python3; a relative path is taken
#      from the directory the script was started in), OSH_GPU_CHECK_PYTEST_ARGS,
#      OSH_GPU_CHECK_BUDGET (seconds for all steps, default 500)
set -u -o pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUNDLE="$ROOT/.gpu-bundle"
STAND_IN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE="$2"; shift 2 ;;
    --stand-in) STAND_IN=1; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
OUTDIR="${OUT:-$ROOT/.gpu-check-out}"
mkdir -p "$OUTDIR"
PY="${PYTHON:-python3}"
case "$PY" in             # the steps run in other directories: a relative path would break
  /*) ;;
  */*) PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")" ;;
esac
WORK="$(mktemp -d /tmp/osh-gpu-check.XXXXXX)"
START=$(date +%s)
BUDGET="${OSH_GPU_CHECK_BUDGET:-500}"
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
# limit FULL RESERVE: FULL seconds, or what the budget leaves after RESERVE (at least 10)
limit() { local l; l=$(( $(left) - $2 )); [ "$l" -lt "$1" ] || l=$1; [ "$l" -ge 10 ] || l=10; echo "$l"; }
TALLY="$ROOT/scripts/gpu_check_tally.py"

if [ "$STAND_IN" = 1 ]; then
  LABEL="STAND-IN: the offload_shim CUDA driver stand-in, NOT A GPU; nothing here is a GPU result"
else
  LABEL="GPU run"
fi
SETUP="$OUTDIR/setup.txt"
SUMMARY="$OUTDIR/summary.txt"
: > "$SUMMARY"
{ echo "# $LABEL"; echo "# setup, $(date -u +%Y-%m-%dT%H:%M:%SZ)"; } > "$SETUP"
status=0
steps=""
note() { echo "$*" | tee -a "$SETUP"; }
step() {   # step NAME RC
  steps="$steps$(printf '%-14s %s' "$1" "$([ "$2" = 0 ] && echo ok || echo "FAILED ($2)")")\n"
  [ "$2" = 0 ] || status=1
}
finish() {
  {
    echo "# $LABEL"
    echo "# offload_shim GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(( $(date +%s) - START )) s"
    echo "machine: $(uname -srm); python: $("$PY" -c 'import sys; print(sys.version.split()[0])' 2>&1)"
    echo "driver: ${DRIVER_DESC:-unknown}"
    echo "bundle: $BUNDLE"
    printf "%b" "$steps"
    [ -n "${PYTEST_LINE:-}" ] && echo "pytest: $PYTEST_LINE"
    [ -n "${TESTS_TALLY:-}" ] && echo "gpu tests: $TESTS_TALLY"
    [ -n "${BENCH_TALLY:-}" ] && echo "bench rows: $BENCH_TALLY"
    echo "RESULT: $([ "$status" = 0 ] && echo PASS || echo FAIL)"
  } > "$SUMMARY"
  cat "$SUMMARY"
  rm -rf "$WORK"
  exit "$status"
}

# -- the project, the plugins, their libraries ------------------------------------------
LIBPATH=""
if [ "$BUNDLE" != none ]; then
  note "## bundle $BUNDLE"
  rc=0
  if [ ! -f "$BUNDLE/MANIFEST.txt" ]; then
    note "no $BUNDLE/MANIFEST.txt: build the bundle first (scripts/gpu-bundle.sh) and carry it"
    rc=1
  else
    grep -v '^#' "$BUNDLE/MANIFEST.txt" | (cd "$BUNDLE" && sha256sum -c --quiet -) >> "$SETUP" 2>&1 \
      || rc=$?
  fi
  if [ "$rc" = 0 ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target "$WORK/site" "$BUNDLE"/wheels/*.whl >> "$SETUP" 2>&1 || rc=$?
  fi
  if [ "$rc" = 0 ]; then
    "$PY" - "$BUNDLE/root.tar.xz" "$WORK/root" >> "$SETUP" 2>&1 <<'EOF' || rc=$?
import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as t:
    t.extractall(sys.argv[2], filter="tar" if hasattr(tarfile, "tar_filter") else None)
EOF
  fi
  step "bundle" "$rc"
  [ "$rc" = 0 ] || finish
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
  export PATH="$WORK/site/bin:$PATH"
  export OSH_LLVM16_LIB="$WORK/root/usr/lib/llvm-16/lib"
  export OSH_GOMP_PLUGIN_DIR="$WORK/root/usr/lib/x86_64-linux-gnu"
  LIBPATH="$WORK/root/usr/lib/x86_64-linux-gnu"
  # fallbacks only for sonames this machine does not have
  mkdir -p "$WORK/fallback"
  for f in "$WORK"/root/fallback/*; do
    so="$(basename "$f")"
    if ! "$PY" -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$so" 2>/dev/null; then
      ln -s "$f" "$WORK/fallback/$so"
      note "fallback: $so (not on this machine)"
    fi
  done
  LIBPATH="$LIBPATH:$WORK/fallback"
fi

# -- the driver ------------------------------------------------------------------------------
if [ "$STAND_IN" = 1 ]; then
  export OSH_GPU_CHECK_STAND_IN=1
  SDIR="${OSH_CUDA_STANDIN_DIR:-$WORK/cuda-standin}"
  "$PY" -c "import sys; sys.path.insert(0, sys.argv[1]); import cuda_standin; cuda_standin.build(sys.argv[2])" \
    "$ROOT/tests" "$SDIR" >> "$SETUP" 2>&1
  rc=$?
  step "stand-in" "$rc"
  [ "$rc" = 0 ] || finish
  LIBPATH="$SDIR${LIBPATH:+:$LIBPATH}"
fi
export LD_LIBRARY_PATH="$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# the LLVM 16 CUDA plugins dlopen only "libcuda.so": a private link to libcuda.so.1
DRV="$("$PY" - <<'EOF'
import ctypes, os
try:
    ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print("ERR", e)
else:
    for line in open("/proc/self/maps"):
        p = line.split()[-1]
        if "/libcuda.so" in p:
            print("OK", os.path.realpath(p)); break
EOF
)"
case "$DRV" in
  OK\ *)
    mkdir -p "$WORK/cuda-link"
    ln -sf "${DRV#OK }" "$WORK/cuda-link/libcuda.so"
    export LD_LIBRARY_PATH="$WORK/cuda-link:$LD_LIBRARY_PATH"
    DRIVER_DESC="${DRV#OK }"
    rc=0 ;;
  *) DRIVER_DESC="none: ${DRV#ERR }"; rc=1 ;;
esac
note "## driver: $DRIVER_DESC"
if [ "$rc" = 0 ]; then
  "$PY" -c "import sys; sys.path.insert(0, sys.argv[1]); import gpu_scenarios as g, json; print(json.dumps(g.driver_identity()))" \
    "$ROOT/tests" 2>&1 | tee -a "$SETUP"
  rc=$?
fi
if [ "$STAND_IN" = 0 ]; then
  { command -v nvidia-smi >/dev/null && nvidia-smi -L; } >> "$SETUP" 2>&1
fi
step "driver" "$rc"
[ "$rc" = 0 ] || finish
note "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
note "PYTHONPATH=${PYTHONPATH:-}"

# -- the plugins load (missing libraries or too old a glibc show here) ---------------------
"$PY" - "$ROOT/tests" >> "$SETUP" 2>&1 <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import gpu_scenarios as g
from offload_shim.plugins.loader import load_plugin
bad = 0
for name, path in g.PLUGINS.items():
    try:
        p = load_plugin(str(path))
        print(f"plugin {name}: {path}: loads ({p.generation})")
    except Exception as exc:  # noqa: BLE001 - reported
        bad += 1
        print(f"plugin {name}: {path}: {type(exc).__name__}: {exc}")
raise SystemExit(bad)
EOF
step "plugins load" "$?"

# -- the GPU tests: every file with a test marked gpu ------------------------------------------
PYT="$OUTDIR/pytest-gpu.txt"
GPU_FILES="$(cd "$ROOT/tests" && grep -l -E 'pytest\.mark\.gpu|pytestmark *= *pytest\.mark\.gpu' test_*.py | tr '\n' ' ')"
{ echo "# $LABEL"; echo "# pytest -m gpu $GPU_FILES"; } > "$PYT"
rm -f "$OUTDIR/pytest-gpu.xml"
T_PYTEST=$(limit 330 150)          # room left for the benchmark (130 s) and the summary
note "## pytest: $GPU_FILES(limit ${T_PYTEST} s)"
# shellcheck disable=SC2086
(cd "$ROOT/tests" && timeout -k 10 "$T_PYTEST" "$PY" -m pytest -p no:cacheprovider -m gpu -rs -v \
   --junitxml="$OUTDIR/pytest-gpu.xml" $GPU_FILES \
   ${OSH_GPU_CHECK_PYTEST_ARGS:-}) >> "$PYT" 2>&1
prc=$?
PYTEST_LINE="$(grep -E '^=+ .*(passed|failed|skipped|error).* in [0-9.]+s' "$PYT" | tail -1 | tr -d '=')"
[ "$prc" = 124 ] || [ "$prc" = 137 ] && PYTEST_LINE="cut short after ${T_PYTEST} s ${PYTEST_LINE}"
ARGS=(tests "$OUTDIR/pytest-gpu.xml" "$PYT")
[ "$STAND_IN" = 1 ] && ARGS+=(--stand-in)
TESTS_TALLY="$("$PY" "$TALLY" "${ARGS[@]}" 2>&1)"
rc=$?
[ "$rc" = 0 ] && [ "$prc" != 0 ] && rc=$prc     # a pytest failure the tally did not see
if [ -f "$OUTDIR/pytest-gpu.xml" ]; then     # the label inside the XML too
  sed -i "0,/?>/s//?><!-- $LABEL -->/" "$OUTDIR/pytest-gpu.xml"
fi
step "gpu tests" "$rc"

# -- every GPU row of the benchmark ------------------------------------------------------------
# --only is a substring match: each GPU row by its full name (bench/gpu.py GPU_ROWS), so no
# row is dropped (cuda/nvptx/cupy left out pool:exact/cuMemAlloc[Async])
BEN="$OUTDIR/bench-gpu.txt"
{ echo "# $LABEL"; echo "# offload-shim bench --profile quick, every GPU row"; } > "$BEN"
ROWS="$("$PY" -c 'from offload_shim.bench.gpu import GPU_ROWS; print(" ".join(GPU_ROWS))' 2>>"$BEN")"
ONLY=()
for r in $ROWS; do ONLY+=(--only "$r"); done
T_BENCH=$(limit 240 20)
note "## bench: $ROWS (limit ${T_BENCH} s)"
timeout -k 10 "$T_BENCH" "$PY" -m offload_shim bench --profile quick "${ONLY[@]}" \
  --no-progress >> "$BEN" 2>&1
step "bench" "$?"
# shellcheck disable=SC2086
BENCH_TALLY="$("$PY" "$TALLY" bench "$BEN" $ROWS 2>&1)"
step "bench rows" "$?"

finish
