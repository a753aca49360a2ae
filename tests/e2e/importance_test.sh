#!/bin/bash
# Permutation importance (eval --importance, the run's summary and report):
#   * on a generated table whose label is decided by one numeric column
#     ('signal') and one categorical column ('tier', one-hot, counted once),
#     every kind of model (linear, trees, network) ranks those two first and
#     a column of pure noise near zero;
#   * the figures are deterministic (the same twice);
#   * the run records them in its summary and the report draws them;
#   * image data and bad flags are one-line usage errors (exit 2), and the
#     store is unchanged by a refused eval.
. "$E2E_LIB"
PY=${PYTHON:-/usr/bin/python3}

"$PY" - "$WORK/planted.csv" <<'PY'
import random, sys
rng = random.Random(7)
with open(sys.argv[1], "w") as f:
    f.write("signal,noise,tier,label\n")
    for _ in range(1500):
        signal = rng.uniform(-1, 1)
        noise = rng.uniform(-1, 1)
        tier = rng.choice(["gold", "silver", "bronze"])
        score = signal + (0.8 if tier == "gold" else -0.8 if tier == "bronze" else 0.0) + rng.gauss(0, 0.2)
        f.write(f"{signal:.4f},{noise:.4f},{tier},{'yes' if score > 0 else 'no'}\n")
PY
expect_rc 0 init
expect_rc 0 data import planted "$WORK/planted.csv" --label label

# columns JSON -> "first second ... | noise drop"
ranking() {
  "$PY" -c '
import json, sys
cols = json.load(sys.stdin)["columns"]
drop = {c["column"]: c["drop"] for c in cols}
print(" ".join(c["column"] for c in cols), "|", "%.4f" % drop["noise"])'
}

for kind in linear trees "dense(16) relu dense(2)"; do
  name=planted-$(echo "$kind" | tr -cd 'a-z' | head -c 6)
  cat >"$WORK/$name.ini" <<INI
name = $name
dataset = planted
layers = $kind
validation = 0.1
epochs = 30
lr = 0.01
seed = 3
threads = 1
INI
  expect_rc 0 train "$WORK/$name.ini"
  expect_rc 0 --json eval "$name" planted --importance
  first=$(printf '%s' "$OUT" | "$PY" -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["importance"]))')
  r=$(printf '%s' "$first" | ranking)
  top=$(echo "$r" | cut -d' ' -f1-2)
  case "$top" in
    "signal tier"|"tier signal") pass ;;
    *) fail "$kind: the planted columns are not ranked first: $r" ;;
  esac
  noise=$(echo "$r" | awk '{print $NF}')
  "$PY" -c "import sys; sys.exit(0 if abs($noise) < 0.02 else 1)" && pass || fail "$kind: noise drop $noise is not near 0"
  expect_contains "$first" '"metric": "accuracy"' "$kind: the drops are in accuracy"
  expect_eq "$(json_get 'j["importance"]["rows"] == j["metrics"]["rows"]')" "True" "$kind: every row of the test split (fewer than 2000)"
  # Deterministic: the same figures again.
  expect_rc 0 --json eval "$name" planted --importance --device cpu
  again=$(printf '%s' "$OUT" | "$PY" -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["importance"]))')
  expect_eq "$again" "$first" "$kind: the same importance twice"
  # The run's summary has them (on the same test rows), and the report a section.
  run_id=$(latest_run)
  expect_rc 0 --json runs show "$run_id"
  expect_eq "$(json_get '[c["column"] for c in j["summary"]["permutation_importance"]["columns"]][:2] in (["signal","tier"],["tier","signal"])')" \
    "True" "$kind: the run's summary ranks the planted columns first"
  expect_rc 0 runs report "$run_id" -o "$WORK/$name.html"
  expect_contains "$(cat "$WORK/$name.html")" "Permutation importance" "$kind: the report has the section"
done

# A bounded sample: --importance-rows.
expect_rc 0 --json eval planted-trees planted --importance --importance-rows 50
expect_eq "$(json_get 'j["importance"]["rows"]')" "50" "--importance-rows bounds the rows"

# Refusals: one line, exit 2, the store as it was.
before=$(store_state)
expect_rc 2 eval planted-trees planted --importance-rows 10
expect_contains "$ERR" "--importance-rows: give --importance too" "rows without --importance"
expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "one line"
expect_rc 2 eval planted-trees planted --importance --importance-rows 0
expect_contains "$ERR" "--importance-rows 0: expected 1 to 10000000 rows" "zero rows"
"$PY" - "$TEST_DATA/digits.csv" "$WORK/images.idx" "$WORK/labels.idx" <<'PY'
import csv, struct, sys
rows = list(csv.reader(open(sys.argv[1])))[1:200]
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack(">IIII", 0x803, len(rows), 8, 8) + bytes(int(float(v)) for r in rows for v in r[:64]))
with open(sys.argv[3], "wb") as f:
    f.write(struct.pack(">II", 0x801, len(rows)) + bytes(int(float(r[64])) for r in rows))
PY
expect_rc 0 data import img "$WORK/images.idx" --labels "$WORK/labels.idx"
printf 'name = img\ndataset = img\nlayers = flatten dense(10)\nepochs = 1\nthreads = 1\n' >"$WORK/img.ini"
expect_rc 0 train "$WORK/img.ini"
before=$(store_state)
expect_rc 2 eval img img --importance
expect_contains "$ERR" "permutation importance is per table column, and images have none" "image data is refused"
expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "in one line"
expect_eq "$(store_state)" "$before" "a refused eval leaves the store as it was"
finish
