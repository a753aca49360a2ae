#!/bin/bash
# Every malformed input: exit 65, a one-line error with file:line[:column] and
# what was expected, and the store exactly as it was (fsck clean).
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
before=$(store_state)

# bad_case NAME EXPECTED_LOCATION FILE [ARGS...]
bad_case() {
  local name=$1 where=$2 file=$3
  shift 3
  expect_rc 65 data import broken "$file" "$@"
  expect_contains "$ERR" "$where" "$name: location"
  expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "$name: one-line error"
  expect_eq "$(store_state)" "$before" "$name: store unchanged"
}

printf 'a,b,c\n1,2,3\n4,5\n' > "$WORK/ragged.csv"
bad_case ragged "ragged.csv:3:" "$WORK/ragged.csv"
expect_contains "$ERR" "expected 3 fields" "ragged: says what was expected"

printf 'a,b,c\n1,"2,3\n4,5,6\n' > "$WORK/quote.csv"
bad_case "unterminated quote" "quote.csv:2:3" "$WORK/quote.csv"

printf 'a,b,c\n1,2,x\n3,oops,y\n' > "$WORK/nonnum.csv"
for i in $(seq 1 1100); do echo "$i,$i,y"; done >> "$WORK/nonnum.csv"
printf '5,bad,y\n' >> "$WORK/nonnum.csv"
# Column b's first 1000 rows are not all numbers: it is categorical, no error.
expect_rc 0 data import mixed "$WORK/nonnum.csv" --split 0
before=$(store_state)
printf 'a,b,c\n' > "$WORK/late.csv"
for i in $(seq 1 1100); do echo "$i,$i,y"; done >> "$WORK/late.csv"
printf '5,bad,y\n' >> "$WORK/late.csv"
bad_case "non-numeric in numeric column" "late.csv:1102:3" "$WORK/late.csv"
expect_contains "$ERR" "'b'" "non-numeric: names the column"

# The same far into a file of many windows: the import has staged the
# chunks it read by then (in tmp/), and none of them may stay behind.
awk 'BEGIN { print "a,b,c"; for (i = 1; i <= 600000; i++) printf "%d,%d.25,%d\n", i, i % 977, i % 3;
             print "7,bad,1" }' > "$WORK/late-big.csv"
bad_case "non-numeric after 10 MB" "late-big.csv:600002:3" "$WORK/late-big.csv"
[ -z "$(find "$ANNEAL_HOME/tmp" -type f)" ] && pass || fail "late error: staged files left in tmp/"

: > "$WORK/empty.csv"
bad_case "empty file" "empty.csv" "$WORK/empty.csv"

printf 'a,b,c\n' > "$WORK/header-only.csv"
bad_case "header without rows" "header-only.csv" "$WORK/header-only.csv"

bad_case "missing label column" "no column 'nope'" "$TEST_DATA/iris.csv" --label nope

head -c 4000 /dev/urandom > "$WORK/garbage.bin"
printf '\x00\x01binary' >> "$WORK/garbage.bin"
bad_case "binary garbage" "garbage.bin:" "$WORK/garbage.bin" --format csv

# IDX whose sizes do not match: 3 images of 2x2, but 4 labels.
printf '\x00\x00\x08\x03\x00\x00\x00\x03\x00\x00\x00\x02\x00\x00\x00\x02' > "$WORK/images.idx"
head -c 12 /dev/zero >> "$WORK/images.idx"
printf '\x00\x00\x08\x01\x00\x00\x00\x04\x01\x02\x03\x04' > "$WORK/labels.idx"
bad_case "IDX count mismatch" "labels.idx" "$WORK/images.idx" --labels "$WORK/labels.idx"
head -c 20 "$WORK/images.idx" > "$WORK/short.idx"
printf '\x00\x00\x08\x01\x00\x00\x00\x03\x01\x02\x03' > "$WORK/labels3.idx"
bad_case "IDX truncated" "short.idx" "$WORK/short.idx" --labels "$WORK/labels3.idx"

printf '1 1:0.5\n0 2:x\n' > "$WORK/bad.svm"
bad_case "LIBSVM bad value" "bad.svm:2:" "$WORK/bad.svm"

# Usage errors (exit 2) also leave the store alone.
expect_rc 2 data import broken "$WORK/nope.csv"
expect_contains "$ERR" "nope.csv" "missing file named"
expect_rc 2 data import broken "$TEST_DATA/iris.csv" --split 1.5
expect_contains "$ERR" "--split" "bad split named"
expect_rc 2 data import broken "$TEST_DATA/iris.csv" --format parquet
expect_contains "$ERR" "--format" "bad format named"
expect_rc 2 data import 'bad/name' "$TEST_DATA/iris.csv"
expect_eq "$(store_state)" "$before" "usage errors: store unchanged"

expect_rc 0 fsck
expect_contains "$OUT" "ok" "fsck clean after bad input"
finish
