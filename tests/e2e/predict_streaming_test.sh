#!/bin/bash
# `anneal predict --input` on a plain CSV runs in bounded memory (issue 15):
# the file is read in windows and the predictions written as they are made.
# A gzip of the rows is inflated into a scratch file and read the same way:
# the same output in the same bounded memory. Row numbers run on across
# windows, peak RSS stays
# within a fixed allowance over a tiny input's and does not grow with the
# rows, and an error late in the file names its FILE:LINE:COLUMN, exits as
# before and leaves neither OUT nor a temporary file behind. The inputs are
# generated here, in the throwaway directory.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import sales "$TEST_DATA/sales.csv" --label returned
cat >"$WORK/sales.ini" <<'INI'
name    = sales-mlp
dataset = sales
layers  = dense(16) relu dense(2)
epochs  = 1
seed    = 1
threads = 1
INI
expect_rc 0 train "$WORK/sales.ini"

# Rows like sales.csv's without the label: an order id unique per row (a
# column the model leaves out), customers and products the model never saw,
# missing quantities, quoted commas and quoted line breaks, CRLF line ends.
python3 - "$TEST_DATA/sales.csv" "$WORK" <<'PY'
import csv, random, sys
src, work = sys.argv[1], sys.argv[2]
rows = [r[:-1] for r in list(csv.reader(open(src, newline="")))[1:]]
header = "order_id,order_date,customer,product,region,channel,quantity,unit_price,discount"
rng = random.Random(15)

def line(i):
    r = list(rng.choice(rows))
    r[0] = "SO-%09d" % i
    if i % 211 == 0: r[0] = '"SO-%09d\nsplit"' % i
    if i % 97 == 0: r[3] = "P-NEW%d" % (i % 13)
    if i % 89 == 0: r[6] = ""
    if i % 101 == 0: r[2] = '"Smith, John"'
    return ",".join(r) + ("\r\n" if i % 7 == 0 else "\n")

body = [line(i) for i in range(360000)]
def write(name, lines):
    with open(f"{work}/{name}", "w", newline="") as f:
        f.write(header + "\n")
        f.writelines(lines)
write("mid.csv", body)                   # about 24 MB: six windows
write("small.csv", body[:1000])
write("prefix.csv", body[:150000])       # about 10 MB: three windows

# Late errors, past the first 4 MiB window: where they are, as
# FILE:LINE:COLUMN (lines counted through the quoted line breaks).
good = body[:120000]
lines_before = 1 + sum(l.count("\n") for l in good)
bad = ["SO-BAD", "2023-01-02 11:32", "Karl Hofmann", "P-0076", "east", "web", "lots", "15.60", "0"]
with open(f"{work}/late-cell.loc", "w") as f:
    f.write("late-cell.csv:%d:%d" % (lines_before + 1, len(",".join(bad[:6])) + 2))
write("late-cell.csv", good + [",".join(bad) + "\n"] + body[120000:121000])
bad[6] = "3"
ragged = ",".join(bad[:8])
with open(f"{work}/late-ragged.loc", "w") as f:
    f.write("late-ragged.csv:%d:%d" % (lines_before + 1, len(ragged) + 1))
write("late-ragged.csv", good + [ragged + "\n"] + body[120000:121000])
PY
tail -n +2 "$WORK/mid.csv" > "$WORK/body.csv"
cat "$WORK/mid.csv" "$WORK/body.csv" "$WORK/body.csv" > "$WORK/big.csv"  # about 72 MB
rm "$WORK/body.csv"

# Peak RSS: a fixed allowance over a 1000-row input's (two 4 MiB windows of
# text and the rows parsed from them, 4 MiB of transformed rows, allocator
# slack), and little more for 3x the rows (the whole-file path took 525 MiB
# for 54 MB). Under AddressSanitizer resident memory says nothing: the RSS
# checks are skipped there.
if ldd "$ANNEAL" 2>/dev/null | grep -q libasan; then sanitized=1; else sanitized=0; fi
peak_rss_kib() {  # ARGS...: "PEAK_KIB EXIT_CODE" of one anneal run
  python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode)' "$ANNEAL" "$@"
}
read -r small_kib small_rc <<< "$(peak_rss_kib predict sales-mlp --input "$WORK/small.csv" -o "$WORK/small.out")"
read -r mid_kib mid_rc <<< "$(peak_rss_kib predict sales-mlp --input "$WORK/mid.csv" -o "$WORK/mid.out")"
read -r big_kib big_rc <<< "$(peak_rss_kib predict sales-mlp --input "$WORK/big.csv" -o "$WORK/big.out")"
expect_eq "$small_rc $mid_rc $big_rc" "0 0 0" "predict on 1000, 360000 and 1080000 rows"
if [ "$sanitized" = 0 ]; then
  [ "$big_kib" -le $((small_kib + 56 * 1024)) ] && pass ||
    fail "72 MB peaked at $big_kib KiB, 1000 rows at $small_kib KiB (+56 MiB allowed)"
  [ "$big_kib" -le $((mid_kib + 16 * 1024)) ] && pass ||
    fail "72 MB peaked at $big_kib KiB, 24 MB at $mid_kib KiB (+16 MiB allowed): memory grows with the rows"
fi

# Every row predicted, numbered on across windows; the first rows' lines
# are those of a file holding only those rows.
expect_eq "$(head -n 1 "$WORK/mid.out")" "row,prediction,p_no,p_yes" "the header"
expect_eq "$(wc -l < "$WORK/big.out")" "1080001" "one line a row"
expect_eq "$(cut -d, -f1 "$WORK/big.out" | tail -n +2 | awk '$1 != NR { bad++ } END { print bad + 0 }')" "0" \
  "row numbers 1..N in order across windows"
cmp -s <(head -n 360001 "$WORK/big.out") "$WORK/mid.out" && pass || fail "the large file's first rows differ"
cmp -s <(head -n 1001 "$WORK/mid.out") "$WORK/small.out" && pass || fail "the first rows predicted alone differ"
# gzip input: inflated to a scratch file beside OUT, not into memory.
gzip -1 -c "$WORK/big.csv" > "$WORK/big.csv.gz"
read -r gz_kib gz_rc <<< "$(peak_rss_kib predict sales-mlp --input "$WORK/big.csv.gz" -o "$WORK/big-gz.out")"
expect_eq "$gz_rc" "0" "predict on the gzip of 1080000 rows"
cmp -s "$WORK/big.out" "$WORK/big-gz.out" && pass || fail "the gzip's predictions differ from the plain file's"
if [ "$sanitized" = 0 ]; then
  [ "$gz_kib" -le $((mid_kib + 16 * 1024)) ] && pass ||
    fail "72 MB gzipped peaked at $gz_kib KiB, 24 MB plain at $mid_kib KiB (+16 MiB allowed)"
fi
expect_eq "$(ls -A "$WORK" | grep -c -i scratch)" "0" "no scratch file left beside OUT"
rm -f "$WORK/big.csv" "$WORK/big.out" "$WORK/big.csv.gz" "$WORK/big-gz.out"

# The same rows gzipped: byte-identical output, the same counts.
gzip -c "$WORK/prefix.csv" > "$WORK/prefix.csv.gz"
expect_rc 0 --json predict sales-mlp --input "$WORK/prefix.csv" -o "$WORK/prefix.out"
streamed=$OUT
expect_eq "$(json_get 'j["rows"]')" "150000" "every row of three windows predicted"
expect_rc 0 --json predict sales-mlp --input "$WORK/prefix.csv.gz" -o "$WORK/prefix-gz.out"
cmp -s "$WORK/prefix.out" "$WORK/prefix-gz.out" && pass || fail "plain and gzip predictions differ"
expect_eq "$(json_get 'j["rows"], j["missing_values"], j["unseen_categories"]')" \
  "$(OUT=$streamed json_get 'j["rows"], j["missing_values"], j["unseen_categories"]')" \
  "the same rows, missing and unseen counts"
expect_eq "$(OUT=$streamed json_get 'j["missing_values"] > 0 and j["unseen_categories"] > 0')" "True" \
  "the input has missing and unseen values"
cmp -s <(head -n 150001 "$WORK/mid.out") "$WORK/prefix.out" && pass || fail "a prefix predicted alone differs"

# Errors late in the file: the whole-file parse's FILE:LINE:COLUMN, exit 65,
# one line; no OUT and no temporary file in its directory; an existing OUT
# (with --force) untouched.
mkdir "$WORK/out"
for name in late-cell late-ragged; do
  expect_rc 65 predict sales-mlp --input "$WORK/$name.csv" -o "$WORK/out/p.csv"
  expect_contains "$ERR" "$(cat "$WORK/$name.loc"): expected" "$name: where"
  expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "$name: one line"
  expect_eq "$(ls -A "$WORK/out")" "" "$name: nothing left in the output directory"
done
expect_contains "$(cat "$WORK/late-cell.loc")" "late-cell.csv:12" "the bad cell lies past the first window"
run predict sales-mlp --input "$WORK/late-cell.csv" -o "$WORK/out/p.csv"
expect_contains "$ERR" "expected a number in column 'quantity'" "late-cell: what"
run predict sales-mlp --input "$WORK/late-ragged.csv" -o "$WORK/out/p.csv"
expect_contains "$ERR" "expected 9 fields, found 8" "late-ragged: the file's own field count"
cp "$WORK/small.out" "$WORK/out/p.csv"
expect_rc 65 predict sales-mlp --input "$WORK/late-cell.csv" -o "$WORK/out/p.csv" --force
cmp -s "$WORK/small.out" "$WORK/out/p.csv" && pass || fail "a failed predict --force changed OUT"
expect_eq "$(ls -A "$WORK/out")" "p.csv" "a failed predict --force leaves no temporary file"

# As before: OUT is not replaced without --force; a header without rows and
# a missing feature column are refused, with nothing written.
expect_rc 2 predict sales-mlp --input "$WORK/small.csv" -o "$WORK/out/p.csv"
expect_contains "$ERR" "file exists" "OUT kept without --force"
cmp -s "$WORK/small.out" "$WORK/out/p.csv" && pass || fail "a refused predict changed OUT"
expect_rc 0 predict sales-mlp --input "$WORK/prefix.csv" -o "$WORK/out/p.csv" --force
cmp -s "$WORK/prefix.out" "$WORK/out/p.csv" && pass || fail "--force replaces OUT"
head -n 1 "$WORK/small.csv" > "$WORK/header-only.csv"
expect_rc 65 predict sales-mlp --input "$WORK/header-only.csv" -o "$WORK/out/h.csv"
expect_contains "$ERR" "header-only.csv:2:1: expected a data row after the header, found end of input" "header only"
printf 'order_id,order_date,customer,product,region,channel,unit_price,discount\nSO-1,2023-01-02 11:32,Karl Hofmann,P-0076,east,web,15.60,0\n' \
  > "$WORK/no-quantity.csv"
expect_rc 2 predict sales-mlp --input "$WORK/no-quantity.csv" -o "$WORK/out/q.csv"
expect_contains "$ERR" "missing column 'quantity'" "a missing feature column is named"
expect_eq "$(ls -A "$WORK/out")" "p.csv" "refused predictions leave nothing behind"

finish
