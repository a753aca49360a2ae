#!/bin/bash
# kill -9 of a training run at several moments, then --resume: the weights
# end bitwise identical to a run never interrupted. Also Ctrl-C (SIGINT):
# the run checkpoints, reads cancelled, and resumes to the same weights.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
cat >"$WORK/r.ini" <<'INI'
name             = digits-resume
dataset          = digits
layers           = dense(128) relu dropout(0.1) dense(64) relu dense(10)
lr               = 0.002
batch            = 16
epochs           = 20
seed             = 5
threads          = 1
validation       = 0.1
checkpoint_every = 50
keep_checkpoints = 2
INI

expect_rc 0 --json train "$WORK/r.ini"
want=$(json_get 'j["weights_hash"]')
expect_eq "$(json_get 'j["status"]')" "succeeded" "uninterrupted run"
# A finished run keeps at most keep_checkpoints + the best one.
expect_rc 0 --json runs show run-1
n=$(json_get 'len(j["checkpoints"])')
[ "$n" -ge 1 ] && [ "$n" -le 3 ] && pass || fail "checkpoints kept: $n"

# The kills land at fault points of the test build (include/anneal/
# fault_point.h), so each one hits the moment it names on any machine:
# POINT@N is the Nth time the process gets there (a checkpoint every 50 of
# the run's 1620 steps).
# killed_at POINT ARGS...: runs anneal ARGS, killed (SIGKILL) at POINT.
killed_at() {
  ANNEAL_FAULT="$1=crash" "$ANNEAL_FAULTS_BIN" "${@:2}" > /dev/null 2>&1
  RC=$?
}

resume_matches() {  # RUN LABEL: resumes RUN, checks it ends at the uninterrupted weights
  expect_rc 0 --json train --resume "$1"
  expect_eq "$(json_get 'j["weights_hash"]')" "$want" "$2"
  expect_eq "$(json_get 'j["run"]')" "$1" "$2: the same run continues"
}

# Early, middle and late, after a checkpoint's catalog commit, between its
# objects and its commit, and in the middle of its object writes.
for point in checkpoint.committed@8 checkpoint.objects-written@16 objects.tmp-written@24 checkpoint.committed@30; do
  killed_at "$point" train "$WORK/r.ini"
  expect_eq "$RC" "137" "killed at $point"
  run_id=$(latest_run)
  expect_rc 0 --json runs show "$run_id"
  # Killed before it finished, the run still reads running (its process died).
  expect_eq "$(json_get 'j["status"]')" "running" "after a kill at $point the run reads running"
  resume_matches "$run_id" "resume after a kill at $point"
  expect_rc 0 fsck
done

# A kill during a resume, and a resume again.
killed_at checkpoint.committed@6 train "$WORK/r.ini"
run_id=$(latest_run)
killed_at checkpoint.committed@12 train --resume "$run_id"
expect_eq "$RC" "137" "the resume was killed too"
resume_matches "$run_id" "kill during a resume, resumed again"

# SIGTERM (and Ctrl-C, the same path): checkpoint, cancelled, resumable. The
# run stops at its 12th checkpoint; the signal lands while it waits there.
fault_fifos
ANNEAL_FAULT='checkpoint.committed@12=pause' "$ANNEAL_FAULTS_BIN" train "$WORK/r.ini" > /dev/null 2>&1 &
trainer=$!
fault_reached > /dev/null || fail "training never reached its 12th checkpoint"
kill -TERM "$trainer"
fault_resume
wait "$trainer"
RC=$?
run_id=$(latest_run)
expect_eq "$RC" "130" "a cancelled train exits 130"
expect_rc 0 --json runs show "$run_id"
expect_eq "$(json_get 'j["status"]')" "cancelled" "SIGTERM records the run cancelled"
expect_contains "$(json_get 'j["error"]')" "resuming $run_id continues it" "the run says how to continue"
resume_matches "$run_id" "resume after SIGTERM"
expect_rc 2 train --resume "$run_id"
expect_contains "$ERR" "already succeeded" "a finished run cannot be resumed"
expect_rc 2 train "$WORK/r.ini" --resume "$run_id"

# Released checkpoints become garbage; gc keeps the live ones and models.
expect_rc 0 gc
expect_rc 0 fsck
expect_contains "$OUT" ": ok" "fsck after gc"
expect_rc 0 eval digits-resume@v1 digits
finish
