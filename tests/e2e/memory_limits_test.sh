#!/bin/bash
# Memory bombs (issue 12): tiny hostile inputs that once took gigabytes. Each
# import (and predict --input) runs under `ulimit -v`, a bound the binary
# fits under for ordinary work (checked first), so any unbounded allocation
# fails the test; each must exit 65 with a one-line error naming the file,
# the limit and its flag, and leave the store exactly as it was.
. "$E2E_LIB"

# Address space, not memory in use: oneDNN, OpenMP and oneTBB reserve a few
# hundred MB of it at start (an ordinary import runs under 300 MB); the
# bombs below would need gigabytes.
LIMIT_KB=800000

# bounded ARGS...: anneal under the address-space limit, like run(). An
# AddressSanitizer build reserves terabytes of shadow address space, so there
# the same bound is ASan's own: an allocation over it, or a resident size
# over it, kills the process.
if ldd "$ANNEAL" 2>/dev/null | grep -q libasan; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}max_allocation_size_mb=$((LIMIT_KB / 1024)):hard_rss_limit_mb=$((LIMIT_KB / 1024))"
  bounded() { "$ANNEAL" "$@" >"$WORK/stdout" 2>"$WORK/stderr"; RC=$?; OUT=$(cat "$WORK/stdout"); ERR=$(cat "$WORK/stderr"); }
else
bounded() {
  (ulimit -v "$LIMIT_KB"; "$ANNEAL" "$@") >"$WORK/stdout" 2>"$WORK/stderr"
  RC=$?
  OUT=$(cat "$WORK/stdout")
  ERR=$(cat "$WORK/stderr")
}
fi

expect_rc 0 init
# Ordinary work fits under the bound (else the checks below prove nothing).
bounded data import iris "$TEST_DATA/iris.csv"
expect_eq "$RC" "0" "an ordinary import fits under ulimit -v $LIMIT_KB (stderr: $ERR)"
iris_config "$WORK/iris.ini" iris-mlp "epochs = 2"
expect_rc 0 train "$WORK/iris.ini"
head -n 5 "$TEST_DATA/iris.csv" | cut -d, -f1-4 > "$WORK/rows.csv"
bounded predict iris-mlp --input "$WORK/rows.csv" -o "$WORK/p.csv"
expect_eq "$RC" "0" "an ordinary predict fits under ulimit -v $LIMIT_KB (stderr: $ERR)"

before=$(store_state)
before_catalog=$(catalog_dump)

# bomb NAME MESSAGE ARGS...: a bounded command that must be refused.
bomb() {
  local name=$1 message=$2
  shift 2
  bounded "$@"
  expect_eq "$RC" "65" "$name: exit code (stderr: $ERR)"
  expect_contains "$ERR" "$message" "$name: message"
  expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "$name: one-line error"
  expect_eq "$(store_state)" "$before" "$name: store unchanged"
  expect_eq "$(catalog_dump)" "$before_catalog" "$name: catalog unchanged"
}

# 12 bytes of LIBSVM once densified to 1.5 GB and a 96 MB catalog row.
printf '1 1000000:1\n' > "$WORK/wide.libsvm"
bomb "libsvm feature index" \
  "wide.libsvm:1:3: expected an index of at most 16384, found 1000000 (pass --max-columns N to raise the limit)" \
  data import wide "$WORK/wide.libsvm"

# Every row at the widest allowed index: 160 KB that would densify to 1 GB.
for i in $(seq 1 16384); do echo "1 16384:1"; done > "$WORK/tall.libsvm"
bomb "libsvm densified cells" "tall.libsvm: expected at most 16777216 cells once densified" \
  data import tall "$WORK/tall.libsvm"

# A header of 300,000 empty names once took 527 MB.
python3 -c "import sys; sys.stdout.write(',' * 299999 + '\n' + '1,' * 299999 + '1\n')" > "$WORK/wide.csv"
bomb "csv columns" \
  "wide.csv:1:16385: expected at most 16384 columns, found 300000 (pass --max-columns N to raise the limit)" \
  data import wide "$WORK/wide.csv"
bomb "csv columns, limit raised but still below" "expected at most 20000 columns, found 300000" \
  data import wide "$WORK/wide.csv" --max-columns 20000

# 1 MB of gzip that inflates to 1 GB once grew to 2.1 GB before any check.
head -c 1000000000 /dev/zero | gzip -9 > "$WORK/zeros.csv.gz"
bomb "gzip ratio" "zeros.csv.gz: expected at most 200 times its" data import zeros "$WORK/zeros.csv.gz"
expect_contains "$ERR" "pass --max-decompression-ratio N to raise the limit" "gzip ratio: names the flag"
bomb "gzip size" "zeros.csv.gz: expected at most 10485760 bytes once decompressed, found more" \
  data import zeros "$WORK/zeros.csv.gz" --max-decompression-ratio 100000 --max-decompressed-size 10M
head -c 1000000000 /dev/zero | zstd -q -1 > "$WORK/zeros.csv.zst"
bomb "zstd ratio" "zeros.csv.zst: expected at most 200 times its" data import zeros "$WORK/zeros.csv.zst"
bomb "predict --input gzip" "zeros.csv.gz: expected at most 200 times its" \
  predict iris-mlp --input "$WORK/zeros.csv.gz" -o "$WORK/out.csv"
[ -e "$WORK/out.csv" ] && fail "predict wrote output despite the error" || pass

# Flags are checked.
expect_rc 2 data import x "$WORK/wide.csv" --max-decompressed-size 12Q
expect_contains "$ERR" "--max-decompressed-size '12Q': expected a size in bytes" "size flag"
expect_rc 2 data import x "$WORK/wide.csv" --max-columns 1
expect_contains "$ERR" "--max-columns 1: expected 2 to 1000000" "columns flag"

# A raised limit lets a wide but honest file in.
python3 -c "import sys; sys.stdout.write(','.join('c%d' % i for i in range(20000)) + '\n' + ','.join('1' for i in range(20000)) + '\n')" > "$WORK/honest.csv"
bounded data import honest "$WORK/honest.csv" --max-columns 20000 --split 0
expect_eq "$RC" "0" "a wide file imports with --max-columns raised (stderr: $ERR)"

finish
