#!/bin/bash
# Calibrated probabilities (issue 33, docs/TRAINING.md "Calibration"): a
# wide network trained long on a small noisy table is overconfident; with
# calibrate = temperature the run fits T on its validation rows, the test
# rows' expected calibration error falls, and the stored model answers the
# calibrated probabilities everywhere: predict (softmax(log p / T) of the
# uncalibrated model's, whose weights are the same bits), eval (the run's
# ECE), serve (predict's bytes), the independent reader (softmax(z / T) of
# the logits) and the report (a reliability diagram). A hostile temperature
# in a model header is corrupt; a bad `calibrate` value names its line.
. "$E2E_LIB"
. "$(dirname "$E2E_LIB")/serve/serve_lib.sh"
READER="$(dirname "$E2E_LIB")/../format/read_model.py"

# Three classes drawn from softmax(1.5 * (a + b/2, -a + b/2, 0.3 c)), two
# more columns of noise: every row's label is uncertain, and a wide network
# trained long on 600 rows memorizes them and is sure of its answers.
"$PY" - "$WORK/noisy.csv" "$WORK/noisy-test.csv" <<'PY'
import math, random, sys
rng = random.Random(33)
for path, rows in ((sys.argv[1], 600), (sys.argv[2], 1500)):
    with open(path, "w") as f:
        f.write("a,b,c,d,e,label\n")
        for _ in range(rows):
            x = [rng.gauss(0, 1) for _ in range(5)]
            z = [1.5 * (x[0] + 0.5 * x[1]), 1.5 * (-x[0] + 0.5 * x[1]), 1.5 * 0.3 * x[2]]
            e = [math.exp(v) for v in z]
            u, acc, label = rng.random() * sum(e), 0, 2
            for k, v in enumerate(e):
                acc += v
                if u < acc:
                    label = k
                    break
            f.write(",".join("%.5f" % v for v in x) + ",%s\n" % ["lo", "mid", "hi"][label])
PY
expect_rc 0 init
expect_rc 0 data import noisy "$WORK/noisy.csv" --test "$WORK/noisy-test.csv"
cat >"$WORK/calib.ini" <<'INI'
name       = noisy
dataset    = noisy
layers     = dense(256) relu dense(256) relu dense(3)
epochs     = 100
lr         = 0.003
batch      = 32
validation = 0.3
early_stop = none
seed       = 5
threads    = 1
INI

# --- the same network, uncalibrated (v1) and calibrated (v2) ----------------
expect_rc 0 --json train "$WORK/calib.ini" --set calibrate=none
printf '%s' "$OUT" >"$WORK/none.json"
expect_eq "$(json_get '"temperature" in j["metrics"]')" "False" "calibrate = none fits no temperature"
expect_rc 0 --json train "$WORK/calib.ini" --set calibrate=temperature
printf '%s' "$OUT" >"$WORK/temp.json"
read -r T RESULT < <("$PY" - "$WORK/none.json" "$WORK/temp.json" <<'PY'
import json, sys
none, temp = (json.load(open(p)) for p in sys.argv[1:3])
m0, m1 = none["metrics"], temp["metrics"]
checks = {
    "the weights are the same bits": none["weights_hash"] == temp["weights_hash"],
    "the network is overconfident (T > 2)": m1["temperature"] > 2,
    "the uncalibrated ECE is the calibrate = none run's": abs(m1["test_ece_uncalibrated"] - m0["test_ece"]) < 1e-12,
    "the test ECE falls to less than half": m1["test_ece"] < m0["test_ece"] / 2,
    "the validation ECE falls": m1["val_ece"] < m1["val_ece_uncalibrated"],
    "the classes are the same": m1["test_accuracy"] == m0["test_accuracy"],
}
bad = [k for k, ok in checks.items() if not ok]
print(m1["temperature"], "ok" if not bad else "; ".join(bad),
      f'(T {m1["temperature"]:.3f}, test ECE {m0["test_ece"]:.4f} -> {m1["test_ece"]:.4f})')
PY
)
echo "calibration: T $T, $RESULT" >&2
expect_contains "$RESULT" "ok (" "the calibrated run"

# --- predict: softmax(log p / T) of the uncalibrated model's ---------------
expect_rc 0 predict noisy@v1 --input "$WORK/noisy-test.csv" -o "$WORK/p1.csv"
expect_rc 0 predict noisy@v2 --input "$WORK/noisy-test.csv" -o "$WORK/p2.csv"
expect_eq "$("$PY" - "$WORK/p1.csv" "$WORK/p2.csv" "$T" <<'PY'
import csv, math, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
t = float(sys.argv[3])
cols = [c for c in a[0] if c.startswith("p_")]
worst = 0
for ra, rb in zip(a, b):
    s = [math.log(max(float(ra[c]), 1e-38)) / t for c in cols]
    top = max(s)
    e = [math.exp(v - top) for v in s]
    for c, v in zip(cols, e):
        worst = max(worst, abs(v / sum(e) - float(rb[c])))
    assert ra["prediction"] == rb["prediction"], "a class moved"
print("ok" if len(a) == len(b) == 1500 and worst < 2e-6 else f"max difference {worst}")
PY
)" "ok" "predict answers softmax(log p / T) of the uncalibrated probabilities"

# --- the independent reader: softmax(z / T) of the network's logits ---------
# reader_worst BLOB PREDICT_CSV: the largest differences between predict's
# probabilities and the reader's (its own float32 forward pass, then in
# double): softmax(z / T) exactly, and softmax(log(max(p, m)) / T) of its
# uncalibrated p = softmax(z) rounded to float32, the floor m = 2^-126 as
# anneal applies it (docs/STORE.md, `temperature`).
reader_worst() {
  "$PY" - "$READER" "$1" "$WORK/noisy-test.csv" "$2" <<'PY'
import csv, importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location("read_model", sys.argv[1])
rm = importlib.util.module_from_spec(spec); spec.loader.exec_module(rm)
header, tensors = rm.load_model(sys.argv[2])
x = rm.transform(header["features"], rm.raw_rows_from_csv(header["features"], sys.argv[3]))
exact = rm.predictions(header, tensors, x)
t = header.get("temperature", 1.0)
plain = dict(header)
plain.pop("temperature", None)
p = rm.predictions(plain, tensors, x).astype(np.float32).astype(np.float64)
s = np.log(np.maximum(p, np.finfo(np.float32).tiny)) / t
floored = np.exp(s - s.max(axis=1, keepdims=True))
floored /= floored.sum(axis=1, keepdims=True)
rows = list(csv.DictReader(open(sys.argv[4])))
got = np.array([[float(r["p_" + n]) for n in header["labels"]["classes"]] for r in rows])
print(float(np.abs(got - exact).max()), float(np.abs(got - floored).max()))
PY
}
for v in 1 2; do
  "$PY" "$READER" blob --store "$ANNEAL_HOME" --model noisy@v$v -o "$WORK/m$v.bin" || fail "reader could not read noisy@v$v"
done
read -r W1 _ < <(reader_worst "$WORK/m1.bin" "$WORK/p1.csv")
read -r W2 F2 < <(reader_worst "$WORK/m2.bin" "$WORK/p2.csv")
echo "reader against predict: uncalibrated $W1; calibrated $W2 (exact), $F2 (floored as anneal)" >&2
# The same forward pass in two programs: float32 rounding, within 1e-5 (a
# probability printed with 7 digits is itself within 5e-7 of the value).
expect_eq "$("$PY" -c "print($W1 < 1e-5 and $F2 < 1e-5)")" "True" "the reader's probabilities are predict's"
# softmax(z / T) exactly: besides that rounding, a class whose float32
# probability was below the floor m contributes at most m^(1/T) (and moves
# the other classes by as much in all): (K - 1) m^(1/T) with K = 3.
expect_eq "$("$PY" -c "import math; print($W2 < 1e-5 + 2 * math.exp(math.log(2.0**-126) / $T))")" "True" \
  "the calibrated probabilities are softmax(z / T) within the floor's bound"

# --- eval: the ECE of the model as stored is the run's ----------------------
expect_rc 0 --json eval noisy@v2 noisy
expect_eq "$("$PY" -c 'import json,sys; a=json.load(open(sys.argv[1]))["metrics"]["ece"]; b=json.load(open(sys.argv[2]))["metrics"]["test_ece"]; print(abs(a-b) < 1e-12 or (a, b))' <(printf '%s' "$OUT") "$WORK/temp.json")" \
  "True" "eval --json's ece is the run's test_ece"

# --- serve: predict's bytes -------------------------------------------------
start_server calib --model noisy@v2 || fail "the server did not start: $(cat "$WORK/calib.err")"
http POST "/models/noisy@v2/invocations" -H 'Content-Type: text/csv' -H 'Accept: text/csv' \
  --data-binary @"$WORK/noisy-test.csv"
expect_status 200 "serve: CSV"
# predict's input had the label column; the answers do not depend on it.
cmp -s "$WORK/body" "$WORK/p2.csv" && pass || fail "serve's answer differs from predict's: $(diff "$WORK/body" "$WORK/p2.csv" | head -4)"
stop_server "$SERVER_PID"

# --- the report: a reliability diagram --------------------------------------
RUN=$(latest_run)
expect_rc 0 runs report "$RUN" -o "$WORK/report.html"
expect_contains "$(cat "$WORK/report.html")" 'id="reliability"' "the report draws the reliability diagram"
expect_contains "$(cat "$WORK/report.html")" "Temperature" "the report names the temperature"

# --- derived models keep their parent's temperature -------------------------
expect_rc 0 --json quantize noisy@v2 --int8 --calib noisy --threads 1
INT8=$(json_get 'j["model"]')
expect_rc 0 --json prune noisy@v2 --sparsity 0.5 --finetune-epochs 1 --threads 1
PRUNED=$(json_get 'j["model"]')
for ref in "$INT8" "$PRUNED"; do
  "$PY" "$READER" blob --store "$ANNEAL_HOME" --model "$ref" -o "$WORK/child.bin" || fail "reader could not read $ref"
  expect_eq "$("$PY" -c 'import json,struct,sys; d=open(sys.argv[1],"rb").read(); n=struct.unpack_from("<Q",d,8)[0]; print(json.loads(d[16:16+n]).get("temperature"))' "$WORK/child.bin")" \
    "$T" "$ref keeps its parent's temperature"
done

# --- a hostile temperature in a model header is corrupt ---------------------
# Rewrites noisy@v2's blob with the header's temperature replaced (a new
# object and blob, as the store writes them, so only the header is wrong).
tamper() {
  "$PY" - "$ANNEAL_HOME" "$WORK/m2.bin" "$1" <<'PY'
import hashlib, json, os, re, sqlite3, struct, subprocess, sys
store, model, value = sys.argv[1:4]
data = open(model, "rb").read()
(n,) = struct.unpack_from("<Q", data, 8)
header = data[16:16 + n].decode()
assert "temperature" in json.loads(header)
new = re.sub(r'"temperature":[^,}]*', lambda m: '"temperature":' + value, header, count=1)
assert new != header
blob = data[:8] + struct.pack("<Q", len(new)) + new.encode() + data[16 + n:]
oid = hashlib.blake2b(blob, digest_size=32).hexdigest()
z = subprocess.run(["zstd", "-c", "-q"], input=blob, stdout=subprocess.PIPE, check=True).stdout
os.makedirs(f"{store}/objects/{oid[:2]}", exist_ok=True)
with open(f"{store}/objects/{oid[:2]}/{oid}", "wb") as f:
    f.write(b"ANOB\x01\x01\x00\x00" + struct.pack("<Q", len(blob)) + z)
tree = hashlib.blake2b(f"{oid} {len(blob)}\n".encode(), digest_size=32).hexdigest()
db = sqlite3.connect(f"{store}/catalog.db")
db.execute("PRAGMA foreign_keys=ON")
db.execute("INSERT OR IGNORE INTO blobs(hash, size) VALUES (?, ?)", (tree, len(blob)))
db.execute("INSERT OR IGNORE INTO blob_chunks(blob, seq, object, length) VALUES (?, 0, ?, ?)", (tree, oid, len(blob)))
db.execute("UPDATE models SET blob = ? WHERE name = 'noisy' AND version = 2", (tree,))
db.commit()
PY
}
for value in -1 0 NaN 1e400 '"2"' 1000; do
  tamper "$value" || fail "could not write the tampered model ($value)"
  expect_rc 1 predict noisy@v2 --input "$WORK/noisy-test.csv" -o "$WORK/hostile.csv" --force
  expect_contains "$ERR" "noisy@v2" "temperature $value: the error names the model"
done
tamper 2.5
expect_rc 0 predict noisy@v2 --input "$WORK/noisy-test.csv" -o "$WORK/p25.csv" --force

# --- config errors ----------------------------------------------------------
printf 'name = noisy\ndataset = noisy\nlayers = dense(8) relu dense(3)\ncalibrate = bogus\n' >"$WORK/bogus.ini"
expect_rc 2 train "$WORK/bogus.ini"
expect_contains "$ERR" "bogus.ini:4" "calibrate = bogus names its line"
expect_contains "$ERR" "expected auto, none or temperature" "and the values it takes"
printf 'name = noisy\ndataset = noisy\nlayers = dense(8) relu dense(3)\nepochs = 1\ncalibrate = temperature\n' \
  >"$WORK/noval.ini"
expect_rc 2 train "$WORK/noval.ini"
expect_contains "$ERR" "noval.ini:5" "calibrate = temperature without validation rows names its line"
expect_contains "$ERR" "validation" "and says what it needs"
# A regression target has no class probabilities.
cut -d, -f1-5 "$WORK/noisy.csv" >"$WORK/reg.csv"
expect_rc 0 data import reg "$WORK/reg.csv" --label a
printf 'name = reg\ndataset = reg\nlayers = dense(4) relu dense(1)\nloss = mse\nvalidation = 0.2\nepochs = 1\ncalibrate = temperature\n' \
  >"$WORK/reg.ini"
expect_rc 2 train "$WORK/reg.ini"
expect_contains "$ERR" "reg.ini:7: calibrate = temperature" "calibrate = temperature on a regression target names its line"
# auto without validation rows: uncalibrated, and the run still scores its ECE.
expect_rc 0 --json train "$WORK/noval.ini" --set calibrate=auto
expect_eq "$(json_get '"temperature" not in j["metrics"] and j["metrics"]["test_ece"] > 0')" "True" \
  "auto without validation rows does not calibrate"
# auto on a network with validation rows calibrates.
expect_rc 0 --json train "$WORK/calib.ini" --set epochs=2
expect_eq "$(json_get '"temperature" in j["metrics"]')" "True" "auto calibrates a network with validation rows"

finish
