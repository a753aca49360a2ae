#!/bin/bash
# A store others may write is refused by every command that opens it, in
# one line naming the path and the chmod that fixes it (exit 1), before
# anything in it is read or changed; fsck reports each file or directory
# of the store that others may write, object files included, as a BROKEN
# line naming it (and for an object, what owns it). Issue 29, item 3: a
# 0777 store with a 0666 catalog used to work silently and fsck said ok.
# (A store owned by another user: store_owner_test.sh, which needs root.)
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
iris_config "$WORK/c.ini" perms "epochs = 1"
fingerprint() { (catalog_dump; cd "$ANNEAL_HOME" && find . -printf '%p %m %u\n' | sort) | sha256sum; }

# refused PATH MODE: with PATH chmod'ed to MODE, each kind of command is
# refused naming PATH, the fix, in one line, and the store is unchanged.
refused() {
  local path=$1 mode=$2 before
  chmod "$mode" "$path"
  before=$(fingerprint)
  for cmd in "data list" "data import wine $TEST_DATA/wine.csv" "fsck" "audit log" "audit verify" \
             "submit $WORK/c.ini" "gc"; do
    # shellcheck disable=SC2086  # the words of the command
    expect_rc 1 $cmd
    expect_contains "$ERR" "$path is writable by" "$cmd: mode $mode of $path is named"
    expect_contains "$ERR" "chmod -R go-rwx $ANNEAL_HOME" "$cmd: with the fix"
    expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "$cmd: in one line"
  done
  expect_eq "$(fingerprint)" "$before" "refused with $path $mode: the store is unchanged"
}
refused "$ANNEAL_HOME" 0777
chmod 0700 "$ANNEAL_HOME"
refused "$ANNEAL_HOME/catalog.db" 0666
chmod 0600 "$ANNEAL_HOME/catalog.db"
refused "$ANNEAL_HOME/objects" 0770
chmod 0700 "$ANNEAL_HOME/objects"
refused "$ANNEAL_HOME/locks/gc.lock" 0622
chmod 0600 "$ANNEAL_HOME/locks/gc.lock"
# Readable by others is not refused (the store is made owner-only, but only
# a writer can change what anneal reads); init tightens it again.
chmod 0755 "$ANNEAL_HOME"
expect_rc 0 data list
expect_rc 0 init
expect_eq "$(stat -c %a "$ANNEAL_HOME")" "700" "init makes the store owner-only again"
expect_rc 0 fsck

# fsck: an object file and a fan-out directory others may write are
# reported, each naming its path and the fix; the store still opens.
object=$(cd "$ANNEAL_HOME" && find objects -type f | sort | head -n 1)
id=$(basename "$object")
chmod 0666 "$ANNEAL_HOME/$object"
fan=$(cd "$ANNEAL_HOME" && find objects -mindepth 1 -maxdepth 1 -type d -empty | sort | head -n 1)
chmod 0777 "$ANNEAL_HOME/$fan"
expect_rc 1 fsck
expect_contains "$OUT" "BROKEN object $id (dataset iris@v1" "fsck names the object and its owner"
expect_contains "$OUT" "$ANNEAL_HOME/$object is writable by others (mode 0666)" "and its mode"
expect_contains "$OUT" "BROKEN $ANNEAL_HOME/$fan is writable by others (mode 0777)" "a directory too"
expect_contains "$OUT" "chmod -R go-rwx $ANNEAL_HOME" "with the fix"
expect_rc 1 --json fsck
expect_eq "$(json_get "sum('writable by' in p for p in j['problems'])")" "2" "both in --json"
chmod -R go-rwx "$ANNEAL_HOME"
expect_rc 0 fsck
expect_contains "$OUT" ": ok" "the fix the message names makes fsck clean"
finish
