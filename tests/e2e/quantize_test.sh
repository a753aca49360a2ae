#!/bin/bash
# quantize, prune and bench on digits: an int8 version and pruned versions
# (unstructured gradual, structured) register as new versions with lineage,
# evaluate within a few points of the parent, predict, bench; bad requests
# exit 2 with one line and leave the store unchanged.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
cat >"$WORK/d.ini" <<'INI'
name    = digits-mlp
dataset = digits
layers  = dense(128) relu dense(64) relu dense(10)
lr      = 0.003
batch   = 32
epochs  = 10
seed    = 11
threads = 1
baseline = false
INI
expect_rc 0 --json train "$WORK/d.ini"
fp32=$(json_get 'j["metrics"]["test_accuracy"]')

# Bad input first: each exits 2 with a one-line error and changes nothing.
before=$(store_state)
runs_before=$("$ANNEAL" --json runs list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["runs"]))')
expect_rc 2 quantize digits-mlp --int8 --calib digits --method bogus
expect_contains "$ERR" "--method bogus: expected minmax, percentile or entropy" "bad method named as its flag"
expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "one-line error"
expect_rc 2 quantize digits-mlp --int8
expect_contains "$ERR" "--calib" "missing --calib named"
expect_rc 2 prune digits-mlp --sparsity 1.5
expect_contains "$ERR" "--sparsity must be in (0, 1)" "bad sparsity named"
expect_rc 2 prune digits-mlp --sparsity 0.5 --schedule gradual --finetune-epochs 0
expect_contains "$ERR" "--finetune-epochs must be 1 or more with the gradual schedule" "gradual without fine-tuning"
expect_rc 2 bench digits-mlp --batch 0
# quantize/ names concepts; cli/ says them as the command's flags.
expect_contains "$ERR" "--batch must be >= 1" "bad bench batch named as its flag"
expect_rc 2 quantize digits-mlp --int8 --calib digits --calib-samples 0
expect_contains "$ERR" "--calib-samples must be >= 1" "bad calibration row count named as its flag"
expect_rc 2 quantize digits-mlp --int8 --calib 'digits@@v1'
expect_eq "$ERR" "anneal: --calib 'digits@@v1': expected NAME, NAME@latest or NAME@vN with N >= 1" \
  "a malformed calibration reference named as its flag"
expect_rc 2 prune digits-mlp --sparsity 0.5 --data 'digits@v0'
expect_eq "$ERR" "anneal: --data 'digits@v0': expected NAME, NAME@latest or NAME@vN with N >= 1" \
  "a malformed fine-tuning reference named as its flag"
expect_rc 1 quantize no-such-model --int8 --calib digits
expect_eq "$(store_state)" "$before" "bad requests left the store unchanged"
expect_eq "$("$ANNEAL" --json runs list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["runs"]))')" \
  "$runs_before" "bad requests recorded no run"

# INT8 post-training quantization.
expect_rc 0 --json quantize digits-mlp --int8 --calib digits --calib-samples 500 --method entropy
expect_eq "$(json_get 'j["model"]')" "digits-mlp@v2" "quantize registers the next version"
expect_eq "$(json_get 'j["precision"]')" "int8" "int8 precision"
# Weights shrink 4x; this small model's header (64 feature columns, their
# statistics) is a fair part of its blob, so the whole is under half.
python3 -c "import sys; sys.exit(0 if $(json_get 'j["size_bytes"]') < 0.5 * $(json_get 'j["parent_size_bytes"]') else 1)" \
  && pass || fail "int8 model is not much smaller than the fp32 one"
expect_rc 0 --json model show digits-mlp@v2
expect_eq "$(json_get 'j["lineage"]["parent"]')" "digits-mlp@v1" "lineage names the parent"
expect_eq "$(json_get 'j["lineage"]["method"]')" "entropy" "lineage names the method"
expect_eq "$(json_get 'j["lineage"]["calibration_data"]')" "digits@v1" "lineage names the calibration data"
expect_rc 0 model show digits-mlp@v2
expect_contains "$OUT" "size_on_disk" "model show reports size on disk"
expect_contains "$OUT" "accuracy_change_points" "model show reports accuracy against the parent"
expect_rc 0 --json eval digits-mlp@v2 digits
int8=$(json_get 'j["metrics"]["accuracy"]')
python3 -c "import sys; sys.exit(0 if abs($int8 - $fp32) <= 0.03 else 1)" && pass \
  || fail "int8 accuracy $int8 is more than 3 points from fp32 $fp32"

# Unstructured gradual pruning, fine-tuned: exact sparsity, stored compactly.
# Five epochs to reach 80%: with three, the drop on digits' test rows was
# 2.4 to 5.5 points across four splits (five: 0.8 to 2.3).
expect_rc 0 --json prune digits-mlp@v1 --sparsity 0.8 --schedule gradual --finetune-epochs 5 --threads 1
expect_eq "$(json_get 'j["model"]')" "digits-mlp@v3" "prune registers the next version"
python3 -c "import sys; s = $(json_get 'j["sparsity"]'); sys.exit(0 if abs(s - 0.8) < 0.01 else 1)" && pass \
  || fail "sparsity is not 0.8"
python3 -c "import sys; sys.exit(0 if $(json_get 'j["size_bytes"]') < 0.4 * $(json_get 'j["parent_size_bytes"]') else 1)" \
  && pass || fail "the pruned model is not stored compactly"
expect_rc 0 --json eval digits-mlp@v3 digits
pruned=$(json_get 'j["metrics"]["accuracy"]')
python3 -c "import sys; sys.exit(0 if $pruned >= $fp32 - 0.03 else 1)" && pass \
  || fail "pruned accuracy $pruned is more than 3 points below fp32 $fp32"

# Structured: smaller layers.
expect_rc 0 --json prune digits-mlp@v1 --structured --sparsity 0.5 --finetune-epochs 2 --threads 1
expect_rc 0 --json model show "$(json_get 'j["model"]')"
expect_eq "$(json_get 'j["lineage"]["layers"]')" "dense(64) relu dense(32) relu dense(10)" "structured pruning halves the layers"

# predict and bench work on every kind.
head -n 20 "$TEST_DATA/digits.csv" > "$WORK/rows.csv"
for v in 1 2 3 4; do
  expect_rc 0 predict "digits-mlp@v$v" --input "$WORK/rows.csv" -o "$WORK/p$v.csv"
  expect_eq "$(wc -l < "$WORK/p$v.csv")" "20" "predict v$v wrote 19 rows and a header"
  expect_rc 0 --json bench "digits-mlp@v$v" --batch 64 --seconds 0.2 --repeats 3 --threads 1
  python3 -c "import sys; sys.exit(0 if $(json_get 'j["samples_per_s"]') > 0 else 1)" && pass || fail "bench v$v"
done
# The runs quantize and prune recorded are not training configs, and fsck
# knows it (it once called every such run BROKEN).
expect_rc 0 fsck

expect_rc 0 --json bench digits-mlp@v2 --batch 64 --seconds 0.2 --repeats 3 --threads 1
expect_eq "$(json_get 'j["precision"]')" "int8" "bench reports int8"
expect_eq "$(json_get 'j["layers"][0]["kernel"]')" "int8 inner product" "int8 layers run oneDNN int8"
finish
