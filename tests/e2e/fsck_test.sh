#!/bin/bash
# fsck checks everything a store holds and finishes: an object header that
# claims 2^40 bytes, unparsable JSON columns, a stream whose shape does not
# match its bytes, model and checkpoint blobs that do not decode, a config
# that no longer parses are each one BROKEN line naming the row or object
# and its owner (exit 1), all in one run; runs and jobs left running by a
# dead process are NOTE lines (exit 0).
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
iris_config "$WORK/m.ini" iris-m "epochs = 3" "checkpoint_every = 5" "keep_checkpoints = 2"
expect_rc 0 train "$WORK/m.ini"
expect_rc 0 fsck
expect_contains "$OUT" ": ok" "a fresh store is clean"

sql() { python3 - "$ANNEAL_HOME/catalog.db" "$1" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute(sys.argv[2]).fetchall()
db.commit()
for row in rows: print("|".join(str(v) for v in row))
PY
}

# An object header claiming 2^40 bytes: reported as that object's damage
# (the reader must not try to allocate a terabyte), and fsck finishes.
object=$(sql "SELECT c.object FROM blob_chunks c JOIN dataset_streams s ON s.blob = c.blob WHERE s.role = 'source' LIMIT 1")
file="$ANNEAL_HOME/objects/${object:0:2}/$object"
cp "$file" "$WORK/saved-object"
printf '\x00\x00\x00\x00\x00\x01\x00\x00' | dd of="$file" bs=1 seek=8 conv=notrunc status=none
expect_rc 1 fsck
expect_contains "$OUT" "BROKEN object $object (dataset iris@v1 (source)): header claims 1099511627776 bytes" \
  "fsck names the object with the huge header and its owner"
expect_contains "$OUT" "1 problems" "only that object is damaged"
cp "$WORK/saved-object" "$file"
expect_rc 0 fsck

# Several kinds of damage at once: each is one line, and fsck goes on past
# every one of them.
# A consistent copy of the catalog (WAL included) and its restore.
backup() { python3 -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))' "$1" "$2"; }
backup "$ANNEAL_HOME/catalog.db" "$WORK/catalog.saved"
labels=$(sql "SELECT blob FROM dataset_streams WHERE role = 'labels'")
model_blob=$(sql "SELECT blob FROM models")
last_step=$(sql "SELECT MAX(step) FROM checkpoints")
first_step=$(sql "SELECT MIN(step) FROM checkpoints")
sql "UPDATE dataset_versions SET schema_json = '{\"columns\": [', options_json = '[]'" >/dev/null
sql "UPDATE dataset_streams SET shape = '[7, 2]' WHERE role = 'features'" >/dev/null
sql "UPDATE runs SET summary_json = 'not json', config_text = 'layerz = dense(3)'" >/dev/null
sql "UPDATE models SET lineage_json = '{', metrics_json = '3', blob = '$labels'" >/dev/null
sql "UPDATE checkpoints SET blob = '$model_blob' WHERE step = $last_step" >/dev/null
sql "UPDATE checkpoints SET step = step + 1000 WHERE step = $first_step" >/dev/null
expect_rc 1 fsck
expect_contains "$OUT" "BROKEN dataset iris@v1: schema_json is not valid JSON" "a broken schema"
expect_contains "$OUT" "BROKEN dataset iris@v1: options_json is not a JSON object" "options of the wrong type"
expect_contains "$OUT" "BROKEN dataset iris@v1 (features): shape [7, 2] of f32 needs 56 bytes, its blob holds" \
  "a shape that does not match the stream's bytes"
expect_contains "$OUT" "BROKEN run-1: summary_json is not valid JSON" "a broken run summary"
expect_contains "$OUT" "BROKEN run-1: its recorded config does not parse" "a config resume could not read"
expect_contains "$OUT" "BROKEN model iris-m@v1: lineage_json is not valid JSON" "a broken lineage"
expect_contains "$OUT" "BROKEN model iris-m@v1: metrics_json is not a JSON object" "metrics of the wrong type"
expect_contains "$OUT" "BROKEN model iris-m@v1: not an anneal model" "a model blob that does not decode"
expect_contains "$OUT" "BROKEN run-1 checkpoint at step $last_step: not an anneal checkpoint" \
  "a checkpoint blob that does not decode"
expect_contains "$OUT" "BROKEN run-1 checkpoint at step $((first_step + 1000)): the checkpoint says it is run 1 at step $first_step" \
  "a checkpoint row that does not match its blob"
expect_contains "$OUT" "10 problems" "every problem, and only those"
run --json fsck
expect_eq "$(json_get 'len(j["problems"])')" "10" "fsck --json lists the same problems"
backup "$WORK/catalog.saved" "$ANNEAL_HOME/catalog.db"
expect_rc 0 fsck

# A run whose process died (marked running, its lock free) and a job whose
# worker's lease expired: findings that say what to do, not damage.
sql "UPDATE runs SET status = 'running'" >/dev/null
sql "INSERT INTO jobs(name, config_text, config_source, priority, cores, state, attempts, max_attempts,
     submitted, started, worker, lease_expires) VALUES ('iris-m', (SELECT config_text FROM runs), 'm.ini', 0, 1, 'running', 1, 3,
     1, 1, 'deadhost:42', 2)" >/dev/null
expect_rc 0 fsck
expect_contains "$OUT" "NOTE run-1 is marked running but no process holds it; 'anneal train --resume run-1' continues it" \
  "a run left running by a dead process"
expect_contains "$OUT" "NOTE job 1 (iris-m) is marked running on deadhost:42 but its lease expired" \
  "a job whose worker died"
expect_contains "$OUT" ": ok" "findings are not damage"
run --json fsck
expect_eq "$(json_get 'len(j["findings"])')" "2" "fsck --json lists the findings"
finish
