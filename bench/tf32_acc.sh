#!/bin/bash
# The f32 matmul's accuracy on each path, by input distribution (GPU machine, cuda): for
# each size, `kforge synth` pinned to the SIMT path (tc=0) and to the 3xTF32 path (tc=1),
# once with each build given, then every kernel found checked again by one build's
# `kforge verify --time --json` (the first build: its verify reports `by_dist`), which
# prints the worst NMSE and max relative error against the float64 reference per input
# distribution, the median time, and the registers/spills ptxas reported.
#
# usage: bench/tf32_acc.sh OUT_DIR BUILD [BUILD2 ...] [-- SIZE...]   (default sizes 2048 4096)
#   run from the repository root; each BUILD carried (bench/pack_gpu_build.sh)
# TF32_TCS: the paths to run (default '0 1'; e.g. '1' for the 3xTF32 path only)
# TF32_PIN: more pins for the tc=1 runs (e.g. TF32_PIN='*.acc=1': the per-tile accumulation)
# exit status: 0 when every synth found a verified kernel
set -u
O=${1:?out dir}; shift
BUILDS=(); SIZES=()
while [ $# -gt 0 ]; do
  [ "$1" = -- ] && { shift; SIZES=("$@"); break; }
  BUILDS+=("$1"); shift
done
[ ${#SIZES[@]} -gt 0 ] || SIZES=(2048 4096)
mkdir -p "$O"; O=$(cd "$O" && pwd)
. bench/carried_build.sh
V=$(cd "${BUILDS[0]}" && pwd)
FAIL=0
for n in "${SIZES[@]}"; do
  T="$O/matmul_$n.kf"
  printf 'task matmul_%s\ninput a: f32[%s, %s]\ninput b: f32[%s, %s]\noutput c = matmul(a, b)\n' "$n" "$n" "$n" "$n" "$n" >"$T"
  for B in "${BUILDS[@]}"; do
    use_carried_build "$B"
    tag=$(basename "$B")
    for tc in ${TF32_TCS:-0 1}; do
      out="$O/k_${n}_${tag}_tc$tc"; rm -rf "$out"
      KFORGE_RUNNER=$BUILD/kforge-runner timeout 300 "$BUILD/kforge" synth "$T" --target cuda --iters 1 \
        --pin "tc=$tc$([ $tc = 1 ] && [ -n "${TF32_PIN:-}" ] && echo " $TF32_PIN")" --memcheck off --no-store --out "$out" >"$out.log" 2>&1 || { echo "synth $n $tag tc=$tc failed"; FAIL=1; continue; }
      k=$(ls "$out"/kernel.* 2>/dev/null | head -1)
      for r in 1 2; do
        KFORGE_RUNNER=$V/kforge-runner LD_LIBRARY_PATH=$V/devlibs timeout 300 "$V/kforge" verify "$T" "$k" --target cuda \
          --time --json >"$out.verify$r.json" 2>"$out.verify$r.err"
        python3 - "$out.verify$r.json" "$n $tag tc=$tc #$r" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print(sys.argv[2], "no result:", e); sys.exit(0)
bd = d.get("by_dist", {})
dist = " ".join("%s %.2e/%.2e" % (k[:6], v["nmse"], v["max_rel_err"]) for k, v in bd.items())
print("%-22s %-6s %8.4f ms  nmse %.2e  [nmse/max_rel by dist: %s]  %s" % (
    sys.argv[2], d["status"], d.get("time_ms") or 0, d["nmse"], dist, d.get("resources", "")[:90]))
PY
      done
    done
  done
done
exit $FAIL
