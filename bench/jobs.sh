#!/bin/bash
# Job queue benchmark (jobs issue): JOBS tiny training jobs (iris, a few
# epochs) queued with `anneal submit` and run by one `anneal worker --drain`
# on all cores, end to end (first submit to last job recorded), against the
# same trainings run by `anneal train` directly, as many at a time as the
# worker runs (xargs -P), in the same invocation. Prints jobs/s for both,
# the ratio, and the overhead per job. Median of RUNS runs, interleaved.
set -euo pipefail
: "${ANNEAL:?}" "${BUILD:?}"
HERE=$(dirname "$(realpath "$0")")
ROOT=$(dirname "$HERE")
JOBS=${JOBS:-200}
RUNS=${RUNS:-3}
CORES=$(nproc)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/anneal-bench-XXXXXX")
trap 'rm -rf "$WORK"' EXIT

cat > "$WORK/tiny.ini" <<'EOF'
name = tiny
dataset = iris
layers = dense(8) relu dense(3)
loss = softmax_ce
optimizer = adam
lr = 0.01
batch = 16
epochs = 3
seed = 1
threads = 1
EOF

fresh_store() {
  rm -rf "$WORK/store"
  "$ANNEAL" --store "$WORK/store" init > /dev/null
  "$ANNEAL" --store "$WORK/store" data import iris "$ROOT/tests/data/iris.csv" > /dev/null
}
now_ns() { date +%s%N; }
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

: > "$WORK/queue.times"
: > "$WORK/direct.times"
for run in $(seq "$RUNS"); do
  fresh_store
  t0=$(now_ns)
  for i in $(seq "$JOBS"); do
    "$ANNEAL" --store "$WORK/store" submit "$WORK/tiny.ini" --set "seed=$i" > /dev/null
  done
  "$ANNEAL" --store "$WORK/store" worker --cores "$CORES" --drain > /dev/null 2>&1
  t1=$(now_ns)
  done_jobs=$("$ANNEAL" --store "$WORK/store" --json jobs list |
    python3 -c "import json,sys; print(sum(j['state'] == 'succeeded' for j in json.load(sys.stdin)['jobs']))")
  [ "$done_jobs" -eq "$JOBS" ] || { echo "bench/jobs.sh: only $done_jobs of $JOBS jobs succeeded" >&2; exit 1; }
  echo "$(( t1 - t0 ))" >> "$WORK/queue.times"

  fresh_store
  t0=$(now_ns)
  seq "$JOBS" | xargs -P "$CORES" -I{} "$ANNEAL" --store "$WORK/store" train "$WORK/tiny.ini" --set "seed={}" \
    > /dev/null 2>&1
  t1=$(now_ns)
  echo "$(( t1 - t0 ))" >> "$WORK/direct.times"
done
queue_s=$(awk '{ print $1 / 1e9 }' "$WORK/queue.times" | median)
direct_s=$(awk '{ print $1 / 1e9 }' "$WORK/direct.times" | median)

awk -v n="$JOBS" -v q="$queue_s" -v d="$direct_s" -v c="$CORES" -v runs="$RUNS" 'BEGIN {
  printf "== jobs: %d tiny jobs (iris, 3 epochs, 1 core each), %d at a time, median of %d runs\n", n, c, runs
  printf "submit + worker --drain   %7.1f jobs/s  (%.2f s)\n", n / q, q
  printf "anneal train (xargs -P%d)  %7.1f jobs/s  (%.2f s)\n", c, n / d, d
  printf "ratio queue/direct        %7.2fx; overhead per job %.1f ms of wall time (submit, claim, spawn, record)\n", d / q, 1000 * (q - d) / n
}'
