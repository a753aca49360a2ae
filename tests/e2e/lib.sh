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

# json_get EXPR: evaluates a Python expression over the JSON in $OUT (as j).
json_get() {
  printf '%s' "$OUT" | python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"
}

# A fingerprint of everything in the store: catalog content and object files.
store_state() {
  ( cd "$ANNEAL_HOME" && find objects tmp -type f | sort
    "$ANNEAL" data list --json 2>/dev/null ) | sha256sum
}

# wait_until SECONDS CMD...: polls CMD every 0.1s; false when time runs out.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.1
  done
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
