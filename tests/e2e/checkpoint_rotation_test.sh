#!/bin/bash
# keep_checkpoints bounds the disk a run uses, not only its catalog rows:
# after a long run with many checkpoints, the objects of the released ones
# are gone without gc, gc finds nothing of them to remove, and fsck is clean.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
cat >"$WORK/r.ini" <<'INI'
name             = digits-rot
dataset          = digits
layers           = dense(64) relu dense(10)
batch            = 32
epochs           = 6
seed             = 3
threads          = 1
validation       = 0.1
checkpoint_every = 10
keep_checkpoints = 2
INI
expect_rc 0 --json train "$WORK/r.ini"
expect_eq "$(json_get 'j["status"]')" "succeeded" "the run"
expect_rc 0 --json runs show run-1
n=$(json_get 'len(j["checkpoints"])')
[ "$n" -ge 1 ] && [ "$n" -le 3 ] && pass || fail "checkpoints kept: $n"

# Nothing left for gc: every object file belongs to the dataset, the kept
# checkpoints or the model.
expect_rc 0 --json gc --dry-run
expect_eq "$(json_get 'j["objects_removed"]')" "0" "no released checkpoint's objects are left"
expect_eq "$(json_get 'j["blobs_removed"]')" "0" "no released checkpoint's blob is left"
# And the bytes on disk: at most what the dataset, keep + best checkpoints
# and the model hold (uncompressed, plus each object's 16-byte header).
python3 - "$ANNEAL_HOME" <<'PY' && pass || fail "objects/ holds more than the live blobs"
import os, sqlite3, sys
root = sys.argv[1]
db = sqlite3.connect(os.path.join(root, "catalog.db"))
live = db.execute("SELECT COALESCE(SUM(length), 0) + 16 * COUNT(*) FROM (SELECT DISTINCT object, length FROM blob_chunks "
                  "WHERE blob IN (SELECT blob FROM referenced_blobs))").fetchone()[0]
disk = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(root, "objects")) for f in fs)
steps = db.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0]
print(f"objects/ holds {disk} bytes; the live blobs {live}; {steps} checkpoints")
sys.exit(0 if disk <= live else 1)
PY
expect_rc 0 fsck
expect_contains "$OUT" ": ok" "fsck after the run"
expect_rc 0 eval digits-rot@v1 digits
finish
