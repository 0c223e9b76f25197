#!/bin/bash
# KernelBench level 1 at its official shapes on the GPU machine, in one command: the problems
# of a KernelBench checkout (never copied into this repository; carry a copy of its level1/
# folder in an ignored path such as kforge-out/kb/level1) through `kforge bench --target cuda`,
# under a time limit, with the JSON rewritten after every problem so a run cut short keeps its
# rows.
#
# usage: bench/kb_gpu.sh KERNELBENCH_DIR [--build DIR] [--level L] [--only LIST] [--limit S]
#                        [--out DIR] [--keep-runs] [-- kforge bench options]
#
# --build DIR   a kforge build made elsewhere and carried (default build-h200; see
#               bench/pack_gpu_build.sh)
# --level L     the KernelBench level (default 1; its folder levelL under KERNELBENCH_DIR)
# --only LIST   problem numbers or name parts, comma-separated, one `kforge bench` each,
#               the problems run in the order given
# --limit S     seconds for the whole run (default 480); the problem running then is cut off
# --out DIR     kb_gpu.json, kb_gpu.log (default $OUT, else kforge-out/kb-gpu)
# --keep-runs   also kb_runs.tgz: every problem's bench folder (kernels, run records); off by
#               default: it can take a minute to pack, past a device call's limit
# --host-mem G  GiB the verifier may hold for input sets and references (KFORGE_HOST_MEM;
#               default: the machine's physical memory). On the lent GPU machines the
#               memory reported starts small and grows with use: give what the kind has,
#               less room for PyTorch's processes (e.g. 100 on a 128 GiB machine)
# after --     kforge bench options (default: --iters 2 --reps 10)
#
# exit status: 0 when every problem that ran was correct, 1 otherwise.
set -u -o pipefail
cd "$(dirname "$0")/.."
KB=${1:?usage: bench/kb_gpu.sh KERNELBENCH_DIR [--only LIST] ...}; shift
BUILD=build-h200
ONLY=""
LEVEL=1
LIMIT=480
OUTDIR=${OUT:-kforge-out/kb-gpu}
KEEP_RUNS=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --level) LEVEL=$2; shift 2 ;;
    --limit) LIMIT=$2; shift 2 ;;
    --out) OUTDIR=$2; shift 2 ;;
    --host-mem) export KFORGE_HOST_MEM=$2; shift 2 ;;
    --keep-runs) KEEP_RUNS=1; shift ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    *) echo "kb_gpu.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
BENCH_ARGS=("$@")
[ ${#BENCH_ARGS[@]} = 0 ] && BENCH_ARGS=(--iters 2 --reps 10)
[ -x "$BUILD/kforge" ] || { echo "kb_gpu.sh: no $BUILD/kforge (build it elsewhere: bench/pack_gpu_build.sh)" >&2; exit 2; }
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
. bench/carried_build.sh
use_carried_build "$BUILD"
export KFORGE="$BUILD/kforge" KFORGE_RUNNER="$BUILD/kforge-runner" PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
WORK=$(mktemp -d /tmp/kf-kb-gpu.XXXXXX)
export KFORGE_STORE="$WORK/kforge.db"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
# one `kforge bench` per problem, in the order asked, each with the time left
FAIL=0
T0=$SECONDS
IFS=, read -r -a KEYS <<< "$ONLY"
for k in "${KEYS[@]}"; do
  left=$((LIMIT - (SECONDS - T0)))
  [ $left -lt 30 ] && { echo "== $k: not run (time limit)"; continue; }
  echo "== $k ($left s left; host memory: $(free -g | awk '/^Mem:/ {print $2 " GiB, " $3 " used"}'))"
  # what the problem cost the host (kforge's verifier and PyTorch's processes together)
  TIMEFORMAT="   host: %R s wall, %U s user, %S s system"
  time timeout -k 10 $left python3 bench/kernelbench.py "$KB" --level "$LEVEL" --cap 0 --only "$k" --work "$WORK/copies/$k" \
    --kforge "$KFORGE" --bench --target cuda --out "$WORK/bench/$k" --json "$OUTDIR/kb_$k.json" \
    "${BENCH_ARGS[@]}" 2>&1 | tee -a "$OUTDIR/kb_gpu.log" | grep -v '^  ' | tail -40
  rc=${PIPESTATUS[0]}
  unset TIMEFORMAT
  [ "$rc" = 0 ] || { echo "   exit $rc$([ "$rc" = 124 ] && echo ' (cut off by the time limit)')"; FAIL=1; }
  # where kforge's own time went (run.json's phases_s, seconds), kept in the log
  find "$WORK/bench/$k" -name run.json 2>/dev/null | python3 -c '
import json, sys
for f in sys.stdin.read().split():
    try:
        j = json.load(open(f))
    except Exception:
        continue
    ph = j.get("phases_s", {})
    print("   phases " + j.get("task", "?") + ": " + " ".join(f"{k} {v:.1f}" for k, v in ph.items() if isinstance(v, (int, float)) and v >= 0.05))
' | tee -a "$OUTDIR/kb_gpu.log"
done
# every problem's rows in one file
python3 - "$OUTDIR" <<'PY'
import glob, json, os, sys
rows = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "kb_*.json"))):
    try:
        d = json.load(open(f))
    except Exception as e:
        print(f"{f}: {e}"); continue
    rows += d.get("rows", [])
json.dump({"rows": rows}, open(os.path.join(sys.argv[1], "kb_gpu.json"), "w"), indent=1)
print(f"{len(rows)} rows, {sum(1 for r in rows if r.get('correct'))} correct")
PY
[ "$KEEP_RUNS" = 1 ] && tar czf "$OUTDIR/kb_runs.tgz" -C "$WORK" bench 2>/dev/null
rm -rf "$WORK"
echo "== done in $((SECONDS - T0)) s"
exit $FAIL
