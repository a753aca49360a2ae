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
epochs           = 8
seed             = 5
threads          = 1
validation       = 0.1
checkpoint_every = 10
keep_checkpoints = 2
INI

start=$(date +%s%N)
expect_rc 0 --json train "$WORK/r.ini"
total_ms=$(( ($(date +%s%N) - start) / 1000000 ))
want=$(json_get 'j["weights_hash"]')
expect_eq "$(json_get 'j["status"]')" "succeeded" "uninterrupted run"
# A finished run keeps at most keep_checkpoints + the best one.
expect_rc 0 --json runs show run-1
n=$(json_get 'len(j["checkpoints"])')
[ "$n" -ge 1 ] && [ "$n" -le 3 ] && pass || fail "checkpoints kept: $n"

latest_run() { "$ANNEAL" --json runs list | python3 -c "import json,sys; print(json.load(sys.stdin)['runs'][-1]['id'])"; }

resumed=0
for attempt in 1 2 3 4; do
  delay_ms=$(( total_ms * attempt / 5 + RANDOM % 20 ))
  "$ANNEAL" train "$WORK/r.ini" >/dev/null 2>&1 &
  pid=$!
  sleep "$(awk "BEGIN { print $delay_ms / 1000 }")"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  run_id=$(latest_run)
  expect_rc 0 --json runs list
  status=$(json_get 'j["runs"][-1]["status"]')
  # Killed before it finished, the run still reads running (its process died).
  case "$status" in running|succeeded) pass ;; *) fail "status after kill -9: $status" ;; esac
  if [ "$status" = running ]; then
    expect_rc 0 --json train --resume "$run_id"
    expect_eq "$(json_get 'j["weights_hash"]')" "$want" "resume after kill at ${delay_ms} ms gives the uninterrupted weights"
    expect_eq "$(json_get 'j["run"]')" "$run_id" "resume continues the same run"
    resumed=$((resumed + 1))
  fi
  expect_rc 0 fsck
done

[ "$resumed" -ge 2 ] && pass || fail "only $resumed of 4 kills landed mid-run"

# A kill during a resume, and a resume again.
"$ANNEAL" train "$WORK/r.ini" >/dev/null 2>&1 &
pid=$!; sleep "$(awk "BEGIN { print $total_ms / 3000 }")"; kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
run_id=$(latest_run)
"$ANNEAL" train --resume "$run_id" >/dev/null 2>&1 &
pid=$!; sleep "$(awk "BEGIN { print $total_ms / 3000 }")"; kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
expect_rc 0 --json runs show "$run_id"
if [ "$(json_get 'j["status"]')" = running ]; then
  expect_rc 0 --json train --resume "$run_id"
  expect_eq "$(json_get 'j["weights_hash"]')" "$want" "kill during a resume, resumed again"
else
  pass
fi

# SIGTERM (and Ctrl-C, the same path): checkpoint, cancelled, resumable.
# A longer run, so the signal surely lands mid-run.
expect_rc 0 --json train "$WORK/r.ini" --set epochs=30
want30=$(json_get 'j["weights_hash"]')
"$ANNEAL" train "$WORK/r.ini" --set epochs=30 >/dev/null 2>"$WORK/term.err" &
pid=$!
sleep 1
kill -TERM "$pid"
wait "$pid"
rc=$?
run_id=$(latest_run)
expect_eq "$rc" "130" "a cancelled train exits 130"
expect_rc 0 --json runs show "$run_id"
expect_eq "$(json_get 'j["status"]')" "cancelled" "SIGTERM records the run cancelled"
expect_contains "$(json_get 'j["error"]')" "--resume $run_id" "the run says how to continue"
expect_rc 0 --json train --resume "$run_id"
expect_eq "$(json_get 'j["weights_hash"]')" "$want30" "resume after SIGTERM gives the uninterrupted weights"
expect_rc 2 train --resume "$run_id"
expect_contains "$ERR" "already succeeded" "a finished run cannot be resumed"
expect_rc 2 train "$WORK/r.ini" --resume "$run_id"

# Released checkpoints become garbage; gc keeps the live ones and models.
expect_rc 0 gc
expect_rc 0 fsck
expect_contains "$OUT" ": ok" "fsck after gc"
expect_rc 0 eval digits-resume@v1 digits
finish
