#!/bin/bash
# The device-time bound's honest gaps under host load (issue 24; GPU machine, cuda): for
# honest kernels from short to long, `kforge verify --time --json` with 0, then N, then 2N
# busy processes on the host's CPUs, printing per run the gap (kforge's clock around a call
# less the device's time, median), the time the runner and kforge waited for a CPU, the
# rest (gap less wait: what the bound compares), the ping and the allowance. A per-platform
# allowance tighter than today's 8 pings + 1 ms must stay above every honest rest seen here.
#
# usage: bench/gap_load.sh BUILD OUT_DIR [N]   (from the repository root; N default: the CPUs)
set -u
B=${1:?build dir}; O=${2:?out dir}; N=${3:-$(nproc)}
mkdir -p "$O"; O=$(cd "$O" && pwd)
. bench/carried_build.sh; use_carried_build "$B"
export KFORGE_RUNNER=$BUILD/kforge-runner
nvidia-smi --query-gpu=name --format=csv,noheader
# honest kernels: the builtin's first candidate for each task (long ones: the 4096 matmul)
T4="$O/matmul_4096.kf"
printf 'task matmul_4096\ninput a: f32[4096, 4096]\ninput b: f32[4096, 4096]\noutput c = matmul(a, b)\n' >"$T4"
TASKS=(tasks/swish.kf tasks/softmax.kf tasks/layer_norm.kf tasks/matmul.kf "$T4")
for t in "${TASKS[@]}"; do
  n=$(basename "$t" .kf)
  timeout 200 "$BUILD/kforge" synth "$t" --target cuda --iters 1 --memcheck off --no-store --out "$O/k_$n" >"$O/synth_$n.log" 2>&1 \
    || echo "synth $n failed: $(tail -1 "$O/synth_$n.log")"
done
spin() { for _ in $(seq "$1"); do (while :; do :; done) & done; }
for load in 0 "$N" $((2 * N)); do
  [ "$load" -gt 0 ] && spin "$load"
  sleep 1
  echo "== host load: $load busy processes (loadavg $(cut -d' ' -f1 /proc/loadavg))"
  for t in "${TASKS[@]}"; do
    n=$(basename "$t" .kf)
    k=$(ls "$O/k_$n"/kernel.* 2>/dev/null | head -1); [ -n "$k" ] || continue
    for r in 1 2; do
      timeout 120 "$BUILD/kforge" verify "$t" "$k" --target cuda --time --json >"$O/v_${n}_${load}_$r.json" 2>/dev/null
      python3 - "$O/v_${n}_${load}_$r.json" "$n #$r" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("  %-14s no result: %s" % (sys.argv[2], e)); sys.exit(0)
g, w, p, a = (d.get(k, 0) for k in ("time_gap_ms", "time_wait_ms", "time_ping_ms", "time_allow_ms"))
rest = g - max(w, 0) if w is not None else g
print("  %-14s %-6s time %8.4f ms  gap %.4f  wait %.4f  rest %.4f  ping %.4f  allow %.3f  reps %s" % (
    sys.argv[2], d["status"], d.get("time_ms") or 0, g, w, rest, p, a, d.get("reps")))
PY
    done
  done
  # stop this round's spinners
  [ "$load" -gt 0 ] && { kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; }
done
