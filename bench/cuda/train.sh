#!/bin/bash
# GPU training benchmark (CUDA issue), where the CUDA backend is usable:
# Fashion-MNIST, Adam, the MLP and CNN of docs/examples, fp32.
#   * anneal with device = cuda at batch 128 and 512, beside PyTorch on the
#     same GPU (fp32, TF32 off) and the same data, epochs and batch;
#   * the speedup over anneal's CPU backend at 2 threads on the same model
#     and batch (goal for the CNN: 20x): samples/s is a rate, so the CPU's
#     is measured over one epoch of a 7,988-sample set (the 10,000 test
#     images less their own test split; all 60,000 would take it minutes)
#     and the GPU's is the full-data figure of the table, whose epoch is
#     long enough that its start-up does not weigh on it;
#   * achieved TFLOP/s against the cuBLAS fp32 GEMM peak measured in the
#     same run on the same GPU (bench/cuda/cublas_peak.cc);
#   * the fraction of a training step spent outside kernels (launch and sync
#     overhead, host work between kernels) at batch 128 and 512; goal: under
#     20% at batch 512. CUPTI records each kernel's start and end on the GPU
#     inside an unmodified `anneal train`: the driver loads
#     libanneal-kernel-time.so (bench/cuda/kernel_time.cc) where
#     CUDA_INJECTION64_PATH names it, and at exit it writes the union of the
#     kernels' intervals (concurrent kernels count once). Every configuration
#     trains twice, for 1 and for 2 epochs, otherwise identically (same seed,
#     so the same kernels): the difference of the two kernel busy times is
#     the second epoch's alone, since start-up, data loading, the first
#     epoch's one-off work (library set-up, module loading) and the final
#     test evaluation appear in both runs and cancel. Divided by the second
#     epoch's wall time as anneal records it (`runs show`, epochs[1].seconds;
#     the epoch ends on a read-back, so its kernels lie inside it), it is the
#     share of the average step the GPU spent in kernels; the rest is outside
#     kernels. "outside GPU work" counts memcpys and memsets as busy too.
#     Tracing adds host time per launch, so if anything the fraction is
#     overstated. When CUPTI cannot give complete records the row says why
#     and shows no number.
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

KERNEL_TIME_LIB="$BUILD/bench/libanneal-kernel-time.so"
# traced_run MODEL BATCH EPOCHS: anneal on the GPU with CUPTI injected; the
# run's JSON, stderr and the library's line go to $WORK/kt-MODEL-BATCH-EPOCHS.*
traced_run() {
  local base="$WORK/kt-$1-$2-$3"
  rm -f "$base.out"  # what is there afterwards is this run's
  CUDA_INJECTION64_PATH="$KERNEL_TIME_LIB" ANNEAL_KERNEL_TIME_OUT="$base.out" \
    "$ANNEAL" --json train "$ROOT/docs/examples/fmnist-$1.ini" --device cuda --set batch="$2" --set dataset=fmnist \
    --set epochs="$3" --set validation=0 --set checkpoint_every=0 > "$base.json" 2> "$base.err"
}
# outside_kernels MODEL BATCH -> one row of the outside-kernels table, or why
# there is none.
outside_kernels() {
  local why="" missing base e
  if [ ! -e "$KERNEL_TIME_LIB" ]; then
    why="$KERNEL_TIME_LIB is not built"
  else
    missing=$(ldd "$KERNEL_TIME_LIB" | awk '/not found/ {print $1}')
    [ -n "$missing" ] && why="libanneal-kernel-time.so needs $missing, not found"
  fi
  for e in 1 2; do
    [ -n "$why" ] && break
    base="$WORK/kt-$1-$2-$e"
    if ! traced_run "$1" "$2" "$e"; then
      why="anneal train with CUPTI failed: $(tail -n1 "$base.err")"
    elif [ ! -s "$base.out" ]; then
      why=$(grep -m1 '^libanneal-kernel-time:' "$base.err" ||
            echo "libanneal-kernel-time.so wrote nothing: the driver did not call its InitializeInjection")
    fi
  done
  if [ -n "$why" ]; then
    printf '%-5s %5d  unavailable (%s)\n' "$1" "$2" "$why"
    return
  fi
  base="$WORK/kt-$1-$2"
  "$ANNEAL" --json runs show "$("$PYTHON" -c "import json; print(json.load(open('$base-2.json'))['run'])")" \
    > "$base-show.json"
  "$PYTHON" -c "
import json
def totals(path):
    return {k: int(v) for k, v in (kv.split('=') for kv in open(path).read().split())}
one, two = totals('$base-1.out'), totals('$base-2.out')
first, second = json.load(open('$base-show.json'))['epochs']
seconds = second['seconds']
steps = second['steps'] - first['steps']
kernels = (two['kernel_busy_ns'] - one['kernel_busy_ns']) / 1e9
gpu = (two['gpu_busy_ns'] - one['gpu_busy_ns']) / 1e9
print('%-5s %5d %12.1f %10.3f %10.3f %16.1f%% %16.1f%%' % ('$1', $2, (two['kernels'] - one['kernels']) / steps,
      seconds, kernels, 100 * (1 - kernels / seconds), 100 * (1 - gpu / seconds)))"
}
outside_rows=""
cpu_rows=""

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
    outside_rows+=$(outside_kernels "$model" "$batch")$'\n'
    read -r c_sps _ < <(anneal_run "$model" cpu "$batch" fmnist10k 1 --set threads=2)
    cpu_rows+=$("$PYTHON" -c "print('%-5s %5d %12.0f %12.0f %8.1fx' % ('$model', $batch, $a_sps, $c_sps, $a_sps / $c_sps))")$'\n'
  done
done
# precision = bf16 and fp16 on the GPU (tensor-core products, fp32
# accumulation and master weights; fp16 with its dynamic loss scale) at
# batch 512, beside fp32 above.
for precision in bf16 fp16; do
  for model in mlp cnn; do
    flops=$mlp_flops
    [ "$model" = cnn ] && flops=$cnn_flops
    # A GPU without it refuses the precision (exit 2, one line): that line
    # says why the figure is missing.
    if out=$(anneal_run "$model" cuda 512 fmnist "$EPOCHS" --set precision=$precision 2> "$WORK/refused"); then
      read -r b_sps b_acc <<< "$out"
      "$PYTHON" -c "print('%-5s %5d %s: %.0f samples/s, %.3f TFLOP/s (test accuracy %.4f)' % ('$model', 512, '$precision', $b_sps, $b_sps * $flops / 1e12, $b_acc))"
    else
      echo "$model 512 $precision: skipped, $(grep -m1 '^anneal: ' "$WORK/refused" | sed 's/^anneal: //')"
    fi
  done
done
# Where the CNN's kernel time goes (batch 512, the whole 2-epoch traced run).
hot="$WORK/kt-cnn-512-2.out.kernels"
if [ -s "$hot" ]; then
  echo "== the CNN's 8 costliest kernels, batch 512, 2 epochs (seconds, launches, name)"
  head -n 8 "$hot" | "$PYTHON" -c "
import sys
for line in sys.stdin:
    ns, n, name = line.split(' ', 2)
    print('%8.3f %7d  %s' % (int(ns) / 1e9, int(n), name.strip()[:110]))"
fi
echo "== the GPU against anneal's CPU backend on 2 threads (same model and batch; goal for the CNN: 20x)"
printf '%-5s %5s %12s %12s %9s\n' model batch "cuda samp/s" "cpu samp/s" speedup
printf '%s' "$cpu_rows"

echo "== time outside kernels in the second epoch (CUPTI kernel intervals; goal: under 20% at batch 512)"
printf '%-5s %5s %12s %10s %10s %17s %17s\n' model batch "kernels/step" "epoch 2 s" "kernels s" "outside kernels" \
  "outside GPU work"
printf '%s' "$outside_rows"
