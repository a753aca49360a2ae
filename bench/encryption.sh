#!/bin/bash
# Encryption-at-rest benchmark (issue 18): the same work on a plaintext store
# and on an encrypted one (`init --encrypt`), interleaved in one invocation.
#   import: the generated numeric CSV of import.sh (~$ROWS rows), MB/s;
#   train:  Fashion-MNIST's MLP (docs/examples/fmnist-mlp.ini), $EPOCHS epochs
#           (5), $THREADS threads (2), fp32, checkpoints every 30 s and the model written as
#           usual: samples/s as the trainer measures it, and the wall time
#           of the whole command (reading and decrypting the dataset,
#           writing the encrypted checkpoint and model included).
# Each round runs both, in alternating order (plain first in odd rounds,
# encrypted first in even ones), so a drift in machine load or a warm cache
# favours neither. The ratio reported is the median of the rounds' paired
# ratios (each round's plaintext and encrypted runs were seconds apart),
# with their range, encrypted over plaintext in throughput (1.00: no cost;
# below 1: encryption is slower). On a shared machine give RUNS=5 or more
# and THREADS=1: the trainer's threads meet at every step, so with 2 threads
# on 2 busy cores one descheduled thread stalls the other (measured with 4
# builds beside it: 7.5k samples/s at 2 threads, 149k at 1, ratios between
# rounds from 0.35 to 3.8). EPOCHS (5) keeps training, not start-up and
# dataset loading, the bulk of the train command's wall time.
set -euo pipefail
: "${ANNEAL:?}" "${BUILD:?}"
HERE=$(dirname "$(realpath "$0")")
ROOT=$(dirname "$HERE")
RUNS=${RUNS:-5}
ROWS=${ROWS:-1150000}
EPOCHS=${EPOCHS:-5}
THREADS=${THREADS:-2}
PYTHON=${PYTHON:-/usr/bin/python3}
FMNIST=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/anneal-bench-XXXXXX")
trap 'rm -rf "$WORK"' EXIT

"$BUILD/bench/anneal-gen-csv" "$ROWS" 0 1 > "$WORK/data.csv"
size=$(stat -c %s "$WORK/data.csv")
cat "$WORK/data.csv" > /dev/null  # the page cache warm for every run alike
now_ns() { date +%s%N; }

# fresh_store KIND: a new store, plaintext or encrypted (its own new key).
fresh_store() {
  rm -rf "$WORK/$1" "$WORK/$1.key"
  if [ "$1" = encrypted ]; then
    "$ANNEAL" --store "$WORK/$1" init --encrypt --key-file "$WORK/$1.key" > /dev/null 2>&1
  else
    "$ANNEAL" --store "$WORK/$1" init > /dev/null
  fi
}
# anneal_in KIND ARGS...: anneal on that store, with its key when it has one.
anneal_in() {
  local kind=$1
  shift
  if [ "$kind" = encrypted ]; then "$ANNEAL" --store "$WORK/$kind" --key-file "$WORK/$kind.key" "$@"
  else "$ANNEAL" --store "$WORK/$kind" "$@"; fi
}

: > "$WORK/import.times"
# in_order RUN: the two kinds in that round's order.
in_order() { if [ $(( $1 % 2 )) -eq 1 ]; then echo plain encrypted; else echo encrypted plain; fi; }
for run in $(seq "$RUNS"); do
  declare -A took=()
  for kind in $(in_order "$run"); do
    fresh_store "$kind"
    t0=$(now_ns)
    anneal_in "$kind" data import bench "$WORK/data.csv" > /dev/null
    t1=$(now_ns)
    took[$kind]=$(( t1 - t0 ))
  done
  echo "${took[plain]} ${took[encrypted]}" >> "$WORK/import.times"
done
plain_bytes=$(du -sb --apparent-size "$WORK/plain/objects" | cut -f1)
enc_bytes=$(du -sb --apparent-size "$WORK/encrypted/objects" | cut -f1)

: > "$WORK/train.times"
for kind in plain encrypted; do
  fresh_store "$kind"
  anneal_in "$kind" data import fmnist "$FMNIST/train-images-idx3-ubyte.gz" \
    --labels "$FMNIST/train-labels-idx1-ubyte.gz" --test "$FMNIST/t10k-images-idx3-ubyte.gz" \
    --test-labels "$FMNIST/t10k-labels-idx1-ubyte.gz" > /dev/null
done
for run in $(seq "$RUNS"); do
  declare -A sps=() took=()
  for kind in $(in_order "$run"); do
    t0=$(now_ns)
    # Its progress notes go to a file, shown only if it fails.
    if ! anneal_in "$kind" --json train "$ROOT/docs/examples/fmnist-mlp.ini" --set threads="$THREADS" \
        --set epochs="$EPOCHS" --set validation=0 > "$WORK/train.json" 2> "$WORK/train.err"; then
      cat "$WORK/train.err" >&2
      exit 1
    fi
    t1=$(now_ns)
    sps[$kind]=$("$PYTHON" -c "import json, sys; print(json.load(open(sys.argv[1]))['samples_per_s'])" "$WORK/train.json")
    took[$kind]=$(( t1 - t0 ))
  done
  echo "${sps[plain]} ${took[plain]} ${sps[encrypted]} ${took[encrypted]}" >> "$WORK/train.times"
done

"$PYTHON" - "$WORK/import.times" "$WORK/train.times" "$size" "$plain_bytes" "$enc_bytes" "$EPOCHS" "$THREADS" <<'PY'
import statistics as st, sys
imp = [list(map(float, l.split())) for l in open(sys.argv[1])]
tr = [list(map(float, l.split())) for l in open(sys.argv[2])]
size, plain_bytes, enc_bytes = float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
epochs, threads = int(sys.argv[6]), int(sys.argv[7])
med = lambda rows, k: st.median(r[k] for r in rows)
def paired(ratios):
    # The median of the rounds' own ratios, their range, and each round's.
    return "ratio %.2f (range %.2f-%.2f; rounds %s)" % (
        st.median(ratios), min(ratios), max(ratios), " ".join("%.2f" % r for r in ratios))
print("== encryption at rest: plaintext store beside encrypted store (XChaCha20-Poly1305), %d rounds, medians"
      % len(imp))
mb = size / 1e6
print("import %.0f MB CSV    plaintext %7.1f MB/s  encrypted %7.1f MB/s  %s"
      % (mb, mb / (med(imp, 0) / 1e9), mb / (med(imp, 1) / 1e9), paired([r[0] / r[1] for r in imp])))
print("stored bytes          plaintext %7.1f MB    encrypted %7.1f MB    (+%.3f%%)"
      % (plain_bytes / 1e6, enc_bytes / 1e6, 100 * (enc_bytes / plain_bytes - 1)))
print("train fmnist-mlp %d ep %d thr samples/s plaintext %7.0f  encrypted %7.0f  %s"
      % (epochs, threads, med(tr, 0), med(tr, 2), paired([r[2] / r[0] for r in tr])))
print("train command wall    plaintext %7.2f s     encrypted %7.2f s     %s"
      % (med(tr, 1) / 1e9, med(tr, 3) / 1e9, paired([r[1] / r[3] for r in tr])))
PY
