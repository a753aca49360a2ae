#!/bin/bash
# Resume falls back to the newest checkpoint that verifies: with the latest
# checkpoint damaged it notes that and continues from the previous one;
# with every checkpoint damaged it starts from step 0. Either way the run
# ends with the weights of an uninterrupted run, and fsck is clean.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
cat >"$WORK/r.ini" <<'INI'
name             = digits-fb
dataset          = digits
layers           = dense(64) relu dense(10)
batch            = 32
epochs           = 4
seed             = 5
threads          = 1
validation       = 0.1
checkpoint_every = 20
keep_checkpoints = 2
INI
expect_rc 0 --json train "$WORK/r.ini"
want=$(json_get 'j["weights_hash"]')

sql() { python3 -c 'import sqlite3, sys
for row in sqlite3.connect(sys.argv[1]).execute(sys.argv[2]): print(*row)' "$ANNEAL_HOME/catalog.db" "$1"; }
# damage STEP...: flips a byte in every object of these checkpoints of the
# newest run that no other blob holds.
damage() {
  for step in "$@"; do
    for object in $(sql "SELECT c.object FROM blob_chunks c JOIN checkpoints k ON k.blob = c.blob
                         WHERE k.run_id = (SELECT MAX(id) FROM runs) AND k.step = $step
                         AND c.object NOT IN (SELECT object FROM blob_chunks WHERE blob != k.blob)"); do
      file="$ANNEAL_HOME/objects/${object:0:2}/$object"
      size=$(stat -c %s "$file")
      byte=$(od -An -tu1 -j $((size / 2)) -N1 "$file" | tr -d ' ')
      printf "$(printf '\\%03o' $((byte ^ 1)))" | dd of="$file" bs=1 seek=$((size / 2)) conv=notrunc status=none
    done
  done
}

# Killed right after its third checkpoint (step 60); that one is damaged.
ANNEAL_FAULT='checkpoint.committed@3=crash' "$ANNEAL_FAULTS_BIN" train "$WORK/r.ini" >/dev/null 2>&1
expect_eq "$(sql "SELECT status FROM runs WHERE id = 2")" "running" "the killed run"
expect_eq "$(sql "SELECT MAX(step) FROM checkpoints WHERE run_id = 2")" "60" "its latest checkpoint"
damage 60
expect_rc 0 --json train --resume run-2
expect_contains "$ERR" "run-2 checkpoint at step 60" "resume names the damaged checkpoint"
expect_contains "$ERR" "trying the one at step 40" "and falls back to the previous one"
expect_contains "$ERR" "continuing from step 40" "from which it continues"
expect_eq "$(json_get 'j["weights_hash"]')" "$want" "resume from the previous checkpoint gives the uninterrupted weights"
expect_rc 0 fsck
expect_contains "$OUT" ": ok" "fsck after the resume"

# Every checkpoint damaged: start over, with a note.
ANNEAL_FAULT='checkpoint.committed@2=crash' "$ANNEAL_FAULTS_BIN" train "$WORK/r.ini" >/dev/null 2>&1
damage $(sql "SELECT step FROM checkpoints WHERE run_id = 3")
expect_rc 0 --json train --resume run-3
expect_contains "$ERR" "no earlier checkpoint: starting from step 0" "no checkpoint verifies"
expect_eq "$(json_get 'j["weights_hash"]')" "$want" "a resume from step 0 gives the same weights"
expect_rc 0 fsck
expect_contains "$OUT" ": ok" "fsck after the restart"
finish
