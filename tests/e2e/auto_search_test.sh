#!/bin/bash
# layers = auto (issue 31): a config with only a name and a dataset searches
# the portfolio (linear, trees, networks) by successive halving, scoring
# trials by cross-validation, and registers the winner as an ordinary model
# of its kind (eval and predict work on it unchanged); the leaderboard is in
# the run's summary, `runs show` and its JSON; with a seed and max_trials the
# search repeats bit for bit, and with threads = 2 (or a job's 2 cores) its
# trials run two at a time with the same scores; image data and bad budget
# keys are refused in one line naming the key.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import wine "$TEST_DATA/wine.csv" --split 0.2
expect_rc 0 data import cancer "$TEST_DATA/breast_cancer.csv" --split 0.2

# Only a name and a dataset: layers = auto.
printf 'name = wine-auto\ndataset = wine\n' > "$WORK/auto.ini"
expect_rc 0 --json train "$WORK/auto.ini"
expect_eq "$(json_get 'j["model"]')" "wine-auto@v1" "the search registers a model"
# Published results on this table: 0.94 to 1.0 for any fitted model;
# always answering the majority class: 0.40.
expect_eq "$(json_get 'j["metrics"]["test_accuracy"] >= 0.85')" "True" "the chosen model learns the table"
run train "$WORK/auto.ini"
expect_contains "$ERR$OUT" "trial 1/" "each trial is reported"
expect_contains "$ERR$OUT" "5-fold cross-validation" "a small table is scored by 5-fold cross-validation"
expect_contains "$ERR$OUT" "scored best" "the run says which candidate won"

# The leaderboard: every trial with its kind, settings, score, fold scores,
# seconds and rung; the winner is one of them, and the model is of its kind.
expect_rc 0 --json runs show run-1
expect_eq "$(json_get 'j["summary"]["search"]["scoring"]')" "5-fold cross-validation" "the scoring is recorded"
expect_eq "$(json_get 'all(set(t) >= {"trial", "kind", "settings", "score", "fold_scores", "seconds", "rung"} for t in j["summary"]["search"]["trials"])')" \
  "True" "every trial records its kind, settings, score, fold scores, seconds and rung"
expect_eq "$(json_get 'all(len(t["fold_scores"]) == 5 for t in j["summary"]["search"]["trials"])')" "True" \
  "every trial has its 5 fold scores"
expect_eq "$(json_get 'all(abs(sum(t["fold_scores"]) / 5 - t["score"]) < 1e-12 for t in j["summary"]["search"]["trials"])')" \
  "True" "a trial's score is the mean of its fold scores"
expect_eq "$(json_get 'sorted(set(t["kind"] for t in j["summary"]["search"]["trials"]))[0]')" "linear" \
  "the linear model is among the trials"
expect_eq "$(json_get '"trees" in set(t["kind"] for t in j["summary"]["search"]["trials"])')" "True" \
  "trees are among the trials"
kind=$(json_get 'j["summary"]["search"]["trials"][j["summary"]["search"]["winner"]]["kind"]')
expect_eq "$(json_get 'j["config"].splitlines()[[l.split(" = ")[0] for l in j["config"].splitlines()].index("layers")]')" \
  "layers = auto" "the run records the config it was given: layers = auto"
expect_rc 0 runs show run-1
expect_contains "$OUT" "search: " "runs show has the leaderboard"
expect_contains "$OUT" "RUNG" "the leaderboard has its columns"
expect_rc 0 --json model show wine-auto@v1
layers=$(json_get '[l for l in j["lineage"]["config"].splitlines() if l.startswith("layers = ")][0]')
case "$kind:$layers" in
  "linear:layers = linear" | "trees:layers = trees" | "network:layers = dense("*) pass ;;
  *) fail "the model's lineage config ($layers) is not the winning kind ($kind)" ;;
esac
expect_contains "$(json_get 'j["lineage"]["search_config"]')" "layers = auto" "the lineage keeps the search's config"

# An ordinary model: eval reproduces the run's test score, predict works.
expect_rc 0 --json runs show run-1
test_acc=$(json_get 'j["summary"]["metrics"]["test_accuracy"]')
expect_rc 0 --json eval wine-auto@v1 wine
expect_eq "$(json_get 'j["metrics"]["accuracy"]')" "$test_acc" "eval reproduces the run's test accuracy"
expect_rc 0 predict wine-auto@v1 --input "$TEST_DATA/wine.csv" -o "$WORK/p.csv"
expect_eq "$(($(wc -l < "$WORK/p.csv") - 1))" "178" "predict writes one row per input row"
# The report shows the leaderboard.
expect_rc 0 runs report run-1 -o "$WORK/report.html"
grep -q 'id="search"' "$WORK/report.html" && pass || fail "the run report lacks the leaderboard"

# A fixed seed and max_trials: the same trials, scores and weights, twice.
cat > "$WORK/budgeted.ini" <<'INI'
name       = cancer-auto
dataset    = cancer
seed       = 5
max_trials = 9
threads    = 1
INI
expect_rc 0 --json train "$WORK/budgeted.ini"
hash1=$(json_get 'j["weights_hash"]')
run1=$(json_get 'j["run"]')
expect_rc 0 --json train "$WORK/budgeted.ini"
expect_eq "$(json_get 'j["weights_hash"]')" "$hash1" "a trial-budgeted search repeats bit for bit"
run2=$(json_get 'j["run"]')
expect_rc 0 --json runs show "$run1"
board1=$(json_get '[(t["kind"], t["settings"], t["rung"], t["score"], t["fold_scores"]) for t in j["summary"]["search"]["trials"]]')
expect_eq "$(json_get 'len(j["summary"]["search"]["trials"])')" "9" "max_trials = 9 runs 9 trials"
expect_eq "$(json_get 'j["summary"]["search"]["skipped_by"]')" "max_trials" "the leaderboard says what cut the search"
expect_rc 0 --json runs show "$run2"
expect_eq "$(json_get '[(t["kind"], t["settings"], t["rung"], t["score"], t["fold_scores"]) for t in j["summary"]["search"]["trials"]]')" \
  "$board1" "the two searches ran the same trials with the same scores"
run train "$WORK/budgeted.ini"
expect_contains "$ERR$OUT" "max_trials = 9:" "the run says max_trials cut the portfolio"

# threads = 2: the trials run two at a time, each on one thread, so each
# trial's training is the one threads = 1 runs: the same trials, in the
# same order, with the same scores.
run --json train "$WORK/budgeted.ini" --set threads=2
expect_eq "$RC" "0" "a parallel search trains; stderr: $ERR"
expect_rc 0 --json runs show "$(latest_run)"
expect_eq "$(json_get '[(t["kind"], t["settings"], t["rung"], t["score"], t["fold_scores"]) for t in j["summary"]["search"]["trials"]]')" \
  "$board1" "trials run two at a time give the one-at-a-time leaderboard"
run train "$WORK/budgeted.ini" --set threads=2
expect_contains "$ERR$OUT" "trials run 2 at a time" "the run says its trials run in parallel"
# Under `anneal submit`, the job's cores are its threads: its trials run
# as the worker's parallel work within that quota.
if [ "$(nproc)" -ge 2 ]; then
  expect_rc 0 submit "$WORK/budgeted.ini" --cores 2
  job=$OUT
  expect_rc 0 worker --cores 2 --drain
  expect_rc 0 jobs logs "$job"
  expect_contains "$OUT" "trials run 2 at a time" "the job's search runs its trials within its 2 cores"
  expect_rc 0 --json runs show "$(latest_run)"
  expect_eq "$(json_get '[(t["kind"], t["settings"], t["rung"], t["score"], t["fold_scores"]) for t in j["summary"]["search"]["trials"]]')" \
    "$board1" "the job's parallel search has the one-at-a-time leaderboard"
else
  echo "auto_search_test: one CPU here; the submit --cores 2 check needs two" >&2
fi

# Refusals, each one line naming the key.
python3 - "$WORK/images.idx" "$WORK/labels.idx" <<'PY'
import struct, sys
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack(">IIII", 0x803, 20, 2, 2) + bytes(range(80)))
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack(">II", 0x801, 20) + bytes(i % 2 for i in range(20)))
PY
expect_rc 0 data import tiny "$WORK/images.idx" --labels "$WORK/labels.idx"
expect_rc 2 train "$WORK/auto.ini" --set dataset=tiny
expect_contains "$ERR" "layers = auto: the search chooses among models for tabular (CSV/TSV) data" "image data is refused"
expect_contains "$ERR" "write a layer spec" "the refusal says what to do"
expect_eq "$(printf '%s\n' "$ERR" | grep -c '^anneal: ')" "1" "the image refusal is one line"
expect_rc 2 train "$WORK/auto.ini" --set time_budget=soon
expect_contains "$ERR" "time_budget = 'soon': expected a duration" "a bad time_budget names the key"
expect_eq "$(printf '%s\n' "$ERR" | grep -c '^anneal: ')" "1" "the time_budget error is one line"
printf 'name = x\ndataset = wine\ntime_budget = -5m\n' > "$WORK/bad.ini"
expect_rc 2 train "$WORK/bad.ini"
expect_contains "$ERR" "bad.ini:3: time_budget = '-5m'" "a bad time_budget in the file names its line"
expect_rc 2 train "$WORK/auto.ini" --set max_trials=many
expect_contains "$ERR" "max_trials = 'many'" "a bad max_trials names the key"
expect_rc 2 train "$WORK/auto.ini" --set folds=1
expect_contains "$ERR" "folds = '1'" "a bad folds names the key"
expect_rc 2 train "$WORK/auto.ini" --set warm_start=wine-auto@v1
expect_contains "$ERR" "warm_start: layers = auto searches from scratch" "auto refuses a warm start"
expect_eq "$(printf '%s\n' "$ERR" | grep -c '^anneal: ')" "1" "the warm start refusal is one line"
# None of the refused runs registered a model.
expect_rc 0 --json model list
expect_eq "$(json_get 'sorted(set(m["name"] for m in j["models"]))')" "['cancer-auto', 'wine-auto']" \
  "refused runs register nothing"

finish
