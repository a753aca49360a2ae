#!/bin/bash
# The ensemble layer, ensemble(K) (TabM-mini; docs/TRAINING.md,
# docs/ENGINE.md): a tabular network that starts with it trains its K
# members, each with its own output layer, on their own losses and
# predicts their mean; it evaluates and predicts, the same weights run
# after run; a row's prediction is the same alone as among others; its
# scales are a model tensor (K, F) and its last dense layer (K, O, I); a
# warm start from it starts at its weights; int8 quantize and prune refuse
# it in one line naming the layer; bad specs are one-line usage errors
# naming the config line, exit code 2, leaving no run.
. "$E2E_LIB"

expect_rc 0 init
# wine: 13 numeric columns on very different scales, 3 classes.
expect_rc 0 data import wine "$TEST_DATA/wine.csv"

cat >"$WORK/e.ini" <<'INI'
name       = wine-ensemble
dataset    = wine
layers     = ensemble(8) dense(32) relu dense(3)
lr         = 0.003
batch      = 16
epochs     = 40
seed       = 5
threads    = 1
validation = 0.1
INI

# --- train, eval, predict ------------------------------------------------------
expect_rc 0 --json train "$WORK/e.ini"
acc=$(json_get 'j["metrics"]["test_accuracy"]')
hash1=$(json_get 'j["weights_hash"]')
scratch_run=$(json_get 'j["run"]')
at_least "$acc" 0.85 && pass || fail "wine test accuracy with ensemble(8): $acc < 0.85"
expect_rc 0 --json train "$WORK/e.ini"
expect_eq "$(json_get 'j["weights_hash"]')" "$hash1" "two runs give the same weights"
# Two threads: reproducible too (the ensemble's loops and sums give the
# same bits for any thread count; the dense layers for a fixed one).
expect_rc 0 --json train "$WORK/e.ini" --set threads=2
two=$(json_get 'j["weights_hash"]')
expect_rc 0 --json train "$WORK/e.ini" --set threads=2
expect_eq "$(json_get 'j["weights_hash"]')" "$two" "two runs on two threads give the same weights"

# The model's tensor table, as the independent reader of docs/STORE.md sees it.
READER="$(cd "$(dirname "$E2E_LIB")/../format" && pwd)/read_model.py"
/usr/bin/python3 "$READER" blob --store "$ANNEAL_HOME" --model wine-ensemble@v1 -o "$WORK/m.bin" || fail "reader: blob"
expect_eq "$(/usr/bin/python3 "$READER" info "$WORK/m.bin" | python3 -c \
  'import json,sys; print([(t["name"], t["dims"]) for t in json.load(sys.stdin)["tensors"] if "ensemble" in t["name"]])')" \
  "[('0.ensemble.scale', [8, 13])]" "the scales are tensor 0.ensemble.scale (K, F)"
expect_eq "$(/usr/bin/python3 "$READER" info "$WORK/m.bin" | python3 -c \
  'import json,sys; print([(t["name"], t["dims"]) for t in json.load(sys.stdin)["tensors"] if t["name"].startswith("2.")])')" \
  "[('2.dense.weight', [8, 3, 32]), ('2.dense.bias', [8, 3])]" "the last dense is the members' own: (K, O, I) and (K, O)"
serves_wine_model wine-ensemble@v1 "ensemble(8)" "$acc"

# --- kill -9 mid-training, then --resume: the uninterrupted run's weights -------
# (the members' scales, their own output layers and the Adam moments of
# both in the checkpoint; a dropout after the ensemble draws its masks from
# the step, so the resumed steps draw the ones the uninterrupted run drew).
if [ -x "${ANNEAL_FAULTS_BIN:-}" ]; then
  sed -e 's/^layers.*/layers = ensemble(4) dense(32) relu dropout(0.2) dense(3)/' -e 's/^name.*/name = wine-resume/' \
    "$WORK/e.ini" > "$WORK/r.ini"
  printf 'checkpoint_every = 20\nkeep_checkpoints = 2\n' >> "$WORK/r.ini"
  expect_rc 0 --json train "$WORK/r.ini"
  want=$(json_get 'j["weights_hash"]')
  ANNEAL_FAULT="checkpoint.committed@5=crash" "$ANNEAL_FAULTS_BIN" train "$WORK/r.ini" > /dev/null 2>&1
  expect_eq "$?" "137" "killed at the 5th checkpoint"
  killed=$(latest_run)
  expect_rc 0 --json train --resume "$killed"
  expect_eq "$(json_get 'j["weights_hash"]')" "$want" "resumed after kill -9: the uninterrupted weights"
  expect_rc 0 fsck
else
  fail "the fault build (ANNEAL_FAULTS_BIN) is missing: the kill test cannot run"
fi

# --- warm start: from the trained model's weights, scales included -------------
expect_rc 0 --json train "$WORK/e.ini" --set warm_start=wine-ensemble@v1 --set epochs=2
warm_starts_from wine-ensemble@v1 "$(json_get 'j["run"]')" "$scratch_run"
# Into another member count the scales do not fit: the warm start is
# refused, saying why, and the run trains from scratch (as for any change
# of layers: a nightly retrain goes on).
expect_rc 0 train "$WORK/e.ini" --set warm_start=wine-ensemble@v1 \
  --set 'layers=ensemble(4) dense(32) relu dense(3)' --set epochs=1
expect_contains "$ERR" "warm start from wine-ensemble@v1 refused: layers differ" "another K is another network"

# --- int8 and pruning: the layer has no dense/conv weights; refused by name ------
refuses_int8_and_pruning wine-ensemble@v1 "layer 1 'ensemble(8)'" ensemble

# --- bad specs: one line naming the config file's line, exit 2, no run ---------
expect_rc 0 --json runs list
runs_before=$(json_get 'len(j["runs"])')
bad_spec() {  # SPEC NEEDLE
  printf 'name    = wine-bad\ndataset = wine\nlayers  = %s dense(32) relu dense(3)\nepochs  = 1\n' "$1" >"$WORK/bad.ini"
  expect_error 2 "bad.ini:3: layers = $1 dense(32) relu dense(3): " train "$WORK/bad.ini"
  expect_contains "$ERR" "$2" "the error for layers = $1"
}
bad_spec 'ensemble(0)' "layer 1 'ensemble(0)': K must be a positive integer (usage: ensemble(K) with 1 <= K <= 256"
bad_spec 'ensemble(1000)' "layer 1 'ensemble(1000)': K must be at most 256"
bad_spec 'ensemble(x)' "'x' in 'ensemble(x)' is not a number"
bad_spec 'ensemble(4) ensemble(2)' "layer 2 'ensemble(2)': a network takes one ensemble layer, and layer 1 'ensemble(4)' is one"
bad_spec 'ensemble(4,members=2)' "layer 1 'ensemble(4,members=2)': has no option 'members'"
expect_rc 0 --json runs list
expect_eq "$(json_get 'len(j["runs"])')" "$runs_before" "bad specs leave no run behind"

finish
