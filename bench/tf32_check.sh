#!/bin/bash
# One command on the GPU machine (cuda, sm_80 or newer) for the 3xTF32 f32 matmul path
# (src/synth/gpu_mma32.c, the SIMT template's parameter tc): the CUDA tests of the template
# (its kernels verified against the float64 reference at every layout and several points,
# with fused epilogues and prologues, the SIMT matmul tests beside them, its sources
# through nvcc), then `kforge synth` of a
# 4096^3 f32 matmul pinned to each path (tc=0 SIMT, tc=1 3xTF32) and with both open to
# the search, printing each run's best time, TFLOP/s, % of the roofline floor (the floor
# of an f32 matmul is now against max(f32 peak, tf32/3)), errors and schedule. With
# --epilogue the task is a GEMM chain, relu(matmul(a, b) + c), whose bias and relu are
# fused into the product's stores (s0.epi=1) on either path.
#
# usage: bench/tf32_check.sh [--build DIR] [--iters N] [--size N] [--epilogue] [--no-tests] [--out DIR]
#   --build DIR  the build (default build-h200; built here with CMake when DIR/kforge is
#                missing, or carried: bench/pack_gpu_build.sh)
#   --iters N    candidates per synth run (default 8)
#   --size N     the square matrix size (default 4096)
#   --epilogue   the GEMM chain relu(matmul(a, b) + c) instead of the bare product
#   --out DIR    logs and run records (default kforge-out/tf32-check, $OUT when set)
# exit status: 0 when the tests passed and every synth run found a verified kernel.
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD=build-h200; ITERS=8; SIZE=4096; TESTS=1; EPI=0; OUTDIR=${OUT:-kforge-out/tf32-check}
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --no-tests) TESTS=0; shift ;;
    --epilogue) EPI=1; shift ;;
    --out) OUTDIR=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "tf32_check.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUTDIR"; OUTDIR=$(cd "$OUTDIR" && pwd)
if [ ! -x "$BUILD/kforge" ]; then
  echo "== building $BUILD"
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$BUILD" -j "$(nproc)" \
    || { echo "tf32_check.sh: build failed; build elsewhere with bench/pack_gpu_build.sh and pass --build" >&2; exit 1; }
fi
. bench/carried_build.sh
use_carried_build "$BUILD"
echo "== machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1

FAIL=0
if [ $TESTS = 1 ]; then
  echo "== tests (logs in $OUTDIR)"
  for f in 'gpu_verify/tf32_matmul' 'gpu_verify/tf32_epilogue' 'gpu_verify/epilogue_*' 'gpu_verify/matmul_*' \
           'gpu_cuda/tf32_*' 'gpu_text/f32_matmul_*' 'gpu_text/tf32_*'; do
    log="$OUTDIR/test_$(echo "$f" | tr '/*' '__').log"
    if KFORGE_RUNNER="$BUILD/kforge-runner" KFORGE_TEST_GPU=cuda "$BUILD/test_gpu_templates" --filter "$f" \
         --verbose=0 >"$log" 2>&1; then
      echo "PASS $f: $(grep -E 'Tested' "$log" | tail -1)"
    else
      echo "FAIL $f:"; grep -v '^\[SKIP\]' "$log" | tail -30; FAIL=1
    fi
    grep -E '^\[SKIP\].*(tf32|matmul)' "$log" | grep -v disabled | head -3
  done
  # the fused prologues (a conv's columns, padded/strided operands) on both paths
  for f in 'gpu_verify/tf32_prologue' 'gpu_text/*'; do
    log="$OUTDIR/test_tf32_$(echo "$f" | tr '/*' '__').log"
    if KFORGE_RUNNER="$BUILD/kforge-runner" KFORGE_TEST_GPU=cuda "$BUILD/test_gpu_tf32" --filter "$f" \
         --verbose=0 >"$log" 2>&1; then
      echo "PASS test_gpu_tf32 $f: $(grep -E 'Tested' "$log" | tail -1)"
    else
      echo "FAIL test_gpu_tf32 $f:"; grep -v '^\[SKIP\]' "$log" | tail -30; FAIL=1
    fi
    grep -E '^\[SKIP\].*tf32' "$log" | grep -v disabled | head -3
  done
  log="$OUTDIR/test_perf_calib.log"
  if "$BUILD/test_perf" --verbose=0 >"$log" 2>&1 && "$BUILD/test_calib" --filter 'calib/tf32*' --verbose=0 >>"$log" 2>&1; then
    echo "PASS roofline/calib"
  else
    echo "FAIL roofline/calib:"; tail -20 "$log"; FAIL=1
  fi
fi

echo "== kforge synth, f32 matmul ${SIZE}^3, $ITERS candidates a run"
TASK="$OUTDIR/matmul_f32_$SIZE.kf"
printf 'task matmul_f32_%s\ninput a: f32[%s, %s]\ninput b: f32[%s, %s]\noutput c = matmul(a, b)\n' \
  "$SIZE" "$SIZE" "$SIZE" "$SIZE" "$SIZE" >"$TASK"
if [ $EPI = 1 ]; then
  TASK="$OUTDIR/matmul_bias_relu_f32_$SIZE.kf"
  printf 'task matmul_bias_relu_f32_%s\ninput a: f32[%s, %s]\ninput b: f32[%s, %s]\ninput c: f32[%s]\n' \
    "$SIZE" "$SIZE" "$SIZE" "$SIZE" "$SIZE" "$SIZE" >"$TASK"
  printf 'output y = relu(matmul(a, b) + c)\n' >>"$TASK"
fi
for mode in simt tf32 search; do
  pin=(); [ $mode = simt ] && pin=(--pin tc=0); [ $mode = tf32 ] && pin=(--pin tc=1)
  out="$OUTDIR/run-$mode"; rm -rf "$out"
  "$BUILD/kforge" synth "$TASK" --target cuda --iters "$ITERS" "${pin[@]}" --no-store --out "$out" \
    >"$OUTDIR/synth-$mode.log" 2>&1
  rc=$?
  echo "-- $mode (${pin[*]:-both paths open}): exit $rc; floor line: $(grep -m1 'floor:' "$OUTDIR/synth-$mode.log" | cut -c1-200)"
  [ $rc = 0 ] || FAIL=1
  python3 - "$out/run.json" "$SIZE" <<'PY' || FAIL=1
import json, sys
rec = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
print("   floor %.4f ms (%s-bound)" % (rec["roofline"]["floor_ms"], rec["roofline"]["bound"]))
for i in rec["iterations"]:
    t = i.get("time_ms") or 0
    print("   #%-2d %-9s %9s ms %7s TFLOP/s %6s%% floor  max_rel_err %-9s %s" % (
        i["iter"], i["status"], "%.4f" % t if t else "-", "%.1f" % (2 * n**3 / t / 1e9) if t else "-",
        "%.1f" % i["pct_floor"] if i.get("pct_floor") else "-",
        "%.2e" % i["max_rel_err"] if i.get("max_rel_err") is not None else "-", i["candidate"][:110]))
best = next((i for i in rec["iterations"] if i["iter"] == rec.get("best_iter")), None)
if not best:
    print("   no verified kernel"); sys.exit(1)
print("   best: %.4f ms, %.1f TFLOP/s: %s" % (best["time_ms"], 2 * n**3 / best["time_ms"] / 1e9, best["candidate"]))
PY
done
exit $FAIL
