#!/bin/bash
# kill -9 of a worker in the middle of a job: its child dies with it, the
# lease expires, a restarted worker resumes the run from its checkpoint, and
# the final weights hash equals an uninterrupted run's.
source "$E2E_LIB"

cat > "$WORK/digits.ini" <<'EOF'
name = digits-job
dataset = digits@latest
layers = dense(128) relu dense(10)
loss = softmax_ce
optimizer = adam
lr = 0.001
batch = 32
epochs = 60
seed = 7
checkpoint_every = 20
EOF

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"

# The reference: the same config trained directly, with the job's one thread.
expect_rc 0 --json train "$WORK/digits.ini" --set threads=1
reference=$(json_get "j['weights_hash']")

expect_rc 0 submit "$WORK/digits.ini" --cores 1 --retries 1
job=$OUT
# The job's process stops right after its second checkpoint (fault point of
# the test build), whatever the machine's speed; the worker is killed there.
fault_fifos
ANNEAL_FAULT='checkpoint.committed@2=pause' "$ANNEAL_FAULTS_BIN" worker --cores 1 --lease 2s \
  > "$WORK/w1.log" 2>&1 &
w1=$!
reached=$(fault_reached) || fail "the job never wrote its second checkpoint"
child=${reached##* }
expect_contains "$reached" "checkpoint.committed" "the job paused after a checkpoint"
kill -9 "$w1"
wait "$w1" 2>/dev/null
# The child asked for SIGKILL on its parent's death: nothing trains on.
wait_gone "$child" && pass || fail "the job's process outlived its worker"
expect_eq "$(job_field "$job" state)" "running" "the job still reads running"
step_before=$("$ANNEAL" --json runs show "$(job_field "$job" run)" | python3 -c "import json,sys; print(json.load(sys.stdin)['checkpoints'][-1]['step'])")
expect_eq "$step_before" "40" "the last checkpoint is the second one"

# A new worker takes the job over once the dead one's lease (2s) expires;
# until then the job is held as if its worker lived, and --drain would not
# wait for it.
wait_for_lease_expiry "$job"
"$ANNEAL" worker --cores 1 --lease 2s --drain > "$WORK/w2.log" 2>&1
expect_eq "$?" "0" "the second worker drains"
expect_eq "$(job_field "$job" state)" "succeeded" "the job finished"
expect_eq "$(job_field "$job" attempts)" "2" "the dead worker's attempt counts"
expect_contains "$(cat "$WORK/w2.log")" "$job (digits-job) started" "the second worker ran it"
expect_contains "$("$ANNEAL" jobs logs "$job")" "continuing from step $step_before" "it resumed from the checkpoint"
run --json runs show "$(job_field "$job" run)"
expect_eq "$(json_get "j['summary']['weights_hash']")" "$reference" "weights equal an uninterrupted run's"
run --json runs list
expect_eq "$(json_get "len(j['runs'])")" "2" "the job kept its one run (plus the reference)"
expect_rc 0 fsck

finish
