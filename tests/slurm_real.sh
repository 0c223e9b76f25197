#!/usr/bin/env bash
# kforge slurm against a real Slurm (issue 27): starts munge, slurmctld and slurmd on this
# machine as a one-node cluster with 2 CPUs (config, state, logs and the munge key in a
# temporary folder, ports chosen free), submits a 3-task CPU suite through
# `kforge slurm --submit --array 2`, waits for the array and the merge job, and compares the
# merged summary with one `kforge bench` process of the same suite: the same tasks, all
# correct, the same counts; the merged store has a run per task.
#
# usage: tests/slurm_real.sh [BUILD_DIR]
# Skips (exit 0, saying why) only where Slurm or munge is not installed or the daemons
# cannot start; under CI=true that is a failure (.ci/run installs slurm-wlm and munge).
set -uo pipefail
BUILD=${1:-build}
KFORGE=$(realpath "$BUILD/kforge")
HERE=$(cd "$(dirname "$0")/.." && pwd)

skip() {
    echo "slurm_real: SKIP: $*"
    if [ "${CI:-}" = true ]; then echo "slurm_real: under CI=true this is a failure"; exit 1; fi
    exit 0
}
fail() { echo "slurm_real: FAIL: $*"; exit 1; }

for b in munged slurmctld slurmd sbatch squeue scontrol; do
    command -v "$b" >/dev/null || skip "$b not found (Debian: apt-get install slurm-wlm munge)"
done

T=$(mktemp -d /tmp/kf-slurm-XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    sleep 1
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    if [ -z "${KEEP:-}" ]; then rm -rf "$T"; else echo "slurm_real: kept $T"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- munge, on its own socket and key ---
mkdir -p "$T/munge" && chmod 700 "$T/munge"
dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$T/munge/munge.key"
SOCK="$T/munge/munge.socket"
munged -F --force --key-file="$T/munge/munge.key" --socket="$SOCK" --pid-file="$T/munge/munged.pid" \
    --seed-file="$T/munge/munged.seed" --log-file="$T/munge/munged.log" >"$T/munge/stdout" 2>&1 &
PIDS+=($!)
for i in $(seq 50); do [ -S "$SOCK" ] && break; sleep 0.1; done
[ -S "$SOCK" ] || skip "munged did not start: $(tail -3 "$T/munge/munged.log" "$T/munge/stdout" 2>/dev/null)"

# --- a one-node cluster on localhost ---
HOST=$(hostname -s)
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
mkdir -p "$T/state" "$T/spool" "$T/log"
cat >"$T/slurm.conf" <<CONF
ClusterName=kforgetest
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
AuthType=auth/munge
AuthInfo=socket=$SOCK
CryptoType=crypto/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=kf Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$T/slurm.conf"
slurmctld -D -i -f "$SLURM_CONF" >"$T/log/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -f "$SLURM_CONF" -N "$HOST" >"$T/log/slurmd.out" 2>&1 &
PIDS+=($!)
up=
for i in $(seq 60); do
    if sinfo -h -N -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'; then up=1; break; fi
    sleep 1
done
[ -n "$up" ] || skip "the one-node cluster did not come up: $(tail -3 "$T/log/slurmctld.log" "$T/log/slurmd.log" \
    "$T/log/slurmctld.out" "$T/log/slurmd.out" 2>/dev/null)"
echo "slurm_real: cluster up: $(sinfo -h -N -o '%N %T %c CPUs')"

# --- a 3-task CPU suite ---
SUITE="$T/suite"
mkdir -p "$SUITE"
# the repository's tasks at a small shape (a run of each takes seconds)
for t in softmax sum_rows gelu; do sed 's/f32\[4096, 4096\]/f32[256, 512]/' "$HERE/tasks/$t.kf" >"$SUITE/$t.kf"; done
grep -q 'f32\[256, 512\]' "$SUITE/gelu.kf" || fail "the suite's tasks changed shape: update this test"
export KFORGE_STORE="$T/single.db"
BENCH=(--iters 2 --reps 5 --no-compile)

# --- the array and its merge, through kforge slurm --submit ---
"$KFORGE" slurm "$SUITE" --array 2 --partition kf --cpus-per-task 1 --time 20 --out "$T/run" --submit \
    -- "${BENCH[@]}" >"$T/submit.out" 2>&1 || fail "kforge slurm --submit: $(cat "$T/submit.out")"
cat "$T/submit.out"
merge=$(awk '$1 == "merge" {print $2}' "$T/run/jobs")
[ -n "$merge" ] || fail "no merge job id in $T/run/jobs"
# meanwhile, the same suite in one process
"$KFORGE" bench "$SUITE" "${BENCH[@]}" --out "$T/single" --json "$T/single.json" >"$T/single.out" 2>&1 \
    || fail "the single-process bench failed: $(tail -5 "$T/single.out")"
for i in $(seq 900); do
    state=$(scontrol show job "$merge" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;; esac
    sleep 1
done
[ "$state" = COMPLETED ] || fail "merge job $merge: ${state:-gone}; logs: $(tail -5 "$T"/run/logs/*.log)"

python3 - "$T/single.json" "$T/run/summary.json" "$T/run/merged.db" <<'PY' || fail "the merged summary differs"
import json, sqlite3, sys
one, merged = (json.load(open(p)) for p in sys.argv[1:3])
r1 = [(r["task"], r["status"]) for r in one["rows"]]
r2 = [(r["task"], r["status"]) for r in merged["rows"]]
print("single:", r1)
print("merged:", r2)
assert r1 == r2 and len(r1) == 3 and all(s == "ok" for _, s in r1), (r1, r2)
for k in ("tasks", "supported", "correct", "correctness"):
    assert one["summary"][k] == merged["summary"][k], k
assert merged["merged_from"] == 2
db = sqlite3.connect(sys.argv[3])
runs = db.execute("SELECT count(*), count(DISTINCT task_name) FROM runs WHERE status = 'done'").fetchone()
assert runs == (3, 3), runs
print("slurm_real: merged store:", runs[0], "runs")
PY
echo "slurm_real: PASS (array of 2 + merge, $(grep -c . "$T/run/summary.txt") summary lines, same as one process)"
