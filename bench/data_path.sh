#!/bin/bash
# Data-path benchmark (issue 15): the whole process, from a cold start of
# the command, training 1 epoch of docs/examples/fmnist-mlp.ini on
# Fashion-MNIST (validation 0, no periodic checkpoint) beside the PyTorch
# script doing the same whole job (read the gzip files, standardize, 1 epoch
# of the same MLP, batch 128, Adam, score the test split). Each side runs at
# 1 and 2 threads and is quoted at its faster one in each round: Debian's
# PyTorch at 2 threads also starts OpenBLAS's own pool and oversubscribes
# the 2 cores (about 2x slower than at 1 thread here), which is no fair
# peer.
# Prints, as medians of $ROUNDS rounds (the sides alternate within a round):
#  - wall seconds and peak RSS of each whole process (/usr/bin/time), their
#    ratios, and whether the issue's goals are met (anneal's wall at most 1/3
#    of PyTorch's, its peak RSS at most 1/2);
#  - the time to the first training step from the process's start: anneal's
#    first_step_s from its --json, PyTorch's measured the same way in the
#    script; and anneal's load_s (dataset load until training can start).
set -euo pipefail
: "${ANNEAL:?}"
HERE=$(dirname "$(realpath "$0")")
ROOT=$(dirname "$HERE")
ROUNDS=${ROUNDS:-3}
. "$HERE/lib.sh"
import_fmnist

# anneal_run THREADS -> "wall_s peak_rss_kib first_step_s load_s threads"
anneal_run() {
  /usr/bin/time -f "%e %M" -o "$WORK/time" "$ANNEAL" --json train "$ROOT/docs/examples/fmnist-mlp.ini" \
    --set epochs=1 --set validation=0 --set checkpoint_every=0 --set threads="$1" > "$WORK/anneal.json" \
    2> "$WORK/anneal.err" || { cat "$WORK/anneal.err" >&2; exit 1; }
  "$PYTHON" -c "
import json, sys
j = json.load(open(sys.argv[1]))
wall, rss = open(sys.argv[2]).read().split()
print(wall, rss, j['first_step_s'], j['load_s'], $1)" "$WORK/anneal.json" "$WORK/time"
}

# torch_run THREADS -> "wall_s peak_rss_kib first_step_s threads"
torch_run() {
  /usr/bin/time -f "%e %M" -o "$WORK/time" "$PYTHON" "$HERE/torch_train.py" mlp "$1" 1 > "$WORK/torch.json"
  "$PYTHON" -c "
import json, sys
j = json.load(open(sys.argv[1]))
wall, rss = open(sys.argv[2]).read().split()
print(wall, rss, j['first_step_s'], $1)" "$WORK/torch.json" "$WORK/time"
}

# fastest "LINE" "LINE": the line with the smaller wall time.
fastest() { printf '%s\n' "$@" | sort -g | head -n 1; }

for round in $(seq "$ROUNDS"); do
  echo "$(fastest "$(anneal_run 1)" "$(anneal_run 2)") $(fastest "$(torch_run 1)" "$(torch_run 2)")"
done > "$WORK/rounds"

"$PYTHON" - "$WORK/rounds" <<'PY'
import statistics as st, sys
rounds = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda k: st.median(r[k] for r in rounds)
wall = [r[0] / r[5] for r in rounds]
rss = [r[1] / r[6] for r in rounds]
threads = lambda k: "/".join(sorted({"%d" % r[k] for r in rounds}))
print("== data path: whole process, 1 epoch of fmnist-mlp from a cold start, each side at its faster of 1 and 2 "
      "threads (medians of %d rounds)" % len(rounds))
print("%-14s %9s %10s %14s %9s %8s" % ("", "wall", "peak RSS", "first step", "load", "threads"))
print("%-14s %8.2fs %6.0f MiB %13.2fs %8.2fs %8s" % ("anneal", med(0), med(1) / 1024, med(2), med(3), threads(4)))
print("%-14s %8.2fs %6.0f MiB %13.2fs %9s %8s" % ("pytorch 1.13", med(5), med(6) / 1024, med(7), "-", threads(8)))
print("ratio anneal/pytorch: wall %.2f (rounds %s), peak RSS %.2f (rounds %s)"
      % (st.median(wall), " ".join("%.2f" % x for x in wall), st.median(rss), " ".join("%.2f" % x for x in rss)))
met = lambda ok: "met" if ok else "not met"
print("goal wall <= 1/3 of pytorch's: %s; goal peak RSS <= 1/2 of pytorch's: %s"
      % (met(st.median(wall) <= 1 / 3), met(st.median(rss) <= 1 / 2)))
print("first step: seconds from the process's start to the end of its first training step; "
      "load: anneal's dataset load until training can start")
PY
