#!/bin/bash
# `anneal serve` against its peer: ONNX Runtime (onnxruntime-node) behind
# Node's http module (bench/serve/ort_server.js), serving the same model
# exported as ONNX, both on loopback, loaded by wrk with the same rows in the
# same KServe V2 JSON body, at 1, 8 and 64 connections: requests per second
# and p99 latency of each, and the ratios (goal at 64 connections: anneal's
# throughput at least 3x, its p99 at most 1/3). Two models: the
# Fashion-MNIST MLP (one [N,784] tensor, 8 images a request) and a tabular
# model (bench/data/tabular's Glass table, named columns, 8 rows a
# request); then the p50 latency of a one-row request to the tabular model
# (goal: under 250 µs). Beside them, for the record, what `layers = auto`
# registers on Vehicle (an ensemble of trees and bagged networks) against
# its ONNX export, and what its bags cost a request against `bags = 1`.
#   bench/serve.sh   (ANNEAL set; SERVE_SECONDS per measurement, default 5)
set -euo pipefail
: "${ANNEAL:?}"
BUILD=${BUILD:-$(dirname "$(dirname "$ANNEAL")")}
HERE=$(dirname "$(realpath "$0")")
. "$HERE/lib.sh"
SECONDS_EACH=${SERVE_SECONDS:-5}
# Absolute: node resolves a relative module path against the script, not here.
NPM_DIR=$(realpath -m "${ANNEAL_NPM_DIR:-$BUILD/onnxruntime-node}")

echo "== serve: anneal serve vs ONNX Runtime (onnxruntime-node) behind node http, wrk on loopback"
for tool in wrk node npm; do
  command -v "$tool" >/dev/null || { echo "  skipped: no $tool (packaging/install-deps bench)"; exit 0; }
done
if [ ! -d "$NPM_DIR/node_modules/onnxruntime-node" ]; then
  mkdir -p "$NPM_DIR"
  npm install --prefix "$NPM_DIR" --ignore-scripts --no-audit --no-fund onnxruntime-node >/dev/null 2>&1 ||
    { echo "  skipped: onnxruntime-node could not be installed (npm registry unreachable?)"; exit 0; }
fi

# --- the models ---------------------------------------------------------------
import_fmnist
cat >"$WORK/fmnist.ini" <<'INI'
name    = fmnist
dataset = fmnist
layers  = dense(256) relu dense(128) relu dense(10)
epochs  = 1
seed    = 1
INI
"$ANNEAL" train "$WORK/fmnist.ini" >/dev/null 2>&1
"$ANNEAL" data import glass "$HERE/data/tabular/Glass.train.csv.zst" --label Type --categorical Type >/dev/null
cat >"$WORK/glass.ini" <<'INI'
name    = glass
dataset = glass
layers  = dense(64) relu dense(32) relu dense(6)
epochs  = 20
seed    = 1
INI
"$ANNEAL" train "$WORK/glass.ini" >/dev/null 2>&1
# What `layers = auto` registers on a table where networks win (Vehicle, a
# fixed seed and trial budget): an ensemble whose network members are each
# bagged 5 times (docs/TRAINING.md, "Bagging"), and the same search with
# `bags = 1`, to measure what the bags cost a request.
"$ANNEAL" data import vehicle "$HERE/data/tabular/Vehicle.train.csv.zst" --test "$HERE/data/tabular/Vehicle.test.csv.zst" \
  --label Class --categorical Class >/dev/null
for bags in 5 1; do
  printf 'name = vehicle-bags%s\ndataset = vehicle\nseed = 1\nmax_trials = 14\nbags = %s\n' "$bags" "$bags" \
    >"$WORK/vehicle-bags$bags.ini"
  "$ANNEAL" train "$WORK/vehicle-bags$bags.ini" >/dev/null 2>&1
done
members() {
  "$ANNEAL" --json model show "$1" | "$PYTHON" -c "
import json, sys
model = json.load(sys.stdin)
members = (model.get('lineage') or {}).get('ensemble') or []
print(sum(m.get('bags', 1) for m in members) or 1)"
}
MEMBERS5=$(members vehicle-bags5@v1)
MEMBERS1=$(members vehicle-bags1@v1)
for m in fmnist glass vehicle-bags5; do
  "$ANNEAL" model export "$m@v1" --format onnx -o "$WORK/$m.onnx" >/dev/null
done

# The request bodies: the same rows for both servers, in the inputs each
# takes (anneal: KServe V2 as docs/SERVING.md says; ONNX Runtime: the
# export's inputs, one per raw feature column, the image as [N,1,28,28]).
"$PYTHON" - "$WORK" "$FMNIST" "$HERE/data/tabular/Glass.test.csv.zst" "$HERE/data/tabular/Vehicle.test.csv.zst" <<'PY'
import csv, gzip, io, json, subprocess, sys
work, fmnist, glass, vehicle = sys.argv[1:5]
# Fashion-MNIST: 8 test images (and 1).
pixels = list(gzip.open(f"{fmnist}/t10k-images-idx3-ubyte.gz").read()[16:16 + 8 * 784])
for n in (8, 1):
    data = pixels[:n * 784]
    json.dump({"inputs": [{"name": "input", "shape": [n, 784], "datatype": "FP32", "data": data}]},
              open(f"{work}/fmnist-{n}.anneal.json", "w"))
    json.dump({"inputs": [{"name": "image", "shape": [n, 1, 28, 28], "datatype": "FP32", "data": data}]},
              open(f"{work}/fmnist-{n}.ort.json", "w"))
# table_bodies FILE LABEL BODIES: 8 test rows (and 1) of a compressed CSV,
# every column but the label (all numeric), as each (model, server) body.
def table_bodies(path, label, bodies):
    text = subprocess.run(["zstd", "-dc", path], capture_output=True, check=True).stdout.decode()
    rows = list(csv.reader(io.StringIO(text)))
    header, rows = rows[0], rows[1:]
    cols = [j for j in range(len(header)) if header[j] != label]
    for n in (8, 1):
        body = {"inputs": [{"name": header[j], "shape": [n], "datatype": "FP32",
                            "data": [float(r[j]) for r in rows[:n]]} for j in cols]}
        for model, server in bodies:
            json.dump(body, open(f"{work}/{model}-{n}.{server}.json", "w"))
table_bodies(glass, "Type", [("glass", "anneal"), ("glass", "ort")])
table_bodies(vehicle, "Class", [("vehicle-bags5", "anneal"), ("vehicle-bags1", "anneal"), ("vehicle-bags5", "ort")])
PY

# --- the servers ----------------------------------------------------------------
mkfifo "$WORK/anneal.out" "$WORK/ort-fmnist.out" "$WORK/ort-glass.out" "$WORK/ort-vehicle-bags5.out"
"$ANNEAL" serve --port 0 --model fmnist@v1 --model glass@v1 --model vehicle-bags5@v1 --model vehicle-bags1@v1 --threads 1 --io-threads 2 \
  >"$WORK/anneal.out" 2>"$WORK/anneal.err" &
ANNEAL_PID=$!
# From here on every server this script starts is stopped when it ends,
# however it ends (a peer that fails to start included).
pids=("$ANNEAL_PID")
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$WORK"' EXIT
exec {fd}<"$WORK/anneal.out"
read -r -t 300 line <&"$fd" || { echo "  anneal serve did not start: $(tail -3 "$WORK/anneal.err")"; exit 1; }
ANNEAL_PORT=${line##*:}
declare -A ORT_PORT
for m in fmnist glass vehicle-bags5; do
  node "$HERE/serve/ort_server.js" "$NPM_DIR" "$WORK/$m.onnx" >"$WORK/ort-$m.out" 2>"$WORK/ort-$m.err" &
  pids+=($!)
  exec {ofd}<"$WORK/ort-$m.out"
  read -r -t 300 line <&"$ofd" || { echo "  ONNX Runtime did not start on $m: $(tail -3 "$WORK/ort-$m.err")"; exit 1; }
  ORT_PORT[$m]=${line##* }
done

# Both answer the body before they are timed.
for m in fmnist glass vehicle-bags5; do
  curl -sf --max-time 60 --data-binary @"$WORK/$m-8.anneal.json" \
    "http://127.0.0.1:$ANNEAL_PORT/v2/models/$m@v1/infer" >/dev/null || { echo "  anneal refused the $m body"; exit 1; }
  curl -sf --max-time 60 --data-binary @"$WORK/$m-8.ort.json" "http://127.0.0.1:${ORT_PORT[$m]}/" >/dev/null ||
    { echo "  ONNX Runtime refused the $m body: $(curl -s --data-binary @"$WORK/$m-8.ort.json" "http://127.0.0.1:${ORT_PORT[$m]}/")"; exit 1; }
done

# wrk_run URL BODY CONNECTIONS: "REQUESTS_PER_S P50_US P99_US" (errors and
# non-2xx answers make it fail).
wrk_run() {
  local out threads=$(( $3 < 2 ? 1 : 2 ))
  out=$(WRK_BODY=$2 wrk -t"$threads" -c"$3" -d"${SECONDS_EACH}s" --latency -s "$HERE/serve/post.lua" "$1")
  if grep -qE "Non-2xx|Socket errors" <<<"$out"; then echo "wrk reported errors: $out" >&2; return 1; fi
  "$PYTHON" - "$out" <<'PY'
import re, sys
out = sys.argv[1]
def us(text):
    value, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()
    return float(value) * {"us": 1, "ms": 1e3, "s": 1e6}[unit]
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
p50 = us(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))
p99 = us(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
print(f"{rps:.0f} {p50:.0f} {p99:.0f}")
PY
}

printf '  %-13s %5s  %12s %10s  %12s %10s  %9s %9s\n' model conns "anneal req/s" "p99 us" "ORT req/s" "p99 us" \
  "req/s x" "p99 1/x"
for m in fmnist glass vehicle-bags5; do
  for c in 1 8 64; do
    read -r a_rps _ a_p99 < <(wrk_run "http://127.0.0.1:$ANNEAL_PORT/v2/models/$m@v1/infer" "$WORK/$m-8.anneal.json" "$c")
    read -r o_rps _ o_p99 < <(wrk_run "http://127.0.0.1:${ORT_PORT[$m]}/" "$WORK/$m-8.ort.json" "$c")
    printf '  %-13s %5s  %12s %10s  %12s %10s  %9s %9s\n' "$m" "$c" "$a_rps" "$a_p99" "$o_rps" "$o_p99" \
      "$("$PYTHON" -c "print(f'{$a_rps / $o_rps:.2f}')")" "$("$PYTHON" -c "print(f'{$o_p99 / max($a_p99, 1):.2f}')")"
  done
done
read -r _ a_p50 _ < <(wrk_run "http://127.0.0.1:$ANNEAL_PORT/v2/models/glass@v1/infer" "$WORK/glass-1.anneal.json" 1)
read -r _ o_p50 _ < <(wrk_run "http://127.0.0.1:${ORT_PORT[glass]}/" "$WORK/glass-1.ort.json" 1)
echo "  one-row tabular request, 1 connection: p50 anneal ${a_p50} us, ONNX Runtime ${o_p50} us (goal: anneal under 250 us)"
# The bags' cost: the same one-row request to the bagged model and to the
# same search's model unbagged, and the 8-row throughput of each.
read -r b5_rps b5_p50 _ < <(wrk_run "http://127.0.0.1:$ANNEAL_PORT/v2/models/vehicle-bags5@v1/infer" "$WORK/vehicle-bags5-1.anneal.json" 1)
read -r b1_rps b1_p50 _ < <(wrk_run "http://127.0.0.1:$ANNEAL_PORT/v2/models/vehicle-bags1@v1/infer" "$WORK/vehicle-bags1-1.anneal.json" 1)
read -r _ o5_p50 _ < <(wrk_run "http://127.0.0.1:${ORT_PORT[vehicle-bags5]}/" "$WORK/vehicle-bags5-1.ort.json" 1)
read -r b5_rps8 _ _ < <(wrk_run "http://127.0.0.1:$ANNEAL_PORT/v2/models/vehicle-bags5@v1/infer" "$WORK/vehicle-bags5-8.anneal.json" 8)
read -r b1_rps8 _ _ < <(wrk_run "http://127.0.0.1:$ANNEAL_PORT/v2/models/vehicle-bags1@v1/infer" "$WORK/vehicle-bags1-8.anneal.json" 8)
echo "  the auto model of Vehicle, one-row request, 1 connection: p50 ${b5_p50} us with bags = 5 ($MEMBERS5 fitted models)," \
  "${b1_p50} us with bags = 1 ($MEMBERS1): $("$PYTHON" -c "print(f'{$b5_p50 / max($b1_p50, 1):.2f}')")x;" \
  "ONNX Runtime on the bagged export ${o5_p50} us"
echo "  8-row requests at 8 connections: $b5_rps8 req/s with bags = 5, $b1_rps8 with bags = 1" \
  "($("$PYTHON" -c "print(f'{$b1_rps8 / max($b5_rps8, 1):.2f}')")x the bagged model's)"
echo "  (8 rows a request; goals at 64 connections for fmnist and glass: req/s x >= 3, p99 1/x >= 3; vehicle-bags5, what layers = auto registers there, for the record)"
