#!/bin/bash
# The PyTorch front end on a GPU, in one command (under 9 minutes on the lent H200): the GPU
# tests of python/tests/test_cuda_kernel.py (kforge_torch.cuda_kernel against torch, the
# custom op under torch.compile(fullgraph=True), a device fault named by its launch,
# `kforge bench --target cuda` on a 2-task suite, `kforge export` + --check of a recorded and
# a synthesized CUDA run), then `kforge bench suites/cpu-l1 --target cuda` on a few tasks.
#
# usage: bench/torch_cuda_smoke.sh [--build DIR] [--only LIST] [--iters N] [--out DIR]
#
# --build DIR   a kforge build made elsewhere and carried here (default build-h200: DIR/kforge
#               and DIR/kforge-runner; bench/pack_gpu_build.sh makes one, with DIR/devlibs)
# --only LIST   the suite's tasks, comma-separated file-name parts (default below)
# --iters N     candidates per task for kforge synth (default 2)
# --out DIR     logs and suite_cuda.json (default $OUT, else kforge-out/torch-cuda-smoke)
#
# Time: kforge synth takes 30-200 s a task on the H200 with its default 12 candidates, so
# --iters 2 and 4 of suites/cpu-l1's tasks (an elementwise op, a row reduction, a softmax, a
# layer norm: 5-40 s of synth each, plus torch.compile's first compile); the pytest part
# runs 2 + 1 synth runs at --iters 2. Limits: pytest 230 s, the suite 270 s (its JSON is
# rewritten after every task, so a run cut short keeps its rows, with "partial": true).
#
# Needs: python3 with torch (CUDA) and pytest; nvcc / NVRTC (CUDA_HOME or /usr/local/cuda).
# exit status: 0 when the tests passed and every suite task was correct, 1 otherwise.
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD=build-h200
ONLY=01_relu,20_sum_last_dim,29_softmax_rows,33_layer_norm_affine
ITERS=2
OUTDIR=${OUT:-kforge-out/torch-cuda-smoke}
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --out) OUTDIR=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "torch_cuda_smoke.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$BUILD/kforge" ] || { echo "torch_cuda_smoke.sh: no $BUILD/kforge (build it elsewhere: bench/pack_gpu_build.sh)" >&2; exit 2; }
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
. bench/carried_build.sh
use_carried_build "$BUILD"
export KFORGE="$BUILD/kforge" KFORGE_RUNNER="$BUILD/kforge-runner" PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
WORK=$(mktemp -d /tmp/kf-torch-cuda.XXXXXX)
export KFORGE_STORE="$WORK/kforge.db"  # the runs go to a private store; the calibration cache is shared
T0=$SECONDS

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())" 2>&1
"$KFORGE" devices 2>&1 | sed -n '/^cuda/,/^$/p'

FAIL=0
echo "== pytest python/tests/test_cuda_kernel.py (log: $OUTDIR/pytest.log)"
if python3 -c "import pytest" 2>/dev/null; then
  timeout -k 10 230 python3 -m pytest -v -rs python/tests/test_cuda_kernel.py 2>&1 | tee "$OUTDIR/pytest.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || { echo "FAIL: pytest exit $rc$([ "$rc" = 124 ] && echo ' (timed out)')"; FAIL=1; }
  if grep -q "SKIPPED.*no CUDA device" "$OUTDIR/pytest.log"; then echo "FAIL: GPU tests skipped"; FAIL=1; fi
else
  echo "FAIL: no pytest for $(command -v python3) (carry one: pip download pytest, then PYTHONPATH)"; FAIL=1
fi
echo "== pytest done at $((SECONDS - T0)) s"

echo "== kforge bench suites/cpu-l1 --target cuda --iters $ITERS --only $ONLY (log: $OUTDIR/bench.log)"
timeout -k 10 270 "$KFORGE" bench suites/cpu-l1 --target cuda --iters "$ITERS" --only "$ONLY" \
  --out "$WORK/bench" --json "$OUTDIR/suite_cuda.json" --csv "$OUTDIR/suite_cuda.csv" 2>&1 | tee "$OUTDIR/bench.log"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || { echo "FAIL: kforge bench exit $rc$([ "$rc" = 124 ] && echo ' (timed out; suite_cuda.json holds the rows so far)')"; FAIL=1; }
# the kernels and run records, for a look afterwards
tar czf "$OUTDIR/bench_runs.tgz" -C "$WORK" bench 2>/dev/null
rm -rf "$WORK"
echo "== done in $((SECONDS - T0)) s: $([ $FAIL = 0 ] && echo ok || echo FAILED)"
exit $FAIL
