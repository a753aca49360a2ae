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

latest_run() { "$ANNEAL" --json runs list | python3 -c "import json,sys; print(json.load(sys.stdin)['runs'][-1]['id'])"; }

# run_signalled STEP SIGNAL ARGS...: runs anneal ARGS and, as soon as the
# newest run is running with a checkpoint at step >= STEP, sends it SIGNAL,
# so the signal lands mid-run. Reads the catalog directly (docs/TRAINING.md,
# schema 2), polling every 2 ms. Sets RC to anneal's exit status (negative:
# killed by that signal).
run_signalled() {
  RC=$(python3 - "$ANNEAL_HOME/catalog.db" "$ANNEAL" "$@" <<'PY'
import signal, sqlite3, subprocess, sys, time
db, anneal, step, sig = sys.argv[1], sys.argv[2], int(sys.argv[3]), getattr(signal, "SIG" + sys.argv[4])
proc = subprocess.Popen([anneal] + sys.argv[5:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while proc.poll() is None:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        row = con.execute("SELECT r.status, MAX(c.step) FROM runs r LEFT JOIN checkpoints c ON c.run_id = r.id "
                          "GROUP BY r.id ORDER BY r.id DESC LIMIT 1").fetchone()
        con.close()
    except sqlite3.Error:
        row = None
    if row and row[0] == "running" and (row[1] or 0) >= step:
        proc.send_signal(sig)
        break
    time.sleep(0.002)
print(proc.wait())
PY
)
}

resumed=0
for attempt in 1 2 3; do
  # Spread the kills over the training: early, middle, late (1620 steps).
  at_step=$(( attempt * 400 ))
  run_signalled "$at_step" KILL train "$WORK/r.ini"
  run_id=$(latest_run)
  expect_rc 0 --json runs list
  status=$(json_get 'j["runs"][-1]["status"]')
  # Killed before it finished, the run still reads running (its process died).
  case "$status" in running|succeeded) pass ;; *) fail "status after kill -9: $status" ;; esac
  if [ "$status" = running ]; then
    expect_rc 0 --json train --resume "$run_id"
    expect_eq "$(json_get 'j["weights_hash"]')" "$want" "resume after kill past step ${at_step} gives the uninterrupted weights"
    expect_eq "$(json_get 'j["run"]')" "$run_id" "resume continues the same run"
    resumed=$((resumed + 1))
  fi
  expect_rc 0 fsck
done
[ "$resumed" -ge 2 ] && pass || fail "only $resumed of 3 kills landed mid-run"

# A kill during a resume, and a resume again.
run_signalled 300 KILL train "$WORK/r.ini"
run_id=$(latest_run)
run_signalled 900 KILL train --resume "$run_id"
expect_rc 0 --json runs show "$run_id"
if [ "$(json_get 'j["status"]')" = running ]; then
  expect_rc 0 --json train --resume "$run_id"
  expect_eq "$(json_get 'j["weights_hash"]')" "$want" "kill during a resume, resumed again"
else
  pass
fi

# SIGTERM (and Ctrl-C, the same path): checkpoint, cancelled, resumable.
# A signal that arrives as the last steps finish cannot cancel anything; try
# again then (the other runs are just more succeeded runs).
for try in 1 2 3; do
  run_signalled 600 TERM train "$WORK/r.ini"
  [ "$RC" = 130 ] && break
done
run_id=$(latest_run)
expect_eq "$RC" "130" "a cancelled train exits 130"
expect_rc 0 --json runs show "$run_id"
expect_eq "$(json_get 'j["status"]')" "cancelled" "SIGTERM records the run cancelled"
expect_contains "$(json_get 'j["error"]')" "--resume $run_id" "the run says how to continue"
expect_rc 0 --json train --resume "$run_id"
expect_eq "$(json_get 'j["weights_hash"]')" "$want" "resume after SIGTERM gives the uninterrupted weights"
expect_rc 2 train --resume "$run_id"
expect_contains "$ERR" "already succeeded" "a finished run cannot be resumed"
expect_rc 2 train "$WORK/r.ini" --resume "$run_id"

# Released checkpoints become garbage; gc keeps the live ones and models.
expect_rc 0 gc
expect_rc 0 fsck
expect_contains "$OUT" ": ok" "fsck after gc"
expect_rc 0 eval digits-resume@v1 digits
finish
