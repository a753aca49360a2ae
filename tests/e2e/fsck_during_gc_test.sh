#!/bin/bash
# fsck beside a running gc reports no false damage: it holds the gc lock
# shared, so it waits while gc (exclusive) deletes, then checks the store gc
# left. Deterministic through fault points: gc pauses after pruning the
# catalog, before removing any object; fsck pauses right after listing the
# object files, or earlier, while it waits for the lock. Without the lock
# fsck lists the objects gc is about to remove, and reports them missing.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
iris_config "$WORK/m.ini" iris-m "epochs = 3"
expect_rc 0 train "$WORK/m.ini"
# Garbage for gc: a version deleted from the catalog leaves its blobs unowned.
expect_rc 0 data import iris "$TEST_DATA/wine.csv" --label cultivar
python3 - "$ANNEAL_HOME/catalog.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("DELETE FROM dataset_streams WHERE version_id = (SELECT MAX(id) FROM dataset_versions)")
db.execute("DELETE FROM dataset_versions WHERE id = (SELECT MAX(id) FROM dataset_versions)")
db.commit()
PY
expect_rc 0 --json gc --dry-run
[ "$(json_get 'j["objects_removed"]')" -gt 0 ] && pass || fail "gc has objects to remove"

# gc and fsck pause at once, each at its own pair of FIFOs (lib.sh).
fault_fifos gc
fault_fifos fsck
ANNEAL_FAULT_DIR="$WORK/fault-gc" ANNEAL_FAULT='gc.catalog-pruned=pause' \
  "$ANNEAL_FAULTS_BIN" gc >"$WORK/gc.out" 2>&1 &
gc_pid=$!
expect_contains "$(fault_reached gc)" "gc.catalog-pruned" "gc paused holding its lock"
ANNEAL_FAULT_DIR="$WORK/fault-fsck" ANNEAL_FAULT='fsck.waiting-for-gc=pause;fsck.objects-listed=pause' \
  "$ANNEAL_FAULTS_BIN" fsck >"$WORK/fsck.out" 2>&1 &
fsck_pid=$!
first=$(fault_reached fsck)
# With the lock, fsck must wait for gc; let it go on to block on the lock.
case "$first" in
  fsck.waiting-for-gc*) pass; fault_resume fsck ;;
  *) fail "fsck went on while gc held the store: $first" ;;
esac
fault_resume gc
wait "$gc_pid"
expect_eq "$?" "0" "gc finished"
case "$first" in
  fsck.waiting-for-gc*) expect_contains "$(fault_reached fsck)" "fsck.objects-listed" "fsck ran after gc" ;;
esac
fault_resume fsck
wait "$fsck_pid"
rc=$?
expect_eq "$rc" "0" "fsck beside gc reports no damage: $(cat "$WORK/fsck.out")"
expect_contains "$(cat "$WORK/fsck.out")" ": ok" "fsck saw the store gc left"
expect_rc 0 fsck
finish
