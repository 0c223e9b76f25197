#!/bin/sh
# The float64 reference's CPU time per element, before and after a change of the pointwise
# records (issue 30): bench/ref_cpu.c linked with this build's library, and with the same
# library but src/ops/pointwise.c and src/ir/interp.c as of BASE (a commit) in front of it,
# run interleaved. The base objects are built with this build's flags for the library (not
# with any per-file options a later CMakeLists.txt gives them).
#   bench/ref_cpu_ab.sh BASE "tasks/swish.kf tasks/gelu.kf" [rounds] [reps]
set -e
base=$1; tasks=$2; rounds=${3:-3}; reps=${4:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cflags="-O3 -DNDEBUG -fopenmp -std=gnu11 -D_GNU_SOURCE -I$root/include -I$root/src"
libs="$root/build/libkforge.a -ljansson -lcurl -lopenblas -lsqlite3 -lmvec -lm -ldl"
git -C "$root" show "$base:src/ops/pointwise.c" > "$tmp/pointwise.c"
git -C "$root" show "$base:src/ir/interp.c" > "$tmp/interp.c"
cc $cflags -I"$root/src/ops" -c "$tmp/pointwise.c" -o "$tmp/pointwise_base.o"
cc $cflags -I"$root/src/ir" -c "$tmp/interp.c" -o "$tmp/interp_base.o"
cc $cflags "$root/bench/ref_cpu.c" $libs -o "$tmp/ref_new"
cc $cflags "$root/bench/ref_cpu.c" "$tmp/pointwise_base.o" "$tmp/interp_base.o" $libs -o "$tmp/ref_base"
r=1
while [ $r -le "$rounds" ]; do
  for t in $tasks; do
    echo "round $r base $("$tmp/ref_base" "$t" "$reps")"
    echo "round $r new  $("$tmp/ref_new" "$t" "$reps")"
  done
  r=$((r + 1))
done
