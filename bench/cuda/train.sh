#!/bin/bash
# GPU training benchmark (CUDA issue), where the CUDA backend is usable:
# Fashion-MNIST, Adam, the MLP and CNN of docs/examples, fp32.
#   * anneal with device = cuda at batch 128 and 512, beside PyTorch on the
#     same GPU (fp32, TF32 off) and the same data, epochs and batch;
#   * the speedup over anneal's CPU backend at 2 threads on the same model,
#     both measured on a 10,000-sample training set (the CPU would take
#     minutes over all 60,000);
#   * achieved TFLOP/s against the cuBLAS fp32 GEMM peak measured in the
#     same run on the same GPU (bench/cuda/cublas_peak.cc).
# Elsewhere it prints why it is skipped.
set -euo pipefail
: "${ANNEAL:?}" "${BUILD:?}"
HERE=$(dirname "$(realpath "$0")")
ROOT=$(dirname "$(dirname "$HERE")")
EPOCHS=${GPU_EPOCHS:-1}
. "$HERE/../lib.sh"

reason=$("$ANNEAL" --json devices | "$PYTHON" -c "
import json, sys
d = [d for d in json.load(sys.stdin)['devices'] if d['device'] == 'cuda'][0]
print('' if d['usable'] else d['reason'])")
if [ -n "$reason" ]; then
  echo "== train on the GPU: skipped (cuda: $reason)"
  exit 0
fi
import_fmnist
# The CPU comparison's training set: the 10,000 test images as a dataset.
"$ANNEAL" data import fmnist10k "$FMNIST/t10k-images-idx3-ubyte.gz" --labels "$FMNIST/t10k-labels-idx1-ubyte.gz" \
  > /dev/null
read -r peak tf32 gpu < <("$BUILD/bench/anneal-cublas-peak")

mlp_macs=$(( 784 * 256 + 256 * 128 + 128 * 10 ))
mlp_flops=$(( 2 * (3 * mlp_macs - 784 * 256) ))
cnn_macs=$(( 28 * 28 * 32 * 9 + 14 * 14 * 64 * 9 * 32 + 3136 * 128 + 128 * 10 ))
cnn_flops=$(( 2 * (3 * cnn_macs - 28 * 28 * 32 * 9) ))

# anneal_run MODEL DEVICE BATCH DATASET EPOCHS [--set ...] -> "samples_per_s test_accuracy"
anneal_run() {
  "$ANNEAL" --json train "$ROOT/docs/examples/fmnist-$1.ini" --device "$2" --set batch="$3" --set dataset="$4" \
    --set epochs="$5" --set validation=0 --set checkpoint_every=0 "${@:6}" | "$PYTHON" -c "
import json, sys
j = json.load(sys.stdin)
print(j['samples_per_s'], j['metrics'].get('test_accuracy', 0))"
}
torch_run() {  # MODEL BATCH
  "$PYTHON" "$ROOT/bench/torch_train.py" "$1" 1 "$EPOCHS" cuda "$2" | "$PYTHON" -c "
import json, sys
j = json.load(sys.stdin)
print(j['samples_per_s'], j['test_accuracy'])"
}

echo "== cuBLAS 8192^3 on $gpu: fp32 $peak TFLOP/s (TF32 $tf32)"
printf '%-5s %5s %16s %16s %8s %10s %9s\n' model batch "anneal samples/s" "pytorch samples/s" ratio "TFLOP/s" "of peak"
for model in mlp cnn; do
  flops=$mlp_flops
  [ "$model" = cnn ] && flops=$cnn_flops
  for batch in 128 512; do
    read -r a_sps a_acc < <(anneal_run "$model" cuda "$batch" fmnist "$EPOCHS")
    read -r t_sps t_acc < <(torch_run "$model" "$batch")
    "$PYTHON" -c "
a, t, f, peak = $a_sps, $t_sps, $flops, $peak
print('%-5s %5d %16.0f %16.0f %7.2fx %10.3f %8.1f%%   (test accuracy anneal %.4f, pytorch %.4f)'
      % ('$model', $batch, a, t, a / t, a * f / 1e12, 100 * a * f / 1e12 / peak, $a_acc, $t_acc))"
  done
  read -r g_sps _ < <(anneal_run "$model" cuda 128 fmnist10k 1)
  read -r c_sps _ < <(anneal_run "$model" cpu 128 fmnist10k 1 --set threads=2)
  "$PYTHON" -c "print('%s: cuda %.0f samples/s vs the CPU backend on 2 threads %.0f: %.1fx (batch 128, 10,000 samples)'
      % ('$model', $g_sps, $c_sps, $g_sps / $c_sps))"
done
