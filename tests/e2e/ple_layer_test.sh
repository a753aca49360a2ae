#!/bin/bash
# The piecewise-linear encoding, ple(T) (docs/TRAINING.md, docs/ENGINE.md):
# a tabular network that starts with it trains, evaluates and predicts, the
# same weights run after run; its edges are a model tensor (F, T + 1),
# fitted on the training rows before the first step (non-decreasing, each
# feature's least and greatest sampled value at its ends); a checkpoint
# keeps them, so a run killed with -9 resumes to the uninterrupted weights;
# a warm start keeps its parent's edges (its weights were trained on them)
# even on other rows, where a fresh run fits others; int8 quantize and prune
# refuse it in one line naming the layer; bad specs (and ple anywhere but
# first) are one-line usage errors naming the config line, exit code 2,
# leaving no run.
. "$E2E_LIB"

PY=/usr/bin/python3
READER_DIR="$(cd "$(dirname "$E2E_LIB")/../format" && pwd)"

expect_rc 0 init
# wine: 13 numeric columns on very different scales, 3 classes.
expect_rc 0 data import wine "$TEST_DATA/wine.csv"

cat >"$WORK/p.ini" <<'INI'
name       = wine-ple
dataset    = wine
layers     = ple(8) dense(32) relu dense(3)
lr         = 0.003
batch      = 16
epochs     = 40
seed       = 5
threads    = 1
validation = 0.1
INI

# edges REF: the model's edges tensor, as the independent reader of
# docs/STORE.md decodes it, one feature a line.
edges() {
  "$PY" "$READER_DIR/read_model.py" blob --store "$ANNEAL_HOME" --model "$1" -o "$WORK/edges.bin" \
    || fail "reader: blob $1"
  "$PY" - "$READER_DIR" "$WORK/edges.bin" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import read_model
header, tensors = read_model.load_model(sys.argv[2])
for row in tensors["0.ple.edges"]:
    print(" ".join(repr(float(v)) for v in row))
PY
}

# --- train, eval, predict ------------------------------------------------------
expect_rc 0 --json train "$WORK/p.ini"
acc=$(json_get 'j["metrics"]["test_accuracy"]')
hash1=$(json_get 'j["weights_hash"]')
scratch_run=$(json_get 'j["run"]')
at_least "$acc" 0.85 && pass || fail "wine test accuracy with ple(8): $acc < 0.85"
expect_rc 0 --json train "$WORK/p.ini"
expect_eq "$(json_get 'j["weights_hash"]')" "$hash1" "two runs give the same weights"
expect_rc 0 --json train "$WORK/p.ini" --set threads=2
two=$(json_get 'j["weights_hash"]')
expect_rc 0 --json train "$WORK/p.ini" --set threads=2
expect_eq "$(json_get 'j["weights_hash"]')" "$two" "two runs on two threads give the same weights"

# The tensor table, and the edges fitted on the training rows: 13 features,
# 9 edges each, non-decreasing, and (wine's columns have many distinct
# values) 9 distinct ones on every feature.
"$PY" "$READER_DIR/read_model.py" blob --store "$ANNEAL_HOME" --model wine-ple@v1 -o "$WORK/m.bin" || fail "reader: blob"
expect_eq "$("$PY" "$READER_DIR/read_model.py" info "$WORK/m.bin" | python3 -c \
  'import json,sys; print([(t["name"], t["dims"]) for t in json.load(sys.stdin)["tensors"] if "ple" in t["name"]])')" \
  "[('0.ple.edges', [13, 9])]" "the edges are tensor 0.ple.edges (F, T + 1)"
edges wine-ple@v1 >"$WORK/v1.edges"
python3 - "$WORK/v1.edges" <<'PY' && pass || fail "the edges are not quantiles of the training rows"
import sys
rows = [[float(v) for v in line.split()] for line in open(sys.argv[1])]
assert len(rows) == 13, len(rows)
for row in rows:
    assert all(a < b for a, b in zip(row, row[1:])), row  # 9 distinct, increasing
    assert row != [-2 + 4 * i / 8 for i in range(9)], "the unfitted start edges"
PY
serves_wine_model wine-ple@v1 "ple(8)" "$acc"
# Values far outside the fitted range (the first and last bins are open).
python3 - "$WORK/five.csv" >"$WORK/far.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
print(",".join(rows[0]))
print(",".join([str(float(v) * 100) for v in rows[1][:-1]] + [rows[1][-1]]))
print(",".join([str(-float(v) * 100) for v in rows[2][:-1]] + [rows[2][-1]]))
PY
expect_rc 0 predict wine-ple@v1 --input "$WORK/far.csv" -o "$WORK/far.out"
expect_eq "$(tail -n +2 "$WORK/far.out" | wc -l)" "2" "values far outside the fitted range are predicted"

# --- kill -9 mid-training, then --resume: the uninterrupted run's weights -------
# (the resumed trainer fits edges anew, then takes the checkpoint's).
if [ -x "${ANNEAL_FAULTS_BIN:-}" ]; then
  sed -e 's/^name.*/name = wine-resume/' -e 's/^layers.*/layers = ple(8) dense(32) relu dropout(0.2) dense(3)/' \
    "$WORK/p.ini" >"$WORK/r.ini"
  printf 'checkpoint_every = 20\nkeep_checkpoints = 2\n' >>"$WORK/r.ini"
  expect_rc 0 --json train "$WORK/r.ini"
  want=$(json_get 'j["weights_hash"]')
  ANNEAL_FAULT="checkpoint.committed@5=crash" "$ANNEAL_FAULTS_BIN" train "$WORK/r.ini" >/dev/null 2>&1
  expect_eq "$?" "137" "killed at the 5th checkpoint"
  killed=$(latest_run)
  expect_rc 0 --json train --resume "$killed"
  expect_eq "$(json_get 'j["weights_hash"]')" "$want" "resumed after kill -9: the uninterrupted weights"
  expect_rc 0 fsck
else
  fail "the fault build (ANNEAL_FAULTS_BIN) is missing: the kill test cannot run"
fi

# --- warm start: the parent's weights and edges, on other rows too --------------
# Every third row: the three classes, other quantiles.
awk 'NR == 1 || NR % 3 == 0' "$TEST_DATA/wine.csv" >"$WORK/wine-third.csv"
expect_rc 0 data import wine-third "$WORK/wine-third.csv"
expect_rc 0 --json train "$WORK/p.ini" --set dataset=wine-third --set warm_start=wine-ple@v1 --set epochs=2
warm_model=$(json_get 'j["model"]')
expect_eq "$(edges "$warm_model")" "$(cat "$WORK/v1.edges")" "a warm start keeps its parent's edges"
expect_rc 0 --json train "$WORK/p.ini" --set dataset=wine-third --set name=wine-ple-third --set epochs=2
fresh_model=$(json_get 'j["model"]')
[ "$(edges "$fresh_model")" != "$(cat "$WORK/v1.edges")" ] && pass \
  || fail "a fresh run on other rows fits other edges"
expect_rc 0 --json train "$WORK/p.ini" --set warm_start=wine-ple@v1 --set epochs=2
warm_starts_from wine-ple@v1 "$(json_get 'j["run"]')" "$scratch_run"

# --- int8 and pruning: the layer has no dense/conv weights; refused by name ------
refuses_int8_and_pruning wine-ple@v1 "layer 1 'ple(8)'" ple

# --- bad specs: one line naming the config file's line, exit 2, no run ---------
expect_rc 0 --json runs list
runs_before=$(json_get 'len(j["runs"])')
bad_spec() {  # LAYERS NEEDLE
  printf 'name    = wine-bad\ndataset = wine\nlayers  = %s relu dense(3)\nepochs  = 1\n' "$1" >"$WORK/bad.ini"
  expect_error 2 "bad.ini:3: layers = $1 relu dense(3): " train "$WORK/bad.ini"
  expect_contains "$ERR" "$2" "the error for layers = $1"
}
bad_spec 'ple(0) dense(32)' "layer 1 'ple(0)': T must be a positive integer (usage: ple(T)"
bad_spec 'ple(257) dense(32)' "layer 1 'ple(257)': T must be at most 256"
bad_spec 'ple(x) dense(32)' "'x' in 'ple(x)' is not a number"
bad_spec 'ple(4,2) dense(32)' "layer 1 'ple(4,2)': takes 0 to 1 positional arguments"
bad_spec 'ple(4,bins=2) dense(32)' "has no option 'bins'"
bad_spec 'dense(32) relu ple(4) dense(32)' "layer 3 'ple(4)' must be the network's first layer"
expect_rc 0 --json runs list
expect_eq "$(json_get 'len(j["runs"])')" "$runs_before" "bad specs leave no run behind"

finish
