#!/bin/bash
# `anneal model export REF --format onnx` (issue 18): every kind of model
# anneal trains is written as ONNX, passes onnx.checker (Debian's
# python3-onnx), and ONNX Runtime (the npm package onnxruntime-node) runs it
# on the test split from the raw feature columns: its classes agree with
# `anneal predict` on >= 99.9% of rows (fp32, pruned, linear) or >= 99%
# (int8), its probabilities within the tolerances below (bf16 models:
# onnx_export_bf16_test.sh, which needs a CPU with bf16). Image models,
# which predict cannot read, are compared with `anneal eval`'s confusion
# matrix and with tests/format/read_model.py's probabilities. Then the
# one-line errors: bad REF, flags, an existing or unwritable -o, and a
# failure just before the rename leaving no file behind.
#
# ONNX Runtime and the helpers: onnx/ort_lib.sh. Without a reachable npm
# registry the ONNX Runtime part is skipped, saying so, and the test exits 77.
. "$E2E_LIB"
. "$(dirname "$E2E_LIB")/onnx/ort_lib.sh"

expect_rc 0 init

# --- tabular: dates, categories (rare levels, unseen ones), numbers ---------
import_sales
expect_rc 0 --json data show sales@v1
printf '%s\n' "$OUT" | grep -q '"datetime"' && pass || fail "order_date should import as a datetime column"

cat >"$WORK/mlp.ini" <<'INI'
name    = sales-mlp
dataset = sales
layers  = dense(32) relu dropout(0.1) dense(16) gelu dense(2)
epochs  = 3
seed    = 1
threads = 1
INI
expect_rc 0 train "$WORK/mlp.ini"
ort_vs_predict sales-mlp@v1 "$WORK/future.csv" 0.999 1e-4 fp32-mlp
expect_rc 0 --json model export sales-mlp --format onnx -o "$WORK/latest.onnx"
expect_eq "$(json_get 'j["model"], j["format"], j["bytes"] == __import__("os").path.getsize(j["output"])')" \
  "sales-mlp@v1 onnx True" "--json names the model, the format and the bytes written"
expect_eq "$(stat -c %a "$WORK/latest.onnx")" "644" "an exported model is readable by other users"

# batchnorm, layernorm, tanh and sigmoid, bce with one output (in fp32;
# onnx_export_bf16_test.sh trains the same model in bf16).
cat >"$WORK/norm.ini" <<'INI'
name      = sales-norm
dataset   = sales
layers    = dense(32) batchnorm relu dense(16) layernorm tanh dense(8) sigmoid dense(1)
loss      = bce
epochs    = 3
seed      = 2
threads   = 1
INI
expect_rc 0 train "$WORK/norm.ini"
ort_vs_predict sales-norm@v1 "$WORK/future.csv" 0.999 1e-4 norm-mlp

# The periodic embedding (Unsqueeze, Mul by the fp32 2π·c, Sin and Cos
# concatenated per feature, Flatten): in the layer's order, or the dense
# after it would read other values and the classes would not agree.
cat >"$WORK/periodic.ini" <<'INI'
name    = sales-periodic
dataset = sales
layers  = periodic(6,sigma=0.5) dense(32) relu dense(2)
epochs  = 3
seed    = 7
threads = 1
INI
expect_rc 0 train "$WORK/periodic.ini"
ort_vs_predict sales-periodic@v1 "$WORK/future.csv" 0.999 1e-4 periodic-mlp
"$PY" - "$WORK/periodic-mlp.onnx" <<'PY' && pass || fail "the periodic layer is not exported as Sin and Cos"
import onnx, sys
ops = [n.op_type for n in onnx.load(sys.argv[1]).graph.node]
assert all(op in ops for op in ("Unsqueeze", "Sin", "Cos", "Concat")), ops
PY

# The piecewise-linear encoding (Unsqueeze, Sub the bins' lower edges, Mul
# their inverse widths, Min and Max the clamps, Flatten): the same fp32
# steps as the backends, in the layer's order.
cat >"$WORK/ple.ini" <<'INI'
name    = sales-ple
dataset = sales
layers  = ple(6) dense(32) relu dense(2)
epochs  = 3
seed    = 7
threads = 1
INI
expect_rc 0 train "$WORK/ple.ini"
ort_vs_predict sales-ple@v1 "$WORK/future.csv" 0.999 1e-4 ple-mlp
"$PY" - "$WORK/ple-mlp.onnx" <<'PY' && pass || fail "the ple layer is not exported as Sub, Mul, Min and Max"
import onnx, sys
ops = [n.op_type for n in onnx.load(sys.argv[1]).graph.node]
assert all(op in ops for op in ("Unsqueeze", "Sub", "Mul", "Min", "Max")), ops
PY

# The ensemble (TabM-mini): each sample's members' rows (Unsqueeze, Mul by
# the scales, Reshape), the shared layers on them, their mean (Reshape,
# ReduceMean): a wrong row order would mix samples and the classes would
# not agree.
cat >"$WORK/ensemble.ini" <<'INI'
name    = sales-ensemble
dataset = sales
layers  = ensemble(4) dense(32) relu dense(2)
epochs  = 3
seed    = 7
threads = 1
INI
expect_rc 0 train "$WORK/ensemble.ini"
ort_vs_predict sales-ensemble@v1 "$WORK/future.csv" 0.999 1e-4 ensemble-mlp
"$PY" - "$WORK/ensemble-mlp.onnx" <<'PY' && pass || fail "the ensemble is not exported as member rows and their mean"
import onnx, sys
ops = [n.op_type for n in onnx.load(sys.argv[1]).graph.node]
assert all(op in ops for op in ("Unsqueeze", "Mul", "Reshape", "ReduceMean")), ops
PY

# Calibrated models (docs/TRAINING.md, "Calibration"): the export rescales
# the class probabilities by the temperature (Log, Div, Softmax) as predict
# does. The bce network with calibrate = temperature; a softmax network
# calibrated by default (auto, with validation rows).
expect_rc 0 --json train "$WORK/norm.ini" --set validation=0.2 --set calibrate=temperature
expect_eq "$(json_get '"temperature" in j["metrics"]')" "True" "the bce network is calibrated"
ort_vs_predict sales-norm@v2 "$WORK/future.csv" 0.999 1e-4 calibrated-bce
sed 's/^name    = sales-mlp/name    = sales-calibrated/' "$WORK/mlp.ini" >"$WORK/calibrated.ini"
expect_rc 0 --json train "$WORK/calibrated.ini" --set validation=0.2
expect_eq "$(json_get '"temperature" in j["metrics"]')" "True" "the softmax network is calibrated"
ort_vs_predict sales-calibrated@v1 "$WORK/future.csv" 0.999 1e-4 calibrated-mlp

# The linear model.
cat >"$WORK/linear.ini" <<'INI'
name    = sales-linear
dataset = sales
layers  = linear
threads = 1
INI
expect_rc 0 train "$WORK/linear.ini"
ort_vs_predict sales-linear@v1 "$WORK/future.csv" 0.999 1e-4 linear

# Boosted trees (XGBoost's booster, one ai.onnx.ml TreeEnsembleRegressor
# with the margins' logistic or softmax after it): binary here, ten
# classes on the digits table, regression below. The thresholds are
# XGBoost's own floats, so a row takes the same branches in both.
cat >"$WORK/trees.ini" <<'INI'
name        = sales-trees
dataset     = sales
layers      = trees
tree_rounds = 40
validation  = 0.1
seed        = 1
threads     = 1
INI
expect_rc 0 train "$WORK/trees.ini"
ort_vs_predict sales-trees@v1 "$WORK/future.csv" 0.999 1e-5 trees
expect_rc 0 data import digit-table "$TEST_DATA/digits.csv" --split 0.2
cat >"$WORK/digit-trees.ini" <<'INI'
name        = digit-trees
dataset     = digit-table
layers      = trees
tree_rounds = 20
tree_depth  = 4
seed        = 1
threads     = 1
INI
expect_rc 0 train "$WORK/digit-trees.ini"
ort_vs_predict digit-trees@v1 "$TEST_DATA/digits.csv" 0.999 1e-5 trees-multiclass

# Regression: the value in the target's own units.
"$PY" - "$WORK/past.csv" "$WORK/future.csv" "$WORK/past-r.csv" "$WORK/future-r.csv" <<'PY'
import csv, sys
for src, dst in ((sys.argv[1], sys.argv[3]), (sys.argv[2], sys.argv[4])):
    rows = [r for r in csv.reader(open(src, newline=""))]
    h = rows[0]
    keep = [i for i, n in enumerate(h) if n not in ("returned",)]
    out = [[r[i] for i in keep] for r in rows if r[h.index("unit_price")] != "NA"]
    csv.writer(open(dst, "w", newline=""), lineterminator="\n").writerows(out)
PY
expect_rc 0 data import prices "$WORK/past-r.csv" --test "$WORK/future-r.csv" --label unit_price
cat >"$WORK/reg.ini" <<'INI'
name    = prices
dataset = prices
layers  = dense(16) relu dense(1)
loss    = mse
epochs  = 2
seed    = 3
threads = 1
INI
expect_rc 0 train "$WORK/reg.ini"
ort_vs_predict prices@v1 "$WORK/future-r.csv" 1 1e-4 regression
cat >"$WORK/reg-trees.ini" <<'INI'
name        = prices-trees
dataset     = prices
layers      = trees
tree_rounds = 30
seed        = 3
threads     = 1
INI
expect_rc 0 train "$WORK/reg-trees.ini"
ort_vs_predict prices-trees@v1 "$WORK/future-r.csv" 1 1e-4 regression-trees

# Ensembles (layers = auto's weighted members; ensemble_test.sh has the
# seeds under which the search chooses one): each member's graph, weighted
# and summed. Regression (trees and networks) on Ozone, binary (with a
# decision threshold) on breast_cancer.
TABULAR="$TEST_DATA/../../bench/data/tabular"
expect_rc 0 data import ozone "$TABULAR/Ozone.train.csv.zst" --test "$TABULAR/Ozone.test.csv.zst" --label V4
printf 'name = ozone-auto\ndataset = ozone\nloss = mse\nseed = 1\nmax_trials = 14\nthreads = 1\n' >"$WORK/ozone.ini"
expect_rc 0 --json train "$WORK/ozone.ini"
expect_rc 0 --json model show ozone-auto@v1
expect_eq "$(json_get '"ensemble" in j["lineage"]')" "True" "the Ozone search chose an ensemble"
zstd -dc "$TABULAR/Ozone.test.csv.zst" > "$WORK/ozone-test.csv"
ort_vs_predict ozone-auto@v1 "$WORK/ozone-test.csv" 1 1e-4 ensemble-regression
expect_rc 0 data import cancer "$TEST_DATA/breast_cancer.csv" --split 0.2
printf 'name = cancer-auto\ndataset = cancer\nseed = 6\nmax_trials = 14\nvalidation = 0.1\nthreads = 1\n' >"$WORK/cancer.ini"
expect_rc 0 --json train "$WORK/cancer.ini"
expect_rc 0 --json model show cancer-auto@v1
expect_eq "$(json_get '"ensemble" in j["lineage"]')" "True" "the cancer search chose an ensemble"
ort_vs_predict cancer-auto@v1 "$TEST_DATA/breast_cancer.csv" 0.999 1e-5 ensemble-binary

# INT8 (QDQ) and pruned versions of the MLP.
expect_rc 0 --json quantize sales-mlp@v1 --int8 --calib sales --calib-samples 500 --threads 1
int8_ref=$(json_get 'j["model"]')
ort_vs_predict "$int8_ref" "$WORK/future.csv" 0.99 0.02 int8-mlp
"$PY" - "$WORK/int8-mlp.onnx" <<'PY' && pass || fail "the int8 export is not a QDQ graph"
import onnx, sys
ops = [n.op_type for n in onnx.load(sys.argv[1]).graph.node]
assert ops.count("QuantizeLinear") >= 2 and ops.count("DequantizeLinear") >= 4, ops
PY
expect_rc 0 --json prune sales-mlp@v1 --sparsity 0.7 --finetune-epochs 1 --threads 1
pruned_ref=$(json_get 'j["model"]')
ort_vs_predict "$pruned_ref" "$WORK/future.csv" 0.999 1e-4 pruned-mlp
# Structured pruning rebuilds smaller dense layers: the spec changes with them.
expect_rc 0 --json prune sales-mlp@v1 --structured --sparsity 0.5 --finetune-epochs 1 --threads 1
ort_vs_predict "$(json_get 'j["model"]')" "$WORK/future.csv" 0.999 1e-4 structured-mlp

# --- images: a CNN on 8x8 digits (IDX), fp32 and int8 -------------------------
"$PY" - "$TEST_DATA/digits.csv" "$WORK/images.idx" "$WORK/labels.idx" <<'PY'
import csv, struct, sys
rows = list(csv.reader(open(sys.argv[1])))[1:]
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack(">IIII", 0x803, len(rows), 8, 8) + bytes(int(float(v)) for r in rows for v in r[:64]))
with open(sys.argv[3], "wb") as f:
    f.write(struct.pack(">II", 0x801, len(rows)) + bytes(int(float(r[64])) for r in rows))
PY
expect_rc 0 data import digits "$WORK/images.idx" --labels "$WORK/labels.idx"
cat >"$WORK/cnn.ini" <<'INI'
name      = digits-cnn
dataset   = digits
layers    = conv(4,3,pad=1) relu maxpool(2) conv(8,3) relu avgpool(2,stride=1) flatten dense(10)
optimizer = adam
lr        = 0.01
batch     = 32
epochs    = 3
seed      = 4
threads   = 1
INI
expect_rc 0 train "$WORK/cnn.ini"
for part in features labels split; do
  expect_rc 0 data export digits@v1 --part "$part" -o "$WORK/digits.$part"
done
expect_rc 0 --json data show digits@v1
dtype=$(json_get '[s["dtype"] for s in j["streams"] if s["role"] == "features"][0]')

# ort_vs_eval REF MAX_MOVED_FRACTION LABEL: ONNX Runtime's confusion matrix
# on the test split against anneal eval's.
ort_vs_eval() {
  local ref=$1 frac=$2 label=$3
  export_check "$ref" "$WORK/$label.onnx" "$label"
  [ "$ORT" = 1 ] || return 0
  "$PY" "$TOOL" image-feeds "$WORK/$label.onnx" "$WORK/digits.features" "$dtype" "$WORK/digits.split" \
    "$WORK/$label.feeds.json" || { fail "$label: feeds"; return; }
  node "$ORT_RUN" "$NPM_DIR" "$WORK/$label.onnx" "$WORK/$label.feeds.json" "$WORK/$label.ort.json" \
    || { fail "$label: ONNX Runtime could not run the model"; return; }
  expect_rc 0 --json eval "$ref" digits@v1
  printf '%s' "$OUT" >"$WORK/$label.eval.json"
  local rows max_moved
  rows=$(json_get 'j["metrics"]["rows"]')
  max_moved=$("$PY" -c "print(int($rows * $frac))")
  "$PY" "$TOOL" compare-eval "$WORK/$label.eval.json" "$WORK/$label.ort.json" "$WORK/digits.labels" \
    "$WORK/digits.split" "$max_moved" "$label" >&2 && pass || fail "$label: ONNX Runtime and anneal eval disagree"
}
ort_vs_eval digits-cnn@v1 0.001 fp32-cnn
# The probabilities against the independent reader of the model format.
if [ "$ORT" = 1 ]; then
  "$PY" "$READER" blob --store "$ANNEAL_HOME" --model digits-cnn@v1 -o "$WORK/cnn.bin" || fail "reader: blob"
  "$PY" "$TOOL" compare-reader "$READER" "$WORK/cnn.bin" "$WORK/digits.features" "$dtype" "$WORK/digits.split" \
    "$WORK/fp32-cnn.ort.json" 1e-4 fp32-cnn >&2 && pass || fail "fp32-cnn: probabilities differ from the reader's"
fi
# Batchnorm on an image (per channel), a strided conv with a fused sigmoid
# and a dense on an image (the implicit flatten takes a layer number).
cat >"$WORK/cnn2.ini" <<'INI'
name      = digits-cnn2
dataset   = digits
layers    = conv(4,3,pad=1) batchnorm relu maxpool(2) conv(6,2,stride=2) sigmoid dense(10)
optimizer = adam
lr        = 0.01
batch     = 32
epochs    = 2
seed      = 5
threads   = 1
INI
expect_rc 0 train "$WORK/cnn2.ini"
ort_vs_eval digits-cnn2@v1 0.001 fp32-cnn2
if [ "$ORT" = 1 ]; then
  "$PY" "$READER" blob --store "$ANNEAL_HOME" --model digits-cnn2@v1 -o "$WORK/cnn2.bin" || fail "reader: blob"
  "$PY" "$TOOL" compare-reader "$READER" "$WORK/cnn2.bin" "$WORK/digits.features" "$dtype" "$WORK/digits.split" \
    "$WORK/fp32-cnn2.ort.json" 1e-4 fp32-cnn2 >&2 && pass || fail "fp32-cnn2: probabilities differ from the reader's"
fi
expect_rc 0 --json quantize digits-cnn@v1 --int8 --calib digits --calib-samples 500 --threads 1
int8_cnn=$(json_get 'j["model"]')
ort_vs_eval "$int8_cnn" 0.01 int8-cnn
if [ "$ORT" = 1 ]; then
  "$PY" "$READER" blob --store "$ANNEAL_HOME" --model "$int8_cnn" -o "$WORK/cnn8.bin" || fail "reader: blob"
  "$PY" "$TOOL" compare-reader "$READER" "$WORK/cnn8.bin" "$WORK/digits.features" "$dtype" "$WORK/digits.split" \
    "$WORK/int8-cnn.ort.json" 0.02 int8-cnn >&2 && pass || fail "int8-cnn: probabilities differ from the reader's"
fi

# --- errors: one line, the right exit code, nothing written -----------------
expect_error() {
  local code=$1 needle=$2
  shift 2
  expect_rc "$code" "$@"
  expect_contains "$ERR" "$needle" "anneal $*"
  expect_eq "$(printf '%s\n' "$ERR" | grep -c .)" "1" "one error line for: $*"
}
before=$(store_state)
expect_error 1 "no-such" model export no-such@v1 --format onnx -o "$WORK/x.onnx"
expect_error 1 "v9" model export sales-mlp@v9 --format onnx -o "$WORK/x.onnx"
expect_error 2 "REF 'sales-mlp@v0': expected" model export sales-mlp@v0 --format onnx -o "$WORK/x.onnx"
expect_error 2 "REF '../x': expected" model export ../x --format onnx -o "$WORK/x.onnx"
expect_error 2 "--format 'tflite': expected onnx" model export sales-mlp@v1 --format tflite -o "$WORK/x.onnx"
expect_error 2 "--format" model export sales-mlp@v1 -o "$WORK/x.onnx"
expect_error 2 "-o" model export sales-mlp@v1 --format onnx
[ ! -e "$WORK/x.onnx" ] && pass || fail "a refused export left $WORK/x.onnx"
# An existing file: refused without --force, untouched.
printf 'keep' >"$WORK/exists.onnx"
expect_error 2 "file exists" model export sales-mlp@v1 --format onnx -o "$WORK/exists.onnx"
expect_eq "$(cat "$WORK/exists.onnx")" "keep" "an existing file is left alone without --force"
# Unwritable places: a missing directory, a file where a directory should be.
expect_error 1 "$WORK/missing-dir/m.onnx" model export sales-mlp@v1 --format onnx -o "$WORK/missing-dir/m.onnx"
[ ! -e "$WORK/missing-dir" ] && pass || fail "the export made the missing directory"
printf 'x' >"$WORK/plainfile"
expect_error 1 "plainfile" model export sales-mlp@v1 --format onnx -o "$WORK/plainfile/m.onnx"
if [ "$(id -u)" -ne 0 ]; then  # root writes anywhere
  mkdir "$WORK/readonly" && chmod 555 "$WORK/readonly"
  expect_error 1 "readonly" model export sales-mlp@v1 --format onnx -o "$WORK/readonly/m.onnx"
  expect_eq "$(ls -A "$WORK/readonly")" "" "nothing left in a read-only directory"
fi
# A failure after the bytes are written, before the rename: no file, no
# temporary file left beside it.
mkdir "$WORK/out"
use_fault_build
ANNEAL_FAULT="export.written=fail" expect_error 1 "export.written" \
  model export sales-mlp@v1 --format onnx -o "$WORK/out/m.onnx"
expect_eq "$(ls -A "$WORK/out")" "" "a failed export leaves nothing in the directory"
expect_eq "$(store_state)" "$before" "exports leave the store as it was"

ort_finish
