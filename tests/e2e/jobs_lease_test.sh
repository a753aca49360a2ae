#!/bin/bash
# A worker that stalls past its lease (SIGSTOP here; a starved or blocked
# worker alike) loses the job to another worker, and exactly one run and one
# model come of it: the stalled attempt's writes are fenced by the job's
# claim generation, the new attempt waits for it to let go of the run, and
# the stalled worker, continued, finds the lease lost and records nothing.
# A job that kills its worker every time ends failed after its retries.
source "$E2E_LIB"
use_fault_build

cat > "$WORK/digits.ini" <<'INI'
name = digits-lease
dataset = digits@latest
layers = dense(64) relu dense(10)
loss = softmax_ce
optimizer = adam
lr = 0.001
batch = 32
epochs = 3
seed = 11
checkpoint_every = 20
INI

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
expect_rc 0 --json train "$WORK/digits.ini" --set threads=1 --set name=reference
reference=$(json_get "j['weights_hash']")

expect_rc 0 submit "$WORK/digits.ini" --cores 1 --retries 1
job=$OUT
# Worker 1's job stops after its first checkpoint; then worker 1 is stopped.
fault_fifos child1
ANNEAL_FAULT='checkpoint.committed@1=pause' "$ANNEAL" worker --cores 1 --lease 1s --drain \
  > "$WORK/w1.log" 2>&1 &
w1=$!
reached=$(fault_reached child1) || fail "worker 1's job never checkpointed"
child1=${reached##* }
kill -STOP "$w1"
wait_for_lease_expiry "$job"

# Worker 2 takes the job over; it stops right after its claim commits.
fault_fifos w2
ANNEAL_FAULT='job.claimed=pause' "$ANNEAL" worker --cores 1 --lease 1s --drain > "$WORK/w2.log" 2>&1 &
w2=$!
fault_reached w2 > /dev/null || fail "worker 2 never claimed the job"
expect_eq "$(job_field "$job" worker)" "$(hostname):$w2" "worker 2 holds the job"
expect_eq "$(job_field "$job" attempts)" "2" "the takeover is attempt 2"
fault_resume w2
# Worker 1's job goes on: its next checkpoint is refused (fenced) and it
# exits, letting go of the run, which worker 2's attempt waits for. (It stays
# a zombie until its stopped parent reaps it.)
fault_resume child1
wait "$w2"
expect_eq "$?" "0" "worker 2 drains"
kill -CONT "$w1"
wait "$w1"
expect_eq "$?" "0" "worker 1, continued, drains"

expect_eq "$(job_field "$job" state)" "succeeded" "the job succeeded"
expect_contains "$("$ANNEAL" jobs logs "$job")" "lost its lease" "the stalled attempt says why it stopped"
expect_contains "$(cat "$WORK/w1.log")" "$job" "worker 1 logged the job"
case "$(cat "$WORK/w1.log")" in *"$job succeeded"*) fail "worker 1 recorded an outcome" ;; *) pass ;; esac
run --json runs list
expect_eq "$(json_get "len([r for r in j['runs'] if r['name'] == 'digits-lease'])")" "1" "exactly one run"
run --json model list
expect_eq "$(json_get "len([m for m in j['models'] if m['name'] == 'digits-lease'])")" "1" "exactly one model"
run --json runs show "$(job_field "$job" run)"
expect_eq "$(json_get "j['summary']['weights_hash']")" "$reference" "weights equal an uninterrupted run's"
expect_rc 0 fsck

# --- a job that kills its worker every time ends failed -----------------------
expect_rc 0 submit "$WORK/digits.ini" --cores 1 --retries 1 --set name=killer
killer=$OUT
for attempt in 1 2; do
  ANNEAL_FAULT='job.claimed=crash' "$ANNEAL" worker --cores 1 --lease 1s > /dev/null 2>&1
  expect_eq "$?" "137" "worker $attempt died right after claiming"
  wait_for_lease_expiry "$killer"
done
"$ANNEAL" worker --cores 1 --lease 1s --drain > "$WORK/w3.log" 2>&1
expect_eq "$?" "0" "a third worker drains"
expect_eq "$(job_field "$killer" state)" "failed" "the job ended failed after its retries"
expect_contains "$(job_field "$killer" error)" "attempt 2 of 2" "and says its workers died"
expect_eq "$(job_field "$killer" attempts)" "2" "two attempts"

finish
