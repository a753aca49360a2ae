#!/bin/bash
# INT8 on CPUs with and without VNNI (docs/TRAINING.md, "INT8 on every CPU").
# One parent quantized natively (127 weight levels where oneDNN has VNNI) and
# once with oneDNN capped at AVX2 (ONEDNN_MAX_CPU_ISA=AVX2: no VNNI, so 64
# levels) gives two int8 models that must agree on the Fashion-MNIST test
# split within the documented tolerance: accuracy within 0.5 points, and
# confusion matrices that differ in at most 2% of the rows. Each model also
# predicts the same whichever of the two ISAs runs it (exact integer sums:
# at most 0.1% of rows may move, through the f32 rescaling's last bits), and
# on a CSV table the two models give the same class for at least 98% of rows.
# Skips (77), naming the capability, where the CPU has no VNNI: there both
# quantizations would be the AVX2 one.
. "$E2E_LIB"

fm=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [ ! -e "$fm/train-images-idx3-ubyte.gz" ]; then
  echo "SKIP: no Fashion-MNIST at $fm (packaging/install-deps package installs dataset-fashion-mnist)"
  exit 77
fi
avx2() { ONEDNN_MAX_CPU_ISA=AVX2 "$@"; }

# accuracy_of MODEL: the test split's accuracy into $ACC, the confusion matrix into $CM.
accuracy_of() {
  expect_rc 0 --json eval "$1" fmnist
  ACC=$(json_get 'j["metrics"]["accuracy"]')
  CM=$(json_get 'json.dumps(j["metrics"]["confusion"])')
}
# within WHAT VALUE LIMIT: passes when VALUE <= LIMIT.
within() {
  python3 -c "import sys; sys.exit(0 if $2 <= $3 else 1)" && pass || fail "$1: $2 > $3"
}

expect_rc 0 init
expect_rc 0 data import fmnist "$fm/train-images-idx3-ubyte.gz" --labels "$fm/train-labels-idx1-ubyte.gz" \
  --test "$fm/t10k-images-idx3-ubyte.gz" --test-labels "$fm/t10k-labels-idx1-ubyte.gz"
cat >"$WORK/mlp.ini" <<'INI'
name    = fm-mlp
dataset = fmnist
layers  = dense(128) relu dense(64) relu dense(10)
lr      = 0.001
batch   = 128
epochs  = 1
seed    = 1
INI
cat >"$WORK/cnn.ini" <<'INI'
name    = fm-cnn
dataset = fmnist
layers  = conv(8,3,pad=1) relu maxpool(2) conv(16,3,pad=1) relu maxpool(2) flatten dense(10)
lr      = 0.002
batch   = 128
epochs  = 1
seed    = 1
INI

for model in fm-mlp fm-cnn; do
  expect_rc 0 train "$WORK/${model#fm-}.ini"
  expect_rc 0 --json quantize "$model@v1" --int8 --calib fmnist --calib-samples 500
  native_levels=$(json_get 'j["weight_levels"]')
  if [ "$native_levels" != 127 ]; then
    echo "SKIP: oneDNN dispatches no VNNI here (int8 weight levels $native_levels): the test compares" \
      "a model quantized with avx512_core_vnni against one quantized without it"
    exit 77
  fi
  avx2 "$ANNEAL" --json quantize "$model@v1" --int8 --calib fmnist --calib-samples 500 >"$WORK/stdout" 2>"$WORK/stderr" \
    && pass || fail "quantize capped at AVX2 failed: $(cat "$WORK/stderr")"
  OUT=$(cat "$WORK/stdout")
  expect_eq "$(json_get 'j["weight_levels"]')" 64 "$model: the AVX2 quantization uses 7-bit weights"
  expect_rc 0 --json model show "$model@v3"
  expect_eq "$(json_get 'j["lineage"]["weight_levels"]')" 64 "$model: the model records its weight levels"

  accuracy_of "$model@v2"; acc_vnni=$ACC cm_vnni=$CM
  accuracy_of "$model@v3"; acc_avx2=$ACC cm_avx2=$CM
  accuracy_of "$model@v1"; acc_fp32=$ACC
  moved=$(confusion_diff "$cm_vnni" "$cm_avx2")
  echo "$model: fp32 $acc_fp32, int8 quantized with VNNI $acc_vnni, without $acc_avx2; at least $moved of 10000 rows differ"
  within "$model: accuracy gap between the two quantizations" "abs($acc_vnni - $acc_avx2)" 0.005
  within "$model: rows whose class differs between the two quantizations" "$moved" 200

  # The same model run by either ISA: the integer sums are exact on both.
  for ref in "$model@v2" "$model@v3"; do
    accuracy_of "$ref"; cm_native=$CM
    avx2 "$ANNEAL" --json eval "$ref" fmnist >"$WORK/stdout" 2>"$WORK/stderr" && pass || fail "eval capped at AVX2 failed"
    OUT=$(cat "$WORK/stdout")
    cm_capped=$(json_get 'json.dumps(j["metrics"]["confusion"])')
    within "$ref: rows that move between the native and the AVX2 run" "$(confusion_diff "$cm_native" "$cm_capped")" 10
  done
done

# Per row, on a table predict can read: the class of every row of digits.
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
cat >"$WORK/digits.ini" <<'INI'
name    = digits-mlp
dataset = digits
layers  = dense(128) relu dense(10)
lr      = 0.003
batch   = 32
epochs  = 10
seed    = 11
INI
expect_rc 0 train "$WORK/digits.ini"
expect_rc 0 quantize digits-mlp@v1 --int8 --calib digits
avx2 "$ANNEAL" quantize digits-mlp@v1 --int8 --calib digits >/dev/null 2>&1 && pass || fail "digits: quantize capped at AVX2"
python3 -c "
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
w = csv.writer(open(sys.argv[2], 'w', newline=''))
w.writerow(rows[0][:-1]); [w.writerow(r[:-1]) for r in rows[1:]]" "$TEST_DATA/digits.csv" "$WORK/digits-x.csv"
expect_rc 0 predict digits-mlp@v2 --input "$WORK/digits-x.csv" -o "$WORK/vnni.csv"
expect_rc 0 predict digits-mlp@v3 --input "$WORK/digits-x.csv" -o "$WORK/avx2.csv"
avx2 "$ANNEAL" predict digits-mlp@v2 --input "$WORK/digits-x.csv" -o "$WORK/vnni-on-avx2.csv" 2>/dev/null && pass \
  || fail "digits: predict capped at AVX2"
python3 - "$WORK/vnni.csv" "$WORK/avx2.csv" "$WORK/vnni-on-avx2.csv" <<'PY' && pass || fail "digits: predictions differ beyond the tolerance"
import csv, sys
a, b, c = (list(csv.reader(open(p)))[1:] for p in sys.argv[1:4])
assert len(a) == len(b) == len(c) > 1000, (len(a), len(b), len(c))
models = sum(x[1] != y[1] for x, y in zip(a, b))
isas = sum(x[1] != y[1] for x, y in zip(a, c))
worst = max(abs(float(u) - float(v)) for x, y in zip(a, c) for u, v in zip(x[2:], y[2:]))
print(f"digits: {models} of {len(a)} rows differ between the two quantizations; the VNNI model run capped at AVX2: "
      f"{isas} rows differ, largest probability difference {worst:.2g}")
sys.exit(0 if models <= 0.02 * len(a) and isas <= 0.001 * len(a) and worst <= 1e-3 else 1)
PY
finish
