#!/bin/bash
# `anneal serve` answers with every kind of model anneal trains (fp32, bf16,
# int8, pruned, linear, trees, a regression network and an ensemble), and
# its answers are `anneal predict`'s, byte for byte, for the same rows in
# every request format: MLflow CSV (answered as CSV), KServe V2 named column tensors, and
# MLflow dataframe_records. The rows are the sales table's held-out orders:
# dates, categories (one the models never saw), missing values of each
# kind, and more rows than one forward pass (256) holds. An image model
# answers a [N,F] tensor and the same rows as [N,C,H,W].
. "$E2E_LIB"
. "$(dirname "$E2E_LIB")/serve/serve_lib.sh"

expect_rc 0 init
head -n 3201 "$TEST_DATA/sales.csv" >"$WORK/past.csv"
{ head -n 1 "$TEST_DATA/sales.csv"; tail -n 800 "$TEST_DATA/sales.csv"; } >"$WORK/future.csv"
"$PY" - "$WORK/future.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
h = rows[0]
rows[1][h.index("order_date")] = ""
rows[2][h.index("region")] = ""
rows[3][h.index("unit_price")] = "NA"
rows[4][h.index("channel")] = "carrier-pigeon"  # unseen
del h[h.index("returned")]
rows = [r[:-1] if i else r for i, r in enumerate(rows)]
csv.writer(open(sys.argv[1], "w", newline=""), lineterminator="\n").writerows(rows)
PY
expect_rc 0 data import sales "$WORK/past.csv" --label returned

train_as() {  # train_as NAME ALIAS LINE...: trains NAME from sales and points NAME@ALIAS at it
  local name=$1 alias=$2
  shift 2
  printf 'name = %s\ndataset = sales\nseed = 1\nthreads = 1\n' "$name" >"$WORK/$name.ini"
  printf '%s\n' "$@" >>"$WORK/$name.ini"
  expect_rc 0 train "$WORK/$name.ini"
  expect_rc 0 model alias set "$name@v1" "$alias"
}
MODELS=()
train_as sales-mlp production "layers = dense(32) relu dense(16) gelu dense(2)" "epochs = 2"
MODELS+=(sales-mlp@production)
cpu_caps
if [ "$CPU_BF16" = 1 ]; then
  train_as sales-bf16 production "layers = dense(32) relu dense(2)" "epochs = 2" "precision = bf16"
  MODELS+=(sales-bf16@production)
else
  echo "note: the CPU lacks bf16 (oneDNN isa $CPU_ISA): no bf16 model here"
fi
train_as sales-linear production "layers = linear"
MODELS+=(sales-linear@production)
train_as sales-trees production "layers = trees" "tree_rounds = 10"
MODELS+=(sales-trees@production)
expect_rc 0 --json quantize sales-mlp@v1 --int8 --calib sales
expect_rc 0 model alias set "$(json_get 'j["model"]')" int8
MODELS+=(sales-mlp@int8)
expect_rc 0 --json prune sales-mlp@v1 --sparsity 0.7 --finetune-epochs 1 --threads 1
expect_rc 0 model alias set "$(json_get 'j["model"]')" pruned
MODELS+=(sales-mlp@pruned)
# A regression network: the order's quantity from the rest (less whether
# it was returned, which the rows to predict do not have).
cut -d, -f1-9 "$WORK/past.csv" >"$WORK/past-quantities.csv"
expect_rc 0 data import quantities "$WORK/past-quantities.csv" --label quantity
printf 'name = quantity\ndataset = quantities\nlayers = dense(16) relu dense(1)\nloss = mse\nepochs = 2\nseed = 1\nthreads = 1\n' \
  >"$WORK/quantity.ini"
expect_rc 0 train "$WORK/quantity.ini"
expect_rc 0 model alias set quantity@v1 production
MODELS+=(quantity@production)

# An ensemble (layers = auto's weighted members: with this seed and budget
# the Ozone search registers one, ensemble_test.sh), on its own table.
TABULAR="$TEST_DATA/../../bench/data/tabular"
expect_rc 0 data import ozone "$TABULAR/Ozone.train.csv.zst" --label V4
printf 'name = ozone-auto\ndataset = ozone\nloss = mse\nseed = 1\nmax_trials = 14\nthreads = 1\n' >"$WORK/ozone.ini"
expect_rc 0 train "$WORK/ozone.ini"
zstd -dc "$TABULAR/Ozone.test.csv.zst" >"$WORK/ozone-test.csv"

args=(--model ozone-auto@v1)
for m in "${MODELS[@]}"; do args+=(--model "$m"); done
start_server kinds "${args[@]}" || fail "the server did not start: $(cat "$WORK/kinds.err")"
"$PY" "$SERVE_CLIENT" body infer "$WORK/future.csv" >"$WORK/infer.json"
"$PY" "$SERVE_CLIENT" body records "$WORK/future.csv" >"$WORK/records.json"
for m in "${MODELS[@]}"; do
  expect_rc 0 predict "$m" --input "$WORK/future.csv" -o "$WORK/predict.csv" --force
  http POST "/models/$m/invocations" -H 'Content-Type: text/csv' -H 'Accept: text/csv' \
    --data-binary @"$WORK/future.csv"
  expect_status 200 "$m: CSV"
  cmp -s "$WORK/body" "$WORK/predict.csv" && pass ||
    fail "$m: the CSV answer differs from predict's: $(diff "$WORK/body" "$WORK/predict.csv" | head -4)"
  http POST "/v2/models/$m/infer" -H 'Content-Type: application/json' --data-binary @"$WORK/infer.json"
  expect_status 200 "$m: infer"
  "$PY" "$SERVE_CLIENT" as_csv infer <"$WORK/body" >"$WORK/answer.csv"
  cmp -s "$WORK/answer.csv" "$WORK/predict.csv" && pass ||
    fail "$m: the infer answer differs from predict's: $(diff "$WORK/answer.csv" "$WORK/predict.csv" | head -4)"
  http POST "/models/$m/invocations" -H 'Content-Type: application/json' --data-binary @"$WORK/records.json"
  expect_status 200 "$m: dataframe_records"
  "$PY" "$SERVE_CLIENT" as_csv mlflow <"$WORK/body" >"$WORK/answer.csv"
  cmp -s "$WORK/answer.csv" "$WORK/predict.csv" && pass ||
    fail "$m: the MLflow answer differs from predict's: $(diff "$WORK/answer.csv" "$WORK/predict.csv" | head -4)"
  http GET "/v2/models/$m"
  expect_status 200 "$m: metadata"
done
expect_rc 0 predict ozone-auto@v1 --input "$WORK/ozone-test.csv" -o "$WORK/predict.csv" --force
http POST "/models/ozone-auto@v1/invocations" -H 'Content-Type: text/csv' -H 'Accept: text/csv' \
  --data-binary @"$WORK/ozone-test.csv"
expect_status 200 "ensemble: CSV"
cmp -s "$WORK/body" "$WORK/predict.csv" && pass ||
  fail "ensemble: the CSV answer differs from predict's: $(diff "$WORK/body" "$WORK/predict.csv" | head -4)"
http GET /v2/models/ozone-auto@v1
expect_eq "$(body_get 'j["parameters"]["kind"]')" "ensemble" "the ensemble says so"
http GET /v2/models/sales-mlp@int8
expect_eq "$(body_get 'j["parameters"]["precision"]')" "int8" "the int8 model says so"
http GET /v2/models/sales-trees@production
expect_eq "$(body_get 'j["parameters"]["kind"]')" "trees" "the tree model says so"
http GET /v2/models/quantity@production
expect_eq "$(body_get 'j["outputs"][0]["datatype"]')" "FP64" "the regression model answers FP64 values"
stop_server "$SERVER_PID"
expect_eq "$SERVER_RC" "0" "exit 0"

# --- an image model: [N,F] and [N,C,H,W] tensors -----------------------------
"$PY" - "$TEST_DATA/digits.csv" "$WORK/images.idx" "$WORK/labels.idx" "$WORK/digits.json" "$WORK/digits4.json" <<'PY'
import csv, json, struct, sys
rows = list(csv.reader(open(sys.argv[1])))[1:]
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack(">IIII", 0x803, len(rows), 8, 8) + bytes(int(float(v)) for r in rows for v in r[:64]))
with open(sys.argv[3], "wb") as f:
    f.write(struct.pack(">II", 0x801, len(rows)) + bytes(int(float(r[64])) for r in rows))
data = [int(float(v)) for r in rows[:20] for v in r[:64]]
json.dump({"inputs": [{"name": "input", "shape": [20, 64], "datatype": "FP32", "data": data}]}, open(sys.argv[4], "w"))
json.dump({"inputs": [{"name": "input", "shape": [20, 1, 8, 8], "datatype": "FP32", "data": data}]}, open(sys.argv[5], "w"))
PY
expect_rc 0 data import digits "$WORK/images.idx" --labels "$WORK/labels.idx"
printf 'name = digits-mlp\ndataset = digits\nlayers = dense(32) relu dense(10)\nepochs = 5\nseed = 1\nthreads = 1\n' \
  >"$WORK/digits.ini"
expect_rc 0 train "$WORK/digits.ini"
start_server images --model digits-mlp@v1 || fail "the image server did not start: $(cat "$WORK/images.err")"
http POST /v2/models/digits-mlp@v1/infer --data-binary @"$WORK/digits.json"
expect_status 200 "an image model: [N,F]"
expect_eq "$(body_get '[o["shape"] for o in j["outputs"]]')" "[[20], [20, 10]]" "20 rows of 10 classes"
correct=$(body_get 'sum(p == str(int(float(r[64]))) for p, r in zip(j["outputs"][0]["data"], list(__import__("csv").reader(open("'"$TEST_DATA"'/digits.csv")))[1:21]))')
[ "$correct" -ge 15 ] && pass || fail "the digits model got $correct of 20 training images right"
cp "$WORK/body" "$WORK/flat.json"
http POST /v2/models/digits-mlp@v1/infer --data-binary @"$WORK/digits4.json"
expect_status 200 "an image model: [N,C,H,W]"
cmp -s "$WORK/body" "$WORK/flat.json" && pass || fail "[N,C,H,W] answers differently from [N,F]"
http POST /v2/models/digits-mlp@v1/infer --data-binary '{"inputs": [{"name": "input", "shape": [1, 63], "datatype": "FP32", "data": ['"$(seq -s, 63)"']}]}'
expect_status 400 "an image row of the wrong width"
http POST /invocations -H 'Content-Type: text/csv' --data-binary 'a,b
1,2'
expect_status 415 "CSV for an image model"
stop_server "$SERVER_PID"

finish
