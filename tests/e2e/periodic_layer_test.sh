#!/bin/bash
# The periodic embedding layer, periodic(K[,sigma=S]) (docs/TRAINING.md,
# docs/ENGINE.md): a tabular network that starts with it trains, evaluates
# and predicts, the same weights run after run; its frequencies are a model
# tensor (F, K); a warm start from it starts at its weights; int8 quantize
# and prune refuse it in one line naming the layer; bad specs are one-line
# usage errors naming the config line, exit code 2, leaving no run.
. "$E2E_LIB"

expect_rc 0 init
# wine: 13 numeric columns on very different scales, 3 classes.
expect_rc 0 data import wine "$TEST_DATA/wine.csv"

cat >"$WORK/p.ini" <<'INI'
name       = wine-periodic
dataset    = wine
layers     = periodic(8) dense(32) relu dense(3)
lr         = 0.003
batch      = 16
epochs     = 40
seed       = 5
threads    = 1
validation = 0.1
INI

# --- train, eval, predict ------------------------------------------------------
expect_rc 0 --json train "$WORK/p.ini"
acc=$(json_get 'j["metrics"]["test_accuracy"]')
hash1=$(json_get 'j["weights_hash"]')
scratch_run=$(json_get 'j["run"]')
at_least "$acc" 0.85 && pass || fail "wine test accuracy with periodic(8): $acc < 0.85"
expect_rc 0 --json train "$WORK/p.ini"
expect_eq "$(json_get 'j["weights_hash"]')" "$hash1" "two runs give the same weights"

# The model's tensor table, as the independent reader of docs/STORE.md sees it.
READER="$(cd "$(dirname "$E2E_LIB")/../format" && pwd)/read_model.py"
/usr/bin/python3 "$READER" blob --store "$ANNEAL_HOME" --model wine-periodic@v1 -o "$WORK/m.bin" || fail "reader: blob"
expect_eq "$(/usr/bin/python3 "$READER" info "$WORK/m.bin" | python3 -c \
  'import json,sys; print([(t["name"], t["dims"]) for t in json.load(sys.stdin)["tensors"] if "periodic" in t["name"]])')" \
  "[('0.periodic.frequencies', [13, 8])]" "the frequencies are tensor 0.periodic.frequencies (F, K)"
serves_wine_model wine-periodic@v1 "periodic(8)" "$acc"

# --- warm start: from the trained model's weights, frequencies included ---------
expect_rc 0 --json train "$WORK/p.ini" --set warm_start=wine-periodic@v1 --set epochs=2
warm_starts_from wine-periodic@v1 "$(json_get 'j["run"]')" "$scratch_run"

# --- int8 and pruning: the layer has no dense/conv weights; refused by name ------
refuses_int8_and_pruning wine-periodic@v1 "layer 1 'periodic(8)'" periodic

# --- bad specs: one line naming the config file's line, exit 2, no run ---------
expect_rc 0 --json runs list
runs_before=$(json_get 'len(j["runs"])')
bad_spec() {  # SPEC NEEDLE
  printf 'name    = wine-bad\ndataset = wine\nlayers  = %s dense(32) relu dense(3)\nepochs  = 1\n' "$1" >"$WORK/bad.ini"
  expect_error 2 "bad.ini:3: layers = $1 dense(32) relu dense(3): " train "$WORK/bad.ini"
  expect_contains "$ERR" "$2" "the error for layers = $1"
}
bad_spec 'periodic(0)' "layer 1 'periodic(0)': K must be a positive integer (usage: periodic(K[,sigma=S])"
bad_spec 'periodic(x)' "'x' in 'periodic(x)' is not a number"
bad_spec 'periodic(4,-1)' "layer 1 'periodic(4,-1)': takes 0 to 1 positional arguments"
bad_spec 'periodic(4,sigma=-1)' "layer 1 'periodic(4,sigma=-1)': sigma must be a number > 0"
bad_spec 'periodic(4,sigma=0)' "sigma must be a number > 0"
bad_spec 'periodic(4,freq=2)' "has no option 'freq'"
bad_spec 'periodic(4' "'4 dense(32' in 'periodic(4 dense(32)' is not a number"
expect_rc 0 --json runs list
expect_eq "$(json_get 'len(j["runs"])')" "$runs_before" "bad specs leave no run behind"

finish
