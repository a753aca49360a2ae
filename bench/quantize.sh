#!/bin/bash
# Quantization and pruning benchmark (quantize issue), on the Fashion-MNIST
# MLP and CNN of docs/examples, in one invocation:
#   INT8 PTQ: batch-inference samples/s against fp32 (goal >= 3x) and test
#     accuracy change (goal >= -0.5 points); PyTorch's quantize_dynamic on the
#     MLP as the peer, its own ratio printed beside.
#   90% unstructured sparsity (gradual, fine-tuned) of the MLP: accuracy
#     change (goal >= -1 point), speed and size.
#   50% structured channel pruning of the CNN (fine-tuned): speed against
#     fp32 (goal >= 1.8x) and accuracy change (goal >= -1 point).
# Throughput: `anneal bench` (median of 7 repeats), batch $BATCH, $THREADS thread(s).
set -euo pipefail
: "${ANNEAL:?}"
HERE=$(dirname "$(realpath "$0")")
ROOT=$(dirname "$HERE")
MLP_EPOCHS=${MLP_EPOCHS:-10}
CNN_EPOCHS=${CNN_EPOCHS:-3}
FINETUNE=${FINETUNE:-3}
THREADS=${THREADS:-1}
BATCH=${BATCH:-256}
FMNIST=/usr/share/datasets/fashion-mnist
PYTHON=/usr/bin/python3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/anneal-bench-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export ANNEAL_HOME="$WORK/store"
A() { "$ANNEAL" "$@"; }
jget() { "$PYTHON" -c "import json,sys; j=json.load(sys.stdin); print($1)"; }

A init > /dev/null
A data import fmnist "$FMNIST/train-images-idx3-ubyte.gz" --labels "$FMNIST/train-labels-idx1-ubyte.gz" \
  --test "$FMNIST/t10k-images-idx3-ubyte.gz" --test-labels "$FMNIST/t10k-labels-idx1-ubyte.gz" > /dev/null
A train "$ROOT/docs/examples/fmnist-mlp.ini" --set epochs="$MLP_EPOCHS" --set checkpoint_every=0 > /dev/null
A train "$ROOT/docs/examples/fmnist-cnn.ini" --set epochs="$CNN_EPOCHS" --set checkpoint_every=0 > /dev/null
A quantize fmnist-mlp@v1 --int8 --calib fmnist --calib-samples 1000 > /dev/null           # fmnist-mlp@v2
A prune fmnist-mlp@v1 --sparsity 0.9 --schedule gradual --finetune-epochs "$FINETUNE" > /dev/null  # @v3
A quantize fmnist-cnn@v1 --int8 --calib fmnist --calib-samples 1000 > /dev/null           # fmnist-cnn@v2
A prune fmnist-cnn@v1 --structured --sparsity 0.5 --finetune-epochs "$FINETUNE" > /dev/null  # @v3

# row MODEL -> "accuracy samples_per_s size_on_disk"
row() {
  local acc sps size
  acc=$(A --json eval "$1" fmnist | jget 'j["metrics"]["accuracy"]')
  sps=$(A --json bench "$1" --batch "$BATCH" --threads "$THREADS" --repeats 7 --seconds 3 | jget 'j["samples_per_s"]')
  size=$(A --json model show "$1" | jget 'j["lineage"].get("size_on_disk", 0)')
  echo "$acc $sps $size"
}

report() {  # NAME GOAL_SPEEDUP GOAL_DROP BASE_ROW ROW
  awk -v n="$1" -v gs="$2" -v gd="$3" -v b="$4" -v r="$5" 'BEGIN {
    split(b, B, " "); split(r, R, " ")
    s = R[2] / B[2]; d = 100 * (R[1] - B[1])
    printf "%-34s %8.2f%% %+7.2f pt %10.0f %6.2fx %9s   goal: %s\n", n, 100 * R[1], d, R[2], s,
      (R[3] > 0 ? sprintf("%.0f KiB", R[3] / 1024) : "-"),
      ((gs == 0 || s >= gs) && d >= -gd) ? "met" : "NOT met"
  }'
}

mlp=$(row fmnist-mlp@v1); mlp8=$(row fmnist-mlp@v2); mlps=$(row fmnist-mlp@v3)
cnn=$(row fmnist-cnn@v1); cnn8=$(row fmnist-cnn@v2); cnns=$(row fmnist-cnn@v3)
torch=$("$PYTHON" "$HERE/torch_quantize.py" "$THREADS" "$MLP_EPOCHS" "$BATCH")

echo "== quantize/prune: Fashion-MNIST test split, batch $BATCH, $THREADS thread(s), median of 7 repeats"
printf "%-34s %9s %10s %10s %7s %9s\n" "model" "test acc" "vs fp32" "samples/s" "speed" "on disk"
for pair in "MLP fp32 (parent)|0|100|$mlp|$mlp" "MLP int8 PTQ (minmax)|3|0.5|$mlp|$mlp8" \
            "MLP 90% unstructured, gradual|0|1|$mlp|$mlps" "CNN fp32 (parent)|0|100|$cnn|$cnn" \
            "CNN int8 PTQ (minmax)|3|0.5|$cnn|$cnn8" "CNN 50% structured channels|1.8|1|$cnn|$cnns"; do
  IFS='|' read -r name gs gd b r <<< "$pair"
  report "$name" "$gs" "$gd" "$b" "$r"
done
printf '%s' "$torch" | "$PYTHON" -c "
import json, sys
t = json.load(sys.stdin)
a = '$mlp $mlp8'.split()
print('pytorch 1.13 MLP quantize_dynamic: fp32 %.0f, int8 %.0f samples/s (%.2fx), accuracy %.2f%% -> %.2f%%'
      % (t['fp32_samples_per_s'], t['int8_samples_per_s'], t['int8_samples_per_s'] / t['fp32_samples_per_s'],
         100 * t['fp32_accuracy'], 100 * t['int8_accuracy']))
print('ratio anneal/pytorch: fp32 %.2fx, int8 %.2fx' % (float(a[1]) / t['fp32_samples_per_s'], float(a[4]) / t['int8_samples_per_s']))"
