#!/bin/bash
# Training end to end on the small tabular sets: accuracy, determinism,
# the records a run leaves, eval, predict and the linear model.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import bc "$TEST_DATA/breast_cancer.csv"
expect_rc 0 data import digits "$TEST_DATA/digits.csv"

cat >"$WORK/bc.ini" <<'INI'
name    = bc-mlp
dataset = bc
layers  = dense(32) relu dense(2)
loss    = softmax_ce
lr      = 0.001
batch   = 32
epochs  = 20
seed    = 3
threads = 1
INI
cat >"$WORK/digits.ini" <<'INI'
name       = digits-mlp
dataset    = digits@latest
layers     = dense(64) relu dense(10)
optimizer  = adam
lr         = 0.003
batch      = 32
epochs     = 10
seed       = 1
threads    = 1
validation = 0.1
INI


# breast_cancer: >= 95% test accuracy, and the linear baseline beside it.
expect_rc 0 --json train "$WORK/bc.ini"
bc_acc=$(json_get 'j["metrics"]["test_accuracy"]')
at_least "$bc_acc" 0.95 && pass || fail "breast_cancer test accuracy $bc_acc < 0.95"
expect_eq "$(json_get 'j["model"]')" "bc-mlp@v1" "first model version"
expect_eq "$(json_get 'j["run"]')" "run-1" "first run id"
baseline=$(json_get 'j["metrics"]["baseline_test_accuracy"]')
at_least "$baseline" 0.9 && pass || fail "linear baseline accuracy $baseline"
json_get '"test_roc_auc" in j["metrics"]' | grep -q True && pass || fail "binary task reports ROC AUC"
at_least "$(json_get 'j["samples_per_s"]')" 1 && pass || fail "samples/s reported"

# digits: >= 95%, validation metrics, and the same weights when run twice.
expect_rc 0 --json train "$WORK/digits.ini"
d_acc=$(json_get 'j["metrics"]["test_accuracy"]')
hash1=$(json_get 'j["weights_hash"]')
at_least "$d_acc" 0.95 && pass || fail "digits test accuracy $d_acc < 0.95"
json_get '"val_accuracy" in j["metrics"] and "val_loss" in j["metrics"]' | grep -q True && pass || fail "val_* metrics with validation"
expect_rc 0 --json train "$WORK/digits.ini"
expect_eq "$(json_get 'j["weights_hash"]')" "$hash1" "two runs give the same weights"
expect_eq "$(json_get 'j["model"]')" "digits-mlp@v2" "second run registers v2"
# --set wins over the file and changes the result.
expect_rc 0 --json train "$WORK/digits.ini" --set seed=2
[ "$(json_get 'j["weights_hash"]')" != "$hash1" ] && pass || fail "--set seed=2 changes the weights"
expect_eq "$(json_get 'j["model"]')" "digits-mlp@v3" "third version"

# What the catalog keeps: runs, metric history, models with lineage.
expect_rc 0 --json runs list
expect_eq "$(json_get 'len(j["runs"])')" "4" "four runs recorded"
expect_eq "$(json_get '",".join(r["status"] for r in j["runs"])')" "succeeded,succeeded,succeeded,succeeded" "all succeeded"
expect_rc 0 runs show run-2
expect_contains "$OUT" "val_accuracy" "runs show has the metric history"
expect_contains "$OUT" "dataset = digits@v1" "the recorded config names the exact version"
expect_eq "$(printf '%s\n' "$OUT" | grep -cE '^(10|[1-9]) ')" "10" "one history row per epoch"
expect_rc 0 --json runs show 2
expect_eq "$(json_get 'len(j["epochs"])')" "10" "ten epochs as JSON"
expect_rc 0 model list
expect_contains "$OUT" "digits-mlp@v3" "model list"
expect_rc 0 --json model show digits-mlp@v1
expect_eq "$(json_get 'j["lineage"]["dataset"]')" "digits@v1" "lineage: dataset version"
expect_eq "$(json_get 'j["lineage"]["seed"]')" "1" "lineage: seed"
expect_eq "$(json_get 'j["lineage"]["run"]')" "run-2" "lineage: parent run"
json_get 'all(k in j["lineage"] for k in ("anneal_version","anneal_commit","host","isa","config"))' | grep -q True \
  && pass || fail "lineage: version, commit, host, ISA, config"
expect_rc 0 --json model show digits-mlp
expect_eq "$(json_get 'j["ref"]')" "digits-mlp@v3" "NAME means the latest"
expect_rc 1 model show digits-mlp@v9
expect_contains "$ERR" "no version v9" "missing model version named"

# eval: the same accuracy the run reported, a confusion matrix.
expect_rc 0 --json eval digits-mlp@v1 digits
expect_eq "$(json_get 'j["metrics"]["accuracy"]')" "$d_acc" "eval reproduces the run's test accuracy"
expect_eq "$(json_get 'j["split"]')" "test" "eval defaults to the test split"
confusion_rows=$(json_get 'sum(map(sum, j["metrics"]["confusion"]))')
expect_rc 0 --json data show digits
expect_eq "$confusion_rows" "$(json_get 'j["test_rows"]')" "confusion matrix covers the test rows"
expect_rc 0 eval bc-mlp bc --split all
expect_contains "$OUT" "ROC AUC" "binary eval prints ROC AUC"
expect_contains "$OUT" "malignant" "confusion matrix names the classes"
expect_rc 2 eval bc-mlp bc --split sideways

# predict: header-matched columns, the label column absent, any order.
python3 - "$TEST_DATA/breast_cancer.csv" "$WORK/bc_in.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
header = rows[0][:-1][::-1]          # features only, reversed order
with open(sys.argv[2], "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(header)
    for r in rows[1:]:
        w.writerow(r[:-1][::-1])
PY
expect_rc 0 --json predict bc-mlp --input "$WORK/bc_in.csv" -o "$WORK/pred.csv"
expect_eq "$(json_get 'j["rows"]')" "569" "predicted every row"
expect_eq "$(head -1 "$WORK/pred.csv")" "row,prediction,p_malignant,p_benign" "prediction header"
agree=$(python3 - "$TEST_DATA/breast_cancer.csv" "$WORK/pred.csv" <<'PY'
import csv, sys
truth = [r[-1] for r in list(csv.reader(open(sys.argv[1])))[1:]]
pred = [r[1] for r in list(csv.reader(open(sys.argv[2])))[1:]]
print(sum(a == b for a, b in zip(truth, pred)) / len(truth))
PY
)
at_least "$agree" 0.95 && pass || fail "predictions agree with the labels: $agree"
expect_rc 2 predict bc-mlp --input "$WORK/bc_in.csv" -o "$WORK/pred.csv"
expect_contains "$ERR" "file exists" "predict refuses to overwrite"
cut -d, -f2- "$WORK/bc_in.csv" >"$WORK/bc_missing.csv"
expect_rc 2 predict bc-mlp --input "$WORK/bc_missing.csv" -o "$WORK/pred2.csv"
expect_contains "$ERR" "missing column" "a missing column is named"

# layers = linear: the regularized linear model alone is the model.
expect_rc 0 --json train "$WORK/bc.ini" --set layers=linear --set name=bc-linear
lin=$(json_get 'j["metrics"]["test_accuracy"]')
at_least "$lin" 0.95 && pass || fail "linear model accuracy $lin"
expect_rc 0 --json eval bc-linear bc
expect_eq "$(json_get 'j["metrics"]["accuracy"]')" "$lin" "eval of the linear model matches"

# Models and checkpoints survive gc; the store stays consistent.
expect_rc 0 gc
expect_rc 0 fsck
expect_contains "$OUT" ": ok" "fsck after training and gc"
expect_rc 0 eval digits-mlp@v1 digits
finish
