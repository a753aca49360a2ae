#!/bin/bash
# docs/STORE.md specifies models and checkpoints well enough to use them
# without anneal: tests/format/read_model.py, written from that document
# alone, gets the blobs out of the store (catalog, chunks, zstd objects),
# decodes them, recomputes each model's weights hash, and computes
# predictions that must match `anneal predict` (or, for image models, which
# predict cannot read, the confusion matrix of `anneal eval`). It covers an
# MLP, batchnorm/layernorm/gelu/dropout with bce, the periodic embedding,
# the piecewise-linear encoding,
# the ensemble, one-hot features with regression, the linear model, a CNN,
# an int8 model and a pruned one; and
# lists the final checkpoint's trainer state, whose weights must equal the
# model's. Every model's weights hash, bf16 and tree models' too, is
# recomputed from its blob, and models of formats 1 and 2 (written before
# the weights hash of format 3) still verify by their own rule.
. "$E2E_LIB"

PY=/usr/bin/python3
READER="$(cd "$(dirname "$E2E_LIB")/../format" && pwd)/read_model.py"
if ! "$PY" -c 'import numpy' 2>/dev/null; then
  echo "model_format_test: $PY has no numpy (packaging/install-deps installs python3-numpy)" >&2
  exit 1
fi

# model_blob REF FILE: the model's bytes, read from the store by the reader.
model_blob() {
  "$PY" "$READER" blob --store "$ANNEAL_HOME" --model "$1" -o "$2" || fail "reader could not read model $1"
}

# check_hash FILE LABEL: the reader recomputes weights_hash as documented.
check_hash() {
  "$PY" "$READER" hash "$1" >/dev/null && pass || fail "$2: weights_hash does not match the documented rule"
}

# check_trained_hash REF LABEL: after `anneal --json train`, the model's
# stored weights_hash is the run's and recomputes from its blob.
check_trained_hash() {
  local reported
  reported=$(json_get 'j["weights_hash"]')
  model_blob "$1" "$WORK/trained.bin"
  check_hash "$WORK/trained.bin" "$2"
  expect_eq "$("$PY" -c 'import json,struct,sys; d=open(sys.argv[1],"rb").read(); n=struct.unpack_from("<Q",d,8)[0]; print(json.loads(d[16:16+n])["weights_hash"])' "$WORK/trained.bin")" \
    "$reported" "$2: the stored weights_hash is the one train reported"
}

# compare_predict REF CSV TOL LABEL: `anneal predict` and the reader agree
# on every row's prediction and probabilities (or value) within TOL.
compare_predict() {
  local ref=$1 input=$2 tol=$3 label=$4
  model_blob "$ref" "$WORK/m.bin"
  check_hash "$WORK/m.bin" "$label"
  "$PY" "$READER" info "$WORK/m.bin" >/dev/null || fail "$label: reader rejects the tensor table"
  expect_rc 0 predict "$ref" --input "$input" -o "$WORK/anneal.csv" --force
  "$PY" "$READER" predict "$WORK/m.bin" --csv "$input" >"$WORK/reader.csv" || { fail "$label: reader predict failed"; return; }
  "$PY" - "$WORK/anneal.csv" "$WORK/reader.csv" "$tol" "$label" <<'PY' && pass || fail "$label: predictions differ"
import csv, sys
a = list(csv.reader(open(sys.argv[1])))
b = list(csv.reader(open(sys.argv[2])))
tol, label = float(sys.argv[3]), sys.argv[4]
assert a[0] == b[0], f"{label}: columns {a[0]} vs {b[0]}"
assert len(a) == len(b) and len(a) > 1, f"{label}: {len(a)} vs {len(b)} rows"
worst, labels_differ = 0.0, 0
for ra, rb in zip(a[1:], b[1:]):
    nums_a = [float(v) for v in ra[2:]] if len(ra) > 2 else [float(ra[1])]
    nums_b = [float(v) for v in rb[2:]] if len(rb) > 2 else [float(rb[1])]
    worst = max([worst] + [abs(x - y) / max(1.0, abs(x)) for x, y in zip(nums_a, nums_b)])
    if len(ra) > 2 and ra[1] != rb[1] and max(nums_a) - sorted(nums_a)[-2] > tol:
        labels_differ += 1
print(f"{label}: {len(a) - 1} rows, largest difference {worst:.3g}", file=sys.stderr)
sys.exit(0 if worst <= tol and labels_differ == 0 else 1)
PY
}

# --- the document's test vectors, read by the reader ---------------------------
# The blocks of docs/STORE.md "Test vectors" (their syntax is given there);
# the reader must compute the worked examples' probabilities from them.
"$PY" - "$(dirname "$E2E_LIB")/../../docs/STORE.md" "$WORK" <<'PY' || fail "document vectors"
import re, sys
vectors, name, fenced = {}, None, False
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if line.startswith("```"):
        fenced, name = not fenced, None
        continue
    if not fenced:
        continue
    if line.startswith("vector "):
        name = line[7:]
        vectors[name] = b""
    elif name and line.startswith("header "):
        vectors[name] += line[7:].encode()
    elif name:
        words = line.split("#")[0].split()
        if words and (words[0] in ("magic", "length") or re.fullmatch(r"[0-9a-f]{4}", words[0])):
            vectors[name] += bytes(int(w, 16) for w in words[1:])
for name, data in vectors.items():
    open(f"{sys.argv[2]}/{name}.bin", "wb").write(data)
print(" ".join(sorted(vectors)))
PY
printf '\x00\x00\x00\x40\x00\x00\x80\x3f' >"$WORK/row.f32"  # the example row: x = 2, color = blue (code 1)
for pair in model-fp32:0.957912 model-int8:0.957278 model-bitmask:0.946597; do
  name=${pair%%:*} want=${pair#*:}
  got=$("$PY" "$READER" predict "$WORK/$name.bin" --raw "$WORK/row.f32" --json) || fail "reader rejects vector $name"
  "$PY" -c "import json,sys; sys.exit(0 if abs(json.loads(sys.argv[1])[0][0] - float(sys.argv[2])) < 1e-6 else 1)" \
    "$got" "$want" && pass || fail "vector $name: p(no) is $got, the document says $want"
  check_hash "$WORK/$name.bin" "vector $name"
done
"$PY" "$READER" checkpoint "$WORK/checkpoint.bin" >"$WORK/vector-ckpt.json" || fail "reader rejects the checkpoint vector"
expect_contains "$(cat "$WORK/vector-ckpt.json")" '"fingerprint": "layers=dense(2);input={3};' "checkpoint vector fingerprint"

# --- models anneal wrote in formats 1 and 2: their own hash rule ----------------
for name in fp32 int8 bitmask linear trees; do
  blob="$TEST_DATA/legacy_models/$name.bin"
  expect_eq "$("$PY" "$READER" info "$blob" | python3 -c 'import json,sys; print(json.load(sys.stdin)["format"] in (1, 2))')" \
    "True" "legacy $name is a format 1 or 2 model"
  check_hash "$blob" "legacy $name"
done

expect_rc 0 init

# --- an MLP on iris (categorical label, softmax) and its checkpoint ---------
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
iris_config "$WORK/iris.ini" iris-mlp "epochs = 8" "checkpoint_every = 20"
expect_rc 0 --json train "$WORK/iris.ini"
run_id=$(json_get 'j["run"]' | sed 's/^run-//')
check_trained_hash iris-mlp@v1 "iris MLP"
compare_predict iris-mlp@v1 "$TEST_DATA/iris.csv" 1e-5 "iris MLP"

last_step=$("$PY" -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT max(step) FROM checkpoints WHERE run_id=?', (int(sys.argv[2]),)).fetchone()[0])" \
  "$ANNEAL_HOME/catalog.db" "$run_id")
"$PY" "$READER" blob --store "$ANNEAL_HOME" --checkpoint "$run_id:$last_step" -o "$WORK/ckpt.bin" \
  || fail "reader could not read checkpoint $run_id:$last_step"
"$PY" "$READER" checkpoint "$WORK/ckpt.bin" --tensors-out "$WORK/ckpt.npz" >"$WORK/ckpt.json" \
  || fail "reader could not parse the trainer state"
model_blob iris-mlp@v1 "$WORK/m.bin"
"$PY" - "$WORK/ckpt.json" "$WORK/ckpt.npz" "$WORK/m.bin" "$READER" "$last_step" <<'PY' && pass || fail "checkpoint state does not match the model"
import json, sys, importlib.util
import numpy as np
spec = importlib.util.spec_from_file_location("read_model", sys.argv[4])
rm = importlib.util.module_from_spec(spec); spec.loader.exec_module(rm)
c = json.load(open(sys.argv[1]))
s = c["state"]
names = [t["name"] for t in s["tensors"]]
# The relu is fused into layer 0: the second dense is layer 1.
want = ["0.dense.weight", "0.dense.bias", "1.dense.weight", "1.dense.bias",
        "0.dense.weight.m", "0.dense.weight.v", "0.dense.bias.m", "0.dense.bias.v",
        "1.dense.weight.m", "1.dense.weight.v", "1.dense.bias.m", "1.dense.bias.v"]
assert names == want, names
assert s["fingerprint"].startswith("layers=dense(16) relu dense(3);input={4};loss=softmax_ce;outputs=3;optimizer=adam;"), s["fingerprint"]
assert c["header"]["step"] == s["step"] == int(sys.argv[5]), (c["header"], s["step"])
assert s["finished"] == 1 and s["epoch"] == 8, s
assert [h["epoch"] for h in s["history"]] == list(range(1, 9)), s["history"]
assert s["history"][-1]["steps"] == s["step"]
header, tensors = rm.load_model(sys.argv[3])
saved = np.load(sys.argv[2])
for name, v in tensors.items():
    assert saved[name].shape == v.shape and np.array_equal(saved[name], v), name
PY

# --- bce with batchnorm, a standalone relu, dropout, gelu and layernorm --------
expect_rc 0 data import cancer "$TEST_DATA/breast_cancer.csv"
cat >"$WORK/cancer.ini" <<'INI'
name = cancer-mlp
dataset = cancer
loss = bce
layers = dense(16) batchnorm relu dropout(0.2) dense(8) gelu layernorm dense(1)
optimizer = adam
lr = 0.01
batch = 32
epochs = 4
seed = 5
threads = 1
baseline = false
INI
expect_rc 0 train "$WORK/cancer.ini"
compare_predict cancer-mlp@v1 "$TEST_DATA/breast_cancer.csv" 1e-5 "bce/batchnorm/layernorm MLP"
"$PY" "$READER" info "$WORK/m.bin" >"$WORK/info.json"
expect_contains "$(cat "$WORK/info.json")" '"1.batchnorm.running_var"' "batchnorm running statistics are named tensors"

# --- the periodic embedding: its frequencies a tensor (F, K), θ = fp32(2π·c)·x --
cat >"$WORK/cancer-periodic.ini" <<'INI'
name = cancer-periodic
dataset = cancer
layers = periodic(4,sigma=0.5) dense(8) relu dense(2)
lr = 0.01
batch = 32
epochs = 3
seed = 6
threads = 1
baseline = false
INI
expect_rc 0 train "$WORK/cancer-periodic.ini"
compare_predict cancer-periodic@v1 "$TEST_DATA/breast_cancer.csv" 1e-5 "periodic MLP"
"$PY" "$READER" info "$WORK/m.bin" >"$WORK/info.json"
expect_contains "$(cat "$WORK/info.json")" '"0.periodic.frequencies"' "the frequencies are a named tensor"

# --- ple: its edges a state tensor (F, T + 1), each bin clamp((x − b)·(1/w)) ---
cat >"$WORK/cancer-ple.ini" <<'INI'
name = cancer-ple
dataset = cancer
layers = ple(5) dense(8) relu dense(2)
lr = 0.01
batch = 32
epochs = 3
seed = 6
threads = 1
baseline = false
INI
expect_rc 0 train "$WORK/cancer-ple.ini"
compare_predict cancer-ple@v1 "$TEST_DATA/breast_cancer.csv" 1e-5 "ple MLP"
"$PY" "$READER" info "$WORK/m.bin" >"$WORK/info.json"
expect_contains "$(cat "$WORK/info.json")" '"0.ple.edges"' "the edges are a named tensor"

# --- the ensemble: scales (K, F), member rows n·K + i, their fp32 mean ---------
cat >"$WORK/cancer-ensemble.ini" <<'INI'
name = cancer-ensemble
dataset = cancer
layers = ensemble(6) dense(8) relu dense(2)
lr = 0.01
batch = 32
epochs = 3
seed = 6
threads = 1
baseline = false
INI
expect_rc 0 train "$WORK/cancer-ensemble.ini"
compare_predict cancer-ensemble@v1 "$TEST_DATA/breast_cancer.csv" 1e-5 "ensemble MLP"
"$PY" "$READER" info "$WORK/m.bin" >"$WORK/info.json"
expect_contains "$(cat "$WORK/info.json")" '"0.ensemble.scale"' "the members' scales are a named tensor"

# --- regression (mse) with a one-hot feature, missing and unseen values ------
expect_rc 0 data import wine-alcohol "$TEST_DATA/wine.csv" --label alcohol
cat >"$WORK/wine.ini" <<'INI'
name = wine-reg
dataset = wine-alcohol
layers = dense(12) tanh dense(1)
optimizer = adam
lr = 0.01
batch = 16
epochs = 5
seed = 2
threads = 1
INI
expect_rc 0 train "$WORK/wine.ini"
"$PY" - "$TEST_DATA/wine.csv" "$WORK/wine-rows.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head, body = rows[0], rows[1:]
body[0][head.index("malic_acid")] = ""          # missing numeric: the mean
body[1][head.index("cultivar")] = "class_9"     # unseen category: all zeros
body[2][head.index("cultivar")] = ""            # missing category
csv.writer(open(sys.argv[2], "w", newline="")).writerows([head] + body)
PY
compare_predict wine-reg@v1 "$WORK/wine-rows.csv" 1e-5 "regression with one-hot"

# --- the linear model ----------------------------------------------------------
expect_rc 0 data import wine "$TEST_DATA/wine.csv"
printf 'name = wine-linear\ndataset = wine\nlayers = linear\nthreads = 1\n' >"$WORK/linear.ini"
expect_rc 0 train "$WORK/linear.ini"
compare_predict wine-linear@v1 "$TEST_DATA/wine.csv" 1e-5 "linear model"

# --- an order export: identifiers left out, frequent levels and "other" -------
# order_date is forced categorical (a text per row: an identifier), so this
# part does not depend on date parsing at import; the datetime expansion is
# the document's worked example, computed by the reader below.
expect_rc 0 data import sales "$TEST_DATA/sales.csv" --label returned --categorical order_date
cat >"$WORK/sales.ini" <<'INI'
name = sales-mlp
dataset = sales
layers = dense(16) relu dense(2)
epochs = 3
seed = 3
threads = 1
class_weight = balanced
max_categories = 20
INI
expect_rc 0 train "$WORK/sales.ini"
expect_contains "$OUT$ERR" "column 'order_id' left out of the features: " "the run says which identifier it left out"
model_blob sales-mlp@v1 "$WORK/sales.bin"
"$PY" - "$WORK/sales.bin" "$READER" <<'PY' && pass || fail "sales model header: excluded columns and other slots"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("read_model", sys.argv[2])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
header, _ = m.load_model(sys.argv[1])
f = header["features"]
excluded = {e["column"]: e for e in f["excluded"]}
assert set(excluded) == {"order_id", "order_date"}, excluded
assert all(e["identifier"] for e in excluded.values())
product = next(c for c in f["columns"] if c["column"] == "product")
assert product["other"] and m.one_hot_width(product) == 21, m.one_hot_width(product)
assert len(product["one_hot"]) > 21  # the whole dictionary stays, for the names
PY
# Rows without the left-out columns, an unseen product (the other slot) and
# a missing one (all zeros).
"$PY" - "$TEST_DATA/sales.csv" "$WORK/sales-rows.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))[:401]
head = rows[0]
keep = [i for i, n in enumerate(head) if n not in ("order_id", "order_date")]
rows[1][head.index("product")] = "P-9999"
rows[2][head.index("product")] = ""
csv.writer(open(sys.argv[2], "w", newline="")).writerows([[r[i] for i in keep] for r in rows])
PY
compare_predict sales-mlp@v1 "$WORK/sales-rows.csv" 1e-5 "identifiers left out, other slot"
# docs/STORE.md "Feature transform": the worked example, by the reader.
"$PY" - "$READER" <<'PY' && pass || fail "the reader does not compute the document's transform example"
import importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location("read_model", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
f = {"input_shape": [3],
     "columns": [{"column": "x", "width": 1, "mean": 1.5, "scale": 0.5},
                 {"column": "color", "width": 1, "one_hot": ["red", "blue", "green"], "slots": [0, 1, -1], "other": True},
                 {"column": "when", "width": 1, "datetime": {"hour": True, "year_mean": 2024, "year_scale": 0.5,
                                                              "elapsed_mean": 19800, "elapsed_scale": 200}}]}
got = m.transform(f, np.array([[2, 2, 19797.75]]))[0]
want = [1, 0, 1, 0, 0.8660254, 0.5, -0.4338837, -0.9009689, 0.9552107, 0.2959267, -1, 0, -0.01125]
assert len(got) == len(want) and max(abs(a - b) for a, b in zip(got, want)) < 1e-6, got
assert abs(m.days_from_text("2024-03-15 18:00") - 19797.75) < 1e-9
PY

# --- bf16 and tree models of the iris table: their hashes ------------------------
sed -e 's/^name = .*/name = iris-bf16/' "$WORK/iris.ini" >"$WORK/iris-bf16.ini"
echo "precision = bf16" >>"$WORK/iris-bf16.ini"
run --json train "$WORK/iris-bf16.ini"
if [ "$RC" -eq 0 ]; then
  check_trained_hash iris-bf16@v1 "bf16 MLP"
  expect_eq "$("$PY" "$READER" info "$WORK/trained.bin" | python3 -c 'import json,sys; print(json.load(sys.stdin)["precision"])')" \
    "bf16" "the bf16 model says so"
else
  expect_contains "$ERR" "bf16" "a CPU without bf16 refuses precision = bf16"
fi
printf 'name = iris-trees\ndataset = iris\nlayers = trees\ntree_rounds = 10\nseed = 1\nthreads = 1\n' >"$WORK/trees.ini"
expect_rc 0 --json train "$WORK/trees.ini"
check_trained_hash iris-trees@v1 "tree model"

# --- an ensemble (layers = auto's weighted members): its hash -------------------
# Ozone (bench/data/tabular): with this seed and budget the search's
# ensemble of a tree model and networks validates best (ensemble_test.sh).
TABULAR="$TEST_DATA/../../bench/data/tabular"
expect_rc 0 data import ozone "$TABULAR/Ozone.train.csv.zst" --test "$TABULAR/Ozone.test.csv.zst" --label V4
printf 'name = ozone-auto\ndataset = ozone\nloss = mse\nseed = 1\nmax_trials = 14\nthreads = 1\n' >"$WORK/ozone.ini"
expect_rc 0 --json train "$WORK/ozone.ini"
check_trained_hash ozone-auto@v1 "ensemble"
expect_eq "$("$PY" "$READER" info "$WORK/trained.bin" | python3 -c 'import json,sys; print(json.load(sys.stdin)["kind"])')" \
  "ensemble" "the reader reads an ensemble"

# --- pruned (bitmask, format 4) and int8 versions of the iris MLP ---------------
# A pruned weight that was negative is -0.0 until the bitmask stores it as
# +0.0: the hash is of the decoded +0.0, so it recomputes from the blob
# with or without fine-tuning after pruning.
expect_rc 0 --json prune iris-mlp@v1 --sparsity 0.6 --schedule oneshot --finetune-epochs 0 --threads 1
pruned=$(json_get 'j["model"]')
compare_predict "$pruned" "$TEST_DATA/iris.csv" 1e-5 "pruned MLP"
"$PY" "$READER" info "$WORK/m.bin" | grep -q '"format": 4' && pass || fail "a pruned model is format 4"
expect_rc 0 --json prune iris-mlp@v1 --sparsity 0.7 --finetune-epochs 1 --threads 1
compare_predict "$(json_get 'j["model"]')" "$TEST_DATA/iris.csv" 1e-5 "pruned, fine-tuned MLP"
expect_rc 0 --json quantize iris-mlp@v1 --int8 --calib iris
int8=$(json_get 'j["model"]')
# oneDNN may round a rescaled int8 activation one step the other way than
# the document's f32 formula: a looser bound than fp32's.
compare_predict "$int8" "$TEST_DATA/iris.csv" 2e-3 "int8 MLP"

# --- a CNN on 8x8 digit images (IDX), compared through eval ---------------------
"$PY" - "$TEST_DATA/digits.csv" "$WORK/images.idx" "$WORK/labels.idx" <<'PY'
import csv, struct, sys
rows = list(csv.reader(open(sys.argv[1])))[1:]
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack(">IIII", 0x803, len(rows), 8, 8) + bytes(int(float(v)) for r in rows for v in r[:64]))
with open(sys.argv[3], "wb") as f:
    f.write(struct.pack(">II", 0x801, len(rows)) + bytes(int(float(r[64])) for r in rows))
PY
expect_rc 0 data import digits-img "$WORK/images.idx" --labels "$WORK/labels.idx"
cat >"$WORK/cnn.ini" <<'INI'
name = digits-cnn
dataset = digits-img
layers = conv(4,3,pad=1) relu maxpool(2) conv(8,3) relu avgpool(2,stride=1) flatten dense(10)
optimizer = adam
lr = 0.01
batch = 32
epochs = 3
seed = 4
threads = 1
INI
expect_rc 0 train "$WORK/cnn.ini"
for stream in features labels split; do
  "$PY" "$READER" stream --store "$ANNEAL_HOME" --dataset digits-img@v1 --role "$stream" -o "$WORK/$stream.bin" \
    || fail "reader could not read stream $stream"
done
# The images are IDX bytes, stored as u8 (docs/STORE.md): the stream's dtype says how to read it.
expect_rc 0 --json data show digits-img@v1
json_get '[s["dtype"] for s in j["streams"] if s["role"] == "features"][0]' >"$WORK/features.dtype"
# compare_eval REF LABEL MARGIN: the reader's confusion matrix on the test
# rows equals `anneal eval`'s, but for rows the reader finds within MARGIN
# of a tie between its top two classes (f32 summation order, or an int8
# rounding step, may decide those either way).
compare_eval() {
  model_blob "$1" "$WORK/m.bin"
  check_hash "$WORK/m.bin" "$2"
  expect_rc 0 --json eval "$1" digits-img@v1
  printf '%s' "$OUT" >"$WORK/eval.json"
  "$PY" - "$READER" "$WORK" "$2" "$3" <<'PY' && pass || fail "$2: confusion matrix differs from anneal eval"
import json, sys, importlib.util
import numpy as np
spec = importlib.util.spec_from_file_location("read_model", sys.argv[1])
rm = importlib.util.module_from_spec(spec); spec.loader.exec_module(rm)
work, label = sys.argv[2], sys.argv[3]
header, tensors = rm.load_model(f"{work}/m.bin")
dtype = {"f32": "<f4", "u8": np.uint8}[open(f"{work}/features.dtype").read().strip()]
x = np.fromfile(f"{work}/features.bin", dtype=dtype).astype(np.float32).reshape(-1, 64)
y = np.fromfile(f"{work}/labels.bin", dtype="<f4")
test = np.fromfile(f"{work}/split.bin", dtype=np.uint8) == 1
p = rm.predictions(header, tensors, rm.transform(header["features"], x[test].astype(np.float64)))
values = header["labels"]["values"]
confusion = np.zeros((len(values), len(values)), dtype=int)
for truth, row in zip(y[test], p):
    confusion[values.index(float(truth)), int(np.argmax(row))] += 1
want = np.array(json.load(open(f"{work}/eval.json"))["metrics"]["confusion"])
top2 = np.sort(p, axis=1)[:, -2:]
near_ties = int((top2[:, 1] - top2[:, 0] < float(sys.argv[4])).sum())
moved = int(np.abs(confusion - want).sum()) // 2
print(f"{label}: {int(test.sum())} test rows, accuracy {np.trace(confusion) / test.sum():.4f}, "
      f"{moved} rows predicted otherwise than anneal, {near_ties} near ties", file=sys.stderr)
sys.exit(0 if moved <= near_ties else 1)
PY
}
compare_eval digits-cnn@v1 "CNN" 1e-4
# Batchnorm on an image (per channel), a strided conv with a fused sigmoid
# and a dense on an image: the implicit flatten takes number 5 (the relu
# after batchnorm is a layer of its own, 2), the dense 6.
cat >"$WORK/cnn-bn.ini" <<'INI'
name = digits-cnn-bn
dataset = digits-img
layers = conv(4,3,pad=1) batchnorm relu maxpool(2) conv(6,2,stride=2) sigmoid dense(10)
optimizer = sgd
momentum = 0.9
lr = 0.05
batch = 32
epochs = 2
seed = 6
threads = 1
INI
expect_rc 0 --json train "$WORK/cnn-bn.ini"
bn_run=$(json_get 'j["run"]' | sed 's/^run-//')
bn_step=$("$PY" -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT max(step) FROM checkpoints WHERE run_id=?', (int(sys.argv[2]),)).fetchone()[0])" \
  "$ANNEAL_HOME/catalog.db" "$bn_run")
"$PY" "$READER" blob --store "$ANNEAL_HOME" --checkpoint "$bn_run:$bn_step" -o "$WORK/bn-ckpt.bin" \
  || fail "reader could not read checkpoint $bn_run:$bn_step"
"$PY" "$READER" checkpoint "$WORK/bn-ckpt.bin" >"$WORK/bn-ckpt.json" || fail "reader could not parse the CNN's trainer state"
"$PY" - "$WORK/bn-ckpt.json" <<'PY' && pass || fail "CNN checkpoint: fingerprint or tensor order is not as documented"
import json, sys
s = json.load(open(sys.argv[1]))["state"]
fp = s["fingerprint"]
want = ("layers=conv(4,3,pad=1) batchnorm relu maxpool(2) conv(6,2,stride=2) sigmoid flatten dense(10);"
        "input={1, 8, 8};loss=softmax_ce;outputs=10;optimizer=sgd;momentum=1;precision=fp32;batch=32;accum=1;seed=6;rows=")
assert fp.startswith(want), fp
names = [t["name"] for t in s["tensors"]]
params = ["0.conv.weight", "0.conv.bias", "1.batchnorm.scale", "1.batchnorm.shift", "4.conv.weight", "4.conv.bias",
          "6.dense.weight", "6.dense.bias"]
assert names == params + ["1.batchnorm.running_mean", "1.batchnorm.running_var"] + [p + ".velocity" for p in params], names
PY
compare_eval digits-cnn-bn@v1 "CNN with batchnorm" 1e-4
"$PY" "$READER" info "$WORK/m.bin" >"$WORK/info.json"
expect_contains "$(cat "$WORK/info.json")" '"6.dense.weight", "dims": [10, 24]' "implicit flatten takes a layer number"
expect_rc 0 --json quantize digits-cnn@v1 --int8 --calib digits-img
compare_eval "$(json_get 'j["model"]')" "int8 CNN" 2e-2

finish
