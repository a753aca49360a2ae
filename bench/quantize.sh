#!/bin/bash
# Quantization and pruning benchmark (quantize issue), on the Fashion-MNIST
# MLP and CNN of docs/examples, in one invocation:
#   INT8 PTQ: batch-inference samples/s against fp32 (goal >= 3x with VNNI,
#     >= 2x without) and test
#     accuracy change (goal >= -0.5 points); PyTorch's quantize_dynamic on the
#     MLP as the peer, its own ratio printed beside.
#   90% unstructured sparsity (gradual, fine-tuned) of the MLP: accuracy
#     change (goal >= -1 point), speed and size.
#   50% structured channel pruning of the CNN (fine-tuned): speed against
#     fp32 (goal >= 1.8x) and accuracy change (goal >= -1 point).
# Throughput: `anneal bench`, batch $BATCH, $THREADS thread(s), $ROUNDS interleaved rounds.
set -euo pipefail
: "${ANNEAL:?}"
HERE=$(dirname "$(realpath "$0")")
ROOT=$(dirname "$HERE")
MLP_EPOCHS=${MLP_EPOCHS:-10}
CNN_EPOCHS=${CNN_EPOCHS:-3}
FINETUNE=${FINETUNE:-3}
THREADS=${THREADS:-1}
BATCH=${BATCH:-256}
ROUNDS=${ROUNDS:-5}
. "$HERE/lib.sh"
A() { "$ANNEAL" "$@"; }
jget() { "$PYTHON" -c "import json,sys; j=json.load(sys.stdin); print($1)"; }

import_fmnist
A train "$ROOT/docs/examples/fmnist-mlp.ini" --set epochs="$MLP_EPOCHS" --set checkpoint_every=0 > /dev/null
A train "$ROOT/docs/examples/fmnist-cnn.ini" --set epochs="$CNN_EPOCHS" --set checkpoint_every=0 > /dev/null
A quantize fmnist-mlp@v1 --int8 --calib fmnist --calib-samples 1000 > /dev/null           # fmnist-mlp@v2
A prune fmnist-mlp@v1 --sparsity 0.9 --schedule gradual --finetune-epochs "$FINETUNE" > /dev/null  # @v3
A quantize fmnist-cnn@v1 --int8 --calib fmnist --calib-samples 1000 > /dev/null           # fmnist-cnn@v2
A prune fmnist-cnn@v1 --structured --sparsity 0.5 --finetune-epochs "$FINETUNE" > /dev/null  # @v3

# Accuracy and size once per model; throughput in $ROUNDS rounds, each
# benching every model in turn, so a drift of the machine's speed hits a
# model and its parent alike: a speed-up is the median over rounds of that
# round's ratio to the parent, and samples/s the median over rounds.
MODELS="fmnist-mlp@v1 fmnist-mlp@v2 fmnist-mlp@v3 fmnist-cnn@v1 fmnist-cnn@v2 fmnist-cnn@v3"
for m in $MODELS; do
  acc=$(A --json eval "$m" fmnist | jget 'j["metrics"]["accuracy"]')
  size=$(A --json model show "$m" | jget 'j["lineage"].get("size_on_disk", 0)')
  echo "$m $acc $size"
done > "$WORK/static"
for round in $(seq "$ROUNDS"); do
  for m in $MODELS; do
    echo "$round $m $(A --json bench "$m" --batch "$BATCH" --threads "$THREADS" --repeats 3 --seconds 1 | jget 'j["samples_per_s"]')"
  done
done > "$WORK/speed"
# Debian's PyTorch runs its fp32 Linear on OpenBLAS, whose own thread pool
# ignores torch.set_num_threads (a "1 thread" run used 1.5 cores); capped
# here so the peer runs on as many threads as anneal does.
torch=$(OPENBLAS_NUM_THREADS="$THREADS" "$PYTHON" "$HERE/torch_quantize.py" "$THREADS" "$MLP_EPOCHS" "$BATCH")

cpu_caps
vnni=no
[ "$CPU_VNNI" = 1 ] && vnni=yes
echo "== quantize/prune: Fashion-MNIST test split, batch $BATCH, $THREADS thread(s), medians of $ROUNDS interleaved rounds" \
  "(oneDNN isa $CPU_ISA, int8 on VNNI: $vnni)"
"$PYTHON" - "$WORK/static" "$WORK/speed" "$WORK/speed_medians" "$CPU_VNNI" <<'PY'
import statistics, sys
static = {l.split()[0]: (float(l.split()[1]), float(l.split()[2])) for l in open(sys.argv[1])}
# INT8's speed goal: 3x fp32 with VNNI; 2x without, where a u8·s8 pair
# costs two instructions (vpmaddubsw, vpmaddwd) for 16 products against an
# FMA's 8, so 2x is the ceiling of the arithmetic itself.
int8_goal = 3 if sys.argv[4] == "1" else 2
speed, medians = {}, open(sys.argv[3], "w")
for l in open(sys.argv[2]):
    r, m, s = l.split()
    speed.setdefault(m, {})[r] = float(s)
rows = [("MLP fp32 (parent)", "fmnist-mlp@v1", "fmnist-mlp@v1", 0, 100),
        ("MLP int8 PTQ (minmax)", "fmnist-mlp@v2", "fmnist-mlp@v1", int8_goal, 0.5),
        ("MLP 90% unstructured, gradual", "fmnist-mlp@v3", "fmnist-mlp@v1", 0, 1),
        ("CNN fp32 (parent)", "fmnist-cnn@v1", "fmnist-cnn@v1", 0, 100),
        ("CNN int8 PTQ (minmax)", "fmnist-cnn@v2", "fmnist-cnn@v1", int8_goal, 0.5),
        ("CNN 50% structured channels", "fmnist-cnn@v3", "fmnist-cnn@v1", 1.8, 1)]
print("%-34s %9s %10s %10s %7s %13s %9s" % ("model", "test acc", "vs fp32", "samples/s", "speed", "(min-max)", "on disk"))
for name, m, parent, goal_speed, goal_drop in rows:
    ratios = [speed[m][r] / speed[parent][r] for r in speed[m]]
    s, d = statistics.median(ratios), 100 * (static[m][0] - static[parent][0])
    met = (goal_speed == 0 or s >= goal_speed) and d >= -goal_drop
    size = "%.0f KiB" % (static[m][1] / 1024) if static[m][1] > 0 else "-"
    print("%-34s %8.2f%% %+7.2f pt %10.0f %6.2fx %13s %9s   goal: %s" % (
        name, 100 * static[m][0], d, statistics.median(speed[m].values()), s,
        "(%.2f-%.2f)" % (min(ratios), max(ratios)), size, "met" if met else "NOT met"))
    print("%s %.0f" % (m, statistics.median(speed[m].values())), file=medians)
PY
printf '%s' "$torch" | "$PYTHON" -c "
import json, sys
t = json.load(sys.stdin)
a = dict(l.split() for l in open('$WORK/speed_medians'))
print('pytorch 1.13 MLP quantize_dynamic: fp32 %.0f, int8 %.0f samples/s (%.2fx), accuracy %.2f%% -> %.2f%%'
      % (t['fp32_samples_per_s'], t['int8_samples_per_s'], t['int8_samples_per_s'] / t['fp32_samples_per_s'],
         100 * t['fp32_accuracy'], 100 * t['int8_accuracy']))
print('ratio anneal/pytorch: fp32 %.2fx (goal >= 1.5), int8 %.2fx' % (float(a['fmnist-mlp@v1']) / t['fp32_samples_per_s'], float(a['fmnist-mlp@v2']) / t['int8_samples_per_s']))"
