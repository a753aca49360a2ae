#!/bin/bash
# Nightly retraining of a growing export, judged fairly: tests/data/digits.csv
# shuffled once (fixed seed) and exported night by night as its first 60%,
# 80% and 100% of rows. Each night `retrain --promote production --gate
# 'val_accuracy >= production'` scores the new model and the one holding
# production on the same held-out rows; every decision is checked against
# scores computed directly with `anneal eval` on exactly those rows (the
# test split of the night's version, less the rows either model trained on,
# which the test finds itself from the exported streams). A night of garbage
# exits 65 leaving the alias and the store as they were; a night whose
# export lost a feature column refuses in one line naming the rule. Then
# `model promote --gate --on DATA` judges on a version the user names, and
# the gate's hostile input (unknown metric, --on without a gate, a missing
# version) fails in one line.
source "$E2E_LIB"

cat > "$WORK/digits.ini" <<'EOF'
name = digits-mlp
dataset = digits
layers = dense(32) relu dense(10)
loss = softmax_ce
optimizer = adam
lr = 0.01
batch = 32
epochs = 6
seed = 1
threads = 1
validation = 0.1
EOF

# The nights: the data rows shuffled once, the header kept.
python3 - "$TEST_DATA/digits.csv" "$WORK" <<'PY'
import random, sys
lines = open(sys.argv[1]).read().splitlines()
header, rows = lines[0], lines[1:]
random.Random(14).shuffle(rows)
for night, fraction in ((1, 0.6), (2, 0.8), (3, 1.0)):
    with open(f"{sys.argv[2]}/night{night}.csv", "w") as f:
        f.write("\n".join([header] + rows[:round(fraction * len(rows))]) + "\n")
# The export after someone dropped a column: all rows, pixel_0_3 gone.
names = header.split(",")
drop = names.index("pixel_0_3")
with open(f"{sys.argv[2]}/dropped.csv", "w") as f:
    for line in [header] + rows:
        cells = line.split(",")
        f.write(",".join(cells[:drop] + cells[drop + 1:]) + "\n")
PY

alias_holder() { "$ANNEAL" --json model show "digits-mlp@production" | python3 -c "import json,sys; print(json.load(sys.stdin)['version'])"; }

# gate_rows_dataset GATE_JSON NAME: the rows the gate says it scored,
# found independently: the test rows of its `on` version whose content
# (every feature and the label) is not a train row of either model's
# training version, read from `data export` streams. Imports them, in their
# order, as dataset NAME (no test split) and prints how many were left out.
gate_rows_dataset() {
  local gate=$1 name=$2 v
  for v in $(printf '%s' "$gate" | python3 -c "
import json, sys
g = json.load(sys.stdin)
print(g['on'])
for m in (g['candidate_model'], g['incumbent_model']):
    print(m)"); do
    case "$v" in
      digits-mlp@*) v=$("$ANNEAL" --json model show "$v" | python3 -c "import json,sys; print(json.load(sys.stdin)['lineage']['dataset'])") ;;
    esac
    for part in features labels split; do
      [ -e "$WORK/$v.$part" ] || "$ANNEAL" data export "$v" --part "$part" -o "$WORK/$v.$part" > /dev/null || return 1
    done
    printf '%s\n' "$v"
  done > "$WORK/versions"
  "$ANNEAL" --json data show "$(printf '%s' "$gate" | python3 -c "import json,sys; print(json.load(sys.stdin)['on'])")" \
    > "$WORK/on.json" || return 1
  python3 - "$WORK" "$gate" <<'PY' || return 1
import array, json, sys
work, gate = sys.argv[1], json.loads(sys.argv[2])
# The streams hold the feature columns in source order, the label apart.
on_schema = json.load(open(f"{work}/on.json"))
label = on_schema["label_column"]
header = ",".join([c["name"] for c in on_schema["columns"] if c["name"] != label] + [label])
versions = open(f"{work}/versions").read().split()
def rows(version):
    f = array.array("f"); f.frombytes(open(f"{work}/{version}.features", "rb").read())
    y = array.array("f"); y.frombytes(open(f"{work}/{version}.labels", "rb").read())
    split = open(f"{work}/{version}.split", "rb").read()
    width = len(f) // len(y)
    return [(tuple(f[i * width:(i + 1) * width]) + (y[i],), split[i]) for i in range(len(y))]
on = rows(versions[0])
trained = set()
for v in versions[1:]:
    trained |= {r for r, s in rows(v) if s == 0}
test = [r for r, s in on if s == 1]
kept = [r for r in test if r not in trained]
def cell(x):
    return str(int(x)) if x == int(x) else repr(x)
with open(f"{work}/gate_rows.csv", "w") as out:
    out.write(header + "\n")
    for r in kept:
        out.write(",".join(cell(x) for x in r) + "\n")
print(len(test) - len(kept))
PY
}

# check_gate LABEL: the gate object of the JSON in $OUT (retrain or model
# promote) against eval on the same rows.
check_gate() {
  local label=$1 gate cand inc excluded got rows_name
  rows_name=$(printf '%s' "$1" | tr ' ' '-')-rows
  gate=$(json_get "json.dumps(j['gate'])")
  cand=$(json_get "j['gate']['candidate_model']")
  inc=$(json_get "j['gate']['incumbent_model']")
  expect_eq "$(json_get "j['gate']['metric']")" "accuracy" "$label: val_accuracy compares accuracy"
  expect_eq "$(json_get "j['gate']['rows'] + j['gate']['excluded_rows'] == j['gate']['test_rows']")" "True" \
    "$label: rows + excluded = the test split"
  excluded=$(gate_rows_dataset "$gate" "$rows_name") || { fail "$label: finding the gate's rows failed"; return; }
  expect_eq "$excluded" "$(json_get "j['gate']['excluded_rows']")" "$label: the rows left out are those either model trained on"
  local saved=$OUT evals=""
  if [ "$excluded" = 0 ]; then
    # Every test row: eval on the version's test split is the reference.
    for m in "$cand" "$inc"; do
      run --json eval "$m" "$(printf '%s' "$saved" | python3 -c "import json,sys; print(json.load(sys.stdin)['gate']['on'])")" --split test
      [ "$RC" -eq 0 ] || fail "$label: eval $m failed: $ERR"
      evals="$evals $(json_get "repr(j['metrics']['accuracy'])") $(json_get "j['metrics']['rows']")"
    done
  else
    # Exactly the rows kept, imported as their own dataset.
    expect_rc 0 data import "$rows_name" "$WORK/gate_rows.csv" --split 0
    for m in "$cand" "$inc"; do
      run --json eval "$m" "$rows_name" --split all
      [ "$RC" -eq 0 ] || fail "$label: eval $m failed: $ERR"
      evals="$evals $(json_get "repr(j['metrics']['accuracy'])") $(json_get "j['metrics']['rows']")"
    done
  fi
  OUT=$saved
  got=$(json_get "'%r %d %r %d' % (j['gate']['candidate'], j['gate']['rows'], j['gate']['incumbent'], j['gate']['rows'])")
  expect_eq "$got" "${evals# }" "$label: the gate's scores and rows are eval's on the same rows"
  expect_eq "$(json_get "j['gate']['passed'] == (j['gate']['candidate'] >= j['gate']['incumbent'])")" "True" \
    "$label: passed is candidate >= incumbent"
  expect_eq "$(json_get "j['promoted'] == j['gate']['passed']")" "True" "$label: promoted as the gate decided"
  echo "$label: $cand $(json_get "j['gate']['candidate']") vs $inc $(json_get "j['gate']['incumbent']") on $(json_get "j['gate']['rows']") rows of $(json_get "j['gate']['on']") ($excluded left out): $(json_get "'promoted' if j['promoted'] else 'refused'")"
}

expect_rc 0 init

# --- night 1: nothing to beat ---------------------------------------------
expect_rc 0 --json retrain "$WORK/digits.ini" --data "$WORK/night1.csv" --promote production \
  --gate 'val_accuracy >= production'
expect_eq "$(json_get "j['outcome']")" "promoted" "night 1 promotes"
expect_contains "$(json_get "j['gate']['reason']")" "nothing to beat" "night 1: an unset alias is beaten by anything"
expect_eq "$(json_get "'incumbent' in j['gate']")" "False" "night 1: no incumbent was scored"
expect_eq "$(alias_holder)" "1" "production -> v1"

# --- nights 2 and 3: the data grows ----------------------------------------
for night in 2 3; do
  label="night $night"
  before=$(alias_holder)
  run --json retrain "$WORK/digits.ini" --data "$WORK/night$night.csv" --promote production \
    --gate 'val_accuracy >= production'
  case "$RC" in 0 | 4) pass ;; *) fail "$label: retrain exited $RC: $ERR" ;; esac
  expect_eq "$(json_get "j['exit_code']")" "$RC" "$label: exit code in the JSON"
  expect_eq "$(json_get "j['gate']['incumbent_model']")" "digits-mlp@v$before" "$label: the incumbent is production's holder"
  expect_eq "$(json_get "j['outcome']")" "$([ "$RC" = 0 ] && echo promoted || echo refused)" "$label: outcome matches the exit code"
  if [ "$(json_get "j['promoted']")" = True ]; then
    expect_eq "$(alias_holder)" "$night" "$label: production -> the new model"
  else
    expect_eq "$(alias_holder)" "$before" "$label: production stays"
  fi
  check_gate "night $night"
done

# The alias history and the metrics carry the last decision.
night3_gate=$(json_get "json.dumps(j['gate'])")
run --json model alias history digits-mlp
expect_eq "$(json_get "j['history'][0]['gate']['passed']")" "True" "history: the first move records its gate"
last_move=$(json_get "j['history'][-1]['gate']['incumbent'] is not None or len(j['history']) == 1")
expect_eq "$last_move" "True" "history: a move allowed against a holder records both scores"
run metrics
expect_contains "$OUT" 'anneal_gate_candidate_score{config="digits-mlp",alias="production",metric="accuracy"}' "metrics: the candidate's score"
expect_contains "$OUT" 'anneal_gate_incumbent_score{config="digits-mlp",alias="production",metric="accuracy"}' "metrics: the incumbent's score"
expect_contains "$OUT" 'anneal_gate_rows{config="digits-mlp",alias="production",metric="accuracy"}' "metrics: the rows"
printf '%s\n' "$OUT" > "$WORK/metrics.prom"
got=$(python3 - "$WORK/metrics.prom" "$night3_gate" <<'PY'
import json, sys
gate = json.loads(sys.argv[2])
values = {}
for line in open(sys.argv[1]):
    if line.startswith("anneal_gate_"):
        name, value = line.split("{")[0], float(line.rsplit(" ", 1)[1])
        values[name] = value
print(values["anneal_gate_candidate_score"] == gate["candidate"],
      values["anneal_gate_incumbent_score"] == gate["incumbent"],
      values["anneal_gate_rows"] == gate["rows"], values["anneal_gate_excluded_rows"] == gate["excluded_rows"],
      values["anneal_gate_passed"] == (1 if gate["passed"] else 0))
PY
)
expect_eq "$got" "True True True True True" "metrics: the last gated retrain's numbers, as its JSON gave them"
if command -v promtool > /dev/null; then
  if promtool check metrics < "$WORK/metrics.prom" > "$WORK/promtool.out" 2>&1; then pass
  else fail "promtool check metrics: $(cat "$WORK/promtool.out")"; fi
else
  fail "promtool is missing (packaging/install-deps installs prometheus)"
fi

# --- a night of garbage: exit 65, the alias and the store as they were -------
holder=$(alias_holder)
catalog() { python3 - "$ANNEAL_HOME/catalog.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for table in ("datasets", "dataset_versions", "runs", "models", "model_aliases", "alias_history", "retrains"):
    for row in db.execute(f"SELECT * FROM {table} ORDER BY 1"):
        print(table, row)
PY
}
state_before=$( (catalog; cd "$ANNEAL_HOME" && find objects -type f | sort) | sha256sum)
{ head -n 1 "$WORK/night3.csv"; printf '0,0,5\n\x01\x02,not,a,row\n0,0,0,12,13\n'; } > "$WORK/garbage.csv"
expect_rc 65 retrain "$WORK/digits.ini" --data "$WORK/garbage.csv" --promote production --gate 'val_accuracy >= production'
expect_eq "$(printf '%s\n' "$ERR" | grep -c '^anneal: ')" "1" "garbage: one error line"
expect_contains "$ERR" "garbage.csv:2:" "garbage: the error names the file and line"
expect_eq "$(alias_holder)" "$holder" "garbage: production stays"
state_after=$( (catalog; cd "$ANNEAL_HOME" && find objects -type f | sort) | sha256sum)
expect_eq "$state_after" "$state_before" "garbage: the store is exactly as it was"

# --- a night whose export lost a column: the gate refuses by its rule -------
expect_rc 4 --json retrain "$WORK/digits.ini" --data "$WORK/dropped.csv" --promote production \
  --gate 'val_accuracy >= production'
expect_eq "$(json_get "j['outcome']")" "refused" "dropped column: refused"
expect_eq "$(json_get "j['gate']['passed']")" "False" "dropped column: the gate did not pass"
expect_eq "$(json_get "j['gate']['incumbent']")" "None" "dropped column: the incumbent has no score"
reason=$(json_get "j['gate']['reason']")
expect_eq "$(printf '%s\n' "$reason" | wc -l)" "1" "dropped column: one line"
expect_contains "$reason" "missing column 'pixel_0_3'" "dropped column: names the column"
expect_contains "$reason" "production stays on digits-mlp@v$holder" "dropped column: production stays"
expect_contains "$reason" "anneal model promote digits-mlp@v" "dropped column: names the remedy"
expect_contains "$reason" "(no --gate)" "dropped column: promote without the gate"
expect_eq "$(alias_holder)" "$holder" "dropped column: production stays"
dropped_model=$(json_get "j['model']")
expect_rc 4 retrain "$WORK/digits.ini" --promote production --gate 'val_accuracy >= production'
expect_contains "$OUT" "cannot be scored" "dropped column: the plain output says why"

# --- model promote --gate --on -----------------------------------------------
# A new model promoted to staging by hand, judged on a version the user names.
expect_rc 0 model promote digits-mlp@v1 --to staging
run --json model promote digits-mlp@v2 --to staging --gate 'test_accuracy >= staging' --on digits@v3
promoted=$(json_get "j['promoted']")
expect_eq "$RC" "$([ "$promoted" = True ] && echo 0 || echo 4)" "--on: exit 0 when promoted, 4 when refused"
expect_eq "$(json_get "j['promoted'] == (j['gate']['candidate'] >= j['gate']['incumbent'])")" "True" \
  "--on: promoted is candidate >= incumbent"
expect_eq "$(json_get "j['gate']['on']")" "digits@v3" "--on: judged on the version named"
expect_eq "$(json_get "j['gate']['incumbent_model']")" "digits-mlp@v1" "--on: the staging holder is the incumbent"
check_promote() {
  local gate excluded saved=$OUT evals=""
  gate=$(json_get "json.dumps(j['gate'])")
  excluded=$(gate_rows_dataset "$gate" "$1") || { fail "$1: finding the gate's rows failed"; return; }
  expect_eq "$excluded" "$(json_get "j['gate']['excluded_rows']")" "$1: the rows left out"
  expect_rc 0 data import "$1" "$WORK/gate_rows.csv" --split 0
  for m in digits-mlp@v2 digits-mlp@v1; do
    run --json eval "$m" "$1" --split all
    evals="$evals $(json_get "repr(j['metrics']['accuracy'])")"
  done
  OUT=$saved
  expect_eq "$(json_get "'%r %r' % (j['gate']['candidate'], j['gate']['incumbent'])")" "${evals# }" "$1: eval's scores on the same rows"
}
check_promote promote-on-rows
# Without --on: the candidate's own training version.
expect_rc 0 model promote digits-mlp@v1 --to staging
run --json model promote digits-mlp@v2 --to staging --gate 'macro_f1 >= staging'
expect_eq "$(json_get "j['gate']['on']")" "digits@v2" "without --on: the candidate's training version"
expect_eq "$(json_get "j['gate']['metric']")" "macro_f1" "macro_f1 compares macro_f1"

# A model that cannot be scored there: the dropped-column version's model on
# the full version is fine, the old holder on the dropped version is not.
expect_rc 0 model promote digits-mlp@v1 --to staging
expect_rc 4 --json model promote "$dropped_model" --to staging --gate 'accuracy >= staging'
expect_contains "$(json_get "j['gate']['reason']")" "staging stays on digits-mlp@v1" "promote: the unscorable incumbent keeps the alias"
run --json model show digits-mlp@staging
expect_eq "$(json_get "j['version']")" "1" "promote: staging stays"

# Two models of the same version (the dropped-column nights): nothing
# either trained on is in its test split, so eval on the plain test split is
# the reference.
expect_rc 0 model alias set "$dropped_model" fresh
last=$("$ANNEAL" --json model show digits-mlp | python3 -c "import json,sys; print(json.load(sys.stdin)['version'])")
run --json model promote "digits-mlp@v$last" --to fresh --gate 'val_accuracy >= fresh'
case "$RC" in 0 | 4) pass ;; *) fail "same version: model promote exited $RC: $ERR" ;; esac
expect_eq "$(json_get "j['gate']['excluded_rows']")" "0" "same version: no row left out"
check_gate "same version"

# No row left: a version made of rows the incumbent trained on (its
# training version's train split) leaves nothing to judge on; the gate
# refuses by its rule.
holder=$(alias_holder)
holder_data=$("$ANNEAL" --json model show "digits-mlp@v$holder" | python3 -c "import json,sys; print(json.load(sys.stdin)['lineage']['dataset'])")
for part in features labels split; do
  [ -e "$WORK/$holder_data.$part" ] || "$ANNEAL" data export "$holder_data" --part "$part" -o "$WORK/$holder_data.$part" > /dev/null
done
python3 - "$WORK" "$holder_data" "$TEST_DATA/digits.csv" <<'PY'
import array, sys
work, version = sys.argv[1], sys.argv[2]
f = array.array("f"); f.frombytes(open(f"{work}/{version}.features", "rb").read())
y = array.array("f"); y.frombytes(open(f"{work}/{version}.labels", "rb").read())
split = open(f"{work}/{version}.split", "rb").read()
width = len(f) // len(y)
with open(f"{work}/seen.csv", "w") as out:
    out.write(open(sys.argv[3]).readline())
    for i in range(len(y)):
        if split[i] == 0:
            out.write(",".join(str(int(x)) for x in list(f[i * width:(i + 1) * width]) + [y[i]]) + "\n")
PY
# Another seed: with the import's own seed, a row's content puts every one of
# these rows on the train side again, as it did for the incumbent.
expect_rc 0 data import seen "$WORK/seen.csv" --seed 7
expect_rc 4 --json model promote digits-mlp@v2 --to production --gate 'accuracy >= production' --on seen
expect_eq "$(json_get "j['gate']['rows']")" "0" "no row left: nothing scored"
expect_eq "$(json_get "j['gate']['excluded_rows'] == j['gate']['test_rows'] > 0")" "True" "no row left: every test row trained on"
expect_contains "$(json_get "j['gate']['reason']")" "no row of seen@v1's test split is left" "no row left: says so"
expect_contains "$(json_get "j['gate']['reason']")" "production stays on digits-mlp@v$holder" "no row left: production stays"
expect_eq "$(alias_holder)" "$holder" "no row left: production stays"

# A known metric the models do not compute (ROC AUC of 10 classes) refuses
# by the rule, in one line, rather than failing as bad input.
holder=$(alias_holder)
expect_rc 4 --json model promote digits-mlp@v2 --to production --gate 'roc_auc >= production'
expect_contains "$(json_get "j['gate']['reason']")" "roc_auc is not computed for digits-mlp@v2" "an uncomputed metric refuses"
expect_eq "$(alias_holder)" "$holder" "an uncomputed metric: production stays"

# --- hostile gate input: one line each, nothing moves -------------------------
expect_rc 2 model promote digits-mlp@v2 --to staging --gate 'val_acuracy >= staging'
expect_contains "$ERR" "unknown metric 'acuracy'" "an unknown metric is named"
expect_contains "$ERR" "did you mean 'accuracy'" "and the closest known one suggested"
expect_contains "$ERR" "macro_f1" "and the known ones listed"
expect_rc 2 model promote digits-mlp@v2 --to staging --on digits@v3
expect_contains "$ERR" "--on" "--on without --gate names --on"
expect_rc 2 model promote digits-mlp@v2 --to staging --gate 'test_accuracy > 0.5' --on digits@v3
expect_contains "$ERR" "--on" "--on with a constant gate names --on"
expect_rc 2 model promote digits-mlp@v2 --to staging --gate 'accuracy >= staging' --on 'digits@vx'
expect_contains "$ERR" "--on" "a malformed --on is named"
run model promote digits-mlp@v2 --to staging --gate 'accuracy >= staging' --on digits@v99
[ "$RC" -ne 0 ] && [ "$RC" -ne 4 ] && pass || fail "--on a missing version exited $RC"
expect_contains "$ERR" "v99" "a missing --on version is named"
expect_eq "$(printf '%s\n' "$ERR" | grep -c '^anneal: ')" "1" "in one line"
expect_rc 2 retrain "$WORK/digits.ini" --promote production --gate 'loss >= production'
expect_contains "$ERR" "unknown metric 'loss'" "retrain: an unknown metric fails before training"
run --json model show digits-mlp@staging
expect_eq "$(json_get "j['version']")" "1" "staging did not move"

echo "$CHECKS checks, $FAILURES failures"
[ "$FAILURES" -eq 0 ]
