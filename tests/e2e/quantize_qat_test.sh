#!/bin/bash
# quantize --qat-epochs on digits: quantization-aware fine-tuning registers
# an int8 version whose lineage records the epochs, whose weights moved from
# the parent's, and which evaluates close to the fp32 parent; a negative
# epoch count exits 2 and changes nothing.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
cat >"$WORK/d.ini" <<'INI'
name    = digits-mlp
dataset = digits
layers  = dense(64) relu dense(32) relu dense(10)
lr      = 0.003
batch   = 32
epochs  = 8
seed    = 11
threads = 1
baseline = false
INI
expect_rc 0 --json train "$WORK/d.ini"
fp32=$(json_get 'j["metrics"]["test_accuracy"]')

before=$(store_state)
expect_rc 2 quantize digits-mlp --int8 --calib digits --qat-epochs -1
expect_contains "$ERR" "--qat-epochs" "negative --qat-epochs named"
expect_eq "$(store_state)" "$before" "a bad --qat-epochs left the store unchanged"

expect_rc 0 --json quantize digits-mlp --int8 --calib digits --qat-epochs 1 --threads 1
expect_eq "$(json_get 'j["model"]')" "digits-mlp@v2" "QAT registers the next version"
expect_eq "$(json_get 'j["precision"]')" "int8" "QAT model is int8"
expect_rc 0 --json model show digits-mlp@v2
expect_eq "$(json_get 'j["lineage"]["qat_epochs"]')" "1" "lineage records qat_epochs"
expect_eq "$(json_get 'j["lineage"]["parent"]')" "digits-mlp@v1" "lineage names the fp32 parent"
expect_eq "$(json_get 'j["lineage"]["qat_data"]')" "digits@v1" "lineage names the fine-tuning data"
# The fine-tuned weights are not the parent's: the hash over the stored
# (dequantized) weights differs from a plain PTQ of the same parent.
qat_hash=$(json_get 'j["lineage"]["weights_hash"]')
expect_rc 0 --json quantize digits-mlp@v1 --int8 --calib digits --threads 1
expect_rc 0 --json model show digits-mlp@v3
expect_eq "$(json_get 'j["lineage"]["qat_epochs"]')" "0" "PTQ records qat_epochs 0"
ptq_hash=$(json_get 'j["lineage"]["weights_hash"]')
[ "$qat_hash" != "$ptq_hash" ] && pass || fail "QAT left the weights as PTQ would"

expect_rc 0 --json eval digits-mlp@v2 digits
qat=$(json_get 'j["metrics"]["accuracy"]')
python3 -c "import sys; sys.exit(0 if $qat >= $fp32 - 0.03 else 1)" && pass \
  || fail "QAT int8 accuracy $qat is more than 3 points below fp32 $fp32"
expect_rc 0 --json bench digits-mlp@v2 --batch 64 --repeats 1 --seconds 0.2 --threads 1
expect_eq "$(json_get 'j["precision"]')" "int8" "bench runs the QAT model as int8"

finish
