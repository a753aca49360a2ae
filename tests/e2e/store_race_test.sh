#!/bin/bash
# gc against a writer that found its objects "already stored" (issue 12,
# defect 1): a crashed write leaves objects nobody references; the next
# writer of the same bytes finds them, gc collects them before that writer
# takes its lock, and the writer must write them again rather than commit
# catalog rows pointing at nothing. Shown for an import, a checkpoint and a
# model, each stopped at its fault point while gc runs. Also: importing the
# same file again heals a damaged or missing object.
. "$E2E_LIB"
use_fault_build

expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"

# gc_between POINT CMD...: runs anneal CMD, stopped at POINT while a full gc
# runs, then lets it finish; RC is its exit status.
gc_between() {
  local point=$1
  shift
  fault_fifos
  ANNEAL_FAULT="$point=pause" "$ANNEAL" "$@" > "$WORK/between.out" 2>&1 &
  local pid=$!
  fault_reached > /dev/null || fail "never reached $point"
  "$ANNEAL" gc > "$WORK/gc.out" 2>&1 || fail "gc during $point: $(cat "$WORK/gc.out")"
  fault_resume
  wait "$pid"
  RC=$?
}

objects_count() { find "$ANNEAL_HOME/objects" -type f | wc -l; }

# --- import ---------------------------------------------------------------------
ANNEAL_FAULT='import.objects-written=crash' "$ANNEAL" data import wine "$TEST_DATA/wine.csv" > /dev/null 2>&1
expect_eq "$?" "137" "the first import was killed after writing its objects"
orphans=$(objects_count)
gc_between import.prepared data import wine "$TEST_DATA/wine.csv"
expect_eq "$RC" "0" "the import finishes after gc ran under it"
expect_contains "$(cat "$WORK/gc.out")" "removed" "gc collected the crashed import's objects meanwhile"
run fsck
expect_eq "$RC" "0" "fsck is clean after import vs gc: $OUT"
expect_rc 0 data export wine -o "$WORK/wine.back"
cmp -s "$WORK/wine.back" "$TEST_DATA/wine.csv" && pass || fail "export after import vs gc is bit-identical"
[ "$(objects_count)" -ge "$orphans" ] && pass || fail "the import wrote its objects again"

# --- checkpoint -------------------------------------------------------------------
iris_config "$WORK/c.ini" iris-race "epochs = 4" "checkpoint_every = 8" "keep_checkpoints = 1"
# The run dies between its first checkpoint's objects and their catalog row;
# its resume computes the same checkpoint bytes and finds them stored.
ANNEAL_FAULT='checkpoint.objects-written@1=crash' "$ANNEAL" train "$WORK/c.ini" > /dev/null 2>&1
expect_eq "$?" "137" "the run was killed after writing its first checkpoint's objects"
gc_between 'checkpoint.prepared@1' --json train --resume run-1
expect_eq "$RC" "0" "the resumed run finishes after gc ran under its checkpoint: $(cat "$WORK/between.out")"
run fsck
expect_eq "$RC" "0" "fsck is clean after checkpoint vs gc: $OUT"

# --- model -----------------------------------------------------------------------
# The run dies between its model's objects and the model's row; the resume
# registers the same model bytes.
ANNEAL_FAULT='model.objects-written=crash' "$ANNEAL" train "$WORK/c.ini" --set name=iris-race2 > /dev/null 2>&1
expect_eq "$?" "137" "the run was killed after writing its model's objects"
gc_between model.prepared --json train --resume run-2
expect_eq "$RC" "0" "the resumed run registers its model after gc ran under it: $(cat "$WORK/between.out")"
run fsck
expect_eq "$RC" "0" "fsck is clean after model registration vs gc: $OUT"
expect_rc 0 eval iris-race2 iris

# --- healing: the same import again rewrites a damaged or missing object ----------
# The first object of iris@v1's source stream, read from the catalog.
source_object() {
  python3 - "$ANNEAL_HOME/catalog.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print(db.execute("SELECT c.object FROM dataset_streams s JOIN dataset_versions v ON v.id = s.version_id "
                 "JOIN datasets d ON d.id = v.dataset_id JOIN blob_chunks c ON c.blob = s.blob "
                 "WHERE d.name = 'iris' AND v.version = 1 AND s.role = 'source' ORDER BY c.seq").fetchone()[0])
PY
}
id=$(source_object)
victim="$ANNEAL_HOME/objects/${id:0:2}/$id"
for damage in flip remove; do
  printf 'x' | dd of="$victim" bs=1 seek=40 conv=notrunc status=none
  [ "$damage" = remove ] && rm "$victim"
  expect_rc 1 fsck
  expect_rc 0 data import iris "$TEST_DATA/iris.csv"
  expect_contains "$OUT" "unchanged: identical content and options are already iris@v1; rewrote" \
    "importing the same file again rewrites the $damage object"
  expect_rc 0 fsck
  rm -f "$WORK/iris.back"
  expect_rc 0 data export iris -o "$WORK/iris.back"
  cmp -s "$WORK/iris.back" "$TEST_DATA/iris.csv" && pass || fail "export after healing is bit-identical"
done

finish
