#!/bin/bash
# bench/tabular.sh (make bench's tabular benchmark) end to end on two small
# tables, one classification and one regression: it exits 0, prints a score
# line for each with every peer's and every anneal candidate's score, and the
# summary lines. Scores are only checked to be scores (accuracy in [0, 1],
# R² at most 1), never against the goal, and nothing depends on how fast the
# machine is. Skips (77), naming what is missing, where /usr/bin/python3
# lacks scikit-learn or XGBoost, the peers the bench runs.
. "$E2E_LIB"

PY=/usr/bin/python3
ROOT=$(cd "$(dirname "$E2E_LIB")/../.." && pwd)
if [ ! -x "$PY" ]; then
  echo "SKIPPED: no $PY (the bench's peers need python3-sklearn and python3-xgboost)"
  exit 77
fi
missing=$("$PY" -c "
import importlib.util
print(' '.join(m for m in ('numpy', 'sklearn', 'xgboost') if importlib.util.find_spec(m) is None))")
if [ -n "$missing" ]; then
  echo "SKIPPED: $PY lacks $missing (apt-get install python3-sklearn python3-xgboost)"
  exit 77
fi
if ! command -v zstd > /dev/null; then
  echo "SKIPPED: no zstd (the bench's peers read the split decompressed)"
  exit 77
fi

TABLES="HouseVotes84 BostonHousing2" ANNEAL="$ANNEAL" BUILD="$(dirname "$(dirname "$ANNEAL")")" \
  bash "$ROOT/bench/tabular.sh" > "$WORK/bench.out" 2> "$WORK/bench.err"
rc=$?
expect_eq "$rc" 0 "bench/tabular.sh exit code (stderr: $(tail -n 5 "$WORK/bench.err"))"
OUT=$(cat "$WORK/bench.out")

# Each table's line: "NAME TRAIN/TEST METRIC LR MLP XGB | CANDIDATES... |
# BEST auto (config) PEER_SCORE PEER DELTA pass|FAIL | SECONDS BUDGET ok|OVER".
check_row() {
  local table=$1 metric=$2 rows=$3 row why
  row=$(printf '%s\n' "$OUT" | grep "^$table ")
  if [ -z "$row" ]; then
    fail "no score line for $table in: $OUT"
    return
  fi
  pass
  why=$("$PY" - "$row" "$metric" "$rows" <<'PY'
import sys
row, metric, rows = sys.argv[1], sys.argv[2], sys.argv[3]
parts = [p.split() for p in row.split("|")]
problems = []
if len(parts) != 4:
    sys.exit("expected 4 sections separated by '|', got %d" % len(parts))
head, cands, best, timing = parts
if head[1:3] != [rows, metric]:
    problems.append("rows and metric %s, expected %s %s" % (head[1:3], rows, metric))
def score(text, what):
    try:
        x = float(text)
    except ValueError:
        problems.append("%s is %r, not a number" % (what, text))
        return
    if metric == "acc" and not 0 <= x <= 1:
        problems.append("%s %s is not an accuracy in [0, 1]" % (what, text))
    if metric == "R²" and not x <= 1:
        problems.append("%s %s is an R² above 1" % (what, text))
for name, text in zip(("LR", "MLP", "XGB"), head[3:6]):
    score(text, name)
if len(head) != 6:
    problems.append("expected 3 peer scores, got %s" % head[3:])
if len(cands) < 2:
    problems.append("expected a score per anneal candidate (net, linear), got %s" % cands)
for i, text in enumerate(cands):
    score(text, "anneal candidate %d" % (i + 1))
# anneal best: its score, the candidate and how it was chosen (the auto
# config, what a user runs: "auto (config)"); the best peer.
if len(best) != 7:
    problems.append("expected 'SCORE CANDIDATE (config) SCORE PEER DELTA GOAL', got %s" % best)
else:
    score(best[0], "anneal best")
    if best[1:3] != ["auto", "(config)"]:
        problems.append("anneal best is %s, expected the auto config: 'auto (config)'" % " ".join(best[1:3]))
    elif best[0] != cands[-1]:
        problems.append("anneal best %s is not the auto column's score %s" % (best[0], cands[-1]))
    score(best[3], "best peer")
    if best[4] not in ("LR", "MLP", "XGB"):
        problems.append("best peer %r" % best[4])
    try:
        float(best[5])
    except ValueError:
        problems.append("delta %r is not a number" % best[5])
    if best[6] not in ("pass", "FAIL"):
        problems.append("goal %r, expected pass or FAIL" % best[6])
try:
    if float(timing[0]) < 0:
        problems.append("negative wall time")
except (ValueError, IndexError):
    problems.append("anneal's wall time missing: %s" % timing)
if timing[1:2] != ["120"] or timing[2:3] not in (["ok"], ["OVER"]):
    problems.append("budget %s, expected 120 ok|OVER" % timing[1:])
print("; ".join(problems))
PY
)
  if [ -n "$why" ]; then fail "$table: $why; line: $row"; else pass; fi
}
check_row HouseVotes84 acc 348/87
check_row BostonHousing2 "R²" 404/102

# Nothing failed on the way: a failure is a note line under the table's row.
expect_eq "$(printf '%s\n' "$OUT" | grep -c -E '^  [A-Za-z0-9]+: (peers|anneal)')" 0 "failure notes in: $OUT"
expect_contains "$OUT" "== 2 table(s) scored by all four (2 run)" "summary"
expect_contains "$OUT" "mean rank over 2 table(s)" "summary"
expect_contains "$OUT" "mean score (accuracy and R² alike)" "summary"
expect_contains "$OUT" "goal met on " "summary"
expect_contains "$OUT" " of 2 table(s)" "summary"
expect_contains "$OUT" "wall time: anneal" "summary"
# Only the tables asked for.
expect_eq "$(printf '%s\n' "$OUT" | grep -c -E '^(LetterRecognition|Shuttle|Glass) ')" 0 "tables beyond TABLES"

# A table that does not exist is one line, and the rest still runs.
TABLES="NoSuchTable Glass" ANNEAL="$ANNEAL" BUILD="$(dirname "$(dirname "$ANNEAL")")" \
  bash "$ROOT/bench/tabular.sh" > "$WORK/bench2.out" 2> "$WORK/bench2.err"
expect_eq "$?" 0 "bench/tabular.sh with an unknown table"
OUT=$(cat "$WORK/bench2.out")
expect_contains "$OUT" "tabular: no table 'NoSuchTable'" "unknown table"
expect_contains "$OUT" "== 1 table(s) scored by all four (1 run)" "unknown table"
finish
