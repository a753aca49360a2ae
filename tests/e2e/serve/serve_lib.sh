# Helpers for the `anneal serve` tests (tests/e2e/serve_*_test.sh), sourced
# after lib.sh: servers started in the background on a free loopback port
# and stopped when the test exits, and HTTP requests made with curl.

PY=/usr/bin/python3
SERVER_PIDS=()
SERVE_GLOBAL=()  # global flags (--log-format json) for the next start_server
SERVE_CLIENT="$(dirname "${BASH_SOURCE[0]}")/client.py"
trap 'for p in "${SERVER_PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$WORK"' EXIT

# start_server NAME [ARGS...]: starts `anneal serve --port 0 ARGS` in the
# background (stderr in $WORK/NAME.err) and waits for its first line, which
# says where it listens. Sets SERVER_PID, PORT and BASE (http://127.0.0.1:PORT).
# Returns 1 (PORT empty) when the server exits instead; its exit code is
# then in SERVER_RC.
start_server() {
  local name=$1 fifo line
  shift
  fifo="$WORK/$name.fifo"
  rm -f "$fifo"
  mkfifo "$fifo"
  "$ANNEAL" "${SERVE_GLOBAL[@]}" serve --port 0 "$@" >"$fifo" 2>"$WORK/$name.err" &
  SERVER_PID=$!
  SERVER_PIDS+=("$SERVER_PID")
  exec {SERVER_FD}<"$fifo"
  # The bound: a server that neither listens nor exits in 5 minutes is broken.
  if ! IFS= read -r -t 300 line <&"$SERVER_FD" || [[ "$line" != listening* ]]; then
    PORT=""
    wait "$SERVER_PID"
    SERVER_RC=$?
    return 1
  fi
  PORT=${line##*:}
  BASE="http://127.0.0.1:$PORT"
}

# stop_server PID: SIGTERM, then the exit code in SERVER_RC.
stop_server() {
  kill -TERM "$1"
  wait "$1"
  SERVER_RC=$?
}

# http METHOD PATH [CURL ARGS...]: a request to $BASE; STATUS and BODY
# (and the response headers in $WORK/headers).
http() {
  local method=$1 path=$2
  shift 2
  STATUS=$(curl -sS --max-time 300 -o "$WORK/body" -D "$WORK/headers" -w '%{http_code}' -X "$method" \
    "$BASE$path" "$@")
  BODY=$(cat "$WORK/body")
}

# expect_status WANT LABEL: checks $STATUS.
expect_status() {
  if [ "$STATUS" = "$1" ]; then pass; else fail "$2: HTTP $STATUS, expected $1; body: $BODY"; fi
}

# body_get EXPR: a Python expression over the JSON in $BODY (as j).
body_get() {
  printf '%s' "$BODY" | python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"
}

# wait_log FILE TEXT: blocks until FILE (a server's stderr) holds TEXT: the
# server says it has done something asynchronous (re-read its tokens).
# Returns 1 after 120 s, a bound no working server comes near.
wait_log() {
  "$PY" - "$1" "$2" <<'PY'
import sys, time
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    if sys.argv[2] in open(sys.argv[1], errors="replace").read():
        sys.exit(0)
    time.sleep(0.01)
sys.exit(1)
PY
}

# metric NAME_AND_LABELS: the value of one sample of $BASE/metrics (admin
# token $ADMIN when set), empty when absent.
metric() {
  local auth=()
  [ -n "${ADMIN:-}" ] && auth=(-H "Authorization: Bearer $ADMIN")
  curl -sS --max-time 300 "${auth[@]}" "$BASE/metrics" | awk -v k="$1" '$1 == k { print $2 }'
}
