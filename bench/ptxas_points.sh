#!/bin/bash
# Registers and spills (ptxas, sm_90) and PTX integer instruction counts of the matmul
# kernel kf_s1 of a task at several schedule points, without a GPU: each point rendered by
# RENDER (bench/gpu_render_point.c, built against one build's libkforge.a), compiled by
# nvcc as warnings-as-errors. Integer: PTX mul/mad/add/sub/rem/div/setp/shift/logic/selp/
# min/max on 32/64-bit integers and predicates; "loop": one iteration of the 3xTF32 main
# loop (from its cp.async.wait_group 1 to the wait_group 0 after it).
#
# usage: bench/ptxas_points.sh RENDER TASK.kf ["point" ...]
#   (default points: the default, acc=1, mb=2, mb=2 acc=1, bk=16, bn=64 wm=32 wn=32, tc=0, tc=0 mg=1)
set -u
R=${1:?usage: bench/ptxas_points.sh RENDER TASK.kf [points]}; T=${2:?task}; shift 2
[ $# -gt 0 ] || set -- "" "acc=1" "mb=2" "mb=2 acc=1" "bk=16" "bn=64 wm=32 wn=32" "tc=0" "tc=0 mg=1"
W=$(mktemp -d /tmp/kf-ptxas.XXXXXX)
INT='^\s+(mul|mad|add|sub|rem|div|setp|shl|shr|and|or|xor|selp|neg|min|max)\.[a-z0-9.]*(s32|u32|s64|u64|b32|b64|pred)'
for pt in "$@"; do
  "$R" "$T" "$pt" >"$W/m.cu" 2>"$W/m.err" || { echo "[${pt:-default}] render failed: $(cat "$W/m.err")"; continue; }
  out=$(nvcc -arch=sm_90 -c --resource-usage -Werror all-warnings -o "$W/m.o" "$W/m.cu" 2>&1) || { echo "[${pt:-default}] nvcc failed"; echo "$out" | tail -5; continue; }
  use=$(echo "$out" | grep -A2 "kf_s1" | grep -o "Used [0-9]* registers\|[0-9]* bytes spill stores" | tr '\n' ' ')
  nvcc -arch=sm_90 -ptx -o "$W/m.ptx" "$W/m.cu"
  all=$(grep -E "$INT" "$W/m.ptx" | grep -vc f32)
  loop=$(awk '/cp.async.wait_group 1;/{f=1} /cp.async.wait_group 0;/{f=0} f' "$W/m.ptx" | grep -E "$INT" | grep -vc f32)
  echo "[${pt:-default}] $use; integer PTX: kernel $all, main loop $loop"
done
rm -rf "$W"
