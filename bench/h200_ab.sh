#!/bin/bash
# Before/after on the GPU machine: the same tasks through two checkouts' carried builds (A,
# e.g. a worktree of the commit before a change; B, this checkout), each with its own
# bench/cuda_vs_torch.py in its own process, so each kforge's kernel is timed against
# PyTorch eager in the same process; the ratios kforge/eager of A and B are then set side by
# side (the eager time is the common yardstick, so machine drift between the two runs
# cancels). Builds are made elsewhere with bench/pack_gpu_build.sh (KF_PACK_SRC=/tmp/kfbase
# for A) and carried.
#
# usage: bench/h200_ab.sh A_DIR [--build DIR] [--iters N] [--out DIR] TASK.kf ...
#   A_DIR/DIR/kforge and ./DIR/kforge (DIR default build-h200); writes OUT/ab.json and a table.
#   A needs only DIR/{kforge,kforge-runner,CMakeCache.txt}, bench/, python/, data/ and its tasks:
#   without A_DIR/DIR/devlibs it uses B's (the same system libraries).
set -u -o pipefail
cd "$(dirname "$0")/.."
A=$1; shift
BUILD=build-h200; ITERS=10; OUTDIR=${OUT:-kforge-out/h200-ab}
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --out) OUTDIR=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
mkdir -p "$OUTDIR"; OUTDIR=$(cd "$OUTDIR" && pwd); A=$(cd "$A" && pwd)
export PYTHONUNBUFFERED=1 PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin"
setup() {  # a carried build: its libraries, and the source path it was configured from
  local dir=$1 src
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$dir/$BUILD/CMakeCache.txt")
  [ -n "$src" ] && [ ! -e "$src" ] && mkdir -p "$(dirname "$src")" && ln -s "$dir" "$src"
}
setup "$A"; setup "$PWD"
for side in A B; do
  dir=$PWD; [ $side = A ] && dir=$A
  echo "== $side: $dir ($(git -C "$dir" log -1 --format='%h %s' 2>/dev/null | cut -c1-60))"
  libs="$dir/$BUILD/devlibs"; [ -d "$libs" ] || libs="$PWD/$BUILD/devlibs"  # A may use B's copies
  (cd "$dir" && LD_LIBRARY_PATH="$libs" python3 bench/cuda_vs_torch.py --kforge "$dir/$BUILD/kforge" \
     --iters "$ITERS" --no-compile --out "/tmp/h200-ab-$side" --json "$OUTDIR/$side.json" "$@" 2>&1 | tail -"$(( $# + 8 ))")
done
python3 - "$OUTDIR" <<'PY'
import json, sys, os
d = sys.argv[1]
A = {r["task"]: r for r in json.load(open(os.path.join(d, "A.json")))["rows"]}
B = {r["task"]: r for r in json.load(open(os.path.join(d, "B.json")))["rows"]}
print("\n%-16s %10s %10s %10s %10s %8s" % ("task", "A kf ms", "A eager", "B kf ms", "B eager", "B/A"))
out = []
for t in A:
    if "ms" not in A[t] or "ms" not in B.get(t, {}): print("%-16s %s" % (t, A[t].get("error") or B.get(t, {}).get("error"))); continue
    if t not in B: continue
    a, b = A[t], B[t]
    ra, rb = a["ms"]["kforge"] / a["ms"]["eager"], b["ms"]["kforge"] / b["ms"]["eager"]
    print("%-16s %10.4f %10.4f %10.4f %10.4f %8.3f" % (t, a["ms"]["kforge"], a["ms"]["eager"], b["ms"]["kforge"], b["ms"]["eager"], rb / ra))
    out.append({"task": t, "A": a, "B": b, "ratio_B_over_A": rb / ra})
json.dump(out, open(os.path.join(d, "ab.json"), "w"), indent=1)
PY
