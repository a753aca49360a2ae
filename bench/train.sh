#!/bin/bash
# Training benchmark (training issue): anneal beside PyTorch 1.13 on
# Fashion-MNIST, batch 128, Adam, the MLP 784-256-128-10 and the CNN of
# docs/examples. Each side runs at 1 and 2 threads and is quoted at its best,
# in $ROUNDS rounds.
# Prints samples/s and the ratio, test accuracy after the same epochs, GFLOP/s
# against this machine's sgemm peak measured in the same run, and peak RSS.
# bf16 runs where the CPU trains it (AVX512_BF16 or AMX, as oneDNN sees it);
# elsewhere one line says why it is skipped.
set -euo pipefail
shopt -s inherit_errexit
: "${ANNEAL:?}" "${BUILD:?}"
HERE=$(dirname "$(realpath "$0")")
ROOT=$(dirname "$HERE")
MLP_EPOCHS=${MLP_EPOCHS:-3}
CNN_EPOCHS=${CNN_EPOCHS:-1}
ROUNDS=${ROUNDS:-3}
. "$HERE/lib.sh"
import_fmnist

cpu_caps
BF16=$CPU_BF16
# The sgemm peak: measured by bench/run at its start (SGEMM_PEAK: OpenBLAS and
# oneDNN on 1 thread, then on 2), else here.
if [ -n "${SGEMM_PEAK:-}" ]; then
  read -r blas1 dnnl1 blas2 dnnl2 <<< "$SGEMM_PEAK"
else
  sgemm1=$("$BUILD/bench/anneal-sgemm-peak" 1)
  sgemm2=$("$BUILD/bench/anneal-sgemm-peak" 2)
  read -r blas1 dnnl1 core <<< "$sgemm1"
  read -r blas2 dnnl2 core <<< "$sgemm2"
  echo "== sgemm peak (2048^3, GFLOP/s): OpenBLAS ($core kernels) ${blas1} on 1 thread, ${blas2} on 2; oneDNN ($CPU_ISA) ${dnnl1} on 1, ${dnnl2} on 2"
fi
peak2=$(awk -v a="$blas2" -v b="$dnnl2" 'BEGIN { print (a > b) ? a : b }')

# Training FLOPs per sample, 2 per multiply-add: forward, backward-weights,
# and backward-data for every layer but the first (the input needs no
# gradient, and the engine skips it).
mlp_macs=$(( 784 * 256 + 256 * 128 + 128 * 10 ))
mlp_flops=$(( 2 * (3 * mlp_macs - 784 * 256) ))
cnn_macs=$(( 28 * 28 * 32 * 9 + 14 * 14 * 64 * 9 * 32 + 3136 * 128 + 128 * 10 ))
cnn_flops=$(( 2 * (3 * cnn_macs - 28 * 28 * 32 * 9) ))

# anneal_run MODEL THREADS PRECISION EPOCHS -> "samples_per_s test_accuracy peak_rss_mib"
# A failed run stops the bench with anneal's error.
anneal_run() {
  /usr/bin/time -f "%M" -o "$WORK/rss" "$ANNEAL" --json train "$ROOT/docs/examples/fmnist-$1.ini" \
    --set threads="$2" --set precision="$3" --set epochs="$4" --set validation=0 --set checkpoint_every=0 \
    > "$WORK/train.json" 2> "$WORK/train.err" || { cat "$WORK/train.err" >&2; exit 1; }
  "$PYTHON" -c "
import json, sys
j = json.load(open(sys.argv[1]))
print(j['samples_per_s'], j['metrics']['test_accuracy'], int(open(sys.argv[2]).read()) / 1024)" \
    "$WORK/train.json" "$WORK/rss"
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

# best_of "LINE1" "LINE2": the line with the highest samples/s.
best_of() { printf '%s\n' "$@" | sort -g -r | head -n 1; }
# anneal_best MODEL PRECISION EPOCHS, torch_best MODEL EPOCHS: the faster of
# 1 and 2 threads. (Each run is assigned on its own, so that a failed one
# stops the bench: inherit_errexit, above.)
anneal_best() {
  local one two
  one=$(anneal_run "$1" 1 "$2" "$3")
  two=$(anneal_run "$1" 2 "$2" "$3")
  best_of "$one" "$two"
}
torch_best() {
  local one two
  one=$(torch_run "$1" 1 "$2")
  two=$(torch_run "$1" 2 "$2")
  best_of "$one" "$two"
}

# report MODEL EPOCHS FLOPS ROUNDS_FILE: each line of ROUNDS_FILE one round,
# "anneal-fp32 anneal-bf16 pytorch" rows of samples/s, accuracy and RSS
# ("anneal-fp32 pytorch" where bf16 is not run here).
# Samples/s and the ratio are medians over rounds (the ratio taken within
# each round, so a drift of the machine's speed hits both sides alike).
report() {
  "$PYTHON" - "$@" "$peak2" "$BF16" "$CPU_ISA" <<'PY'
import statistics as st, sys
model, epochs, flops, path, peak = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], float(sys.argv[5])
bf16_here, isa = sys.argv[6] == "1", sys.argv[7]
rounds = [list(map(float, l.split())) for l in open(path)]
torch = 6 if bf16_here else 3  # the peer's column
col = lambda k: [r[k] for r in rounds]
med = lambda k: st.median(col(k))
print("== train %s, %d epoch(s), batch 128, Adam (each side at its best of 1 and 2 threads; medians of %d rounds)"
      % (model, epochs, len(rounds)))
print("%-16s %10s %9s %9s %9s" % ("", "samples/s", "test acc", "GFLOP/s", "peak RSS"))
rows = (("anneal fp32", 0), ("anneal bf16", 3), ("pytorch 1.13", 6)) if bf16_here else \
    (("anneal fp32", 0), ("pytorch 1.13", 3))
for name, k in rows:
    print("%-16s %10.0f %8.2f%% %9.1f %6.0f MiB" % (name, med(k), 100 * med(k + 1), med(k) * flops / 1e9, med(k + 2)))
if not bf16_here:
    print("%-16s skipped, the CPU lacks avx512_core_bf16 (oneDNN isa %s)" % ("anneal bf16", isa))
ratios = lambda k: [r[k] / r[torch] for r in rounds]
line = lambda name, x: "%s %.2fx (rounds %s)" % (name, st.median(x), " ".join("%.2f" % v for v in x))
print("ratio anneal/pytorch (goal >= 2.5x): %s; accuracy difference (fp32) %+.2f points"
      % ("; ".join([line("fp32", ratios(0))] + ([line("bf16", ratios(3))] if bf16_here else [])),
         100 * (med(1) - med(torch + 1))))
print("fp32 GFLOP/s are %.0f%% of the best sgemm peak (%.0f GFLOP/s on 2 threads; goal >= 60%%)" % (100 * med(0) * flops / 1e9 / peak, peak))
if model == "cnn":
    print("(GFLOP/s count a direct convolution's multiply-adds; anneal's 3x3 convolutions run Winograd's algorithm "
          "where oneDNN has it for the CPU, which does fewer, so the rate can pass the sgemm peak)")
PY
}
for model in mlp cnn; do
  if [ "$model" = mlp ]; then epochs=$MLP_EPOCHS; flops=$mlp_flops; else epochs=$CNN_EPOCHS; flops=$cnn_flops; fi
  for round in $(seq "$ROUNDS"); do
    a=$(anneal_best "$model" fp32 "$epochs")
    b=""
    if [ "$BF16" = 1 ]; then b=$(anneal_best "$model" bf16 "$epochs"); fi
    t=$(torch_best "$model" "$epochs")
    echo "$a $b $t"
  done > "$WORK/$model.rounds"
  report "$model" "$epochs" "$flops" "$WORK/$model.rounds"
done
