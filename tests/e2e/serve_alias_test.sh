#!/bin/bash
# `anneal serve` follows its models' aliases with no restart (issue 32):
# after `model promote`, `retrain --promote` and `model rollback` the next
# request is answered by the version the alias points at now, with that
# version's answers (predict's); a request in flight when the alias moves
# (stopped at the fault point serve.answering) finishes on the version it
# started with. A model whose object is damaged, or whose blob is not a
# model, is not ready (503 with the reason) while the others serve, and
# ready again once its alias points at a version that loads; an alias not
# yet set is not ready until it is.
. "$E2E_LIB"
. "$(dirname "$E2E_LIB")/serve/serve_lib.sh"
use_fault_build

expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
iris_config "$WORK/v1.ini" iris-mlp "epochs = 20"
iris_config "$WORK/v2.ini" iris-mlp "epochs = 40"
expect_rc 0 train "$WORK/v1.ini"
expect_rc 0 train "$WORK/v2.ini"
expect_rc 0 model alias set iris-mlp@v1 production
cut -d, -f1-4 "$TEST_DATA/iris.csv" >"$WORK/rows.csv"
for v in 1 2; do
  expect_rc 0 predict "iris-mlp@v$v" --input "$WORK/rows.csv" -o "$WORK/predict-v$v.csv"
done
cmp -s "$WORK/predict-v1.csv" "$WORK/predict-v2.csv" && fail "v1 and v2 must answer differently for this test" || pass
"$PY" "$SERVE_CLIENT" body infer "$WORK/rows.csv" >"$WORK/infer.json"

# A model that will not load: its objects damaged after training.
find "$ANNEAL_HOME/objects" -type f | sort >"$WORK/objects-before"
printf 'name = broken\ndataset = iris\nlayers = dense(8) relu dense(3)\nepochs = 2\nseed = 1\nthreads = 1\n' >"$WORK/broken.ini"
expect_rc 0 train "$WORK/broken.ini"
expect_rc 0 model alias set broken@v1 production
find "$ANNEAL_HOME/objects" -type f | sort | comm -13 "$WORK/objects-before" - >"$WORK/broken-objects"
[ -s "$WORK/broken-objects" ] && pass || fail "training 'broken' wrote no object"
while read -r object; do
  chmod u+w "$object"
  printf 'garbage' | dd of="$object" bs=1 seek=20 conv=notrunc status=none
done <"$WORK/broken-objects"

# answer_version: infer on iris-mlp@production; sets VERSION to the version
# that answered and checks the answer is predict's for that version.
answer_version() {
  VERSION=""
  http POST /v2/models/iris-mlp@production/infer -H 'Content-Type: application/json' --data-binary @"$WORK/infer.json"
  [ "$STATUS" = 200 ] || { fail "infer: HTTP $STATUS: $BODY"; return; }
  VERSION=$(body_get 'j["model_version"]')
  "$PY" "$SERVE_CLIENT" as_csv infer <"$WORK/body" >"$WORK/answer.csv"
  [ -e "$WORK/predict-v$VERSION.csv" ] || return 0
  cmp -s "$WORK/answer.csv" "$WORK/predict-v$VERSION.csv" && pass ||
    fail "the answer of v$VERSION is not predict's for v$VERSION"
}

fault_fifos serve
export ANNEAL_FAULT='serve.answering@1=pause'
start_server alias --model iris-mlp@production --model broken@production --model iris-mlp@staging ||
  { fail "the server did not start: $(cat "$WORK/alias.err")"; finish; }
unset ANNEAL_FAULT
expect_contains "$(cat "$WORK/alias.err")" "broken@production is not ready" "the damaged model is logged at start"

# The first infer stops at the fault point, holding v1.
curl -sS --max-time 300 -o "$WORK/inflight.json" -D "$WORK/inflight.headers" -H 'Content-Type: application/json' \
  --data-binary @"$WORK/infer.json" "$BASE/v2/models/iris-mlp@production/infer" &
INFLIGHT=$!
fault_reached serve >/dev/null || fail "the first request never reached serve.answering"
expect_rc 0 model promote iris-mlp@v2 --to production
answer_version
expect_eq "$VERSION" "2" "after promote, the next request is answered by v2"
fault_resume serve
wait "$INFLIGHT" && pass || fail "the request in flight failed"
expect_eq "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["model_version"])' "$WORK/inflight.json")" \
  "1" "the request in flight finished on v1"
"$PY" "$SERVE_CLIENT" as_csv infer <"$WORK/inflight.json" >"$WORK/inflight.csv"
cmp -s "$WORK/inflight.csv" "$WORK/predict-v1.csv" && pass || fail "the request in flight did not get v1's answer"

expect_rc 0 model rollback iris-mlp production
answer_version
expect_eq "$VERSION" "1" "after rollback, v1 answers"
expect_rc 0 retrain "$WORK/v2.ini" --promote production
answer_version
expect_eq "$VERSION" "3" "after retrain --promote, the new v3 answers"
expect_rc 0 predict iris-mlp@v3 --input "$WORK/rows.csv" -o "$WORK/predict-v3.csv"
answer_version
expect_eq "$VERSION" "3" "v3's answer is predict's"

# The damaged model: 503 with the reason, the others serve on.
http GET /v2/models/broken@production/ready
expect_status 503 "a damaged model is not ready"
expect_contains "$(body_get 'j["error"]')" "model broken@v1 cannot be loaded" "says which version and why"
http POST /v2/models/broken@production/infer --data-binary @"$WORK/infer.json"
expect_status 503 "infer on a damaged model"
http GET /v2/models/iris-mlp@production/ready
expect_status 200 "the others are ready"
# Moved to a version that loads, it is ready; moved to one whose blob is not
# a model, not.
printf 'name = broken\ndataset = iris\nlayers = dense(8) relu dense(3)\nepochs = 2\nseed = 2\nthreads = 1\n' >"$WORK/broken2.ini"
expect_rc 0 train "$WORK/broken2.ini"
expect_rc 0 model alias set broken@v2 production
http GET /v2/models/broken@production/ready
expect_status 200 "ready once its alias points at a sound version"
expect_eq "$(body_get 'j["version"]')" "2" "broken@production is at v2"
labels=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"SELECT blob FROM dataset_streams WHERE role = 'labels'\").fetchone()[0])" "$ANNEAL_HOME/catalog.db")
expect_rc 0 train "$WORK/broken2.ini"
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(\"UPDATE models SET blob = ? WHERE name = 'broken' AND version = 3\", (sys.argv[2],)); c.commit()" \
  "$ANNEAL_HOME/catalog.db" "$labels"
expect_rc 0 model alias set broken@v3 production
http GET /v2/models/broken@production/ready
expect_status 503 "a blob that is not a model: not ready"
expect_contains "$(body_get 'j["error"]')" "model broken@v3 cannot be loaded" "names v3"
answer_version
expect_eq "$VERSION" "3" "iris-mlp serves on meanwhile"

# An alias not set yet: not ready, then ready once set.
http GET /v2/models/iris-mlp@staging/ready
expect_status 503 "an unset alias is not ready"
expect_contains "$(body_get 'j["error"]')" "alias 'iris-mlp@staging' is not set" "says the alias is unset"
expect_rc 0 model alias set iris-mlp@v1 staging
http GET /v2/models/iris-mlp@staging/ready
expect_status 200 "ready once the alias is set"

stop_server "$SERVER_PID"
expect_eq "$SERVER_RC" "0" "SIGTERM: exit 0"
finish
