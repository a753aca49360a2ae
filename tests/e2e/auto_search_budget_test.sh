#!/bin/bash
# layers = auto under a time budget (issue 31; docs/TRAINING.md, "The
# budget"): a network candidate with no trial of its own is projected from
# the network nearest it in work, scaled by the work (TabM-mini, 32 times
# the width-256 MLP); one projected past the budget is not started, nor is
# any after it in its rung, and the search goes on to its next rung with
# the best of those that ran. A resume of such a search takes the cut as
# its records show it.
#
# The width-256 MLP's trial (the 9th, one at a time) is held at the fault
# point auto.trial-fitted, inside its measured time, for 4 seconds: it then
# takes at least 4 s whatever the machine's speed, so TabM-mini is
# projected at 128 s or more, past the 100 s budget, while the other trials
# on wine's 142 rows take a few seconds. What the checks ask of the later
# rungs holds on a slow machine too: that rung 1 starts (a few seconds
# into a 100 s budget), not that the last rung fits.
. "$E2E_LIB"
use_fault_build

expect_rc 0 init
expect_rc 0 data import wine "$TEST_DATA/wine.csv" --split 0.2
cat > "$WORK/auto.ini" <<'INI'
name        = wine-budget
dataset     = wine
seed        = 11
time_budget = 100s
threads     = 1
INI

# held_search OUT ERR ARGS...: runs ARGS with the 9th trial held for 4 s
# (and whatever else $EXTRA_FAULT arms); sets RC.
held_search() {
  local out=$1 err=$2
  shift 2
  fault_fifos
  ANNEAL_FAULT="auto.trial-fitted@9=pause${EXTRA_FAULT:+;$EXTRA_FAULT}" "$ANNEAL" "$@" > "$out" 2> "$err" &
  local pid=$!
  expect_contains "$(fault_reached)" "auto.trial-fitted" "the 9th trial is held"
  sleep 4
  fault_resume
  wait "$pid"
  RC=$?
}

# The trials' (candidate, rung) and what the search says of its cut.
board() { json_get '[(t["settings"].get("hidden", t["kind"]), t["rung"]) for t in j["summary"]["search"]["trials"]]'; }

held_search "$WORK/one.out" "$WORK/one.err" train "$WORK/auto.ini"
expect_eq "$RC" "0" "the held search ends; stderr: $(cat "$WORK/one.err")"
log=$(cat "$WORK/one.err")
expect_contains "$log" "trial 9/14: network dense(256) relu dense(256) relu" "the 9th trial is the width-256 MLP"
expect_contains "$log" "time_budget = 100s: " "the run says the budget left trials out"
case "$log" in *"trial "*"ensemble(32)"*) fail "TabM-mini trained past its projection: $log" ;; *) pass ;; esac
expect_contains "$log" "trial 10/14: " "the search went on after the cut"
run_id=$(latest_run)
expect_rc 0 --json runs show "$run_id"
expect_eq "$(json_get 'j["summary"]["search"]["skipped_by"]')" "time_budget" "the leaderboard says the budget cut it"
expect_eq "$(json_get 'j["summary"]["search"]["skipped"] >= 1')" "True" "trials of 14 not run"
expect_eq "$(json_get 'sum(1 for t in j["summary"]["search"]["trials"] if t["rung"] == 0)')" "9" \
  "rung 0: the linear model, six trees and two networks"
expect_eq "$(json_get 'j["summary"]["search"]["trials"][9]["rung"]')" "1" "rung 1 went on after the cut"
one_board=$(board)
first_ten=$(json_get '[(t["settings"].get("hidden", t["kind"]), t["rung"]) for t in j["summary"]["search"]["trials"][:10]]')
case "$one_board" in *"ensemble(32)"*) fail "TabM-mini in the leaderboard: $one_board" ;; *) pass ;; esac
expect_eq "$(json_get 'j["status"]')" "succeeded" "the run succeeded"

# Killed right after the first trial of rung 1 was recorded (the 10th), the
# run resumes: the records show rung 0 cut after 9 trials, so the resume
# goes on at rung 1 and trains no TabM-mini.
EXTRA_FAULT="auto.trial@10=crash" held_search "$WORK/two.out" "$WORK/two.err" train "$WORK/auto.ini"
expect_eq "$RC" "137" "killed after the 10th trial's record"
run_id=$(latest_run)
expect_rc 0 --json runs show "$run_id"
expect_eq "$(json_get 'j["checkpoints"][-1]["step"]')" "10" "10 trials recorded"
run train --resume "$run_id"
expect_eq "$RC" "0" "the cut search resumes; stderr: $ERR"
expect_contains "$ERR$OUT" "the search's first 10 trials finished before" "the resume takes the 10 trials"
case "$ERR$OUT" in *"trial "*"ensemble(32)"* | *"trial 9/"* | *"trial 10/"*)
  fail "the resume ran TabM-mini or a finished trial: $ERR" ;; *) pass ;; esac
expect_rc 0 --json runs show "$run_id"
expect_eq "$(json_get 'j["status"]')" "succeeded" "the resumed run succeeded"
# The first 10 trials, recorded before the kill, are the uninterrupted
# held search's (what came after them depends on the clock).
expect_eq "$(json_get '[(t["settings"].get("hidden", t["kind"]), t["rung"]) for t in j["summary"]["search"]["trials"][:10]]')" \
  "$first_ten" "the resumed search's recorded trials are the uninterrupted held search's"
case "$(board)" in *"ensemble(32)"*) fail "TabM-mini in the resumed leaderboard: $(board)" ;; *) pass ;; esac

finish
