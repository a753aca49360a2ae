#!/bin/bash
# The data-path figures of a run (issue 15): load_s, first_step_s and
# peak_rss_bytes in `train --json`, in the run's recorded summary and in
# `runs show`. No figure is compared with an absolute time: only that each
# is a number >= 0 and that the times fit inside the command's own wall time.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
expect_rc 0 data import bc "$TEST_DATA/breast_cancer.csv"

cat >"$WORK/digits.ini" <<'INI'
name       = digits-mlp
dataset    = digits
layers     = dense(64) relu dense(10)
optimizer  = adam
lr         = 0.003
batch      = 32
epochs     = 2
seed       = 1
threads    = 1
validation = 0.1
INI

# now: seconds since the epoch, as a decimal.
now() { date +%s.%N; }

t0=$(now)
expect_rc 0 --json train "$WORK/digits.ini"
wall=$(python3 -c "print($(now) - $t0)")
train_json=$OUT
json_get 'all(isinstance(j[k], (int, float)) and not isinstance(j[k], bool) and j[k] >= 0
              for k in ("load_s", "first_step_s", "peak_rss_bytes"))' | grep -qx True \
  && pass || fail "load_s, first_step_s, peak_rss_bytes are numbers >= 0: $OUT"
# first_step_s counts from the kernel's start time of the process, kept in
# 10 ms clock ticks: it may read up to one tick long.
json_get "j['load_s'] <= $wall and j['first_step_s'] <= $wall + 0.011" | grep -qx True \
  && pass || fail "load and first step fit in the command's wall time ($wall s): $OUT"
json_get 'isinstance(j["peak_rss_bytes"], int) and j["peak_rss_bytes"] > 0' | grep -qx True \
  && pass || fail "peak RSS is a whole, positive number of bytes"
# The dataset is loaded before the first step can run.
json_get 'j["load_s"] <= j["first_step_s"] + 0.011' | grep -qx True \
  && pass || fail "load_s within first_step_s (10 ms tick of the start time): $OUT"

# The catalog keeps the same figures in the run's summary.
expect_rc 0 --json runs show run-1
for key in load_s first_step_s peak_rss_bytes; do
  recorded=$(json_get "j['summary']['$key']")
  printed=$(OUT=$train_json json_get "j['$key']")
  expect_eq "$recorded" "$printed" "runs show --json summary.$key is what train --json printed"
done
expect_rc 0 runs show run-1
expect_contains "$OUT" "load  " "runs show prints the load time"
expect_contains "$OUT" "s after the process started" "runs show prints the first step"
expect_contains "$OUT" "(peak RSS)" "runs show prints the peak memory"

expect_rc 0 train "$WORK/digits.ini" --set seed=2
expect_contains "$OUT" "load_s" "train prints load_s"
expect_contains "$OUT" "peak_rss" "train prints the peak memory"

# A linear model trains no step: first_step_s is null, the others are set.
expect_rc 0 --json train "$WORK/digits.ini" --set dataset=bc --set layers=linear --set name=bc-linear
json_get 'j["first_step_s"] is None and j["load_s"] >= 0 and j["peak_rss_bytes"] > 0' | grep -qx True \
  && pass || fail "linear-only: first_step_s null, load_s and peak_rss_bytes set: $OUT"
run_id=$(json_get 'j["run"]')
expect_rc 0 runs show "$run_id"
case "$OUT" in *"first step"*) fail "runs show prints no first step for a linear-only run" ;; *) pass ;; esac

# A damaged dataset object still fails the load: every object is verified.
for f in $(cd "$ANNEAL_HOME" && find objects -type f); do
  chmod u+w "$ANNEAL_HOME/$f"
  printf 'x' | dd of="$ANNEAL_HOME/$f" bs=1 seek=20 conv=notrunc 2>/dev/null
done
expect_rc 1 train "$WORK/digits.ini" --set seed=3
expect_contains "$ERR" "damaged" "a damaged object is reported, not trained on"
finish
