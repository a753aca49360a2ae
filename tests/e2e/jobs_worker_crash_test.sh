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

has_checkpoint() {
  local run
  run=$(job_field "$job" run)
  [ -n "$run" ] && [ "$("$ANNEAL" --json runs show "$run" | python3 -c "import json,sys; print(len(json.load(sys.stdin)['checkpoints']))")" -ge 2 ]
}

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"

# The reference: the same config trained directly, with the job's one thread.
expect_rc 0 --json train "$WORK/digits.ini" --set threads=1
reference=$(json_get "j['weights_hash']")

expect_rc 0 submit "$WORK/digits.ini" --cores 1
job=$OUT
"$ANNEAL" worker --cores 1 --lease 2s > "$WORK/w1.log" 2>&1 &
w1=$!
wait_until 60 has_checkpoint || fail "the job never wrote a checkpoint"
child=$(pgrep -f "job-exec $job\$")
kill -9 "$w1"
wait "$w1" 2>/dev/null
# The child asked for SIGKILL on its parent's death: nothing trains on.
wait_until 10 bash -c "! kill -0 $child 2>/dev/null" && pass || fail "the job's process outlived its worker"
expect_eq "$(job_field "$job" state)" "running" "the job still reads running"
step_before=$("$ANNEAL" --json runs show "$(job_field "$job" run)" | python3 -c "import json,sys; print(json.load(sys.stdin)['checkpoints'][-1]['step'])")

# A new worker takes the job over once the dead one's lease (2s) expires;
# until then the job is held as if its worker lived, and --drain would not
# wait for it.
sleep 2.5
"$ANNEAL" worker --cores 1 --lease 2s --drain > "$WORK/w2.log" 2>&1
expect_eq "$?" "0" "the second worker drains"
expect_eq "$(job_field "$job" state)" "succeeded" "the job finished"
expect_eq "$(job_field "$job" attempts)" "1" "a worker's death does not spend an attempt"
expect_contains "$(cat "$WORK/w2.log")" "$job (digits-job) started" "the second worker ran it"
expect_contains "$("$ANNEAL" jobs logs "$job")" "continuing from step $step_before" "it resumed from the checkpoint"
run --json runs show "$(job_field "$job" run)"
expect_eq "$(json_get "j['summary']['weights_hash']")" "$reference" "weights equal an uninterrupted run's"
run --json runs list
expect_eq "$(json_get "len(j['runs'])")" "2" "the job kept its one run (plus the reference)"
expect_rc 0 fsck

finish
