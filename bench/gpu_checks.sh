#!/usr/bin/env bash
# GPU checks for a session's first device call: the timing bound's fields on CUDA for
# honest kernels, the GPU test programs, and a baseline of the CUDA loop. Pack with
# KF_PACK_TARGETS holding kforge-bin kforge-runner kforge-runner-forge test_gpu_gap
# test_gpu_redepi test_gpu_templates (bench/pack_gpu_build.sh).
# usage: bench/gpu_checks.sh BUILD_DIR OUT_DIR   (run from the repository root on the GPU machine)
set -u
B=${1:?build dir}; O=${2:?out dir}; mkdir -p "$O"
. bench/carried_build.sh; use_carried_build "$B"
export KFORGE_RUNNER=$PWD/$B/kforge-runner KFORGE_TEST_GPU=cuda
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
step() { echo "== $* ($(date +%T))"; }
step "honest kernels: synth then verify --time --json"
for t in swish softmax matmul layer_norm; do
  rm -rf "$O/k_$t"
  timeout 120 "$B/kforge" synth tasks/$t.kf --target cuda --iters 2 --memcheck off --no-store \
      --out "$O/k_$t" > "$O/synth_$t.log" 2>&1; echo "synth $t rc=$?"
  k=$(ls "$O/k_$t"/kernel.* 2>/dev/null | head -1)
  [ -n "$k" ] || continue
  for r in 1 2 3; do
    KFORGE_LOG=2 timeout 120 "$B/kforge" verify tasks/$t.kf "$k" --target cuda --time --json > "$O/verify_${t}_$r.json" 2> "$O/verify_${t}_$r.err"
    echo "verify $t #$r rc=$? $(python3 -c "import json,sys;d=json.load(open('$O/verify_${t}_$r.json'));print({k:d.get(k) for k in ('status','detail','time_ms','time_host_ms','reps','time_stop','time_gap_ms','time_wait_ms','time_ping_ms','time_allow_ms')})" 2>&1 | tail -1)"
  done
done
step "test_gpu_gap (the CUDA allowance: a forged half is caught, the honest control verifies)"
(cd "$B" && KF_TEST_VERBOSE=1 timeout 200 ./test_gpu_gap --verbose=0 2>&1 | tail -8)
step "test_gpu_redepi"
(cd "$B" && timeout 300 ./test_gpu_redepi --verbose=0 2>&1 | tail -15)
step "test_gpu_templates gpu_verify"
(cd "$B" && timeout 300 ./test_gpu_templates --filter 'gpu_verify/*' --verbose=0 2>&1 | tail -8)
step done
# the stderr of the last verify of each task: the sandbox's breakdown
for t in swish softmax matmul layer_norm; do echo "-- $t"; grep -h "sandbox:\|device times" "$O/verify_${t}_3.err" 2>/dev/null | tail -3; done
