#!/bin/bash
# data import / list / show / diff / export on the committed real datasets.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
expect_contains "$OUT" "imported iris@v1" "first import is v1"
expect_rc 0 --json data show iris
# The split is decided per row: about a fifth (a binomial count, 3.5 sd = 17).
expect_eq "$(json_get 'j["rows"], j["train_rows"] + j["test_rows"], 13 <= j["test_rows"] <= 47')" "150 150 True" "iris rows and a split of about 0.2"
expect_eq "$(json_get 'j["options"]["split_rule"], j["options"]["date_formats"]')" "row-content-siphash []" "split rule and date formats recorded"
expect_eq "$(json_get 'j["label_column"]')" "species" "label defaults to the last column"
expect_eq "$(json_get '[c["type"] for c in j["columns"]].count("numeric")')" "4" "four numeric features"
expect_eq "$(json_get 'j["columns"][4]["categories"]')" "['setosa', 'versicolor', 'virginica']" "label dictionary"
expect_eq "$(json_get 'j["sample_shape"]')" "[4]" "sample shape"

# Identical content again: no new version, names the existing one.
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
expect_contains "$OUT" "unchanged" "identical import creates nothing"
expect_contains "$OUT" "iris@v1" "identical import names the version"
expect_rc 0 --json data list
expect_eq "$(json_get 'j["datasets"][0]["versions"]')" "1" "still one version"

# A changed file is v2; diff reports rows and shared bytes.
head -n 101 "$TEST_DATA/iris.csv" > "$WORK/iris100.csv"
expect_rc 0 data import iris "$WORK/iris100.csv"
expect_contains "$OUT" "iris@v2" "changed content is v2"
expect_rc 0 data diff iris@v1 iris@latest
expect_contains "$OUT" "rows: 150 -> 100 (-50)" "diff rows"
expect_rc 0 --json data diff iris@v1 iris@v2
expect_eq "$(json_get 'j["rows"]["to"]')" "100" "diff as JSON"

# Export gives back the exact bytes; refuses to overwrite without --force.
expect_rc 0 data export iris@v1 -o "$WORK/out.csv"
cmp -s "$WORK/out.csv" "$TEST_DATA/iris.csv" && pass || fail "export is bit-identical"
expect_rc 2 data export iris@v1 -o "$WORK/out.csv"
expect_contains "$ERR" "--force" "export refuses to overwrite"
expect_rc 0 data export iris@v2 -o "$WORK/out.csv" --force
cmp -s "$WORK/out.csv" "$WORK/iris100.csv" && pass || fail "export --force replaces"
expect_rc 2 data export iris@v1 -o "$WORK/x" --part nope
expect_rc 1 data show iris@v9
expect_contains "$ERR" "no version v9" "missing version named"
expect_rc 1 data show nosuch
expect_contains "$ERR" "no dataset named 'nosuch'" "missing dataset named"
expect_rc 2 data show 'bad name!'

# Compressed input, TSV, a chosen label column, no header.
gzip -c "$TEST_DATA/wine.csv" > "$WORK/wine.csv.gz"
expect_rc 0 data import wine "$WORK/wine.csv.gz"
expect_rc 0 --json data show wine
expect_eq "$(json_get 'j["rows"]')" "178" "gzip CSV rows"
zstd -q -c "$TEST_DATA/breast_cancer.csv" > "$WORK/bc.csv.zst"
expect_rc 0 data import bc "$WORK/bc.csv.zst" --seed 7 --split 0.25
expect_rc 0 --json data show bc
expect_eq "$(json_get 'j["rows"], 110 <= j["test_rows"] <= 175')" "569 True" "zstd CSV with --split 0.25"
expect_rc 0 data export bc -o "$WORK/bc.out.zst"
cmp -s "$WORK/bc.out.zst" "$WORK/bc.csv.zst" && pass || fail "compressed source exported as imported"
tr ',' '\t' < "$TEST_DATA/iris.csv" > "$WORK/iris.tsv"
expect_rc 0 data import iristsv "$WORK/iris.tsv" --label 0
expect_rc 0 --json data show iristsv
expect_eq "$(json_get 'j["label_column"]')" "sepal_length_(cm)" "--label by index"
tail -n +2 "$TEST_DATA/iris.csv" > "$WORK/noheader.csv"
expect_rc 0 data import nohdr "$WORK/noheader.csv" --no-header
expect_rc 0 --json data show nohdr
expect_eq "$(json_get 'j["rows"]')" "150" "--no-header keeps the first row"

# A separate test file.
head -n 121 "$TEST_DATA/iris.csv" > "$WORK/train.csv"
( head -n 1 "$TEST_DATA/iris.csv"; tail -n 30 "$TEST_DATA/iris.csv" ) > "$WORK/test.csv"
expect_rc 0 data import split "$WORK/train.csv" --test "$WORK/test.csv"
expect_rc 0 --json data show split
expect_eq "$(json_get 'j["train_rows"], j["test_rows"]')" "120 30" "--test rows"

# LIBSVM.
printf '1 1:0.5 3:2\n0 2:1.5\n1 1:1 2:1 3:1\n0 3:4\n1 1:2\n' > "$WORK/small.svm"
expect_rc 0 data import svm "$WORK/small.svm" --split 0
expect_rc 0 --json data show svm
expect_eq "$(json_get 'j["format"], j["sample_shape"], j["rows"]')" "libsvm [3] 5" "LIBSVM densified"

# A small generated IDX pair (gzip, as MNIST ships): 6 images of 3x2, 6 labels.
python3 - "$WORK" <<'PY'
import gzip, struct, sys
work = sys.argv[1]
with gzip.open(f"{work}/images.idx.gz", "wb") as f:
    f.write(struct.pack(">BBBBIII", 0, 0, 8, 3, 6, 3, 2) + bytes(range(36)))
with open(f"{work}/labels.idx", "wb") as f:
    f.write(struct.pack(">BBBBI", 0, 0, 8, 1, 6) + bytes([0, 1, 0, 1, 0, 1]))
PY
expect_rc 0 data import tiny "$WORK/images.idx.gz" --labels "$WORK/labels.idx" --split 0.5
expect_rc 0 --json data show tiny
expect_eq "$(json_get 'j["format"], j["rows"], j["train_rows"] + j["test_rows"], j["options"]["split_rule"]')" "idx 6 6 row-content" "IDX rows and split"
expect_eq "$(json_get 'j["sample_shape"], j["columns"][0]["shape"]')" "[1, 3, 2] [1, 3, 2]" "IDX image shape kept"
expect_eq "$(json_get 'j["columns"][0]["min"], j["columns"][0]["max"]')" "0.0 35.0" "IDX pixel statistics"
# Unsigned-byte pixels are stored as bytes (u8), exactly the file's; labels as f32.
expect_eq "$(json_get '" ".join(s["role"] + ":" + s["dtype"] for s in j["streams"] if "dtype" in s)')" \
  "features:u8 labels:f32 split:u8" "IDX bytes stored as u8"
expect_rc 0 data export tiny -o "$WORK/tiny.features" --part features
python3 -c 'import sys; sys.exit(open(sys.argv[1], "rb").read() != bytes(range(36)))' "$WORK/tiny.features" \
  && pass || fail "the u8 features stream is not the IDX file's pixels"

expect_rc 0 data list
expect_contains "$OUT" "iris@v2" "list shows the latest version"
expect_rc 0 fsck
expect_contains "$OUT" "ok" "fsck after imports"
expect_rc 0 gc --dry-run
expect_contains "$OUT" "would remove 0 objects" "nothing to collect"
finish
