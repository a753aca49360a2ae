#!/bin/bash
# A full disk under the catalog itself: every command, read-only ones
# included, fails in one line naming the catalog file SQLite could not
# extend and saying that the disk is full (exit 1), not "catalog: disk I/O
# error" (issue 29, item 6); the store is left as it was, and once there is
# room the same command succeeds. Two cases: the -shm index every command
# maps (nothing else holds the store open, so it is made anew and cannot
# grow), and the -wal journal a change is appended to (a reader holding a
# snapshot keeps the -shm, so the write itself fails). The store lives on a
# small tmpfs (needs root, as in CI; skipped with a message otherwise).
. "$E2E_LIB"

mkdir "$WORK/disk"
trap 'umount "$WORK/disk" 2>/dev/null; rm -rf "$WORK"' EXIT
if ! mount -t tmpfs -o size=8m,mode=0700 tmpfs "$WORK/disk" 2>"$WORK/mount.err"; then
  echo "SKIP: cannot mount a tmpfs to fill ($(cat "$WORK/mount.err")); this test needs root" >&2
  exit 77
fi
export ANNEAL_HOME="$WORK/disk/store"
expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
iris_config "$WORK/c.ini" full "epochs = 1"

# fill: takes every byte left on the tmpfs.
fill() {
  python3 - "$WORK/disk/filler" <<'PY'
import errno, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
for size in (1 << 16, 512, 1):
    try:
        while True:
            os.write(fd, b"x" * size)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
PY
}
state() { (catalog_dump; cd "$ANNEAL_HOME" && find objects -type f | sort) | sha256sum; }
before=$(state)

# --- the -shm: no process has the store open -------------------------------
fill
for cmd in "data list" "fsck" "audit verify" "submit $WORK/c.ini"; do
  # shellcheck disable=SC2086  # the words of the command
  expect_rc 1 $cmd
  expect_contains "$ERR" "$ANNEAL_HOME/catalog.db-shm: cannot write the catalog: the disk is full" \
    "$cmd: the -shm file and the full disk are named"
  expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "$cmd: in one line"
done
rm "$WORK/disk/filler"
expect_eq "$(state)" "$before" "the store is as it was"

# --- the -wal: a reader keeps the -shm mapped and the journal empty --------
# The reader holds a snapshot until the test says so: two FIFOs, no sleeps.
mkfifo "$WORK/ready" "$WORK/go"
python3 - "$ANNEAL_HOME/catalog.db" "$WORK/ready" "$WORK/go" <<'PY' &
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN")
db.execute("SELECT count(*) FROM audit").fetchone()
with open(sys.argv[2], "w") as ready:
    ready.write("ready\n")
with open(sys.argv[3]) as go:
    go.read()
db.execute("COMMIT")
PY
reader=$!
expect_eq "$(timeout 600 cat "$WORK/ready")" "ready" "a reader holds the catalog open"
fill
expect_rc 1 submit "$WORK/c.ini"
expect_contains "$ERR" "$ANNEAL_HOME/catalog.db (or its -wal journal): cannot write the catalog: the disk is full" \
  "a change the journal cannot take names it and the full disk"
expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "in one line"
rm "$WORK/disk/filler"
echo go > "$WORK/go"
wait "$reader"
expect_eq "$(state)" "$before" "the failed changes left the store as it was"
expect_rc 0 fsck
expect_rc 0 audit verify
expect_rc 0 submit "$WORK/c.ini"
expect_rc 0 --json jobs list
expect_eq "$(json_get "len(j['jobs'])")" "1" "with room, the same submit succeeds, once"
finish
