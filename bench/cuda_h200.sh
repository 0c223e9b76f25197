#!/bin/bash
# One command on the GPU machine: build kforge (or use a build made elsewhere), run the CUDA
# tests for real, then synthesize every example task at GPU-sized shapes and time kforge's
# kernel against PyTorch eager and torch.compile in one process (bench/cuda_vs_torch.py),
# printing a table of ratios and % of the roofline floor.
#
# usage: bench/cuda_h200.sh [--build DIR] [--no-tests] [--tests-only] [--out DIR]
#                           [-- cuda_vs_torch.py options and TASK.kf ...]
#
# --build DIR   the build to use (default build-h200). When DIR/kforge is missing it is
#               configured and built here with CMake (needs jansson, OpenBLAS and Criterion
#               headers). On a machine without those (the lent H200 has their run-time
#               libraries at most), build elsewhere with bench/pack_gpu_build.sh and carry
#               DIR: its devlibs/ folder goes on LD_LIBRARY_PATH, and the source path the
#               build was configured with is linked to this checkout when it is missing.
# --out DIR     where the logs, the JSON of the table and runs.tgz (the run records and
#               kernels) go (default kforge-out/cuda-bench; $OUT when set, for the device
#               tool, which brings back only a few files)
#
# exit status: 0 when the tests passed and the benchmark ran, 1 otherwise.
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD=build-h200
TESTS=1
BENCH=1
OUTDIR=${OUT:-kforge-out/cuda-bench}
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --no-tests) TESTS=0; shift ;;
    --tests-only) BENCH=0; shift ;;
    --out) OUTDIR=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    *) echo "cuda_h200.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
export PYTHONUNBUFFERED=1

if [ ! -x "$BUILD/kforge" ]; then
  echo "== building $BUILD"
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$BUILD" -j "$(nproc)" \
    || { echo "cuda_h200.sh: build failed; build elsewhere with bench/pack_gpu_build.sh and pass --build" >&2; exit 1; }
fi
. bench/carried_build.sh
use_carried_build "$BUILD"

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1
"$BUILD/kforge" devices 2>&1 | sed -n '/^cuda/,/^$/p'

FAIL=0
run_test() {  # name, then the command; the log goes to $OUTDIR/NAME.log
  local name=$1; shift
  local t0=$SECONDS
  if "$@" >"$OUTDIR/$name.log" 2>&1; then
    echo "PASS $name ($((SECONDS - t0)) s): $(grep -E 'Synthesis|Tested' "$OUTDIR/$name.log" | tail -1)"
  else
    echo "FAIL $name ($((SECONDS - t0)) s):"; tail -25 "$OUTDIR/$name.log"; FAIL=1
  fi
  if grep -q -i "skip" "$OUTDIR/$name.log"; then
    echo "  skipped in $name:"; grep -i "skip" "$OUTDIR/$name.log" | head -5 | sed 's/^/    /'
  fi
}
if [ $TESTS = 1 ]; then
  echo "== CUDA tests (logs in $OUTDIR)"
  export KFORGE_RUNNER="$BUILD/kforge-runner"
  run_test test_cuda_backend "$BUILD/test_cuda_backend" --verbose=0
  run_test test_gpu_templates_cuda env KFORGE_TEST_GPU=cuda "$BUILD/test_gpu_templates" --verbose=0
  # every op of the registry on the GPU (tests/test_ops.c; cpu and opencl run in CI)
  [ -x "$BUILD/test_ops" ] && run_test test_ops_cuda "$BUILD/test_ops" --filter 'ops_pipeline/cuda' --verbose=0
  [ -x "$BUILD/test_memcheck_cuda" ] && run_test test_memcheck_cuda "$BUILD/test_memcheck_cuda" --verbose=0
  # the calibration room's device probes and the profiler's counters through verify's modes
  [ -x "$BUILD/test_calib" ] && run_test test_calib "$BUILD/test_calib" --verbose=0
  [ -x "$BUILD/test_counters" ] && run_test test_counters "$BUILD/test_counters" --verbose=0
  # the CUDA part of the render tests (the OpenCL part runs in CI on PoCL)
  [ -x "$BUILD/test_render" ] && run_test test_render_cuda "$BUILD/test_render" --filter 'render_cuda/*' --verbose=0
  unset KFORGE_RUNNER
fi

if [ $BENCH = 1 ]; then
  RUNS=$(mktemp -d /tmp/kf-cuda-runs.XXXXXX)
  echo "== kforge vs PyTorch (run records in $OUTDIR/runs.tgz)"
  python3 bench/cuda_vs_torch.py --kforge "$BUILD/kforge" --out "$RUNS" \
    --json "$OUTDIR/cuda_bench.json" "$@" 2>&1 | tee "$OUTDIR/bench.log" || FAIL=1
  tar czf "$OUTDIR/runs.tgz" -C "$RUNS" . && rm -rf "$RUNS"
fi
exit $FAIL
