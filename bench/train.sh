#!/bin/bash
# Training benchmark (training issue): anneal beside PyTorch 1.13 on
# Fashion-MNIST, batch 128, Adam, the MLP 784-256-128-10 and the CNN of
# docs/examples. Each side runs at 1 and 2 threads and is quoted at its best.
# Prints samples/s and the ratio, test accuracy after the same epochs, GFLOP/s
# against this machine's sgemm peak measured in the same run, and peak RSS.
set -euo pipefail
: "${ANNEAL:?}" "${BUILD:?}"
HERE=$(dirname "$(realpath "$0")")
ROOT=$(dirname "$HERE")
MLP_EPOCHS=${MLP_EPOCHS:-3}
CNN_EPOCHS=${CNN_EPOCHS:-1}
FMNIST=/usr/share/datasets/fashion-mnist
PYTHON=/usr/bin/python3  # Debian's, where python3-torch lives
WORK=$(mktemp -d "${TMPDIR:-/tmp}/anneal-bench-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export ANNEAL_HOME="$WORK/store"

"$ANNEAL" init > /dev/null
"$ANNEAL" data import fmnist "$FMNIST/train-images-idx3-ubyte.gz" --labels "$FMNIST/train-labels-idx1-ubyte.gz" \
  --test "$FMNIST/t10k-images-idx3-ubyte.gz" --test-labels "$FMNIST/t10k-labels-idx1-ubyte.gz" > /dev/null

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

torch_run() {
  "$PYTHON" "$HERE/torch_train.py" "$1" "$2" "$3" | "$PYTHON" -c "
import json, sys
j = json.load(sys.stdin)
print(j['samples_per_s'], j['test_accuracy'], j['peak_rss_mib'])"
}

# best_of "CMD1" "CMD2": the line with the highest samples/s.
best_of() { printf '%s\n' "$@" | sort -g -r | head -n 1; }

report() {
  local model=$1 epochs=$2 flops=$3 a=$4 b=$5 t=$6
  awk -v m="$model" -v e="$epochs" -v f="$flops" -v a="$a" -v b="$b" -v t="$t" -v p="$peak2" 'BEGIN {
    split(a, A, " "); split(b, B, " "); split(t, T, " ")
    printf "== train %s, %d epoch(s), batch 128, Adam (best of 1 and 2 threads)\n", m, e
    printf "%-16s %10s %9s %9s %9s\n", "", "samples/s", "test acc", "GFLOP/s", "peak RSS"
    printf "%-16s %10.0f %8.2f%% %9.1f %6.0f MiB\n", "anneal fp32", A[1], 100 * A[2], A[1] * f / 1e9, A[3]
    printf "%-16s %10.0f %8.2f%% %9.1f %6.0f MiB\n", "anneal bf16", B[1], 100 * B[2], B[1] * f / 1e9, B[3]
    printf "%-16s %10.0f %8.2f%% %9.1f %6.0f MiB\n", "pytorch 1.13", T[1], 100 * T[2], T[1] * f / 1e9, T[3]
    printf "ratio anneal/pytorch: fp32 %.2fx, bf16 %.2fx; accuracy difference (fp32) %+.2f points\n", A[1] / T[1], B[1] / T[1], 100 * (A[2] - T[2])
    printf "fp32 GFLOP/s are %.0f%% of the best sgemm peak (%.0f GFLOP/s on 2 threads)\n", 100 * A[1] * f / 1e9 / p, p
  }'
}

echo "== sgemm peak (2048^3, GFLOP/s): OpenBLAS ${blas1} on 1 thread, ${blas2} on 2; oneDNN ${dnnl1} on 1, ${dnnl2} on 2"
for model in mlp cnn; do
  if [ "$model" = mlp ]; then epochs=$MLP_EPOCHS; flops=$mlp_flops; else epochs=$CNN_EPOCHS; flops=$cnn_flops; fi
  a=$(best_of "$(anneal_run "$model" 1 fp32 "$epochs")" "$(anneal_run "$model" 2 fp32 "$epochs")")
  b=$(best_of "$(anneal_run "$model" 1 bf16 "$epochs")" "$(anneal_run "$model" 2 bf16 "$epochs")")
  t=$(best_of "$(torch_run "$model" 1 "$epochs")" "$(torch_run "$model" 2 "$epochs")")
  report "$model" "$epochs" "$flops" "$a" "$b" "$t"
done
