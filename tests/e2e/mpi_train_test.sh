#!/bin/bash
# `mpirun -np N anneal train`: one run trained on N ranks, rank 0 alone on
# the store.
#   - N = 1 under mpirun gives exactly plain `anneal train`'s weights;
#   - N = 2 gives the same bits run after run, and N = 2 and 4 match one
#     process at the same global batch within rounding: the same test
#     accuracy to 0.2 points and every epoch's training loss to 1e-4
#     relative;
#   - the same with streamed rows (memory_budget) and a validation split;
#   - ranks other than 0 open no store and read no config: given a store
#     and a config that do not exist, the run still trains;
#   - a rank killed after a checkpoint (fault point) stops the job, and
#     --resume continues the run on 2 ranks (ending at the uninterrupted
#     2-rank bits) or on 1;
#   - the lineage records the ranks and their hosts;
#   - every other command stays refused on several ranks.
# Skipped (77) where mpirun or the MPI plugin is missing.
. "$E2E_LIB"

require_mpi plugin
mpi() { $MPIRUN -x ANNEAL_HOME "$@"; }
# mpi_run N ARGS...: anneal on N ranks, as run() does it (OUT, ERR, RC).
mpi_run() {
  local n=$1
  shift
  mpi -np "$n" "$ANNEAL" "$@" > "$WORK/stdout" 2> "$WORK/stderr"
  RC=$?
  OUT=$(cat "$WORK/stdout")
  ERR=$(cat "$WORK/stderr")
}
# train_losses RUN: the run's per-epoch training losses, one a line.
train_losses() {
  "$ANNEAL" --json runs show "$1" | python3 -c '
import json, sys
j = json.load(sys.stdin)
for e in j["epochs"]: print(repr(e["train_loss"]))'
}
# losses_match RUN_A RUN_B WHAT: every epoch's training loss of the two
# runs within 1e-4 relative (their losses, side by side, left in
# $WORK/losses); fails naming WHAT otherwise, or when there are none.
losses_match() {
  paste <(train_losses "$1") <(train_losses "$2") > "$WORK/losses"
  python3 - "$WORK/losses" <<'PY' && pass || fail "$3: training losses differ from one process by more than 1e-4 relative: $(cat "$WORK/losses")"
import sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
if not lines: sys.exit(1)
for line in lines:
    a, b = map(float, line.split())
    if abs(a - b) > 1e-4 * abs(a): sys.exit(1)
PY
}
lineage() { "$ANNEAL" --json model show "$1" | python3 -c "import json,sys; l=json.load(sys.stdin)['lineage']; print($2)"; }

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
digits_mpi_config "$WORK/d.ini" digits-mpi "epochs = 3" "checkpoint_every = 20"

# One process: the reference.
expect_rc 0 --json train "$WORK/d.ini"
single_hash=$(json_get 'j["weights_hash"]')
single_acc=$(json_get 'j["metrics"]["test_accuracy"]')
single_run=$(json_get 'j["run"]')
expect_eq "$(lineage digits-mpi@v1 'l["ranks"], l["hosts"] == [l["host"]]')" "1 True" "one process: one rank, this host"

# N = 1 under mpirun: the same process, bit for bit.
mpi_run 1 --json train "$WORK/d.ini"
expect_eq "$RC" "0" "one rank under mpirun trains: $ERR"
expect_eq "$(json_get 'j["weights_hash"]')" "$single_hash" "one rank under mpirun: exactly the single-process weights"

# N = 2, twice: the same bits each time.
mpi_run 2 --json train "$WORK/d.ini"
expect_eq "$RC" "0" "two ranks train: $ERR"
two_hash=$(json_get 'j["weights_hash"]')
two_acc=$(json_get 'j["metrics"]["test_accuracy"]')
two_run=$(json_get 'j["run"]')
two_model=$(json_get 'j["model"]')
expect_contains "$ERR" "training on 2 ranks" "rank 0 says it trains on two ranks"
mpi_run 2 --json train "$WORK/d.ini"
expect_eq "$RC" "0" "two ranks train again: $ERR"
expect_eq "$(json_get 'j["weights_hash"]')" "$two_hash" "two ranks: the same weights run after run"
[ "$two_hash" != "$single_hash" ] && pass || fail "two ranks gave the single process's hash: the sums did not cross ranks?"
python3 - "$single_acc" "$two_acc" <<'PY' && pass || fail "two ranks: test accuracy $two_acc, one process $single_acc (more than 0.2 points apart)"
import sys
a, b = map(float, sys.argv[1:])
sys.exit(0 if abs(a - b) <= 0.002 + 1e-12 else 1)
PY
losses_match "$single_run" "$two_run" "two ranks"
expect_eq "$(wc -l < "$WORK/losses")" "3" "three epochs each"
expect_eq "$(lineage "$two_model" 'l["ranks"], len(l["hosts"]), all(l["hosts"])')" "2 2 True" \
  "the lineage records two ranks and each one's host"

# N = 4 (on 2 cores: oversubscribed, which only makes it slower).
mpi_run 4 --json train "$WORK/d.ini"
expect_eq "$RC" "0" "four ranks train: $ERR"
four_acc=$(json_get 'j["metrics"]["test_accuracy"]')
four_run=$(json_get 'j["run"]')
python3 - "$single_acc" "$four_acc" <<'PY' && pass || fail "four ranks: test accuracy $four_acc, one process $single_acc (more than 0.2 points apart)"
import sys
a, b = map(float, sys.argv[1:])
sys.exit(0 if abs(a - b) <= 0.002 + 1e-12 else 1)
PY
losses_match "$single_run" "$four_run" "four ranks"

# An ensemble with dropout after it: each rank runs its share of the
# samples' member rows, and a member row's dropout mask is the one it gets
# in one process (the layers after the ensemble number rows K a sample), so
# the training losses match one process's as above.
sed -e 's/^name.*/name = digits-ensemble/' -e 's/^layers.*/layers = ensemble(4) dense(32) relu dropout(0.3) dense(10)/' \
  "$WORK/d.ini" > "$WORK/e.ini"
expect_rc 0 --json train "$WORK/e.ini"
ensemble_single=$(json_get 'j["run"]')
mpi_run 2 --json train "$WORK/e.ini"
expect_eq "$RC" "0" "two ranks train the ensemble: $ERR"
losses_match "$ensemble_single" "$(json_get 'j["run"]')" "ensemble on two ranks"

# Rows streamed from the store in windows (memory_budget) and a validation
# split: rank 0 serves both, and the ranks see the windows in the same order.
sed -e 's/^name.*/name = digits-stream/' "$WORK/d.ini" > "$WORK/s.ini"
printf 'validation = 0.2\nmemory_budget = 200K\n' >> "$WORK/s.ini"
expect_rc 0 --json train "$WORK/s.ini"
expect_eq "$(json_get 'j["streamed"]')" "True" "one process streams"
single_val=$(json_get 'j["metrics"]["val_accuracy"], j["metrics"]["test_accuracy"]')
mpi_run 2 --json train "$WORK/s.ini"
expect_eq "$RC" "0" "two ranks stream: $ERR"
expect_eq "$(json_get 'j["streamed"]')" "True" "rank 0 streams"
python3 - $single_val $(json_get 'j["metrics"]["val_accuracy"], j["metrics"]["test_accuracy"]') <<'PY' && pass ||
import sys
a, b, c, d = map(float, sys.argv[1:])
sys.exit(0 if abs(a - c) <= 0.002 + 1e-12 and abs(b - d) <= 0.002 + 1e-12 else 1)
PY
  fail "streamed on two ranks: validation and test accuracy more than 0.2 points from one process's"

# ple fits its edges on a sample of the training rows before the first
# step: every rank reads the same rows (rank 1's through rank 0's store,
# streamed), so every rank has the same edges and the losses match one
# process's as above.
sed -e 's/^name.*/name = digits-ple/' -e 's/^layers.*/layers = ple(8) dense(32) relu dense(10)/' "$WORK/s.ini" \
  > "$WORK/p.ini"
expect_rc 0 --json train "$WORK/p.ini"
ple_single=$(json_get 'j["run"]')
mpi_run 2 --json train "$WORK/p.ini"
expect_eq "$RC" "0" "two ranks train ple, streamed: $ERR"
losses_match "$ple_single" "$(json_get 'j["run"]')" "ple on two ranks"

# Rank 1 gets a store and a config that do not exist: it opens neither.
mpi -np 1 "$ANNEAL" --json train "$WORK/d.ini" : -np 1 "$ANNEAL" --store "$WORK/no-such-store" --json train \
  "$WORK/no-such.ini" > "$WORK/stdout" 2> "$WORK/stderr"
expect_eq "$?" "0" "rank 1 without a store or a config: $(cat "$WORK/stderr")"
OUT=$(cat "$WORK/stdout")
expect_eq "$(json_get 'j["weights_hash"]')" "$two_hash" "the same run as when rank 1 could see them"
[ ! -e "$WORK/no-such-store" ] && pass || fail "rank 1 created a store"

# Rank 1 dies after the first checkpoint: the job stops, the run resumes.
use_fault_build
mpi -np 2 -x ANNEAL_FAULT=train.rank-1.checkpointed=crash "$ANNEAL" train "$WORK/d.ini" > "$WORK/stdout" 2> "$WORK/stderr"
[ "$?" -ne 0 ] && pass || fail "a killed rank: mpirun exited 0"
killed=$(latest_run)
"$ANNEAL" --json runs show "$killed" > "$WORK/show"
expect_eq "$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["status"], len(j["checkpoints"]) > 0)' "$WORK/show")" \
  "running True" "the killed run is left running with its checkpoint"
mpi_run 2 --json train --resume "$killed"
expect_eq "$RC" "0" "resume on two ranks: $ERR"
expect_eq "$(json_get 'j["weights_hash"]')" "$two_hash" "resumed on two ranks: the uninterrupted two-rank weights"

# The same kill, resumed on one process (N changed on resume).
mpi -np 2 -x ANNEAL_FAULT=train.rank-1.checkpointed=crash "$ANNEAL" train "$WORK/d.ini" > "$WORK/stdout" 2> "$WORK/stderr"
[ "$?" -ne 0 ] && pass || fail "a killed rank (second time): mpirun exited 0"
killed=$(latest_run)
expect_rc 0 --json train --resume "$killed"
expect_eq "$(lineage "$(json_get 'j["model"]')" 'l["ranks"]')" "1" "resumed on one process: its lineage says one rank"
python3 - "$single_acc" "$(json_get 'j["metrics"]["test_accuracy"]')" <<'PY' && pass || fail "resumed on one rank: accuracy too far from one process"
import sys
a, b = map(float, sys.argv[1:])
sys.exit(0 if abs(a - b) <= 0.002 + 1e-12 else 1)
PY

# And a single process killed at a checkpoint, resumed on two ranks.
# (In a subshell, whose exit status carries the kill and whose stderr takes
# bash's "Killed" line.)
(ANNEAL_FAULT=checkpoint.committed=crash "$ANNEAL" train "$WORK/d.ini" > /dev/null 2>&1; exit $?) 2> /dev/null
[ "$?" -ne 0 ] && pass || fail "the fault did not kill the single process"
killed=$(latest_run)
mpi_run 2 --json train --resume "$killed"
expect_eq "$RC" "0" "a one-process run resumed on two ranks: $ERR"
python3 - "$single_acc" "$(json_get 'j["metrics"]["test_accuracy"]')" <<'PY' && pass || fail "resumed on two ranks: accuracy too far from one process"
import sys
a, b = map(float, sys.argv[1:])
sys.exit(0 if abs(a - b) <= 0.002 + 1e-12 else 1)
PY

# A failure on rank 0 before training (a config that does not exist) ends
# every rank with rank 0's error, instead of leaving rank 1 waiting.
mpi_run 2 train "$WORK/missing.ini"
expect_eq "$RC" "2" "a missing config on two ranks: exit 2"
expect_contains "$ERR" "rank 0 of 2: " "the error names the rank"
expect_contains "$ERR" "missing.ini" "the error names the file"
# Linear models are fitted by one process.
sed 's/^layers.*/layers = linear/' "$WORK/d.ini" > "$WORK/linear.ini"
runs_before=$("$ANNEAL" --json runs list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["runs"]))')
mpi_run 2 train "$WORK/linear.ini"
expect_eq "$RC" "2" "layers = linear on two ranks: exit 2"
expect_contains "$ERR" "layers = linear: the linear model is fitted by one process" "says why"
expect_eq "$("$ANNEAL" --json runs list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["runs"]))')" \
  "$runs_before" "no run recorded for it"
# So are boosted trees (XGBoost's booster runs in one process).
sed 's/^layers.*/layers = trees/' "$WORK/d.ini" > "$WORK/trees.ini"
mpi_run 2 train "$WORK/trees.ini"
expect_eq "$RC" "2" "layers = trees on two ranks: exit 2"
expect_contains "$ERR" "layers = trees: boosted trees are trained by one process" "says why"
expect_eq "$("$ANNEAL" --json runs list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["runs"]))')" \
  "$runs_before" "no run recorded for the trees either"
finish
