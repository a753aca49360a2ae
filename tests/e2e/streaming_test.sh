#!/bin/bash
# Training a version larger than memory_budget (issue 15): the rows stream
# from the store in windows of blocks. The same config and seed give the
# same weights run to run; kill -9 and --resume end at the uninterrupted
# weights; the bytes of rows held stay within the budget, and so does the
# process's resident memory beyond what a tiny run needs; a bad budget is
# one line naming where it was set. A warm-started run streams too.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
cat >"$WORK/s.ini" <<'INI'
name             = digits-stream
dataset          = digits
layers           = dense(64) relu dense(10)
lr               = 0.003
batch            = 32
epochs           = 4
seed             = 3
threads          = 1
validation       = 0.1
checkpoint_every = 20
memory_budget    = 256K
INI

# digits holds 1797 rows of 64 float32 (460 KB): under 256K it streams.
expect_rc 0 --json train "$WORK/s.ini"
want=$(json_get 'j["weights_hash"]')
expect_eq "$(json_get 'j["streamed"]')" "True" "a version larger than the budget streams"
expect_eq "$(json_get 'j["memory_budget"]')" "262144" "the budget is reported"
expect_eq "$(json_get 'j["data_peak_bytes"] <= j["memory_budget"]')" "True" "rows held within the budget: $OUT"
expect_eq "$(json_get 'j["metrics"]["test_accuracy"] > 0.85')" "True" "streamed training learns"
expect_contains "$ERR" "does not fit memory_budget = 256K: streaming it" "the run says it streams"
expect_rc 0 --json train "$WORK/s.ini"
expect_eq "$(json_get 'j["weights_hash"]')" "$want" "the same config and seed give the same weights"
expect_rc 0 runs show run-1
expect_contains "$OUT" "budget 256.0 KiB, streamed" "runs show says it streamed"

# In memory (the default budget) the full shuffle: another order, other weights.
expect_rc 0 --json train "$WORK/s.ini" --set memory_budget=1G
expect_eq "$(json_get 'j["streamed"]')" "False" "under 1G every row is held"
[ "$(json_get 'j["weights_hash"]')" != "$want" ] && pass || fail "a window order differs from the full shuffle"

# kill -9 at checkpoints early and late (the run has ~200 steps, one
# checkpoint every 20), then --resume: the uninterrupted weights.
for point in checkpoint.committed@2 checkpoint.committed@7; do
  ANNEAL_FAULT="$point=crash" "$ANNEAL_FAULTS_BIN" train "$WORK/s.ini" > /dev/null 2>&1
  expect_eq "$?" "137" "killed at $point"
  run_id=$(latest_run)
  expect_rc 2 train --resume "$run_id" --memory-budget 1G
  expect_contains "$ERR" "--memory-budget: a resumed run keeps its recorded budget" "a resume keeps the budget"
  expect_rc 0 --json train --resume "$run_id"
  expect_eq "$(json_get 'j["weights_hash"]')" "$want" "resume after a kill at $point"
  expect_eq "$(json_get 'j["streamed"]')" "True" "the resumed run streams too"
done

# A warm start reads through its parent's preprocessing and streams under
# the budget as well: the same weights run to run, rows held within it.
expect_rc 0 --json train "$WORK/s.ini" --set memory_budget=1G --set epochs=1 --set name=digits-parent
parent=$(json_get 'j["model"]')
expect_rc 0 --json train "$WORK/s.ini" --set warm_start="$parent" --set epochs=2
warm=$(json_get 'j["weights_hash"]')
expect_eq "$(json_get 'j["streamed"]')" "True" "a warm-started run streams beyond the budget"
expect_eq "$(json_get 'j["data_peak_bytes"] <= j["memory_budget"]')" "True" "warm start: rows held within the budget: $OUT"
expect_contains "$ERR" "warm start from $parent: its weights and preprocessing" "the warm start was used"
expect_rc 0 --json train "$WORK/s.ini" --set warm_start="$parent" --set epochs=2
expect_eq "$(json_get 'j["weights_hash"]')" "$warm" "a streamed warm start gives the same weights run to run"

# Bad budgets: one line naming where, exit 2, nothing recorded.
runs_before=$("$ANNEAL" --json runs list)
expect_rc 2 train "$WORK/s.ini" --memory-budget 12Q
expect_contains "$ERR" "--memory-budget: '12Q': expected bytes with an optional suffix K, M, G or T" "a bad flag"
expect_rc 2 train "$WORK/s.ini" --set memory_budget=100
expect_contains "$ERR" "--set memory_budget: memory_budget: '100': expected" "a budget below 64K"
sed 's/^memory_budget .*/memory_budget = lots/' "$WORK/s.ini" > "$WORK/bad.ini"
expect_rc 2 train "$WORK/bad.ini"
expect_contains "$ERR" "bad.ini:11: memory_budget: 'lots': expected" "a bad key names file:line"
expect_eq "$("$ANNEAL" --json runs list)" "$runs_before" "a refused budget records no run"

# Resident memory says nothing under AddressSanitizer (its quarantine keeps
# freed memory, its shadow grows with it): there the checks of process
# memory below are skipped; the bytes of rows held are checked still.
if ldd "$ANNEAL" 2>/dev/null | grep -q libasan; then sanitized=1; else sanitized=0; fi
rss_within() {  # CONDITION MESSAGE: a check of process memory, skipped under ASan
  [ "$sanitized" = 1 ] && return
  if eval "$1"; then pass; else fail "$2"; fi
}

# Process memory: a 48 MB version (400000 rows of 30 float32) trained under
# a 8M budget stays within what a tiny run of the same command takes plus
# the budget and a fixed allowance for the batches, the network and
# allocator slack; in memory it takes the whole version more.
awk 'BEGIN { srand(7); for (r = 0; r < 400000; r++) { s = 0; line = "";
       for (c = 0; c < 30; c++) { v = int(rand() * 2000) / 1000 - 1; s += (c < 5 ? v : 0); line = line v "," }
       print line (s > 0 ? "up" : "down") } }' > "$WORK/big.csv"
head -n 200 "$WORK/big.csv" > "$WORK/tiny.csv"
expect_rc 0 data import big "$WORK/big.csv" --no-header
expect_rc 0 data import tiny "$WORK/tiny.csv" --no-header
cat >"$WORK/big.ini" <<'INI'
name             = big
dataset          = big
layers           = dense(16) relu dense(2)
batch            = 256
epochs           = 1
threads          = 1
baseline         = false
checkpoint_every = 0
INI
expect_rc 0 --json train "$WORK/big.ini" --set dataset=tiny
tiny_rss=$(json_get 'j["peak_rss_bytes"]')
expect_rc 0 --json train "$WORK/big.ini" --memory-budget 8M
expect_eq "$(json_get 'j["streamed"]')" "True" "the large version streams under 8M"
expect_eq "$(json_get 'j["data_peak_bytes"] <= 8 << 20')" "True" "rows held within 8M: $OUT"
big_rss=$(json_get 'j["peak_rss_bytes"]')
allowance=$((16 << 20))
rss_within '[ "$big_rss" -le $((tiny_rss + (8 << 20) + allowance)) ]' \
  "streamed peak RSS $big_rss > tiny run's $tiny_rss + 8M budget + 16M allowance"
expect_rc 0 --json train "$WORK/big.ini"
expect_eq "$(json_get 'j["streamed"]')" "False" "the default budget holds the version"
mem_rss=$(json_get 'j["peak_rss_bytes"]')
rss_within '[ "$mem_rss" -ge $((big_rss + (24 << 20))) ]' \
  "held in memory ($mem_rss) should take well more than streamed ($big_rss)"

# eval reads a version a piece at a time: scoring all 400000 rows holds a
# 4 MiB piece (and its copies) and the predictions, not the version (48 MB)
# and its transformed copy.
peak_rss_kib() {  # ARGS...: anneal's peak RSS in KiB, its stdout in $OUT
  python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
sys.stdout.write(r.stdout.decode() + "\n" + str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) + " " + str(r.returncode))' \
    "$ANNEAL" "$@"
}
tiny_eval=$(peak_rss_kib eval big tiny --split all | tail -n 1)
big_eval=$(peak_rss_kib --json eval big big --split all)
read -r big_eval_kib big_eval_rc <<< "$(printf '%s' "$big_eval" | tail -n 1)"
read -r tiny_eval_kib tiny_eval_rc <<< "$tiny_eval"
expect_eq "$big_eval_rc $tiny_eval_rc" "0 0" "eval of the large and tiny versions"
OUT=$(printf '%s' "$big_eval" | head -n -1)
expect_eq "$(json_get 'j["metrics"]["rows"]')" "400000" "eval scored every row"
rss_within '[ "$big_eval_kib" -le $((tiny_eval_kib + 36 * 1024)) ]' \
  "eval of 400000 rows peaked at $big_eval_kib KiB, the tiny one at $tiny_eval_kib KiB (+36 MiB allowed)"

finish
