# Shared by the ONNX export tests (onnx_export_test.sh, onnx_export_bf16_test.sh),
# sourced after lib.sh: onnx.checker (Debian's python3-onnx) and ONNX Runtime
# (the npm package onnxruntime-node) against anneal, and the sales data they
# train on.
#
# onnxruntime-node is installed once under the build directory
# ($ANNEAL_NPM_DIR) with `npm install --ignore-scripts` (its post-install
# step would download GPU providers). Without a reachable npm registry ORT=0
# and the ONNX Runtime comparisons are left out; each test then says so and
# exits 77.

PY=/usr/bin/python3
ONNX_DIR="$(cd "$(dirname "$E2E_LIB")" && pwd)/onnx"
TOOL="$ONNX_DIR/onnx_tool.py"
ORT_RUN="$ONNX_DIR/ort_run.js"
READER="$(cd "$(dirname "$E2E_LIB")/../format" && pwd)/read_model.py"
NPM_DIR=${ANNEAL_NPM_DIR:-$WORK/npm}
if ! "$PY" -c 'import onnx, numpy' 2>/dev/null; then
  echo "$(basename "$0"): $PY lacks onnx or numpy (packaging/install-deps package installs python3-onnx)" >&2
  exit 1
fi

# --- ONNX Runtime: installed once, under the build directory ----------------
ORT=1
install_ort() {
  command -v node >/dev/null && command -v npm >/dev/null || { echo "no node/npm on PATH"; return 1; }
  mkdir -p "$NPM_DIR" || return 1
  (
    flock 9
    if [ ! -f "$NPM_DIR/node_modules/onnxruntime-node/package.json" ]; then
      [ -f "$NPM_DIR/package.json" ] || printf '{"name": "anneal-onnx-test", "private": true}\n' >"$NPM_DIR/package.json"
      npm install --prefix "$NPM_DIR" --ignore-scripts --no-audit --no-fund onnxruntime-node >&2 || exit 1
    fi
    node -e "require('$NPM_DIR/node_modules/onnxruntime-node')" >&2
  ) 9>"$NPM_DIR/.lock"
}
if ! install_ort; then
  ORT=0
  echo "$(basename "$0"): onnxruntime-node could not be installed (npm registry unreachable?); the ONNX Runtime checks are skipped" >&2
fi

# export_check REF FILE LABEL: exports and runs onnx.checker.
export_check() {
  expect_rc 0 model export "$1" --format onnx -o "$2" --force
  "$PY" "$TOOL" check "$2" >&2 && pass || fail "$3: onnx.checker rejects the export of $1"
}

# ort_vs_predict REF CSV MIN_AGREEMENT TOLERANCE LABEL: ONNX Runtime on the
# CSV's raw columns against `anneal predict` on the same file.
ort_vs_predict() {
  local ref=$1 csv=$2 agree=$3 tol=$4 label=$5
  export_check "$ref" "$WORK/$label.onnx" "$label"
  [ "$ORT" = 1 ] || return 0
  expect_rc 0 predict "$ref" --input "$csv" -o "$WORK/$label.predict.csv" --force
  "$PY" "$TOOL" feeds "$WORK/$label.onnx" "$csv" "$WORK/$label.feeds.json" || { fail "$label: feeds"; return; }
  node "$ORT_RUN" "$NPM_DIR" "$WORK/$label.onnx" "$WORK/$label.feeds.json" "$WORK/$label.ort.json" \
    || { fail "$label: ONNX Runtime could not run the model"; return; }
  "$PY" "$TOOL" compare-predict "$WORK/$label.predict.csv" "$WORK/$label.ort.json" "$agree" "$tol" "$label" >&2 \
    && pass || fail "$label: ONNX Runtime and anneal predict disagree"
}

# import_sales: dataset `sales` from tests/data/sales.csv, trained on the
# first 3200 orders and tested on the last 800 ($WORK/past.csv and
# $WORK/future.csv: products and customers the training rows never had,
# dates it never saw), with a missing value of each kind in the test rows
# (date, category, number) and an unseen category.
import_sales() {
  head -n 3201 "$TEST_DATA/sales.csv" >"$WORK/past.csv"
  { head -n 1 "$TEST_DATA/sales.csv"; tail -n 800 "$TEST_DATA/sales.csv"; } >"$WORK/future.csv"
  "$PY" - "$WORK/future.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
h = rows[0]
rows[1][h.index("order_date")] = ""
rows[2][h.index("region")] = ""
rows[3][h.index("unit_price")] = "NA"
rows[4][h.index("channel")] = "carrier-pigeon"  # unseen
csv.writer(open(sys.argv[1], "w", newline=""), lineterminator="\n").writerows(rows)
PY
  expect_rc 0 data import sales "$WORK/past.csv" --test "$WORK/future.csv" --label returned
}

# ort_finish: the test's verdict; 77 (skipped, saying so) when every anneal
# check passed but ONNX Runtime could not be installed.
ort_finish() {
  echo "$(basename "$0" .sh): $CHECKS checks, $FAILURES failures" >&2
  [ "$FAILURES" -eq 0 ] || exit 1
  if [ "$ORT" = 0 ]; then
    echo "$(basename "$0" .sh): SKIPPED the ONNX Runtime comparisons (no onnxruntime-node)" >&2
    exit 77
  fi
  exit 0
}
