#!/bin/bash
# The least memory_budget a run accepts is one figure for a dataset, batch
# and machine, whatever budget was given (issue 29): every budget below it
# is refused naming the same figure, and the figure itself (and anything
# above) trains. Before the fix the figure moved with the budget given
# (100K: needs 175221; 175221: needs 180341; 180000: needs 180085).
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
cat >"$WORK/s.ini" <<'INI'
name             = digits-budget
dataset          = digits
layers           = dense(16) relu dense(10)
batch            = 32
epochs           = 1
seed             = 3
threads          = 1
validation       = 0.1
checkpoint_every = 0
INI

# least BUDGET: the least budget the refusal of BUDGET names ('' if none).
least() {
  run train "$WORK/s.ini" --memory-budget "$1"
  sed -n 's/.*; it needs at least \([0-9]*\) bytes$/\1/p' <<<"$ERR"
}
run train "$WORK/s.ini" --memory-budget 64K
minimum=$(sed -n 's/.*; it needs at least \([0-9]*\) bytes$/\1/p' <<<"$ERR")
[ -n "$minimum" ] && pass || fail "64K was not refused with a least budget: $ERR"
expect_eq "$RC" 2 "a budget too small is a usage error"
expect_eq "$(printf '%s\n' "$ERR" | grep -c '^anneal: ')" 1 "one error line"
expect_contains "$ERR" "--memory-budget: memory_budget = 64K: too small for dataset digits@v1 in batches of 32" \
  "the error names the flag, the dataset and the batch"
# Every budget below it names the same figure.
for budget in 70000 $((minimum - 4096)) $((minimum - 100)) $((minimum - 1)); do
  [ "$budget" -ge 65536 ] || continue
  expect_eq "$(least "$budget")" "$minimum" "the least budget named when $budget is given"
done
# The figure itself trains (streamed), and so does every budget above it.
for budget in "$minimum" $((minimum + 1)) $((minimum + 777)) $((minimum + 5000)) $((minimum * 2)); do
  expect_rc 0 --json train "$WORK/s.ini" --memory-budget "$budget"
  expect_eq "$(json_get 'j["streamed"] and j["data_peak_bytes"] <= j["memory_budget"]')" "True" \
    "budget $budget: streamed within the budget"
done
# The figures of issue 29, whatever this machine's minimum: each budget at
# or above it trains, each below it names the same minimum.
for budget in 100K 121973 175221 180000 180085 180341; do
  run train "$WORK/s.ini" --memory-budget "$budget"
  if [ "$RC" -eq 0 ]; then pass
  else expect_eq "$(least "$budget")" "$minimum" "budget $budget is refused only below the minimum"; fi
done

finish
