#!/bin/bash
# Tabular benchmark (issue 31): every table of bench/data/tabular (twelve of
# R's mlbench tables on a fixed 80/20 split, README.md there) trained by
# anneal's candidate configs beside scikit-learn's logistic regression (ridge
# for regression), scikit-learn's MLP and XGBoost, all run here, in this
# invocation, on the same split, on $THREADS threads each (default 2).
# Prints each table's test score (accuracy, or R² for regression) for every
# peer and candidate, the auto config's (what a user runs) against the best
# peer and the goal, its wall time against the budget; then the mean rank,
# the mean scores and how many tables meet the goal.
#
#   ANNEAL=build/cli/anneal BUILD=build bench/tabular.sh
#   TABLES="HouseVotes84 Glass" ... bench/tabular.sh     # only those tables
#   AUTO_CONFIG="max_trials = 14" ... bench/tabular.sh    # config lines (';'-separated) added to auto's
#   EXTRA_CANDIDATES="autostd|validation = 0.1;seed = 1;scaling = standard" ...   # more candidates, one a line
#   TABULAR_DATA=DIR TABLE_LIST="NAME LABEL TASK" TITLE="..." ...  # other tables (bench/tabular_scale.sh)
#
# The auto search under its default 2m time_budget depends on the machine's
# speed; `AUTO_CONFIG="max_trials = 14"` (the whole portfolio: 10 trials,
# then 3, then 1) makes its figures repeat run to run.
#
# What cannot run here (no python3 with scikit-learn and XGBoost, no zstd, a
# table whose import or training fails) is one line saying why; the bench
# goes on with the rest and exits 0.
set -uo pipefail
: "${ANNEAL:?}" "${BUILD:?}"
HERE=$(dirname "$(realpath "$0")")
DATA=${TABULAR_DATA:-$HERE/data/tabular}
PYTHON=${PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-2}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/anneal-bench-tabular-XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# The tables: NAME LABEL TASK, in the order of the data's README.
ALL_TABLES="
LetterRecognition lettr classification
Satellite classes classification
Shuttle Class classification
PimaIndiansDiabetes2 diabetes classification
Vehicle Class classification
DNA Class classification
HouseVotes84 Class classification
Soybean Class classification
Glass Type classification
Ionosphere Class classification
BostonHousing2 cmedv regression
Ozone V4 regression"
ALL_TABLES=${TABLE_LIST:-$ALL_TABLES}
TITLE=${TITLE:-"of R's mlbench, fixed 80/20 split (bench/data/tabular)"}

# anneal's candidates, each "NAME|CONFIG": CONFIG is config lines separated
# by ';', to which the bench adds name, dataset, threads and, on a regression
# table, `loss = mse` (Ozone's label is an integer with few values, which
# anneal would otherwise read as classes). @OUT@ becomes the output width:
# the number of classes, or 1 for regression. "anneal best" is the auto
# candidate, the config a user writes (with it in the list, as by default);
# without it, the candidate with the best validation score (validation = 0.1
# of the train split), never the best test score, unless a candidate has
# none (then the output says so). The wall time judged against the budget
# is the import and the judged config's training and eval.
# The network and the trees skip the linear baseline (baseline = false): the
# linear model is a candidate of its own, so its time is counted once.
CANDIDATES=(
  "net|layers = dense(64) relu dense(64) relu dense(@OUT@);optimizer = adam;lr = 0.003;batch = 64;epochs = 60;validation = 0.1;early_stop = val_loss:5;seed = 1;baseline = false"
  "linear|layers = linear;validation = 0.1;seed = 1"
  "trees|layers = trees;validation = 0.1;seed = 1;baseline = false"
)
# The auto config: a name and a dataset, as a user writes it (layers =
# auto, the default 2m time_budget, no validation split; docs/TRAINING.md),
# with a fixed seed. It scores its trials by cross-validation on the
# training rows (a validation split on large tables is what it holds out
# itself, by its defaults).
CANDIDATES+=("auto|seed = 1${AUTO_CONFIG:+;$AUTO_CONFIG}")
while IFS= read -r extra; do
  [ -n "$extra" ] && CANDIDATES+=("$extra")
done <<< "${EXTRA_CANDIDATES:-}"

line() { printf '%s\n' "$*"; }

if [ ! -x "$PYTHON" ]; then
  line "tabular: skipped, $PYTHON is missing (it reads anneal's JSON and runs the peers; install python3-sklearn python3-xgboost)"
  exit 0
fi
PEERS=1
if ! why=$("$PYTHON" -c "
import importlib.util
missing = [m for m in ('numpy', 'sklearn', 'xgboost') if importlib.util.find_spec(m) is None]
print(', '.join(missing))
exit(1 if missing else 0)" 2>&1); then
  line "tabular: peers skipped, $PYTHON lacks $why (apt-get install python3-sklearn python3-xgboost); anneal runs alone"
  PEERS=0
fi
if ! command -v zstd > /dev/null; then
  line "tabular: peers skipped, zstd is missing (they read the split decompressed; anneal reads .zst itself)"
  PEERS=0
fi

selected=$(printf '%s\n' "$ALL_TABLES" | sed '/^$/d')
if [ -n "${TABLES:-}" ]; then
  picked=""
  for t in $TABLES; do
    row=$(printf '%s\n' "$ALL_TABLES" | awk -v t="$t" '$1 == t')
    if [ -z "$row" ]; then
      line "tabular: no table '$t' (tables: $(printf '%s\n' "$ALL_TABLES" | awk 'NF { printf "%s ", $1 }'))"
      continue
    fi
    picked="$picked$row"$'\n'
  done
  selected=$(printf '%s' "$picked")
fi

names=()
for c in "${CANDIDATES[@]}"; do names+=("${c%%|*}"); done
report() { "$PYTHON" "$HERE/tabular_report.py" "$@"; }

now() { printf '%s' "$EPOCHREALTIME"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
# first_error FILE: anneal's error line from a command's stderr (else its last line).
first_error() { { grep -m1 '^anneal: ' "$1" || tail -n 1 "$1"; } | cut -c1-300; }

# run_anneal DIR NAME LABEL TASK: imports the table into a throwaway store
# and trains, then scores on the test split, each candidate. Leaves in DIR
# import.{json,err,seconds}, and per candidate C: C.ini, C.train.json,
# C.eval.json, C.err, C.seconds (train and eval); C.failed when it failed.
run_anneal() {
  local dir=$1 name=$2 label=$3 task=$4 store=$1/store t0 t1 out c cname
  "$ANNEAL" --store "$store" init > /dev/null 2> "$dir/import.err" || { echo "init failed" > "$dir/import.failed"; return; }
  # A classification label is declared categorical: Glass's class codes are
  # integers (anneal would read them as classes anyway), and a categorical
  # label's classes are listed by `data show`, which gives the output width.
  local as_classes=()
  [ "$task" = classification ] && as_classes=(--categorical "$label")
  t0=$(now)
  if ! "$ANNEAL" --store "$store" --json data import "$name" "$DATA/$name.train.csv.zst" \
      --test "$DATA/$name.test.csv.zst" --label "$label" "${as_classes[@]}" > "$dir/import.json" 2> "$dir/import.err"; then
    echo "import failed" > "$dir/import.failed"
    return
  fi
  t1=$(now)
  elapsed "$t0" "$t1" > "$dir/import.seconds"
  # The output width: the label's classes as the import counted them.
  if [ "$task" = regression ]; then
    out=1
  elif ! out=$("$ANNEAL" --store "$store" --json data show "$name" 2>> "$dir/import.err" |
               "$PYTHON" "$HERE/tabular_report.py" classes "$label" 2>> "$dir/import.err"); then
    echo "data show gave no class count" > "$dir/import.failed"
    return
  fi
  for c in "${CANDIDATES[@]}"; do
    cname=${c%%|*}
    {
      printf 'name = %s-%s\ndataset = %s\nthreads = %s\n' "$name" "$cname" "$name" "$THREADS"
      [ "$task" = regression ] && printf 'loss = mse\n'
      printf '%s\n' "${c#*|}" | tr ';' '\n' | sed "s/@OUT@/$out/g; s/^ *//"
    } > "$dir/$cname.ini"
    t0=$(now)
    if "$ANNEAL" --store "$store" --json train "$dir/$cname.ini" > "$dir/$cname.train.json" 2> "$dir/$cname.err" &&
       "$ANNEAL" --store "$store" --json eval "$name-$cname" "$name" --split test \
         > "$dir/$cname.eval.json" 2>> "$dir/$cname.err"; then
      t1=$(now)
      elapsed "$t0" "$t1" > "$dir/$cname.seconds"
    else
      first_error "$dir/$cname.err" > "$dir/$cname.failed"
    fi
  done
}

# run_peers DIR NAME LABEL TASK: the peers on the same split, into DIR/peers.json.
run_peers() {
  local dir=$1 name=$2 label=$3 task=$4
  if [ "$PEERS" != 1 ]; then
    echo "not run (see above)" > "$dir/peers.failed"
    return
  fi
  if ! { zstd -dc "$DATA/$name.train.csv.zst" > "$dir/train.csv" && zstd -dc "$DATA/$name.test.csv.zst" > "$dir/test.csv"; } 2> "$dir/peers.err" ||
     ! "$PYTHON" "$HERE/tabular_peers.py" "$dir/train.csv" "$dir/test.csv" "$label" "$task" --threads "$THREADS" \
       > "$dir/peers.json" 2>> "$dir/peers.err"; then
    tail -n 1 "$dir/peers.err" | cut -c1-300 > "$dir/peers.failed"
  fi
}

bench_t0=$(now)
line "== tabular: $(printf '%s\n' "$selected" | awk 'NF' | wc -l) table(s) $TITLE; all on $THREADS threads"
report header --anchors "$DATA/anchors.json" -- "${names[@]}"
: > "$WORK/results.jsonl"
while read -r name label task; do
  [ -n "$name" ] || continue
  dir="$WORK/$name"
  mkdir -p "$dir"
  if [ ! -f "$DATA/$name.train.csv.zst" ] || [ ! -f "$DATA/$name.test.csv.zst" ]; then
    line "$name: skipped, $DATA/$name.{train,test}.csv.zst missing"
    continue
  fi
  run_peers "$dir" "$name" "$label" "$task"
  run_anneal "$dir" "$name" "$label" "$task"
  report row --anchors "$DATA/anchors.json" --dir "$dir" --table "$name" --task "$task" \
    --results "$WORK/results.jsonl" -- "${names[@]}" || line "$name: the report of this table failed"
  rm -rf "$dir/store" "$dir/train.csv" "$dir/test.csv"
done <<< "$selected"
report summary --results "$WORK/results.jsonl" --seconds "$(elapsed "$bench_t0" "$(now)")" ||
  line "tabular: the summary failed"
exit 0
