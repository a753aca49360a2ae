#!/bin/bash
# A full disk during training: periodic checkpoints that cannot be written
# are notes and training goes on with the previous checkpoint valid; the
# end-of-run save fails and leaves the run failed, saying how to resume;
# with room again, that resume ends with the weights of an uninterrupted
# run, and fsck is clean. The store lives on a small tmpfs (needs root, as
# in CI; skipped with a message where mounting is impossible).
. "$E2E_LIB"

cat >"$WORK/r.ini" <<'INI'
name             = digits-full
dataset          = digits
layers           = dense(1024) relu dense(10)
batch            = 32
epochs           = 6
seed             = 7
threads          = 1
validation       = 0.1
checkpoint_every = 50
keep_checkpoints = 2
INI
# The uninterrupted run, on the ordinary store.
expect_rc 0 --store "$WORK/ref" init
expect_rc 0 --store "$WORK/ref" data import digits "$TEST_DATA/digits.csv"
expect_rc 0 --store "$WORK/ref" --json train "$WORK/r.ini"
want=$(json_get 'j["weights_hash"]')

mkdir "$WORK/disk"
trap 'umount "$WORK/disk" 2>/dev/null; rm -rf "$WORK"' EXIT
if ! mount -t tmpfs -o size=24m,mode=0700 tmpfs "$WORK/disk" 2>"$WORK/mount.err"; then
  echo "SKIP: cannot mount a tmpfs to fill ($(cat "$WORK/mount.err")); this test needs root" >&2
  finish
fi
export ANNEAL_HOME="$WORK/disk/store"
expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"

# Train, paused just after the first checkpoint (step 50) is committed.
fault_fifos
ANNEAL_FAULT='checkpoint.committed@1=pause' \
  "$ANNEAL_FAULTS_BIN" train "$WORK/r.ini" >"$WORK/train.out" 2>"$WORK/train.err" &
train_pid=$!
expect_contains "$(fault_reached)" "checkpoint.committed" "training paused after a checkpoint"

# Fill the disk, leaving half a checkpoint's compressed size: room for the
# catalog's small writes (epoch metrics, the run's end), none for a checkpoint.
python3 - "$ANNEAL_HOME" "$WORK/disk/filler" <<'PY'
import os, sqlite3, sys
root, filler = sys.argv[1], sys.argv[2]
db = sqlite3.connect(f"file:{root}/catalog.db?mode=ro", uri=True)
objects = [r[0] for r in db.execute("SELECT c.object FROM blob_chunks c JOIN checkpoints k ON k.blob = c.blob")]
checkpoint = sum(os.path.getsize(f"{root}/objects/{o[:2]}/{o}") for o in objects)
st = os.statvfs(root)
free = st.f_bavail * st.f_frsize
leave = checkpoint // 2
fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
os.posix_fallocate(fd, 0, free - leave)
os.close(fd)
st = os.statvfs(root)
print(f"checkpoint {checkpoint} bytes on disk; {st.f_bavail * st.f_frsize} bytes left free", file=sys.stderr)
PY
fault_resume
wait "$train_pid"
rc=$?
err=$(cat "$WORK/train.err")
expect_eq "$rc" "1" "the run stops when its final checkpoint cannot be written: $err"
expect_contains "$err" "checkpoint at step 100 not saved: " "a periodic checkpoint on a full disk is a note"
expect_contains "$err" "No space left on device; the one at step 50 stays; training goes on" "that says the previous one stays"
expect_contains "$err" "checkpoint at step 200 not saved: " "training went on past the failed checkpoints"
expect_contains "$err" "(its newest checkpoint is at step 50); 'anneal train --resume run-1' continues it" "the failure says how to resume"
expect_rc 0 --json runs show run-1
expect_eq "$(json_get 'j["status"]')" "failed" "the run is recorded failed"
expect_contains "$(json_get 'j["error"]')" "(its newest checkpoint is at step 50); resuming run-1 continues it" "its recorded error says how to resume"
expect_eq "$(json_get '[c["step"] for c in j["checkpoints"]]')" "[50]" "the checkpoint at step 50 is intact and the only one"

# Room again: the resume finishes the run with the uninterrupted weights.
rm "$WORK/disk/filler"
expect_rc 0 --json train --resume run-1
expect_eq "$(json_get 'j["weights_hash"]')" "$want" "resume after a full disk gives the uninterrupted weights"
expect_rc 0 fsck
expect_contains "$OUT" ": ok" "fsck after the full disk"
finish
