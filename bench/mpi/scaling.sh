#!/bin/bash
# Scale-out benchmark (MPI issue), where the MPI plugin is built: the
# data-parallel training step of the Fashion-MNIST MLP and CNN (Adam, batch
# 128, CPU backend at 1 thread per rank) on 2 ranks against 1, on this
# machine, through bench/mpi/data_parallel.cc: every rank reads the data
# itself, so this is the step alone (each rank's share of the batch and the
# gradient all-reduce), not yet `mpirun anneal train`, whose rank-0 data
# service is still to come. Prints samples/s, the scaling efficiency
# (samples/s on 2 ranks over twice 1 rank's; goal for the CNN: at least
# 0.9) and the share of the 2-rank step spent in the communicator (waiting
# for the other rank included), medians of $ROUNDS rounds.
set -euo pipefail
: "${ANNEAL:?}" "${BUILD:?}"
ROUNDS=${ROUNDS:-3}
FMNIST=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
PYTHON=${PYTHON:-/usr/bin/python3}
driver="$BUILD/bench/anneal-data-parallel"
if [ ! -x "$driver" ] || ! command -v mpirun > /dev/null; then
  echo "== data-parallel scaling: skipped (the MPI plugin or mpirun is not here)"
  exit 0
fi
run() {  # RANKS MODEL STEPS -> "samples/s comm_share"
  ANNEAL_PLUGIN_DIR="$(dirname "$ANNEAL")" mpirun -np "$1" --oversubscribe --allow-run-as-root \
    --mca btl self,vader,tcp "$driver" "$2" "$3" "$FMNIST"
}
echo "== data-parallel scaling, 2 ranks x 1 thread against 1 rank x 1 thread (medians of $ROUNDS rounds)"
printf '%-5s %14s %14s %11s %16s\n' model "1 rank samp/s" "2 ranks samp/s" efficiency "comm share (2)"
for model in ${MODELS:-mlp cnn}; do
  steps=200
  [ "$model" = cnn ] && steps=40
  rounds=""
  for ((r = 0; r < ROUNDS; r++)); do
    rounds+="$(run 1 "$model" "$steps") $(run 2 "$model" "$steps")"$'\n'
  done
  printf '%s' "$rounds" | "$PYTHON" -c "
import statistics as st, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
one, two, comm = st.median(r[0] for r in rows), st.median(r[2] for r in rows), st.median(r[3] for r in rows)
eff = st.median(r[2] / (2 * r[0]) for r in rows)
print('%-5s %14.0f %14.0f %11.2f %15.1f%%' % ('$model', one, two, eff, 100 * comm))"
done
