#!/bin/bash
# Convolutions on the GPU machine, two kforge builds side by side (A/B of a template change,
# e.g. the gathered operand's split addressing, docs/design-notes.md): each KernelBench
# problem is imported once (at its official shape), then `kforge synth --target cuda --iters 1`
# with each build gives that build's kernel at the default point (plus CONV_PIN), and every
# kernel is timed by the same `kforge verify --time --json` (the AFTER build's), the builds'
# kernels alternated for ROUNDS rounds so that a drift of the machine hits both. Prints, per
# problem, each build's median ms, the ratio before/after (> 1: after is faster), the worst
# NMSE and the registers/spills ptxas reported.
#
# usage: bench/conv_gpu_ab.sh BEFORE_BUILD AFTER_BUILD KERNELBENCH_DIR [--only LIST] [--rounds N]
#                             [--out DIR]
#   run from the repository root; each build carried (bench/pack_gpu_build.sh);
#   KERNELBENCH_DIR a checkout of the public benchmark (its level1/ or KernelBench/level1/)
# --only LIST   level-1 problem numbers, comma-separated (default 56,62: the convolutions
#               docs/benchmarks/gpu.md measured at 7-12 % of their floor)
# --rounds N    timing rounds (default 3)
# --out DIR     work and result folder (default kforge-out/conv-ab)
# CONV_PIN      more pins for both builds' synth (e.g. CONV_PIN='*.tc=0': the SIMT kernel)
# CONV_TARGET   the target (default cuda; cpu or opencl only to try the script on small problems)
# exit status: 0 when every kernel was found and verified.
set -u -o pipefail
case "${1:-}" in -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/.."
A=${1:?usage: bench/conv_gpu_ab.sh BEFORE_BUILD AFTER_BUILD KERNELBENCH_DIR [--only LIST]}
B=${2:?after build}
KB=${3:?KernelBench checkout}
shift 3
ONLY=56,62
ROUNDS=3
O=kforge-out/conv-ab
while [ $# -gt 0 ]; do
  case "$1" in
    --only) ONLY=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --out) O=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "conv_gpu_ab.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$O"; O=$(cd "$O" && pwd)
LV=$KB/level1; [ -d "$LV" ] || LV=$KB/KernelBench/level1
[ -d "$LV" ] || { echo "conv_gpu_ab.sh: no level1/ under $KB" >&2; exit 2; }
. bench/carried_build.sh
use_carried_build "$A"; BA=$BUILD
use_carried_build "$B"; BB=$BUILD
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
# the verifier (one build, the after one) and its libraries
V() { KFORGE_RUNNER=$BB/kforge-runner LD_LIBRARY_PATH=$BB/devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$BB/kforge" "$@"; }
FAIL=0
IFS=, read -r -a KEYS <<< "$ONLY"
for k in "${KEYS[@]}"; do
  f=$(ls "$LV"/"${k}"_*.py 2>/dev/null | head -1)
  [ -n "$f" ] || { echo "== $k: no problem file in $LV"; FAIL=1; continue; }
  name=$(basename "$f" .py)
  T="$O/import/$name"
  if [ ! -f "$T/task.kf" ]; then
    V import "$f" --out "$T" --graph-only >"$O/$name.import.log" 2>&1 || { echo "== $name: import failed ($O/$name.import.log)"; FAIL=1; continue; }
  fi
  echo "== $name"
  for tag in before after; do
    BD=$([ $tag = before ] && echo "$BA" || echo "$BB")
    out="$O/k_${name}_$tag"; rm -rf "$out"
    KFORGE_RUNNER=$BD/kforge-runner LD_LIBRARY_PATH=$BD/devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout 900 \
      "$BD/kforge" synth "$T/task.kf" --target "${CONV_TARGET:-cuda}" --iters 1 ${CONV_PIN:+--pin "$CONV_PIN"} --memcheck off --no-store \
      --out "$out" >"$out.log" 2>&1 || { echo "   synth ($tag) failed: $out.log"; FAIL=1; }
  done
  for r in $(seq 1 "$ROUNDS"); do
    for tag in before after; do
      out="$O/k_${name}_$tag"
      kern=$(ls "$out"/kernel.* 2>/dev/null | head -1)
      [ -n "$kern" ] || continue
      KFORGE_RUNNER=$BB/kforge-runner LD_LIBRARY_PATH=$BB/devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout 900 \
        "$BB/kforge" verify "$T/task.kf" "$kern" --target "${CONV_TARGET:-cuda}" --time --json >"$out.t$r.json" 2>"$out.t$r.err"
    done
  done
  python3 - "$O" "$name" "$ROUNDS" <<'PY' || FAIL=1
import json, statistics, sys
o, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
res, ok = {}, True
for tag in ("before", "after"):
    ts, nm, rs, st = [], 0.0, "", "?"
    for r in range(1, rounds + 1):
        try:
            d = json.load(open(f"{o}/k_{name}_{tag}.t{r}.json"))
        except Exception:
            continue
        st = d.get("status", "?")
        if st == "ok" and d.get("time_ms"):
            ts.append(d["time_ms"])
        nm = max(nm, d.get("nmse") or 0.0)
        rs = d.get("resources", "") or rs
    ok = ok and st == "ok" and bool(ts)
    res[tag] = statistics.median(ts) if ts else float("nan")
    print(f"   {tag:6s} {st:8s} {res[tag]:9.3f} ms (median of {len(ts)}: {', '.join('%.3f' % t for t in ts)})  nmse {nm:.2e}  {rs[:100]}")
if res["after"] == res["after"] and res["after"] > 0:
    print(f"   ratio before/after {res['before'] / res['after']:.3f}")
sys.exit(0 if ok else 1)
PY
done
exit $FAIL
