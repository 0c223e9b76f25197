#!/bin/bash
# Where the f32 matmul's 3xTF32 kernel spends its cycles (GPU machine, cuda): `kforge synth`
# of an N^3 f32 matmul pinned to the tensor-core path (tc=1, plus any --pin given), then the
# best kernel's third launch under Nsight Compute with the full section set, printed as text
# (pipe utilisation, issue slots, warp stall reasons, shared-memory conflicts, registers).
#
# usage: bench/gemm_profile.sh OUT_DIR [BUILD] [N] [-- more kforge synth options]
#   (default build-h200 and 4096; run from the repository root; BUILD carried by
#   bench/pack_gpu_build.sh). Writes OUT_DIR/ncu_N.txt and the kernel's folder.
# The candidates run with KFORGE_SANDBOX=off under ncu (its sockets; kforge's own kernels).
set -u -o pipefail
cd "$(dirname "$0")/.."
O=${1:?usage: bench/gemm_profile.sh OUT_DIR [BUILD] [N]}; shift
B=build-h200; N=4096
[ $# -gt 0 ] && [ "$1" != -- ] && { B=$1; shift; }
[ $# -gt 0 ] && [ "$1" != -- ] && { N=$1; shift; }
[ "${1:-}" = -- ] && shift
mkdir -p "$O"; O=$(cd "$O" && pwd)
. bench/carried_build.sh
use_carried_build "$B" >/dev/null
K=$(cd "$B" && pwd)/kforge
T="$O/matmul_$N.kf"
printf 'task matmul_%s\ninput a: f32[%s, %s]\ninput b: f32[%s, %s]\noutput c = matmul(a, b)\n' "$N" "$N" "$N" "$N" "$N" >"$T"
"$K" synth "$T" --target cuda --iters 1 --pin '*.tc=1' --no-store --memcheck off --out "$O/run" "$@" || exit 1
KER=$(ls "$O"/run/kernel.* | head -1)
command -v ncu >/dev/null || PATH=/usr/local/cuda/bin:$PATH
KFORGE_SANDBOX=off ncu --set full --launch-skip 2 --launch-count 1 --print-details all \
  "$K" verify "$T" "$KER" --target cuda > "$O/ncu_$N.txt" 2>&1
echo "ncu exit $? ($(wc -l < "$O/ncu_$N.txt") lines): $O/ncu_$N.txt"
grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Compute \(SM\) Throughput|Memory Throughput|Stall|Shared.*Bank|Executed Ipc" "$O/ncu_$N.txt" | head -40
