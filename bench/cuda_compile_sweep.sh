#!/bin/bash
# Every task's CUDA candidates compiled without a GPU: for each TASK.kf, the builtin
# generator's source at several schedule points, rendered for an sm_90 device of 132 SMs
# (bench/gpu_render_point.c, RENDER), compiled by nvcc -arch=sm_90. A source that does not
# compile is a candidate the GPU run would lose (a `uchar` in a helper's parameters was
# one); run before a GPU session on the tasks it will run. Warnings (NVRTC, which kforge
# compiles with, does not fail on them) are counted apart.
#
# usage: bench/cuda_compile_sweep.sh [--jobs N] [--points "P1|P2|..."] RENDER TASK.kf ...
#   points: "|"-separated assignments for render_point (default: the default point, tc=1,
#   tc=0, random=1, random=2, random=3); RENDER built as gpu_render_point.c's header says
# prints one line per task (points compiled, with warnings, failures with the first error),
# the total;
# failures' sources and logs are kept under $OUT (default /tmp/kf-cuda-sweep).
# exit status: 0 when every rendered point compiled (a point the plan refuses to render is
# counted apart, "not rendered"), 1 otherwise.
set -u
JOBS=2
POINTS="|tc=1|tc=0|random=1|random=2|random=3"
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) JOBS=$2; shift 2 ;;
    --points) POINTS=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
R=${1:?usage: bench/cuda_compile_sweep.sh RENDER TASK.kf ...}; shift
O=${OUT:-/tmp/kf-cuda-sweep}
mkdir -p "$O"
one() {  # task -> a line
  local t=$1 name ok=0 bad=0 skip=0 warn=0 first="" i=0 pt
  name=$(basename "$(dirname "$t")")_$(basename "$t" .kf)
  IFS='|' read -r -a PTS <<< "$POINTS"
  [ "${POINTS: -1}" = "|" ] && PTS+=("")
  for pt in "${PTS[@]}"; do
    i=$((i + 1))
    local src="$O/$name.$i.cu"
    if ! "$R" "$t" "$pt" >"$src" 2>"$src.plan"; then
      # a point whose parameter the plan lacks (tc on a task with no matmul) is not a failure
      if grep -q "no parameter takes" "$src.plan"; then skip=$((skip + 1)); rm -f "$src" "$src.plan"; continue; fi
      bad=$((bad + 1)); [ -z "$first" ] && first="[${pt:-default}] render: $(head -c 200 "$src.plan")"; continue
    fi
    if nvcc -arch=sm_90 -c -o "$src.o" "$src" >"$src.log" 2>&1; then
      ok=$((ok + 1))
      if grep -q warning "$src.log"; then warn=$((warn + 1)); rm -f "$src.o"; else rm -f "$src" "$src.plan" "$src.log" "$src.o"; fi
    else
      bad=$((bad + 1))
      [ -z "$first" ] && first="[${pt:-default}] $(grep -m1 -E 'error|warning' "$src.log" | head -c 240) ($src)"
    fi
  done
  echo "$name: $ok compiled ($warn with warnings), $bad failed, $skip not rendered${first:+; first: $first}"
}
export -f one
export R O POINTS
printf '%s\n' "$@" | xargs -P "$JOBS" -I{} bash -c 'one "$@"' _ {} | tee "$O/sweep.txt"
fails=$(grep -c ", [1-9][0-9]* failed" "$O/sweep.txt")
echo "== $# tasks, $fails with a failure (sources and logs of failures under $O)"
[ "$fails" = 0 ]
