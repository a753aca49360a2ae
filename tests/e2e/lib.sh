# Shared helpers for the end-to-end tests. Each test sources this file, runs
# the built binary ($ANNEAL) against a throwaway store and checks its output,
# exit codes and the store afterwards.
set -u

: "${ANNEAL:?ANNEAL must point at the built anneal binary}"
: "${TEST_DATA:?TEST_DATA must point at tests/data}"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/anneal-e2e-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export ANNEAL_HOME="$WORK/store"
FAILURES=0
CHECKS=0

fail() { echo "FAIL: $*" >&2; FAILURES=$((FAILURES + 1)); }
pass() { CHECKS=$((CHECKS + 1)); }

# run CMD...: runs anneal, keeping stdout in $OUT, stderr in $ERR, code in $RC.
run() {
  "$ANNEAL" "$@" >"$WORK/stdout" 2>"$WORK/stderr"
  RC=$?
  OUT=$(cat "$WORK/stdout")
  ERR=$(cat "$WORK/stderr")
}

# expect_rc CODE CMD...: runs anneal and checks its exit code.
expect_rc() {
  local want=$1
  shift
  run "$@"
  if [ "$RC" -ne "$want" ]; then
    fail "anneal $* exited $RC, expected $want; stderr: $ERR"
  else
    pass
  fi
}

# expect_contains TEXT NEEDLE LABEL
expect_contains() {
  case "$1" in
    *"$2"*) pass ;;
    *) fail "$3: expected to find '$2' in: $1" ;;
  esac
}

expect_eq() {
  if [ "$1" = "$2" ]; then pass; else fail "$3: expected '$2', got '$1'"; fi
}

# expect_error CODE NEEDLE ARGS...: anneal fails with CODE, in one
# "anneal: " line that contains NEEDLE.
expect_error() {
  local code=$1 needle=$2
  shift 2
  expect_rc "$code" "$@"
  expect_contains "$ERR" "$needle" "anneal $*"
  expect_eq "$(printf '%s\n' "$ERR" | grep -c '^anneal: ')" "1" "one error line for: $*"
}

# at_least A B: succeeds when the number A >= the number B.
at_least() { python3 -c "import sys; sys.exit(0 if float('$1') >= float('$2') else 1)"; }

# epoch1_loss RUN: the run's first epoch's training loss.
epoch1_loss() {
  "$ANNEAL" --json runs show "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)['epochs'][0]['train_loss'])"
}

# serves_wine_model REF LAYER ACC: a network trained on tests/data/wine.csv
# as a user meets it: `model show` prints LAYER, eval reproduces the run's
# test accuracy ACC, predict answers all 178 rows (into $WORK/pred.csv),
# agreeing with the labels on >= 90%, and the first five rows predicted
# alone ($WORK/five.csv) give the lines they get among all: a row's
# prediction does not depend on the rows batched with it.
serves_wine_model() {
  local ref=$1 layer=$2 acc=$3 agree
  expect_rc 0 model show "$ref"
  expect_contains "$OUT" "$layer" "model show prints the layer"
  expect_rc 0 --json eval "$ref" wine
  expect_eq "$(json_get 'j["metrics"]["accuracy"]')" "$acc" "eval reproduces the run's test accuracy"
  expect_rc 0 --json predict "$ref" --input "$TEST_DATA/wine.csv" -o "$WORK/pred.csv" --force
  expect_eq "$(json_get 'j["rows"]')" "178" "predicted every row"
  agree=$(python3 - "$TEST_DATA/wine.csv" "$WORK/pred.csv" <<'PY'
import csv, sys
truth = [r[-1] for r in list(csv.reader(open(sys.argv[1])))[1:]]
pred = [r[1] for r in list(csv.reader(open(sys.argv[2])))[1:]]
print(sum(a == b for a, b in zip(truth, pred)) / len(truth))
PY
)
  at_least "$agree" 0.9 && pass || fail "predictions agree with the labels: $agree"
  head -n 6 "$TEST_DATA/wine.csv" >"$WORK/five.csv"
  expect_rc 0 predict "$ref" --input "$WORK/five.csv" -o "$WORK/five.out" --force
  cmp -s <(head -n 6 "$WORK/pred.csv") "$WORK/five.out" && pass || fail "the first rows predicted alone differ"
}

# warm_starts_from PARENT RUN SCRATCH_RUN: `train --json` just ran RUN with
# warm_start = PARENT (its JSON in $OUT): the model records its parent, and
# its first epoch's loss is under half SCRATCH_RUN's (it begins where the
# parent ended).
warm_starts_from() {
  local parent=$1 warm_run=$2 scratch_run=$3 warm_loss cold_loss
  expect_rc 0 --json model show "$(json_get 'j["model"]')"
  expect_eq "$(json_get 'j["lineage"]["parent"], j["lineage"]["warm_start"]')" "$parent True" \
    "the warm start records its parent"
  warm_loss=$(epoch1_loss "$warm_run")
  cold_loss=$(epoch1_loss "$scratch_run")
  python3 -c "import sys; sys.exit(0 if $warm_loss < 0.5 * $cold_loss else 1)" && pass \
    || fail "a warm start begins where the parent ended: epoch 1 loss $warm_loss vs $cold_loss from scratch"
}

# refuses_int8_and_pruning REF LAYER KIND: quantize --int8 and prune
# (unstructured and structured) refuse the network REF in one line naming
# its layer LAYER ("layer 1 'ple(8)'") of kind KIND, leaving the store as
# it was.
refuses_int8_and_pruning() {
  local ref=$1 layer=$2 kind=$3 before
  before=$(store_state)
  expect_error 2 "$layer: int8 and sparse inference support dense, conv, pooling, flatten, dropout and activations, not $kind" \
    quantize "$ref" --int8 --calib wine --calib-samples 50 --threads 1
  expect_error 2 "$layer" prune "$ref" --sparsity 0.5 --finetune-epochs 1 --threads 1
  expect_error 2 "$layer" prune "$ref" --structured --sparsity 0.5 --finetune-epochs 1 --threads 1
  expect_eq "$(store_state)" "$before" "refused quantize and prune leave the store as it was"
}

# json_get EXPR: evaluates a Python expression over the JSON in $OUT (as j).
json_get() {
  printf '%s' "$OUT" | python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"
}

# confusion_diff CM_A CM_B: half the L1 distance of two confusion matrices
# (JSON), the fewest rows whose predicted class differs between them.
confusion_diff() {
  python3 -c "
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(sum(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)) // 2)" "$1" "$2"
}

# latest_run: the id of the newest run (run-N).
latest_run() { "$ANNEAL" --json runs list | python3 -c "import json,sys; print(json.load(sys.stdin)['runs'][-1]['id'])"; }

# resumes_to RUN TRIALS HASH WHAT: a killed layers = auto run RUN resumes
# (`train --resume`), takes the search's first TRIALS trials as finished
# and registers the model whose weights_hash is HASH.
resumes_to() {
  local run_id=$1 trials=$2 hash=$3 what=$4
  run train --resume "$run_id"
  expect_eq "$RC" "0" "$what resumes; stderr: $ERR"
  expect_contains "$ERR$OUT" "the search's first $trials trials finished before" "$what: the resume reruns no trial"
  expect_rc 0 --json runs show "$run_id"
  expect_eq "$(json_get 'j["summary"]["weights_hash"]')" "$hash" "$what: the resumed run registers the same model"
}

# A fingerprint of everything in the store: catalog content and object files.
store_state() {
  ( cd "$ANNEAL_HOME" && find objects tmp -type f | sort
    "$ANNEAL" data list --json 2>/dev/null ) | sha256sum
}

# --- fault points (include/anneal/fault_point.h) ------------------------------
# A test that must stop or kill anneal at an exact place runs the test build
# ($ANNEAL_FAULTS_BIN, fault points armed) with ANNEAL_FAULT=POINT[@N]=ACTION.
# No sleeps and no polling: a paused process and the test meet at two FIFOs.
# The 600 s bounds below only turn a process that died before its point
# into a failure instead of a hang; no correct run comes near them.

# use_fault_build: this test drives the test build from here on.
use_fault_build() {
  : "${ANNEAL_FAULTS_BIN:?ANNEAL_FAULTS_BIN must point at the anneal-faults binary}"
  ANNEAL=$ANNEAL_FAULTS_BIN
}

# fault_fifos [NAME]: (re)makes the FIFOs a `pause` action meets, in
# $WORK/fault-NAME, and exports ANNEAL_FAULT_DIR for the processes started
# after it. Two processes paused at once each need their own NAME.
fault_fifos() {
  export ANNEAL_FAULT_DIR="$WORK/fault-${1:-main}"
  rm -rf "$ANNEAL_FAULT_DIR"
  mkdir -p "$ANNEAL_FAULT_DIR"
  mkfifo "$ANNEAL_FAULT_DIR/reached" "$ANNEAL_FAULT_DIR/resume"
}

# fault_reached [NAME]: blocks until a process stops at a paused point;
# prints the line it wrote ("POINT PID"). Fails if none arrives in the bound.
fault_reached() {
  local line
  line=$(timeout 600 head -n 1 "$WORK/fault-${1:-main}/reached") || return 1
  [ -n "$line" ] || return 1
  printf '%s\n' "$line"
}

# fault_resume [NAME]: lets the process paused there go on.
fault_resume() {
  timeout 600 sh -c ': > "$1"' sh "$WORK/fault-${1:-main}/resume"
}

# wait_gone PID: blocks until process PID (not necessarily our child) exits.
wait_gone() {
  timeout 600 tail --pid="$1" -f /dev/null
}

# wait_for_lease_expiry JOB: the job's lease is wall-clock time the worker
# set; sleeps until that instant has passed (read from the catalog), so a
# second worker may take the job over. This waits on the clock the code under
# test defines, not on how fast anything runs.
wait_for_lease_expiry() {
  local left
  left=$(python3 - "$ANNEAL_HOME/catalog.db" "${1#job-}" <<'PY'
import sqlite3, sys, time
row = sqlite3.connect(sys.argv[1]).execute("SELECT lease_expires FROM jobs WHERE id = ?", (int(sys.argv[2]),)).fetchone()
print(max(0.0, (row[0] or 0) - time.time()) + 0.05)
PY
)
  sleep "$left"
}

# require_mpi [plugin]: skips the test (77), saying why, where Open MPI's
# mpirun is missing or, with "plugin", where anneal was built without its
# MPI plugin. MPIRUN: mpirun as the MPI tests start it (several ranks on
# this machine, as root if need be, over shared memory and TCP).
MPIRUN="mpirun --oversubscribe --allow-run-as-root --mca btl self,vader,tcp"
require_mpi() {
  if ! command -v mpirun > /dev/null; then
    echo "SKIP: no mpirun here"
    exit 77
  fi
  if [ "${1:-}" = plugin ] && [ ! -e "$(dirname "$ANNEAL")/libanneal-mpi.so" ]; then
    echo "SKIP: anneal was built without its MPI plugin (libanneal-mpi.so)"
    exit 77
  fi
}

# cpu_caps: the CPU as anneal's oneDNN sees it (`anneal --json devices`,
# after ONEDNN_MAX_CPU_ISA), not as /proc/cpuinfo does: sets CPU_ISA (its
# instruction set, "avx2", "avx512_core_bf16"), CPU_BF16 and CPU_VNNI (1 or 0).
cpu_caps() {
  local caps
  caps=$("$ANNEAL" --json devices | python3 -c "
import json, sys
cpu = [d for d in json.load(sys.stdin)['devices'] if d['device'] == 'cpu'][0]
print(cpu['isa'], int(cpu['bf16']), int(cpu['int8_vnni']))") || { echo "anneal --json devices failed" >&2; exit 1; }
  read -r CPU_ISA CPU_BF16 CPU_VNNI <<< "$caps"
}

# require_cpu_bf16: skips the test (77), naming the capability, where the
# CPU cannot train precision = bf16 (no AVX512_BF16 or AMX for oneDNN).
require_cpu_bf16() {
  cpu_caps
  if [ "$CPU_BF16" != 1 ]; then
    echo "SKIPPED: the CPU lacks avx512_core_bf16 (oneDNN isa $CPU_ISA): precision = bf16 cannot train here"
    exit 77
  fi
}

# digits_mpi_config FILE NAME [LINE...]: the digits MLP the MPI tests train
# on several ranks (a global batch of 50, one thread a rank, no baseline
# model) with LINEs ("key = value", epochs among them) appended.
digits_mpi_config() {
  local file=$1 name=$2
  shift 2
  {
    printf 'name = %s\ndataset = digits\nlayers = dense(32) relu dense(10)\n' "$name"
    printf 'lr = 0.003\nbatch = 50\nseed = 5\nthreads = 1\nbaseline = false\n'
    [ "$#" -gt 0 ] && printf '%s\n' "$@"
  } > "$file"
}

# iris_config FILE NAME [LINE...]: a small iris MLP config (a second of
# training, one thread, fixed seed) with LINEs ("key = value") appended.
iris_config() {
  local file=$1 name=$2
  shift 2
  {
    printf 'name = %s\ndataset = iris\nlayers = dense(16) relu dense(3)\n' "$name"
    printf 'optimizer = adam\nlr = 0.01\nbatch = 16\nseed = 3\nthreads = 1\n'
    [ "$#" -gt 0 ] && printf '%s\n' "$@"
  } > "$file"
}

# catalog_dump: every row of every catalog table, as text (to compare the
# store's catalog before and after a command).
catalog_dump() {
  python3 - "$ANNEAL_HOME/catalog.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name"):
    for row in db.execute(f"SELECT * FROM {name} ORDER BY 1"):
        print(name, row)
PY
}

# job_field JOB FIELD: one field of `anneal jobs show JOB --json` ('' for null).
job_field() {
  "$ANNEAL" --json jobs show "$1" | python3 -c "import json,sys; v=json.load(sys.stdin)['$2']; print('' if v is None else v)"
}

finish() {
  if [ "$FAILURES" -ne 0 ]; then
    echo "$FAILURES of $((CHECKS + FAILURES)) checks failed" >&2
    exit 1
  fi
  echo "all $CHECKS checks passed"
  exit 0
}
