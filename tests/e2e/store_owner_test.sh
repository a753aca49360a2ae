#!/bin/bash
# A store another user owns is refused by every command, root's included,
# in one line naming the path and what to do (exit 1), before anything in
# it is created or changed; a file in a user's store that another user
# made (as root's imports did) is refused when it is the catalog and
# reported by the owner's fsck when it is an object. Issue 29, item 3: as
# root, importing into a user's store created root-owned 0600 objects,
# after which the owner's fsck called them broken and training failed.
# Needs root, to own files as another user (setpriv, no account made);
# skipped (77) otherwise. Modes: store_permissions_test.sh.
. "$E2E_LIB"

if [ "$(id -u)" -ne 0 ] || ! command -v setpriv > /dev/null; then
  echo "SKIP: needs root and setpriv to act as a second user"
  exit 77
fi
# A uid with no account: nothing on the machine is changed for the test.
other=54321
while getent passwd "$other" > /dev/null; do other=$((other + 1)); done
as_other() { setpriv --reuid="$other" --regid="$other" --clear-groups "$@"; }
# The other user must reach the store and the binary: $WORK is root's 0700.
chmod 0711 "$WORK"
export ANNEAL_HOME="$WORK/theirs"
mkdir -m 0700 "$ANNEAL_HOME" && chown "$other:$other" "$ANNEAL_HOME"
as_other "$ANNEAL" init > /dev/null && pass || fail "the other user makes a store"
as_other "$ANNEAL" data import iris "$TEST_DATA/iris.csv" > /dev/null && pass || fail "and imports into it"
iris_config "$WORK/c.ini" theirs "epochs = 1"
chmod 0644 "$WORK/c.ini"

# Root, and any other user, is refused: each command in one line naming
# the store, its owner and the fix, and nothing in the store changes
# owner or content (no root-owned object, lock or catalog file appears).
fingerprint() { (catalog_dump; cd "$ANNEAL_HOME" && find . -printf '%p %m %u\n' | sort) | sha256sum; }
before=$(fingerprint)
for cmd in "data import wine $TEST_DATA/wine.csv" "data list" "fsck" "audit verify" "train $WORK/c.ini" \
           "submit $WORK/c.ini" "gc" "init"; do
  # shellcheck disable=SC2086  # the words of the command
  expect_rc 1 $cmd
  expect_contains "$ERR" "$ANNEAL_HOME belongs to uid $other, not to root (uid 0)" "$cmd: the owner is named"
  expect_contains "$ERR" "run anneal as $other" "$cmd: with what to do"
  expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "$cmd: in one line"
done
expect_eq "$(fingerprint)" "$before" "root's refused commands changed nothing"
expect_eq "$(find "$ANNEAL_HOME" ! -uid "$other" | wc -l)" "0" "no file in the store belongs to anyone else"

# A catalog file another user made: the owner is refused, told to give it back.
chown 0 "$ANNEAL_HOME/catalog.db"
as_other "$ANNEAL" data list > /dev/null 2> "$WORK/err"
expect_eq "$?" "1" "a root-owned catalog is refused"
expect_contains "$(cat "$WORK/err")" "$ANNEAL_HOME/catalog.db belongs to root (uid 0), not to uid $other" \
  "the catalog and its owner are named"
expect_contains "$(cat "$WORK/err")" "chown -R $other $ANNEAL_HOME" "with the chown that fixes it"
chown "$other" "$ANNEAL_HOME/catalog.db"

# An object root made there (what an import as root did): the owner's fsck
# names it, what owns it and the fix.
object=$(cd "$ANNEAL_HOME" && find objects -type f | sort | head -n 1)
chown 0 "$ANNEAL_HOME/$object"
as_other "$ANNEAL" fsck > "$WORK/out" 2>&1
expect_eq "$?" "1" "fsck of a store holding a root-owned object fails"
expect_contains "$(cat "$WORK/out")" "BROKEN object $(basename "$object") (dataset iris@v1" "it names the object"
expect_contains "$(cat "$WORK/out")" "$ANNEAL_HOME/$object belongs to root (uid 0), not to uid $other" \
  "and who made it"
expect_contains "$(cat "$WORK/out")" "chown -R $other $ANNEAL_HOME" "and the fix"
chown -R "$other" "$ANNEAL_HOME"
as_other "$ANNEAL" fsck > "$WORK/out" 2>&1
expect_eq "$?" "0" "the chown it names makes fsck clean: $(cat "$WORK/out")"
finish
