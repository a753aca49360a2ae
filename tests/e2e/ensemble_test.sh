#!/bin/bash
# layers = auto registers a weighted ensemble of its best trials when the
# ensemble validates better than the best single trial (issue 31): the
# model kind "ensemble" through its lifecycle. The run says so, the
# leaderboard and the lineage name the members and weights, eval
# reproduces the run's scores, predict answers, a binary ensemble gets its
# decision threshold; quantize, prune and a warm start refuse it in one
# line (a warm start: a note, then from scratch); `ensemble = false` registers the single best; the same seed and
# max_trials repeat it bit for bit; killed while its members train, a
# resume ends at the same model; the search's metric follows
# threshold_metric. (ONNX Runtime's agreement: onnx_export_test.sh.)
. "$E2E_LIB"

TABULAR="$TEST_DATA/../../bench/data/tabular"
expect_rc 0 init
# Ozone (R's mlbench, 288 training rows): daily maximum ozone, regression.
expect_rc 0 data import ozone "$TABULAR/Ozone.train.csv.zst" --test "$TABULAR/Ozone.test.csv.zst" --label V4
expect_rc 0 data import cancer "$TEST_DATA/breast_cancer.csv" --split 0.2

# Seeds and budgets under which the search's ensemble scores above its best
# single trial on these tables (found by running them; any seed may choose
# either, and the tests below check whichever it chose against the record).
cat > "$WORK/ozone.ini" <<'INI'
name       = ozone-auto
dataset    = ozone
loss       = mse
seed       = 1
max_trials = 14
threads    = 1
INI
run train "$WORK/ozone.ini"
expect_eq "$RC" "0" "the search trains; stderr: $ERR"
expect_contains "$ERR$OUT" "search: a weighted ensemble of" "the run says an ensemble scored best"
expect_contains "$ERR$OUT" "ensemble member 1/" "the run reports each member as it trains"
expect_rc 0 --json model show ozone-auto@v1
members=$(json_get 'len(j["lineage"]["ensemble"])')
# Each network member refit once per bag (bags, default 5): the models.
models=$(json_get 'sum(m["bags"] for m in j["lineage"]["ensemble"])')
expect_eq "$(json_get 'all(m["bags"] == (5 if m["kind"] == "network" else 1) for m in j["lineage"]["ensemble"])')" \
  "True" "each network member was refit with the default 5 seeds, the others once"
expect_eq "$(json_get 'len(j["lineage"]["ensemble"]) >= 2')" "True" "the lineage lists the members"
expect_eq "$(json_get 'abs(sum(m["weight"] for m in j["lineage"]["ensemble"]) - 1) < 1e-9')" "True" \
  "the members' weights sum to 1"
expect_eq "$(json_get 'all(set(m) >= {"trial", "kind", "settings", "weight", "bags"} for m in j["lineage"]["ensemble"])')" \
  "True" "each member names its trial, kind, settings, weight and bags"
expect_contains "$(json_get 'j["lineage"]["config"]')" "layers = auto" \
  "an ensemble's lineage config is the search's (no one config trains it)"
expect_rc 0 --json runs show run-1
expect_eq "$(json_get 'j["summary"]["search"]["ensemble"]["chosen"]')" "True" "the leaderboard records the choice"
expect_eq "$(json_get 'j["summary"]["search"]["ensemble"]["score"] > j["summary"]["search"]["trials"][j["summary"]["search"]["winner"]]["score"]')" \
  "True" "the ensemble scored above the best single trial"
expect_eq "$(json_get 'len(j["summary"]["search"]["ensemble"]["fold_scores"])')" "5" "the ensemble has a score per fold"
test_r2=$(json_get 'j["summary"]["metrics"]["test_r2"]')
hash=$(json_get 'j["summary"]["weights_hash"]')
expect_rc 0 runs show run-1
expect_contains "$OUT" "<- ensemble" "runs show marks the members"
expect_contains "$OUT" "ensemble of $members trials: score" "runs show gives the ensemble's score"
expect_rc 0 runs report run-1 -o "$WORK/report.html"
grep -q "Ensemble selection weighed" "$WORK/report.html" && pass || fail "the report lacks the ensemble"

# An ordinary model from here: eval, predict, bench.
expect_rc 0 --json eval ozone-auto@v1 ozone --split test
expect_eq "$(json_get 'j["metrics"]["r2"]')" "$test_r2" "eval reproduces the run's test R²"
zstd -dc "$TABULAR/Ozone.test.csv.zst" > "$WORK/ozone-test.csv"
expect_rc 0 predict ozone-auto@v1 --input "$WORK/ozone-test.csv" -o "$WORK/p.csv"
expect_eq "$(($(wc -l < "$WORK/p.csv") - 1))" "$(($(wc -l < "$WORK/ozone-test.csv") - 1))" \
  "predict writes one row per input row"
expect_rc 0 --json bench ozone-auto@v1 --seconds 0.2 --repeats 1 --threads 1
expect_contains "$OUT" "ensemble (" "bench runs the ensemble's members"

# What cannot be derived from an ensemble: one line each, exit 2.
before=$(store_state)
expect_rc 2 quantize ozone-auto@v1 --int8 --calib ozone
expect_contains "$ERR" "ensemble of $models models, not one network to quantize" "quantize says why"
expect_eq "$(printf '%s\n' "$ERR" | grep -c '^anneal: ')" "1" "the quantize refusal is one line"
expect_rc 2 prune ozone-auto@v1 --sparsity 0.5
expect_contains "$ERR" "not one network to prune" "prune says why"
expect_eq "$(store_state)" "$before" "the refusals left the store as it was"
# A warm start from it is refused with a note, as from any parent it
# cannot continue, and the run trains from scratch.
printf 'name = ozone-warm\ndataset = ozone\nloss = mse\nlayers = trees\nwarm_start = ozone-auto@v1\n' > "$WORK/warm.ini"
expect_rc 0 train "$WORK/warm.ini"
expect_contains "$ERR$OUT" "warm start from ozone-auto@v1 refused: it is an ensemble of $models models; a warm start continues one model" \
  "a warm start says why"

# ensemble = false: the single best trial, as before ensembles.
expect_rc 0 --json train "$WORK/ozone.ini" --set ensemble=false --set name=ozone-single
expect_rc 0 --json model show ozone-single@v1
expect_eq "$(json_get '"ensemble" in j["lineage"]')" "False" "ensemble = false registers one model"
expect_rc 0 --json runs show "$(latest_run)"
expect_eq "$(json_get 'j["summary"]["search"]["ensemble"]["note"]')" "ensemble = none" "the leaderboard says why"

# The same seed and max_trials: the same ensemble, bit for bit.
expect_rc 0 --json train "$WORK/ozone.ini"
expect_eq "$(json_get 'j["weights_hash"]')" "$hash" "a trial-budgeted ensemble repeats bit for bit"

# Killed while its members train (after the first member, at the
# auto.member fault point of the test build): a resume takes the search's
# recorded trials and held-out predictions and ends at the same ensemble.
ANNEAL_FAULT="auto.member@1=crash" "$ANNEAL_FAULTS_BIN" train "$WORK/ozone.ini" > /dev/null 2>&1
expect_eq "$?" "137" "killed after the first member"
resumes_to "$(latest_run)" 14 "$hash" "the killed ensemble run"

# A binary ensemble with validation rows: its decision threshold is chosen
# on them, as any binary model's, and eval answers by it.
cat > "$WORK/cancer.ini" <<'INI'
name       = cancer-auto
dataset    = cancer
seed       = 6
max_trials = 14
validation = 0.1
threads    = 1
INI
run train "$WORK/cancer.ini"
expect_eq "$RC" "0" "the binary search trains; stderr: $ERR"
expect_contains "$ERR$OUT" "search: a weighted ensemble of" "an ensemble scored best on the binary table"
expect_contains "$ERR$OUT" "decision threshold" "the binary ensemble's threshold is chosen"
expect_rc 0 --json runs show "$(latest_run)"
test_acc=$(json_get 'j["summary"]["metrics"]["test_accuracy"]')
expect_eq "$(json_get 'j["summary"]["search"]["metric"]')" "accuracy" "a balanced table's search scores accuracy"
expect_rc 0 --json eval cancer-auto@v1 cancer
expect_eq "$(json_get 'j["metrics"]["accuracy"]')" "$test_acc" "eval reproduces the binary ensemble's accuracy"

# The search scores by the metric threshold_metric names.
expect_rc 0 --json train "$WORK/cancer.ini" --set threshold_metric=balanced_accuracy --set max_trials=3 --set name=cancer-bal
expect_rc 0 --json runs show "$(latest_run)"
expect_eq "$(json_get 'j["summary"]["search"]["metric"]')" "balanced_accuracy" \
  "threshold_metric = balanced_accuracy: the search scores balanced accuracy"
expect_eq "$(json_get 'j["summary"]["search"]["trials"][0]["score"] == sum(j["summary"]["search"]["trials"][0]["fold_scores"]) / 5')" \
  "True" "the trials' scores are of that metric"
expect_rc 2 train "$WORK/cancer.ini" --set ensemble=maybe
expect_contains "$ERR" "ensemble = 'maybe'" "a bad ensemble value names the key"

expect_rc 0 fsck
finish
