#!/bin/bash
# `anneal serve` (issue 32) as a client uses it, with curl and Python's
# http.client against a real server on a loopback port: every route of the
# Open Inference Protocol and of MLflow's scoring, bearer tokens and their
# roles, and hostile requests (malformed JSON, wrong shapes, NaN and text in
# numeric columns, oversized bodies, headers and row counts, too many
# connections, a request that never finishes), each refused with a 4xx JSON
# error and the server serving on. Then the refusals at start-up: a tokens
# file open to others, a non-loopback address without tokens, no models.
. "$E2E_LIB"
. "$(dirname "$E2E_LIB")/serve/serve_lib.sh"

expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
iris_config "$WORK/iris.ini" iris-mlp "epochs = 30"
expect_rc 0 train "$WORK/iris.ini"
expect_rc 0 model alias set iris-mlp@v1 production
cut -d, -f1-4 "$TEST_DATA/iris.csv" | head -n 11 >"$WORK/rows.csv"   # 10 rows, no label

# --- a server without tokens: every route -----------------------------------
start_server open --model iris-mlp@production || fail "the server did not start: $(cat "$WORK/open.err")"
OPEN_PID=$SERVER_PID

http GET /v2/health/live
expect_status 200 "live"
expect_eq "$(body_get 'j["live"]')" "True" "live says so"
http GET /v2/health/ready
expect_status 200 "ready"
http GET /v2
expect_status 200 "server metadata"
expect_eq "$(body_get 'j["name"]')" "anneal" "server metadata names anneal"
http GET /v2/models/iris-mlp@production
expect_status 200 "model metadata"
expect_eq "$(body_get 'j["versions"], len(j["inputs"]), j["inputs"][0]["name"], j["parameters"]["class_names"]')" \
  "['1'] 4 sepal_length_(cm) ['setosa', 'versicolor', 'virginica']" "metadata: version, inputs, classes"
http GET /v2/models/iris-mlp%40production/versions/1
expect_status 200 "metadata of the version the alias is at (the name %-escaped)"
http GET /v2/models/iris-mlp@production/versions/2
expect_status 404 "a version the alias is not at"
http GET /v2/models/iris-mlp@production/ready
expect_status 200 "model ready"
expect_eq "$(body_get 'j["ready"], j["version"]')" "True 1" "model ready names its version"
http GET /v2/models/iris-mlp@production/versions/1/ready
expect_status 200 "version ready"
http GET /v2/models/iris-mlp@staging/ready
expect_status 404 "a model that is not served"

"$PY" "$SERVE_CLIENT" body infer "$WORK/rows.csv" >"$WORK/infer.json"
http POST /v2/models/iris-mlp@production/infer -H 'Content-Type: application/json' --data-binary @"$WORK/infer.json"
expect_status 200 "infer, named columns"
expect_eq "$(body_get 'j["model_name"], j["model_version"], j["id"], [o["shape"] for o in j["outputs"]]')" \
  "iris-mlp@production 1 e2e [[10], [10, 3]]" "infer answers with the version, the id and the shapes"
expect_contains "$(cat "$WORK/headers")" "Anneal-Model-Version: iris-mlp@v1" "the version header"
cp "$WORK/body" "$WORK/infer-answer.json"
"$PY" "$SERVE_CLIENT" body tensor "$WORK/rows.csv" >"$WORK/tensor.json"
http POST /v2/models/iris-mlp@production/versions/1/infer --data-binary @"$WORK/tensor.json"
expect_status 200 "infer, one [N,F] tensor"
cmp -s "$WORK/body" <(sed 's/,"id":"e2e"//' "$WORK/infer-answer.json") && pass ||
  fail "the [N,F] tensor's answer differs from the named columns' answer"
for fmt in split records; do
  "$PY" "$SERVE_CLIENT" body $fmt "$WORK/rows.csv" >"$WORK/$fmt.json"
  http POST /invocations -H 'Content-Type: application/json' --data-binary @"$WORK/$fmt.json"
  expect_status 200 "MLflow dataframe_$fmt"
  expect_eq "$(body_get 'len(j["predictions"]), sorted(j["predictions"][0]), j["model_version"]')" \
    "10 ['p_setosa', 'p_versicolor', 'p_virginica', 'prediction'] 1" "MLflow $fmt answer"
done
http POST /models/iris-mlp@production/invocations -H 'Content-Type: text/csv' --data-binary @"$WORK/rows.csv"
expect_status 200 "MLflow CSV"
# The answers are predict's, byte for byte, in every format.
expect_rc 0 predict iris-mlp@production --input "$WORK/rows.csv" -o "$WORK/predict.csv"
http POST /invocations -H 'Content-Type: text/csv' -H 'Accept: text/csv' --data-binary @"$WORK/rows.csv"
expect_status 200 "MLflow CSV answered as CSV"
cmp -s "$WORK/body" "$WORK/predict.csv" && pass || fail "text/csv answer differs from predict's CSV"
"$PY" "$SERVE_CLIENT" as_csv infer <"$WORK/infer-answer.json" >"$WORK/infer.csv"
cmp -s "$WORK/infer.csv" "$WORK/predict.csv" && pass || fail "infer answer differs from predict: $(diff "$WORK/infer.csv" "$WORK/predict.csv" | head -5)"
http POST /invocations --data-binary @"$WORK/split.json" -H 'Content-Type: application/json'
printf '%s' "$BODY" | "$PY" "$SERVE_CLIENT" as_csv mlflow >"$WORK/mlflow.csv"
cmp -s "$WORK/mlflow.csv" "$WORK/predict.csv" && pass || fail "MLflow answer differs from predict"

# The same through http.client.
out=$("$PY" "$SERVE_CLIENT" request "$PORT" POST /v2/models/iris-mlp@production/infer "$WORK/infer.json" \
  "Content-Type: application/json")
expect_eq "$(head -n 1 <<<"$out")" "200" "http.client: infer"
expect_eq "$(tail -n +2 <<<"$out")" "$(cat "$WORK/infer-answer.json")" "http.client: the same answer"
out=$("$PY" "$SERVE_CLIENT" request "$PORT" GET /v2/health/ready)
expect_eq "$(head -n 1 <<<"$out")" "200" "http.client: ready"

# --- hostile requests: each a 4xx JSON error, and the server serves on -------
infer() { http POST /v2/models/iris-mlp@production/infer -H 'Content-Type: application/json' "$@"; }
infer --data-binary '{"inputs": [{"name": "x", "shape": [1'
expect_status 400 "malformed JSON"
expect_contains "$(body_get 'j["error"]')" "not valid JSON" "malformed JSON says so"
infer --data-binary '[1, 2]'
expect_status 400 "JSON that is not an object"
infer --data-binary '{"inputs": []}'
expect_status 400 "no inputs"
infer --data-binary '{"inputs": [{"name": "input", "shape": [2, 4], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6, 7]}]}'
expect_status 400 "data that does not fill its shape"
expect_contains "$(body_get 'j["error"]')" "shape holds 8 values, its data 7" "says which"
infer --data-binary '{"inputs": [{"name": "input", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}'
expect_status 400 "rows of the wrong width"
expect_contains "$(body_get 'j["error"]')" "the model takes 4 per row" "says the width"
infer --data-binary '{"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP99", "data": [1, 2, 3, 4]}]}'
expect_status 400 "unknown datatype"
infer --data-binary '{"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [1, "x", 3, 4]}]}'
expect_status 400 "a string in FP32 data"
"$PY" - "$WORK/rows.csv" >"$WORK/text.json" <<'PY'
import json, sys
rows = [r.split(",") for r in open(sys.argv[1]).read().split()]
cols = [{"name": n, "shape": [2], "datatype": "BYTES", "data": [rows[1][j], rows[2][j]]} for j, n in enumerate(rows[0])]
cols[1]["data"][1] = "wide"
print(json.dumps({"inputs": cols}))
PY
infer --data-binary @"$WORK/text.json"
expect_status 400 "text in a numeric column"
expect_contains "$(body_get 'j["error"]')" "column 'sepal_width_(cm)' holds text" "the error names the column"
sed 's/"wide"/"NaN"/' "$WORK/text.json" >"$WORK/nan.json"
infer --data-binary @"$WORK/nan.json"
printf 'sepal_length_(cm),sepal_width_(cm),petal_length_(cm),petal_width_(cm)\n5.1,NaN,1.4,0.2\n' >"$WORK/nan.csv"
run predict iris-mlp@production --input "$WORK/nan.csv" -o "$WORK/nan-out.csv"
if [ "$RC" = 0 ]; then expect_status 200 "NaN is read as predict reads it"; else
  expect_status 400 "NaN in a numeric column is refused as predict refuses it"; fi
infer --data-binary '{"inputs": [{"name": "sepal_length_(cm)", "shape": [1], "datatype": "FP32", "data": [1]}]}'
expect_status 400 "a missing feature column"
expect_contains "$(body_get 'j["error"]')" "sepal_width_(cm)" "names the missing column"
infer --data-binary '{"inputs": [{"name": "a", "shape": [2], "datatype": "FP32", "data": [1, 2]}, {"name": "b", "shape": [3], "datatype": "FP32", "data": [1, 2, 3]}]}'
expect_status 400 "columns of different lengths"
http POST /invocations -H 'Content-Type: application/json' --data-binary '{"instances": [[1, 2, 3, 4]]}'
expect_status 400 "MLflow without a dataframe"
http POST /invocations -H 'Content-Type: application/json' --data-binary '{"dataframe_split": {"columns": ["a"], "data": [[1, 2]]}}'
expect_status 400 "MLflow row of the wrong width"
http POST /invocations -H 'Content-Type: application/xml' --data-binary '<rows/>'
expect_status 415 "an unknown content type"
http GET /v2/models/iris-mlp@production/infer
expect_status 405 "GET on infer"
http GET /nowhere
expect_status 404 "an unknown route"
http GET /v2/models/iris-mlp@production/versions/1/infer/more
expect_status 404 "a route with more segments"
http GET '/v2/models/iris%zz/ready'
expect_status 400 "a malformed %-escape"
# Deep nesting is refused without recursion trouble.
python3 -c "print('{\"inputs\": [{\"name\": \"x\", \"shape\": [1], \"datatype\": \"FP32\", \"data\": ' + '['*100000 + ']'*100000 + '}]}')" >"$WORK/deep.json"
infer --data-binary @"$WORK/deep.json"
expect_status 400 "data nested 100000 deep"
http GET /v2/health/live
expect_status 200 "the server lives on after all that"
stop_server "$OPEN_PID"
expect_eq "$SERVER_RC" "0" "SIGTERM: exit 0"

# --- limits -----------------------------------------------------------------
start_server limits --model iris-mlp@production --max-body-bytes 2000 --max-rows 5 --max-header-bytes 1024 \
  --max-connections 2 --request-timeout 2 || fail "the limited server did not start: $(cat "$WORK/limits.err")"
LIMITS_PID=$SERVER_PID
head -c 5000 /dev/zero | tr '\0' ' ' >"$WORK/big.json"
infer --data-binary @"$WORK/big.json"
expect_status 413 "a body over --max-body-bytes"
expect_eq "$(body_get 'j["limit"]')" "body_bytes" "names the body limit"
# Sent chunked, with no length to refuse it by up front.
infer -H 'Transfer-Encoding: chunked' --data-binary @"$WORK/big.json"
expect_status 413 "a chunked body over the limit"
expect_eq "$(body_get 'j["limit"]')" "body_bytes" "names the body limit (chunked)"
infer --data-binary @"$WORK/tensor.json"
expect_status 413 "10 rows over --max-rows 5"
expect_eq "$(body_get 'j["limit"]')" "rows" "names the row limit"
http POST /invocations -H 'Content-Type: text/csv' --data-binary @"$WORK/rows.csv"
expect_status 413 "10 CSV rows over --max-rows 5"
http GET /v2/health/live -H "X-Filler: $(head -c 3000 /dev/zero | tr '\0' a)"
expect_status 431 "a header over --max-header-bytes"
expect_eq "$(body_get 'j["limit"]')" "header_bytes" "names the header limit"
# A request that does not arrive whole within --request-timeout: 408. The
# client holds its connection open without finishing the request; the
# server's clock decides, not this test's.
out=$("$PY" - "$PORT" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=300)
s.sendall(b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
print(s.recv(65536).decode(errors="replace").split("\r\n")[0])
PY
)
expect_eq "$out" "HTTP/1.1 408 Request Timeout" "an unfinished request times out with 408"
# Two connections held open (the limit); a third is refused with 429.
out=$("$PY" - "$PORT" <<'PY'
import socket, sys, http.client
port = int(sys.argv[1])
held = [http.client.HTTPConnection("127.0.0.1", port, timeout=300) for _ in range(2)]
for c in held:
    c.request("GET", "/v2/health/live")
    c.getresponse().read()
third = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
third.request("GET", "/v2/health/live")
r = third.getresponse()
print(r.status, r.read().decode())
PY
)
expect_contains "$out" '429 {"error":"the server holds its limit of 2 connections","limit":"connections"}' \
  "a connection over --max-connections"
http GET /v2/health/live
expect_status 200 "served again once the held connections closed"
stop_server "$LIMITS_PID"
expect_eq "$SERVER_RC" "0" "limits server: exit 0"

# --- tokens -----------------------------------------------------------------
printf '# roles\npredict p-0123456789abcdef\nadmin a-0123456789abcdef\n' >"$WORK/tokens"
chmod 600 "$WORK/tokens"
start_server tokens --model iris-mlp@production --tokens "$WORK/tokens" ||
  fail "the server with tokens did not start: $(cat "$WORK/tokens.err")"
TOKENS_PID=$SERVER_PID
infer --data-binary @"$WORK/infer.json"
expect_status 401 "infer without a token"
expect_contains "$(cat "$WORK/headers")" "WWW-Authenticate: Bearer" "401 asks for a bearer token"
infer --data-binary @"$WORK/infer.json" -H 'Authorization: Bearer p-0123456789abcdeX'
expect_status 401 "a wrong token"
infer --data-binary @"$WORK/infer.json" -H 'Authorization: Basic cDpw'
expect_status 401 "not a bearer token"
infer --data-binary @"$WORK/infer.json" -H 'Authorization: Bearer p-0123456789abcdef'
expect_status 200 "the predict token infers"
http GET /v2/models/iris-mlp@production -H 'Authorization: Bearer p-0123456789abcdef'
expect_status 403 "the predict token may not read metadata"
http GET /v2/models/iris-mlp@production -H 'Authorization: Bearer a-0123456789abcdef'
expect_status 200 "the admin token reads metadata"
infer --data-binary @"$WORK/infer.json" -H 'Authorization: bearer a-0123456789abcdef'
expect_status 200 "the admin token infers (the scheme in any case)"
http GET /v2/health/ready
expect_status 200 "health needs no token"
out=$("$PY" "$SERVE_CLIENT" request "$PORT" POST /invocations "$WORK/split.json" "Content-Type: application/json")
expect_eq "$(head -n 1 <<<"$out")" "401" "http.client without a token"
stop_server "$TOKENS_PID"
expect_eq "$SERVER_RC" "0" "tokens server: exit 0"

# --- refusals at start-up ---------------------------------------------------
chmod 644 "$WORK/tokens"
expect_rc 2 serve --model iris-mlp@production --port 0 --tokens "$WORK/tokens"
expect_contains "$ERR" "--tokens $WORK/tokens: is open to other users (mode 0644)" "a tokens file open to others"
chmod 600 "$WORK/tokens"
printf 'root xxxxxxxxxxxxxxxxxxxx\n' >"$WORK/bad-tokens"
chmod 600 "$WORK/bad-tokens"
expect_rc 2 serve --model iris-mlp@production --port 0 --tokens "$WORK/bad-tokens"
expect_contains "$ERR" "line 1: unknown role 'root'" "an unknown role"
printf 'predict short\n' >"$WORK/bad-tokens"
expect_rc 2 serve --model iris-mlp@production --port 0 --tokens "$WORK/bad-tokens"
expect_contains "$ERR" "at least 16 bytes" "a short token"
expect_rc 2 serve --model iris-mlp@production --port 0 --bind 0.0.0.0
expect_contains "$ERR" "--bind 0.0.0.0 is reachable from other machines" "a public address without tokens"
expect_rc 2 serve --model iris-mlp@production --port 0 --bind localhost.example
expect_contains "$ERR" "is not an IPv4 or IPv6 address" "a host name"
expect_rc 1 serve --model nothing@production --port 0
expect_contains "$ERR" "no model named 'nothing'" "an unknown model"
expect_rc 2 serve --model iris-mlp@production --port 70000
expect_rc 2 serve --model iris-mlp@production --port 0 --max-rows 0
expect_contains "$ERR" "--max-rows must be in" "a zero limit"
# Without --model: every alias of the store, and none is an error.
start_server all || fail "serving every alias did not start: $(cat "$WORK/all.err")"
http GET /v2/models/iris-mlp@production/ready
expect_status 200 "every alias is served without --model"
stop_server "$SERVER_PID"
ANNEAL_HOME="$WORK/empty" expect_rc 0 init
ANNEAL_HOME="$WORK/empty" expect_rc 2 serve --port 0
expect_contains "$ERR" "no model alias to serve" "a store without aliases"

finish
