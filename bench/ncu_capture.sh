#!/bin/bash
# Record Nsight Compute metrics of kforge's CUDA kernels as CSV (the test data of the
# analysis agent's ncu reader, tests/data/ncu/): for each task, scaled to GPU sizes like
# bench/cuda_h200.sh does, `kforge synth --target cuda` runs under ncu with the sections
# the diagnosis reads, and ncu writes its raw page (one row per kernel launch, one column
# per metric) as CSV.
#
# usage: bench/ncu_capture.sh [--build DIR] [--out DIR] [--iters N] [--launches N] TASK.kf ...
# --launches N profiles the first N launches of kforge's kernels (default 6): every
# candidate launches once per input set and once per timing repetition, so a small N
# covers the first candidate only; raise it to reach the later ones (each launch costs ncu
# about a second). `kforge analyze OUT/run-NAME/run.json --ncu OUT/NAME.csv` reads the result.
# needs ncu (Nsight Compute) on PATH and a GPU whose counters it can read. The candidates
# run with KFORGE_SANDBOX=off: ncu talks to the profiled process through sockets, which
# the sandbox's seccomp filter refuses (these are kforge's own kernels).
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD=build-h200
OUTDIR=${OUT:-kforge-out/ncu}
ITERS=3
LAUNCHES=6
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --out) OUTDIR=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --launches) LAUNCHES=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "ncu_capture.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
command -v ncu >/dev/null || { echo "ncu_capture.sh: ncu not on PATH" >&2; exit 1; }
mkdir -p "$OUTDIR"
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section ComputeWorkloadAnalysis --section SchedulerStats"
FAIL=0
for t in "$@"; do
  name=$(basename "$t" .kf)
  python3 -c "import sys; sys.path.insert(0, 'bench'); import kf_torch; print(kf_torch.scale_task(open(sys.argv[1]).read(), 2), end='')" "$t" >"$OUTDIR/$name.kf"
  echo "== $name"
  KFORGE_SANDBOX=off ncu --csv --page raw --clock-control none --target-processes all $SECTIONS \
    -k 'regex:^kf_s[0-9]' --launch-count "$LAUNCHES" \
    "$BUILD/kforge" synth "$OUTDIR/$name.kf" --target cuda --iters "$ITERS" --memcheck off --seed 1 \
    --out "$OUTDIR/run-$name" >"$OUTDIR/$name.raw.txt" 2>"$OUTDIR/$name.err" || { FAIL=1; tail -5 "$OUTDIR/$name.err"; }
  # ncu's own lines start with ==PROF== or ==WARNING==; the CSV is the quoted rows
  grep '^"' "$OUTDIR/$name.raw.txt" >"$OUTDIR/$name.csv" || true
  echo "   $(($(wc -l <"$OUTDIR/$name.csv") - 2)) kernel rows, $(head -1 "$OUTDIR/$name.csv" | tr ',' '\n' | wc -l) columns"
  cp "$OUTDIR/run-$name/run.json" "$OUTDIR/$name.run.json" 2>/dev/null || true
done
exit $FAIL
