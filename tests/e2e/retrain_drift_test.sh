#!/bin/bash
# retrain --max-drift (issue 33): nights of an orders export, each retrained
# with `--promote production --max-drift`. The first night sets production
# (nothing to check against yet); each faulty night after it (a price in
# cents, an exploding region, an emptied quantity, a flipped label balance)
# trains a model but is refused promotion (exit 4): production stays, the
# one line names the column and the check, --json holds the report, the
# retrain record keeps it and `anneal metrics` exports every value (checked
# by promtool where installed). A clean night then promotes (exit 0) and its
# checks pass. Flags without their companions are one-line usage errors.
. "$E2E_LIB"
PY=${PYTHON:-/usr/bin/python3}

"$PY" - "$WORK" <<'PY'
import csv, random, sys
work = sys.argv[1]
def night(name, seed, fault=None):
    rng = random.Random(seed)
    with open(f"{work}/{name}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["region", "channel", "quantity", "unit_price", "returned"])
        for i in range(1500):
            region = rng.choice(["north", "south", "east", "west"])
            channel = rng.choice(["web", "shop", "phone"])
            quantity = rng.randint(1, 9)
            price = round(rng.lognormvariate(3, 0.6), 2)
            returned = "yes" if rng.random() < 0.1 + 0.2 * (channel == "web") + 0.01 * quantity else "no"
            if fault == "cents": price = round(price * 100, 2)
            if fault == "explode" and rng.random() < 0.7: region = "north"
            if fault == "empty" and rng.random() < 0.6: quantity = ""
            if fault == "flip": returned = "no" if returned == "yes" else "yes"
            w.writerow([region, channel, quantity, price, returned])
night("night1", 1)
for i, fault in enumerate(["cents", "explode", "empty", "flip"]):
    night(fault, 10 + i, fault)
night("night6", 6)
night("cents2", 20, "cents")
PY
cat >"$WORK/orders.ini" <<'INI'
name = orders
dataset = orders
layers = trees
tree_rounds = 30
validation = 0.1
seed = 1
threads = 1
INI
expect_rc 0 init
expect_rc 0 data import orders "$WORK/night1.csv" --label returned

# Companion flags.
expect_rc 2 retrain "$WORK/orders.ini" --max-drift
expect_contains "$ERR" "--max-drift: give --promote ALIAS too" "--max-drift needs --promote"
expect_rc 2 retrain "$WORK/orders.ini" --promote production --max-psi 0.1
expect_contains "$ERR" "give --max-drift too" "a threshold without --max-drift"

# Night 1: production is not set yet, nothing to check against: promoted.
expect_rc 0 --json retrain "$WORK/orders.ini" --promote production --max-drift
expect_eq "$(json_get 'j["outcome"]')" "promoted" "the first night promotes"
expect_eq "$(json_get 'j["data_checks"]')" "None" "nothing to check against on the first night"
expect_contains "$ERR" "orders@production is not set yet; nothing to check against" "a note says so"
production=$(json_get 'j["model"]')

# The faulty nights: trained, refused, production stays.
fault_night() {  # FILE COLUMN CHECK
  expect_rc 4 --json retrain "$WORK/orders.ini" --data "$WORK/$1.csv" --promote production --max-drift
  expect_eq "$(json_get 'j["outcome"]')" "refused" "$1: refused"
  expect_contains "$(json_get 'j["reason"]')" "$2: $3" "$1: the reason names $2 and $3"
  expect_contains "$(json_get 'j["reason"]')" "orders@production stays" "$1: and that production stays"
  expect_eq "$(json_get 'j["data_checks"]["passed"]')" "False" "$1: the report says failed"
  expect_eq "$(json_get '[c["column"] for c in j["data_checks"]["columns"] if c["failures"]]')" "['$2']" "$1: only $2 fails"
  expect_eq "$(json_get 'j["data_checks"]["reference"]')" "orders@v1" "$1: against what production trained on"
  expect_rc 0 --json model show orders@production
  expect_eq "$(json_get 'j["name"] + "@v" + str(j["version"])')" "$production" "$1: production stays"
}
fault_night cents unit_price psi
fault_night explode region psi
fault_night empty quantity "missing 0."
fault_night flip returned psi

# The text form: one line with the refusal; the night's report shows the
# checks (the failed column marked) and that the gate was not judged.
mkdir -p "$WORK/reports"
expect_rc 4 retrain "$WORK/orders.ini" --data "$WORK/cents2.csv" --promote production --max-drift \
  --report-dir "$WORK/reports"
expect_contains "$OUT" "not promoted: data checks against orders@v1 failed: unit_price: psi" "one line names it"
refused_model=$(printf '%s\n' "$OUT" | awk '/^trained/ {sub(/;$/, "", $2); print $2; exit}')
page="$WORK/reports/${refused_model/@v/-v}.html"
html=$(cat "$page" 2>/dev/null)
expect_contains "$html" '<section id="retrain">' "the refused night's report has a retrain section ($page)"
expect_contains "$html" "<h2>Retrain: refused</h2>" "it says the night was refused"
expect_contains "$html" "data checks against orders@v1 failed: unit_price: psi" "with the reason"
expect_contains "$html" "<strong>unit_price</strong>" "the failed column is marked"
expect_contains "$html" "against orders@v1" "against the version production trained on"
expect_contains "$html" "Not judged: the data checks failed" "the gate was not judged"
expect_eq "$(printf '%s' "$html" | grep -c '<strong>region</strong>')" "0" "a column that passed is not marked"

# Metrics: each check's value of the last retrain, and the failures.
expect_rc 0 metrics
expect_contains "$OUT" 'anneal_data_check_value{config="orders",dataset="orders@v' "the values are exported"
expect_contains "$OUT" 'column="unit_price",check="psi"}' "unit_price's psi among them"
failures=$(printf '%s\n' "$OUT" | awk '/^anneal_data_check_failures/ {print $NF}')
expect_eq "$([ "${failures:-0}" -ge 1 ] && echo yes)" "yes" "the failures are counted: $failures"
if command -v promtool >/dev/null; then
  printf '%s\n' "$OUT" | promtool check metrics >/dev/null 2>"$WORK/promtool.err" && pass ||
    fail "promtool rejects the metrics: $(cat "$WORK/promtool.err")"
fi

# A clean night: checks pass, the gate compares both models on the same
# rows, promoted; the report shows the checks beside both scores.
expect_rc 0 --json retrain "$WORK/orders.ini" --data "$WORK/night6.csv" --promote production --max-drift \
  --gate 'accuracy >= production' --report-dir "$WORK/reports"
expect_eq "$(json_get 'j["outcome"]')" "promoted" "a clean night promotes"
expect_eq "$(json_get 'j["data_checks"]["passed"]')" "True" "its checks pass"
candidate=$(json_get 'round(j["gate"]["candidate"], 4)')
html=$(cat "$(json_get 'j["report"]')" 2>/dev/null)
expect_contains "$html" "<h2>Retrain: promoted</h2>" "the clean night's report says promoted"
expect_contains "$html" "passed</strong>. Thresholds: PSI 0.2" "its checks passed, with the thresholds"
expect_contains "$html" "accuracy of production orders@v1" "the gate's incumbent score is shown"
expect_contains "$html" "verdict</th><td>passed: accuracy" "and the verdict"
expect_eq "$(printf '%s' "$html" | grep -c '<strong>unit_price</strong>')" "0" "nothing is marked failed"
expect_rc 0 metrics
expect_contains "$OUT" 'anneal_data_check_failures{config="orders",dataset="orders@v' "the last checks are exported"
failures=$(printf '%s\n' "$OUT" | awk '/^anneal_data_check_failures/ {print $NF}')
expect_eq "$failures" "0" "no failures after the clean night"
finish
