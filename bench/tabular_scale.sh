#!/bin/bash
# The tabular bench at 100,000 training rows (issue 31's goal: the auto
# config within 5 minutes on 2 cores up to 100,000 rows): a synthetic
# customer-churn table (bench/make_churn.py: an id, a signup date, skewed
# numbers, a 400-level city column, missing cells; 125,000 rows split
# 80/20) trained by the same candidates as bench/tabular.sh, beside the
# same peers run here on the same split. The table is made up, so its
# scores say how anneal compares on it, not on real customers; its time
# is the point.
#
#   ANNEAL=build/cli/anneal BUILD=build bench/tabular_scale.sh
#   ROWS=250000 ... bench/tabular_scale.sh    # another size (80% train)
set -uo pipefail
: "${ANNEAL:?}" "${BUILD:?}"
HERE=$(dirname "$(realpath "$0")")
PYTHON=${PYTHON:-/usr/bin/python3}
ROWS=${ROWS:-125000}
line() { printf '%s\n' "$*"; }
if ! "$PYTHON" -c "import numpy" 2> /dev/null; then
  line "tabular scale: skipped, $PYTHON lacks numpy (apt-get install python3-numpy)"
  exit 0
fi
if ! command -v zstd > /dev/null; then
  line "tabular scale: skipped, zstd is missing"
  exit 0
fi
DIR=$(mktemp -d "${TMPDIR:-/tmp}/anneal-bench-churn-XXXXXX")
trap 'rm -rf "$DIR"' EXIT
name=Churn$((ROWS * 4 / 5 / 1000))k
if ! "$PYTHON" "$HERE/make_churn.py" "$DIR/$name.train.csv" "$DIR/$name.test.csv" "$ROWS" --seed 1 ||
   ! zstd -q --rm -3 "$DIR/$name.train.csv" "$DIR/$name.test.csv"; then
  line "tabular scale: skipped, the table could not be written"
  exit 0
fi
TABULAR_DATA=$DIR TABLE_LIST="$name churned classification" \
  TITLE="synthetic (bench/make_churn.py, $ROWS rows, 80/20 split)" "$HERE/tabular.sh"
