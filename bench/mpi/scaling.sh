#!/bin/bash
# Scale-out benchmark (MPI issue), where the MPI plugin is built: 2 ranks x 1
# thread against 1 rank x 1 thread on this machine, Fashion-MNIST, the MLP
# and CNN of docs/examples (Adam, batch 128). Two measurements, medians of
# $ROUNDS rounds, the ratio taken within each round:
#
#  1. The training step alone, through bench/mpi/data_parallel.cc: every
#     rank reads the data itself, so this is each rank's share of the batch
#     and the gradient all-reduce. Prints samples/s, the scaling efficiency
#     (samples/s on 2 ranks over twice 1 rank's; goal for the CNN: at least
#     0.9) and the share of the 2-rank step spent in the communicator's
#     calls (waiting for the other rank included).
#  2. What a user runs: `mpirun -np N anneal train` for one epoch against a
#     store, rank 0 reading every batch from it and sending rank 1 its rows.
#     Prints the samples/s anneal reports, the efficiency, and the test
#     accuracy on each side (the same run up to the order of additions);
#     beside them, one process on both cores (threads = 2), the other way
#     to use them, whose own order of additions differs from 1 thread's.
#
# MODELS picks the models (default "mlp cnn").
set -euo pipefail
: "${ANNEAL:?}" "${BUILD:?}"
HERE=$(dirname "$(realpath "$0")")
ROOT=$(dirname "$(dirname "$HERE")")
ROUNDS=${ROUNDS:-5}  # the machine is noisy: a median of 5 moves less than one of 3
MODELS=${MODELS:-mlp cnn}
driver="$BUILD/bench/anneal-data-parallel"
if [ ! -x "$driver" ] || ! command -v mpirun > /dev/null; then
  echo "== data-parallel scaling: skipped (the MPI plugin or mpirun is not here)"
  exit 0
fi
. "$ROOT/bench/lib.sh"
mpi() {  # RANKS COMMAND...
  local ranks=$1
  shift
  ANNEAL_PLUGIN_DIR="$(dirname "$ANNEAL")" mpirun -np "$ranks" --oversubscribe --allow-run-as-root \
    --mca btl self,vader,tcp "$@"
}

echo "== data-parallel scaling: the training step, 2 ranks x 1 thread against 1 rank x 1 thread (medians of $ROUNDS rounds)"
printf '%-5s %14s %14s %11s %16s\n' model "1 rank samp/s" "2 ranks samp/s" efficiency "comm share (2)"
for model in $MODELS; do
  steps=1000  # a second or more per run, so that one hiccup of the machine weighs little
  [ "$model" = cnn ] && steps=150
  rounds=""
  for ((r = 0; r < ROUNDS; r++)); do
    rounds+="$(mpi 1 "$driver" "$model" "$steps" "$FMNIST") $(mpi 2 "$driver" "$model" "$steps" "$FMNIST")"$'\n'
  done
  printf '%s' "$rounds" | "$PYTHON" -c "
import statistics as st, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
one, two, comm = st.median(r[0] for r in rows), st.median(r[2] for r in rows), st.median(r[3] for r in rows)
eff = st.median(r[2] / (2 * r[0]) for r in rows)
print('%-5s %14.0f %14.0f %11.2f %15.1f%%' % ('$model', one, two, eff, 100 * comm))"
done

import_fmnist
echo "== data-parallel scaling: mpirun -np N anneal train, one epoch from the store (medians of $ROUNDS rounds)"
printf '%-5s %14s %14s %11s %16s | %9s %9s %9s\n' model "1 rank samp/s" "2 ranks samp/s" efficiency \
  "1 x 2 thr samp/s" "acc 1x1" "acc 2x1" "acc 1x2"
# RANKS 0: no mpirun (which would bind the one rank, threads and all, to core 0).
train() {  # RANKS THREADS MODEL -> "samples_per_s test_accuracy"
  local launch=(mpi "$1")
  [ "$1" = 0 ] && launch=()
  "${launch[@]}" "$ANNEAL" --json train "$ROOT/docs/examples/fmnist-$3.ini" --set threads="$2" --set epochs=1 \
    --set validation=0 --set checkpoint_every=0 2> /dev/null |
    "$PYTHON" -c "import json, sys; j = json.load(sys.stdin); print(j['samples_per_s'], j['metrics']['test_accuracy'])"
}
for model in $MODELS; do
  rounds=""
  for ((r = 0; r < ROUNDS; r++)); do
    rounds+="$(train 1 1 "$model") $(train 2 1 "$model") $(train 0 2 "$model")"$'\n'
  done
  printf '%s' "$rounds" | "$PYTHON" -c "
import statistics as st, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
one, two, threads = (st.median(r[i] for r in rows) for i in (0, 2, 4))
eff = st.median(r[2] / (2 * r[0]) for r in rows)
print('%-5s %14.0f %14.0f %11.2f %16.0f | %9.4f %9.4f %9.4f' % ('$model', one, two, eff, threads, rows[0][1], rows[0][3], rows[0][5]))"
done
