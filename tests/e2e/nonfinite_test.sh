#!/bin/bash
# Non-finite numbers (issue 12). A cell such as inf or 1e39 once made a
# column statistic infinite, which the catalog stored as null and could not
# read back: 'data list' and 'data show' then failed for every dataset. Now:
# exit 65 with FILE:LINE:COLUMN and the store exactly as it was, or with
# --nonfinite missing the values are missing; and a catalog row written
# before the fix is readable again.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
before=$(store_state)
before_catalog=$(catalog_dump)

# refused NAME LOCATION_AND_MESSAGE FILE [ARGS...]
refused() {
  local name=$1 message=$2 file=$3
  shift 3
  expect_rc 65 data import nf "$file" "$@"
  expect_contains "$ERR" "$message" "$name: location and message"
  expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "$name: one-line error"
  expect_eq "$(store_state)" "$before" "$name: store unchanged"
  expect_eq "$(catalog_dump)" "$before_catalog" "$name: catalog unchanged"
}

printf 'a,b,label\n1,2,x\n3,inf,y\n' > "$WORK/inf.csv"
refused "csv inf" "inf.csv:3:3: expected a finite number, found 'inf'" "$WORK/inf.csv"
printf 'a,b,label\n1,2,x\n-inf,4,y\n' > "$WORK/neg.csv"
refused "csv -inf" "neg.csv:3:1: expected a finite number, found '-inf'" "$WORK/neg.csv"
printf 'a,b,label\n1,2,x\n3,1e39,y\n' > "$WORK/over.csv"
refused "csv beyond float32" "over.csv:3:3: expected a finite number, found '1e39'" "$WORK/over.csv"
printf 'a\tb\tlabel\n1\t2\tx\n3\t-nan\ty\n' > "$WORK/nan.tsv"
refused "tsv -nan" "nan.tsv:3:3: expected a finite number, found '-nan'" "$WORK/nan.tsv"
printf '1 1:0.5 2:1\n0 1:inf\n' > "$WORK/inf.libsvm"
refused "libsvm value" "inf.libsvm:2:5: expected a finite number, found 'inf'" "$WORK/inf.libsvm"
printf '1 1:0.5\n1e39 1:1\n' > "$WORK/label.libsvm"
refused "libsvm label" "label.libsvm:2:1: expected a finite number as the label, found '1e39'" \
  "$WORK/label.libsvm" --nonfinite missing
python3 - "$WORK" <<'PY'
import struct, sys
w = sys.argv[1]
def idx(code, dims, payload):
    return bytes([0, 0, code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload
open(w + "/f32.idx", "wb").write(idx(0x0D, [4, 2], struct.pack(">8f", 1, 2, 3, float("inf"), 5, 6, 7, 8)))
open(w + "/f64.idx", "wb").write(idx(0x0E, [4, 2], struct.pack(">8d", 1, 2, 3, 1e300, 5, 6, 7, float("nan"))))
open(w + "/labels.idx", "wb").write(idx(0x08, [4], bytes([0, 1, 0, 1])))
PY
refused "idx f32" "f32.idx: expected a finite number, found inf at element 3, byte 24 (--nonfinite missing" \
  "$WORK/f32.idx" --labels "$WORK/labels.idx"
refused "idx f64" "f64.idx: expected a finite number, found inf (beyond float32's range) at element 3" \
  "$WORK/f64.idx" --labels "$WORK/labels.idx"

# Every other command still works.
expect_rc 0 data list
expect_rc 0 data show iris
expect_rc 0 fsck

# --nonfinite missing: imported, the values are missing, the store readable.
printf 'a,b,label\n1,2,x\n3,inf,y\n-1e39,6,x\n-inf,8,y\n' > "$WORK/mixed.csv"
expect_rc 0 data import mixed "$WORK/mixed.csv" --nonfinite missing --split 0
expect_rc 0 --json data show mixed
expect_eq "$(json_get "[c['missing'] for c in j['columns']]")" "[2, 1, 0]" "missing counts"
expect_eq "$(json_get "[c['max'] for c in j['columns']]")" "[3.0, 8.0, 1.0]" "finite statistics"
expect_rc 0 data import missing-idx "$WORK/f64.idx" --labels "$WORK/labels.idx" --nonfinite missing --split 0
expect_rc 0 data import missing-svm "$WORK/inf.libsvm" --nonfinite missing --split 0
expect_rc 0 data list
expect_contains "$OUT" "mixed" "data list shows the new dataset"
expect_rc 2 data import bad-flag "$WORK/mixed.csv" --nonfinite maybe
expect_contains "$ERR" "--nonfinite 'maybe': expected error or missing" "usage error names the flag"

# A row written before the fix (null statistics, as JSON has no inf) must
# not brick the catalog.
python3 - "$ANNEAL_HOME/catalog.db" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
(schema,) = db.execute("SELECT schema_json FROM dataset_versions WHERE version = 1 AND dataset_id = "
                       "(SELECT id FROM datasets WHERE name = 'iris')").fetchone()
schema = json.loads(schema)
for key in ("min", "max", "mean", "std"):
    schema["columns"][0][key] = None
db.execute("UPDATE dataset_versions SET schema_json = ? WHERE dataset_id = (SELECT id FROM datasets WHERE name = 'iris')",
           (json.dumps(schema),))
db.commit()
PY
expect_rc 0 data list
expect_rc 0 data show iris
expect_rc 0 --json data show iris
expect_rc 0 data show mixed

# predict --input reads CSV the same way: a non-finite cell is an error
# naming FILE:LINE:COLUMN, and nothing is written.
iris_config "$WORK/iris.ini" iris-mlp "epochs = 2"
# A fresh version of iris (--seed 1), statistics intact, to train on.
expect_rc 0 data import iris "$TEST_DATA/iris.csv" --seed 1
expect_rc 0 train "$WORK/iris.ini"
head -n 1 "$TEST_DATA/iris.csv" | cut -d, -f1-4 > "$WORK/rows.csv"
printf '5.1,3.5,1.4,0.2\n5.0,inf,1.4,0.2\n' >> "$WORK/rows.csv"
expect_rc 65 predict iris-mlp --input "$WORK/rows.csv" -o "$WORK/p.csv"
expect_contains "$ERR" "rows.csv:3:5: expected a finite number, found 'inf'" "predict: location and message"
expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "predict: one-line error"
[ -e "$WORK/p.csv" ] && fail "predict wrote output despite the error" || pass

finish
