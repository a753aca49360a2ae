#!/bin/bash
# A damaged store: fsck names each broken object and what owns it and exits
# 1; reads that touch it fail naming the object; gc does not "repair" it.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import wine "$TEST_DATA/wine.csv"
expect_rc 0 fsck
objects=$(find "$ANNEAL_HOME/objects" -type f | sort)
[ -n "$objects" ] && pass || fail "objects were written"

for object in $objects; do
  id=$(basename "$object")
  cp "$object" "$WORK/saved"
  size=$(stat -c %s "$object")
  # Flip one bit in the middle of the file.
  offset=$((size / 2))
  byte=$(od -An -tu1 -j "$offset" -N1 "$object" | tr -d ' ')
  printf "$(printf '\\%03o' $((byte ^ 1)))" | dd of="$object" bs=1 seek="$offset" conv=notrunc status=none
  expect_rc 1 fsck
  expect_contains "$OUT" "BROKEN object $id" "fsck names the damaged object"
  expect_contains "$OUT" "wine@v1" "fsck names the owner"
  run --json fsck
  expect_eq "$RC" "1" "fsck --json exits 1 too"
  expect_eq "$(json_get 'len(j["problems"])')" "1" "one problem"
  cp "$WORK/saved" "$object"
done
expect_rc 0 fsck

# A missing object: reads fail with a message naming it, fsck reports it.
victim=$(find "$ANNEAL_HOME/objects" -type f | head -n 1)
rm "$victim"
expect_rc 1 fsck
expect_contains "$OUT" "missing" "fsck reports the missing object"
# At least one of the streams holds the removed object; its export fails.
failed=0
for part in source features labels split; do
  "$ANNEAL" data export wine -o "$WORK/p-$part" --part "$part" 2>"$WORK/err-$part" || {
    failed=1
    expect_contains "$(cat "$WORK/err-$part")" "$(basename "$victim")" "read names the missing object"
  }
done
expect_eq "$failed" "1" "a read of the damaged stream fails"
finish
