#!/bin/bash
# The leak check's tracer crash at test exit (issue 30; docs/design-notes.md, "The leak
# check's tracer crash"): ROUNDS rounds of three ASan runs of test_faults_opencl side by
# side (the CI's sanitizer pass runs ctest -j 2 beside other tests; three at once on the
# 2-vCPU VM reproduces its load), with the CI's ASAN_OPTIONS plus EXTRA_ASAN (e.g.
# intercept_tls_get_addr=1, the runtime's default) and any other VAR=VALUE given. Prints
# per run its tests' verdict line and its tracer crashes; the logs stay in OUT.
#
# usage: bench/lsan_tracer_runs.sh ASAN_BUILD OUT ROUNDS [VAR=VALUE ...]   (repository root)
set -u
B=$(cd "${1:?asan build dir}" && pwd); O=${2:?out dir}; R=${3:?rounds}; shift 3
mkdir -p "$O"; O=$(cd "$O" && pwd)
export KFORGE_RUNNER=$B/kforge-runner
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1${EXTRA_ASAN:+:$EXTRA_ASAN}"
export UBSAN_OPTIONS=print_stacktrace=1
crashes=0; runs=0
for r in $(seq "$R"); do
  for k in 1 2 3; do
    (cd "$B" && env "$@" ./test_faults_opencl --jobs 1 >"$O/r${r}_$k.log" 2>&1; echo "rc=$?" >>"$O/r${r}_$k.log") &
  done
  wait
  for k in 1 2 3; do
    f=$O/r${r}_$k.log; c=$(grep -c "Tracer caught" "$f"); runs=$((runs + 1)); crashes=$((crashes + (c > 0)))
    echo "round $r run $k: $(grep -E '^\[====\] Synthesis' "$f" | sed 's/.*Synthesis: //') $(tail -1 "$f"), tracer crashes $c"
  done
  echo "  load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "runs $runs, runs with a tracer crash $crashes (ASAN_OPTIONS=$ASAN_OPTIONS${*:+, $*})"
