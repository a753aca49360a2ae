#!/bin/bash
# Warm start from a model trained in precision = bf16 (split from
# warm_start_test.sh): its fp32 master weights start an fp32 run, which
# records it as the parent.
# Needs a CPU that trains bf16 (AVX512_BF16 or AMX, as oneDNN sees it);
# elsewhere it is skipped (77), naming the capability.
. "$E2E_LIB"
require_cpu_bf16

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
cat > "$WORK/w.ini" <<'INI'
name             = digits-ws
dataset          = digits
layers           = dense(64) relu dense(10)
lr               = 0.002
batch            = 32
epochs           = 1
seed             = 7
threads          = 1
validation       = 0.1
INI

lineage() {  # MODEL EXPR: a Python expression over the model's lineage (as l)
  "$ANNEAL" --json model show "$1" | python3 -c "import json,sys; l=json.load(sys.stdin)['lineage']; print($2)"
}

expect_rc 0 --json train "$WORK/w.ini" --set precision=bf16
bf16=$(json_get "j['model']")
expect_eq "$(lineage "$bf16" "l['precision']")" "bf16" "the parent trained in bf16"
expect_rc 0 --json train "$WORK/w.ini" --set warm_start="$bf16"
child=$(json_get "j['model']")
expect_contains "$ERR" "warm start from $bf16: its weights" "the bf16 parent is used"
expect_eq "$(lineage "$child" "l['parent'], l['warm_start'], l['precision']")" "$bf16 True fp32" \
  "a bf16 parent starts an fp32 run"

finish
