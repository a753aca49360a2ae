#!/bin/bash
# `anneal data check` in bounded memory (issue 33): it reads each version a
# block of rows at a time and keeps, per column, counts and a reservoir of
# 4,096 values, so checking two 48 MB versions (400,000 rows of 30 float32
# and a categorical column) takes no more resident memory than checking two
# 200-row ones, within a fixed allowance for a block and its decompressed
# copy, well under one version's size. The figures still see every row: a
# shift planted in one column of the large version is caught there and only
# there. Process memory says nothing under AddressSanitizer: there only the
# verdicts are checked.
. "$E2E_LIB"

gen() {  # FILE SEED SHIFT
  awk -v seed="$2" -v shift="$3" 'BEGIN { srand(seed); split("red green blue", levels, " ");
       for (r = 0; r < 400000; r++) { line = "";
         for (c = 0; c < 30; c++) { v = int(rand() * 2000) / 1000 - 1; if (c == 7) v += shift; line = line v "," }
         print line levels[1 + int(rand() * 3)] "," (rand() < 0.5 ? "up" : "down") } }' > "$1"
}
gen "$WORK/big1.csv" 7 0
gen "$WORK/big2.csv" 8 0.6
head -n 200 "$WORK/big1.csv" > "$WORK/tiny1.csv"
head -n 200 "$WORK/big2.csv" > "$WORK/tiny2.csv"
expect_rc 0 init
for v in big1 big2 tiny1 tiny2; do expect_rc 0 data import "$v" "$WORK/$v.csv" --no-header; done

if ldd "$ANNEAL" 2>/dev/null | grep -q libasan; then sanitized=1; else sanitized=0; fi
peak_rss_kib() {  # ARGS...: anneal's stdout, then a line "PEAK_KIB RC"
  /usr/bin/python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
sys.stdout.write(r.stdout.decode() + "\n" + str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) + " " + str(r.returncode))' \
    "$ANNEAL" "$@"
}
tiny=$(peak_rss_kib --json data check tiny2 --against tiny1)
big=$(peak_rss_kib --json data check big2 --against big1)
read -r tiny_kib tiny_rc <<< "$(printf '%s' "$tiny" | tail -n 1)"
read -r big_kib big_rc <<< "$(printf '%s' "$big" | tail -n 1)"
expect_eq "$big_rc" "3" "the shifted large version fails its check"
OUT=$(printf '%s' "$big" | head -n -1)
expect_eq "$(json_get 'j["candidate_rows"]')" "400000" "every row of the candidate was read"
expect_eq "$(json_get '[c["column"] for c in j["columns"] if c["failures"]]')" "['col8']" \
  "only the shifted column fails: $(json_get '[(c["column"], c["failures"]) for c in j["columns"] if c["failures"]]')"
if [ "$sanitized" = 0 ]; then
  # One version is 48 MB as float32; both together 96 MB.
  echo "peak RSS: two 200-row versions $tiny_kib KiB, two 400000-row versions $big_kib KiB"
  if [ "$big_kib" -le $((tiny_kib + 16 * 1024)) ]; then pass; else
    fail "checking two 48 MB versions peaked at $big_kib KiB, two 200-row ones at $tiny_kib KiB (+16 MiB allowed)"; fi
fi

# And a version checked against itself passes, still in bounded memory.
self=$(peak_rss_kib data check big1 --against big1)
read -r self_kib self_rc <<< "$(printf '%s' "$self" | tail -n 1)"
expect_eq "$self_rc" "0" "a version against itself passes"
if [ "$sanitized" = 0 ]; then
  if [ "$self_kib" -le $((tiny_kib + 16 * 1024)) ]; then pass; else
    fail "checking a 48 MB version against itself peaked at $self_kib KiB (tiny: $tiny_kib KiB, +16 MiB allowed)"; fi
fi
finish
