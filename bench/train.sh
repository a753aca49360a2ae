#!/bin/bash
# Training benchmark (training issue): anneal beside PyTorch 1.13 on
# Fashion-MNIST, batch 128, Adam, the MLP 784-256-128-10 and the CNN of
# docs/examples. Each side runs at 1 and 2 threads and is quoted at its best,
# in $ROUNDS rounds.
# Prints samples/s and the ratio, test accuracy after the same epochs, GFLOP/s
# against this machine's sgemm peak measured in the same run, and peak RSS.
set -euo pipefail
: "${ANNEAL:?}" "${BUILD:?}"
HERE=$(dirname "$(realpath "$0")")
ROOT=$(dirname "$HERE")
MLP_EPOCHS=${MLP_EPOCHS:-3}
CNN_EPOCHS=${CNN_EPOCHS:-1}
ROUNDS=${ROUNDS:-3}
. "$HERE/lib.sh"
import_fmnist

read -r blas1 dnnl1 < <("$BUILD/bench/anneal-sgemm-peak" 1)
read -r blas2 dnnl2 < <("$BUILD/bench/anneal-sgemm-peak" 2)
peak2=$(awk -v a="$blas2" -v b="$dnnl2" 'BEGIN { print (a > b) ? a : b }')

# Training FLOPs per sample, 2 per multiply-add: forward, backward-weights,
# and backward-data for every layer but the first (the input needs no
# gradient, and the engine skips it).
mlp_macs=$(( 784 * 256 + 256 * 128 + 128 * 10 ))
mlp_flops=$(( 2 * (3 * mlp_macs - 784 * 256) ))
cnn_macs=$(( 28 * 28 * 32 * 9 + 14 * 14 * 64 * 9 * 32 + 3136 * 128 + 128 * 10 ))
cnn_flops=$(( 2 * (3 * cnn_macs - 28 * 28 * 32 * 9) ))

# anneal_run MODEL THREADS PRECISION EPOCHS -> "samples_per_s test_accuracy peak_rss_mib"
anneal_run() {
  local out
  out=$(/usr/bin/time -f "%M" -o "$WORK/rss" "$ANNEAL" --json train "$ROOT/docs/examples/fmnist-$1.ini" \
    --set threads="$2" --set precision="$3" --set epochs="$4" --set validation=0 --set checkpoint_every=0)
  printf '%s' "$out" | "$PYTHON" -c "
import json, sys
j = json.load(sys.stdin)
print(j['samples_per_s'], j['metrics']['test_accuracy'], $(cat "$WORK/rss") / 1024)"
}

# PyTorch's "threads" is torch.set_num_threads. Debian's build runs its fp32
# Linear layers on OpenBLAS, whose own thread pool that setting does not cap:
# at 1 thread the MLP used about 1.4 cores. That is PyTorch's default and
# its best here, so the peer is left that way.
torch_run() {
  "$PYTHON" "$HERE/torch_train.py" "$1" "$2" "$3" | "$PYTHON" -c "
import json, sys
j = json.load(sys.stdin)
print(j['samples_per_s'], j['test_accuracy'], j['peak_rss_mib'])"
}

# best_of "CMD1" "CMD2": the line with the highest samples/s.
best_of() { printf '%s\n' "$@" | sort -g -r | head -n 1; }

# report MODEL EPOCHS FLOPS ROUNDS_FILE: each line of ROUNDS_FILE one round,
# "anneal-fp32 anneal-bf16 pytorch" rows of samples/s, accuracy and RSS.
# Samples/s and the ratio are medians over rounds (the ratio taken within
# each round, so a drift of the machine's speed hits both sides alike).
report() {
  "$PYTHON" - "$@" "$peak2" <<'PY'
import statistics as st, sys
model, epochs, flops, path, peak = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], float(sys.argv[5])
rounds = [list(map(float, l.split())) for l in open(path)]
col = lambda k: [r[k] for r in rounds]
med = lambda k: st.median(col(k))
print("== train %s, %d epoch(s), batch 128, Adam (each side at its best of 1 and 2 threads; medians of %d rounds)"
      % (model, epochs, len(rounds)))
print("%-16s %10s %9s %9s %9s" % ("", "samples/s", "test acc", "GFLOP/s", "peak RSS"))
for name, k in (("anneal fp32", 0), ("anneal bf16", 3), ("pytorch 1.13", 6)):
    print("%-16s %10.0f %8.2f%% %9.1f %6.0f MiB" % (name, med(k), 100 * med(k + 1), med(k) * flops / 1e9, med(k + 2)))
fp32 = [r[0] / r[6] for r in rounds]
bf16 = [r[3] / r[6] for r in rounds]
print("ratio anneal/pytorch: fp32 %.2fx (rounds %s), bf16 %.2fx (rounds %s); accuracy difference (fp32) %+.2f points"
      % (st.median(fp32), " ".join("%.2f" % x for x in fp32), st.median(bf16), " ".join("%.2f" % x for x in bf16),
         100 * (med(1) - med(7))))
print("fp32 GFLOP/s are %.0f%% of the best sgemm peak (%.0f GFLOP/s on 2 threads)" % (100 * med(0) * flops / 1e9 / peak, peak))
PY
}
echo "== sgemm peak (2048^3, GFLOP/s): OpenBLAS ${blas1} on 1 thread, ${blas2} on 2; oneDNN ${dnnl1} on 1, ${dnnl2} on 2"
for model in mlp cnn; do
  if [ "$model" = mlp ]; then epochs=$MLP_EPOCHS; flops=$mlp_flops; else epochs=$CNN_EPOCHS; flops=$cnn_flops; fi
  for round in $(seq "$ROUNDS"); do
    a=$(best_of "$(anneal_run "$model" 1 fp32 "$epochs")" "$(anneal_run "$model" 2 fp32 "$epochs")")
    b=$(best_of "$(anneal_run "$model" 1 bf16 "$epochs")" "$(anneal_run "$model" 2 bf16 "$epochs")")
    t=$(best_of "$(torch_run "$model" 1 "$epochs")" "$(torch_run "$model" 2 "$epochs")")
    echo "$a $b $t"
  done > "$WORK/$model.rounds"
  report "$model" "$epochs" "$flops" "$WORK/$model.rounds"
done
