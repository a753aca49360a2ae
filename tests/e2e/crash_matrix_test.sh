#!/bin/bash
# The crash matrix, in the spirit of SQLite's crash tests: every fault point
# in the sources (include/anneal/fault_point.h) is a place the process can
# die. For each one the command that passes it is killed there (SIGKILL),
# and then:
#   - fsck is clean (exit 0: unreferenced objects and stale runs are notes),
#   - nothing committed before the kill is lost: every dataset version,
#     stream, model and alias-history row the catalog held is still there,
#     and fsck verified the objects they own,
#   - the same command run again succeeds.
# A point that appears in the sources without a case here fails the test,
# so a new write path cannot go untested.
. "$E2E_LIB"
use_fault_build
SOURCES=$(cd "$TEST_DATA/../.." && pwd)

# Every fault point named in the code (fixed names only; the per-job
# "job.NAME.attempt-N.trained" is built at run time and tested by jobs_test,
# "train.rank-R.checkpointed" by mpi_train_test).
points=$(cd "$SOURCES" && grep -rhoE 'fault_point\("[a-z0-9.-]+"\)' store src cli quantize |
  sed -E 's/fault_point\("(.*)"\)/\1/' | sort -u)
[ "$(printf '%s\n' "$points" | wc -l)" -ge 20 ] && pass || fail "found too few fault points: $points"

# The rows a crash must never take away (checkpoints and run states change
# legitimately; aliases are checked through their history).
durable_rows() {
  python3 - "$ANNEAL_HOME/catalog.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for table in ("datasets", "dataset_versions", "dataset_streams", "models", "alias_history", "retrains"):
    for row in db.execute(f"SELECT * FROM {table} ORDER BY 1"):
        print(table, row)
PY
}

# The models a retrain promoted (alias history, action 'promote': only
# retrain --promote moves an alias so here) against those its retrain
# records say it promoted: one without the other is printed.
unrecorded_promotions() {
  python3 - "$ANNEAL_HOME/catalog.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
moved = {r[0] for r in db.execute("SELECT model_id FROM alias_history WHERE action = 'promote'")}
recorded = {r[0] for r in db.execute("SELECT model_id FROM retrains WHERE outcome = 'promoted'")}
for m in sorted(moved ^ recorded):
    print("model id", m, "moved an alias" if m in moved else "recorded promoted", "with no",
          "retrain record" if m in moved else "alias move")
PY
}

iris_config "$WORK/c.ini" crashy "epochs = 4" "checkpoint_every = 8" "keep_checkpoints = 1"
printf 'name = crashy-trees\ndataset = iris\nlayers = trees\ntree_rounds = 5\nthreads = 1\n' > "$WORK/trees.ini"
printf 'name = crashy-auto\ndataset = iris\nmax_trials = 3\nfolds = 2\nseed = 1\nthreads = 1\n' > "$WORK/auto.ini"

# Ozone (bench/data/tabular): a search under this seed and budget registers
# an ensemble (ensemble_test.sh), whose members train past auto.member.
printf 'name = crashy-ensemble\ndataset = ozone\nloss = mse\nmax_trials = 14\nseed = 1\nthreads = 1\n' > "$WORK/ensemble.ini"

expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
expect_rc 0 data import ozone "$TEST_DATA/../../bench/data/tabular/Ozone.train.csv.zst" --label V4
expect_rc 0 train "$WORK/c.ini"
expect_rc 0 train "$WORK/c.ini"

n=0
keys=0
for point in $points; do
  n=$((n + 1))
  finish_first=""
  # The command that passes the point, and what it needs first.
  case "$point" in
    import.*|objects.tmp-written)
      cmd=(data import "crash$n" "$TEST_DATA/wine.csv") ;;
    checkpoint.*|reclaim.*|model.*)
      cmd=(train "$WORK/c.ini") ;;
    trees.*)
      # Boosting has no checkpoint: a kill mid-boosting leaves the run
      # running (a later --resume boosts again from the start).
      cmd=(train "$WORK/trees.ini") ;;
    auto.member)
      # Killed while an ensemble's members train: the run stays running
      # with every trial recorded (ensemble_test resumes one).
      cmd=(train "$WORK/ensemble.ini") ;;
    auto.*)
      # A search killed after a trial's record: the run stays running with
      # its finished trials as checkpoints (auto_search_resume_test resumes
      # one to the uninterrupted result).
      cmd=(train "$WORK/auto.ini") ;;
    gc.*)
      # Garbage for gc: the objects of an import killed before its commit.
      head -n "$((40 + n))" "$TEST_DATA/wine.csv" > "$WORK/garbage$n.csv"
      ANNEAL_FAULT='import.objects-written=crash' "$ANNEAL" data import "garbage$n" "$WORK/garbage$n.csv" \
        > /dev/null 2>&1
      cmd=(gc) ;;
    alias.*)
      version=$(( (n % 2) + 1 ))
      cmd=(model alias set "crashy@v$version" production --reason "crash matrix $n") ;;
    job.*)
      run submit "$WORK/c.ini" --set "name=job$n" --retries 1
      job=$OUT
      cmd=(worker --cores 1 --lease 1s --drain) ;;
    retrain.*)
      # With --promote: the points after the model is registered are on
      # the promotion's path, whose alias move and retrain record commit
      # together (checked after every kill below).
      cmd=(retrain "$WORK/c.ini" --set "name=retrain$n" --promote production) ;;
    fsck.waiting-for-gc)
      # Reached only while a gc holds the store; fsck_during_gc_test stops
      # fsck there. fsck writes nothing, so a kill there has nothing to lose.
      pass
      continue ;;
    fsck.*)
      cmd=(fsck) ;;
    serve.*)
      # A request in flight in `anneal serve`, which writes nothing to the
      # store but the audit records of its own admin actions (each one
      # transaction, before which serve.recording lies): a kill there has
      # nothing to lose. serve_alias_test stops a request there while its
      # model's alias moves.
      pass
      continue ;;
    worker.idle)
      cmd=(worker --cores 1 --drain) ;;
    export.*)
      # Writes outside the store: killed there, the file is not in place (a
      # reader never sees half a model), and the rerun writes it.
      cmd=(model export crashy@v1 --format onnx -o "$WORK/crash$n.onnx") ;;
    encrypt.*)
      # The store is encrypted from here on: the points after this one run
      # with the key (from $ANNEAL_KEY_FILE), the worker's jobs too.
      export ANNEAL_KEY_FILE="$WORK/matrix-0.key"
      cmd=(encrypt) ;;
    rekey.key-switched)
      # Killed after the switch to the new key, before its audit record:
      # the new key opens the store, fsck notes the unrecorded switch, and
      # the rerun of the same rekey records it.
      old="$WORK/matrix-$keys.key"
      keys=$((keys + 1))
      cmd=(--key-file "$old" rekey --new-key-file "$WORK/matrix-$keys.key")
      export ANNEAL_KEY_FILE="$WORK/matrix-$keys.key" ;;
    rekey.*)
      # A rotation killed half way leaves the store refused until the same
      # rekey runs again; from then on the new key opens it.
      old="$WORK/matrix-$keys.key"
      keys=$((keys + 1))
      cmd=(--key-file "$old" rekey --new-key-file "$WORK/matrix-$keys.key")
      finish_first=yes ;;
    *)
      fail "fault point '$point' has no crash case in crash_matrix_test.sh"
      continue ;;
  esac
  [ "$point" = worker.idle ] && idle_cmd=(worker --cores 1)

  before=$(durable_rows)
  if [ "$point" = worker.idle ]; then
    ANNEAL_FAULT="$point=crash" "$ANNEAL" "${idle_cmd[@]}" > "$WORK/crash.out" 2>&1
  else
    ANNEAL_FAULT="$point=crash" "$ANNEAL" "${cmd[@]}" > "$WORK/crash.out" 2>&1
  fi
  rc=$?
  if [ "$rc" -ne 137 ]; then
    fail "$point: 'anneal ${cmd[*]}' was not killed there (exit $rc): $(tail -n 3 "$WORK/crash.out")"
    continue
  fi
  if [ -n "$finish_first" ]; then
    run fsck
    expect_contains "$ERR" "was interrupted" "$point: an unfinished rotation is refused"
    run "${cmd[@]}"
    [ "$RC" -eq 0 ] && pass || fail "$point: 'anneal ${cmd[*]}' to finish exited $RC: $ERR"
    export ANNEAL_KEY_FILE="$WORK/matrix-$keys.key"
  fi
  if [[ "$point" == export.* ]]; then
    [ ! -e "$WORK/crash$n.onnx" ] && pass || fail "$point: the killed export left its file in place"
  fi
  run fsck
  [ "$RC" -eq 0 ] && pass || fail "$point: fsck after the kill exited $RC: $OUT $ERR"
  if [ "$point" = rekey.key-switched ]; then
    expect_contains "$OUT" "NOTE audit trail: the store is encrypted with key" "$point: fsck notes the unrecorded switch"
    expect_rc 1 audit verify
  fi
  lost=$(comm -23 <(printf '%s\n' "$before" | sort) <(durable_rows | sort))
  [ -z "$lost" ] && pass || fail "$point: rows committed before the kill are gone: $lost"
  unrecorded=$(unrecorded_promotions)
  [ -z "$unrecorded" ] && pass || fail "$point: alias moves and retrain records disagree: $unrecorded"
  [ "${cmd[0]}" = worker ] && [ -n "${job:-}" ] && wait_for_lease_expiry "$job"
  run "${cmd[@]}"
  [ "$RC" -eq 0 ] && pass || fail "$point: 'anneal ${cmd[*]}' again exited $RC: $ERR"
  if [[ "$point" == job.* ]]; then
    expect_eq "$(job_field "$job" state)" "succeeded" "$point: the job succeeds after its worker's death"
  fi
  job=""
  expect_rc 0 fsck
  [[ "$point" == encrypt.* || "$point" == rekey.* ]] && expect_rc 0 audit verify  # the rerun recorded the switch
done
echo "crash matrix: $n points"

# Everything imported or trained before any of the kills still reads back.
expect_rc 0 data export iris -o "$WORK/iris.back"
cmp -s "$WORK/iris.back" "$TEST_DATA/iris.csv" && pass || fail "iris exports bit-identical after the matrix"
expect_rc 0 eval crashy@v1 iris
expect_rc 0 gc
expect_rc 0 fsck
expect_contains "$OUT" ": ok" "fsck after gc"
finish
