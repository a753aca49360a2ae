#!/bin/bash
# Warm start (retrain --warm-start, config key warm_start): the first night
# trains from scratch with a note; the next night starts from the model that
# holds the alias, with its preprocessing, and records it as the parent; the
# same parent, data and seed give the same weights; a resume ends at the
# weights of an uninterrupted run even when the alias has moved meanwhile;
# an incompatible parent is refused in one line and the run is exactly a
# from-scratch run; a bad warm_start value is a usage error that leaves the
# store as it was.
. "$E2E_LIB"

expect_rc 0 init
# The first night's export: 60% of the rows.
head -n 1079 "$TEST_DATA/digits.csv" > "$WORK/digits-60.csv"
cat > "$WORK/w.ini" <<'INI'
name             = digits-ws
dataset          = digits
layers           = dense(64) relu dense(10)
lr               = 0.002
batch            = 32
epochs           = 6
seed             = 7
threads          = 1
validation       = 0.1
checkpoint_every = 20
keep_checkpoints = 2
INI

lineage() {  # MODEL EXPR: a Python expression over the model's lineage (as l)
  "$ANNEAL" --json model show "$1" | python3 -c "import json,sys; l=json.load(sys.stdin)['lineage']; print($2)"
}
runs_count() { "$ANNEAL" --json runs list | python3 -c "import json,sys; print(len(json.load(sys.stdin)['runs']))"; }
refusals() { printf '%s\n' "$ERR" | grep -c 'refused'; }
expect_one_line() { [ "$(printf '%s\n' "$ERR" | wc -l)" -eq 1 ] && pass || fail "$1: not one line: $ERR"; }

# --- the first night: the alias is not set yet, so from scratch ------------
expect_rc 0 --json retrain "$WORK/w.ini" --data "$WORK/digits-60.csv" --promote production --warm-start
expect_eq "$(json_get "j['outcome']")" "promoted" "the first night promotes"
expect_eq "$(json_get "j['model']")" "digits-ws@v1" "the first night registers v1"
expect_eq "$(json_get "j['parent']")" "None" "from no parent"
first_hash=$(json_get "j['weights_hash']")
expect_contains "$ERR" "warm start: digits-ws@production is not set yet; training from scratch" "the first night says so"
expect_eq "$(lineage digits-ws@v1 "l['warm_start'], l['warm_start_unset'], 'parent' in l")" \
  "False digits-ws@production False" "the first night's lineage: no parent, the unset alias"
expect_eq "$(lineage digits-ws@v1 "'warm_start' in l['config']")" "False" "the recorded config has no warm_start"
# From scratch means exactly the run without warm start.
expect_rc 0 --json train "$WORK/w.ini"
expect_eq "$(json_get "j['weights_hash']")" "$first_hash" "the first night is a from-scratch run"

# --- the next night: more rows, fewer epochs, from production ---------------
expect_rc 0 --json retrain "$WORK/w.ini" --data "$TEST_DATA/digits.csv" --promote production --warm-start \
  --set epochs=2
expect_eq "$(json_get "j['dataset']")" "digits@v2" "the next night imported the grown export"
expect_eq "$(json_get "j['model']")" "digits-ws@v3" "and trained v3"
expect_eq "$(json_get "j['parent']")" "digits-ws@v1" "from the model holding production"
warm_run=$(json_get "j['run']")
warm_hash=$(json_get "j['weights_hash']")
expect_eq "$(json_get "'test_accuracy' in j['metrics']")" "True" "test accuracy is recorded"
expect_contains "$ERR" "warm start from digits-ws@v1: its weights and preprocessing" "the run says where it starts"
expect_eq "$(lineage digits-ws@v3 "l['parent'], l['warm_start']")" "digits-ws@v1 True" "the lineage names the parent"
expect_contains "$(lineage digits-ws@v3 "l['config']")" "warm_start = digits-ws@v1" \
  "the recorded config names the exact parent, not the alias"
expect_rc 0 model show digits-ws@v3
expect_contains "$OUT" "digits-ws@v1" "model show shows the parent"
expect_rc 0 --json eval digits-ws@v3 digits@v2
expect_eq "$(json_get "j['dataset']")" "digits@v2" "the warm-started model evaluates"

# The same config from scratch on the same version starts far worse: the
# first epoch's training loss (a deterministic figure, not a timing).
expect_rc 0 --json train "$WORK/w.ini" --set epochs=2 --set dataset=digits@v2
scratch_run=$(json_get "j['run']")
warm_loss=$(epoch1_loss "$warm_run")
scratch_loss=$(epoch1_loss "$scratch_run")
python3 -c "import sys; sys.exit(0 if $warm_loss < 0.5 * $scratch_loss else 1)" && pass ||
  fail "first-epoch training loss: warm start $warm_loss, from scratch $scratch_loss"

# --- determinism: the config key gives the same weights as the flag ---------
expect_rc 0 --json train "$WORK/w.ini" --set epochs=2 --set dataset=digits@v2 --set warm_start=digits-ws@v1
expect_eq "$(json_get "j['weights_hash']")" "$warm_hash" "same parent, data and seed: same weights"

# --- resume: the same parent even after the alias moved ---------------------
# production now holds v3. Uninterrupted, from v3 by its exact name:
expect_rc 0 --json train "$WORK/w.ini" --set dataset=digits@v2 --set warm_start=digits-ws@v3
want=$(json_get "j['weights_hash']")
# Killed after its third checkpoint (step 60 of 246), and before its first.
for point in checkpoint.committed@3 checkpoint.prepared@1; do
  expect_rc 0 model alias set digits-ws@v3 production
  ANNEAL_FAULT="$point=crash" "$ANNEAL_FAULTS_BIN" train "$WORK/w.ini" --set dataset=digits@v2 \
    --set warm_start=production > /dev/null 2>&1
  expect_eq "$?" "137" "killed at $point"
  run_id=$(latest_run)
  # The alias moves on before the resume; the run keeps its parent.
  expect_rc 0 model alias set digits-ws@v1 production
  expect_rc 0 --json train --resume "$run_id"
  expect_eq "$(json_get "j['weights_hash']")" "$want" "resume after a kill at $point: the uninterrupted weights"
  model=$(json_get "j['model']")
  expect_eq "$(lineage "$model" "l['parent']")" "digits-ws@v3" "the resumed run's parent is the one it started from"
done

# --- incompatible parents: one line, then exactly a from-scratch run ---------
expect_rc 0 --json train "$WORK/w.ini" --set epochs=1 --set warm_start=production --set 'layers=dense(32) relu dense(10)'
refused_hash=$(json_get "j['weights_hash']")
model=$(json_get "j['model']")
expect_contains "$ERR" \
  "warm start from digits-ws@v1 refused: layers differ (parent: dense(64) relu dense(10); config: dense(32) relu dense(10)); training from scratch" \
  "other layers: refused, saying why"
expect_eq "$(refusals)" "1" "in one line"
expect_eq "$(lineage "$model" "l['warm_start'], l['warm_start_from'], 'parent' in l")" "False digits-ws@v1 False" \
  "the lineage records the refusal"
expect_contains "$(lineage "$model" "l['warm_start_refused']")" "layers differ" "and why"
expect_rc 0 --json train "$WORK/w.ini" --set epochs=1 --set 'layers=dense(32) relu dense(10)'
expect_eq "$(json_get "j['weights_hash']")" "$refused_hash" "a refused warm start is a from-scratch run"
# Spacing is no difference.
expect_rc 0 train "$WORK/w.ini" --set epochs=1 --set warm_start=production --set 'layers=dense( 64 )  relu dense(10)'
expect_contains "$ERR" "warm start from digits-ws@v1: its weights" "the same layers written differently"

# A column the parent used is gone.
cut -d, -f1-3,5- "$TEST_DATA/digits.csv" > "$WORK/cut.csv"
expect_rc 0 data import digits-cut "$WORK/cut.csv"
expect_rc 0 train "$WORK/w.ini" --set epochs=1 --set dataset=digits-cut --set warm_start=digits-ws@v1
expect_contains "$ERR" "warm start from digits-ws@v1 refused: column 'pixel_0_3' is missing from digits-cut@v1; training from scratch" \
  "a dropped column: refused, saying why"
expect_eq "$(refusals)" "1" "in one line"

# A column the parent used has another type now.
expect_rc 0 data import digits-cat "$TEST_DATA/digits.csv" --categorical pixel_0_3
expect_rc 0 train "$WORK/w.ini" --set epochs=1 --set dataset=digits-cat --set warm_start=digits-ws@v1
expect_contains "$ERR" "warm start from digits-ws@v1 refused: column 'pixel_0_3' is categorical in digits-cat@v1, numeric for the parent; training from scratch" \
  "a retyped column: refused, saying why"

# A linear model has no network weights. (A bf16 one has, its fp32 master
# weights: warm_start_bf16_test.sh, which needs a CPU with bf16.)
expect_rc 0 --json train "$WORK/w.ini" --set epochs=1 --set layers=linear
linear=$(json_get "j['model']")
expect_rc 0 train "$WORK/w.ini" --set epochs=1 --set warm_start="$linear"
expect_contains "$ERR" "warm start from $linear refused: it is a linear model" "a linear parent is refused"

# A class the parent never saw.
awk -F, 'BEGIN { OFS = "," } NR > 1 && NR <= 6 { $NF = 10 } { print }' "$TEST_DATA/digits.csv" > "$WORK/eleven.csv"
expect_rc 0 data import digits-11 "$WORK/eleven.csv"
expect_rc 0 train "$WORK/w.ini" --set epochs=1 --set dataset=digits-11 --set warm_start=digits-ws@v1 \
  --set 'layers=dense(64) relu dense(11)'
expect_contains "$ERR" "refused: layers differ" "the layer check comes first"
expect_rc 2 train "$WORK/w.ini" --set epochs=1 --set dataset=digits-11 --set warm_start=digits-ws@v1
expect_contains "$ERR" "warm start from digits-ws@v1 refused: class '10' of label 'digit' in digits-11@v1 is new to the parent" \
  "a new class: refused, saying why"
expect_contains "$ERR" "dense(11)" "and the config itself cannot train the new classes from scratch"

# --- the parent's preprocessing, kept rather than refitted ------------------
# Categorical columns: products that appear only in the grown export are
# categories the parent's one-hot encoding never saw. A warm-started model
# keeps that encoding (its weights only mean something with it), so they are
# unseen to it; a model trained from scratch fits its own and knows every
# category of its training rows (those only in the test split are unseen
# to it too, so the comparison is on the train split).
cut -d, -f4-10 "$TEST_DATA/sales.csv" > "$WORK/sales-all.csv"
head -n 801 "$WORK/sales-all.csv" > "$WORK/sales-early.csv"
cat > "$WORK/s.ini" <<'INI'
name    = sales-ws
dataset = sales
layers  = dense(16) relu dense(2)
batch   = 64
epochs  = 2
seed    = 1
threads = 1
INI
expect_rc 0 retrain "$WORK/s.ini" --data "$WORK/sales-early.csv" --promote production --warm-start
expect_rc 0 --json retrain "$WORK/s.ini" --data "$WORK/sales-all.csv" --promote production --warm-start
expect_eq "$(json_get "j['model']")" "sales-ws@v2" "the sales model's second night"
expect_contains "$ERR" "warm start from sales-ws@v1: its weights and preprocessing (" "the note counts unseen categories"
expect_contains "$ERR" "categories it never saw are encoded as unseen)" "as unseen"
expect_rc 0 --json eval sales-ws@v2 sales@v2 --split train
unseen_warm=$(json_get "j['unseen_categories']")
expect_rc 0 --json train "$WORK/s.ini"
scratch_model=$(json_get "j['model']")
expect_rc 0 --json eval "$scratch_model" sales@v2 --split train
expect_eq "$(json_get "j['unseen_categories']")" "0" "a from-scratch model fits its own categories"
[ "$unseen_warm" -gt 0 ] && pass || fail "the warm-started model kept the parent's categories: unseen $unseen_warm"

# The loss's class weights are tonight's config's, over tonight's rows; a
# changed feature key refuses the parent (its transform was fitted under
# the old one).
expect_rc 0 --json train "$WORK/s.ini" --set warm_start=sales-ws@v2 --set class_weight=balanced
expect_contains "$ERR" "warm start from sales-ws@v2: its weights and preprocessing" "class_weight: warm start used"
weighted=$(json_get "j['model']")
expect_rc 0 --json model show "$weighted"
expect_eq "$(json_get "sorted(j['lineage']['class_weights'].keys()), j['lineage']['parent']")" \
  "['no', 'yes'] sales-ws@v2" "a warm-started run weighs its classes as its config says"
expect_rc 0 --json train "$WORK/s.ini" --set warm_start=sales-ws@v2 --set exclude=region
expect_contains "$ERR" "warm start from sales-ws@v2 refused: exclude differs (parent: none; config: region); training from scratch" \
  "a changed feature key refuses the parent"

# --- a categorical label: classes matched by name, not by code --------------
# Reversed, the export lists virginica first: its dictionary codes differ
# from the parent's. A warm start barely trained (one epoch, a tiny learning
# rate) still classifies as the parent does.
iris_config "$WORK/iris.ini" iris-ws "epochs = 30"
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
expect_rc 0 train "$WORK/iris.ini"
{ head -n 1 "$TEST_DATA/iris.csv"; tail -n +2 "$TEST_DATA/iris.csv" | tac; } > "$WORK/iris-rev.csv"
expect_rc 0 data import iris-rev "$WORK/iris-rev.csv"
expect_rc 0 --json train "$WORK/iris.ini" --set dataset=iris-rev --set warm_start=iris-ws@v1 --set epochs=1 \
  --set lr=0.000001
acc=$("$ANNEAL" --json runs show "$(json_get "j['run']")" | python3 -c "import json,sys; print(json.load(sys.stdin)['epochs'][0]['train_accuracy'])")
python3 -c "import sys; sys.exit(0 if $acc > 0.9 else 1)" && pass || fail "warm start on reordered classes: train accuracy $acc"
# A class the parent never saw, by name.
awk -F, 'BEGIN { OFS = "," } NR >= 2 && NR <= 4 { $NF = "hybrid" } { print }' "$TEST_DATA/iris.csv" > "$WORK/iris-hybrid.csv"
expect_rc 0 data import iris-hybrid "$WORK/iris-hybrid.csv"
expect_rc 2 train "$WORK/iris.ini" --set dataset=iris-hybrid --set warm_start=iris-ws@v1
expect_contains "$ERR" "warm start from iris-ws@v1 refused: class 'hybrid' of label 'species' in iris-hybrid@v1 is new to the parent (3 classes); training from scratch" \
  "a new class by name: refused, saying why"

# --- bad values: one line naming where, nothing recorded ---------------------
before=$( (catalog_dump; cd "$ANNEAL_HOME" && find objects -type f | sort) | sha256sum)
runs_before=$(runs_count)
expect_rc 2 train "$WORK/w.ini" --set warm_start=digits-ws@v99
expect_eq "$ERR" "anneal: --set warm_start: warm_start = digits-ws@v99: model 'digits-ws' has no version v99" \
  "no such version"
expect_rc 2 train "$WORK/w.ini" --set warm_start=nosuch@production
expect_contains "$ERR" "--set warm_start: warm_start = nosuch@production: no model named 'nosuch'" "no such model"
expect_one_line "no such model"
expect_rc 2 train "$WORK/w.ini" --set 'warm_start=a@@b'
expect_contains "$ERR" "--set warm_start: warm_start = 'a@@b': expected an alias of 'digits-ws'" "a malformed ref"
expect_one_line "a malformed ref"
expect_rc 2 train "$WORK/w.ini" --set 'warm_start=v3'
expect_contains "$ERR" "warm_start = 'v3': expected" "a version is no alias"
expect_one_line "a version is no alias"
{ cat "$WORK/w.ini"; echo "warm_start = digits-ws@v42"; } > "$WORK/bad.ini"
expect_rc 2 train "$WORK/bad.ini"
expect_contains "$ERR" "bad.ini:12: warm_start = digits-ws@v42" "the error names the file and line"
expect_one_line "the error names the file and line"
expect_rc 2 retrain "$WORK/w.ini" --warm-start
expect_contains "$ERR" "--warm-start: give --promote ALIAS too" "--warm-start needs --promote"
expect_one_line "--warm-start needs --promote"
expect_rc 2 train --resume "$warm_run" --set warm_start=production
expect_contains "$ERR" "resumed run keeps its recorded config" "a resume keeps its parent"
expect_one_line "a resume keeps its parent"
expect_eq "$(runs_count)" "$runs_before" "bad values leave no run behind"
expect_eq "$( (catalog_dump; cd "$ANNEAL_HOME" && find objects -type f | sort) | sha256sum)" "$before" "the store as it was"

expect_rc 0 retrain --help
expect_contains "$OUT" "--warm-start" "retrain --help describes --warm-start"
expect_rc 0 fsck
expect_contains "$OUT" ": ok" "fsck after warm starts, kills and resumes"

# A pruned parent is no starting point. (Last: fsck reads a prune's run config
# as a training config and reports it.)
expect_rc 0 --json prune digits-ws@v1 --sparsity 0.5 --finetune-epochs 1 --threads 1
pruned=$(json_get "j['model']")
expect_rc 0 train "$WORK/w.ini" --set epochs=1 --set warm_start="$pruned"
expect_contains "$ERR" "warm start from $pruned refused: it was made by prune" "a pruned parent is refused"

finish
