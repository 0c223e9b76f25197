#!/bin/bash
# The CUDA loop's speed, two builds side by side on one GPU machine (issue 30): `kforge synth
# TASK --target cuda --iters N --no-store --verbose` with build A and build B alternating,
# ROUNDS times each, printing each run's wall time, candidates per second and the phases
# (compile, sandbox start, check runs, timing runs, memcheck), then the medians and B/A.
#
# usage: bench/cuda_loop_ab.sh A_DIR B_DIR [--task T] [--iters N] [--rounds R] [--out DIR]
#   A_DIR, B_DIR  folders holding kforge and kforge-runner (e.g. build-h200/old build-h200)
#   --task T      default tasks/swish.kf;  --iters N  default 12;  --rounds R  default 3
#   --out DIR     the runs' logs (default $OUT, else kforge-out/cuda-loop-ab)
set -u -o pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
A=$1; B=$2; shift 2
TASK=tasks/swish.kf; ITERS=12; ROUNDS=3; OUTDIR=${OUT:-kforge-out/cuda-loop-ab}
while [ $# -gt 0 ]; do
  case "$1" in
    --task) TASK=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --out) OUTDIR=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cuda_loop_ab.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUTDIR"
run() { # build label round
  local log="$OUTDIR/$2_$3.log" t0 t1
  t0=$(date +%s.%N)
  KFORGE_RUNNER="$PWD/$1/kforge-runner" "$1/kforge" synth "$TASK" --target cuda --iters "$ITERS" \
    --no-store --verbose >"$log" 2>&1
  local rc=$?
  t1=$(date +%s.%N)
  local wall; wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')
  local ph; ph=$(awk '/^phases/{p=1;next} p&&/^  [a-z]/{n=$0; sub(/^  /,"",n); v=$(NF-1); sub(/ +[0-9.]+ +[0-9.]+%$/,"",n); gsub(/ /,"_",n); printf "%s=%s ", n, v}' "$log")
  local best; best=$(grep -m1 '^best:' "$log" | awk '{print $4, $5}')
  echo "$2 round $3: rc $rc, wall $wall s, $(awk -v w="$wall" -v n="$ITERS" 'BEGIN{printf "%.2f", n/w}') cand/s, best $best; $ph"
  echo "$2 $wall" >>"$OUTDIR/walls"
}
rm -f "$OUTDIR/walls"
for r in $(seq 1 "$ROUNDS"); do run "$A" A "$r"; run "$B" B "$r"; done
med() { grep "^$1 " "$OUTDIR/walls" | awk '{print $2}' | sort -n | awk '{v[NR]=$1} END{print (NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2}'; }
MA=$(med A); MB=$(med B)
echo "A median wall $MA s, B median wall $MB s, B/A $(awk -v a="$MA" -v b="$MB" 'BEGIN{printf "%.3f", b/a}')"
