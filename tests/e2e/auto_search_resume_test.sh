#!/bin/bash
# layers = auto, killed mid-search (issue 31): each finished trial is
# recorded as the search goes, so `train --resume` skips the trials that
# finished and ends at the model an uninterrupted search registers, bit for
# bit. The kills are SIGKILL at the fault point reached right after a
# trial's record commits (auto.trial), in the test build.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import wine "$TEST_DATA/wine.csv" --split 0.2
cat > "$WORK/auto.ini" <<'INI'
name       = wine-auto
dataset    = wine
seed       = 11
max_trials = 12
threads    = 1
INI

# Uninterrupted: the weights and the leaderboard to end at.
expect_rc 0 --json train "$WORK/auto.ini"
want=$(json_get 'j["weights_hash"]')
expect_rc 0 --json runs show run-1
board=$(json_get '[(t["kind"], t["settings"], t["rung"], t["score"], t["fold_scores"]) for t in j["summary"]["search"]["trials"]]')
expect_eq "$(json_get 'len(j["summary"]["search"]["trials"])')" "12" "the uninterrupted search ran 12 trials"

killed_at() {  # POINT ARGS...: runs the test build with ARGS, killed (SIGKILL) at POINT
  ANNEAL_FAULT="$1=crash" "$ANNEAL_FAULTS_BIN" "${@:2}" > /dev/null 2>&1
  RC=$?
}

# Killed after its 3rd trial was recorded.
killed_at auto.trial@3 train "$WORK/auto.ini"
expect_eq "$RC" "137" "killed after the 3rd trial"
run_id=$(latest_run)
expect_rc 0 --json runs show "$run_id"
expect_eq "$(json_get 'j["status"]')" "running" "the killed run reads running"
expect_eq "$(json_get 'j["checkpoints"][-1]["step"]')" "3" "the 3 finished trials are recorded"
expect_rc 0 --json train --resume "$run_id"
expect_eq "$(json_get 'j["run"]')" "$run_id" "the same run continues"
expect_eq "$(json_get 'j["weights_hash"]')" "$want" "the resumed search registers the uninterrupted model"
expect_rc 0 --json runs show "$run_id"
expect_eq "$(json_get '[(t["kind"], t["settings"], t["rung"], t["score"], t["fold_scores"]) for t in j["summary"]["search"]["trials"]]')" \
  "$board" "the resumed search's leaderboard is the uninterrupted one"

# Which trials a resume runs: none of the finished ones. Killed after its
# 5th trial; then a resume killed after its own 3rd (the 8th), resumed again.
killed_at auto.trial@5 train "$WORK/auto.ini"
run_id=$(latest_run)
killed_at auto.trial@3 train --resume "$run_id"
expect_eq "$RC" "137" "the resume was killed too"
expect_rc 0 --json runs show "$run_id"
expect_eq "$(json_get 'j["checkpoints"][-1]["step"]')" "8" "5 trials, then 3 more, are recorded"
run train --resume "$run_id"
expect_eq "$RC" "0" "resumed again"
expect_contains "$ERR$OUT" "the search's first 8 trials finished before" "the resume says what it takes as done"
expect_contains "$ERR$OUT" "trial 9/" "the resume runs the 9th trial"
case "$ERR$OUT" in *"trial 8/"* | *"trial 1/"*) fail "the resume repeated a finished trial: $ERR$OUT" ;; *) pass ;; esac
expect_rc 0 --json runs show "$run_id"
expect_eq "$(json_get 'j["summary"]["weights_hash"]')" "$want" "killed twice, it still ends at the uninterrupted model"

# Trials two at a time (threads = 2): killed after the 4th trial's record,
# a resume ends at the uninterrupted parallel search's model, whose
# leaderboard is the one-at-a-time search's.
expect_rc 0 --json train "$WORK/auto.ini" --set threads=2
want2=$(json_get 'j["weights_hash"]')
killed_at auto.trial@4 train "$WORK/auto.ini" --set threads=2
expect_eq "$RC" "137" "the parallel search was killed after its 4th trial"
run_id=$(latest_run)
expect_rc 0 --json train --resume "$run_id"
expect_eq "$(json_get 'j["weights_hash"]')" "$want2" "the resumed parallel search registers the uninterrupted model"
expect_rc 0 --json runs show "$run_id"
expect_eq "$(json_get '[(t["kind"], t["settings"], t["rung"], t["score"], t["fold_scores"]) for t in j["summary"]["search"]["trials"]]')" \
  "$board" "the resumed parallel search's leaderboard is the one-at-a-time one"

# The kills left the store consistent.
expect_rc 0 fsck
finish
